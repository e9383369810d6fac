//! The one error type of the HTTP API and the bodies it answers with.
//!
//! Two body shapes, documented together as the `Error` schema:
//! - validation failures (422): `{"detail": [{"loc", "msg", "type"}, ...]}`;
//! - everything else: `{"detail": "<human readable>", "code": "<machine code>", "request_id"}`.
//!
//! Every extractor failure reaches us through `From<HttpError>`; our own
//! extractors encode their 422 details (and the request id) into that
//! `HttpError` so nothing is lost on the way. The mapping of the server's
//! domain errors to this type lives in the server, which owns them.

use dropshot::{ErrorStatusCode, HttpError};
use schemars::JsonSchema;
use schemars::r#gen::SchemaGenerator;
use schemars::schema::{Schema, SchemaObject, SubschemaValidation};
use serde::{Deserialize, Serialize};

/// One element of a `loc`: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LocPart {
    Key(String),
    Index(usize),
}

/// One validation failure.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "ValidationError")]
pub struct Issue {
    /// Where: `"path"`, `"query"` or `"body"`, then the field path (array indexes as integers).
    pub loc: Vec<LocPart>,
    /// What is wrong, for a human.
    pub msg: String,
    /// The kind of failure, using pydantic v2's names (`missing`, `string_too_long`, ...).
    #[serde(rename = "type")]
    pub kind: String,
}

/// The body of a 422: every violation of the request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "HTTPValidationError")]
pub struct HttpValidationError {
    pub detail: Vec<Issue>,
}

/// The body of every error other than a validation failure.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorResponse {
    /// What went wrong, for a human.
    pub detail: String,
    /// A stable machine-readable code: `unauthorized`, `not_found`, `method_not_allowed`,
    /// `conflict`, `payload_too_large`, `request_timeout`, `bad_request`,
    /// `unsupported_media_type`, `rate_limited`, `upstream_error`, `no_model_provider`,
    /// `upstream_timeout`, `insufficient_storage` (507: the disk holding the store is full;
    /// nothing was saved), `store_unavailable` (503: the store cannot write or read now;
    /// nothing was saved unless `detail` says the outcome is unknown), `search_warming`
    /// (503 with `Retry-After`: the search index is still being built after the server's
    /// start; nothing else waits for it), `internal`.
    pub code: String,
    /// The id of the request, also sent as the `x-request-id` header and logged.
    pub request_id: String,
}

/// An API error: what a handler or an extractor returns.
#[derive(Debug)]
pub enum ApiError {
    Validation(Vec<Issue>),
    /// `retry_after`: the `Retry-After` header to send (a 429 passes on the
    /// provider's); `param`: the request field at fault, when one is (named by
    /// `/v1`'s answers; `/api`'s `detail` says it).
    Other {
        status: ErrorStatusCode,
        body: ErrorResponse,
        retry_after: Option<String>,
        param: Option<String>,
    },
}

const VALIDATION_CODE: &str = "agent_platform::validation";

impl ApiError {
    pub fn validation(issues: Vec<Issue>) -> Self {
        ApiError::Validation(issues)
    }

    pub fn new(status: ErrorStatusCode, code: &str, detail: impl Into<String>, request_id: &str) -> Self {
        ApiError::Other {
            status,
            body: ErrorResponse { detail: detail.into(), code: code.into(), request_id: request_id.into() },
            retry_after: None,
            param: None,
        }
    }

    /// The request field this error is about (see [`ApiError::Other`]).
    pub fn with_param(mut self, field: String) -> Self {
        if let ApiError::Other { param, .. } = &mut self {
            *param = Some(field);
        }
        self
    }

    /// The `Retry-After` header this error's answer carries (a 429 passes on
    /// the provider's); only an error other than a validation failure has one.
    pub fn with_retry_after(mut self, after: Option<String>) -> Self {
        if let ApiError::Other { retry_after, .. } = &mut self {
            *retry_after = after;
        }
        self
    }

    /// Encodes a 422 as an `HttpError`, so an extractor can return it.
    pub fn validation_http_error(issues: Vec<Issue>) -> HttpError {
        HttpError {
            status_code: ErrorStatusCode::from_u16(422).expect("422 is an error status"),
            error_code: Some(VALIDATION_CODE.to_string()),
            external_message: serde_json::to_string(&issues).expect("issues serialise"),
            internal_message: "request failed validation".to_string(),
            headers: None,
        }
    }

    /// Encodes any other error as an `HttpError` carrying the request id.
    pub fn http_error(status: ErrorStatusCode, code: &str, detail: String, request_id: &str) -> HttpError {
        HttpError {
            status_code: status,
            error_code: Some(format!("{code}:{request_id}")),
            external_message: detail.clone(),
            internal_message: detail,
            headers: None,
        }
    }

    pub fn status(&self) -> ErrorStatusCode {
        match self {
            ApiError::Validation(_) => ErrorStatusCode::from_u16(422).expect("422 is an error status"),
            ApiError::Other { status, .. } => *status,
        }
    }

    /// The JSON body of this error.
    pub fn body_json(&self) -> String {
        match self {
            ApiError::Validation(issues) => {
                serde_json::to_string(&HttpValidationError { detail: issues.clone() })
            }
            ApiError::Other { body, .. } => serde_json::to_string(body),
        }
        .expect("error bodies serialise")
    }
}

/// The answer to an error of dropshot's router, which no handler sees: no such
/// route (404), a route that does not take this method (405, with dropshot's
/// `Allow` headers), a path that is not valid percent-encoding (400). In the
/// contract's shape, like every other error (OpenAI's under `/v1`).
pub fn router_error_response(e: HttpError, request_id: &str, path: &str) -> http::Response<dropshot::Body> {
    let status = e.status_code;
    let allowed: Vec<&str> = e
        .headers
        .iter()
        .flat_map(|h| h.get_all(http::header::ALLOW))
        .filter_map(|v| v.to_str().ok())
        .collect();
    let (code, detail) = match status.as_u16() {
        404 => ("not_found", "no such route; the routes are listed in GET /api/openapi.json".to_string()),
        405 => (
            "method_not_allowed",
            format!("this route does not take this method; it takes {}", allowed.join(", ")),
        ),
        _ => ("bad_request", e.external_message.clone()),
    };
    let error = ApiError::new(status, code, detail, request_id);
    let body = if path == "/v1" || path.starts_with("/v1/") {
        ErrorAnswer::body_json(&OpenAiError::from(error))
    } else {
        error.body_json()
    };
    let mut response = http::Response::new(dropshot::Body::from(body));
    *response.status_mut() = status.as_status();
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    if let Some(extra) = e.headers {
        headers.extend(*extra);
    }
    response
}

impl From<HttpError> for ApiError {
    fn from(e: HttpError) -> Self {
        let code = e.error_code.as_deref().unwrap_or_default();
        if code == VALIDATION_CODE
            && let Ok(issues) = serde_json::from_str(&e.external_message)
        {
            return ApiError::Validation(issues);
        }
        // Our extractors put "code:request_id" in error_code; anything else comes
        // from dropshot itself and is classified by its status and message.
        let (code, request_id) = match code.split_once(':') {
            Some((c, r)) => (c.to_string(), r.to_string()),
            None => (String::new(), String::new()),
        };
        let msg = e.external_message;
        let (status, code) = if !code.is_empty() {
            (e.status_code, code)
        } else if msg.contains("exceeded maximum size") {
            (ErrorStatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".to_string())
        } else if msg.contains("content-type") || msg.contains("content type") {
            (ErrorStatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type".to_string())
        } else if e.status_code.as_u16() >= 500 {
            (e.status_code, "internal".to_string())
        } else {
            (e.status_code, "bad_request".to_string())
        };
        ApiError::Other {
            status,
            body: ErrorResponse { detail: msg, code, request_id },
            retry_after: None,
            param: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Validation(issues) => {
                write!(f, "validation failed: ")?;
                for (i, issue) in issues.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{:?}: {}", issue.loc, issue.msg)?;
                }
                Ok(())
            }
            ApiError::Other { body, .. } => write!(f, "{} ({})", body.detail, body.code),
        }
    }
}

impl Serialize for ApiError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ApiError::Validation(issues) => HttpValidationError { detail: issues.clone() }.serialize(s),
            ApiError::Other { body, .. } => body.serialize(s),
        }
    }
}

impl JsonSchema for ApiError {
    fn schema_name() -> String {
        "Error".to_string()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let mut obj = SchemaObject {
            subschemas: Some(Box::new(SubschemaValidation {
                one_of: Some(vec![
                    g.subschema_for::<HttpValidationError>(),
                    g.subschema_for::<ErrorResponse>(),
                ]),
                ..Default::default()
            })),
            ..Default::default()
        };
        obj.metadata().description = Some(
            "An error. A validation failure (422) is an `HTTPValidationError`; every other \
             error (401, 404, 405, 408, 409, 413, 400, 429, 5xx) is an `ErrorResponse`."
                .to_string(),
        );
        obj.into()
    }
}

impl dropshot::HttpResponseError for ApiError {
    fn status_code(&self) -> ErrorStatusCode {
        self.status()
    }
}

// ---------------------------------------------------------------- OpenAI's shape

/// The body of every error on the OpenAI-compatible routes (`/v1`), in
/// OpenAI's shape, which its SDKs read.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "OpenAIErrorResponse")]
pub struct OpenAiErrorBody {
    pub error: OpenAiErrorDetail,
}

/// What went wrong, in OpenAI's terms.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "OpenAIError")]
pub struct OpenAiErrorDetail {
    /// What went wrong, for a human (a validation failure lists every violation).
    pub message: String,
    /// `invalid_request_error` (4xx but 401, 403 and 429), `authentication_error` (401),
    /// `permission_error` (403), `rate_limit_error` (429), `server_error` (5xx).
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, as a path (`messages[0].content`), when one is.
    pub param: Option<String>,
    /// The same machine-readable code as on `/api` (`not_found`, `unauthorized`,
    /// `upstream_error`, ...); for a validation failure, the first violation's kind
    /// (`missing`, `string_too_long`, ...).
    pub code: Option<String>,
}

/// An error of a `/v1` route: an [`ApiError`] answered in OpenAI's shape,
/// with the same status (and `Retry-After`), plus the `param` at fault.
#[derive(Debug)]
pub struct OpenAiError {
    pub error: ApiError,
    /// The field at fault, for an error that is not a validation failure
    /// (which names its own).
    pub param: Option<String>,
}

impl OpenAiError {
    /// A 400 for a feature the service does not support, naming the field.
    pub fn unsupported(param: String, message: String, request_id: &str) -> Self {
        OpenAiError {
            error: ApiError::new(ErrorStatusCode::BAD_REQUEST, "unsupported", message, request_id),
            param: Some(param),
        }
    }

    /// OpenAI's status: a request that fails validation is a 400 (`/api` says 422).
    pub fn status(&self) -> ErrorStatusCode {
        match self.error {
            ApiError::Validation(_) => ErrorStatusCode::BAD_REQUEST,
            ApiError::Other { .. } => self.error.status(),
        }
    }

    pub fn body(&self) -> OpenAiErrorBody {
        let status = self.status().as_u16();
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            429 => "rate_limit_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        let detail = match &self.error {
            ApiError::Validation(issues) => {
                let first = issues.first();
                OpenAiErrorDetail {
                    message: validation_message(issues),
                    kind: kind.into(),
                    param: first.map(|i| param_path(&i.loc)),
                    code: first.map(|i| i.kind.clone()),
                }
            }
            ApiError::Other { body, .. } => OpenAiErrorDetail {
                message: body.detail.clone(),
                kind: kind.into(),
                param: self.param.clone(),
                code: Some(body.code.clone()),
            },
        };
        OpenAiErrorBody { error: detail }
    }
}

/// A validation failure's message on `/v1`: each violation after the field
/// it names, as `param` names it (`messages[0].content: ...`), as OpenAI
/// writes a field, never Rust's view of the path.
fn validation_message(issues: &[Issue]) -> String {
    let each: Vec<String> = issues
        .iter()
        .map(|i| match param_path(&i.loc) {
            p if p.is_empty() => i.msg.clone(),
            p => format!("{p}: {}", i.msg),
        })
        .collect();
    format!("Invalid request: {}", each.join("; "))
}

/// `["body", "messages", 0, "content"]` as `messages[0].content`: the request
/// field a `loc` names (the query's or path's parameter, for those).
fn param_path(loc: &[LocPart]) -> String {
    let mut out = String::new();
    for part in loc.iter().skip(1) {
        match part {
            LocPart::Index(i) => out.push_str(&format!("[{i}]")),
            LocPart::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let param = match &error {
            ApiError::Other { param, .. } => param.clone(),
            ApiError::Validation(_) => None,
        };
        OpenAiError { error, param }
    }
}

impl From<HttpError> for OpenAiError {
    fn from(e: HttpError) -> Self {
        ApiError::from(e).into()
    }
}

impl std::fmt::Display for OpenAiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl Serialize for OpenAiError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.body().serialize(s)
    }
}

impl JsonSchema for OpenAiError {
    fn schema_name() -> String {
        "OpenAIErrorResponse".to_string()
    }

    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        OpenAiErrorBody::json_schema(g)
    }
}

impl dropshot::HttpResponseError for OpenAiError {
    fn status_code(&self) -> ErrorStatusCode {
        OpenAiError::status(self)
    }
}

/// What [`crate::Reply`] needs of an error to answer it: the two shapes above.
pub trait ErrorAnswer {
    fn status(&self) -> ErrorStatusCode;
    fn body_json(&self) -> String;
    fn retry_after(&self) -> Option<&str>;
}

impl ErrorAnswer for ApiError {
    fn status(&self) -> ErrorStatusCode {
        ApiError::status(self)
    }
    fn body_json(&self) -> String {
        ApiError::body_json(self)
    }
    fn retry_after(&self) -> Option<&str> {
        match self {
            ApiError::Other { retry_after, .. } => retry_after.as_deref(),
            ApiError::Validation(_) => None,
        }
    }
}

impl ErrorAnswer for OpenAiError {
    fn status(&self) -> ErrorStatusCode {
        OpenAiError::status(self)
    }
    fn body_json(&self) -> String {
        serde_json::to_string(&self.body()).expect("error bodies serialise")
    }
    fn retry_after(&self) -> Option<&str> {
        self.error.retry_after()
    }
}
