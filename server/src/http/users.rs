//! Handlers of `/api/users`.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn user_create(
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

pub async fn user_list(
    rqctx: RequestContext<Ctx>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<User>> {
    let q = list_query(&query.into_inner());
    run(
        &rqctx,
        |app, t| async move { app.user_list(t, &q).map(|items| HttpResponseOk(ListResponse { items })) },
    )
    .await
}

pub async fn user_get(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Ok200<User> {
    let id = path.into_inner().user_id;
    run(&rqctx, |app, t| async move { app.user_get(t, id).map(HttpResponseOk) }).await
}

pub async fn user_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    body: JsonBody<UpdateUserRequest>,
) -> Ok200<User> {
    let (id, body) = (path.into_inner().user_id, body.into_inner());
    run(&rqctx, |app, t| async move { app.user_update(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn user_patch(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    body: JsonBody<PatchUserRequest>,
) -> Ok200<User> {
    let (id, body) = (path.into_inner().user_id, body.into_inner());
    run(&rqctx, |app, t| async move { app.user_patch(t, id, body).await.map(HttpResponseOk) }).await
}

pub async fn user_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserPath>) -> Deleted {
    let id = path.into_inner().user_id;
    run(&rqctx, |app, t| async move { app.user_delete(t, id).await.map(|()| HttpResponseDeleted()) }).await
}
