//! Sessions and their messages through the generated client and raw HTTP, against a live server.

use std::collections::HashSet;

use agent_platform_tests::{TestServer, status_of, types};
use serde_json::{Value, json};
use uuid::Uuid;

fn meta(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// A server with one agent and one user.
async fn setup() -> (TestServer, types::Agent, types::User) {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let u = s.create_user("Bob").await;
    (s, a, u)
}

// ---------------------------------------------------------------- sessions

#[tokio::test]
async fn session_routes_happy_path() {
    let (s, a, u) = setup().await;
    let created = s
        .client
        .session_create()
        .body(
            types::CreateSessionRequest::builder()
                .agent(a.id)
                .user(u.id)
                .situation("a support chat".to_string())
                .metadata(meta(json!({"lang": "en"}))),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = created.into_inner();
    assert_eq!(created.agents, vec![a.id]);
    assert_eq!(created.users, vec![u.id]);
    assert_eq!(created.situation.as_deref(), Some("a support chat"));
    assert_eq!(created.system_template, None);
    assert!(created.render_templates, "render_templates defaults to true");
    assert_eq!(created.token_budget, None);
    assert_eq!(created.context_overflow, None);
    assert_eq!(created.created_at, created.updated_at);

    let got = s.client.session_get().id(created.id).send().await.unwrap().into_inner();
    assert_eq!(got, created);
    let list = s.client.session_list().send().await.unwrap().into_inner();
    assert_eq!(list.items, vec![created.clone()]);

    let put = s
        .client
        .session_update()
        .id(created.id)
        .body(types::UpdateSessionRequest::builder().token_budget(std::num::NonZeroU64::new(1000)))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.token_budget, Some(1000));
    assert_eq!(put.situation.as_deref(), Some("a support chat"), "PUT merges: other fields stay");
    assert!(put.updated_at >= created.updated_at);
    assert_eq!(put.created_at, created.created_at);

    s.client.session_delete().id(created.id).send().await.unwrap();
    assert_eq!(status_of(s.client.session_get().id(created.id).send().await), 404);
    assert_eq!(status_of(s.client.session_delete().id(created.id).send().await), 404, "a second delete");
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_agents_and_users_lists() {
    let (s, a, u) = setup().await;
    let a2 = s.create_agent("Bea").await;
    let u2 = s.create_user("Cy").await;
    let session = s.create_session(&[a.id, a2.id], &[u.id, u2.id]).await;
    assert_eq!(session.agents, vec![a.id, a2.id]);
    assert_eq!(session.users, vec![u.id, u2.id]);
    // Users are optional.
    let r = s.raw("POST", "/api/sessions", Some(&json!({ "agent": a.id }).to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["users"], json!([]));
    s.stop().await;
}

#[tokio::test]
async fn create_session_without_agent_or_agents_is_422_naming_both_fields() {
    let (s, _a, u) = setup().await;
    let r = s.raw("POST", "/api/sessions", Some(&json!({ "user": u.id }).to_string())).await;
    r.assert_422(json!(["body", "agent"]), "missing");
    r.assert_422(json!(["body", "agents"]), "missing");
    assert!(s.client.session_list().send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_both_agent_and_agents_is_422_naming_both_fields() {
    let (s, a, _u) = setup().await;
    let body = json!({ "agent": a.id, "agents": [a.id] }).to_string();
    let r = s.raw("POST", "/api/sessions", Some(&body)).await;
    r.assert_422(json!(["body", "agent"]), "value_error");
    r.assert_422(json!(["body", "agents"]), "value_error");
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_both_user_and_users_is_422_naming_both_fields() {
    let (s, a, u) = setup().await;
    let body = json!({ "agent": a.id, "user": u.id, "users": [u.id] }).to_string();
    let r = s.raw("POST", "/api/sessions", Some(&body)).await;
    r.assert_422(json!(["body", "user"]), "value_error");
    r.assert_422(json!(["body", "users"]), "value_error");
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_an_empty_agents_list_is_422() {
    let (s, _a, _u) = setup().await;
    let r = s.raw("POST", "/api/sessions", Some(r#"{"agents": []}"#)).await;
    r.assert_422(json!(["body", "agents"]), "too_short");
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_a_participant_id_that_is_not_a_uuid_is_422() {
    let (s, a, _u) = setup().await;
    let body = json!({ "agent": a.id, "users": ["nope"] }).to_string();
    s.raw("POST", "/api/sessions", Some(&body)).await.assert_422(json!(["body", "users", 0]), "uuid_parsing");
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_a_missing_agent_is_404_naming_it_and_creates_nothing() {
    let (s, a, _u) = setup().await;
    let missing = Uuid::now_v7();
    let body = json!({ "agents": [a.id, missing] }).to_string();
    let r = s.raw("POST", "/api/sessions", Some(&body)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["code"], "not_found");
    assert_eq!(r.body["detail"], format!("agent {missing} not found"));
    assert!(s.client.session_list().send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_a_missing_user_is_404_naming_it() {
    let (s, a, _u) = setup().await;
    let missing = Uuid::now_v7();
    let body = json!({ "agent": a.id, "user": missing }).to_string();
    let r = s.raw("POST", "/api/sessions", Some(&body)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["detail"], format!("user {missing} not found"));
    s.stop().await;
}

#[tokio::test]
async fn create_session_with_another_tenants_agent_is_404() {
    let (s, a, _u) = setup().await;
    let other = s.other_tenant().await;
    let r = other.session_create().body(types::CreateSessionRequest::builder().agent(a.id)).send().await;
    assert_eq!(status_of(r), 404);
    s.stop().await;
}

#[tokio::test]
async fn repeated_participants_are_kept_once() {
    let (s, a, u) = setup().await;
    let session = s.create_session(&[a.id, a.id], &[u.id, u.id]).await;
    assert_eq!(session.agents, vec![a.id]);
    assert_eq!(session.users, vec![u.id]);
    s.stop().await;
}

#[tokio::test]
async fn a_system_template_that_does_not_compile_is_422_with_its_line() {
    let (s, a, _u) = setup().await;
    let body = json!({ "agent": a.id, "system_template": "Hello\n{{ agent.name " }).to_string();
    let r = s.raw("POST", "/api/sessions", Some(&body)).await;
    r.assert_422(json!(["body", "system_template"]), "value_error");
    let msg = r.body["detail"][0]["msg"].as_str().unwrap();
    assert!(msg.contains("line 2"), "{msg}");

    let good = "You are {{ agent.name }}.{% for u in users %} {{ u.name }}{% endfor %}";
    let r = s
        .raw("POST", "/api/sessions", Some(&json!({ "agent": a.id, "system_template": good }).to_string()))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["system_template"], good);

    // PUT checks it the same way, and changes nothing when it fails.
    let path = format!("/api/sessions/{}", r.body["id"].as_str().unwrap());
    s.raw("PUT", &path, Some(r#"{"system_template": "{% if x %}"}"#))
        .await
        .assert_422(json!(["body", "system_template"]), "value_error");
    assert_eq!(s.raw("GET", &path, None).await.body["system_template"], good);
    s.stop().await;
}

#[tokio::test]
async fn token_budget_must_be_positive_or_null() {
    let (s, a, _u) = setup().await;
    for bad in [json!(0), json!(-5)] {
        let body = json!({ "agent": a.id, "token_budget": bad }).to_string();
        s.raw("POST", "/api/sessions", Some(&body))
            .await
            .assert_422(json!(["body", "token_budget"]), "greater_than_equal");
    }
    let body = json!({ "agent": a.id, "token_budget": "many" }).to_string();
    s.raw("POST", "/api/sessions", Some(&body)).await.assert_422(json!(["body", "token_budget"]), "int_type");
    for good in [json!(1), json!(null)] {
        let body = json!({ "agent": a.id, "token_budget": good }).to_string();
        let r = s.raw("POST", "/api/sessions", Some(&body)).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["token_budget"], good);
    }
    s.stop().await;
}

#[tokio::test]
async fn context_overflow_is_null_truncate_or_adaptive() {
    let (s, a, _u) = setup().await;
    for good in [json!(null), json!("truncate"), json!("adaptive")] {
        let body = json!({ "agent": a.id, "context_overflow": good }).to_string();
        let r = s.raw("POST", "/api/sessions", Some(&body)).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["context_overflow"], good);
    }
    let body = json!({ "agent": a.id, "context_overflow": "drop" }).to_string();
    s.raw("POST", "/api/sessions", Some(&body)).await.assert_422(json!(["body", "context_overflow"]), "enum");
    s.stop().await;
}

#[tokio::test]
async fn put_and_patch_merge_and_keep_the_participants() {
    let (s, a, u) = setup().await;
    let a2 = s.create_agent("Bea").await;
    let session = s
        .client
        .session_create()
        .body(
            types::CreateSessionRequest::builder()
                .agent(a.id)
                .user(u.id)
                .situation("first".to_string())
                .metadata(meta(json!({"lang": "en"}))),
        )
        .send()
        .await
        .unwrap()
        .into_inner();
    let path = format!("/api/sessions/{}", session.id);
    for method in ["PUT", "PATCH"] {
        let body = json!({
            "metadata": {"tier": method},
            "render_templates": false,
            "agents": [a2.id],
            "users": []
        });
        let r = s.raw(method, &path, Some(&body.to_string())).await;
        assert_eq!(r.status, 200, "{method}: {}", r.body);
        assert_eq!(r.body["situation"], "first", "{method} keeps the fields not sent");
        assert_eq!(r.body["render_templates"], false);
        assert_eq!(r.body["metadata"], json!({"lang": "en", "tier": method}), "{method} merges metadata");
        assert_eq!(r.body["agents"], json!([a.id]), "{method} cannot change the participants");
        assert_eq!(r.body["users"], json!([u.id]));
    }
    let r = s.raw("PATCH", &path, Some(r#"{"situation": null, "metadata": null}"#)).await;
    assert_eq!(r.body["situation"], Value::Null, "null clears a field");
    assert_eq!(r.body["metadata"], Value::Null);
    s.stop().await;
}

#[tokio::test]
async fn put_and_patch_of_a_missing_session_are_404_and_create_nothing() {
    let (s, _a, _u) = setup().await;
    let id = Uuid::now_v7();
    let r = s.raw("PUT", &format!("/api/sessions/{id}"), Some("{}")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["detail"], format!("session {id} not found"));
    assert_eq!(s.raw("PATCH", &format!("/api/sessions/{id}"), Some("{}")).await.status, 404);
    assert!(s.client.session_list().send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn a_session_path_id_that_is_not_a_uuid_is_422_at_the_path() {
    let (s, _a, _u) = setup().await;
    for (method, path) in [
        ("GET", "/api/sessions/nope"),
        ("DELETE", "/api/sessions/nope"),
        ("GET", "/api/sessions/nope/messages"),
        ("GET", "/api/sessions/nope/tools"),
    ] {
        s.raw(method, path, None).await.assert_422(json!(["path", "id"]), "uuid_parsing");
    }
    s.stop().await;
}

#[tokio::test]
async fn sessions_list_pages_and_filters_by_metadata() {
    let (s, a, _u) = setup().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let body = json!({ "agent": a.id, "metadata": {"n": i, "even": i % 2 == 0} }).to_string();
        ids.push(s.raw("POST", "/api/sessions", Some(&body)).await.body["id"].clone());
    }
    let page = s.raw("GET", "/api/sessions?limit=2&offset=1", None).await;
    let got: Vec<Value> = page.body["items"].as_array().unwrap().iter().map(|i| i["id"].clone()).collect();
    assert_eq!(got, vec![ids[3].clone(), ids[2].clone()], "newest first by default");
    let even =
        s.raw("GET", "/api/sessions?direction=asc&metadata_filter=%7B%22even%22%3Atrue%7D", None).await;
    let got: Vec<Value> = even.body["items"].as_array().unwrap().iter().map(|i| i["id"].clone()).collect();
    assert_eq!(got, vec![ids[0].clone(), ids[2].clone(), ids[4].clone()]);
    s.stop().await;
}

// ---------------------------------------------------------------- messages

#[tokio::test]
async fn messages_are_appended_and_listed_oldest_first() {
    let (s, a, u) = setup().await;
    let session = s.create_session(&[a.id], &[u.id]).await;
    let r = s
        .client
        .message_create()
        .id(session.id)
        .body(types::CreateMessageRequest::builder().role(types::Role::User).content("Hello, world!"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let first = r.into_inner();
    assert_eq!(first.session_id, session.id);
    assert_eq!(first.role, types::Role::User);
    assert_eq!(first.content, "Hello, world!");
    assert_eq!(first.token_count, 4, "o200k_base: Hello , world !");
    let second = s.say(session.id, "and again").await;
    let third = s.say(session.id, "").await;
    assert_eq!(third.token_count, 0);

    let list = s.client.message_list().id(session.id).send().await.unwrap().into_inner().items;
    assert_eq!(list, vec![first.clone(), second.clone(), third.clone()]);
    let desc = s
        .client
        .message_list()
        .id(session.id)
        .direction(types::Direction::Desc)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(desc, vec![third.clone(), second.clone(), first.clone()]);
    let page = s
        .client
        .message_list()
        .id(session.id)
        .limit(std::num::NonZeroU64::new(1).unwrap())
        .offset(1)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(page, vec![second]);
    s.stop().await;
}

#[tokio::test]
async fn assistant_tool_calls_and_tool_results_round_trip() {
    let (s, a, _u) = setup().await;
    let session = s.create_session(&[a.id], &[]).await;
    let path = format!("/api/sessions/{}/messages", session.id);
    let call = json!({
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]
    });
    let r = s.raw("POST", &path, Some(&call.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["tool_calls"], call["tool_calls"]);
    assert!(r.body["token_count"].as_i64().unwrap() > 0, "tool calls count as tokens");
    let result = json!({"role": "tool", "content": "18°C", "tool_call_id": "call_1", "name": "get_weather"});
    let r = s.raw("POST", &path, Some(&result.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["tool_call_id"], "call_1");
    assert_eq!(r.body["name"], "get_weather");
    s.stop().await;
}

#[tokio::test]
async fn message_fields_are_validated() {
    let (s, a, _u) = setup().await;
    let session = s.create_session(&[a.id], &[]).await;
    let path = format!("/api/sessions/{}/messages", session.id);
    let post = |body: Value| {
        let path = path.clone();
        let s = &s;
        async move { s.raw("POST", &path, Some(&body.to_string())).await }
    };
    post(json!({"role": "robot", "content": "x"})).await.assert_422(json!(["body", "role"]), "enum");
    post(json!({"role": "user"})).await.assert_422(json!(["body", "content"]), "missing");
    post(json!({"role": "user", "content": 3})).await.assert_422(json!(["body", "content"]), "string_type");
    post(json!({"role": "tool", "content": "x"}))
        .await
        .assert_422(json!(["body", "tool_call_id"]), "missing");
    post(json!({"role": "user", "content": "x", "tool_call_id": "c"}))
        .await
        .assert_422(json!(["body", "tool_call_id"]), "value_error");
    let calls = json!([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
    post(json!({"role": "user", "content": "x", "tool_calls": calls}))
        .await
        .assert_422(json!(["body", "tool_calls"]), "value_error");
    post(json!({"role": "assistant", "content": "x", "tool_calls": [{"id": "c"}]}))
        .await
        .assert_422(json!(["body", "tool_calls", 0, "function"]), "missing");
    post(json!({"role": "user", "content": "x", "metadata": []}))
        .await
        .assert_422(json!(["body", "metadata"]), "dict_type");
    assert!(s.client.message_list().id(session.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn messages_of_a_missing_session_are_404() {
    let (s, _a, _u) = setup().await;
    let id = Uuid::now_v7();
    let r = s
        .raw("POST", &format!("/api/sessions/{id}/messages"), Some(r#"{"role":"user","content":"x"}"#))
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["detail"], format!("session {id} not found"));
    assert_eq!(status_of(s.client.message_list().id(id).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn messages_list_bad_query_values_are_422() {
    let (s, a, _u) = setup().await;
    let session = s.create_session(&[a.id], &[]).await;
    let path = format!("/api/sessions/{}/messages", session.id);
    s.raw("GET", &format!("{path}?limit=0"), None)
        .await
        .assert_422(json!(["query", "limit"]), "greater_than_equal");
    s.raw("GET", &format!("{path}?direction=up"), None)
        .await
        .assert_422(json!(["query", "direction"]), "enum");
    s.raw("GET", &format!("{path}?metadata_filter=%5B%5D"), None)
        .await
        .assert_422(json!(["query", "metadata_filter"]), "dict_type");
    s.stop().await;
}

#[tokio::test]
async fn messages_appended_concurrently_from_8_clients_all_appear_in_a_stable_order() {
    const CLIENTS: usize = 8;
    const EACH: usize = 25;
    let (s, a, _u) = setup().await;
    let session = s.create_session(&[a.id], &[]).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = agent_platform_tests::Client::with_key(&s.base, &s.key).unwrap();
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..EACH {
                let body = types::CreateMessageRequest::builder()
                    .role(types::Role::User)
                    .content(format!("{c}/{i}"));
                sent.push(
                    client.message_create().id(session.id).body(body).send().await.unwrap().into_inner().id,
                );
            }
            sent
        }));
    }
    let mut sent_by_client = Vec::new();
    for t in tasks {
        sent_by_client.push(t.await.unwrap());
    }
    let read = || async {
        s.client
            .message_list()
            .id(session.id)
            .limit(std::num::NonZeroU64::new(1000).unwrap())
            .send()
            .await
            .unwrap()
            .into_inner()
            .items
    };
    let first = read().await;
    assert_eq!(first.len(), CLIENTS * EACH, "every message appears");
    let ids: Vec<Uuid> = first.iter().map(|m| m.id).collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len(), "each once");
    for _ in 0..3 {
        assert_eq!(
            read().await.iter().map(|m| m.id).collect::<Vec<_>>(),
            ids,
            "the same order on every read"
        );
    }
    // Ordered by created_at, and by id within one timestamp: the order of creation.
    for w in first.windows(2) {
        assert!(w[0].created_at <= w[1].created_at, "created_at never goes back");
        assert!(w[0].id < w[1].id, "ids follow the same order");
    }
    // Each client's messages appear in the order it sent them.
    for sent in &sent_by_client {
        let positions: Vec<usize> = sent.iter().map(|id| ids.iter().position(|x| x == id).unwrap()).collect();
        assert!(positions.windows(2).all(|p| p[0] < p[1]), "a client's messages keep their order");
    }
    // Paging through the same order gives the same sequence.
    let mut paged = Vec::new();
    for offset in (0..CLIENTS * EACH).step_by(30) {
        let page = s
            .client
            .message_list()
            .id(session.id)
            .limit(std::num::NonZeroU64::new(30).unwrap())
            .offset(offset as i64)
            .send()
            .await
            .unwrap()
            .into_inner()
            .items;
        paged.extend(page.into_iter().map(|m| m.id));
    }
    assert_eq!(paged, ids);
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_sees_404_on_every_session_route() {
    let (s, a, u) = setup().await;
    let session = s.create_session(&[a.id], &[u.id]).await;
    s.say(session.id, "hi").await;
    let other = s.other_tenant().await;
    let id = session.id;
    assert_eq!(status_of(other.session_get().id(id).send().await), 404);
    assert_eq!(
        status_of(other.session_update().id(id).body(types::UpdateSessionRequest::builder()).send().await),
        404
    );
    assert_eq!(
        status_of(other.session_patch().id(id).body(types::UpdateSessionRequest::builder()).send().await),
        404
    );
    assert_eq!(status_of(other.message_list().id(id).send().await), 404);
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("x");
    assert_eq!(status_of(other.message_create().id(id).body(msg).send().await), 404);
    assert_eq!(status_of(other.session_tool_list().id(id).send().await), 404);
    assert_eq!(status_of(other.session_delete().id(id).send().await), 404);
    assert!(other.session_list().send().await.unwrap().items.is_empty());
    // ...and the session and its messages are untouched.
    assert_eq!(s.client.session_get().id(id).send().await.unwrap().into_inner(), session);
    assert_eq!(s.client.message_list().id(id).send().await.unwrap().items.len(), 1);
    s.stop().await;
}
