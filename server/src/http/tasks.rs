//! Handlers of `/api/agents/{id}/tasks` and `/api/tasks/{task_id}`.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn task_list(
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

pub async fn task_create_or_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    body: JsonBody<PutTaskRequest>,
) -> Ok200<Task> {
    let (agent, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.task_put(t, agent, body).await.map(HttpResponseOk) }).await
}

pub async fn task_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Ok200<Task> {
    let p = path.into_inner();
    run(&rqctx, |app, t| async move { app.task_get(t, p.id, p.task_id).await.map(HttpResponseOk) }).await
}

pub async fn task_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentTaskPath>) -> Deleted {
    let p = path.into_inner();
    run(
        &rqctx,
        |app, t| async move { app.task_delete(t, p.id, p.task_id).await.map(|()| HttpResponseDeleted()) },
    )
    .await
}

pub async fn task_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    key: IdempotencyKey,
    body: JsonBody<PutTaskRequest>,
) -> Created<Task> {
    let (agent, (body, digest)) = (path.into_inner().id, body.into_parts());
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.task_create(t, agent, body).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn task_get_by_id(rqctx: RequestContext<Ctx>, path: PathParams<TaskPath>) -> Ok200<Task> {
    let id = path.into_inner().task_id;
    run(&rqctx, |app, t| async move { app.task_get_by_id(t, id).await.map(HttpResponseOk) }).await
}
