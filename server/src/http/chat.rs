//! The handlers of `POST /api/sessions/{id}/chat` (a whole answer as JSON,
//! or a stream) and of a session's background runs (`/api/sessions/{id}/runs`).

use dropshot::{HttpResponseCreated, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::run::{run, run_once, run_once_stream};
use crate::api::types::*;
use crate::api::{ApiError, ChatAnswer, Created, IdempotencyKey, JsonBody, Ok200, PathParams, Reply};

pub async fn session_chat(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
    key: IdempotencyKey,
    body: JsonBody<ChatRequest>,
) -> Result<Reply<ChatAnswer>, ApiError> {
    let (id, (body, digest)) = (path.into_inner().id, body.into_parts());
    if body.stream {
        run_once_stream(&rqctx, key, digest, |app, t, keyed| async move {
            super::stream::chat_stream(app, t, id, body, keyed).await
        })
        .await
    } else {
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.chat(t, id, body).await.map(ChatAnswer::Json)
        })
        .await
    }
}

pub async fn session_run_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionPath>,
    key: IdempotencyKey,
    body: JsonBody<SessionRunRequest>,
) -> Created<SessionRun> {
    let (id, (body, digest)) = (path.into_inner().id, body.into_parts());
    run_once(&rqctx, key, digest, None, |app, t| async move {
        app.session_run_create(t, id, body).await.map(HttpResponseCreated)
    })
    .await
}

pub async fn session_run_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionRunPath>,
) -> Ok200<SessionRun> {
    let SessionRunPath { id, run_id } = path.into_inner();
    run(&rqctx, |app, t| async move { app.session_run_get(t, id, &run_id).await.map(HttpResponseOk) }).await
}

pub async fn session_run_cancel(
    rqctx: RequestContext<Ctx>,
    path: PathParams<SessionRunPath>,
) -> Ok200<SessionRun> {
    let SessionRunPath { id, run_id } = path.into_inner();
    run(&rqctx, |app, t| async move { app.session_run_cancel(t, id, &run_id).await.map(HttpResponseOk) })
        .await
}
