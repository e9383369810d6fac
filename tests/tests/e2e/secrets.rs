//! Secrets (`GET|POST /api/secrets`, `PUT|DELETE /api/secrets/{name}`): per
//! tenant, encrypted at rest with the key in the variable `[secrets] key_env`
//! names, their values never answered.

use agent_platform::app::Tenant;
use agent_platform::store::Kind;
use agent_platform_tests::{Process, Raw, TestServer, status_of, types};
use serde_json::{Value, json};

/// The variable the servers' `secrets.key_env` names, and the key in it.
const KEY_ENV: &str = "E2E_SECRETS_KEY";
const KEY: &str = "6b6579206f662074686520656e642d746f2d656e642074657374732c20333262";

async fn server() -> TestServer {
    TestServer::with_config_env(|c| c.secrets.key_env = Some(KEY_ENV.into()), &[(KEY_ENV, KEY)]).await
}

async fn post(s: &TestServer, body: Value) -> Raw {
    s.raw("POST", "/api/secrets", Some(&body.to_string())).await
}

async fn tenant(s: &TestServer, key: &str) -> Tenant {
    s.app().authenticate(key).await.unwrap().expect("a known key")
}

/// Every record of `kind` in the store, as stored (JSON), in one string.
async fn stored(s: &TestServer, kind: Kind) -> String {
    let records = s.app().store.scan_kind(kind).await.unwrap();
    records.iter().map(|(_, r)| serde_json::to_string(r).unwrap()).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn created_secrets_are_listed_and_deleted_and_never_show_their_value() {
    let s = server().await;
    let value = "sk-live-0123456789-plaintext";
    let body = types::CreateSecretRequest::builder().name("API_TOKEN").value(value).description("the token");
    let created = s.client.secret_create().body(body).send().await.unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let created = created.into_inner();
    assert_eq!((created.name.as_str(), created.description.as_str()), ("API_TOKEN", "the token"));
    post(&s, json!({"name": "_other2", "value": "another value"})).await;

    let list = s.client.secret_list().send().await.unwrap().into_inner();
    let names: Vec<&str> = list.items.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["_other2", "API_TOKEN"], "newest first");
    let raw = s.raw("GET", "/api/secrets?direction=asc", None).await;
    assert_eq!(raw.status, 200, "{}", raw.body);
    let text = raw.body.to_string();
    assert!(!text.contains(value) && !text.contains("another value"), "a list never shows a value: {text}");
    for item in raw.body["items"].as_array().unwrap() {
        let fields: Vec<&String> = item.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["created_at", "description", "name", "updated_at"], "{item}");
    }
    let again = post(&s, json!({"name": "THIRD", "value": value})).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert!(!again.body.to_string().contains(value), "nor does a create: {}", again.body);

    assert_eq!(s.raw("DELETE", "/api/secrets/API_TOKEN", None).await.status, 204);
    let twice = s.raw("DELETE", "/api/secrets/API_TOKEN", None).await;
    assert_eq!(twice.status, 404, "{}", twice.body);
    assert_eq!(twice.body["detail"], "secret 'API_TOKEN' not found");
    let list = s.client.secret_list().send().await.unwrap().into_inner();
    assert_eq!(list.items.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["THIRD", "_other2"]);
    s.stop().await;
}

#[tokio::test]
async fn a_taken_name_is_409_and_put_replaces_the_value_of_an_existing_secret_only() {
    let s = server().await;
    let t = tenant(&s, &s.key).await;
    let first = post(&s, json!({"name": "TOKEN", "value": "one", "description": "d"})).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let taken = post(&s, json!({"name": "TOKEN", "value": "two"})).await;
    assert_eq!((taken.status, &taken.body["code"]), (409, &json!("conflict")), "{}", taken.body);
    assert!(taken.body["detail"].as_str().unwrap().contains("PUT /api/secrets/TOKEN"), "{}", taken.body);
    assert_eq!(s.app().secret_value(t, "TOKEN").await.unwrap(), "one", "a 409 changed nothing");

    let body = types::UpdateSecretRequest::builder().value("rotated");
    let replaced = s.client.secret_update().name("TOKEN").body(body).send().await.unwrap().into_inner();
    assert_eq!(replaced.description, "", "PUT overwrites: an omitted description is empty");
    assert!(replaced.updated_at > replaced.created_at);
    assert_eq!(s.app().secret_value(t, "TOKEN").await.unwrap(), "rotated");
    let resolved = s.app().resolve_secrets(t, "Bearer {{ secrets.TOKEN }}").await.unwrap();
    assert_eq!(resolved, "Bearer rotated");

    let missing = s.raw("PUT", "/api/secrets/NEVER_MADE", Some(r#"{"value": "x"}"#)).await;
    assert_eq!(missing.status, 404, "PUT never creates: {}", missing.body);
    assert_eq!(missing.body["detail"], "secret 'NEVER_MADE' not found");
    s.stop().await;
}

#[tokio::test]
async fn bounds_are_422_naming_the_field() {
    let s = server().await;
    let ok = |name: &str, value: &str| json!({"name": name, "value": value});
    post(&s, ok(&"N".repeat(65), "v")).await.assert_422(json!(["body", "name"]), "string_too_long");
    post(&s, ok("", "v")).await.assert_422(json!(["body", "name"]), "string_too_short");
    for bad in ["1ABC", "A-B", "A B", "é"] {
        post(&s, ok(bad, "v")).await.assert_422(json!(["body", "name"]), "string_pattern_mismatch");
    }
    post(&s, ok("V", "")).await.assert_422(json!(["body", "value"]), "string_too_short");
    post(&s, ok("V", &"x".repeat(8193))).await.assert_422(json!(["body", "value"]), "string_too_long");
    // 8192 bytes pass; 4,097 two-byte characters are fewer characters but more bytes.
    assert_eq!(post(&s, ok("AT_THE_BOUND", &"x".repeat(8192))).await.status, 201);
    post(&s, ok("V", &"é".repeat(4097))).await.assert_422(json!(["body", "value"]), "string_too_long");
    assert_eq!(post(&s, ok("WIDE", &"é".repeat(4096))).await.status, 201);
    let long_description = json!({"name": "V", "value": "v", "description": "d".repeat(1001)});
    post(&s, long_description).await.assert_422(json!(["body", "description"]), "string_too_long");
    post(&s, json!({"name": "V"})).await.assert_422(json!(["body", "value"]), "missing");
    let too_long = json!({"value": "x".repeat(8193)}).to_string();
    let put = s.raw("PUT", "/api/secrets/AT_THE_BOUND", Some(&too_long)).await;
    put.assert_422(json!(["body", "value"]), "string_too_long");
    s.raw("DELETE", "/api/secrets/not-a-name", None)
        .await
        .assert_422(json!(["path", "name"]), "string_pattern_mismatch");
    let names: Vec<String> =
        s.client.secret_list().send().await.unwrap().into_inner().items.into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["WIDE", "AT_THE_BOUND"], "only the valid ones were stored");
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_sees_none_of_them_and_cannot_replace_or_delete_them() {
    let s = server().await;
    let other_key = s.key_for("other-tenant").await;
    let other = agent_platform_tests::Client::with_key(&s.base, &other_key).unwrap();
    assert_eq!(post(&s, json!({"name": "TOKEN", "value": "mine"})).await.status, 201);

    assert!(other.secret_list().send().await.unwrap().into_inner().items.is_empty());
    assert_eq!(status_of(other.secret_delete().name("TOKEN").send().await), 404);
    let body = types::UpdateSecretRequest::builder().value("theirs");
    assert_eq!(status_of(other.secret_update().name("TOKEN").body(body).send().await), 404);
    // The same name is free in another tenant, and each reads its own.
    let body = types::CreateSecretRequest::builder().name("TOKEN").value("theirs");
    assert_eq!(other.secret_create().body(body).send().await.unwrap().status().as_u16(), 201);
    let (mine, theirs) = (tenant(&s, &s.key).await, tenant(&s, &other_key).await);
    assert_eq!(s.app().secret_value(mine, "TOKEN").await.unwrap(), "mine");
    assert_eq!(s.app().secret_value(theirs, "TOKEN").await.unwrap(), "theirs");
    assert_eq!(s.client.secret_list().send().await.unwrap().into_inner().items.len(), 1);
    s.stop().await;
}

#[tokio::test]
async fn without_a_key_creating_is_409_saying_how_to_configure_one() {
    let s = TestServer::start().await;
    let refused = post(&s, json!({"name": "TOKEN", "value": "v"})).await;
    assert_eq!((refused.status, &refused.body["code"]), (409, &json!("conflict")), "{}", refused.body);
    let detail = refused.body["detail"].as_str().unwrap();
    assert!(detail.contains("key_env") && detail.contains("AGENT_PLATFORM_SECRETS_KEY_ENV"), "{detail}");
    let put = s.raw("PUT", "/api/secrets/TOKEN", Some(r#"{"value": "v"}"#)).await;
    assert_eq!(put.status, 409, "{}", put.body);
    // Listing and deleting work.
    assert!(s.client.secret_list().send().await.unwrap().into_inner().items.is_empty());
    assert_eq!(s.raw("DELETE", "/api/secrets/TOKEN", None).await.status, 404);
    s.stop().await;
}

#[test]
fn a_named_key_variable_that_is_missing_or_malformed_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let with = |env: &[(&str, &str)]| match Process::try_serve_with(&data, &[], env) {
        Ok(p) => {
            p.kill();
            panic!("the server started with {env:?}")
        }
        Err(said) => said,
    };
    let said = with(&[("AGENT_PLATFORM_SECRETS_KEY_ENV", "E2E_SECRETS_KEY_NOT_SET")]);
    assert!(said.contains("E2E_SECRETS_KEY_NOT_SET") && said.contains("not set"), "{said}");
    let malformed = "0123-not-a-key";
    let said = with(&[("AGENT_PLATFORM_SECRETS_KEY_ENV", KEY_ENV), (KEY_ENV, malformed)]);
    assert!(said.contains(KEY_ENV) && said.contains("32 bytes"), "{said}");
    assert!(!said.contains(malformed), "the message never shows the variable's value: {said}");
    agent_platform_tests::backend::forget_database(&data);
}

#[tokio::test]
async fn secrets_survive_a_restart_and_still_decrypt() {
    let mut s = server().await;
    assert_eq!(post(&s, json!({"name": "TOKEN", "value": "kept"})).await.status, 201);
    s.restart().await;
    let t = tenant(&s, &s.key).await;
    assert_eq!(s.app().secret_value(t, "TOKEN").await.unwrap(), "kept");
    let names: Vec<String> =
        s.client.secret_list().send().await.unwrap().into_inner().items.into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["TOKEN"]);
    s.stop().await;
}

#[tokio::test]
async fn the_store_holds_no_plaintext_value_nor_does_an_idempotency_record() {
    let s = server().await;
    let value = "plaintext-that-must-not-be-stored-4711";
    let send = || async {
        let body = types::CreateSecretRequest::builder()
            .name("TOKEN")
            .value(value)
            .description("described-in-the-clear");
        let sent =
            s.client.secret_create().idempotency_key("secret-create-1").body(body).send().await.unwrap();
        assert_eq!(sent.status().as_u16(), 201);
        serde_json::to_value(sent.into_inner()).unwrap()
    };
    let (first, repeat) = (send().await, send().await);
    assert_eq!(first, repeat, "a repeat answers the first answer");
    assert!(!first.to_string().contains(value), "{first}");
    assert_eq!(s.client.secret_list().send().await.unwrap().into_inner().items.len(), 1, "created once");

    let secrets = stored(&s, Kind::Secret).await;
    assert!(secrets.contains("described-in-the-clear"), "the record is there: {secrets}");
    assert!(!secrets.contains(value), "the stored record holds no plaintext: {secrets}");
    let remembered = stored(&s, Kind::Idempotency).await;
    assert!(remembered.contains("secret-create-1"), "the key's record is there: {remembered}");
    assert!(!remembered.contains(value), "nor does the key's remembered answer: {remembered}");

    // On sled: nowhere in the data dir's files either (every 2xx write is in
    // them; the description, stored in the clear, shows the search finds it).
    if agent_platform_tests::backend::postgres().is_none() {
        let (mut found_description, mut found_value) = (false, false);
        for file in walk(&s.dir.path().join("data")) {
            let bytes = std::fs::read(&file).unwrap();
            let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
            found_description |= has(b"described-in-the-clear");
            found_value |= has(value.as_bytes());
        }
        assert!(found_description, "the search reads the store's files");
        assert!(!found_value, "no file of the store holds the plaintext");
    }
    s.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[tokio::test]
async fn a_secret_stored_under_another_key_is_a_clear_error_when_used_and_put_mends_it() {
    let mut s = server().await;
    assert_eq!(post(&s, json!({"name": "TOKEN", "value": "v"})).await.status, 201);
    let other_key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    s.restart_with_env(&[(KEY_ENV, other_key)]).await;
    let t = tenant(&s, &s.key).await;
    let err = s.app().secret_value(t, "TOKEN").await.unwrap_err().to_string();
    assert!(err.contains("'TOKEN'") && err.contains("another secrets key"), "{err}");
    let err = s.app().resolve_secrets(t, "{{ secrets.TOKEN }}").await.unwrap_err().to_string();
    assert!(err.contains("another secrets key"), "{err}");
    // Listed as ever; set again, it reads under the new key.
    assert_eq!(s.client.secret_list().send().await.unwrap().into_inner().items.len(), 1);
    let put = s.raw("PUT", "/api/secrets/TOKEN", Some(r#"{"value": "v2"}"#)).await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(s.app().secret_value(t, "TOKEN").await.unwrap(), "v2");
    s.stop().await;
}
