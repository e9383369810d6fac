//! Users through the generated client and raw HTTP, against a live server.

use agent_platform_tests::{TestServer, status_of, types};
use serde_json::json;

async fn create_user(s: &TestServer, name: &str) -> types::User {
    s.client
        .user_create()
        .body(
            types::CreateUserRequest::builder()
                .name(Some(name.parse().unwrap()))
                .about("about")
                .metadata(meta(json!({"lang": "en"}))),
        )
        .send()
        .await
        .unwrap()
        .into_inner()
}

fn meta(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().unwrap().clone()
}

#[tokio::test]
async fn user_routes_happy_path() {
    let s = TestServer::start().await;
    let created = create_user(&s, "Ada Lovelace").await;
    assert_eq!(created.name, "Ada Lovelace");
    assert_eq!(created.about, "about");
    assert_eq!(created.project, None);
    assert_eq!(created.created_at, created.updated_at);

    let got = s.client.user_get().user_id(created.id).send().await.unwrap().into_inner();
    assert_eq!(got, created);

    let list = s.client.user_list().send().await.unwrap().into_inner();
    assert_eq!(list.items, vec![created.clone()]);

    let put = s
        .client
        .user_update()
        .user_id(created.id)
        .body(
            types::UpdateUserRequest::builder()
                .name(Some("Ada".parse().unwrap()))
                .project(Some("p1".parse().unwrap())),
        )
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.name, "Ada");
    assert_eq!(put.project.as_deref(), Some("p1"));
    assert!(put.updated_at > created.updated_at);
    assert_eq!(put.created_at, created.created_at);

    s.client.user_delete().user_id(created.id).send().await.unwrap();
    assert_eq!(status_of(s.client.user_get().user_id(created.id).send().await), 404);
    assert_eq!(
        status_of(s.client.user_delete().user_id(created.id).send().await),
        404,
        "a second delete is a 404"
    );
    s.stop().await;
}

#[tokio::test]
async fn put_user_overwrites_omitted_fields_with_defaults() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let put =
        s.client.user_update().user_id(u.id).body(types::UpdateUserRequest::builder()).send().await.unwrap();
    assert_eq!(put.name, "");
    assert_eq!(put.about, "");
    assert_eq!(put.metadata, None);
    s.stop().await;
}

#[tokio::test]
async fn patch_user_changes_only_sent_fields_and_merges_metadata() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let r = s.raw("PATCH", &format!("/api/users/{}", u.id), Some(r#"{"metadata": {"tier": "gold"}}"#)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["name"], "Ada");
    assert_eq!(r.body["about"], "about");
    assert_eq!(r.body["metadata"], json!({"lang": "en", "tier": "gold"}));
    let r = s
        .raw("PATCH", &format!("/api/users/{}", u.id), Some(r#"{"metadata": {"lang": "fr"}, "about": "x"}"#))
        .await;
    assert_eq!(r.body["metadata"], json!({"lang": "fr", "tier": "gold"}));
    assert_eq!(r.body["about"], "x");
    let r = s.raw("PATCH", &format!("/api/users/{}", u.id), Some(r#"{"metadata": null}"#)).await;
    assert_eq!(r.body["metadata"], json!(null));
    s.stop().await;
}

#[tokio::test]
async fn put_and_patch_of_a_missing_user_are_404_and_create_nothing() {
    let s = TestServer::start().await;
    let id = uuid::Uuid::now_v7();
    assert_eq!(s.raw("PUT", &format!("/api/users/{id}"), Some("{}")).await.status, 404);
    assert_eq!(s.raw("PATCH", &format!("/api/users/{id}"), Some("{}")).await.status, 404);
    assert!(s.client.user_list().send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn put_user_name_of_120_is_ok_and_121_is_422_naming_the_field() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let path = format!("/api/users/{}", u.id);
    let ok = s.raw("PUT", &path, Some(&json!({"name": "a".repeat(120)}).to_string())).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let bad = s.raw("PUT", &path, Some(&json!({"name": "a".repeat(121)}).to_string())).await;
    bad.assert_422(json!(["body", "name"]), "string_too_long");
    // The failed request changed nothing.
    assert_eq!(s.client.user_get().user_id(u.id).send().await.unwrap().name, "a".repeat(120));
    s.stop().await;
}

#[tokio::test]
async fn put_user_name_breaking_the_unicode_pattern_is_422() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let path = format!("/api/users/{}", u.id);
    for bad in ["1abc", "", "_x", "a\u{0}b"] {
        s.raw("PUT", &path, Some(&json!({ "name": bad }).to_string()))
            .await
            .assert_422(json!(["body", "name"]), "string_pattern_mismatch");
    }
    for good in ["Ada Lovelace", "Zoë", "名前", "O'Brien-Smith", "Ⅻ roman"] {
        let r = s.raw("PUT", &path, Some(&json!({ "name": good }).to_string())).await;
        assert_eq!(r.status, 200, "{good}: {}", r.body);
    }
    s.stop().await;
}

#[tokio::test]
async fn put_user_project_rules() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let path = format!("/api/users/{}", u.id);
    let put = |p: serde_json::Value| {
        let path = path.clone();
        let s = &s;
        async move { s.raw("PUT", &path, Some(&json!({ "project": p }).to_string())).await }
    };
    put(json!("")).await.assert_422(json!(["body", "project"]), "string_too_short");
    put(json!("a".repeat(256))).await.assert_422(json!(["body", "project"]), "string_too_long");
    put(json!("9abc")).await.assert_422(json!(["body", "project"]), "string_pattern_mismatch");
    assert_eq!(put(json!("a".repeat(255))).await.status, 200);
    assert_eq!(put(json!("my_project_2")).await.status, 200);
    assert_eq!(put(json!(null)).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn put_user_metadata_must_be_an_object_or_null() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let path = format!("/api/users/{}", u.id);
    for bad in [json!([]), json!("x"), json!(1)] {
        s.raw("PUT", &path, Some(&json!({ "metadata": bad }).to_string()))
            .await
            .assert_422(json!(["body", "metadata"]), "dict_type");
    }
    s.stop().await;
}

#[tokio::test]
async fn put_user_with_a_path_id_that_is_not_a_uuid_is_422_at_the_path() {
    let s = TestServer::start().await;
    s.raw("PUT", "/api/users/not-a-uuid", Some("{}"))
        .await
        .assert_422(json!(["path", "user_id"]), "uuid_parsing");
    s.stop().await;
}

#[tokio::test]
async fn malformed_json_is_422_json_invalid() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    s.raw("PUT", &format!("/api/users/{}", u.id), Some("{\"name\": "))
        .await
        .assert_422(json!(["body"]), "json_invalid");
    s.stop().await;
}

#[tokio::test]
async fn all_violations_of_one_request_are_listed() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let r = s
        .raw(
            "PUT",
            &format!("/api/users/{}", u.id),
            Some(r#"{"name": "1", "about": 3, "project": "", "metadata": []}"#),
        )
        .await;
    assert_eq!(r.status, 422);
    let mut locs = r.locs();
    locs.sort_by_key(|l| l.to_string());
    assert_eq!(
        locs,
        vec![
            json!(["body", "about"]),
            json!(["body", "metadata"]),
            json!(["body", "name"]),
            json!(["body", "project"])
        ]
    );
    s.stop().await;
}

#[tokio::test]
async fn missing_or_unknown_key_is_401_with_www_authenticate() {
    let s = TestServer::start().await;
    for auth in [None, Some("Bearer ap_nope"), Some("ap_nope"), Some("Bearer ")] {
        let r = s.raw_with("GET", "/api/users", None, auth).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        assert_eq!(r.body["code"], "unauthorized");
        assert_eq!(r.body["request_id"], r.headers["x-request-id"].to_str().unwrap());
    }
    // A bare key works as well as a Bearer one.
    assert_eq!(s.raw_with("GET", "/api/users", None, Some(&s.key.clone())).await.status, 200);
    // Health and the spec need no key.
    assert_eq!(
        s.raw_with("GET", "/api/healthz", None, None).await.body,
        json!({"status": "ok", "search": "ready"})
    );
    assert_eq!(s.raw_with("GET", "/api/openapi.json", None, None).await.body["info"]["version"], "0.4.0");
    s.stop().await;
}

#[tokio::test]
async fn another_tenants_user_is_404_everywhere() {
    let s = TestServer::start().await;
    let u = create_user(&s, "Ada").await;
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.user_get().user_id(u.id).send().await), 404);
    assert_eq!(
        status_of(other.user_update().user_id(u.id).body(types::UpdateUserRequest::builder()).send().await),
        404
    );
    assert_eq!(
        status_of(other.user_patch().user_id(u.id).body(types::PatchUserRequest::builder()).send().await),
        404
    );
    assert_eq!(status_of(other.user_delete().user_id(u.id).send().await), 404);
    assert!(other.user_list().send().await.unwrap().items.is_empty());
    // ...and the user is untouched.
    assert_eq!(s.client.user_get().user_id(u.id).send().await.unwrap().into_inner(), u);
    s.stop().await;
}

#[tokio::test]
async fn not_found_and_conflict_bodies_carry_code_and_request_id() {
    let s = TestServer::start().await;
    let r = s.raw("GET", &format!("/api/users/{}", uuid::Uuid::now_v7()), None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], "not_found");
    assert!(r.body["detail"].as_str().unwrap().contains("not found"));
    assert_eq!(r.body["request_id"], r.headers["x-request-id"].to_str().unwrap());
    s.stop().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let s = TestServer::start().await;
    let big = json!({ "about": "x".repeat(3 * 1024 * 1024) }).to_string();
    let r = s.raw("POST", "/api/users", Some(&big)).await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.body["code"], "payload_too_large");
    assert!(s.client.user_list().send().await.unwrap().items.is_empty());
    s.stop().await;
}
