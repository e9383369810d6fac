//! The one mapping of domain errors to HTTP: status, machine code and the
//! `Retry-After` a 429 passes on. JSON answers and the stream's error events
//! both take their code from here, and the health check its answer.

use dropshot::{ErrorStatusCode, RequestContext};
use slog::error;

use super::context::Ctx;
use crate::api::ApiError;
use crate::app::Error as DomainError;
use crate::app::NotFound;
use crate::store::StoreError;

/// The API error of a domain error, for the request `request_id`.
pub fn api_error(err: DomainError, request_id: &str) -> ApiError {
    use DomainError as E;
    let (status, code) = match &err {
        E::Validation(issues) => return ApiError::Validation(issues.clone()),
        E::RateLimited { retry_after, .. } => {
            let retry_after = retry_after.clone();
            let status = ErrorStatusCode::TOO_MANY_REQUESTS;
            return ApiError::new(status, "rate_limited", err.to_string(), request_id)
                .with_retry_after(retry_after);
        }
        E::SearchWarming(_) => {
            let status = ErrorStatusCode::SERVICE_UNAVAILABLE;
            return ApiError::new(status, "search_warming", err.to_string(), request_id)
                .with_retry_after(Some("1".into()));
        }
        E::Invalid { param, .. } => {
            let param = param.clone();
            return ApiError::new(ErrorStatusCode::BAD_REQUEST, "bad_request", err.to_string(), request_id)
                .with_param(param);
        }
        E::NotFound(NotFound::Field { field, .. }) => {
            // OpenAI's code for a response to continue that is not there.
            let code = match *field {
                "previous_response_id" => "previous_response_not_found",
                _ => "not_found",
            };
            let field = field.to_string();
            return ApiError::new(ErrorStatusCode::NOT_FOUND, code, err.to_string(), request_id)
                .with_param(field);
        }
        E::NotFound(_) => (ErrorStatusCode::NOT_FOUND, "not_found"),
        E::Conflict(_) => (ErrorStatusCode::CONFLICT, "conflict"),
        E::BadRequest(_) => (ErrorStatusCode::BAD_REQUEST, "bad_request"),
        E::Unauthorized(_) => (ErrorStatusCode::UNAUTHORIZED, "unauthorized"),
        E::Upstream(_) => (ErrorStatusCode::BAD_GATEWAY, "upstream_error"),
        E::UpstreamTimeout(_) => (ErrorStatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
        E::NoModelProvider(_) => (ErrorStatusCode::SERVICE_UNAVAILABLE, "no_model_provider"),
        E::InsufficientStorage(_) => (ErrorStatusCode::INSUFFICIENT_STORAGE, "insufficient_storage"),
        E::StoreUnavailable(_) => (ErrorStatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
        E::Internal(_) => (ErrorStatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    ApiError::new(status, code, err.to_string(), request_id)
}

/// [`api_error`] for a handler's request, logging an internal error first.
pub fn domain_error(rqctx: &RequestContext<Ctx>, e: DomainError) -> ApiError {
    if let DomainError::Internal(m) = &e {
        error!(rqctx.log, "internal error"; "error" => m.as_str());
    }
    api_error(e, &rqctx.request_id)
}

/// The health check's answer for a store that cannot write: 503 whatever the
/// cause (a load balancer reads the status), the code naming it.
pub fn unhealthy(e: StoreError, request_id: &str) -> ApiError {
    let code = match &e {
        StoreError::Full(_) => "insufficient_storage",
        _ => "store_unavailable",
    };
    ApiError::new(ErrorStatusCode::SERVICE_UNAVAILABLE, code, e.to_string(), request_id)
}
