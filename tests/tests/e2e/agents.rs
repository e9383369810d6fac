//! Agents through the generated client against a live server.

use agent_platform_tests::{TestServer, status_of, types};
use serde_json::json;

fn agent(name: &str) -> types::builder::CreateAgentRequest {
    types::CreateAgentRequest::builder().name(name)
}

#[tokio::test]
async fn agent_routes_happy_path() {
    let s = TestServer::start().await;
    let a = s
        .client
        .agent_create()
        .body(
            agent("Helper")
                .about("helps")
                .model("gpt-4o-mini")
                .instructions(types::Instructions::String("Be brief.".into()))
                .default_settings(Some(
                    types::ChatSettings::builder().temperature(Some(0.5)).try_into().unwrap(),
                )),
        )
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.name, "Helper");
    assert_eq!(a.instructions, vec!["Be brief."], "a single instruction is stored as a one-item list");
    assert_eq!(a.default_settings.as_ref().unwrap().temperature, Some(0.5));

    assert_eq!(s.client.agent_get().id(a.id).send().await.unwrap().into_inner(), a);
    assert_eq!(s.client.agent_list().send().await.unwrap().into_inner().items, vec![a.clone()]);

    let put = s.client.agent_update().id(a.id).body(agent("Renamed")).send().await.unwrap().into_inner();
    assert_eq!(put.name, "Renamed");
    assert_eq!(put.about, "", "PUT overwrites omitted fields with defaults");
    assert_eq!(put.model, "");
    assert!(put.instructions.is_empty());
    assert_eq!(put.default_settings, None);

    s.client.agent_delete().id(a.id).send().await.unwrap();
    assert_eq!(status_of(s.client.agent_get().id(a.id).send().await), 404);
    assert_eq!(status_of(s.client.agent_delete().id(a.id).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn patch_agent_changes_only_sent_fields_and_merges_metadata() {
    let s = TestServer::start().await;
    let r = s
        .raw("POST", "/api/agents", Some(r#"{"name": "A", "about": "x", "metadata": {"a": 1, "b": 2}}"#))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let p = s
        .raw("PATCH", &format!("/api/agents/{id}"), Some(r#"{"model": "m", "metadata": {"b": 3, "c": 4}}"#))
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(p.body["about"], "x");
    assert_eq!(p.body["model"], "m");
    assert_eq!(p.body["name"], "A");
    assert_eq!(p.body["metadata"], json!({"a": 1, "b": 3, "c": 4}));
    s.stop().await;
}

#[tokio::test]
async fn agent_create_rules_are_422_naming_each_field() {
    let s = TestServer::start().await;
    s.raw("POST", "/api/agents", Some("{}")).await.assert_422(json!(["body", "name"]), "missing");
    s.raw("POST", "/api/agents", Some(&json!({"name": "a".repeat(121)}).to_string()))
        .await
        .assert_422(json!(["body", "name"]), "string_too_long");
    s.raw("POST", "/api/agents", Some(&json!({"name": "A", "model": "m".repeat(256)}).to_string()))
        .await
        .assert_422(json!(["body", "model"]), "string_too_long");
    s.raw("POST", "/api/agents", Some(&json!({"name": "A", "instructions": vec!["x"; 101]}).to_string()))
        .await
        .assert_422(json!(["body", "instructions"]), "too_long");
    s.raw("POST", "/api/agents", Some(r#"{"name": "A", "instructions": [1]}"#))
        .await
        .assert_422(json!(["body", "instructions", 0]), "string_type");
    let r = s
        .raw(
            "POST",
            "/api/agents",
            Some(r#"{"name": "A", "default_settings": {"temperature": 2.5, "top_p": -1, "max_tokens": 0, "stop": ["a","b","c","d","e"]}}"#),
        )
        .await;
    r.assert_422(json!(["body", "default_settings", "temperature"]), "less_than_equal");
    r.assert_422(json!(["body", "default_settings", "top_p"]), "greater_than_equal");
    r.assert_422(json!(["body", "default_settings", "max_tokens"]), "greater_than_equal");
    r.assert_422(json!(["body", "default_settings", "stop"]), "too_long");
    assert!(s.client.agent_list().send().await.unwrap().items.is_empty(), "failed creates store nothing");
    s.stop().await;
}

#[tokio::test]
async fn another_tenants_agent_is_404_everywhere() {
    let s = TestServer::start().await;
    let a = s.client.agent_create().body(agent("Mine")).send().await.unwrap().into_inner();
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.agent_get().id(a.id).send().await), 404);
    assert_eq!(status_of(other.agent_update().id(a.id).body(agent("x")).send().await), 404);
    assert_eq!(
        status_of(other.agent_patch().id(a.id).body(types::PatchAgentRequest::builder()).send().await),
        404
    );
    assert_eq!(status_of(other.agent_delete().id(a.id).send().await), 404);
    assert!(other.agent_list().send().await.unwrap().items.is_empty());
    assert_eq!(s.client.agent_get().id(a.id).send().await.unwrap().into_inner(), a);
    s.stop().await;
}
