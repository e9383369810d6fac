//! Handlers of `/api/agents`.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn agent_create(
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

pub async fn agent_list(
    rqctx: RequestContext<Ctx>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Agent>> {
    let q = list_query(&query.into_inner());
    run(
        &rqctx,
        |app, t| async move { app.agent_list(t, &q).map(|items| HttpResponseOk(ListResponse { items })) },
    )
    .await
}

pub async fn agent_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Ok200<Agent> {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.agent_get(t, id).map(HttpResponseOk) }).await
}

pub async fn agent_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    body: JsonBody<CreateAgentRequest>,
) -> Ok200<Agent> {
    let (id, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.agent_update(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn agent_patch(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    body: JsonBody<PatchAgentRequest>,
) -> Ok200<Agent> {
    let (id, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.agent_patch(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn agent_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentPath>) -> Deleted {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.agent_delete(t, id).await.map(|()| HttpResponseDeleted()) }).await
}
