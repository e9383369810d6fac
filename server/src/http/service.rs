//! Handlers of the service's own routes: health and the OpenAPI document.

use dropshot::{HttpResponseOk, RequestContext};
use serde_json::Value;

use super::context::Ctx;
use super::error::unhealthy;
use crate::api::types::*;
use crate::api::{Ok200, Reply};
use crate::app::SearchState;

pub async fn healthz(rqctx: RequestContext<Ctx>) -> Ok200<Health> {
    match rqctx.context().app.store.health().await {
        Ok(()) => {
            let search = match rqctx.context().app.search_state() {
                SearchState::Ready => SearchStatus::Ready,
                SearchState::Warming { .. } => SearchStatus::Warming,
                SearchState::Failed(_) => SearchStatus::Failed,
            };
            Ok(Reply::Ok(HttpResponseOk(Health { status: "ok".into(), search })))
        }
        Err(e) => Ok(Reply::Err(unhealthy(e, &rqctx.request_id))),
    }
}

pub async fn openapi_document(rqctx: RequestContext<Ctx>) -> Ok200<serde_json::Map<String, Value>> {
    Ok(Reply::Ok(HttpResponseOk(rqctx.context().spec.clone())))
}
