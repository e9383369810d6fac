//! Handlers of `/api/sessions`: sessions, their messages and their tools.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn session_create(
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

pub async fn session_list(
    rqctx: RequestContext<Ctx>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Session>> {
    let q = list_query(&query.into_inner());
    run(&rqctx, |app, t| async move {
        app.session_list(t, &q).map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn session_get(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Ok200<Session> {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.session_get(t, id).map(HttpResponseOk) }).await
}

pub async fn session_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
    body: JsonBody<UpdateSessionRequest>,
) -> Ok200<Session> {
    let (id, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.session_update(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn session_patch(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
    body: JsonBody<UpdateSessionRequest>,
) -> Ok200<Session> {
    let (id, body) = (path.into_inner().id, body.into_inner());
    run(&rqctx, |app, t| async move { app.session_update(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn session_delete(rqctx: RequestContext<Ctx>, path: PathParams<SessionPath>) -> Deleted {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move { app.session_delete(t, id).await.map(|()| HttpResponseDeleted()) }).await
}

pub async fn message_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
    query: QueryParams<MessageListParams>,
) -> Ok200<ListResponse<Message>> {
    let id = path.into_inner().id;
    let q = list_query(&query.into_inner().into());
    run(&rqctx, |app, t| async move {
        app.message_list(t, id, &q).map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn message_create(
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

pub async fn session_tool_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
) -> Ok200<ListResponse<Tool>> {
    let id = path.into_inner().id;
    run(&rqctx, |app, t| async move {
        app.session_tools(t, id).map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}
