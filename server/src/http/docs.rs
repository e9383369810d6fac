//! Handlers of documents and search: the same for agents and users, only the owner differs.

use dropshot::{HttpResponseCreated, HttpResponseDeleted, HttpResponseOk, RequestContext};

use super::context::Ctx;
use super::paging::list_query;
use super::run::{run, run_once};
use crate::api::types::*;
use crate::api::{Created, Deleted, IdempotencyKey, JsonBody, Ok200, PathParams, QueryParams};

pub async fn agent_doc_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    key: IdempotencyKey,
    body: JsonBody<CreateDocRequest>,
) -> Created<Doc> {
    doc_create(&rqctx, agent(path.into_inner().id), key, body).await
}

pub async fn agent_doc_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Doc>> {
    doc_list(&rqctx, agent(path.into_inner().id), query.into_inner()).await
}

pub async fn agent_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Ok200<Doc> {
    let p = path.into_inner();
    doc_get(&rqctx, agent(p.id), p.doc_id).await
}

pub async fn agent_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<AgentDocPath>) -> Deleted {
    let p = path.into_inner();
    doc_delete(&rqctx, agent(p.id), p.doc_id).await
}

pub async fn agent_search_text(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    query: QueryParams<TextSearchParams>,
) -> Ok200<DocSearchResponse> {
    doc_search(&rqctx, agent(path.into_inner().id), query.into_inner().into()).await
}

pub async fn agent_search(
    rqctx: RequestContext<Ctx>,
    path: PathParams<AgentPath>,
    key: IdempotencyKey,
    body: JsonBody<SearchRequest>,
) -> Ok200<DocSearchResponse> {
    doc_search_post(&rqctx, agent(path.into_inner().id), key, body).await
}

pub async fn user_doc_create(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    key: IdempotencyKey,
    body: JsonBody<CreateDocRequest>,
) -> Created<Doc> {
    doc_create(&rqctx, user(path.into_inner().user_id), key, body).await
}

pub async fn user_doc_list(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    query: QueryParams<ListParams>,
) -> Ok200<ListResponse<Doc>> {
    doc_list(&rqctx, user(path.into_inner().user_id), query.into_inner()).await
}

pub async fn user_doc_get(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Ok200<Doc> {
    let p = path.into_inner();
    doc_get(&rqctx, user(p.user_id), p.doc_id).await
}

pub async fn user_doc_delete(rqctx: RequestContext<Ctx>, path: PathParams<UserDocPath>) -> Deleted {
    let p = path.into_inner();
    doc_delete(&rqctx, user(p.user_id), p.doc_id).await
}

pub async fn user_search_text(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    query: QueryParams<TextSearchParams>,
) -> Ok200<DocSearchResponse> {
    doc_search(&rqctx, user(path.into_inner().user_id), query.into_inner().into()).await
}

pub async fn user_search(
    rqctx: RequestContext<Ctx>,
    path: PathParams<UserPath>,
    key: IdempotencyKey,
    body: JsonBody<SearchRequest>,
) -> Ok200<DocSearchResponse> {
    doc_search_post(&rqctx, user(path.into_inner().user_id), key, body).await
}

fn agent(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::Agent }
}

fn user(id: uuid::Uuid) -> DocOwner {
    DocOwner { id, role: OwnerRole::User }
}

async fn doc_create(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    key: IdempotencyKey,
    body: JsonBody<CreateDocRequest>,
) -> Created<Doc> {
    let (body, digest) = body.into_parts();
    run_once(rqctx, key, digest, None, |app, t| async move {
        app.doc_create(t, owner, body).await.map(HttpResponseCreated)
    })
    .await
}

async fn doc_list(rqctx: &RequestContext<Ctx>, owner: DocOwner, p: ListParams) -> Ok200<ListResponse<Doc>> {
    let q = list_query(&p);
    run(rqctx, |app, t| async move {
        app.doc_list(t, owner, &q).map(|items| HttpResponseOk(ListResponse { items }))
    })
    .await
}

async fn doc_get(rqctx: &RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Ok200<Doc> {
    run(rqctx, |app, t| async move { app.doc_get(t, owner, id).map(HttpResponseOk) }).await
}

async fn doc_delete(rqctx: &RequestContext<Ctx>, owner: DocOwner, id: uuid::Uuid) -> Deleted {
    run(rqctx, |app, t| async move { app.doc_delete(t, owner, id).await.map(|()| HttpResponseDeleted()) })
        .await
}

async fn doc_search(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    req: SearchRequest,
) -> Ok200<DocSearchResponse> {
    run(rqctx, |app, t| async move { app.doc_search(t, owner, req).await.map(HttpResponseOk) }).await
}

async fn doc_search_post(
    rqctx: &RequestContext<Ctx>,
    owner: DocOwner,
    key: IdempotencyKey,
    body: JsonBody<SearchRequest>,
) -> Ok200<DocSearchResponse> {
    let (req, digest) = body.into_parts();
    run_once(rqctx, key, digest, None, |app, t| async move {
        app.doc_search(t, owner, req).await.map(HttpResponseOk)
    })
    .await
}
