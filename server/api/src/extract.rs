//! Extractors for path, query and JSON body that validate against the type's
//! schema (see [`crate::validate`]) and report every violation as a 422 naming
//! the field. Their OpenAPI metadata is dropshot's own `Path`/`Query`/`TypedBody`,
//! so the spec shows exactly the types these extractors enforce. The
//! `Idempotency-Key` header of POSTs is validated the same way ([`IdempotencyKey`]).
//!
//! The body extractor also bounds how long a body may take to arrive: a client
//! that sends headers and then stalls (or trickles) its body gets a 408 instead
//! of holding a connection and a handler for good.

use std::any::Any;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use dropshot::{
    ApiEndpointBodyContentType, ErrorStatusCode, ExclusiveExtractor, ExtractorMetadata, Header, HttpError,
    Path, Query, RequestContext, ServerContext, SharedExtractor, TypedBody, UntypedBody,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, Issue, LocPart};
use crate::types::IdempotencyHeader;
use crate::validate::{Check, Source, coerce_params, validate_owned, validate_value};

/// Path parameters of type `T`, validated.
pub struct PathParams<T>(pub T);
/// Query parameters of type `T`, validated.
pub struct QueryParams<T>(pub T);
/// A JSON request body of type `T`, validated; with the SHA-256 of its bytes
/// when the request carries an `Idempotency-Key` (what "the same body" means).
pub struct JsonBody<T> {
    value: T,
    digest: Option<[u8; 32]>,
}
/// The validated `Idempotency-Key` header of a POST, if it was sent.
pub struct IdempotencyKey(pub Option<String>);

impl<T> PathParams<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}
impl<T> QueryParams<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}
impl<T> JsonBody<T> {
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The SHA-256 of the body's bytes, taken only when the request carries an
    /// `Idempotency-Key` (so other requests do not pay for it).
    pub fn digest(&self) -> Option<[u8; 32]> {
        self.digest
    }

    /// The value and the digest.
    pub fn into_parts(self) -> (T, Option<[u8; 32]>) {
        (self.value, self.digest)
    }
}

/// The body read timeout when the server's context does not set one (the
/// server's own default is `request_body_timeout_s` in its config).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the body extractor reads from the server's context: how long a
/// request body may take to arrive. The server's context implements it and
/// the server calls [`read_body_timeout_from`] once with its type.
pub trait BodyReadTimeout: ServerContext {
    fn body_read_timeout(&self) -> Duration;
}

/// How to read the timeout from a context whose type the crate cannot name.
type TimeoutOf = fn(&dyn Any) -> Option<Duration>;
static TIMEOUT_OF: OnceLock<TimeoutOf> = OnceLock::new();

/// Makes the body extractor read its timeout from contexts of type `C`.
///
/// Dropshot hands extractors a context of any type, so they cannot call the
/// trait directly: this records, once per process, the one context type that
/// has the setting. Later calls with another type change nothing.
pub fn read_body_timeout_from<C: BodyReadTimeout>() {
    let _ = TIMEOUT_OF.set(|ctx| ctx.downcast_ref::<C>().map(C::body_read_timeout));
}

/// How long this request's body may take to arrive: the server's setting,
/// or [`DEFAULT_BODY_READ_TIMEOUT`] for any other context (dropshot's test
/// contexts, a server that registered none).
fn body_read_timeout<C: ServerContext>(rqctx: &RequestContext<C>) -> Duration {
    TIMEOUT_OF
        .get()
        .and_then(|timeout_of| timeout_of(rqctx.context() as &dyn Any))
        .unwrap_or(DEFAULT_BODY_READ_TIMEOUT)
}

fn issue(source: Source, kind: &str, msg: &str) -> Issue {
    Issue { loc: vec![LocPart::Key(source.as_str().into())], msg: msg.into(), kind: kind.into() }
}

#[async_trait]
impl<T> SharedExtractor for PathParams<T>
where
    T: JsonSchema + DeserializeOwned + Check + Send + Sync + 'static,
{
    async fn from_request<C: ServerContext>(rqctx: &RequestContext<C>) -> Result<Self, HttpError> {
        // Dropshot's own path deserialiser gives us the raw strings; typing and
        // validation are ours, so a failure can name the parameter.
        let raw: std::collections::BTreeMap<String, String> =
            <Path<std::collections::BTreeMap<String, String>> as SharedExtractor>::from_request(rqctx)
                .await?
                .into_inner();
        let raw = raw.into_iter().collect();
        let value = coerce_params::<T>(Source::Path, raw).map_err(ApiError::validation_http_error)?;
        validate_value::<T>(Source::Path, &value).map(PathParams).map_err(ApiError::validation_http_error)
    }

    fn metadata(ct: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <Path<T> as SharedExtractor>::metadata(ct)
    }
}

#[async_trait]
impl<T> SharedExtractor for QueryParams<T>
where
    T: JsonSchema + DeserializeOwned + Check + Send + Sync + 'static,
{
    async fn from_request<C: ServerContext>(rqctx: &RequestContext<C>) -> Result<Self, HttpError> {
        let query = rqctx.request.uri().query().unwrap_or("");
        let raw: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(|_| {
            ApiError::validation_http_error(vec![issue(
                Source::Query,
                "value_error",
                "the query string is not valid URL encoding",
            )])
        })?;
        let value = coerce_params::<T>(Source::Query, raw).map_err(ApiError::validation_http_error)?;
        validate_value::<T>(Source::Query, &value).map(QueryParams).map_err(ApiError::validation_http_error)
    }

    fn metadata(ct: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <Query<T> as SharedExtractor>::metadata(ct)
    }
}

#[async_trait]
impl<T> ExclusiveExtractor for JsonBody<T>
where
    T: JsonSchema + DeserializeOwned + Check + Send + Sync + 'static,
{
    async fn from_request<C: ServerContext>(
        rqctx: &RequestContext<C>,
        request: http::Request<dropshot::Body>,
    ) -> Result<Self, HttpError> {
        let rid = rqctx.request_id.as_str();
        if let Some(ct) = request.headers().get(http::header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            let mime = ct.split(';').next().unwrap_or("").trim();
            if !(mime == "application/json" || mime.ends_with("+json")) {
                return Err(ApiError::http_error(
                    ErrorStatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("expected content type \"application/json\", got \"{mime}\""),
                    rid,
                ));
            }
        }
        let keyed = request.headers().contains_key(IDEMPOTENCY_KEY);
        // Counted from the end of the headers, over the whole body: a stall and a
        // trickle both end here. Dropping the read leaves the body unread, so
        // hyper closes the connection after the answer.
        let timeout = body_read_timeout(rqctx);
        let read =
            tokio::time::timeout(timeout, UntypedBody::from_request(rqctx, request)).await.map_err(|_| {
                ApiError::http_error(
                    ErrorStatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "the request body did not arrive in full within {} s; send the whole body \
                         at once (the Content-Length announced, or a final chunk) and retry",
                        timeout.as_secs()
                    ),
                    rid,
                )
            })?;
        let body = read.map_err(|e| {
            if e.external_message.contains("exceeded maximum size") {
                ApiError::http_error(
                    ErrorStatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!(
                        "the request body is larger than the limit of {} bytes",
                        rqctx.request_body_max_bytes()
                    ),
                    rid,
                )
            } else {
                ApiError::http_error(e.status_code, "bad_request", e.external_message, rid)
            }
        })?;
        let bytes = body.as_bytes();
        let digest = keyed.then(|| <sha2::Sha256 as sha2::Digest>::digest(bytes).into());
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::validation_http_error(vec![issue(
                Source::Body,
                "missing",
                "Field required: the request body is empty",
            )]));
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::validation_http_error(vec![issue(
                Source::Body,
                "json_invalid",
                &format!("JSON decode error: {e}"),
            )])
        })?;
        if let Some(value) = validate_owned::<T>(Source::Body, value) {
            return Ok(JsonBody { value, digest });
        }
        // Something is wrong: parsed again (it parsed once), to say what.
        let value: Value = serde_json::from_slice(bytes).unwrap_or_default();
        validate_value::<T>(Source::Body, &value)
            .map(|value| JsonBody { value, digest })
            .map_err(ApiError::validation_http_error)
    }

    fn metadata(ct: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <TypedBody<T> as ExclusiveExtractor>::metadata(ct)
    }
}

/// The header's name, as `loc` names it.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

#[async_trait]
impl SharedExtractor for IdempotencyKey {
    async fn from_request<C: ServerContext>(rqctx: &RequestContext<C>) -> Result<Self, HttpError> {
        let mut sent = rqctx.request.headers().get_all(IDEMPOTENCY_KEY).iter();
        let Some(first) = sent.next() else { return Ok(IdempotencyKey(None)) };
        let header_issue = |kind: &str, msg: &str| {
            let mut i = issue(Source::Header, kind, msg);
            i.loc.push(LocPart::Key(IDEMPOTENCY_KEY.into()));
            ApiError::validation_http_error(vec![i])
        };
        if sent.next().is_some() {
            return Err(header_issue("value_error", "send one Idempotency-Key header, not several"));
        }
        let text = first.to_str().map_err(|_| {
            header_issue("string_pattern_mismatch", "the Idempotency-Key must be printable ASCII characters")
        })?;
        // The bounds and pattern are the ones the spec publishes, on `IdempotencyHeader`.
        let value = serde_json::json!({ IDEMPOTENCY_KEY: text });
        validate_value::<IdempotencyHeader>(Source::Header, &value)
            .map(|h| IdempotencyKey(h.idempotency_key))
            .map_err(ApiError::validation_http_error)
    }

    fn metadata(ct: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <Header<IdempotencyHeader> as SharedExtractor>::metadata(ct)
    }
}

/// The `Last-Event-ID` header of an event stream: the id of the last event a
/// client received, after which it resumes. Not a UUID: a 422 naming it.
pub struct LastEventId(pub Option<uuid::Uuid>);

/// The header's name, as `loc` names it.
pub const LAST_EVENT_ID: &str = "last-event-id";

#[async_trait]
impl SharedExtractor for LastEventId {
    async fn from_request<C: ServerContext>(rqctx: &RequestContext<C>) -> Result<Self, HttpError> {
        let Some(sent) = rqctx.request.headers().get(LAST_EVENT_ID) else { return Ok(LastEventId(None)) };
        let invalid = || {
            let mut i = issue(
                Source::Header,
                "uuid_parsing",
                "Last-Event-ID should be the id of a transition (a UUID)",
            );
            i.loc.push(LocPart::Key(LAST_EVENT_ID.into()));
            ApiError::validation_http_error(vec![i])
        };
        // An event source that saw no `id:` yet sends no header (never an empty one).
        let text = sent.to_str().map_err(|_| invalid())?.trim();
        text.parse().map(|id| LastEventId(Some(id))).map_err(|_| invalid())
    }

    fn metadata(ct: ApiEndpointBodyContentType) -> ExtractorMetadata {
        <Header<crate::types::LastEventIdHeader> as SharedExtractor>::metadata(ct)
    }
}
