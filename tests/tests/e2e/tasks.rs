//! Tasks of agents through the generated client and raw HTTP, against a live server.

use agent_platform_tests::{Raw, TestServer, status_of, types};
use serde_json::{Value, json};
use uuid::Uuid;

fn task(name: &str) -> Value {
    json!({
        "name": name,
        "description": "Summarise a text",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "main": [
            {"prompt": "Summarise: {{ inputs.text }}"},
            {"evaluate": {"summary": "_.choices[0].message.content"}},
            {"return": {"summary": "_.summary"}}
        ],
        "metadata": {"team": "docs"}
    })
}

async fn put_task(s: &TestServer, agent: Uuid, body: &Value) -> Raw {
    s.raw("PUT", &format!("/api/agents/{agent}/tasks"), Some(&body.to_string())).await
}

fn step(name: &str, kind: &str) -> types::PutTaskRequest {
    types::PutTaskRequest::builder()
        .name(name)
        .main(vec![serde_json::Map::from_iter([(kind.to_string(), json!("x"))])])
        .try_into()
        .unwrap()
}

#[tokio::test]
async fn task_routes_happy_path() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let created =
        s.client.task_create_or_update().id(a.id).body(step("summarise", "prompt")).send().await.unwrap();
    assert_eq!(created.status(), 200, "PUT answers 200, also when it creates");
    let created = created.into_inner();
    assert_eq!(created.agent_id, a.id);
    assert_eq!(created.name, "summarise");
    assert_eq!(created.description, "");
    assert_eq!(created.input_schema, None);
    assert!(created.inherit_tools, "inherit_tools defaults to true");
    assert!(created.tools.is_empty());

    let got = s.client.task_get().id(a.id).task_id(created.id).send().await.unwrap().into_inner();
    assert_eq!(got, created);
    let list = s.client.task_list().id(a.id).send().await.unwrap().into_inner();
    assert_eq!(list.items, vec![created.clone()]);

    s.client.task_delete().id(a.id).task_id(created.id).send().await.unwrap();
    assert_eq!(status_of(s.client.task_get().id(a.id).task_id(created.id).send().await), 404);
    assert_eq!(status_of(s.client.task_delete().id(a.id).task_id(created.id).send().await), 404);
    assert!(s.client.task_list().id(a.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn put_task_without_id_creates_a_new_task() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let r = put_task(&s, a.id, &task("summarise")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for key in ["name", "description", "input_schema", "main", "metadata"] {
        assert_eq!(r.body[key], task("summarise")[key], "{key}");
    }
    let other = put_task(&s, a.id, &task("translate")).await;
    assert_ne!(other.body["id"], r.body["id"]);
    assert_eq!(s.client.task_list().id(a.id).send().await.unwrap().items.len(), 2);
    s.stop().await;
}

#[tokio::test]
async fn put_task_without_id_overwrites_the_task_of_the_same_name() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let first = put_task(&s, a.id, &task("summarise")).await;
    let again = put_task(&s, a.id, &json!({"name": "summarise", "main": [{"log": "hi"}]})).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["id"], first.body["id"], "the same task");
    assert_eq!(again.body["created_at"], first.body["created_at"]);
    assert_ne!(again.body["updated_at"], first.body["updated_at"]);
    assert_eq!(again.body["main"], json!([{"log": "hi"}]));
    assert_eq!(again.body["description"], "", "overwritten: omitted fields take their defaults");
    assert_eq!(again.body["metadata"], Value::Null);
    assert_eq!(s.client.task_list().id(a.id).send().await.unwrap().items.len(), 1);
    s.stop().await;
}

#[tokio::test]
async fn put_task_with_an_id_that_exists_overwrites_it_even_under_a_new_name() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let first = put_task(&s, a.id, &task("summarise")).await;
    let mut body = task("condense");
    body["id"] = first.body["id"].clone();
    let again = put_task(&s, a.id, &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_eq!(again.body["name"], "condense");
    let items = s.client.task_list().id(a.id).send().await.unwrap().into_inner().items;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].name, "condense");
    // The old name is free again.
    let third = put_task(&s, a.id, &task("summarise")).await;
    assert_ne!(third.body["id"], first.body["id"]);
    s.stop().await;
}

#[tokio::test]
async fn put_task_with_an_id_that_does_not_exist_creates_it_with_that_id() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let id = Uuid::new_v4();
    let mut body = task("summarise");
    body["id"] = json!(id);
    let r = put_task(&s, a.id, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["id"], json!(id));
    let got = s.client.task_get().id(a.id).task_id(id).send().await.unwrap().into_inner();
    assert_eq!(got.name, "summarise");
    s.stop().await;
}

#[tokio::test]
async fn put_task_with_the_id_of_another_agents_task_is_409() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let theirs = put_task(&s, a.id, &task("summarise")).await;
    let mut body = task("summarise");
    body["id"] = theirs.body["id"].clone();
    let r = put_task(&s, b.id, &body).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(s.client.task_list().id(b.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn renaming_a_task_onto_a_taken_name_is_409() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    put_task(&s, a.id, &task("summarise")).await;
    let other = put_task(&s, a.id, &task("translate")).await;
    let mut body = task("summarise");
    body["id"] = other.body["id"].clone();
    let r = put_task(&s, a.id, &body).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "conflict");
    // The same name in another agent is fine.
    let b = s.create_agent("Bea").await;
    assert_eq!(put_task(&s, b.id, &task("summarise")).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn concurrent_puts_of_one_name_make_one_task() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let puts = (0..8).map(|i| {
        let mut body = task("summarise");
        body["description"] = json!(format!("version {i}"));
        let s = &s;
        async move { put_task(s, a.id, &body).await }
    });
    let answers = futures::future::join_all(puts).await;
    assert!(answers.iter().all(|r| r.status == 200), "every PUT succeeds");
    let ids: std::collections::HashSet<String> =
        answers.iter().map(|r| r.body["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 1, "all of them wrote the same task");
    assert_eq!(s.client.task_list().id(a.id).send().await.unwrap().items.len(), 1);
    s.stop().await;
}

#[tokio::test]
async fn task_name_is_1_to_255_characters() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    assert_eq!(put_task(&s, a.id, &task(&"n".repeat(255))).await.status, 200);
    put_task(&s, a.id, &task(&"n".repeat(256))).await.assert_422(json!(["body", "name"]), "string_too_long");
    put_task(&s, a.id, &task("")).await.assert_422(json!(["body", "name"]), "string_too_short");
    let mut nameless = task("x");
    nameless.as_object_mut().unwrap().remove("name");
    put_task(&s, a.id, &nameless).await.assert_422(json!(["body", "name"]), "missing");
    s.stop().await;
}

#[tokio::test]
async fn every_step_kind_is_accepted() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let main = json!([
        {"prompt": "Hi", "label": "greet"},
        {"tool_call": "get_weather", "arguments": {"city": "Paris"}},
        {"evaluate": {"x": "1"}},
        {"if": "_.x > 0", "then": {"log": "positive"}, "else": [{"log": "not"}, {"return": {}}]},
        {"foreach": {"in": "[1, 2]", "do": {"log": "item"}}},
        {"return": {"done": "true"}},
        {"log": "done"},
        {"sleep": {"seconds": 1}},
        {"wait_for_input": {"info": {"message": "'go?'"}}},
        {"error": "boom"},
        {"switch": [{"case": "_.x > 1", "then": {"log": "big"}}, {"case": "_", "then": {"log": "small"}}]},
        {"over": "[1, 2]", "map": {"evaluate": {"y": "_ * 2"}}, "reduce": "results + [_.y]", "parallelism": 2},
        {"parallel": [{"log": "a"}, {"log": "b"}]},
        {"workflow": "helper", "arguments": {"n": "1"}},
        {"set": {"k": "1"}},
        {"get": "k"}
    ]);
    let helper = json!([{"return": {"n": "_.n"}}]);
    let r = put_task(&s, a.id, &json!({"name": "all", "main": main, "helper": helper})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["main"], main, "steps are stored as sent");
    assert_eq!(r.body["workflows"]["helper"], helper, "a sub-workflow is stored as sent, under `workflows`");
    s.stop().await;
}

#[tokio::test]
async fn a_step_without_exactly_one_kind_is_422_at_the_step() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let with_main = |main: Value| json!({"name": "t", "main": main});
    let ok = json!({"log": "ok"});
    let r = put_task(&s, a.id, &with_main(json!([ok, ok, {"label": "nothing"}]))).await;
    r.assert_422(json!(["body", "main", 2]), "value_error");
    let r = put_task(&s, a.id, &with_main(json!([{"prompt": "a", "log": "b"}]))).await;
    r.assert_422(json!(["body", "main", 0]), "value_error");
    assert!(r.body["detail"][0]["msg"].as_str().unwrap().contains("prompt, log"), "{}", r.body);
    put_task(&s, a.id, &with_main(json!([ok, "log"])))
        .await
        .assert_422(json!(["body", "main", 1]), "dict_type");
    put_task(&s, a.id, &with_main(json!([]))).await.assert_422(json!(["body", "main"]), "too_short");
    put_task(&s, a.id, &json!({"name": "t"})).await.assert_422(json!(["body", "main"]), "missing");
    // Nested steps are checked too, at their own place.
    let r =
        put_task(&s, a.id, &with_main(json!([ok, {"if": "x", "then": {"nope": 1}, "else": [ok, {}]}]))).await;
    r.assert_422(json!(["body", "main", 1, "then"]), "value_error");
    r.assert_422(json!(["body", "main", 1, "else", 1]), "value_error");
    let r = put_task(&s, a.id, &with_main(json!([{"foreach": {"in": "x", "do": {"sleeps": 1}}}]))).await;
    r.assert_422(json!(["body", "main", 0, "foreach", "do"]), "value_error");
    assert!(s.client.task_list().id(a.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn an_input_schema_that_is_not_a_json_schema_is_422() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let mut body = task("t");
    body["input_schema"] = json!({"type": "object", "required": "text"});
    put_task(&s, a.id, &body).await.assert_422(json!(["body", "input_schema"]), "value_error");
    body["input_schema"] = json!([]);
    put_task(&s, a.id, &body).await.assert_422(json!(["body", "input_schema"]), "dict_type");
    body["input_schema"] = Value::Null;
    assert_eq!(put_task(&s, a.id, &body).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn task_tools_are_checked_like_agent_tools() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let tool = json!({"name": "lookup", "type": "function", "function": {"parameters": {"type": "object"}}});
    let mut body = task("t");
    body["tools"] = json!([tool]);
    body["inherit_tools"] = json!(false);
    let r = put_task(&s, a.id, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["tools"][0]["name"], "lookup");
    assert_eq!(r.body["inherit_tools"], false);
    body["tools"] = json!([tool, tool]);
    put_task(&s, a.id, &body).await.assert_422(json!(["body", "tools", 1, "name"]), "value_error");
    body["tools"] = json!([{"name": "x", "type": "function", "function": {"parameters": {"type": 1}}}]);
    put_task(&s, a.id, &body)
        .await
        .assert_422(json!(["body", "tools", 0, "function", "parameters"]), "value_error");
    body["tools"] = json!([{"name": "x-y", "type": "api_call"}]);
    let r = put_task(&s, a.id, &body).await;
    r.assert_422(json!(["body", "tools", 0, "name"]), "string_pattern_mismatch");
    s.stop().await;
}

#[tokio::test]
async fn tasks_of_a_missing_agent_are_404_naming_it() {
    let s = TestServer::start().await;
    let missing = Uuid::now_v7();
    let r = put_task(&s, missing, &task("t")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["detail"], format!("agent {missing} not found"));
    assert_eq!(status_of(s.client.task_list().id(missing).send().await), 404);
    assert_eq!(status_of(s.client.task_get().id(missing).task_id(Uuid::now_v7()).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn a_task_is_not_found_under_another_agent() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let t = put_task(&s, a.id, &task("t")).await;
    let id: Uuid = t.body["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(status_of(s.client.task_get().id(b.id).task_id(id).send().await), 404);
    assert_eq!(status_of(s.client.task_delete().id(b.id).task_id(id).send().await), 404);
    assert_eq!(s.client.task_get().id(a.id).task_id(id).send().await.unwrap().name, "t");
    s.raw("GET", &format!("/api/agents/{}/tasks/nope", a.id), None)
        .await
        .assert_422(json!(["path", "task_id"]), "uuid_parsing");
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_sees_404_on_every_task_route() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let t =
        s.client.task_create_or_update().id(a.id).body(step("t", "log")).send().await.unwrap().into_inner();
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.task_list().id(a.id).send().await), 404);
    assert_eq!(status_of(other.task_create_or_update().id(a.id).body(step("t", "log")).send().await), 404);
    assert_eq!(status_of(other.task_get().id(a.id).task_id(t.id).send().await), 404);
    assert_eq!(status_of(other.task_delete().id(a.id).task_id(t.id).send().await), 404);
    assert_eq!(s.client.task_list().id(a.id).send().await.unwrap().into_inner().items, vec![t]);
    s.stop().await;
}
