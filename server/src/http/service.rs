//! Handlers of the service's own routes: health and the OpenAPI document.

use dropshot::{ErrorStatusCode, HttpResponseOk, RequestContext};
use serde_json::Value;

use super::context::Ctx;
use crate::api::types::*;
use crate::api::{ApiError, Ok200, Reply};
use crate::store;

pub async fn healthz(rqctx: RequestContext<Ctx>) -> Ok200<Health> {
    match rqctx.context().app.store.health() {
        Ok(()) => Ok(Reply::Ok(HttpResponseOk(Health { status: "ok".into() }))),
        // 503 whatever the cause (a load balancer reads the status), the code names it.
        Err(e) => {
            let code = match &e {
                store::StoreError::Full(_) => "insufficient_storage",
                _ => "store_unavailable",
            };
            let rid = rqctx.request_id.as_str();
            Ok(Reply::Err(ApiError::new(ErrorStatusCode::SERVICE_UNAVAILABLE, code, e.to_string(), rid)))
        }
    }
}

pub async fn openapi_document(rqctx: RequestContext<Ctx>) -> Ok200<serde_json::Map<String, Value>> {
    Ok(Reply::Ok(HttpResponseOk(rqctx.context().spec.clone())))
}
