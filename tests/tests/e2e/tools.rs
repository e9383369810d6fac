//! Tools of agents (and of sessions) through the generated client and raw HTTP, against a live server.

use agent_platform_tests::{TestServer, status_of, types};
use serde_json::{Value, json};
use uuid::Uuid;

fn weather() -> Value {
    json!({
        "name": "get_weather",
        "type": "function",
        "description": "The weather in a city",
        "function": {"parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }}
    })
}

fn fetch() -> Value {
    json!({
        "name": "fetch_page",
        "type": "api_call",
        "api_call": {"method": "GET", "url": "https://example.com/page", "headers": {"accept": "text/html"}, "timeout_s": 10}
    })
}

fn function_tool(name: &str) -> types::builder::CreateToolRequest {
    types::CreateToolRequest::builder()
        .name(name)
        .type_(types::ToolType::Function)
        .function(types::FunctionDef::try_from(types::FunctionDef::builder()).unwrap())
}

async fn post_tool(s: &TestServer, agent: Uuid, body: &Value) -> agent_platform_tests::Raw {
    s.raw("POST", &format!("/api/agents/{agent}/tools"), Some(&body.to_string())).await
}

#[tokio::test]
async fn tool_routes_happy_path() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let created = s
        .client
        .tool_create()
        .id(a.id)
        .body(function_tool("lookup").description("Looks things up"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = created.into_inner();
    assert_eq!(created.agent_id, a.id);
    assert_eq!(created.name, "lookup");
    assert_eq!(created.type_, types::ToolType::Function);
    assert_eq!(created.description, "Looks things up");
    assert_eq!(
        Value::Object(created.function.clone().unwrap().parameters),
        json!({"type": "object", "properties": {}}),
        "parameters default to no arguments"
    );
    assert_eq!(created.api_call, None);

    let list = s.client.tool_list().id(a.id).send().await.unwrap().into_inner();
    assert_eq!(list.items, vec![created.clone()]);

    let put = s
        .client
        .tool_update()
        .id(a.id)
        .tool_id(created.id)
        .body(function_tool("search"))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.name, "search");
    assert_eq!(put.description, "", "PUT overwrites: omitted fields take their defaults");
    assert_eq!(put.created_at, created.created_at);

    let patch = s
        .client
        .tool_patch()
        .id(a.id)
        .tool_id(created.id)
        .body(types::PatchToolRequest::builder().description(Some("Searches".parse().unwrap())))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(patch.name, "search", "PATCH keeps the fields not sent");
    assert_eq!(patch.description, "Searches");

    s.client.tool_delete().id(a.id).tool_id(created.id).send().await.unwrap();
    assert!(s.client.tool_list().id(a.id).send().await.unwrap().items.is_empty());
    assert_eq!(status_of(s.client.tool_delete().id(a.id).tool_id(created.id).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn function_and_api_call_tools_round_trip() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    for body in [weather(), fetch()] {
        let r = post_tool(&s, a.id, &body).await;
        assert_eq!(r.status, 201, "{}", r.body);
        for key in ["name", "type", "function", "api_call"] {
            if let Some(v) = body.get(key) {
                assert_eq!(&r.body[key], v, "{key}");
            }
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn tool_name_is_1_to_40_identifier_characters() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let with_name = |name: Value| {
        let mut b = weather();
        b["name"] = name;
        b
    };
    let ok = post_tool(&s, a.id, &with_name(json!("a".repeat(40)))).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(post_tool(&s, a.id, &with_name(json!("_private_2"))).await.status, 201);
    post_tool(&s, a.id, &with_name(json!("a".repeat(41))))
        .await
        .assert_422(json!(["body", "name"]), "string_too_long");
    post_tool(&s, a.id, &with_name(json!(""))).await.assert_422(json!(["body", "name"]), "string_too_short");
    for bad in ["1abc", "get-weather", "get weather", "naïve"] {
        post_tool(&s, a.id, &with_name(json!(bad)))
            .await
            .assert_422(json!(["body", "name"]), "string_pattern_mismatch");
    }
    let mut missing = weather();
    missing.as_object_mut().unwrap().remove("name");
    post_tool(&s, a.id, &missing).await.assert_422(json!(["body", "name"]), "missing");
    s.stop().await;
}

#[tokio::test]
async fn a_tool_name_taken_in_the_same_agent_is_409() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let first = post_tool(&s, a.id, &weather()).await;
    assert_eq!(first.status, 201);
    let again = post_tool(&s, a.id, &weather()).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(again.body["code"], "conflict");
    assert!(again.body["detail"].as_str().unwrap().contains("get_weather"), "{}", again.body);
    assert_eq!(post_tool(&s, b.id, &weather()).await.status, 201, "another agent may use the name");

    // Renaming onto a taken name is a 409 too, and changes nothing.
    let other = post_tool(&s, a.id, &fetch()).await;
    let path = format!("/api/agents/{}/tools/{}", a.id, other.body["id"].as_str().unwrap());
    assert_eq!(s.raw("PUT", &path, Some(&weather().to_string())).await.status, 409);
    assert_eq!(s.raw("PATCH", &path, Some(r#"{"name": "get_weather"}"#)).await.status, 409);
    assert_eq!(s.client.tool_list().id(a.id).send().await.unwrap().items.len(), 2);
    // The name is free again once its tool is gone.
    let path = format!("/api/agents/{}/tools/{}", a.id, first.body["id"].as_str().unwrap());
    assert_eq!(s.raw("DELETE", &path, None).await.status, 204);
    assert_eq!(post_tool(&s, a.id, &weather()).await.status, 201);
    s.stop().await;
}

#[tokio::test]
async fn function_parameters_that_are_not_a_json_schema_are_422() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let with_params = |p: Value| {
        let mut b = weather();
        b["function"]["parameters"] = p;
        b
    };
    let at = json!(["body", "function", "parameters"]);
    for bad in [json!({"type": "invalid_type"}), json!({"properties": []}), json!({"minLength": -1})] {
        post_tool(&s, a.id, &with_params(bad)).await.assert_422(at.clone(), "value_error");
    }
    post_tool(&s, a.id, &with_params(json!("object"))).await.assert_422(at.clone(), "dict_type");
    assert!(s.client.tool_list().id(a.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn function_parameters_are_checked_against_the_draft_they_name_and_nothing_is_fetched() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let with_params = |name: &str, p: Value| {
        let mut b = weather();
        b["name"] = json!(name);
        b["function"]["parameters"] = p;
        b
    };
    let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"});
    assert_eq!(post_tool(&s, a.id, &with_params("d7", draft7)).await.status, 201);
    let at = json!(["body", "function", "parameters"]);
    for unknown in ["https://example.com/meta", "file:///etc/passwd"] {
        let r = post_tool(&s, a.id, &with_params("x", json!({ "$schema": unknown }))).await;
        r.assert_422(at.clone(), "value_error");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_tool_definition_must_fit_its_type() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let mut no_function = weather();
    no_function.as_object_mut().unwrap().remove("function");
    post_tool(&s, a.id, &no_function).await.assert_422(json!(["body", "function"]), "missing");
    let mut both = weather();
    both["api_call"] = fetch()["api_call"].clone();
    post_tool(&s, a.id, &both).await.assert_422(json!(["body", "api_call"]), "value_error");
    let mut no_call = fetch();
    no_call.as_object_mut().unwrap().remove("api_call");
    post_tool(&s, a.id, &no_call).await.assert_422(json!(["body", "api_call"]), "missing");
    let mut bad_type = weather();
    bad_type["type"] = json!("system");
    post_tool(&s, a.id, &bad_type).await.assert_422(json!(["body", "type"]), "enum");
    let mut bad_url = fetch();
    bad_url["api_call"]["url"] = json!("ftp://example.com");
    post_tool(&s, a.id, &bad_url)
        .await
        .assert_422(json!(["body", "api_call", "url"]), "string_pattern_mismatch");
    let mut bad_method = fetch();
    bad_method["api_call"]["method"] = json!("FETCH");
    post_tool(&s, a.id, &bad_method).await.assert_422(json!(["body", "api_call", "method"]), "enum");
    let mut bad_timeout = fetch();
    bad_timeout["api_call"]["timeout_s"] = json!(0);
    post_tool(&s, a.id, &bad_timeout)
        .await
        .assert_422(json!(["body", "api_call", "timeout_s"]), "greater_than_equal");
    s.stop().await;
}

#[tokio::test]
async fn an_api_call_tool_may_not_set_host_connection_or_transfer_encoding() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let with_header = |name: &str| {
        let mut b = fetch();
        b["api_call"]["headers"] = json!({"accept": "text/html", name: "x"});
        b
    };
    for name in ["Host", "connection", "Transfer-Encoding"] {
        let r = post_tool(&s, a.id, &with_header(name)).await;
        r.assert_422(json!(["body", "api_call", "headers", name]), "value_error");
        assert!(r.body.to_string().contains("sets it itself"), "{}", r.body);
    }
    assert!(s.client.tool_list().id(a.id).send().await.unwrap().items.is_empty());

    // Nor through PUT, PATCH or a task's inline tools.
    let tool = post_tool(&s, a.id, &fetch()).await;
    let path = format!("/api/agents/{}/tools/{}", a.id, tool.body["id"].as_str().unwrap());
    s.raw("PUT", &path, Some(&with_header("Host").to_string()))
        .await
        .assert_422(json!(["body", "api_call", "headers", "Host"]), "value_error");
    let patch = json!({"api_call": with_header("Connection")["api_call"]}).to_string();
    s.raw("PATCH", &path, Some(&patch))
        .await
        .assert_422(json!(["body", "api_call", "headers", "Connection"]), "value_error");
    let stored = s.client.tool_list().id(a.id).send().await.unwrap().into_inner().items;
    let headers = stored[0].api_call.as_ref().unwrap().headers.clone().unwrap();
    assert_eq!(headers.len(), 1, "the refused writes changed nothing: {headers:?}");
    let task =
        json!({"name": "t", "main": [{"evaluate": {"x": 1}}], "tools": [with_header("transfer-encoding")]});
    s.raw("POST", &format!("/api/agents/{}/tasks", a.id), Some(&task.to_string()))
        .await
        .assert_422(json!(["body", "tools", 0, "api_call", "headers", "transfer-encoding"]), "value_error");
    s.stop().await;
}

#[tokio::test]
async fn patching_the_type_needs_the_new_definition_and_drops_the_old_one() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let tool = post_tool(&s, a.id, &weather()).await;
    let path = format!("/api/agents/{}/tools/{}", a.id, tool.body["id"].as_str().unwrap());
    s.raw("PATCH", &path, Some(r#"{"type": "api_call"}"#))
        .await
        .assert_422(json!(["body", "api_call"]), "missing");
    let body = json!({"type": "api_call", "api_call": fetch()["api_call"]}).to_string();
    let r = s.raw("PATCH", &path, Some(&body)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["type"], "api_call");
    assert_eq!(r.body["function"], Value::Null);
    assert_eq!(r.body["name"], "get_weather");
    s.raw("PATCH", &path, Some(r#"{"function": {"parameters": {"type": 5}}}"#))
        .await
        .assert_422(json!(["body", "function", "parameters"]), "value_error");
    s.stop().await;
}

#[tokio::test]
async fn tools_of_a_missing_agent_are_404_naming_it() {
    let s = TestServer::start().await;
    let missing = Uuid::now_v7();
    let r = post_tool(&s, missing, &weather()).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["detail"], format!("agent {missing} not found"));
    assert_eq!(status_of(s.client.tool_list().id(missing).send().await), 404);
    let path = format!("/api/agents/{missing}/tools/{}", Uuid::now_v7());
    assert_eq!(s.raw("PUT", &path, Some(&weather().to_string())).await.status, 404);
    assert_eq!(s.raw("DELETE", &path, None).await.status, 404);
    s.stop().await;
}

#[tokio::test]
async fn a_tool_is_not_found_under_another_agent() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let tool = post_tool(&s, a.id, &weather()).await;
    let id = tool.body["id"].as_str().unwrap();
    let path = format!("/api/agents/{}/tools/{id}", b.id);
    let r = s.raw("PUT", &path, Some(&weather().to_string())).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["detail"], format!("tool {id} not found"));
    assert_eq!(s.raw("PATCH", &path, Some("{}")).await.status, 404);
    assert_eq!(s.raw("DELETE", &path, None).await.status, 404);
    assert_eq!(s.client.tool_list().id(a.id).send().await.unwrap().items.len(), 1);
    s.stop().await;
}

#[tokio::test]
async fn put_and_patch_of_a_missing_tool_are_404_and_create_nothing() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let path = format!("/api/agents/{}/tools/{}", a.id, Uuid::now_v7());
    assert_eq!(s.raw("PUT", &path, Some(&weather().to_string())).await.status, 404);
    assert_eq!(s.raw("PATCH", &path, Some("{}")).await.status, 404);
    assert!(s.client.tool_list().id(a.id).send().await.unwrap().items.is_empty());
    s.raw("PUT", &format!("/api/agents/{}/tools/nope", a.id), Some(&weather().to_string()))
        .await
        .assert_422(json!(["path", "tool_id"]), "uuid_parsing");
    s.stop().await;
}

#[tokio::test]
async fn a_sessions_tools_are_the_tools_of_its_agents() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let c = s.create_agent("Cy").await;
    let wa = post_tool(&s, a.id, &weather()).await.body["id"].clone();
    let fa = post_tool(&s, a.id, &fetch()).await.body["id"].clone();
    let wb = post_tool(&s, b.id, &weather()).await.body["id"].clone();
    post_tool(&s, c.id, &weather()).await;
    let session = s.create_session(&[b.id, a.id], &[]).await;
    let tools = s.client.session_tool_list().id(session.id).send().await.unwrap().into_inner().items;
    let ids: Vec<Value> = tools.iter().map(|t| json!(t.id)).collect();
    assert_eq!(ids, vec![wb, wa, fa], "agent by agent, in the session's order");
    let empty = s.create_session(&[s.create_agent("Dee").await.id], &[]).await;
    assert!(s.client.session_tool_list().id(empty.id).send().await.unwrap().items.is_empty());
    assert_eq!(status_of(s.client.session_tool_list().id(Uuid::now_v7()).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_sees_404_on_every_tool_route() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let tool =
        s.client.tool_create().id(a.id).body(function_tool("lookup")).send().await.unwrap().into_inner();
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.tool_create().id(a.id).body(function_tool("x")).send().await), 404);
    assert_eq!(status_of(other.tool_list().id(a.id).send().await), 404);
    assert_eq!(
        status_of(other.tool_update().id(a.id).tool_id(tool.id).body(function_tool("x")).send().await),
        404
    );
    assert_eq!(
        status_of(
            other
                .tool_patch()
                .id(a.id)
                .tool_id(tool.id)
                .body(types::PatchToolRequest::builder())
                .send()
                .await
        ),
        404
    );
    assert_eq!(status_of(other.tool_delete().id(a.id).tool_id(tool.id).send().await), 404);
    assert_eq!(s.client.tool_list().id(a.id).send().await.unwrap().into_inner().items, vec![tool]);
    s.stop().await;
}
