//! The table in server/docs/openai.md of `/v1` parameters is what the service does: every
//! request parameter of the spec's `/v1` request bodies has a row, and each
//! row is tried against a live server on the fake upstream — a parameter
//! "passed through as `x`" reaches the provider as `x`, one "supported" is
//! answered, one refused ("400 …") is a 400 naming it.

use agent_platform::models::fake_upstream::FakeUpstream;
use agent_platform_tests::TestServer;
use serde_json::{Value, json};

/// The table in server/docs/openai.md: (route, parameter, what the service does).
fn table() -> Vec<(String, String, String)> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../server/docs/openai.md")).unwrap();
    let start =
        readme.find("<!-- v1-parameters -->").expect("the table in server/docs/openai.md of /v1 parameters");
    let end = readme[start..].find("<!-- /v1-parameters -->").expect("the table's end") + start;
    readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l.trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect();
            assert_eq!(cells.len(), 3, "a row is route | parameter | what: {l}");
            let unquote = |c: &str| c.trim_matches('`').to_owned();
            (unquote(&cells[0]), unquote(&cells[1]), cells[2].clone())
        })
        .collect()
}

/// A request's body with `param` set to `value`, and the provider's name for
/// it when it is passed through (its path in the provider's request).
struct Sample {
    ok: Option<Value>,
    refused: Option<Value>,
}

fn sample(route: &str, param: &str) -> Sample {
    let (ok, refused) = match (route, param) {
        ("POST /v1/responses", "background") => (Some(json!(true)), None),
        ("POST /v1/responses", "conversation") => (Some(json!("$conversation")), None),
        ("POST /v1/responses", "frequency_penalty" | "presence_penalty") => {
            (Some(json!(0.5)), Some(json!(3)))
        }
        ("POST /v1/responses", "include") => {
            (Some(json!(["reasoning.encrypted_content"])), Some(json!(["message.output_text.logprobs"])))
        }
        ("POST /v1/responses", "input") => (Some(json!("hi")), Some(json!([{"type": "reasoning"}]))),
        ("POST /v1/responses", "instructions") => (Some(json!("Be brief.")), None),
        ("POST /v1/responses", "max_output_tokens") => (Some(json!(64)), Some(json!(15))),
        ("POST /v1/responses", "max_tool_calls") => (Some(json!(4)), Some(json!(0))),
        ("POST /v1/responses", "metadata") => (Some(json!({"k": "v"})), None),
        ("POST /v1/responses", "model") => (Some(json!("fake-model")), Some(json!(""))),
        ("POST /v1/responses", "parallel_tool_calls") => (Some(json!(false)), None),
        ("POST /v1/responses", "previous_response_id") => (Some(json!("$response")), Some(json!("nope"))),
        ("POST /v1/responses", "prompt_cache_key" | "safety_identifier" | "service_tier" | "user") => {
            (Some(json!("k-1")), Some(json!("")))
        }
        ("POST /v1/responses", "reasoning") => {
            (Some(json!({"effort": "low"})), Some(json!({"summary": "auto"})))
        }
        ("POST /v1/responses", "store") => (Some(json!(false)), None),
        ("POST /v1/responses", "stream") => (Some(json!(false)), None),
        ("POST /v1/responses", "temperature") => (Some(json!(0.2)), Some(json!(3))),
        ("POST /v1/responses", "top_p") => (Some(json!(0.9)), Some(json!(2))),
        ("POST /v1/responses", "text") => (
            Some(json!({"format": {"type": "json_object"}})),
            Some(json!({"format": {"type": "json_schema"}})),
        ),
        ("POST /v1/responses", "tool_choice") => (Some(json!("none")), None),
        ("POST /v1/responses", "tools") => (
            Some(json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}])),
            Some(json!([{"type": "web_search"}])),
        ),
        ("POST /v1/responses", "top_logprobs") => (Some(json!(0)), Some(json!(3))),
        ("POST /v1/responses", "truncation") => (Some(json!("auto")), None),
        ("POST /v1/chat/completions", "audio") => (None, Some(json!({"voice": "alloy", "format": "wav"}))),
        ("POST /v1/chat/completions", "frequency_penalty" | "presence_penalty") => {
            (Some(json!(0.5)), Some(json!(3)))
        }
        ("POST /v1/chat/completions", "function_call") => (None, Some(json!("auto"))),
        ("POST /v1/chat/completions", "functions") => (None, Some(json!([{"name": "f"}]))),
        ("POST /v1/chat/completions", "logit_bias") => (Some(json!({"50256": -100})), None),
        ("POST /v1/chat/completions", "logprobs") => (Some(json!(true)), None),
        ("POST /v1/chat/completions", "max_completion_tokens" | "max_tokens") => {
            (Some(json!(64)), Some(json!(0)))
        }
        ("POST /v1/chat/completions", "messages") => {
            (Some(json!([{"role": "user", "content": "hi"}])), Some(json!([])))
        }
        ("POST /v1/chat/completions", "metadata") => (Some(json!({"k": "v"})), None),
        ("POST /v1/chat/completions", "modalities") => {
            (Some(json!(["text"])), Some(json!(["text", "audio"])))
        }
        ("POST /v1/chat/completions", "model") => (Some(json!("fake-model")), Some(json!(""))),
        ("POST /v1/chat/completions", "n") => (Some(json!(1)), Some(json!(2))),
        ("POST /v1/chat/completions", "parallel_tool_calls") => (Some(json!(false)), None),
        ("POST /v1/chat/completions", "prediction") => {
            (None, Some(json!({"type": "content", "content": "x"})))
        }
        ("POST /v1/chat/completions", "prompt_cache_key" | "safety_identifier" | "service_tier" | "user") => {
            (Some(json!("k-1")), None)
        }
        ("POST /v1/chat/completions", "reasoning_effort") => (Some(json!("low")), Some(json!("huge"))),
        ("POST /v1/chat/completions", "verbosity") => (Some(json!("low")), Some(json!("loud"))),
        ("POST /v1/chat/completions", "response_format") => {
            (Some(json!({"type": "json_object"})), Some(json!({"type": "xml"})))
        }
        ("POST /v1/chat/completions", "seed") => (Some(json!(7)), None),
        ("POST /v1/chat/completions", "stop") => (Some(json!(["END"])), None),
        ("POST /v1/chat/completions", "store") => (Some(json!(false)), Some(json!(true))),
        ("POST /v1/chat/completions", "stream") => (Some(json!(false)), None),
        ("POST /v1/chat/completions", "stream_options") => (Some(json!({"include_usage": true})), None),
        ("POST /v1/chat/completions", "temperature") => (Some(json!(0.2)), Some(json!(3))),
        ("POST /v1/chat/completions", "top_p") => (Some(json!(0.9)), Some(json!(2))),
        ("POST /v1/chat/completions", "tool_choice") => (Some(json!("none")), None),
        ("POST /v1/chat/completions", "tools") => (
            Some(
                json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]),
            ),
            Some(json!([{"type": "custom"}])),
        ),
        ("POST /v1/chat/completions", "top_logprobs") => (Some(json!(2)), Some(json!(21))),
        ("POST /v1/chat/completions", "web_search_options") => (None, Some(json!({}))),
        ("POST /v1/embeddings", "dimensions") => (None, Some(json!(0))),
        ("POST /v1/embeddings", "encoding_format") => (Some(json!("base64")), Some(json!("int8"))),
        ("POST /v1/embeddings", "input") => (Some(json!(["a", "b"])), Some(json!([[1, 2]]))),
        ("POST /v1/embeddings", "model") => (Some(json!("fake-embed")), Some(json!(""))),
        ("POST /v1/embeddings", "user") => (Some(json!("u-1")), None),
        ("POST /v1/responses/compact", "input") => (Some(json!("hi")), Some(json!([{"type": "reasoning"}]))),
        ("POST /v1/responses/compact", "instructions") => (Some(json!("Keep names.")), None),
        ("POST /v1/responses/compact", "model") => (Some(json!("fake-model")), Some(Value::Null)),
        ("POST /v1/responses/compact", "previous_response_id") => {
            (Some(json!("$response")), Some(json!("nope")))
        }
        _ => panic!(
            "no sample for {route} {param}: add one to openai_compat.rs with its row in server/docs/openai.md"
        ),
    };
    Sample { ok, refused }
}

/// The base body of a route, that `param` is then set in.
fn base(route: &str) -> Value {
    match route {
        // A tool, so that the tool settings have something to act on.
        "POST /v1/responses" => json!({"model": "fake-model", "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}),
        "POST /v1/chat/completions" => {
            json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})
        }
        "POST /v1/embeddings" => json!({"model": "fake-embed", "input": "hi"}),
        "POST /v1/responses/compact" => json!({"model": "fake-model", "input": "hi"}),
        _ => panic!("no base body for {route}"),
    }
}

/// The spec's schema of each route's request body.
const ROUTES: [(&str, &str); 4] = [
    ("POST /v1/responses", "CreateResponseRequest"),
    ("POST /v1/chat/completions", "ChatCompletionRequest"),
    ("POST /v1/embeddings", "EmbeddingRequest"),
    ("POST /v1/responses/compact", "CompactResponseRequest"),
];

#[tokio::test]
async fn the_table_of_v1_parameters_is_what_the_service_does() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 5.0)).await;
    let rows = table();

    // Every parameter of the spec's request bodies has a row, and no row names another.
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/openapi.json")).unwrap(),
    )
    .unwrap();
    let mut in_spec = Vec::new();
    for (route, schema) in ROUTES {
        let properties = spec["components"]["schemas"][schema]["properties"].as_object().unwrap();
        in_spec.extend(properties.keys().map(|p| (route.to_owned(), p.clone())));
    }
    let mut in_table: Vec<(String, String)> = rows.iter().map(|(r, p, _)| (r.clone(), p.clone())).collect();
    in_spec.sort();
    in_table.sort();
    assert_eq!(
        in_table, in_spec,
        "the /v1 table in server/docs/openai.md has a row for each request parameter of the spec"
    );

    // A stored response and a conversation for the rows that continue one.
    let r = s
        .raw("POST", "/v1/responses", Some(&json!({"model": "fake-model", "input": "first"}).to_string()))
        .await;
    let response = r.body["id"].as_str().unwrap().to_owned();
    let r = s.raw("POST", "/v1/conversations", Some(&json!({}).to_string())).await;
    let conversation = r.body["id"].as_str().unwrap().to_owned();
    let fill = |v: Value| match v.as_str() {
        Some("$response") => json!(response),
        Some("$conversation") => json!(conversation),
        _ => v,
    };

    for (route, param, what) in &rows {
        let path = route.strip_prefix("POST ").unwrap();
        let sample = sample(route, param);
        let refused = what.starts_with("400") || what.contains("; 400");
        let answered = !what.starts_with("400");
        if answered {
            let ok = sample
                .ok
                .unwrap_or_else(|| panic!("{route} {param}: the table says it is answered; no sample"));
            let mut body = base(route);
            body[param.as_str()] = fill(ok);
            let r = s.raw("POST", path, Some(&body.to_string())).await;
            assert_eq!(r.status, 200, "{route} {param} ({what}): {body} → {}", r.body);
            if let Some(name) = what.strip_prefix("passed through as `").and_then(|w| w.split('`').next()) {
                let sent = fake.last_request().expect("a request upstream").body;
                assert!(sent.get(name).is_some(), "{route} {param} is passed through as {name}: {sent}");
            }
        }
        if refused {
            let bad =
                sample.refused.unwrap_or_else(|| panic!("{route} {param}: the table says 400; no sample"));
            let mut body = base(route);
            body[param.as_str()] = bad;
            let r = s.raw("POST", path, Some(&body.to_string())).await;
            assert_eq!(r.status, 400, "{route} {param} ({what}): {body} → {}", r.body);
            let named = r.body["error"]["param"].as_str().unwrap_or_default();
            assert!(named.starts_with(param.as_str()), "{route} {param}: the 400 names it: {}", r.body);
        }
    }
    s.stop().await;
}
