//! The handler of `POST /api/sessions/{id}/chat`: a whole answer as JSON, or a stream.

use dropshot::RequestContext;

use super::context::Ctx;
use super::run::{run_once, run_once_stream};
use crate::api::types::*;
use crate::api::{ApiError, ChatAnswer, IdempotencyKey, JsonBody, PathParams, Reply};

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
