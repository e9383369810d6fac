//! Handlers of OpenAI's model lookup and embeddings (`GET /v1/models/{model}`,
//! `POST /v1/embeddings`): errors in OpenAI's shape, as the other `/v1` routes.

use dropshot::{HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::run::run;
use crate::api::types::*;
use crate::api::{JsonBody, OpenAiError, PathParams, Reply, V1};

pub async fn openai_model_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ModelPath>,
) -> V1<HttpResponseOk<Model>> {
    let model = path.into_inner().model;
    let reply = run(&rqctx, |app, t| async move { app.model_get(t, &model).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_embedding_create(
    rqctx: RequestContext<Ctx>,
    body: JsonBody<EmbeddingRequest>,
) -> V1<HttpResponseOk<EmbeddingList>> {
    let (body, _) = body.into_parts();
    if let Some((param, message)) = body.unsupported() {
        return Ok(Reply::Err(OpenAiError::unsupported(param, message, &rqctx.request_id)));
    }
    let reply = run(&rqctx, |app, t| async move { app.embedding_create(t, body).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}
