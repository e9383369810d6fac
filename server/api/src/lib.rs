//! agent-platform-api: the HTTP contract of agent-platform, and nothing that runs.
//!
//! [`AgentPlatformApi`] is the Dropshot API trait: every route, its
//! parameters, body and answers. Beside it: the request and response types,
//! one module per resource ([`types`]); the error bodies ([`error`]); the
//! extractors ([`extract`]) and the schema-driven validation ([`validate`])
//! that the trait's signatures use; the answer type that carries headers
//! ([`reply`]); and the OpenAPI post-processing ([`openapi()`]).
//!
//! The server implements the trait (its `http` module); `spec/openapi.json`
//! is generated from this crate alone by `cargo xtask generate`, so
//! regenerating the spec compiles no storage, no domain and no HTTP client.
//!
//! # Adding a route or a resource
//!
//! One file per layer (in full: `server/docs/adding-a-route.md`):
//!
//! 1. here: the types in `types/<resource>.rs` (bounds, patterns and defaults
//!    declared once), and the route in [`AgentPlatformApi`] under its
//!    resource's section, named `<resource>_<verb>`, its doc comment the
//!    operation's description; a create's links in [`LINKS`];
//! 2. `cargo xtask generate`, which writes `spec/` and `client/`; commit both;
//! 3. the handler in the server's `src/http/<resource>.rs`, and one line in
//!    `impl AgentPlatformApi for Impl` (`src/http/mod.rs`);
//! 4. the domain in `src/app/<resource>.rs` (methods on `App`, nothing of HTTP;
//!    what a record keeps on disk in `src/app/stored.rs`);
//! 5. a new kind of record: a `Kind` in `src/store/mod.rs`, the next number;
//! 6. the end-to-end tests in `tests/tests/e2e/<resource>.rs`.

#![forbid(unsafe_code)]

pub mod error;
pub mod extract;
pub mod openapi;
pub mod reply;
pub mod types;
pub mod validate;

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext, WebsocketUpgrade};
use serde_json::Value;

pub use error::{ApiError, OpenAiError};
pub use extract::{BodyReadTimeout, IdempotencyKey, JsonBody, LastEventId, PathParams, QueryParams};
pub use openapi::{EXAMPLE_NAME, LINKS, PUBLIC_PATHS, openapi};
pub use reply::{ChatAnswer, EventStream, Reply, SwitchingToWebsocket};
use types::*;

/// The interface version we implement: the spec's `info.version`.
pub const API_VERSION: &str = "0.4.0";

pub type Ok200<T> = Result<Reply<HttpResponseOk<T>>, ApiError>;
pub type Created<T> = Result<Reply<HttpResponseCreated<T>>, ApiError>;
pub type Deleted = Result<Reply<HttpResponseDeleted>, ApiError>;
/// The answer of a `/v1` route: errors in OpenAI's shape.
pub type V1<R> = Result<Reply<R, OpenAiError>, OpenAiError>;

#[dropshot::api_description]
pub trait AgentPlatformApi {
    type Context;

    // ------------------------------------------------------------ service

    /// Health check (no API key needed).
    ///
    /// 200 `{"status": "ok", "search": "ready"}` while the store can write;
    /// `search` is `warming` while the embedded store's search index is built
    /// after a start (every other route is served meanwhile). 503 while the store cannot write,
    /// with `code` naming the cause: `insufficient_storage` (the disk holding the
    /// store is full) or `store_unavailable` (another disk failure, or a disk that
    /// does not answer); `detail` says what to do. The store recovers by itself:
    /// the answer is 200 again once its disk takes writes.
    #[endpoint { method = GET, path = "/api/healthz", tags = ["service"] }]
    async fn healthz(rqctx: RequestContext<Self::Context>) -> Ok200<Health>;

    /// This OpenAPI document (no API key needed).
    #[endpoint { method = GET, path = "/api/openapi.json", tags = ["service"] }]
    async fn openapi_document(rqctx: RequestContext<Self::Context>) -> Ok200<serde_json::Map<String, Value>>;

    /// The web console: its page (`/console`, and any path below it that is no
    /// asset) and its assets (`/console/app.js`, …), embedded in the binary.
    ///
    /// Unpublished: it is no part of the API, which the console only uses. No API
    /// key is needed to load it (the person signs in on the page). The one route
    /// answers `/console` too (the wildcard takes no segment then). A server
    /// whose `[server] console` is off answers 404.
    #[endpoint { method = GET, path = "/console/{path:.*}", unpublished = true }]
    async fn console(
        rqctx: RequestContext<Self::Context>,
        path: dropshot::Path<ConsolePath>,
    ) -> Result<http::Response<dropshot::Body>, ApiError>;

    // ------------------------------------------------------------ API keys

    /// Create an API key for the caller's tenant.
    ///
    /// The answer shows the key this once: the service keeps only its hash. It
    /// works at once. With an `Idempotency-Key`, a repeat does not create another
    /// key, but it cannot show the first one again either: it is a 409 naming it.
    /// A tenant holds at most the server's `max_keys_per_tenant` keys (100
    /// unless configured): beyond it, a 409 naming the setting.
    #[endpoint { method = POST, path = "/api/keys", tags = ["keys"] }]
    async fn key_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
    ) -> Created<ApiKeyCreated>;

    /// List the caller's tenant's API keys, newest first unless asked (never the keys themselves).
    #[endpoint { method = GET, path = "/api/keys", tags = ["keys"] }]
    async fn key_list(
        rqctx: RequestContext<Self::Context>,
        query: QueryParams<KeyListParams>,
    ) -> Ok200<ListResponse<ApiKey>>;

    /// Revoke an API key of the caller's tenant.
    ///
    /// It is refused at once (401) by every later request. The key making this
    /// request may revoke itself: this request answers 204, the next one 401.
    /// The tenant's last key cannot be revoked (409): to rotate a key, create
    /// the new one first, then delete the old one. Another tenant's key id is a
    /// 404, as a missing one is.
    #[endpoint { method = DELETE, path = "/api/keys/{key_id}", tags = ["keys"] }]
    async fn key_delete(rqctx: RequestContext<Self::Context>, path: PathParams<KeyPath>) -> Deleted;

    // ------------------------------------------------------------ secrets

    /// Create a secret of the caller's tenant.
    ///
    /// Its value is stored encrypted (XChaCha20-Poly1305, with the key the
    /// server's `[secrets] key_env` names) and is never answered: server-side
    /// tools use it as `{{ secrets.NAME }}`. The name is unique within the
    /// tenant: an existing one is a 409 (replace its value with
    /// `PUT /api/secrets/{name}`). A server with no secrets key configured
    /// answers 409 saying how to configure one.
    #[endpoint { method = POST, path = "/api/secrets", tags = ["secrets"] }]
    async fn secret_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateSecretRequest>,
    ) -> Created<Secret>;

    /// List the caller's tenant's secrets (names and descriptions, never values).
    #[endpoint { method = GET, path = "/api/secrets", tags = ["secrets"] }]
    async fn secret_list(
        rqctx: RequestContext<Self::Context>,
        query: QueryParams<SecretListParams>,
    ) -> Ok200<ListResponse<Secret>>;

    /// Replace a secret's value and description (rotate it).
    ///
    /// The secret must exist (404 otherwise: create it with `POST /api/secrets`);
    /// an omitted description becomes `""`. Like creating, it needs a secrets
    /// key configured (409 otherwise).
    #[endpoint { method = PUT, path = "/api/secrets/{name}", tags = ["secrets"] }]
    async fn secret_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SecretPath>,
        body: JsonBody<UpdateSecretRequest>,
    ) -> Ok200<Secret>;

    /// Delete a secret of the caller's tenant.
    #[endpoint { method = DELETE, path = "/api/secrets/{name}", tags = ["secrets"] }]
    async fn secret_delete(rqctx: RequestContext<Self::Context>, path: PathParams<SecretPath>) -> Deleted;

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

    /// Delete a user, its documents, its memory blocks (and their edits) and the
    /// sessions in which it is the only user.
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

    /// Delete an agent, with its documents, tools, tasks, memory blocks (and
    /// their edits) and the sessions in which it is the only agent; it leaves
    /// the agent list of other sessions.
    #[endpoint { method = DELETE, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_delete(rqctx: RequestContext<Self::Context>, path: PathParams<AgentPath>) -> Deleted;

    /// Import a Letta Agent File (`.af`).
    ///
    /// The body is the file's JSON. Each agent in it becomes an agent here:
    /// its system prompt (as instructions), model and settings, tags (in
    /// metadata), memory blocks, tools (JSON-schema tools as `function`
    /// tools, whose Python source is kept in metadata and is not run here;
    /// Letta's memory tools as the built-in `memory` and
    /// `conversation_search` tools), MCP servers (as `mcp` tools) and
    /// messages (in a new session). Whatever has no counterpart here is
    /// listed in `unmapped`, with where it is and why. A body that is not an
    /// Agent File is a 422 that says why; nothing is written then. The body
    /// may be as large as the server's `request_body_max_bytes`.
    ///
    /// Dropshot's router takes no literal segment beside `{id}`, so the
    /// route is `POST /api/agents/{id}` and its one id is `import` (any other
    /// is a 404).
    #[endpoint { method = POST, path = "/api/agents/{id}", tags = ["agents"] }]
    async fn agent_import(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentImportPath>,
        query: QueryParams<AgentImportParams>,
        idempotency: IdempotencyKey,
        body: JsonBody<AgentFile>,
    ) -> Created<AgentFileImport>;

    /// Export an agent as a Letta Agent File (`.af`).
    ///
    /// The file holds the agent, its memory blocks, its tools (its MCP
    /// tools also as MCP servers) and, when `session_id` is given, that
    /// session's messages. Importing it gives the same agent back.
    #[endpoint { method = GET, path = "/api/agents/{id}/export", tags = ["agents"] }]
    async fn agent_export(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        query: QueryParams<AgentExportParams>,
    ) -> Ok200<AgentFile>;

    // ------------------------------------------------------------ memory blocks

    /// How the agent learns about its users after each turn (the default
    /// policy, disabled, when none was set).
    #[endpoint { method = GET, path = "/api/agents/{id}/learning", tags = ["memory"] }]
    async fn agent_learning_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
    ) -> Ok200<LearningPolicy>;

    /// Set how the agent learns about its users after each turn.
    ///
    /// Enabled, each saved turn of a session of the agent with users (session
    /// chat, `/v1/responses`, session runs) starts a learning job in the
    /// turn's own commit. The job runs in the background, across restarts:
    /// it sends the turn's messages and the users' writable blocks to the
    /// model (`model`, else the agent's) with the memory tools, and makes at
    /// most `max_edits` of the edits the model calls, on the blocks the
    /// policy allows, each recorded with the job, the session and the
    /// turn's answer as its source; in `approve` mode they are proposed
    /// instead. A job's edits and its end are one commit: it is never
    /// applied twice. A job whose model fails is tried again, at most
    /// `executions.max_step_attempts` times, then dropped with a log line.
    #[endpoint { method = PUT, path = "/api/agents/{id}/learning", tags = ["memory"] }]
    async fn agent_learning_put(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        body: JsonBody<LearningPolicy>,
    ) -> Ok200<LearningPolicy>;

    /// Approve an edit that learning proposed: it goes into the block (a 409
    /// when the block changed since the proposal: it no longer fits).
    #[endpoint {
        method = POST,
        path = "/api/users/{user_id}/blocks/{block_id}/edits/{edit_id}/approve",
        tags = ["memory"]
    }]
    async fn user_block_approve(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<Block>;

    /// Reject an edit that learning proposed: it stays listed, `rejected`.
    #[endpoint {
        method = POST,
        path = "/api/users/{user_id}/blocks/{block_id}/edits/{edit_id}/reject",
        tags = ["memory"]
    }]
    async fn user_block_reject(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<BlockEdit>;

    /// Add a memory block to an agent.
    ///
    /// The block is in the system message of each of the agent's turns from
    /// then on. Its creation is its first edit.
    #[endpoint { method = POST, path = "/api/agents/{id}/blocks", tags = ["memory"] }]
    async fn agent_block_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateBlockRequest>,
    ) -> Created<Block>;

    /// List an agent's memory blocks, by label.
    #[endpoint { method = GET, path = "/api/agents/{id}/blocks", tags = ["memory"] }]
    async fn agent_block_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
    ) -> Ok200<ListResponse<Block>>;

    /// Get a memory block of an agent.
    #[endpoint { method = GET, path = "/api/agents/{id}/blocks/{block_id}", tags = ["memory"] }]
    async fn agent_block_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentBlockPath>,
    ) -> Ok200<Block>;

    /// Change a memory block of an agent.
    ///
    /// `version` is the version read: if the block changed since, this is a
    /// 409 and nothing is written (read it again, and apply the change to
    /// what it is now). A new value is an edit, listed with this request's id.
    #[endpoint { method = PATCH, path = "/api/agents/{id}/blocks/{block_id}", tags = ["memory"] }]
    async fn agent_block_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentBlockPath>,
        body: JsonBody<PatchBlockRequest>,
    ) -> Ok200<Block>;

    /// Delete a memory block of an agent, with its edits.
    #[endpoint { method = DELETE, path = "/api/agents/{id}/blocks/{block_id}", tags = ["memory"] }]
    async fn agent_block_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentBlockPath>,
    ) -> Deleted;

    /// List the edits of an agent's memory block, newest first: each change
    /// of its value, with the value before and after and where it came from
    /// (the request, or the turn, message and tool call).
    #[endpoint { method = GET, path = "/api/agents/{id}/blocks/{block_id}/edits", tags = ["memory"] }]
    async fn agent_block_edits(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentBlockPath>,
        query: QueryParams<BlockEditListParams>,
    ) -> Ok200<ListResponse<BlockEdit>>;

    /// Revert an edit of an agent's memory block: its value goes back to what
    /// it was before the edit, as a new edit (`revert`). Only the block's
    /// latest change of value can be reverted (409 otherwise: revert the
    /// later ones first), and only once.
    #[endpoint {
        method = POST,
        path = "/api/agents/{id}/blocks/{block_id}/edits/{edit_id}/revert",
        tags = ["memory"]
    }]
    async fn agent_block_revert(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentBlockEditPath>,
    ) -> Ok200<Block>;

    /// Add a memory block to a user.
    ///
    /// The block is in the system message of each turn of the sessions the
    /// user is in, from then on. Its creation is its first edit.
    #[endpoint { method = POST, path = "/api/users/{user_id}/blocks", tags = ["memory"] }]
    async fn user_block_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateBlockRequest>,
    ) -> Created<Block>;

    /// List a user's memory blocks, by label.
    #[endpoint { method = GET, path = "/api/users/{user_id}/blocks", tags = ["memory"] }]
    async fn user_block_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserPath>,
    ) -> Ok200<ListResponse<Block>>;

    /// Get a memory block of a user.
    #[endpoint { method = GET, path = "/api/users/{user_id}/blocks/{block_id}", tags = ["memory"] }]
    async fn user_block_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockPath>,
    ) -> Ok200<Block>;

    /// Change a memory block of a user; see `agent_block_patch`.
    #[endpoint { method = PATCH, path = "/api/users/{user_id}/blocks/{block_id}", tags = ["memory"] }]
    async fn user_block_patch(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockPath>,
        body: JsonBody<PatchBlockRequest>,
    ) -> Ok200<Block>;

    /// Delete a memory block of a user, with its edits.
    #[endpoint { method = DELETE, path = "/api/users/{user_id}/blocks/{block_id}", tags = ["memory"] }]
    async fn user_block_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockPath>,
    ) -> Deleted;

    /// List the edits of a user's memory block, newest first; see `agent_block_edits`.
    #[endpoint { method = GET, path = "/api/users/{user_id}/blocks/{block_id}/edits", tags = ["memory"] }]
    async fn user_block_edits(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockPath>,
        query: QueryParams<BlockEditListParams>,
    ) -> Ok200<ListResponse<BlockEdit>>;

    /// Revert an edit of a user's memory block; see `agent_block_revert`.
    #[endpoint {
        method = POST,
        path = "/api/users/{user_id}/blocks/{block_id}/edits/{edit_id}/revert",
        tags = ["memory"]
    }]
    async fn user_block_revert(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<Block>;

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
    /// event `data: {"error": {"message", "code"}}` and nothing is saved. A
    /// client that goes away mid-stream does not stop the turn: it runs to its
    /// end (the model's whole answer, the server's tool calls) and is saved as
    /// if the client had stayed.
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

    /// Run a chat turn in the background: the answer is the run at once
    /// (`queued`); the server runs the turn to its end — the model, the
    /// server's tools it calls, round after round — whether or not anyone
    /// waits, and across restarts (on PostgreSQL, on another server if this
    /// one stops), each round committed to the session as it goes. A call of
    /// the server's tools in flight when a server stopped runs again only
    /// when its tool is idempotent; any other is told to the model as
    /// interrupted. The run is a background response of `/v1/responses` on
    /// this session (the agent answering as its `model`): follow its events
    /// with `GET /v1/responses/{run_id}?stream=true`.
    ///
    /// The session's agent (`agent`, else its first) answers with its model,
    /// settings, tools and MCP servers; function tools are the client's (the
    /// run ends with their calls). Errors as for a chat, before anything is
    /// saved: 404 (no such session), 400 (a session with no agent, calls
    /// waiting for approval that are not decided), 422 (the body).
    #[endpoint { method = POST, path = "/api/sessions/{id}/runs", tags = ["sessions"] }]
    async fn session_run_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<SessionRunRequest>,
    ) -> Created<SessionRun>;

    /// A run of the session, as it stands (its messages so far).
    #[endpoint { method = GET, path = "/api/sessions/{id}/runs/{run_id}", tags = ["sessions"] }]
    async fn session_run_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionRunPath>,
    ) -> Ok200<SessionRun>;

    /// Cancel a run of the session: as `POST /v1/responses/{id}/cancel`
    /// (its calls in flight answered "not run: the response was cancelled";
    /// one that ended is answered as it is).
    #[endpoint { method = POST, path = "/api/sessions/{id}/runs/{run_id}/cancel", tags = ["sessions"] }]
    async fn session_run_cancel(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<SessionRunPath>,
    ) -> Ok200<SessionRun>;

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

    /// Create a task of an agent.
    ///
    /// The body is the one of `PUT /api/agents/{id}/tasks`; its `name` must not
    /// be used by another task of the agent (409 otherwise: overwrite that task
    /// with the PUT, or pick another name). With an `id`, the task is created
    /// with that id (409 if a record has it already). Every step is checked
    /// (see the body's `main`): a step that is not valid is a 422 at its place.
    #[endpoint { method = POST, path = "/api/agents/{id}/tasks", tags = ["tasks"] }]
    async fn task_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<AgentPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<PutTaskRequest>,
    ) -> Created<Task>;

    /// Get a task by its id alone.
    #[endpoint { method = GET, path = "/api/tasks/{task_id}", tags = ["tasks"] }]
    async fn task_get_by_id(rqctx: RequestContext<Self::Context>, path: PathParams<TaskPath>) -> Ok200<Task>;

    // ------------------------------------------------------------ executions

    /// Start an execution of a task.
    ///
    /// Answers 201 with the execution, `queued`; the server runs it in the
    /// background (follow it with `GET /api/executions/{id}/transitions.stream`).
    /// `input` must match the task's `input_schema`: a mismatch is a 422 whose
    /// `loc` starts `["body","input",…]` and names the offending value. The task
    /// is read once, now: later edits of the task do not change this execution.
    ///
    /// How an execution runs: each step's outcome is committed as a transition,
    /// durably, before the next step starts. A server that stops (even killed)
    /// resumes every unfinished execution from its last transition when it
    /// starts again: a step in flight at a kill runs again (steps are
    /// at-least-once; a transition is never repeated), and a `sleep` ends at its
    /// original due time. A step in flight at `executions.max_step_attempts`
    /// server deaths in a row is not run again: the execution fails saying so.
    /// An execution over a limit of the server (steps per execution, foreach
    /// items, parallel branches, sleep length, expression fuel, api_call
    /// timeout) fails with an `error` naming the limit.
    ///
    /// Statuses: `queued → starting → running ↔ awaiting_input → succeeded |
    /// failed | cancelled`. An execution may become:
    ///
    /// | status | from |
    /// |---|---|
    /// | `starting` | `queued` |
    /// | `running` | `starting`, `awaiting_input`, `running` |
    /// | `awaiting_input` | `starting`, `running` |
    /// | `succeeded` | `starting`, `awaiting_input`, `running` |
    /// | `failed` | `starting`, `running` |
    /// | `cancelled` | `queued`, `starting`, `awaiting_input`, `running` |
    ///
    /// 404 if the task does not exist; 429 `rate_limited` when the tenant
    /// already has `executions.max_active_per_tenant` executions under way
    /// (queued, running, sleeping or awaiting input): nothing is started.
    #[endpoint { method = POST, path = "/api/tasks/{task_id}/executions", tags = ["executions"] }]
    async fn execution_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<TaskPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateExecutionRequest>,
    ) -> Created<Execution>;

    /// List a task's executions (404 if the task does not exist).
    #[endpoint { method = GET, path = "/api/tasks/{task_id}/executions", tags = ["executions"] }]
    async fn execution_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<TaskPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Execution>>;

    /// Get an execution.
    ///
    /// An execution outlives its task: deleting the task (or its agent) leaves
    /// its executions readable here by id, and one under way runs on with the
    /// task as it was when it started. `sleeping_until` is set while a `sleep`
    /// step waits (the execution keeps its status: `running`, or `starting` when the
    /// sleep is its first step); an execution that is
    /// `queued` waits for one of the server's workers (`[executions] workers`).
    #[endpoint { method = GET, path = "/api/executions/{id}", tags = ["executions"] }]
    async fn execution_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ExecutionPath>,
    ) -> Ok200<Execution>;

    /// Cancel an execution, or resume one that awaits input.
    ///
    /// `{"status": "cancelled", "reason"?}` stops an execution that is
    /// `queued`, `starting`, `running` (a sleeping one too) or `awaiting_input`:
    /// it commits a `cancelled` transition (output `{"reason": reason}`, or null)
    /// and its `error` becomes the reason, or `"cancelled"`. A step in flight is
    /// dropped (a model or HTTP call is abandoned).
    ///
    /// `{"status": "running", "input"?}` resumes an execution that is
    /// `awaiting_input`: it commits a `resume` transition whose output is
    /// `input`, which becomes the waiting step's output (a `wait_for_input`);
    /// for a function tool call, send `{"result": <the tool's result>}`.
    ///
    /// Any other change is a 409 naming the execution's status and the one
    /// asked for (e.g. cancelling a finished execution, resuming a running
    /// one); see the status table of `execution_create`. 404 if the execution
    /// does not exist.
    #[endpoint { method = PUT, path = "/api/executions/{id}", tags = ["executions"] }]
    async fn execution_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ExecutionPath>,
        body: JsonBody<UpdateExecutionRequest>,
    ) -> Ok200<Execution>;

    /// List an execution's transitions, oldest first unless `direction=desc`.
    ///
    /// Transition types and the status each gives: `init` starting;
    /// `init_branch`, `step`, `resume`, `finish_branch` running; `wait`
    /// awaiting_input; `finish` succeeded; `error` failed; `cancelled`
    /// cancelled. What may follow each type:
    ///
    /// | after | next |
    /// |---|---|
    /// | `init` | `wait`, `error`, `step`, `cancelled`, `init_branch`, `finish` |
    /// | `init_branch` | `wait`, `error`, `step`, `cancelled`, `finish_branch` |
    /// | `wait` | `resume`, `step`, `cancelled`, `finish`, `finish_branch` |
    /// | `step`, `resume` | `wait`, `error`, `cancelled`, `step`, `finish`, `finish_branch`, `init_branch` |
    /// | `finish_branch` | `wait`, `error`, `cancelled`, `step`, `finish`, `init_branch` |
    /// | `finish`, `error`, `cancelled` | nothing: they end the execution |
    ///
    /// `finish`, `error`, `cancelled` and `wait` have `next: null`. A step in
    /// flight when the server was killed runs again after the restart, but its
    /// transition is committed once: a transition is never repeated. 404 if the
    /// execution does not exist.
    ///
    /// What a run commits: `init` (output: the input); then a `step` for every
    /// step that completes (output: the step's output; `next`: the following
    /// step of the same list, or null after the last). A composite step (`if`,
    /// `switch`, `foreach`, `map_reduce`, `parallel`) commits its inner steps'
    /// transitions first, then its own `step`. A `yield` commits a `step` (its
    /// arguments) and `init_branch`, then the sub-workflow's steps, then
    /// `finish_branch` (the sub-workflow's value) and its own `step`. A
    /// `wait_for_input`, or a function tool call, commits `wait`; the resume
    /// commits `resume` (output: the input given), which completes a
    /// `wait_for_input`. A `sleep` commits its `step` when it ends. The run
    /// ends with `finish` (output: the last step's output, or the `return`
    /// value), `error` (output `{"error": message}`) or `cancelled`.
    ///
    /// Places (`current`, `next`) are `{workflow, step}`: `workflow` is `main`,
    /// a sub-workflow's name, or a nested list named by its path, e.g.
    /// `main[3].then`, `main[3].else`, `main[3].switch[1]`, `main[3].foreach[2]`
    /// (the third item's body), `main[3].parallel` and `main[3].map` (where
    /// `step` is the branch or the item); `step` is the index in that list.
    #[endpoint { method = GET, path = "/api/executions/{id}/transitions", tags = ["executions"] }]
    async fn transition_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ExecutionPath>,
        query: QueryParams<TransitionListParams>,
    ) -> Ok200<ListResponse<Transition>>;

    /// Get a transition of an execution.
    #[endpoint {
        method = GET,
        path = "/api/executions/{id}/transitions/{transition_id}",
        tags = ["executions"]
    }]
    async fn transition_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ExecutionTransitionPath>,
    ) -> Ok200<Transition>;

    /// Follow an execution's transitions as server-sent events.
    ///
    /// The answer is `text/event-stream`: every transition so far, oldest
    /// first, then each new one as it commits; each event is `id: <transition
    /// id>` and `data: <Transition JSON>`. With a `Last-Event-ID` header (an
    /// event source sends it when it reconnects), the stream starts after that
    /// transition. The stream ends after a terminal transition (`finish`,
    /// `error`, `cancelled`); for an execution that has ended, it sends what is
    /// left and ends at once. An execution that awaits input keeps its stream
    /// open; while no transition comes, a comment line (`: waiting`) is sent
    /// every 15 s so that idle connections are not cut. A failure after the
    /// stream started (the store failing) ends it with one event `event: error`
    /// whose data is `{"error": {"message", "code"}}`: reconnect with
    /// `Last-Event-ID`. 404 (an ordinary error answer) if the execution does
    /// not exist, 422 if `Last-Event-ID` is not a UUID.
    #[endpoint { method = GET, path = "/api/executions/{id}/transitions.stream", tags = ["executions"] }]
    async fn transition_stream(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ExecutionPath>,
        last_event_id: LastEventId,
    ) -> Result<Reply<EventStream>, ApiError>;
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

    // ------------------------------------------------------------ OpenAI-compatible (/v1)

    /// The models a client can name (OpenAI's `GET /v1/models`).
    ///
    /// The tenant's agents first, oldest first (`id` = the agent's id,
    /// `owned_by` = `agent-platform`; at most 10,000), then each provider's
    /// models (`owned_by` = the provider's name): the names its configuration
    /// lists, then those it lists itself (`GET {base_url}/models`, asked of every
    /// provider at once; each provider's list is kept for
    /// `models.list_cache_s` seconds (300 unless configured) and holds at most
    /// 10,000 names). A provider that does not answer within
    /// `models.list_timeout_s` (5 s unless configured), or fails, adds only its
    /// configured names (and is asked again after 30 s at the soonest). A name
    /// appears once, where it is first listed.
    /// Errors on `/v1` are in OpenAI's shape: `{"error": {message, type, param, code}}`
    /// with OpenAI's statuses: a request that fails validation is a 400
    /// `invalid_request_error` whose `param` names the field as OpenAI writes it
    /// (`messages[0].content`), where `/api` answers 422.
    #[endpoint { method = GET, path = "/v1/models", tags = ["openai"] }]
    async fn openai_model_list(rqctx: RequestContext<Self::Context>) -> V1<HttpResponseOk<ModelList>>;

    /// A model (OpenAI's `GET /v1/models/{model}`): one of the tenant's agents
    /// by its id, or a model name of `GET /v1/models`'s list; anything else is a
    /// 404 (another tenant's agent too).
    #[endpoint { method = GET, path = "/v1/models/{model}", tags = ["openai"] }]
    async fn openai_model_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ModelPath>,
    ) -> V1<HttpResponseOk<Model>>;

    /// Embeddings (OpenAI's `POST /v1/embeddings`): the vectors of the input
    /// texts, from the provider that serves `model`.
    ///
    /// At most 2,048 inputs and 1 MiB of text per request; an empty input is a
    /// 400. `encoding_format: base64` answers each vector as the base64 of its
    /// little-endian 32-bit floats. `dimensions` is sent to the provider; when
    /// its vectors have other dimensions (a model that cannot shorten its
    /// vectors), a 400 naming `dimensions`. No provider serving `model`: 503
    /// `no_model_provider`; a failing provider 502, a slow one 504.
    #[endpoint { method = POST, path = "/v1/embeddings", tags = ["openai"] }]
    async fn openai_embedding_create(
        rqctx: RequestContext<Self::Context>,
        body: JsonBody<EmbeddingRequest>,
    ) -> V1<HttpResponseOk<EmbeddingList>>;

    /// A chat completion (OpenAI's `POST /v1/chat/completions`), streamed or not.
    ///
    /// `model` = one of the tenant's agents' ids: that agent answers, as in a
    /// session chat but with no session (nothing is saved; the history is the
    /// request's `messages`): its system message (the default system template
    /// rendered with the agent, its tools and the recalled docs) comes first, its
    /// function tools are added to the request's, its documents are searched with
    /// the last user message (the best 5 snippets go in the system message), its
    /// `default_settings` apply under the request's, and its `model` (or the
    /// server's default) is called. Any other `model` goes to the provider that
    /// serves it, as sent.
    ///
    /// `stream: true` answers `text/event-stream`: one `data: <chat.completion.chunk>`
    /// per delta, with `stream_options.include_usage` a last chunk with no choices
    /// and the `usage`, then `data: [DONE]`. A failure after the stream started is
    /// a last `data: {"error": {message, type, param, code}}` event.
    ///
    /// A user message's content parts may be images (`image_url`: an http(s) URL
    /// or a data URL) and files (`file`, by `file_data`), each at most
    /// `models.max_input_part_bytes` bytes (8 MiB unless configured), sent to the
    /// provider as given. The answer passes on what the provider said:
    /// `finish_reason` (`stop`, `length`, `tool_calls`, `content_filter`, ...),
    /// `refusal`, `annotations`, `logprobs`, `system_fingerprint`, `service_tier`
    /// and the usage's details.
    ///
    /// Unsupported (400, naming the `param`): `n` other than 1, `store: true`,
    /// `audio` and `modalities` other than text, `prediction`,
    /// `web_search_options`, `functions` and `function_call` (send `tools`),
    /// content parts other than `text`, `image_url` and `file`, files by
    /// `file_id`, images or files outside user messages, an image that is no
    /// http(s) or data URL. Errors as on `/api/sessions/{id}/chat`: 503 `no_model_provider`,
    /// 502 `upstream_error`, 504 `upstream_timeout`, 429 `rate_limited`; a uuid
    /// `model` that is no agent of the tenant (and no provider's model) is a 404.
    #[endpoint { method = POST, path = "/v1/chat/completions", tags = ["openai"] }]
    async fn openai_chat_completion(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<ChatCompletionRequest>,
    ) -> V1<ChatAnswer<ChatCompletion>>;

    /// Create a conversation (OpenAI's `POST /v1/conversations`): a session with
    /// no agent and no user, its `items` appended in one write.
    ///
    /// Its `id` is `conv_` and the session's id as 32 hex digits; the `/v1`
    /// routes also take the session's UUID. Item ids are `msg_…` (a message)
    /// and `fc_…` (a tool call of an assistant message). An id in one of these
    /// forms that names nothing is a 404; a value in none of them is a 400
    /// naming the parameter.
    ///
    /// It is a session like any other: `GET /api/sessions/{id}` shows it and its
    /// messages are its items. A session with no agent lives until it is deleted
    /// (no participant's deletion takes it along); `POST /api/sessions/{id}/chat`
    /// on it is a 400 (no agent answers there).
    #[endpoint { method = POST, path = "/v1/conversations", tags = ["openai"] }]
    async fn openai_conversation_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateConversationRequest>,
    ) -> V1<HttpResponseOk<Conversation>>;

    /// A conversation: any session of the tenant, whichever API made it.
    #[endpoint { method = GET, path = "/v1/conversations/{conversation_id}", tags = ["openai"] }]
    async fn openai_conversation_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationPath>,
    ) -> V1<HttpResponseOk<Conversation>>;

    /// Replace a conversation's metadata.
    #[endpoint { method = POST, path = "/v1/conversations/{conversation_id}", tags = ["openai"] }]
    async fn openai_conversation_update(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<UpdateConversationRequest>,
    ) -> V1<HttpResponseOk<Conversation>>;

    /// Delete a conversation: its session and its messages, as `DELETE /api/sessions/{id}`.
    #[endpoint { method = DELETE, path = "/v1/conversations/{conversation_id}", tags = ["openai"] }]
    async fn openai_conversation_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationPath>,
    ) -> V1<HttpResponseOk<ConversationDeleted>>;

    /// The items of a conversation: its session's messages in OpenAI's item shapes.
    ///
    /// Paged by cursor: `after` (an item id), `limit` (1 to 100, default 20),
    /// `order` (`desc` by default). Finding `after` reads the messages before it
    /// in order, as an offset would; an `after` that is no item of the
    /// conversation is a 404.
    #[endpoint { method = GET, path = "/v1/conversations/{conversation_id}/items", tags = ["openai"] }]
    async fn openai_item_list(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationPath>,
        query: QueryParams<ItemListParams>,
    ) -> V1<HttpResponseOk<ItemList>>;

    /// Append items to a conversation, in one write: each `message` a message of
    /// the session, consecutive `function_call`s one assistant message calling
    /// those tools, each `function_call_output` a `tool` message.
    #[endpoint { method = POST, path = "/v1/conversations/{conversation_id}/items", tags = ["openai"] }]
    async fn openai_item_create(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateItemsRequest>,
    ) -> V1<HttpResponseOk<ItemList>>;

    /// An item of a conversation.
    #[endpoint { method = GET, path = "/v1/conversations/{conversation_id}/items/{item_id}", tags = ["openai"] }]
    async fn openai_item_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationItemPath>,
    ) -> V1<HttpResponseOk<ConversationItem>>;

    /// Delete an item of a conversation: its message (an assistant message's
    /// `function_call` items go with it, all of them); answers the conversation.
    #[endpoint { method = DELETE, path = "/v1/conversations/{conversation_id}/items/{item_id}", tags = ["openai"] }]
    async fn openai_item_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ConversationItemPath>,
    ) -> V1<HttpResponseOk<Conversation>>;
    /// Create a response (OpenAI's `POST /v1/responses`): one turn of a session.
    ///
    /// `model` = one of the tenant's agents' ids: that agent answers (its system
    /// message, tools, recall over its and the session's users' documents,
    /// default settings), else the provider serving the model name. The turn
    /// continues `previous_response_id`'s session, or is appended to
    /// `conversation` (a session), or starts a new session (the agent's, or one
    /// with no agent); its history within the session's token budget comes
    /// before the new `input`, `instructions` after the system message.
    /// With `store` (the default) the input items and the answer are saved as the
    /// session's messages, with the response, in one write after the model
    /// answered (a new session too); nothing is saved when the call fails, or
    /// with `store: false` (then the id cannot be read or continued).
    ///
    /// The model's tool calls come back as `function_call` output items; answer
    /// them with `function_call_output` items in the next response's `input`
    /// (one whose `call_id` names no call of the conversation, nor of a
    /// `function_call` item before it, is a 400 naming it). A `compaction`
    /// item (from `POST /v1/responses/compact`) becomes a system message
    /// carrying its summary.
    ///
    /// `stream: true` answers `text/event-stream`: `event: <type>` and `data:
    /// <ResponseStreamEvent>` per event, `response.created` first and
    /// `response.completed` last (or `response.failed`, whose response carries
    /// the `error`), `sequence_number` counting from 0. A client that goes
    /// away mid-stream does not stop the response: it runs to its end and is
    /// stored as if the client had stayed (read it with `GET`).
    ///
    /// `input` may be left out when the turn continues `previous_response_id`
    /// or a `conversation`: the model answers their history as it stands (the
    /// turn then adds only its answer).
    ///
    /// A user message's content parts may be images (`input_image`: an http(s)
    /// URL or a data URL) and files (`input_file`, by `file_data`), each at most
    /// `models.max_input_part_bytes` bytes (8 MiB unless configured); they are
    /// saved with the message (`GET /api/sessions/{id}/messages` shows them in
    /// `parts`; the input items show them as they were given) and sent to the
    /// provider again when the chain or conversation goes on.
    ///
    /// `background: true` runs the response in the background: see
    /// `background`, `openai_response_get` and `openai_response_cancel`.
    ///
    /// Unsupported (400, naming the `param`): tools other
    /// than `function`, input items other than messages, function calls and
    /// their outputs and compactions, content parts other than text, images
    /// and files, files by `file_id` or `file_url`, images or files outside
    /// user messages; `previous_response_id` with `conversation`; no `input`
    /// and nothing to continue. A request that fails validation is a 400
    /// `invalid_request_error` whose `param` names the field
    /// (`input[0].content`). Errors as for chat completions. The same
    /// responses run over a WebSocket: see `openai_response_socket`.
    #[endpoint { method = POST, path = "/v1/responses", tags = ["openai"] }]
    async fn openai_response_create(
        rqctx: RequestContext<Self::Context>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateResponseRequest>,
    ) -> V1<ChatAnswer<ModelResponse>>;

    /// Responses over a WebSocket (the Open Responses WebSocket mode).
    ///
    /// `GET /v1/responses` with the WebSocket upgrade headers and the API key
    /// (a missing or unknown key is a 401 before the upgrade). Then each text
    /// message the client sends is `{"type": "response.create", ...}` with the
    /// body of `POST /v1/responses` (without `stream` and `background`), and
    /// the server answers with the events `stream: true` sends, each
    /// `ResponseStreamEvent` one text message, its `sequence_number` counting
    /// from 0 in each response, ending with exactly one `response.completed`,
    /// `response.incomplete` or `response.failed` (no `[DONE]`). Responses run
    /// one at a time, in the order their messages came (at most 16 wait; more
    /// are refused with an error message).
    ///
    /// `previous_response_id` continues a stored response as on HTTP; a
    /// response made on this connection with `store: false` can be continued
    /// on this connection only (with `store: false`): the connection keeps the
    /// conversation of its latest 16 such responses in memory, never in the
    /// store. An id found neither there nor in the store is an error
    /// `previous_response_not_found` (param `previous_response_id`); a
    /// continuation that fails takes its `previous_response_id` out of the
    /// connection's memory.
    ///
    /// A message that cannot start a response (not JSON, not a
    /// `response.create`, a field that fails validation, an unsupported
    /// feature, a missing previous response, a `function_call_output` whose
    /// `call_id` names no call of the conversation) is answered by one
    /// `ResponseSocketError` message (`{"type": "error", "status", "error":
    /// {type, code, message, param}}`), with the status the same failure has
    /// on `POST /v1/responses`; the connection stays open. A message larger
    /// than the server's `request_body_max_bytes` closes the connection (close
    /// code 1009), as does a connection with no message for the server's
    /// `websocket_idle_timeout_s` while no response runs (1000), and one open
    /// for 60 minutes (an error `websocket_connection_limit_reached` first).
    /// A client that closes while a response runs does not stop it: it runs
    /// to its end and is saved (with `store`), as on HTTP.
    #[endpoint { method = GET, path = "/v1/responses", tags = ["openai"] }]
    async fn openai_response_socket(
        rqctx: RequestContext<Self::Context>,
        upgrade: WebsocketUpgrade,
    ) -> V1<SwitchingToWebsocket>;

    /// Compact a conversation (OpenAI's `POST /v1/responses/compact`).
    ///
    /// Dropshot's router takes no literal segment beside `{response_id}`, so
    /// the route is `POST /v1/responses/{response_id}` and its one id is
    /// `compact` (any other is a 404). The window compacted is
    /// `previous_response_id`'s stored conversation (its session's messages up
    /// to its answer), then `input`. The model (`model`: an agent's id or a
    /// model name) summarises the whole window, following `instructions` when
    /// given; nothing is stored. The answer's `output` is the window's user
    /// messages as they were, then one `compaction` item whose
    /// `encrypted_content` holds that summary (sealed, not encrypted: see
    /// `CompactedItem`). Send `output` as the start of a new chain's `input`
    /// (no `previous_response_id`), the next user message after it: the
    /// compaction item becomes a system message carrying the summary.
    ///
    /// A missing `model` is a 400 naming it; neither `input` nor
    /// `previous_response_id`, a 400 naming `input`. Errors as for responses.
    #[endpoint { method = POST, path = "/v1/responses/{response_id}", tags = ["openai"] }]
    async fn openai_response_compact(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<CompactPath>,
        idempotency: IdempotencyKey,
        body: JsonBody<CompactResponseRequest>,
    ) -> V1<HttpResponseOk<CompactedResponse>>;

    /// A stored response, as it stands: a background response `queued` or
    /// `in_progress` shows the output its run has committed so far.
    ///
    /// `stream=true` answers its events instead (`text/event-stream`, as
    /// `stream: true` on its creation), from `starting_after + 1` on when
    /// `starting_after` is given, and follows a background response that is
    /// under way until it ends. The events are those of its items as they
    /// were committed: `response.created` (0), `response.in_progress` (1),
    /// then per output item `response.output_item.added`, its content's
    /// events (a message's text in one `response.output_text.delta`), and
    /// `response.output_item.done`; last `response.completed`,
    /// `response.incomplete` or `response.failed` (a cancelled response's
    /// stream ends after its items, as OpenAI's has no such event). The
    /// same response's events always have the same sequence numbers, so a
    /// client that lost its stream attaches again after the last it saw.
    #[endpoint { method = GET, path = "/v1/responses/{response_id}", tags = ["openai"] }]
    async fn openai_response_get(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ResponsePath>,
        query: QueryParams<ResponseGetParams>,
    ) -> V1<ChatAnswer<ModelResponse>>;

    /// Cancel a background response (OpenAI's `POST /v1/responses/{id}/cancel`).
    ///
    /// A `queued` or `in_progress` background response becomes `cancelled` at
    /// once: its run stops (a model or tool call under way is dropped; on
    /// another server, at its next commit), what it committed stays in the
    /// conversation, and its calls of the server's tools that were in flight
    /// are answered "not run: the response was cancelled". One that has ended
    /// is answered as it is. A response that was not created with
    /// `background: true` is a 400.
    #[endpoint { method = POST, path = "/v1/responses/{response_id}/cancel", tags = ["openai"] }]
    async fn openai_response_cancel(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ResponsePath>,
    ) -> V1<HttpResponseOk<ModelResponse>>;

    /// Delete a stored response, and its turn's messages from its session.
    #[endpoint { method = DELETE, path = "/v1/responses/{response_id}", tags = ["openai"] }]
    async fn openai_response_delete(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ResponsePath>,
    ) -> V1<HttpResponseOk<ResponseDeleted>>;

    /// The input items of a stored response (the messages its input made), paged
    /// as a conversation's items are.
    #[endpoint { method = GET, path = "/v1/responses/{response_id}/input_items", tags = ["openai"] }]
    async fn openai_response_input_items(
        rqctx: RequestContext<Self::Context>,
        path: PathParams<ResponsePath>,
        query: QueryParams<ItemListParams>,
    ) -> V1<HttpResponseOk<ItemList>>;
}
