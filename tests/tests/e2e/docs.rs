//! Documents of agents and users through the generated client and raw HTTP,
//! against a live server.

use agent_platform_tests::{TestServer, doc, meta, status_of, types};
use serde_json::json;
use uuid::Uuid;

#[tokio::test]
async fn agent_doc_routes_happy_path() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let created = s
        .client
        .agent_doc_create()
        .id(a.id)
        .body(doc("Notes", &["first snippet", "second snippet"]).metadata(Some(meta(json!({"lang": "en"})))))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = created.into_inner();
    assert_eq!(created.title, "Notes");
    assert_eq!(created.content, vec!["first snippet", "second snippet"]);
    assert_eq!(created.owner, types::DocOwner { id: a.id, role: types::OwnerRole::Agent });
    assert_eq!(created.metadata, Some(meta(json!({"lang": "en"}))));
    assert_eq!(created.embeddings, None);

    let got = s.client.agent_doc_get().id(a.id).doc_id(created.id).send().await.unwrap().into_inner();
    assert_eq!(got, created);
    let list = s.client.agent_doc_list().id(a.id).send().await.unwrap().into_inner();
    assert_eq!(list.items, vec![created.clone()]);

    let deleted = s.client.agent_doc_delete().id(a.id).doc_id(created.id).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(status_of(s.client.agent_doc_get().id(a.id).doc_id(created.id).send().await), 404);
    assert_eq!(
        status_of(s.client.agent_doc_delete().id(a.id).doc_id(created.id).send().await),
        404,
        "a second delete is a 404"
    );
    assert!(s.client.agent_doc_list().id(a.id).send().await.unwrap().items.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn user_doc_routes_happy_path() {
    let s = TestServer::start().await;
    let u = s.create_user("Grace").await;
    let created =
        s.client.user_doc_create().user_id(u.id).body(doc("Diary", &["dear diary"])).send().await.unwrap();
    assert_eq!(created.status(), 201);
    let created = created.into_inner();
    assert_eq!(created.owner, types::DocOwner { id: u.id, role: types::OwnerRole::User });
    let got = s.client.user_doc_get().user_id(u.id).doc_id(created.id).send().await.unwrap().into_inner();
    assert_eq!(got, created);
    assert_eq!(s.client.user_doc_list().user_id(u.id).send().await.unwrap().items, vec![created.clone()]);
    s.client.user_doc_delete().user_id(u.id).doc_id(created.id).send().await.unwrap();
    assert_eq!(status_of(s.client.user_doc_get().user_id(u.id).doc_id(created.id).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn a_single_string_content_is_stored_as_a_one_snippet_list() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let r = s
        .raw("POST", &format!("/api/agents/{}/docs", a.id), Some(r#"{"title": "t", "content": "just one"}"#))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["content"], json!(["just one"]));
    assert_eq!(r.body["owner"], json!({"id": a.id, "role": "agent"}));
    assert_eq!(r.body["metadata"], json!(null));
    s.stop().await;
}

#[tokio::test]
async fn embeddings_are_stored_and_answered() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let vectors = vec![vec![0.5, -1.0, 0.25], vec![1.0, 0.0, 0.0]];
    let d = s.agent_doc(a.id, doc("v", &["one", "two"]).embeddings(Some(vectors.clone()))).await;
    assert_eq!(d.embeddings, Some(vectors.clone()));
    let got = s.client.agent_doc_get().id(a.id).doc_id(d.id).send().await.unwrap();
    assert_eq!(got.embeddings, Some(vectors));
    s.stop().await;
}

#[tokio::test]
async fn doc_list_pages_orders_and_filters_by_metadata() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let mut ids = Vec::new();
    for (i, lang) in ["en", "fr", "en"].iter().enumerate() {
        let d = s
            .agent_doc(a.id, doc(&format!("doc {i}"), &["text"]).metadata(Some(meta(json!({"lang": lang})))))
            .await;
        ids.push(d.id);
    }
    let list = |dir: types::Direction, limit: u64, offset: i64| {
        s.client
            .agent_doc_list()
            .id(a.id)
            .direction(dir)
            .limit(std::num::NonZeroU64::new(limit).unwrap())
            .offset(offset)
    };
    let page = list(types::Direction::Desc, 2, 0).send().await.unwrap().into_inner().items;
    assert_eq!(
        page.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![ids[2], ids[1]],
        "newest first by default"
    );
    let page = list(types::Direction::Asc, 2, 1).send().await.unwrap().into_inner().items;
    assert_eq!(page.iter().map(|d| d.id).collect::<Vec<_>>(), vec![ids[1], ids[2]]);
    let en = s
        .client
        .agent_doc_list()
        .id(a.id)
        .metadata_filter(r#"{"lang":"en"}"#)
        .direction(types::Direction::Asc)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(en.iter().map(|d| d.id).collect::<Vec<_>>(), vec![ids[0], ids[2]]);
    s.raw("GET", &format!("/api/agents/{}/docs?metadata_filter=[1]", a.id), None)
        .await
        .assert_422(json!(["query", "metadata_filter"]), "dict_type");
    s.stop().await;
}

#[tokio::test]
async fn docs_of_an_unknown_owner_are_404() {
    let s = TestServer::start().await;
    let nobody = Uuid::now_v7();
    assert_eq!(status_of(s.client.agent_doc_create().id(nobody).body(doc("t", &["x"])).send().await), 404);
    assert_eq!(status_of(s.client.agent_doc_list().id(nobody).send().await), 404);
    assert_eq!(status_of(s.client.agent_doc_get().id(nobody).doc_id(Uuid::now_v7()).send().await), 404);
    assert_eq!(
        status_of(s.client.user_doc_create().user_id(nobody).body(doc("t", &["x"])).send().await),
        404
    );
    assert_eq!(status_of(s.client.user_doc_list().user_id(nobody).send().await), 404);
    let r =
        s.raw("POST", &format!("/api/agents/{nobody}/docs"), Some(r#"{"title": "t", "content": "x"}"#)).await;
    assert_eq!(r.body["code"], "not_found");
    assert!(r.body["detail"].as_str().unwrap().contains(&nobody.to_string()), "{}", r.body);
    s.stop().await;
}

#[tokio::test]
async fn a_doc_is_found_only_under_its_own_owner() {
    let s = TestServer::start().await;
    let (a, b, u) = (s.create_agent("A").await, s.create_agent("B").await, s.create_user("U").await);
    let d = s.agent_doc(a.id, doc("t", &["x"])).await;
    assert_eq!(status_of(s.client.agent_doc_get().id(b.id).doc_id(d.id).send().await), 404);
    assert_eq!(status_of(s.client.agent_doc_delete().id(b.id).doc_id(d.id).send().await), 404);
    assert_eq!(status_of(s.client.user_doc_get().user_id(u.id).doc_id(d.id).send().await), 404);
    assert!(s.client.agent_doc_list().id(b.id).send().await.unwrap().items.is_empty());
    // ...and it is still there.
    assert_eq!(s.client.agent_doc_get().id(a.id).doc_id(d.id).send().await.unwrap().into_inner(), d);
    s.stop().await;
}

#[tokio::test]
async fn another_tenants_docs_are_404_everywhere() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let d = s.agent_doc(a.id, doc("t", &["x"])).await;
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.agent_doc_get().id(a.id).doc_id(d.id).send().await), 404);
    assert_eq!(status_of(other.agent_doc_list().id(a.id).send().await), 404);
    assert_eq!(status_of(other.agent_doc_delete().id(a.id).doc_id(d.id).send().await), 404);
    assert_eq!(status_of(other.agent_doc_create().id(a.id).body(doc("t", &["x"])).send().await), 404);
    assert_eq!(s.client.agent_doc_list().id(a.id).send().await.unwrap().items, vec![d]);
    s.stop().await;
}

#[tokio::test]
async fn doc_title_and_content_bounds_are_422_naming_the_field() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let path = format!("/api/agents/{}/docs", a.id);
    let post = |body: serde_json::Value| {
        let (s, path) = (&s, path.clone());
        async move { s.raw("POST", &path, Some(&body.to_string())).await }
    };
    post(json!({"title": "", "content": "x"})).await.assert_422(json!(["body", "title"]), "string_too_short");
    post(json!({"title": "t".repeat(801), "content": "x"}))
        .await
        .assert_422(json!(["body", "title"]), "string_too_long");
    post(json!({"content": "x"})).await.assert_422(json!(["body", "title"]), "missing");
    post(json!({"title": "t"})).await.assert_422(json!(["body", "content"]), "missing");
    post(json!({"title": "t", "content": []})).await.assert_422(json!(["body", "content"]), "too_short");
    post(json!({"title": "t", "content": vec!["x"; 1001]}))
        .await
        .assert_422(json!(["body", "content"]), "too_long");
    post(json!({"title": "t", "content": ["ok", "y".repeat(100_001)]}))
        .await
        .assert_422(json!(["body", "content", 1]), "string_too_long");
    post(json!({"title": "t", "content": "y".repeat(100_001)}))
        .await
        .assert_422(json!(["body", "content"]), "string_too_long");
    post(json!({"title": "t", "content": "x", "metadata": [1]}))
        .await
        .assert_422(json!(["body", "metadata"]), "dict_type");
    // The edges are fine.
    let ok = post(json!({"title": "t".repeat(800), "content": vec!["y".repeat(1000); 1000]})).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let ok = post(json!({"title": "t", "content": ["y".repeat(100_000)]})).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(s.client.agent_doc_list().id(a.id).send().await.unwrap().items.len(), 2);
    s.stop().await;
}

#[tokio::test]
async fn embeddings_must_be_one_vector_per_snippet_all_of_the_owners_dimension() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let path = format!("/api/agents/{}/docs", a.id);
    let post = |body: serde_json::Value| {
        let (s, path) = (&s, path.clone());
        async move { s.raw("POST", &path, Some(&body.to_string())).await }
    };
    post(json!({"title": "t", "content": ["a", "b"], "embeddings": [[1.0, 0.0]]}))
        .await
        .assert_422(json!(["body", "embeddings"]), "value_error");
    post(json!({"title": "t", "content": ["a", "b"], "embeddings": [[1.0, 0.0], [1.0]]}))
        .await
        .assert_422(json!(["body", "embeddings", 1]), "value_error");
    post(json!({"title": "t", "content": ["a"], "embeddings": [[]]}))
        .await
        .assert_422(json!(["body", "embeddings", 0]), "too_short");
    post(json!({"title": "t", "content": ["a"], "embeddings": [["x"]]}))
        .await
        .assert_422(json!(["body", "embeddings", 0, 0]), "float_type");
    post(json!({"title": "t", "content": ["a"], "embeddings": [[1e300]]}))
        .await
        .assert_422(json!(["body", "embeddings", 0]), "finite_number");

    // The first vectors fix the agent's dimension; others are a 422 and store nothing.
    let ok = post(json!({"title": "t", "content": ["a"], "embeddings": [[1.0, 0.0, 0.0]]})).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let bad = post(json!({"title": "t", "content": ["b"], "embeddings": [[1.0, 0.0]]})).await;
    bad.assert_422(json!(["body", "embeddings", 0]), "value_error");
    assert!(bad.body["detail"][0]["msg"].as_str().unwrap().contains("dimension 3"), "{}", bad.body);
    assert_eq!(s.client.agent_doc_list().id(a.id).send().await.unwrap().items.len(), 1);
    // A doc without vectors is fine, and another owner has its own dimension.
    assert_eq!(post(json!({"title": "t", "content": ["c"]})).await.status, 201);
    let b = s.create_agent("B").await;
    s.agent_doc(b.id, doc("t", &["b"]).embeddings(Some(vec![vec![1.0, 0.0]]))).await;
    // Once the agent's last vectors are gone, a new dimension is welcome.
    let id = ok.body["id"].as_str().unwrap().parse::<Uuid>().unwrap();
    s.client.agent_doc_delete().id(a.id).doc_id(id).send().await.unwrap();
    assert_eq!(post(json!({"title": "t", "content": ["b"], "embeddings": [[1.0, 0.0]]})).await.status, 201);
    s.stop().await;
}

#[tokio::test]
async fn doc_path_ids_that_are_not_uuids_are_422_at_the_path() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    s.raw("GET", &format!("/api/agents/{}/docs/nope", a.id), None)
        .await
        .assert_422(json!(["path", "doc_id"]), "uuid_parsing");
    s.raw("GET", "/api/users/nope/docs", None).await.assert_422(json!(["path", "user_id"]), "uuid_parsing");
    s.stop().await;
}

#[tokio::test]
async fn deleting_an_agent_deletes_its_docs_from_the_store_and_the_index() {
    let s = TestServer::start().await;
    let (a, keep) = (s.create_agent("Ada").await, s.create_agent("Keep").await);
    let d = s.agent_doc(a.id, doc("t", &["alpha beta", "gamma"])).await;
    s.agent_doc(keep.id, doc("t", &["alpha"])).await;
    assert_eq!(s.indexed_snippets(a.id).await, 2);
    s.client.agent_delete().id(a.id).send().await.unwrap();
    assert_eq!(s.indexed_snippets(a.id).await, 0);
    assert_eq!(s.indexed_snippets(keep.id).await, 1);
    assert_eq!(status_of(s.client.agent_doc_get().id(a.id).doc_id(d.id).send().await), 404);
    let tenant = s.app().authenticate(&s.key).await.unwrap().unwrap();
    assert!(s.app().store.get(tenant.0, agent_platform::store::Kind::Doc, d.id).await.unwrap().is_none());
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_user_deletes_its_docs_from_the_store_and_the_index() {
    let s = TestServer::start().await;
    let u = s.create_user("Grace").await;
    let d = s.client.user_doc_create().user_id(u.id).body(doc("t", &["alpha"])).send().await.unwrap();
    assert_eq!(s.indexed_snippets(u.id).await, 1);
    s.client.user_delete().user_id(u.id).send().await.unwrap();
    assert_eq!(s.indexed_snippets(u.id).await, 0);
    let tenant = s.app().authenticate(&s.key).await.unwrap().unwrap();
    assert!(s.app().store.get(tenant.0, agent_platform::store::Kind::Doc, d.id).await.unwrap().is_none());
    s.stop().await;
}

/// Creates racing with the deletion of their owner never leave a doc in the
/// index that the store does not have. (Over HTTP the timing is left to
/// chance; `app::docs`'s unit tests pin the interleavings down.)
#[tokio::test]
async fn creates_racing_an_owner_delete_leave_the_index_and_the_store_agreeing() {
    let s = TestServer::start().await;
    let tenant = s.app().authenticate(&s.key).await.unwrap().unwrap();
    for round in 0..10 {
        let a = s.create_agent("Racer").await;
        let creates: Vec<_> = (0..8)
            .map(|i| {
                let client = s.client.clone();
                tokio::spawn(async move {
                    let body = doc(&format!("{round}-{i}"), &["racing words"]);
                    client.agent_doc_create().id(a.id).body(body).send().await.map(|d| d.into_inner().id)
                })
            })
            .collect();
        tokio::task::yield_now().await;
        s.client.agent_delete().id(a.id).send().await.unwrap();
        for c in creates {
            // Each create either landed before the delete (and was cascaded) or got a 404.
            match c.await.unwrap() {
                Ok(id) => {
                    assert!(
                        s.app()
                            .store
                            .get(tenant.0, agent_platform::store::Kind::Doc, id)
                            .await
                            .unwrap()
                            .is_none()
                    )
                }
                Err(e) => assert_eq!(e.status().map(|s| s.as_u16()), Some(404), "round {round}: {e}"),
            }
        }
        assert_eq!(s.indexed_snippets(a.id).await, 0, "round {round}");
    }
    s.stop().await;
}
