//! The handler of `POST /api/sessions/{id}/chat`: a whole answer as JSON, or a stream.

use dropshot::RequestContext;

use super::context::Ctx;
use super::run::{run, run_once};
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
        // A stream is not replayed (see the operation's description): it runs again.
        run(&rqctx, |app, t| async move { super::stream::chat_stream(app, t, id, body).await }).await
    } else {
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.chat(t, id, body).await.map(ChatAnswer::Json)
        })
        .await
    }
}
