//! The handlers: the implementation of [`AgentPlatformApi`].
//!
//! Each one takes validated input from the extractors, authenticates the
//! caller, calls the domain with the caller's tenant and maps the result.

use std::future::Future;

use dropshot::{ErrorStatusCode, HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};
use http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use slog::error;

use crate::api::types::*;
use crate::api::types_chat::*;
use crate::api::types_sessions::*;
use crate::api::types_tasks::*;
use crate::api::types_tools::*;
use crate::api::*;
use crate::app::idempotency::{self, Begun, Remembered};
use crate::app::{self, App, Tenant};
use crate::store;

/// The server context: the application, the cached OpenAPI document and how
/// long a request body may take to arrive (read by [`crate::api::JsonBody`]).
pub struct Ctx {
    pub app: App,
    pub spec: serde_json::Map<String, Value>,
    pub body_read_timeout: std::time::Duration,
}

pub enum Impl {}

/// Finds the tenant of the request's API key (`Bearer <key>` or a bare key).
async fn authenticate(rqctx: &RequestContext<Ctx>) -> Result<Tenant, ApiError> {
    let rid = rqctx.request_id.as_str();
    let unauthorized = |msg: &str| ApiError::new(ErrorStatusCode::UNAUTHORIZED, "unauthorized", msg, rid);
    let Some(header) = rqctx.request.headers().get(http::header::AUTHORIZATION) else {
        return Err(unauthorized("missing API key: send the header `Authorization: Bearer <key>`"));
    };
    let header =
        header.to_str().map_err(|_| unauthorized("the Authorization header is not valid text"))?.trim();
    let key = match header.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => header,
    };
    match rqctx.context().app.authenticate(key).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(unauthorized("unknown API key")),
        Err(e) => Err(ApiError::from_domain(e, rid)),
    }
}

/// Runs an authenticated operation and turns its outcome into a [`Reply`].
async fn run<R, F, Fut>(rqctx: &RequestContext<Ctx>, op: F) -> Result<Reply<R>, ApiError>
where
    F: FnOnce(App, Tenant) -> Fut,
    Fut: Future<Output = app::Result<R>>,
{
    let tenant = match authenticate(rqctx).await {
        Ok(t) => t,
        Err(e) => return Ok(Reply::Err(e)),
    };
    match op(rqctx.context().app.clone(), tenant).await {
        Ok(r) => Ok(Reply::Ok(r)),
        Err(e) => Ok(Reply::Err(domain_error(rqctx, e))),
    }
}

fn domain_error(rqctx: &RequestContext<Ctx>, e: app::Error) -> ApiError {
    if let app::Error::Internal(m) = &e {
        error!(rqctx.log, "internal error"; "error" => m.as_str());
    }
    ApiError::from_domain(e, &rqctx.request_id)
}

/// A success answer of a POST, as remembered with its `Idempotency-Key`.
trait Replayable {
    /// The status of the success.
    const STATUS: StatusCode;
    /// The JSON body, or `None` for an answer that is not replayed (a stream).
    fn json(&self) -> Option<String>;
}

impl<T: Serialize + JsonSchema + Send + Sync + 'static> Replayable for HttpResponseCreated<T> {
    const STATUS: StatusCode = StatusCode::CREATED;
    fn json(&self) -> Option<String> {
        serde_json::to_string(&self.0).ok()
    }
}

impl<T: Serialize + JsonSchema + Send + Sync + 'static> Replayable for HttpResponseOk<T> {
    const STATUS: StatusCode = StatusCode::OK;
    fn json(&self) -> Option<String> {
        serde_json::to_string(&self.0).ok()
    }
}

impl Replayable for ChatAnswer {
    const STATUS: StatusCode = StatusCode::OK;
    fn json(&self) -> Option<String> {
        match self {
            ChatAnswer::Json(r) => serde_json::to_string(r).ok(),
            ChatAnswer::Stream(_) => None,
        }
    }
}

/// [`run`] for a POST, honouring its `Idempotency-Key` (see [`app::idempotency`]):
/// a repeat answers the remembered answer, a new request runs under a claim that
/// its write commits with. `body` is the digest of the request body;
/// `withheld`, for an answer that must not be stored (it shows a secret), says
/// what a repeat is told instead (a 409).
async fn run_once<R, F, Fut>(
    rqctx: &RequestContext<Ctx>,
    key: IdempotencyKey,
    body: Option<[u8; 32]>,
    withheld: Option<fn(&R) -> String>,
    op: F,
) -> Result<Reply<R>, ApiError>
where
    R: Replayable,
    F: FnOnce(App, Tenant) -> Fut,
    Fut: Future<Output = app::Result<R>>,
{
    let Some(key) = key.0 else { return run(rqctx, op).await };
    let tenant = match authenticate(rqctx).await {
        Ok(t) => t,
        Err(e) => return Ok(Reply::Err(e)),
    };
    let app = rqctx.context().app.clone();
    let (method, path) = (rqctx.request.method().as_str(), rqctx.request.uri().path());
    let fingerprint = idempotency::fingerprint(method, path, body.as_ref().map_or(&[][..], |d| &d[..]));
    let begun =
        app.idempotency_begin(tenant, &key, format!("{method} {path}"), fingerprint, R::STATUS.as_u16());
    let (claim, _queue) = match begun.await {
        Err(e) => return Ok(Reply::Err(domain_error(rqctx, e))),
        Ok(Begun::Replay(Remembered::Answer { status, body })) => {
            let status = StatusCode::from_u16(status).unwrap_or(R::STATUS);
            return Ok(Reply::Replayed { status, body });
        }
        Ok(Begun::Replay(Remembered::Withheld { detail })) => {
            return Ok(Reply::Err(domain_error(rqctx, app::Error::Conflict(detail))));
        }
        Ok(Begun::Fresh(claim, queue)) => (claim, queue),
    };
    let answer = match claim.scope(op(app.clone(), tenant)).await {
        Ok(r) => r,
        Err(e) => return Ok(Reply::Err(domain_error(rqctx, e))),
    };
    let remembered = match withheld {
        Some(detail) => Some(Remembered::Withheld { detail: detail(&answer) }),
        None => answer.json().map(|body| Remembered::Answer { status: R::STATUS.as_u16(), body }),
    };
    if let Some(remembered) = remembered
        && let Err(e) = app.idempotency_save(&claim, remembered).await
    {
        // It answers anyway: it wrote nothing else, so a repeat runs it again.
        error!(rqctx.log, "the answer of a request with an Idempotency-Key was not remembered";
            "error" => e.to_string());
    }
    Ok(Reply::Ok(answer))
}

pub fn list_query(p: &ListParams) -> store::ListQuery {
    store::ListQuery {
        limit: p.limit.clamp(1, 1000) as usize,
        offset: p.offset.max(0) as usize,
        sort_by: match p.sort_by {
            SortBy::CreatedAt => store::SortBy::CreatedAt,
            SortBy::UpdatedAt => store::SortBy::UpdatedAt,
        },
        direction: match p.direction {
            Direction::Asc => store::Direction::Asc,
            Direction::Desc => store::Direction::Desc,
        },
        metadata_filter: p.filter(),
        // Room for `{"items":[` and `]}` around the items.
        max_bytes: Some(LIST_PAGE_MAX_BYTES - 16),
    }
}

impl AgentPlatformApi for Impl {
    type Context = Ctx;

    async fn healthz(rqctx: RequestContext<Ctx>) -> Ok200<Health> {
        match rqctx.context().app.store.health().await {
            Ok(()) => Ok(Reply::Ok(HttpResponseOk(Health { status: "ok".into() }))),
            // 503 whatever the cause (a load balancer reads the status), the code names it.
            Err(e) => {
                let code = match &e {
                    store::StoreError::Full(_) => "insufficient_storage",
                    _ => "store_unavailable",
                };
                let rid = rqctx.request_id.as_str();
                Ok(Reply::Err(ApiError::new(ErrorStatusCode::SERVICE_UNAVAILABLE, code, e.to_string(), rid)))
            }
        }
    }

    async fn openapi_document(rqctx: RequestContext<Ctx>) -> Ok200<serde_json::Map<String, Value>> {
        Ok(Reply::Ok(HttpResponseOk(rqctx.context().spec.clone())))
    }

    async fn key_create(rqctx: RequestContext<Ctx>, key: IdempotencyKey) -> Created<ApiKeyCreated> {
        // The answer carries the key, which is never stored: a repeat cannot show it.
        fn withheld(created: &HttpResponseCreated<ApiKeyCreated>) -> String {
            let k = &created.0;
            format!(
                "the API key {} (prefix {}) was created by an earlier request with this \
                 Idempotency-Key; a key is shown only once: use it, or delete it if it was lost \
                 and create another",
                k.id, k.prefix
            )
        }
        run_once(&rqctx, key, None, Some(withheld), |app, t| async move {
            let (key, info) = app.tenant_key_create(t).await?;
            let created =
                ApiKeyCreated { id: info.id, key, prefix: info.prefix, created_at: info.created_at };
            Ok(HttpResponseCreated(created))
        })
        .await
    }

    async fn key_list(rqctx: RequestContext<Ctx>) -> Ok200<ListResponse<ApiKey>> {
        run(&rqctx, |app, t| async move {
            let items = app.tenant_key_list(t).await?;
            let items = items
                .into_iter()
                .map(|k| ApiKey { id: k.id, prefix: k.prefix, created_at: k.created_at })
                .collect();
            Ok(HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn key_delete(rqctx: RequestContext<Ctx>, path: PathParams<KeyPath>) -> Deleted {
        let id = path.into_inner().key_id;
        run(
            &rqctx,
            |app, t| async move { app.tenant_key_revoke(t, id).await.map(|()| HttpResponseDeleted()) },
        )
        .await
    }

    async fn user_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateUserRequest>,
    ) -> Created<User> {
        let (body, digest) = body.into_parts();
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.user_create(t, body).await.map(HttpResponseCreated)
        })
        .await
    }

    async fn user_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<User>> {
        let q = list_query(&query.into_inner());
        run(&rqctx, |app, t| async move {
            app.user_list(t, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn user_get(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Ok200<User> {
        let id = path.into_inner().user_id;
        run(&rqctx, |app, t| async move { app.user_get(t, id).await.map(HttpResponseOk) }).await
    }

    async fn user_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        body: JsonBody<UpdateUserRequest>,
    ) -> Ok200<User> {
        let (id, body) = (path.into_inner().user_id, body.into_inner());
        run(&rqctx, |app, t| async move { app.user_update(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn user_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        body: JsonBody<PatchUserRequest>,
    ) -> Ok200<User> {
        let (id, body) = (path.into_inner().user_id, body.into_inner());
        run(&rqctx, |app, t| async move { app.user_patch(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn user_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Deleted {
        let id = path.into_inner().user_id;
        run(&rqctx, |app, t| async move { app.user_delete(t, id).await.map(|()| HttpResponseDeleted()) })
            .await
    }

    async fn agent_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateAgentRequest>,
    ) -> Created<Agent> {
        let (body, digest) = body.into_parts();
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.agent_create(t, body).await.map(HttpResponseCreated)
        })
        .await
    }

    async fn agent_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Agent>> {
        let q = list_query(&query.into_inner());
        run(&rqctx, |app, t| async move {
            app.agent_list(t, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn agent_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Ok200<Agent> {
        let id = path.into_inner().id;
        run(&rqctx, |app, t| async move { app.agent_get(t, id).await.map(HttpResponseOk) }).await
    }

    async fn agent_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<CreateAgentRequest>,
    ) -> Ok200<Agent> {
        let (id, body) = (path.into_inner().id, body.into_inner());
        run(&rqctx, |app, t| async move { app.agent_update(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn agent_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<PatchAgentRequest>,
    ) -> Ok200<Agent> {
        let (id, body) = (path.into_inner().id, body.into_inner());
        run(&rqctx, |app, t| async move { app.agent_patch(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn agent_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Deleted {
        let id = path.into_inner().id;
        run(&rqctx, |app, t| async move { app.agent_delete(t, id).await.map(|()| HttpResponseDeleted()) })
            .await
    }

    async fn session_create(
        rqctx: RequestContext<Ctx>,
        key: IdempotencyKey,
        body: JsonBody<CreateSessionRequest>,
    ) -> Created<Session> {
        let (body, digest) = body.into_parts();
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.session_create(t, body).await.map(HttpResponseCreated)
        })
        .await
    }

    async fn session_list(
        rqctx: RequestContext<Ctx>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Session>> {
        let q = list_query(&query.into_inner());
        run(&rqctx, |app, t| async move {
            app.session_list(t, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn session_get(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Ok200<Session> {
        let id = path.into_inner().id;
        run(&rqctx, |app, t| async move { app.session_get(t, id).await.map(HttpResponseOk) }).await
    }

    async fn session_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session> {
        let (id, body) = (path.into_inner().id, body.into_inner());
        run(&rqctx, |app, t| async move { app.session_update(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn session_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        body: JsonBody<UpdateSessionRequest>,
    ) -> Ok200<Session> {
        let (id, body) = (path.into_inner().id, body.into_inner());
        run(&rqctx, |app, t| async move { app.session_update(t, id, body).await.map(HttpResponseOk) }).await
    }

    async fn session_delete(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Deleted {
        let id = path.into_inner().id;
        run(&rqctx, |app, t| async move { app.session_delete(t, id).await.map(|()| HttpResponseDeleted()) })
            .await
    }

    async fn message_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        query: QueryParams<MessageListParams>,
    ) -> Ok200<ListResponse<Message>> {
        let id = path.into_inner().id;
        let q = list_query(&query.into_inner().into());
        run(&rqctx, |app, t| async move {
            app.message_list(t, id, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn message_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateMessageRequest>,
    ) -> Created<Message> {
        let (id, (body, digest)) = (path.into_inner().id, body.into_parts());
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.message_create(t, id, body).await.map(HttpResponseCreated)
        })
        .await
    }

    async fn session_chat(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
        key: IdempotencyKey,
        body: JsonBody<ChatRequest>,
    ) -> Result<Reply<ChatAnswer>, ApiError> {
        let (id, (body, digest)) = (path.into_inner().id, body.into_parts());
        if body.stream {
            // A stream is not replayed (see the operation's description): it runs again.
            run(&rqctx, |app, t| async move { crate::http_stream::chat_stream(app, t, id, body).await }).await
        } else {
            run_once(&rqctx, key, digest, None, |app, t| async move {
                app.chat(t, id, body).await.map(ChatAnswer::Json)
            })
            .await
        }
    }

    async fn session_tool_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<SessionPath>,
    ) -> Ok200<ListResponse<Tool>> {
        let id = path.into_inner().id;
        run(&rqctx, |app, t| async move {
            app.session_tools(t, id).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn tool_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateToolRequest>,
    ) -> Created<Tool> {
        let (agent, (body, digest)) = (path.into_inner().id, body.into_parts());
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.tool_create(t, agent, body).await.map(HttpResponseCreated)
        })
        .await
    }

    async fn tool_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Tool>> {
        let agent = path.into_inner().id;
        let q = list_query(&query.into_inner());
        run(&rqctx, |app, t| async move {
            app.tool_list(t, agent, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn tool_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<CreateToolRequest>,
    ) -> Ok200<Tool> {
        let (p, body) = (path.into_inner(), body.into_inner());
        run(
            &rqctx,
            |app, t| async move { app.tool_update(t, p.id, p.tool_id, body).await.map(HttpResponseOk) },
        )
        .await
    }

    async fn tool_patch(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentToolPath>,
        body: JsonBody<PatchToolRequest>,
    ) -> Ok200<Tool> {
        let (p, body) = (path.into_inner(), body.into_inner());
        run(
            &rqctx,
            |app, t| async move { app.tool_patch(t, p.id, p.tool_id, body).await.map(HttpResponseOk) },
        )
        .await
    }

    async fn tool_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentToolPath>) -> Deleted {
        let p = path.into_inner();
        run(&rqctx, |app, t| async move {
            app.tool_delete(t, p.id, p.tool_id).await.map(|()| HttpResponseDeleted())
        })
        .await
    }

    async fn task_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Task>> {
        let agent = path.into_inner().id;
        let q = list_query(&query.into_inner());
        run(&rqctx, |app, t| async move {
            app.task_list(t, agent, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
        })
        .await
    }

    async fn task_create_or_update(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        body: JsonBody<PutTaskRequest>,
    ) -> Ok200<Task> {
        let (agent, body) = (path.into_inner().id, body.into_inner());
        run(&rqctx, |app, t| async move { app.task_put(t, agent, body).await.map(HttpResponseOk) }).await
    }

    async fn task_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Ok200<Task> {
        let p = path.into_inner();
        run(&rqctx, |app, t| async move { app.task_get(t, p.id, p.task_id).await.map(HttpResponseOk) }).await
    }

    async fn task_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Deleted {
        let p = path.into_inner();
        run(&rqctx, |app, t| async move {
            app.task_delete(t, p.id, p.task_id).await.map(|()| HttpResponseDeleted())
        })
        .await
    }
    async fn agent_doc_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc> {
        doc_create(&rqctx, agent(path.into_inner().id), key, body).await
    }

    async fn agent_doc_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>> {
        doc_list(&rqctx, agent(path.into_inner().id), query.into_inner()).await
    }

    async fn agent_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Ok200<Doc> {
        let p = path.into_inner();
        doc_get(&rqctx, agent(p.id), p.doc_id).await
    }

    async fn agent_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Deleted {
        let p = path.into_inner();
        doc_delete(&rqctx, agent(p.id), p.doc_id).await
    }

    async fn agent_search_text(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse> {
        doc_search(&rqctx, agent(path.into_inner().id), query.into_inner().into()).await
    }

    async fn agent_search(
        rqctx: RequestContext<Ctx>,
        path: PathParams<AgentPath>,
        key: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse> {
        doc_search_post(&rqctx, agent(path.into_inner().id), key, body).await
    }

    async fn user_doc_create(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        key: IdempotencyKey,
        body: JsonBody<CreateDocRequest>,
    ) -> Created<Doc> {
        doc_create(&rqctx, user(path.into_inner().user_id), key, body).await
    }

    async fn user_doc_list(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        query: QueryParams<ListParams>,
    ) -> Ok200<ListResponse<Doc>> {
        doc_list(&rqctx, user(path.into_inner().user_id), query.into_inner()).await
    }

    async fn user_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Ok200<Doc> {
        let p = path.into_inner();
        doc_get(&rqctx, user(p.user_id), p.doc_id).await
    }

    async fn user_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Deleted {
        let p = path.into_inner();
        doc_delete(&rqctx, user(p.user_id), p.doc_id).await
    }

    async fn user_search_text(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        query: QueryParams<TextSearchParams>,
    ) -> Ok200<DocSearchResponse> {
        doc_search(&rqctx, user(path.into_inner().user_id), query.into_inner().into()).await
    }

    async fn user_search(
        rqctx: RequestContext<Ctx>,
        path: PathParams<UserPath>,
        key: IdempotencyKey,
        body: JsonBody<SearchRequest>,
    ) -> Ok200<DocSearchResponse> {
        doc_search_post(&rqctx, user(path.into_inner().user_id), key, body).await
    }
}

// Documents and search are the same for agents and users; only the owner differs.

fn agent(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::Agent }
}

fn user(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::User }
}

async fn doc_create(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    key: IdempotencyKey,
    body: JsonBody<CreateDocRequest>,
) -> Created<Doc> {
    let (body, digest) = body.into_parts();
    run_once(rqctx, key, digest, None, |app, t| async move {
        app.doc_create(t, owner, body).await.map(HttpResponseCreated)
    })
    .await
}

async fn doc_list(rqctx: &RequestContext<Ctx>, owner: DocOwner, p: ListParams) -> Ok200<ListResponse<Doc>> {
    let q = list_query(&p);
    run(rqctx, |app, t| async move {
        app.doc_list(t, owner, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

async fn doc_get(rqctx: &RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Ok200<Doc> {
    run(rqctx, |app, t| async move { app.doc_get(t, owner, id).await.map(HttpResponseOk) }).await
}

async fn doc_delete(rqctx: &RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Deleted {
    run(rqctx, |app, t| async move { app.doc_delete(t, owner, id).await.map(|()| HttpResponseDeleted()) })
        .await
}

async fn doc_search(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    req: SearchRequest,
) -> Ok200<DocSearchResponse> {
    run(rqctx, |app, t| async move { app.doc_search(t, owner, req).await.map(HttpResponseOk) }).await
}

async fn doc_search_post(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    key: IdempotencyKey,
    body: JsonBody<SearchRequest>,
) -> Ok200<DocSearchResponse> {
    let (req, digest) = body.into_parts();
    run_once(rqctx, key, digest, None, |app, t| async move {
        app.doc_search(t, owner, req).await.map(HttpResponseOk)
    })
    .await
}
