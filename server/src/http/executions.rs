//! Handlers of `/api/tasks/{task_id}/executions` and `/api/executions/{id}`:
//! starting, reading, cancelling or resuming executions, and their transitions
//! (listed, or followed as server-sent events: see [`super::stream`]).

use dropshot::{HttpResponseCreated, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{
    ApiError, Created, EventStream, IdempotencyKey, JsonBody, LastEventId, Ok200, PathParams, QueryParams,
    Reply,
};

pub async fn execution_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<TaskPath>,
    key: IdempotencyKey,
    body: JsonBody<CreateExecutionRequest>,
) -> Created<Execution> {
    let (task, (body, digest)) = (path.into_inner().task_id, body.into_parts());
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.execution_start(t, task, body).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn execution_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<TaskPath>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Execution>> {
    let task = path.into_inner().task_id;
    let q = list_query(&query.into_inner());
    run(&rqctx, |app, t| async move {
        app.execution_list(t, task, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn execution_get(rqctx: RequestContext<Ctx>, path: PathParams<ExecutionPath>) -> Ok200<Execution> {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.execution_get(t, id).await.map(HttpResponseOk) }).await
}

pub async fn execution_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ExecutionPath>,
    body: JsonBody<UpdateExecutionRequest>,
) -> Ok200<Execution> {
    let (id, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.execution_update(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn transition_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ExecutionPath>,
    query: QueryParams<TransitionListParams>,
) -> Ok200<ListResponse<Transition>> {
    let id = path.into_inner().id;
    let q = list_query(&query.into_inner().into());
    run(&rqctx, |app, t| async move {
        app.transition_list(t, id, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn transition_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ExecutionTransitionPath>,
) -> Ok200<Transition> {
    let p = path.into_inner();
    run(
        &rqctx,
        |app, t| async move { app.transition_get(t, p.id, p.transition_id).await.map(HttpResponseOk) },
    )
    .await
}

pub async fn transition_stream(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ExecutionPath>,
    last_event_id: LastEventId,
) -> Result<Reply<EventStream>, ApiError> {
    let (id, after) = (path.into_inner().id, last_event_id.0);
    run(&rqctx, |app, t| async move { super::stream::transition_stream(app, t, id, after).await }).await
}
