//! The OpenAPI document, generated from the trait alone, and what we add to
//! it that Dropshot cannot say.

use schemars::r#gen::{SchemaGenerator, SchemaSettings};
use schemars::visit::{RemoveRefSiblings, Visitor};
use serde_json::{Value, json};

use crate::{API_VERSION, agent_platform_api_mod, types};

/// Routes that need no API key.
pub const PUBLIC_PATHS: [&str; 2] = ["/api/healthz", "/api/openapi.json"];

/// The OpenAPI document of the API, generated from the trait alone.
///
/// Dropshot writes paths, parameters, bodies and schemas; we add what it cannot
/// say: the API-key security scheme, the 401/422/414/408 responses, the chat's
/// event-stream answer, the links from each create to the operations on what it
/// created ([`LINKS`]), and an example name.
pub fn openapi() -> Value {
    let api = agent_platform_api_mod::stub_api_description().expect("the API description is valid");
    let mut doc = api.openapi("agent-platform", semver(API_VERSION));
    doc.description(
        "A self-hostable backend for AI agents: users, agents, sessions and their messages, \
         chat, documents with full-text, vector and hybrid search, tools, and tasks that run \
         (executions).\n\n\
         Every route needs an API key in the `Authorization` header (`Bearer <key>` or the bare key), \
         except `GET /api/healthz` and `GET /api/openapi.json`. Every record belongs to the tenant \
         of the key; another tenant's id answers 404, as a missing one does.\n\n\
         Errors: a validation failure is a 422 whose `detail` lists every violation as \
         `{loc, msg, type}`; every other error is `{detail, code, request_id}`, including a \
         path that is no route (404 `not_found`) and a route that does not take the method \
         (405 `method_not_allowed`, with an `Allow` header).\n\n\
         Connections: a request body must arrive in full within the server's \
         `request_body_timeout_s` (default 30 s; 408 `request_timeout` otherwise), and a \
         connection that brings no complete request head within `idle_timeout_s` (default \
         30 s: silent, slow headers, or idle between requests) is closed.\n\n\
         Retries are safe: every POST (under `/api` and `/v1`) takes an `Idempotency-Key` \
         header; a repeat with the same key within 24 hours answers the first answer without \
         doing it again; a streamed session chat or response is answered again as the \
         stream of events it sent (a streamed chat completion, which saves nothing, runs \
         again).\n\n\
         OpenAI-compatible routes (tag `openai`, under `/v1`): the same keys, tenants and \
         records, in OpenAI's request and answer shapes, so that OpenAI's SDKs and the tools \
         built on them work with a changed base URL; their errors are in OpenAI's shape, \
         `{\"error\": {message, type, param, code}}`, with the same statuses and codes.",
    );
    let mut v = doc.json().expect("the OpenAPI document serialises");
    v["components"]["securitySchemes"] = json!({
        "apiKey": {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key, created with `agent-platform keys create` (server stopped) or `POST /api/keys` (for the caller's tenant). A bare key without `Bearer ` is accepted too."
        }
    });
    // Not JSON, unlike every other error: hyper answers it before the API runs.
    v["components"]["responses"]["UriTooLong"] = json!({
        "description": "The request line is over 64 KiB (e.g. a very long `text` query: search with \
                        POST instead). The HTTP layer refuses it before the API reads it: no body."
    });
    // The store's failures, on every operation that reaches it (see `healthz`).
    let error_body = json!({"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}});
    v["components"]["responses"]["InsufficientStorage"] = json!({
        "description": "`insufficient_storage`: the disk holding the store is full, so nothing was \
                        saved. Writes resume by themselves once the operator frees space; retry later.",
        "content": error_body.clone(),
    });
    v["components"]["responses"]["StoreUnavailable"] = json!({
        "description": "`store_unavailable`: the store cannot write (or read) now: a disk failure, a \
                        disk that does not answer within the server's `store_timeout_s`, a store being \
                        reopened, a server shutting down. Nothing was saved, unless `detail` says the \
                        outcome is unknown (the disk took the write but did not confirm it in time): \
                        then retry the same request with the same `Idempotency-Key`. Retry later; \
                        `GET /api/healthz` says when the store is back. Searches (and chats with \
                        recall) also answer 503 `search_warming`, with `Retry-After`, while the \
                        embedded store's search index is built after a start (`GET /api/healthz` \
                        says `\"search\": \"warming\"`).",
        "content": error_body,
    });
    let full_ref = json!({"$ref": "#/components/responses/InsufficientStorage"});
    let unavailable_ref = json!({"$ref": "#/components/responses/StoreUnavailable"});
    // The body extractor's deadline (`request_body_timeout_s`, default 30 s).
    v["components"]["responses"]["BodyTimeout"] = json!({
        "description": "The request body did not arrive in full within the server's body timeout \
                        (`request_body_timeout_s`, default 30 s, counted from the end of the headers): \
                        code `request_timeout`. Nothing was done; the server closes the connection.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    });
    let err_ref = json!({"$ref": "#/components/responses/Error"});
    let v1_err_ref = json!({"$ref": "#/components/responses/OpenAIErrorResponse"});
    if let Some(paths) = v["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let public = PUBLIC_PATHS.contains(&path.as_str());
            // The OpenAI-compatible routes answer errors in OpenAI's shape, write
            // nothing (no 507) and take no `Idempotency-Key` (no 409).
            let v1 = path.starts_with("/v1/");
            let Some(item) = item.as_object_mut() else { continue };
            for (method, op) in item.iter_mut() {
                let Some(op) = op.as_object_mut() else { continue };
                // Searches are POSTs that write nothing.
                let searches =
                    op.get("operationId").and_then(Value::as_str).is_some_and(|id| id.contains("search"));
                let has_body = op.contains_key("requestBody");
                if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                    responses.insert("414".into(), json!({"$ref": "#/components/responses/UriTooLong"}));
                    if v1 {
                        for status in ["401", "408", "422", "503"] {
                            responses.insert(status.into(), v1_err_ref.clone());
                        }
                    } else {
                        if path != "/api/openapi.json" {
                            responses.insert("503".into(), unavailable_ref.clone());
                        }
                        if method != "get" && !searches {
                            responses.insert("507".into(), full_ref.clone());
                        }
                        if !public {
                            responses.insert("401".into(), err_ref.clone());
                            responses.insert("422".into(), err_ref.clone());
                        }
                        // Every POST takes an `Idempotency-Key`: its reuse for another
                        // request, or while the first is in progress, is a 409.
                        if method == "post" {
                            responses.insert("409".into(), err_ref.clone());
                        }
                        if has_body {
                            responses
                                .insert("408".into(), json!({"$ref": "#/components/responses/BodyTimeout"}));
                        }
                    }
                }
                op.insert("security".into(), if public { json!([]) } else { json!([{"apiKey": []}]) });
            }
        }
    }
    // A model provider that rate-limits us: its Retry-After is passed on.
    v["components"]["responses"]["RateLimited"] = json!({
        "description": "The model provider is rate limiting requests (`rate_limited`). Nothing was saved.",
        "headers": {
            "Retry-After": {
                "description": "The provider's `Retry-After`, passed on when it sent one: seconds, or an HTTP date.",
                "schema": {"type": "string"}
            }
        },
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    });
    for operation in MODEL_OPERATIONS {
        let op = operation_mut(&mut v, operation).unwrap_or_else(|| panic!("no operation {operation}"));
        op["responses"]["429"] = json!({"$ref": "#/components/responses/RateLimited"});
    }
    // A chat with `stream: true` answers server-sent events (see `ChatAnswer`),
    // whose data are the contract's own types: declared here, since no
    // operation's JSON mentions them, so that clients generate them too.
    let mut generator = SchemaGenerator::new(SchemaSettings::openapi3().with(|s| {
        s.definitions_path = "#/components/schemas/".into();
    }));
    let chunk = generator.subschema_for::<types::ChatChunk>();
    let error_event = generator.subschema_for::<types::ChatErrorEvent>();
    let completion_chunk = generator.subschema_for::<types::ChatCompletionChunk>();
    let response_event = generator.subschema_for::<types::ResponseStreamEvent>();
    let v1_error = generator.subschema_for::<crate::error::OpenAiErrorBody>();
    // The WebSocket mode's messages are the SSE events above, and this.
    generator.subschema_for::<types::ResponseSocketError>();
    let schemas = v["components"]["schemas"].as_object_mut().expect("the spec has schemas");
    for (name, mut schema) in generator.take_definitions() {
        // OpenAPI 3.0 ignores a `$ref`'s siblings (`nullable`, `description`):
        // wrap it in `allOf`, as dropshot does with the schemas it writes.
        RemoveRefSiblings.visit_schema(&mut schema);
        schemas.entry(name).or_insert(serde_json::to_value(schema).expect("a schema serialises"));
    }
    // Each stream's schema is one event as an event-stream reader (and
    // schemathesis) sees it: its `event` and its `data`, a JSON text (or `[DONE]`).
    let chat = operation_mut(&mut v, "session_chat").expect("the chat operation");
    chat["responses"]["200"]["content"]["text/event-stream"] = json!({
        "schema": sse_event(
            "With `stream: true`: server-sent events, one `data: <ChatChunk>` per delta, then a last \
             `ChatChunk` with `usage` and `docs`, then `data: [DONE]`; a failure after the stream \
             started is a `data: <ChatErrorEvent>` that ends it (see the operation's description).",
            json!({"oneOf": [chunk, error_event]}),
            true,
        )
    });
    let completion = operation_mut(&mut v, "openai_chat_completion").expect("the chat completion operation");
    completion["responses"]["429"] = v1_err_ref.clone();
    completion["responses"]["200"]["content"]["text/event-stream"] = json!({
        "schema": sse_event(
            "With `stream: true`: server-sent events, one `data: <ChatCompletionChunk>` per delta (with \
             `stream_options.include_usage`, a last one with no choices and the `usage`), then \
             `data: [DONE]`; a failure after the stream started is a `data: <OpenAIErrorResponse>` \
             that ends it.",
            json!({"oneOf": [completion_chunk, v1_error]}),
            true,
        )
    });
    let response = operation_mut(&mut v, "openai_response_create").expect("the response operation");
    response["responses"]["429"] = v1_err_ref.clone();
    response["responses"]["200"]["content"]["text/event-stream"] = json!({
        "schema": sse_event(
            "With `stream: true`: server-sent events, each an `event: <type>` line and a \
             `data: <ResponseStreamEvent>` line, `response.created` first, `response.completed` (or \
             `response.failed`) last; no `[DONE]`.",
            json!(response_event),
            false,
        )
    });
    let compact = operation_mut(&mut v, "openai_response_compact").expect("the compaction operation");
    compact["responses"]["429"] = v1_err_ref.clone();
    // A transitions stream answers server-sent events only (see `EventStream`).
    let stream = operation_mut(&mut v, "transition_stream").expect("the transitions stream operation");
    stream["responses"]["200"]["content"] = json!({
        "text/event-stream": {
            // One event: what an event-stream reader (and schemathesis) sees of it.
            "schema": {
                "description": "Server-sent events, one per transition: `id: <transition id>` and \
                                `data: <Transition as JSON>`; the stream ends after a terminal \
                                transition. A failure after the stream started is an `event: error` \
                                whose data is an error body.",
                "type": "object",
                "required": ["data"],
                "properties": {
                    "id": {"type": "string", "description": "The transition's id (send it back as `Last-Event-ID`)."},
                    "event": {"type": "string", "description": "Absent for a transition; `error` for a failure."},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": "#/components/schemas/Transition"},
                    },
                },
            }
        }
    });
    add_links(&mut v);
    add_name_examples(&mut v);
    v
}

/// The schema of one server-sent event whose `data` is `payload` as JSON text
/// (or, with `done`, the literal `[DONE]` that ends the stream).
fn sse_event(description: &str, payload: Value, done: bool) -> Value {
    let json_data =
        json!({"type": "string", "contentMediaType": "application/json", "contentSchema": payload});
    let data =
        if done { json!({"anyOf": [{"type": "string", "enum": ["[DONE]"]}, json_data]}) } else { json_data };
    json!({
        "description": description,
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string", "description": "The event's type (absent: `message`)."},
            "data": data,
        },
    })
}

/// The operations that may call a model provider (a chat; an embedding of a
/// document or of a search's text), and so answer its 429.
const MODEL_OPERATIONS: [&str; 5] =
    ["session_chat", "agent_doc_create", "user_doc_create", "agent_search", "user_search"];

/// A name matching [`types::NAME_PATTERN`], shown as the example of every name field.
pub const EXAMPLE_NAME: &str = "Ada Lovelace";

/// OpenAPI links, `(from, to, parameters, request body)`: from the success
/// answer of an operation that creates something to the operations on what it
/// created. Operation ids; parameters and body are JSON with runtime
/// expressions (`""`: no body). A client can follow them, and fuzzers
/// (schemathesis's stateful phase) use them to reach real records.
pub const LINKS: &[(&str, &[&str], &str, &str)] = &[
    // Only to the key just created: no link leads to the key a client calls with.
    ("key_create", &["key_delete"], r#"{"key_id": "$response.body#/id"}"#, ""),
    ("secret_create", &["secret_update", "secret_delete"], r#"{"name": "$response.body#/name"}"#, ""),
    (
        "user_create",
        &[
            "user_get",
            "user_update",
            "user_patch",
            "user_delete",
            "user_doc_create",
            "user_doc_list",
            "user_search_text",
            "user_search",
        ],
        r#"{"user_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "agent_create",
        &[
            "agent_get",
            "agent_update",
            "agent_patch",
            "agent_delete",
            "agent_doc_create",
            "agent_doc_list",
            "agent_search_text",
            "agent_search",
            "tool_create",
            "tool_list",
            "task_list",
            "task_create_or_update",
            "task_create",
        ],
        r#"{"id": "$response.body#/id"}"#,
        "",
    ),
    ("agent_create", &["session_create"], "{}", r#"{"agent": "$response.body#/id"}"#),
    (
        "session_create",
        &[
            "session_get",
            "session_update",
            "session_patch",
            "session_delete",
            "message_list",
            "message_create",
            "session_chat",
            "session_tool_list",
        ],
        r#"{"id": "$response.body#/id"}"#,
        "",
    ),
    (
        "agent_doc_create",
        &["agent_doc_get", "agent_doc_delete"],
        r#"{"id": "$request.path.id", "doc_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "user_doc_create",
        &["user_doc_get", "user_doc_delete"],
        r#"{"user_id": "$request.path.user_id", "doc_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "tool_create",
        &["tool_update", "tool_patch", "tool_delete"],
        r#"{"id": "$request.path.id", "tool_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "task_create_or_update",
        &["task_get", "task_delete"],
        r#"{"id": "$request.path.id", "task_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "task_create_or_update",
        &["task_get_by_id", "execution_create", "execution_list"],
        r#"{"task_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "task_create",
        &["task_get", "task_delete"],
        r#"{"id": "$request.path.id", "task_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "task_create",
        &["task_get_by_id", "execution_create", "execution_list"],
        r#"{"task_id": "$response.body#/id"}"#,
        "",
    ),
    (
        "execution_create",
        &["execution_get", "execution_update", "transition_list", "transition_stream"],
        r#"{"id": "$response.body#/id"}"#,
        "",
    ),
];

/// Adds [`LINKS`] to the success response of each source operation. Panics on
/// a link to an operation that does not exist or that has no such parameter.
fn add_links(v: &mut Value) {
    for (from, targets, parameters, body) in LINKS {
        let parameters: Value = serde_json::from_str(parameters).expect("LINKS: parameters are JSON");
        let parameters = parameters.as_object().expect("LINKS: parameters are an object").clone();
        for to in *targets {
            let target = operation_mut(v, to).unwrap_or_else(|| panic!("LINKS: no operation {to}"));
            let names: Vec<&str> = target["parameters"]
                .as_array()
                .map(|ps| ps.iter().filter_map(|p| p["name"].as_str()).collect())
                .unwrap_or_default();
            for name in parameters.keys() {
                assert!(names.contains(&name.as_str()), "LINKS: {to} has no parameter {name}");
            }
        }
        let op = operation_mut(v, from).unwrap_or_else(|| panic!("LINKS: no operation {from}"));
        let success = op["responses"]
            .as_object_mut()
            .and_then(|rs| rs.iter_mut().find(|(status, _)| status.starts_with('2')))
            .map(|(_, r)| r)
            .unwrap_or_else(|| panic!("LINKS: {from} has no success response"));
        for to in *targets {
            let mut link = json!({ "operationId": to });
            if !parameters.is_empty() {
                link["parameters"] = Value::Object(parameters.clone());
            }
            if !body.is_empty() {
                link["requestBody"] = serde_json::from_str(body).expect("LINKS: a request body is JSON");
            }
            success["links"][*to] = link;
        }
    }
}

/// The operation with this `operationId`.
fn operation_mut<'a>(v: &'a mut Value, operation_id: &str) -> Option<&'a mut Value> {
    v["paths"]
        .as_object_mut()?
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .find(|op| op["operationId"] == operation_id)
}

/// Gives every schema of a name ([`types::NAME_PATTERN`]) the example [`EXAMPLE_NAME`].
fn add_name_examples(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("pattern").and_then(Value::as_str) == Some(types::NAME_PATTERN) {
                m.insert("example".into(), json!(EXAMPLE_NAME));
            }
            m.values_mut().for_each(add_name_examples);
        }
        Value::Array(a) => a.iter_mut().for_each(add_name_examples),
        _ => {}
    }
}

fn semver(s: &str) -> semver::Version {
    semver::Version::parse(s).expect("API_VERSION is semver")
}
