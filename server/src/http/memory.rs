//! Handlers of memory blocks (the same for agents and users, only the owner
//! differs) and of Agent File import and export.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{
    ApiError, Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams, Reply,
};
use crate::app::memory::Provenance;
use dropshot::ErrorStatusCode;

fn agent(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::Agent }
}

fn user(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::User }
}

/// The edit source of a change made by this request.
fn by_request(rqctx: &RequestContext<Ctx>) -> Provenance {
    Provenance::request(rqctx.request_id.clone())
}

pub async fn block_create(
    rqctx: RequestContext<Ctx>,
    owner: DocOwner,
    key: IdempotencyKey,
    body: JsonBody<CreateBlockRequest>,
) -> Created<Block> {
    let (body, digest) = body.into_parts();
    let source = by_request(&rqctx);
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.block_create(t, owner, body, source).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn block_list(rqctx: RequestContext<Ctx>, owner: DocOwner) -> Ok200<ListResponse<Block>> {
    run(&rqctx, |app, t| async move {
        app.block_list(t, owner).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn block_get(rqctx: RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Ok200<Block> {
    run(&rqctx, |app, t| async move { app.block_get(t, owner, id).await.map(HttpResponseOk) }).await
}

pub async fn block_patch(
    rqctx: RequestContext<Ctx>,
    owner: DocOwner,
    id: uuid::Uuid,
    body: JsonBody<PatchBlockRequest>,
) -> Ok200<Block> {
    let body = body.into_inner();
    let source = by_request(&rqctx);
    run(&rqctx, |app, t| async move { app.block_patch(t, owner, id, body, source).await.map(HttpResponseOk) })
        .await
}

pub async fn block_delete(rqctx: RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Deleted {
    run(&rqctx, |app, t| async move { app.block_delete(t, owner, id).await.map(|()| HttpResponseDeleted()) })
        .await
}

pub async fn block_edits(
    rqctx: RequestContext<Ctx>,
    owner: DocOwner,
    id: uuid::Uuid,
    query: QueryParams<BlockEditListParams>,
) -> Ok200<ListResponse<BlockEdit>> {
    let limit = query.into_inner().limit;
    run(&rqctx, |app, t| async move {
        app.block_edits(t, owner, id, limit).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn block_revert(
    rqctx: RequestContext<Ctx>,
    owner: DocOwner,
    id: uuid::Uuid,
    edit: uuid::Uuid,
) -> Ok200<Block> {
    let source = by_request(&rqctx);
    run(
        &rqctx,
        |app, t| async move { app.block_revert(t, owner, id, edit, source).await.map(HttpResponseOk) },
    )
    .await
}

pub fn of_agent(id: uuid::Uuid) -> DocOwner {
    agent(id)
}

pub fn of_user(id: uuid::Uuid) -> DocOwner {
    user(id)
}

/// `POST /api/agents/import`, the one id this route takes (see the operation).
pub async fn agent_import(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentImportPath>,
    query: QueryParams<AgentImportParams>,
    key: IdempotencyKey,
    body: JsonBody<AgentFile>,
) -> Created<AgentFileImport> {
    let id = path.into_inner().id;
    if id != "import" {
        let message =
            format!("no route POST /api/agents/{id}: the only POST under /api/agents/ is /api/agents/import");
        return Ok(Reply::Err(ApiError::new(
            ErrorStatusCode::NOT_FOUND,
            "not_found",
            message,
            &rqctx.request_id,
        )));
    }
    let (body, digest) = body.into_parts();
    let user = query.into_inner().user_id;
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.agent_import(t, user, body).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn agent_export(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    query: QueryParams<AgentExportParams>,
) -> Ok200<AgentFile> {
    let id = path.into_inner().id;
    let session = query.into_inner().session_id;
    run(&rqctx, |app, t| async move { app.agent_export(t, id, session).await.map(HttpResponseOk) }).await
}

pub async fn learning_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Ok200<LearningPolicy> {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.learning_get(t, id).await.map(HttpResponseOk) }).await
}

pub async fn learning_put(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    body: JsonBody<LearningPolicy>,
) -> Ok200<LearningPolicy> {
    let id = path.into_inner().id;
    let body = body.into_inner();
    run(&rqctx, |app, t| async move { app.learning_put(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn block_approve(rqctx: RequestContext<Ctx>, path: PathParams<UserBlockEditPath>) -> Ok200<Block> {
    let p = path.into_inner();
    let source = by_request(&rqctx);
    run(&rqctx, |app, t| async move {
        app.block_decide(t, of_user(p.user_id), p.block_id, p.edit_id, true, source)
            .await
            .map(|(block, _)| HttpResponseOk(block))
    })
    .await
}

pub async fn block_reject(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserBlockEditPath>,
) -> Ok200<BlockEdit> {
    let p = path.into_inner();
    let source = by_request(&rqctx);
    run(&rqctx, |app, t| async move {
        app.block_decide(t, of_user(p.user_id), p.block_id, p.edit_id, false, source)
            .await
            .map(|(_, edit)| HttpResponseOk(edit))
    })
    .await
}
