//! The handler layer: all of HTTP and nothing else.
//!
//! [`Impl`] implements the contract's [`AgentPlatformApi`]; each route's
//! handler lives in its resource's module and is thin: it takes validated
//! input from the extractors, runs the domain call through [`run`] (which
//! authenticates the caller and honours an `Idempotency-Key`) and maps the
//! result. Domain errors become HTTP in one place ([`error`]); a streamed
//! chat's events and an execution's transitions are framed as server-sent
//! events in [`stream`].

pub mod agents;
pub mod chat;
pub mod console;
pub mod context;
pub mod docs;
pub mod error;
pub mod executions;
pub mod keys;
pub mod memory;
pub mod openai;
pub mod openai_models;
pub mod paging;
pub mod run;
pub mod secrets;
pub mod service;
pub mod sessions;
pub mod socket;
pub mod stream;
pub mod tasks;
pub mod tools;
pub mod users;

use dropshot::RequestContext;
use serde_json::Value;

pub use context::Ctx;

use crate::api::types::*;
use crate::api::{
    AgentPlatformApi, ApiError, ChatAnswer, Created, Deleted, EventStream, IdempotencyKey, JsonBody,
    LastEventId, Ok200, PathParams, QueryParams, Reply, SwitchingToWebsocket, V1,
};

/// The implementation of the contract.
pub enum Impl {}

impl AgentPlatformApi for Impl {
    type Context = Ctx;

    async fn healthz(rqctx: RequestContext<Ctx>) -> Ok200<Health> {
        service::healthz(rqctx).await
    }

    async fn openapi_document(rqctx: RequestContext<Ctx>) -> Ok200<serde_json::Map<String, Value>> {
        service::openapi_document(rqctx).await
    }

    async fn console(
        rqctx: RequestContext<Ctx>,
        path: dropshot::Path<ConsolePath>,
    ) -> Result<http::Response<dropshot::Body>, ApiError> {
        console::console(rqctx, path).await
    }

    async fn key_create(rqctx: RequestContext<Ctx>, key: IdempotencyKey) -> Created<ApiKeyCreated> {
        keys::key_create(rqctx, key).await
    }

    async fn key_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<KeyListParams>,
    ) -> Ok200<ListResponse<ApiKey>> {
        keys::key_list(rqctx, query).await
    }

    async fn key_delete(rqctx: RequestContext<Ctx>, path: PathParams<KeyPath>) -> Deleted {
        keys::key_delete(rqctx, path).await
    }

    async fn secret_create(
        rqctx: RequestContext<Ctx>,
        idempotency: IdempotencyKey,
        body: JsonBody<CreateSecretRequest>,
    ) -> Created<Secret> {
        secrets::secret_create(rqctx, idempotency, body).await
    }

    async fn secret_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<SecretListParams>,
    ) -> Ok200<ListResponse<Secret>> {
        secrets::secret_list(rqctx, query).await
    }

    async fn secret_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SecretPath>,
        body: JsonBody<UpdateSecretRequest>,
    ) -> Ok200<Secret> {
        secrets::secret_update(rqctx, path, body).await
    }

    async fn secret_delete(rqctx: RequestContext<Ctx>, path: PathParams<SecretPath>) -> Deleted {
        secrets::secret_delete(rqctx, path).await
    }

    async fn user_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateUserRequest>,
    ) -> Created<User> {
        users::user_create(rqctx, key, body).await
    }

    async fn user_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<User>> {
        users::user_list(rqctx, query).await
    }

    async fn user_get(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Ok200<User> {
        users::user_get(rqctx, path).await
    }

    async fn user_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        body: JsonBody<UpdateUserRequest>,
    ) -> Ok200<User> {
        users::user_update(rqctx, path, body).await
    }

    async fn user_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        body: JsonBody<PatchUserRequest>,
    ) -> Ok200<User> {
        users::user_patch(rqctx, path, body).await
    }

    async fn user_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Deleted {
        users::user_delete(rqctx, path).await
    }

    async fn agent_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateAgentRequest>,
    ) -> Created<Agent> {
        agents::agent_create(rqctx, key, body).await
    }

    async fn agent_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Agent>> {
        agents::agent_list(rqctx, query).await
    }

    async fn agent_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Ok200<Agent> {
        agents::agent_get(rqctx, path).await
    }

    async fn agent_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<CreateAgentRequest>,
    ) -> Ok200<Agent> {
        agents::agent_update(rqctx, path, body).await
    }

    async fn agent_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<PatchAgentRequest>,
    ) -> Ok200<Agent> {
        agents::agent_patch(rqctx, path, body).await
    }

    async fn agent_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Deleted {
        agents::agent_delete(rqctx, path).await
    }

    async fn agent_import(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentImportPath>,
        query: QueryParams<AgentImportParams>,
        key: IdempotencyKey,
        body: JsonBody<AgentFile>,
    ) -> Created<AgentFileImport> {
        memory::agent_import(rqctx, path, query, key, body).await
    }

    async fn agent_export(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<AgentExportParams>,
    ) -> Ok200<AgentFile> {
        memory::agent_export(rqctx, path, query).await
    }

    async fn agent_block_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateBlockRequest>,
    ) -> Created<Block> {
        memory::block_create(rqctx, memory::of_agent(path.into_inner().id), key, body).await
    }

    async fn agent_block_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
    ) -> Ok200<ListResponse<Block>> {
        memory::block_list(rqctx, memory::of_agent(path.into_inner().id)).await
    }

    async fn agent_block_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentBlockPath>) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_get(rqctx, memory::of_agent(p.id), p.block_id).await
    }

    async fn agent_block_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentBlockPath>,
        body: JsonBody<PatchBlockRequest>,
    ) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_patch(rqctx, memory::of_agent(p.id), p.block_id, body).await
    }

    async fn agent_block_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentBlockPath>) -> Deleted {
        let p = path.into_inner();
        memory::block_delete(rqctx, memory::of_agent(p.id), p.block_id).await
    }

    async fn agent_block_edits(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentBlockPath>,
        query: QueryParams<BlockEditListParams>,
    ) -> Ok200<ListResponse<BlockEdit>> {
        let p = path.into_inner();
        memory::block_edits(rqctx, memory::of_agent(p.id), p.block_id, query).await
    }

    async fn agent_block_revert(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentBlockEditPath>,
    ) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_revert(rqctx, memory::of_agent(p.id), p.block_id, p.edit_id).await
    }

    async fn user_block_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateBlockRequest>,
    ) -> Created<Block> {
        memory::block_create(rqctx, memory::of_user(path.into_inner().user_id), key, body).await
    }

    async fn user_block_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
    ) -> Ok200<ListResponse<Block>> {
        memory::block_list(rqctx, memory::of_user(path.into_inner().user_id)).await
    }

    async fn user_block_get(rqctx: RequestContext<Ctx>, path: PathParams<UserBlockPath>) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_get(rqctx, memory::of_user(p.user_id), p.block_id).await
    }

    async fn user_block_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserBlockPath>,
        body: JsonBody<PatchBlockRequest>,
    ) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_patch(rqctx, memory::of_user(p.user_id), p.block_id, body).await
    }

    async fn user_block_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserBlockPath>) -> Deleted {
        let p = path.into_inner();
        memory::block_delete(rqctx, memory::of_user(p.user_id), p.block_id).await
    }

    async fn user_block_edits(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserBlockPath>,
        query: QueryParams<BlockEditListParams>,
    ) -> Ok200<ListResponse<BlockEdit>> {
        let p = path.into_inner();
        memory::block_edits(rqctx, memory::of_user(p.user_id), p.block_id, query).await
    }

    async fn agent_learning_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
    ) -> Ok200<LearningPolicy> {
        memory::learning_get(rqctx, path).await
    }

    async fn agent_learning_put(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<LearningPolicy>,
    ) -> Ok200<LearningPolicy> {
        memory::learning_put(rqctx, path, body).await
    }

    async fn user_block_approve(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<Block> {
        memory::block_approve(rqctx, path).await
    }

    async fn user_block_reject(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<BlockEdit> {
        memory::block_reject(rqctx, path).await
    }

    async fn user_block_revert(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserBlockEditPath>,
    ) -> Ok200<Block> {
        let p = path.into_inner();
        memory::block_revert(rqctx, memory::of_user(p.user_id), p.block_id, p.edit_id).await
    }

    async fn session_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateSessionRequest>,
    ) -> Created<Session> {
        sessions::session_create(rqctx, key, body).await
    }

    async fn session_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Session>> {
        sessions::session_list(rqctx, query).await
    }

    async fn session_get(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Ok200<Session> {
        sessions::session_get(rqctx, path).await
    }

    async fn session_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session> {
        sessions::session_update(rqctx, path, body).await
    }

    async fn session_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session> {
        sessions::session_patch(rqctx, path, body).await
    }

    async fn session_delete(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Deleted {
        sessions::session_delete(rqctx, path).await
    }

    async fn message_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        query: QueryParams<MessageListParams>,
    ) -> Ok200<ListResponse<Message>> {
        sessions::message_list(rqctx, path, query).await
    }

    async fn message_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateMessageRequest>,
    ) -> Created<Message> {
        sessions::message_create(rqctx, path, key, body).await
    }

    async fn session_chat(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        key: IdempotencyKey,
        body: JsonBody<ChatRequest>,
    ) -> Result<Reply<ChatAnswer>, ApiError> {
        chat::session_chat(rqctx, path, key, body).await
    }

    async fn session_run_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        key: IdempotencyKey,
        body: JsonBody<SessionRunRequest>,
    ) -> Created<SessionRun> {
        chat::session_run_create(rqctx, path, key, body).await
    }

    async fn session_run_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionRunPath>,
    ) -> Ok200<SessionRun> {
        chat::session_run_get(rqctx, path).await
    }

    async fn session_run_cancel(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionRunPath>,
    ) -> Ok200<SessionRun> {
        chat::session_run_cancel(rqctx, path).await
    }

    async fn session_tool_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
    ) -> Ok200<ListResponse<Tool>> {
        sessions::session_tool_list(rqctx, path).await
    }

    async fn tool_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateToolRequest>,
    ) -> Created<Tool> {
        tools::tool_create(rqctx, path, key, body).await
    }

    async fn tool_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Tool>> {
        tools::tool_list(rqctx, path, query).await
    }

    async fn tool_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<CreateToolRequest>,
    ) -> Ok200<Tool> {
        tools::tool_update(rqctx, path, body).await
    }

    async fn tool_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<PatchToolRequest>,
    ) -> Ok200<Tool> {
        tools::tool_patch(rqctx, path, body).await
    }

    async fn tool_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentToolPath>) -> Deleted {
        tools::tool_delete(rqctx, path).await
    }

    async fn task_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Task>> {
        tasks::task_list(rqctx, path, query).await
    }

    async fn task_create_or_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<PutTaskRequest>,
    ) -> Ok200<Task> {
        tasks::task_create_or_update(rqctx, path, body).await
    }

    async fn task_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Ok200<Task> {
        tasks::task_get(rqctx, path).await
    }

    async fn task_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Deleted {
        tasks::task_delete(rqctx, path).await
    }

    async fn task_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<PutTaskRequest>,
    ) -> Created<Task> {
        tasks::task_create(rqctx, path, key, body).await
    }

    async fn task_get_by_id(rqctx: RequestContext<Ctx>, path: PathParams<TaskPath>) -> Ok200<Task> {
        tasks::task_get_by_id(rqctx, path).await
    }

    async fn execution_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<TaskPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateExecutionRequest>,
    ) -> Created<Execution> {
        executions::execution_create(rqctx, path, key, body).await
    }

    async fn execution_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<TaskPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Execution>> {
        executions::execution_list(rqctx, path, query).await
    }

    async fn execution_get(rqctx: RequestContext<Ctx>, path: PathParams<ExecutionPath>) -> Ok200<Execution> {
        executions::execution_get(rqctx, path).await
    }

    async fn execution_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ExecutionPath>,
        body: JsonBody<UpdateExecutionRequest>,
    ) -> Ok200<Execution> {
        executions::execution_update(rqctx, path, body).await
    }

    async fn transition_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ExecutionPath>,
        query: QueryParams<TransitionListParams>,
    ) -> Ok200<ListResponse<Transition>> {
        executions::transition_list(rqctx, path, query).await
    }

    async fn transition_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ExecutionTransitionPath>,
    ) -> Ok200<Transition> {
        executions::transition_get(rqctx, path).await
    }

    async fn transition_stream(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ExecutionPath>,
        last_event_id: LastEventId,
    ) -> Result<Reply<EventStream>, ApiError> {
        executions::transition_stream(rqctx, path, last_event_id).await
    }

    async fn agent_doc_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc> {
        docs::agent_doc_create(rqctx, path, key, body).await
    }

    async fn agent_doc_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>> {
        docs::agent_doc_list(rqctx, path, query).await
    }

    async fn agent_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Ok200<Doc> {
        docs::agent_doc_get(rqctx, path).await
    }

    async fn agent_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Deleted {
        docs::agent_doc_delete(rqctx, path).await
    }

    async fn agent_search_text(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse> {
        docs::agent_search_text(rqctx, path, query).await
    }

    async fn agent_search(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse> {
        docs::agent_search(rqctx, path, key, body).await
    }

    async fn user_doc_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc> {
        docs::user_doc_create(rqctx, path, key, body).await
    }

    async fn user_doc_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>> {
        docs::user_doc_list(rqctx, path, query).await
    }

    async fn user_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Ok200<Doc> {
        docs::user_doc_get(rqctx, path).await
    }

    async fn user_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Deleted {
        docs::user_doc_delete(rqctx, path).await
    }

    async fn user_search_text(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse> {
        docs::user_search_text(rqctx, path, query).await
    }

    async fn user_search(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        key: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse> {
        docs::user_search(rqctx, path, key, body).await
    }

    async fn openai_model_list(rqctx: RequestContext<Ctx>) -> V1<dropshot::HttpResponseOk<ModelList>> {
        openai::openai_model_list(rqctx).await
    }

    async fn openai_model_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ModelPath>,
    ) -> V1<dropshot::HttpResponseOk<Model>> {
        openai_models::openai_model_get(rqctx, path).await
    }

    async fn openai_embedding_create(
        rqctx: RequestContext<Ctx>,
        body: JsonBody<EmbeddingRequest>,
    ) -> V1<dropshot::HttpResponseOk<EmbeddingList>> {
        openai_models::openai_embedding_create(rqctx, body).await
    }

    async fn openai_chat_completion(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<ChatCompletionRequest>,
    ) -> V1<ChatAnswer<ChatCompletion>> {
        openai::openai_chat_completion(rqctx, key, body).await
    }

    async fn openai_conversation_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateConversationRequest>,
    ) -> V1<dropshot::HttpResponseOk<Conversation>> {
        openai::openai_conversation_create(rqctx, key, body).await
    }

    async fn openai_conversation_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationPath>,
    ) -> V1<dropshot::HttpResponseOk<Conversation>> {
        openai::openai_conversation_get(rqctx, path).await
    }

    async fn openai_conversation_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationPath>,
        key: IdempotencyKey,
        body: JsonBody<UpdateConversationRequest>,
    ) -> V1<dropshot::HttpResponseOk<Conversation>> {
        openai::openai_conversation_update(rqctx, path, key, body).await
    }

    async fn openai_conversation_delete(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationPath>,
    ) -> V1<dropshot::HttpResponseOk<ConversationDeleted>> {
        openai::openai_conversation_delete(rqctx, path).await
    }

    async fn openai_item_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationPath>,
        query: QueryParams<ItemListParams>,
    ) -> V1<dropshot::HttpResponseOk<ItemList>> {
        openai::openai_item_list(rqctx, path, query).await
    }

    async fn openai_item_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateItemsRequest>,
    ) -> V1<dropshot::HttpResponseOk<ItemList>> {
        openai::openai_item_create(rqctx, path, key, body).await
    }

    async fn openai_item_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationItemPath>,
    ) -> V1<dropshot::HttpResponseOk<ConversationItem>> {
        openai::openai_item_get(rqctx, path).await
    }

    async fn openai_item_delete(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ConversationItemPath>,
    ) -> V1<dropshot::HttpResponseOk<Conversation>> {
        openai::openai_item_delete(rqctx, path).await
    }

    async fn openai_response_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateResponseRequest>,
    ) -> V1<ChatAnswer<ModelResponse>> {
        openai::openai_response_create(rqctx, key, body).await
    }

    async fn openai_response_socket(
        rqctx: RequestContext<Ctx>,
        upgrade: dropshot::WebsocketUpgrade,
    ) -> V1<SwitchingToWebsocket> {
        openai::openai_response_socket(rqctx, upgrade).await
    }

    async fn openai_response_compact(
        rqctx: RequestContext<Ctx>,
        path: PathParams<CompactPath>,
        key: IdempotencyKey,
        body: JsonBody<CompactResponseRequest>,
    ) -> V1<dropshot::HttpResponseOk<CompactedResponse>> {
        openai::openai_response_compact(rqctx, path, key, body).await
    }

    async fn openai_response_get(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ResponsePath>,
        query: QueryParams<ResponseGetParams>,
    ) -> V1<ChatAnswer<ModelResponse>> {
        openai::openai_response_get(rqctx, path, query).await
    }

    async fn openai_response_cancel(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ResponsePath>,
    ) -> V1<dropshot::HttpResponseOk<ModelResponse>> {
        openai::openai_response_cancel(rqctx, path).await
    }

    async fn openai_response_delete(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ResponsePath>,
    ) -> V1<dropshot::HttpResponseOk<ResponseDeleted>> {
        openai::openai_response_delete(rqctx, path).await
    }

    async fn openai_response_input_items(
        rqctx: RequestContext<Ctx>,
        path: PathParams<ResponsePath>,
        query: QueryParams<ItemListParams>,
    ) -> V1<dropshot::HttpResponseOk<ItemList>> {
        openai::openai_response_input_items(rqctx, path, query).await
    }
}
