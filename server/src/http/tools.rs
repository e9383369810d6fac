//! Handlers of `/api/agents/{id}/tools`.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn tool_create(
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

pub async fn tool_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Tool>> {
    let agent = path.into_inner().id;
    let q = list_query(&query.into_inner());
    run(&rqctx, |app, t| async move {
        app.tool_list(t, agent, &q).map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn tool_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentToolPath>,
    body: JsonBody<CreateToolRequest>,
) -> Ok200<Tool> {
    let (p, body) = (path.into_inner(), body.into_inner());
    run(&rqctx, |app, t| async move { app.tool_update(t, p.id, p.tool_id, body).await.map(HttpResponseOk) })
        .await
}

pub async fn tool_patch(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentToolPath>,
    body: JsonBody<PatchToolRequest>,
) -> Ok200<Tool> {
    let (p, body) = (path.into_inner(), body.into_inner());
    run(&rqctx, |app, t| async move { app.tool_patch(t, p.id, p.tool_id, body).await.map(HttpResponseOk) })
        .await
}

pub async fn tool_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentToolPath>) -> Deleted {
    let p = path.into_inner();
    run(
        &rqctx,
        |app, t| async move { app.tool_delete(t, p.id, p.tool_id).await.map(|()| HttpResponseDeleted()) },
    )
    .await
}
