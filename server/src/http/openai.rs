//! Handlers of the OpenAI-compatible routes (`/v1`): the same authentication
//! and domain as `/api`, their errors in OpenAI's shape ([`Reply::openai`]).

use dropshot::{HttpResponseOk, RequestContext, WebsocketUpgrade};

use super::context::Ctx;
use super::run::{run, run_once, run_once_stream};
use crate::api::types::*;
use crate::api::{
    ApiError, ChatAnswer, IdempotencyKey, JsonBody, OpenAiError, PathParams, QueryParams, Reply,
    SwitchingToWebsocket, V1,
};

pub async fn openai_model_list(rqctx: RequestContext<Ctx>) -> V1<HttpResponseOk<ModelList>> {
    let reply = run(&rqctx, |app, t| async move { app.model_list(t).await.map(HttpResponseOk) }).await;
    Ok(reply?.openai())
}

pub async fn openai_chat_completion(
    rqctx: RequestContext<Ctx>,
    key: IdempotencyKey,
    body: JsonBody<ChatCompletionRequest>,
) -> V1<ChatAnswer<ChatCompletion>> {
    let (body, digest) = body.into_parts();
    if let Some((param, message)) = body.unsupported() {
        return Ok(Reply::Err(OpenAiError::unsupported(param, message, &rqctx.request_id)));
    }
    let reply = if body.stream {
        // A stream is not replayed: it runs again.
        run(&rqctx, |app, t| async move { super::stream::completion_stream(app, t, body).await }).await
    } else {
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.completion(t, body).await.map(ChatAnswer::Json)
        })
        .await
    };
    Ok(reply?.openai())
}

/// A 400 naming the first unsupported item of `items` (under `field`), if any.
fn unsupported_items(rqctx: &RequestContext<Ctx>, field: &str, items: &[InputItem]) -> Option<OpenAiError> {
    unsupported_item(field, items)
        .map(|(param, message)| OpenAiError::unsupported(param, message, &rqctx.request_id))
}

pub async fn openai_conversation_create(
    rqctx: RequestContext<Ctx>,
    key: IdempotencyKey,
    body: JsonBody<CreateConversationRequest>,
) -> V1<HttpResponseOk<Conversation>> {
    let (body, digest) = body.into_parts();
    if let Some(e) = unsupported_items(&rqctx, "items", body.items.as_deref().unwrap_or_default()) {
        return Ok(Reply::Err(e));
    }
    let reply = run_once(&rqctx, key, digest, None, |app, t| async move {
        app.conversation_create(t, body).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_conversation_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationPath>,
) -> V1<HttpResponseOk<Conversation>> {
    let id = path.into_inner().conversation_id.0;
    let reply = run(&rqctx, |app, t| async move { app.conversation_get(t, id).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_conversation_update(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationPath>,
    key: IdempotencyKey,
    body: JsonBody<UpdateConversationRequest>,
) -> V1<HttpResponseOk<Conversation>> {
    let (id, (body, digest)) = (path.into_inner().conversation_id.0, body.into_parts());
    let reply = run_once(&rqctx, key, digest, None, |app, t| async move {
        app.conversation_update(t, id, body.metadata).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_conversation_delete(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationPath>,
) -> V1<HttpResponseOk<ConversationDeleted>> {
    let id = path.into_inner().conversation_id.0;
    let reply = run(&rqctx, |app, t| async move { app.conversation_delete(t, id).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_item_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationPath>,
    query: QueryParams<ItemListParams>,
) -> V1<HttpResponseOk<ItemList>> {
    let (id, params) = (path.into_inner().conversation_id.0, query.into_inner());
    let reply =
        run(&rqctx, |app, t| async move { app.conversation_items(t, id, params).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_item_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationPath>,
    key: IdempotencyKey,
    body: JsonBody<CreateItemsRequest>,
) -> V1<HttpResponseOk<ItemList>> {
    let (id, (body, digest)) = (path.into_inner().conversation_id.0, body.into_parts());
    if let Some(e) = unsupported_items(&rqctx, "items", &body.items) {
        return Ok(Reply::Err(e));
    }
    let reply = run_once(&rqctx, key, digest, None, |app, t| async move {
        app.conversation_items_create(t, id, body).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_item_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationItemPath>,
) -> V1<HttpResponseOk<ConversationItem>> {
    let ConversationItemPath { conversation_id, item_id } = path.into_inner();
    let reply = run(&rqctx, |app, t| async move {
        app.conversation_item(t, conversation_id.0, &item_id).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_item_delete(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ConversationItemPath>,
) -> V1<HttpResponseOk<Conversation>> {
    let ConversationItemPath { conversation_id, item_id } = path.into_inner();
    let reply = run(&rqctx, |app, t| async move {
        app.conversation_item_delete(t, conversation_id.0, &item_id).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_response_create(
    rqctx: RequestContext<Ctx>,
    key: IdempotencyKey,
    body: JsonBody<CreateResponseRequest>,
) -> V1<ChatAnswer<ModelResponse>> {
    let (body, digest) = body.into_parts();
    if let Some((param, message)) = body.unsupported() {
        return Ok(Reply::Err(OpenAiError::unsupported(param, message, &rqctx.request_id)));
    }
    let background = body.background == Some(true);
    let reply = if background && body.stream {
        run_once_stream(&rqctx, key, digest, |app, t, keyed| async move {
            super::stream::response_background_stream(app, t, body, keyed).await
        })
        .await
    } else if background {
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.response_background(t, body).await.map(ChatAnswer::Json)
        })
        .await
    } else if body.stream {
        run_once_stream(&rqctx, key, digest, |app, t, keyed| async move {
            super::stream::response_stream(app, t, body, keyed).await
        })
        .await
    } else {
        run_once(&rqctx, key, digest, None, |app, t| async move {
            app.response_create(t, body).await.map(ChatAnswer::Json)
        })
        .await
    };
    Ok(reply?.openai())
}

/// Upgrades the request to a WebSocket of the key's tenant (a 401 before any
/// upgrade when the key is missing or unknown); [`super::socket::serve`]
/// serves it.
pub async fn openai_response_socket(
    rqctx: RequestContext<Ctx>,
    upgrade: WebsocketUpgrade,
) -> V1<SwitchingToWebsocket> {
    let ctx = rqctx.context();
    let (limits, closing, log) = (ctx.sockets, ctx.closing.subscribe(), rqctx.log.clone());
    let reply = run(&rqctx, |app, t| async move {
        upgrade.handle(move |conn| super::socket::serve(app, t, conn, limits, closing, log)).map_err(|e| {
            crate::app::Error::Internal(format!("the WebSocket upgrade: {}", e.internal_message))
        })
    });
    Ok(reply.await?.openai())
}

/// `POST /v1/responses/compact`, the one id this route takes (see the operation).
pub async fn openai_response_compact(
    rqctx: RequestContext<Ctx>,
    path: PathParams<CompactPath>,
    key: IdempotencyKey,
    body: JsonBody<CompactResponseRequest>,
) -> V1<HttpResponseOk<CompactedResponse>> {
    let id = path.into_inner().response_id;
    if id != "compact" {
        let message = format!(
            "no route POST /v1/responses/{id}: the only POST under /v1/responses/ is /v1/responses/compact"
        );
        let error =
            ApiError::new(dropshot::ErrorStatusCode::NOT_FOUND, "not_found", message, &rqctx.request_id);
        return Ok(Reply::Err(error.into()));
    }
    let (body, digest) = body.into_parts();
    if let Some((param, message)) = body.unsupported() {
        return Ok(Reply::Err(OpenAiError::unsupported(param, message, &rqctx.request_id)));
    }
    let reply = run_once(&rqctx, key, digest, None, |app, t| async move {
        app.response_compact(t, body).await.map(HttpResponseOk)
    });
    Ok(reply.await?.openai())
}

pub async fn openai_response_get(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ResponsePath>,
    query: QueryParams<ResponseGetParams>,
) -> V1<ChatAnswer<ModelResponse>> {
    let id = path.into_inner().response_id;
    let query = query.into_inner();
    let reply = run(&rqctx, |app, t| async move {
        match query.stream {
            Some(true) => super::stream::response_follow(app, t, id, query.starting_after).await,
            _ => app.response_get(t, &id).await.map(ChatAnswer::Json),
        }
    });
    Ok(reply.await?.openai())
}

pub async fn openai_response_cancel(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ResponsePath>,
) -> V1<HttpResponseOk<ModelResponse>> {
    let id = path.into_inner().response_id;
    let reply = run(&rqctx, |app, t| async move { app.response_cancel(t, &id).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_response_delete(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ResponsePath>,
) -> V1<HttpResponseOk<ResponseDeleted>> {
    let id = path.into_inner().response_id;
    let reply = run(&rqctx, |app, t| async move { app.response_delete(t, &id).await.map(HttpResponseOk) });
    Ok(reply.await?.openai())
}

pub async fn openai_response_input_items(
    rqctx: RequestContext<Ctx>,
    path: PathParams<ResponsePath>,
    query: QueryParams<ItemListParams>,
) -> V1<HttpResponseOk<ItemList>> {
    let (id, params) = (path.into_inner().response_id, query.into_inner());
    let reply =
        run(
            &rqctx,
            |app, t| async move { app.response_input_items(t, &id, params).await.map(HttpResponseOk) },
        );
    Ok(reply.await?.openai())
}
