//! Handlers of `/api/keys`: the caller's tenant's API keys.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, Ok200, PathParams, QueryParams};

pub async fn key_create(rqctx: RequestContext<Ctx>, key: IdempotencyKey) -> Created<ApiKeyCreated> {
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
        let created = ApiKeyCreated { id: info.id, key, prefix: info.prefix, created_at: info.created_at };
        Ok(HttpResponseCreated(created))
    })
    .await
}

pub async fn key_list(
    rqctx: RequestContext<Ctx>,
    query: QueryParams<KeyListParams>,
) -> Ok200<ListResponse<ApiKey>> {
    let q = query.into_inner();
    let oldest_first = q.direction == Direction::Asc;
    run(&rqctx, |app, t| async move {
        let items = app.tenant_key_list(t, q.offset.get(), q.limit.get(), oldest_first).await?;
        let items = items
            .into_iter()
            .map(|k| ApiKey { id: k.id, prefix: k.prefix, created_at: k.created_at })
            .collect();
        Ok(HttpResponseOk(ListResponse { items }))
    })
    .await
}

pub async fn key_delete(rqctx: RequestContext<Ctx>, path: PathParams<KeyPath>) -> Deleted {
    let id = path.into_inner().key_id;
    run(&rqctx, |app, t| async move { app.tenant_key_revoke(t, id).await.map(|()| HttpResponseDeleted()) })
        .await
}
