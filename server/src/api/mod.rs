//! The HTTP contract: the Dropshot API trait, its types and its errors.
//!
//! This module holds no behaviour. The implementation is in [`crate::http`];
//! the OpenAPI document in `spec/` is generated from this trait alone
//! ([`openapi`]), and the client in `client/` is generated from that document.

pub mod error;
pub mod extract;
pub mod reply;
pub mod types;
pub mod types_chat;
pub mod types_sessions;
pub mod types_tasks;
pub mod types_tools;
pub mod validate;

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};
use serde_json::{Value, json};

pub use error::ApiError;
pub use extract::{IdempotencyKey, JsonBody, PathParams, QueryParams};
pub use reply::{ChatAnswer, Reply};
use types::*;
use types_chat::*;
use types_sessions::*;
use types_tasks::*;
use types_tools::*;

/// The interface version we implement (see API.md: Versions).
pub const API_VERSION: &str = "0.4.0";

pub type Ok200<T> = Result<Reply<HttpResponseOk<T>>, ApiError>;
pub type Created<T> = Result<Reply<HttpResponseCreated<T>>, ApiError>;
pub type Deleted = Result<Reply<HttpResponseDeleted>, ApiError>;

#[dropshot::api_description]
pub trait AgentPlatformApi {
    type Context;

    // ------------------------------------------------------------ service

    /// Health check (no API key needed).
    ///
    /// 200 `{"status": "ok"}` while the store can write. 503 while it cannot,
    /// with `code` naming the cause: `insufficient_storage` (the disk holding the
    /// store is full) or `store_unavailable` (another disk failure, or a disk that
    /// does not answer); `detail` says what to do. The store recovers by itself:
    /// the answer is 200 again once its disk takes writes.
    #[endpoint { method = GET, path = "/api/healthz", tags = ["service"] }]
    async fn healthz(rqctx: RequestContext<Self::Context>) -> Ok200<Health>;

    /// This OpenAPI document (no API key needed).
    #[endpoint { method = GET, path = "/api/openapi.json", tags = ["service"] }]
    async fn openapi_document(rqctx: RequestContext<Self::Context>) -> Ok200<serde_json::Map<String, Value>>;

    // ------------------------------------------------------------ API keys

    /// Create an API key for the caller's tenant.
    ///
    /// The answer shows the key this once: the service keeps only its hash. It
    /// works at once. With an `Idempotency-Key`, a repeat does not create another
    /// key, but it cannot show the first one again either: it is a 409 naming it.
    #[endpoint { method = POST, path = "/api/keys", tags = ["keys"] }]
    async fn key_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
    ) -> Created<ApiKeyCreated>;

    /// List the caller's tenant's API keys, newest first (never the keys themselves).
    #[endpoint { method = GET, path = "/api/keys", tags = ["keys"] }]
    async fn key_list(rqctx: RequestContext<Self::Context>) -> Ok200<ListResponse<ApiKey>>;

    /// Revoke an API key of the caller's tenant.
    ///
    /// It is refused at once (401) by every later request. The key making this
    /// request may revoke itself: this request answers 204, the next one 401.
    /// Another tenant's key id is a 404, as a missing one is.
    #[endpoint { method = DELETE, path = "/api/keys/{key_id}", tags = ["keys"] }]
    async fn key_delete(rqctx: RequestContext<Self::Context>, path: PathParams<KeyPath>) -> Deleted;

    // ------------------------------------------------------------ users

    /// Create a user.
    #[endpoint { method = POST, path = "/api/users", tags = ["users"] }]
    async fn user_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateUserRequest>,
    ) -> Created<User>;

    /// List users.
    #[endpoint { method = GET, path = "/api/users", tags = ["users"] }]
    async fn user_list(
        rqctx: RequestContext<Self::Context>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<User>>;

    /// Get a user.
    #[endpoint { method = GET, path = "/api/users/{user_id}", tags = ["users"] }]
    async fn user_get(rqctx: RequestContext<Self::Context>, path: PathParams<UserPath>) -> Ok200<User>;

    /// Overwrite a user.
    ///
    /// Fields that are omitted take their defaults. The user must exist (404 otherwise).
    #[endpoint { method = PUT, path = "/api/users/{user_id}", tags = ["users"] }]
    async fn user_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        body: JsonBody<UpdateUserRequest>,
    ) -> Ok200<User>;

    /// Change some fields of a user.
    ///
    /// Only the fields sent change; `metadata` is merged key by key (shallow).
    #[endpoint { method = PATCH, path = "/api/users/{user_id}", tags = ["users"] }]
    async fn user_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        body: JsonBody<PatchUserRequest>,
    ) -> Ok200<User>;

    /// Delete a user, its documents and the sessions in which it is the only user.
    #[endpoint { method = DELETE, path = "/api/users/{user_id}", tags = ["users"] }]
    async fn user_delete(rqctx: RequestContext<Self::Context>, path: PathParams<UserPath>) -> Deleted;

    // ------------------------------------------------------------ agents

    /// Create an agent.
    #[endpoint { method = POST, path = "/api/agents", tags = ["agents"] }]
    async fn agent_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateAgentRequest>,
    ) -> Created<Agent>;

    /// List agents.
    #[endpoint { method = GET, path = "/api/agents", tags = ["agents"] }]
    async fn agent_list(
        rqctx: RequestContext<Self::Context>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Agent>>;

    /// Get an agent.
    #[endpoint { method = GET, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_get(rqctx: RequestContext<Self::Context>, path: PathParams<AgentPath>) -> Ok200<Agent>;

    /// Overwrite an agent.
    ///
    /// Fields that are omitted take their defaults. The agent must exist (404 otherwise).
    #[endpoint { method = PUT, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        body: JsonBody<CreateAgentRequest>,
    ) -> Ok200<Agent>;

    /// Change some fields of an agent.
    ///
    /// Only the fields sent change; `metadata` is merged key by key (shallow).
    #[endpoint { method = PATCH, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        body: JsonBody<PatchAgentRequest>,
    ) -> Ok200<Agent>;

    /// Delete an agent, with its documents, tools and tasks and the sessions in
    /// which it is the only agent; it leaves the agent list of other sessions.
    #[endpoint { method = DELETE, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_delete(rqctx: RequestContext<Self::Context>, path: PathParams<AgentPath>) -> Deleted;

    // ------------------------------------------------------------ sessions

    /// Create a session.
    ///
    /// Send `agent` (one id) or `agents` (a list), not both, and optionally `user`
    /// or `users`. Every participant must exist (404 naming the first that does
    /// not). The participants are fixed for the life of the session.
    #[endpoint { method = POST, path = "/api/sessions", tags = ["sessions"] }]
    async fn session_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateSessionRequest>,
    ) -> Created<Session>;

    /// List sessions.
    #[endpoint { method = GET, path = "/api/sessions", tags = ["sessions"] }]
    async fn session_list(
        rqctx: RequestContext<Self::Context>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Session>>;

    /// Get a session.
    #[endpoint { method = GET, path = "/api/sessions/{id}", tags = ["sessions"] }]
    async fn session_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
    ) -> Ok200<Session>;

    /// Update a session: the fields sent change, the others stay.
    ///
    /// As the interface says, PUT takes a partial session and merges it, exactly
    /// as PATCH does; `metadata` is merged key by key. The participants cannot
    /// be changed. The session must exist (404 otherwise).
    #[endpoint { method = PUT, path = "/api/sessions/{id}", tags = ["sessions"] }]
    async fn session_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session>;

    /// Change some fields of a session.
    ///
    /// Only the fields sent change; `metadata` is merged key by key (shallow).
    #[endpoint { method = PATCH, path = "/api/sessions/{id}", tags = ["sessions"] }]
    async fn session_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session>;

    /// Delete a session and its messages.
    #[endpoint { method = DELETE, path = "/api/sessions/{id}", tags = ["sessions"] }]
    async fn session_delete(rqctx: RequestContext<Self::Context>, path: PathParams<SessionPath>) -> Deleted;

    /// List a session's messages, oldest first unless `direction=desc`.
    #[endpoint { method = GET, path = "/api/sessions/{id}/messages", tags = ["sessions"] }]
    async fn message_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        query: QueryParams<MessageListParams>,
    ) -> Ok200<ListResponse<Message>>;

    /// Append a message to a session.
    ///
    /// Its `token_count` is computed with the `o200k_base` encoding. Messages
    /// list in the order they were appended.
    #[endpoint { method = POST, path = "/api/sessions/{id}/messages", tags = ["sessions"] }]
    async fn message_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateMessageRequest>,
    ) -> Created<Message>;

    /// Chat with the session's agent.
    ///
    /// Builds the prompt (the agent's default settings overridden by the
    /// request's; the documents recalled with the last user message; the system
    /// message from the session's `system_template` or the built-in default,
    /// then the situation; the session's history, then the new messages, kept
    /// within `token_budget` as `context_overflow` says), calls the model
    /// through its provider with the agents' function tools and the request's
    /// `tools`, and, when `save`, appends the new messages and the answer in one
    /// atomic write. Tool calls are returned (`finish_reason: "tool_calls"`);
    /// send their results back as `tool` messages with `tool_call_id`. Chats on
    /// one session run one at a time.
    ///
    /// With `stream: true` the answer is `text/event-stream` instead: one
    /// `data: <chunk>` event per delta in OpenAI's chunk shape
    /// (`{"id","model","choices":[{"index","delta":{"role"?,"content"?,"tool_calls"?},
    /// "finish_reason"}]}`), a last chunk with no choices carrying `usage` and
    /// `docs`, then `data: [DONE]`. A failure after the stream started is an
    /// event `data: {"error": {"message", "code"}}` and nothing is saved.
    ///
    /// An answer larger than the server's bound (`models.max_answer_bytes`,
    /// 8 MiB by default: a whole answer's body, or a streamed answer's text) is
    /// dropped as soon as it passes it: a 502 `upstream_error`, or, once the
    /// stream has started, its `error` event; nothing is saved.
    ///
    /// Errors: 503 `no_model_provider` (no provider serves the model), 502
    /// `upstream_error` (the provider failed, answered nonsense or too much),
    /// 504 `upstream_timeout`, 429 `rate_limited` (the provider is rate limiting
    /// requests; its `Retry-After` header, when it sent one, is passed on), 400
    /// (over the token budget, a template that does not render); none of them
    /// saves anything.
    #[endpoint { method = POST, path = "/api/sessions/{id}/chat", tags = ["sessions"] }]
    async fn session_chat(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<ChatRequest>,
    ) -> Result<Reply<ChatAnswer>, ApiError>;

    /// The tools of the session's agents.
    ///
    /// Agent by agent, in the order of the session's `agents`; each agent's
    /// tools oldest first.
    #[endpoint { method = GET, path = "/api/sessions/{id}/tools", tags = ["sessions", "tools"] }]
    async fn session_tool_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
    ) -> Ok200<ListResponse<Tool>>;

    // ------------------------------------------------------------ tools

    /// Create a tool of an agent.
    ///
    /// Its name is unique within the agent (409 otherwise).
    #[endpoint { method = POST, path = "/api/agents/{id}/tools", tags = ["tools"] }]
    async fn tool_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateToolRequest>,
    ) -> Created<Tool>;

    /// List an agent's tools.
    #[endpoint { method = GET, path = "/api/agents/{id}/tools", tags = ["tools"] }]
    async fn tool_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Tool>>;

    /// Overwrite a tool of an agent.
    ///
    /// Fields that are omitted take their defaults. The tool must exist (404 otherwise).
    #[endpoint { method = PUT, path = "/api/agents/{id}/tools/{tool_id}", tags = ["tools"] }]
    async fn tool_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<CreateToolRequest>,
    ) -> Ok200<Tool>;

    /// Change some fields of a tool of an agent.
    ///
    /// Only the fields sent change; `metadata` is merged key by key (shallow).
    #[endpoint { method = PATCH, path = "/api/agents/{id}/tools/{tool_id}", tags = ["tools"] }]
    async fn tool_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<PatchToolRequest>,
    ) -> Ok200<Tool>;

    /// Delete a tool of an agent.
    #[endpoint { method = DELETE, path = "/api/agents/{id}/tools/{tool_id}", tags = ["tools"] }]
    async fn tool_delete(rqctx: RequestContext<Self::Context>, path: PathParams<AgentToolPath>) -> Deleted;

    // ------------------------------------------------------------ tasks

    /// List an agent's tasks.
    #[endpoint { method = GET, path = "/api/agents/{id}/tasks", tags = ["tasks"] }]
    async fn task_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Task>>;

    /// Create or update a task of an agent.
    ///
    /// The interface writes this route `PUT /api/agents/{parent_id}/tasks`; it is
    /// the same route on the wire (Dropshot needs one variable name per path
    /// position, and the agent is `{id}` throughout `/api/agents/`).
    /// With an `id` of a task of this agent: that task is overwritten. With an `id`
    /// that does not exist: the task is created with it (an id of another agent's
    /// task is a 409). With no `id`: the agent's task of the same `name` is
    /// overwritten, or a new task is created. Omitted fields take their defaults.
    /// Answers 200 with the task in every case.
    #[endpoint { method = PUT, path = "/api/agents/{id}/tasks", tags = ["tasks"] }]
    async fn task_create_or_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        body: JsonBody<PutTaskRequest>,
    ) -> Ok200<Task>;

    /// Get a task of an agent.
    #[endpoint { method = GET, path = "/api/agents/{id}/tasks/{task_id}", tags = ["tasks"] }]
    async fn task_get(rqctx: RequestContext<Self::Context>, path: PathParams<AgentTaskPath>) -> Ok200<Task>;

    /// Delete a task of an agent.
    #[endpoint { method = DELETE, path = "/api/agents/{id}/tasks/{task_id}", tags = ["tasks"] }]
    async fn task_delete(rqctx: RequestContext<Self::Context>, path: PathParams<AgentTaskPath>) -> Deleted;
    // ------------------------------------------------------------ documents and search

    /// Add a document to an agent.
    ///
    /// The document is searchable as soon as this answers. `embeddings`, when
    /// given, are one vector per snippet, of the dimension of the agent's other
    /// vectors (422 otherwise).
    #[endpoint { method = POST, path = "/api/agents/{id}/docs", tags = ["docs"] }]
    async fn agent_doc_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc>;

    /// List an agent's documents.
    #[endpoint { method = GET, path = "/api/agents/{id}/docs", tags = ["docs"] }]
    async fn agent_doc_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>>;

    /// Get a document of an agent.
    #[endpoint { method = GET, path = "/api/agents/{id}/docs/{doc_id}", tags = ["docs"] }]
    async fn agent_doc_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentDocPath>,
    ) -> Ok200<Doc>;

    /// Delete a document of an agent. It is gone from search results when this answers.
    #[endpoint { method = DELETE, path = "/api/agents/{id}/docs/{doc_id}", tags = ["docs"] }]
    async fn agent_doc_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentDocPath>,
    ) -> Deleted;

    /// Search an agent's documents by text (BM25).
    ///
    /// Answers the best matching snippets first, one entry per snippet. Words
    /// are matched after Unicode segmentation, case and accent folding and
    /// English stemming (`running` finds `runs`); any one query word matches.
    #[endpoint { method = GET, path = "/api/agents/{id}/search", tags = ["docs"] }]
    async fn agent_search_text(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse>;

    /// Search an agent's documents by text, by vector, or both (hybrid).
    ///
    /// Give `text`, `vector` or both; `mode` defaults from what is given. A
    /// vector or hybrid search without `vector` embeds `text` with the
    /// embedding model, and is a 400 when none is configured.
    #[endpoint { method = POST, path = "/api/agents/{id}/search", tags = ["docs"] }]
    async fn agent_search(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse>;

    /// Add a document to a user.
    ///
    /// The document is searchable as soon as this answers. `embeddings`, when
    /// given, are one vector per snippet, of the dimension of the user's other
    /// vectors (422 otherwise).
    #[endpoint { method = POST, path = "/api/users/{user_id}/docs", tags = ["docs"] }]
    async fn user_doc_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc>;

    /// List a user's documents.
    #[endpoint { method = GET, path = "/api/users/{user_id}/docs", tags = ["docs"] }]
    async fn user_doc_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>>;

    /// Get a document of a user.
    #[endpoint { method = GET, path = "/api/users/{user_id}/docs/{doc_id}", tags = ["docs"] }]
    async fn user_doc_get(rqctx: RequestContext<Self::Context>, path: PathParams<UserDocPath>) -> Ok200<Doc>;

    /// Delete a document of a user. It is gone from search results when this answers.
    #[endpoint { method = DELETE, path = "/api/users/{user_id}/docs/{doc_id}", tags = ["docs"] }]
    async fn user_doc_delete(rqctx: RequestContext<Self::Context>, path: PathParams<UserDocPath>) -> Deleted;

    /// Search a user's documents by text (BM25); see `agent_search_text`.
    #[endpoint { method = GET, path = "/api/users/{user_id}/search", tags = ["docs"] }]
    async fn user_search_text(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse>;

    /// Search a user's documents by text, by vector, or both (hybrid); see `agent_search`.
    #[endpoint { method = POST, path = "/api/users/{user_id}/search", tags = ["docs"] }]
    async fn user_search(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse>;
}

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
         chat, documents with full-text, vector and hybrid search, tools and tasks.\n\n\
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
         Retries are safe: every POST takes an `Idempotency-Key` header; a repeat with the same \
         key within 24 hours answers the first answer without doing it again.",
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
                        `GET /api/healthz` says when the store is back.",
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
    if let Some(paths) = v["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let public = PUBLIC_PATHS.contains(&path.as_str());
            let Some(item) = item.as_object_mut() else { continue };
            for (method, op) in item.iter_mut() {
                let Some(op) = op.as_object_mut() else { continue };
                // Searches are POSTs that write nothing.
                let searches =
                    op.get("operationId").and_then(Value::as_str).is_some_and(|id| id.contains("search"));
                let has_body = op.contains_key("requestBody");
                if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                    responses.insert("414".into(), json!({"$ref": "#/components/responses/UriTooLong"}));
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
                        responses.insert("408".into(), json!({"$ref": "#/components/responses/BodyTimeout"}));
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
    // A chat with `stream: true` answers server-sent events (see `ChatAnswer`).
    let chat = operation_mut(&mut v, "session_chat").expect("the chat operation");
    chat["responses"]["200"]["content"]["text/event-stream"] = json!({
        "schema": {
            "type": "string",
            "description": "With `stream: true`: server-sent events, one `data: <chunk>` per delta, \
                            then `data: [DONE]` (see the operation's description)."
        }
    });
    add_links(&mut v);
    add_name_examples(&mut v);
    v
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
