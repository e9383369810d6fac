//! Handlers of `/api/secrets`: the caller's tenant's secrets (never their values).

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn secret_create(
    rqctx: RequestContext<Ctx>,
    key: IdempotencyKey,
    body: JsonBody<CreateSecretRequest>,
) -> Created<Secret> {
    let (body, digest) = body.into_parts();
    // The body holds the value: its plain digest, kept with the key's answer,
    // could be guessed against. The key's record keeps a keyed one instead.
    let digest = digest.map(|d| rqctx.context().app.secret_request_digest(d));
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.secret_create(t, body).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn secret_list(
    rqctx: RequestContext<Ctx>,
    query: QueryParams<SecretListParams>,
) -> Ok200<ListResponse<Secret>> {
    let p = query.into_inner();
    let q = list_query(&ListParams {
        limit: p.limit,
        offset: p.offset,
        sort_by: p.sort_by,
        direction: p.direction,
        metadata_filter: None,
    });
    run(&rqctx, |app, t| async move {
        app.secret_list(t, &q).await.map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn secret_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SecretPath>,
    body: JsonBody<UpdateSecretRequest>,
) -> Ok200<Secret> {
    let name = path.into_inner().name;
    let body = body.into_inner();
    run(&rqctx, |app, t| async move { app.secret_update(t, &name, body).await.map(HttpResponseOk) }).await
}

pub async fn secret_delete(rqctx: RequestContext<Ctx>, path: PathParams<SecretPath>) -> Deleted {
    let name = path.into_inner().name;
    run(&rqctx, |app, t| async move { app.secret_delete(t, &name).await.map(|()| HttpResponseDeleted()) })
        .await
}
