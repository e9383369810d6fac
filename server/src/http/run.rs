//! How a handler runs its operation: it authenticates the caller, runs the
//! domain call with the caller's tenant, maps a domain error, and for a POST
//! honours its `Idempotency-Key` (replays a remembered answer, or remembers
//! this one).

use std::future::Future;

use dropshot::{ErrorStatusCode, HttpResponseCreated, HttpResponseOk, RequestContext};
use http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use slog::error;

use super::context::Ctx;
use super::error::{api_error, domain_error};
use crate::api::{ApiError, ChatAnswer, IdempotencyKey, Reply};
use crate::app::idempotency::{self, Begun, Remembered};
use crate::app::{self, App, Tenant};

/// Finds the tenant of the request's API key (`Bearer <key>` or a bare key).
async fn authenticate(rqctx: &RequestContext<Ctx>) -> Result<Tenant, ApiError> {
    let rid = rqctx.request_id.as_str();
    let unauthorized = |msg: &str| ApiError::new(ErrorStatusCode::UNAUTHORIZED, "unauthorized", msg, rid);
    let Some(header) = rqctx.request.headers().get(http::header::AUTHORIZATION) else {
        return Err(unauthorized("missing API key: send the header `Authorization: Bearer <key>`"));
    };
    let header =
        header.to_str().map_err(|_| unauthorized("the Authorization header is not valid text"))?.trim();
    let key = match header.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
        _ => header,
    };
    match rqctx.context().app.authenticate(key).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(unauthorized("unknown API key")),
        Err(e) => Err(api_error(e, rid)),
    }
}

/// Runs an authenticated operation and turns its outcome into a [`Reply`].
pub async fn run<R, F, Fut>(rqctx: &RequestContext<Ctx>, op: F) -> Result<Reply<R>, ApiError>
where
    F: FnOnce(App, Tenant) -> Fut,
    Fut: Future<Output = app::Result<R>>,
{
    let tenant = match authenticate(rqctx).await {
        Ok(t) => t,
        Err(e) => return Ok(Reply::Err(e)),
    };
    match op(rqctx.context().app.clone(), tenant).await {
        Ok(r) => Ok(Reply::Ok(r)),
        Err(e) => Ok(Reply::Err(domain_error(rqctx, e))),
    }
}

/// A success answer of a POST, as remembered with its `Idempotency-Key`.
pub trait Replayable {
    /// The status of the success.
    const STATUS: StatusCode;
    /// The JSON body, or `None` for an answer that is not replayed (a stream).
    fn json(&self) -> Option<String>;
}

impl<T: Serialize + JsonSchema + Send + Sync + 'static> Replayable for HttpResponseCreated<T> {
    const STATUS: StatusCode = StatusCode::CREATED;
    fn json(&self) -> Option<String> {
        serde_json::to_string(&self.0).ok()
    }
}

impl<T: Serialize + JsonSchema + Send + Sync + 'static> Replayable for HttpResponseOk<T> {
    const STATUS: StatusCode = StatusCode::OK;
    fn json(&self) -> Option<String> {
        serde_json::to_string(&self.0).ok()
    }
}

impl<T: Serialize + JsonSchema + Send + Sync + 'static> Replayable for ChatAnswer<T> {
    const STATUS: StatusCode = StatusCode::OK;
    fn json(&self) -> Option<String> {
        match self {
            ChatAnswer::Json(r) => serde_json::to_string(r).ok(),
            ChatAnswer::Stream(_) => None,
        }
    }
}

/// [`run`] for a POST, honouring its `Idempotency-Key` (see [`app::idempotency`]):
/// a repeat answers the remembered answer, a new request runs under a claim that
/// its write commits with. `body` is the digest of the request body;
/// `withheld`, for an answer that must not be stored (it shows a secret), says
/// what a repeat is told instead (a 409).
pub async fn run_once<R, F, Fut>(
    rqctx: &RequestContext<Ctx>,
    key: IdempotencyKey,
    body: Option<[u8; 32]>,
    withheld: Option<fn(&R) -> String>,
    op: F,
) -> Result<Reply<R>, ApiError>
where
    R: Replayable,
    F: FnOnce(App, Tenant) -> Fut,
    Fut: Future<Output = app::Result<R>>,
{
    let Some(key) = key.0 else { return run(rqctx, op).await };
    let (app, tenant, claim, _queue) = match claim_once(rqctx, &key, body, R::STATUS).await {
        Ok(claimed) => claimed,
        Err(reply) => return Ok(reply),
    };
    let answer = match claim.scope(op(app.clone(), tenant)).await {
        Ok(r) => r,
        Err(e) => return Ok(Reply::Err(domain_error(rqctx, e))),
    };
    let remembered = match withheld {
        Some(detail) => Some(Remembered::Withheld { detail: detail(&answer) }),
        None => answer.json().map(|body| Remembered::Answer { status: R::STATUS.as_u16(), body }),
    };
    if let Some(remembered) = remembered
        && let Err(e) = app.idempotency_save(&claim, remembered).await
    {
        // It answers anyway: it wrote nothing else, so a repeat runs it again.
        error!(rqctx.log, "the answer of a request with an Idempotency-Key was not remembered";
            "error" => e.to_string());
    }
    Ok(Reply::Ok(answer))
}

/// Authenticates a POST sent with the `Idempotency-Key` `key` and claims the
/// key for it; a repeat gets, as the `Err`, what the key remembers (its
/// answer, its events, or the 409 of an answer withheld; `status` when the
/// stored status does not read). `body` is the digest of the request body.
async fn claim_once<R>(
    rqctx: &RequestContext<Ctx>,
    key: &str,
    body: Option<[u8; 32]>,
    status: StatusCode,
) -> Result<
    (App, Tenant, std::sync::Arc<idempotency::Claim>, crate::app::locks::KeyedGuard<(Tenant, uuid::Uuid)>),
    Reply<R>,
> {
    let tenant = authenticate(rqctx).await.map_err(Reply::Err)?;
    let app = rqctx.context().app.clone();
    let (method, path) = (rqctx.request.method().as_str(), rqctx.request.uri().path());
    let fingerprint = idempotency::fingerprint(method, path, body.as_ref().map_or(&[][..], |d| &d[..]));
    let begun = app.idempotency_begin(tenant, key, format!("{method} {path}"), fingerprint, status.as_u16());
    match begun.await {
        Err(e) => Err(Reply::Err(domain_error(rqctx, e))),
        Ok(Begun::Replay(Remembered::Answer { status: stored, body })) => {
            Err(Reply::Replayed { status: StatusCode::from_u16(stored).unwrap_or(status), body })
        }
        Ok(Begun::Replay(Remembered::Stream { events })) => Err(Reply::ReplayedStream { body: events }),
        Ok(Begun::Replay(Remembered::Withheld { detail })) => {
            Err(Reply::Err(domain_error(rqctx, app::Error::Conflict(detail))))
        }
        Ok(Begun::Fresh(claim, queue)) => Ok((app, tenant, claim, queue)),
    }
}

/// A streamed answer's `Idempotency-Key` claim, and the key's lock, held
/// until the stream has ended (see [`run_once_stream`]).
pub struct StreamClaim {
    pub claim: std::sync::Arc<idempotency::Claim>,
    pub _queue: crate::app::locks::KeyedGuard<(Tenant, uuid::Uuid)>,
}

/// [`run_once`] for a POST answered by a stream (a chat, a `/v1` response): a
/// repeat of one that ended well gets its events again (`text/event-stream`);
/// one sent while it streams waits for it, then is a 409. `op` gets the claim
/// (when a key was sent), which its stream keeps until it ends: the turn it
/// saves commits with the key's record, and its events are remembered once sent.
pub async fn run_once_stream<T, F, Fut>(
    rqctx: &RequestContext<Ctx>,
    key: IdempotencyKey,
    body: Option<[u8; 32]>,
    op: F,
) -> Result<Reply<ChatAnswer<T>>, ApiError>
where
    F: FnOnce(App, Tenant, Option<StreamClaim>) -> Fut,
    Fut: Future<Output = app::Result<ChatAnswer<T>>>,
{
    let Some(key) = key.0 else { return run(rqctx, |app, t| op(app, t, None)).await };
    let (app, tenant, claim, queue) = match claim_once(rqctx, &key, body, StatusCode::OK).await {
        Ok(claimed) => claimed,
        Err(reply) => return Ok(reply),
    };
    claim.answers_a_stream();
    let held = StreamClaim { claim: claim.clone(), _queue: queue };
    match claim.scope(op(app, tenant, Some(held))).await {
        Ok(r) => Ok(Reply::Ok(r)),
        Err(e) => Ok(Reply::Err(domain_error(rqctx, e))),
    }
}
