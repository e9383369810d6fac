//! Searching the documents of agents and users, through the generated client
//! (raw HTTP only for requests it refuses to build), against a live server.

use agent_platform_tests::{Client, Process, TestServer, doc, meta, status_of, types};
use serde_json::json;
use uuid::Uuid;

/// A small corpus, one agent's: (title, snippets, metadata).
const CORPUS: &[(&str, &[&str], &str)] = &[
    ("Weather", &["The weather today is sunny and warm", "Tomorrow brings rain"], "en"),
    ("Zebras", &["A quarterly report on the zebra migration budget"], "en"),
    ("Budget", &["The budget meeting is today", "Bring the budget report"], "en"),
    ("Morning", &["She runs every morning before work"], "en"),
    ("Rendez-vous", &["Meet me at the CAFÉ near the station"], "fr"),
    ("Swimming", &["He swims every morning in the lake"], "en"),
];

/// An agent with [`CORPUS`]; answers the agent and its docs' ids by title.
async fn corpus(s: &TestServer) -> (types::Agent, Vec<(String, Uuid)>) {
    let a = s.create_agent("Librarian").await;
    let mut ids = Vec::new();
    for (title, snippets, lang) in CORPUS {
        let d = s.agent_doc(a.id, doc(title, snippets).metadata(Some(meta(json!({ "lang": lang }))))).await;
        ids.push((title.to_string(), d.id));
    }
    (a, ids)
}

async fn search_text(c: &Client, agent: Uuid, text: &str) -> Vec<types::DocReference> {
    c.agent_search_text().id(agent).text(text).send().await.unwrap().into_inner().docs
}

fn titles(hits: &[types::DocReference]) -> Vec<&str> {
    hits.iter().map(|h| h.title.as_str()).collect()
}

/// (doc id, snippet index) of each hit, in order.
fn keys(hits: &[types::DocReference]) -> Vec<(Uuid, u32)> {
    hits.iter().map(|h| (h.id, h.snippet.index)).collect()
}

fn text_query(text: &str) -> types::builder::SearchRequest {
    types::SearchRequest::builder().text(Some(text.parse().unwrap()))
}

#[tokio::test]
async fn a_unique_phrase_finds_its_document_first() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    let hits = search_text(&s.client, a.id, "zebra migration").await;
    assert_eq!(hits[0].title, "Zebras");
    assert_eq!(hits[0].snippet.content, "A quarterly report on the zebra migration budget");
    assert_eq!(hits[0].snippet.index, 0);
    assert_eq!(hits[0].owner, types::DocOwner { id: a.id, role: types::OwnerRole::Agent });
    assert_eq!(hits[0].metadata, Some(meta(json!({"lang": "en"}))));
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "best first");
    s.stop().await;
}

#[tokio::test]
async fn every_matching_snippet_is_its_own_entry() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    let hits = search_text(&s.client, a.id, "budget").await;
    let budget: Vec<u32> = hits.iter().filter(|h| h.title == "Budget").map(|h| h.snippet.index).collect();
    assert_eq!(budget.len(), 2, "{hits:?}");
    assert!(budget.contains(&0) && budget.contains(&1));
    assert_eq!(
        hits.iter().find(|h| h.title == "Budget" && h.snippet.index == 1).unwrap().snippet.content,
        "Bring the budget report"
    );
    assert!(titles(&hits).contains(&"Zebras"));
    assert!(!titles(&hits).contains(&"Weather"));
    s.stop().await;
}

#[tokio::test]
async fn stemming_lets_running_find_runs() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    assert_eq!(titles(&search_text(&s.client, a.id, "running").await), vec!["Morning"]);
    assert_eq!(titles(&search_text(&s.client, a.id, "swimming").await), vec!["Swimming"]);
    s.stop().await;
}

#[tokio::test]
async fn case_and_accents_are_folded() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    for q in ["cafe", "Café", "CAFE", "café", "CAFÉ"] {
        assert_eq!(titles(&search_text(&s.client, a.id, q).await), vec!["Rendez-vous"], "query {q:?}");
    }
    assert_eq!(titles(&search_text(&s.client, a.id, "ZEBRA").await), vec!["Zebras"]);
    s.stop().await;
}

#[tokio::test]
async fn limit_caps_the_hits_and_defaults_to_10() {
    let s = TestServer::start().await;
    let a = s.create_agent("Many").await;
    for i in 0..15 {
        s.agent_doc(a.id, doc(&format!("doc {i}"), &["a common word"])).await;
    }
    assert_eq!(search_text(&s.client, a.id, "common").await.len(), 10);
    let three =
        s.client.agent_search_text().id(a.id).text("common").limit(std::num::NonZeroU64::new(3).unwrap());
    assert_eq!(three.send().await.unwrap().docs.len(), 3);
    let post = s
        .client
        .agent_search()
        .id(a.id)
        .body(text_query("common").limit(std::num::NonZeroU64::new(100).unwrap()));
    assert_eq!(post.send().await.unwrap().docs.len(), 15);
    s.stop().await;
}

#[tokio::test]
async fn metadata_filter_keeps_only_matching_documents() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    let q = "morning station";
    assert_eq!(search_text(&s.client, a.id, q).await.len(), 3);
    let fr = s
        .client
        .agent_search_text()
        .id(a.id)
        .text(q)
        .metadata_filter(r#"{"lang":"fr"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(titles(&fr.docs), vec!["Rendez-vous"]);
    let en = s
        .client
        .agent_search()
        .id(a.id)
        .body(text_query(q).metadata_filter(Some(meta(json!({"lang": "en"})))))
        .send()
        .await
        .unwrap();
    let mut got = titles(&en.docs);
    got.sort();
    assert_eq!(got, vec!["Morning", "Swimming"]);
    let none = s
        .client
        .agent_search_text()
        .id(a.id)
        .text(q)
        .metadata_filter(r#"{"lang":"de"}"#)
        .send()
        .await
        .unwrap();
    assert!(none.docs.is_empty());
    s.stop().await;
}

/// Search and the doc list share one definition of a metadata match: numbers
/// compare by value, so `{"n": 1}` and `{"n": 1.0}` find the docs stored with
/// either spelling, for agents' and users' docs alike.
#[tokio::test]
async fn metadata_filters_compare_numbers_by_value_in_search_and_in_the_doc_list() {
    let s = TestServer::start().await;
    let (a, u) = (s.create_agent("Numbers").await, s.create_user("Numbers").await);
    let stored = [json!({"n": 1.0}), json!({"n": 1}), json!({"n": 2})];
    let (mut agent_docs, mut user_docs) = (Vec::new(), Vec::new());
    for metadata in &stored {
        let body = || doc("otters", &["otters eat fish"]).metadata(Some(meta(metadata.clone())));
        agent_docs.push(s.agent_doc(a.id, body()).await.id);
        let d = s.client.user_doc_create().user_id(u.id).body(body()).send().await.unwrap();
        user_docs.push(d.id);
    }
    let sorted = |mut ids: Vec<Uuid>| {
        ids.sort();
        ids
    };
    for filter in [json!({"n": 1}), json!({"n": 1.0})] {
        let text = filter.to_string();
        let want = sorted(agent_docs[..2].to_vec());
        let hits =
            s.client.agent_search_text().id(a.id).text("otters").metadata_filter(&text).send().await.unwrap();
        assert_eq!(sorted(hits.docs.iter().map(|h| h.id).collect()), want, "agent search {text}");
        let body = text_query("otters").metadata_filter(Some(meta(filter.clone())));
        let hits = s.client.agent_search().id(a.id).body(body).send().await.unwrap();
        assert_eq!(sorted(hits.docs.iter().map(|h| h.id).collect()), want, "agent search body {text}");
        let list = s.client.agent_doc_list().id(a.id).metadata_filter(&text).send().await.unwrap();
        assert_eq!(sorted(list.items.iter().map(|d| d.id).collect()), want, "agent doc list {text}");

        let want = sorted(user_docs[..2].to_vec());
        let hits = s
            .client
            .user_search_text()
            .user_id(u.id)
            .text("otters")
            .metadata_filter(&text)
            .send()
            .await
            .unwrap();
        assert_eq!(sorted(hits.docs.iter().map(|h| h.id).collect()), want, "user search {text}");
        let list = s.client.user_doc_list().user_id(u.id).metadata_filter(&text).send().await.unwrap();
        assert_eq!(sorted(list.items.iter().map(|d| d.id).collect()), want, "user doc list {text}");
    }
    s.stop().await;
}

/// An agent whose snippets rank one way by text and another way by vector.
async fn vector_corpus(s: &TestServer) -> (Uuid, Vec<Uuid>) {
    let a = s.create_agent("Vectors").await.id;
    let docs = [
        ("north", "apple apple apple", [1.0, 0.0, 0.0]),
        ("north east", "apple apple banana", [0.7, 0.7, 0.0]),
        ("east", "apple cherry cherry", [0.0, 1.0, 0.0]),
        ("up", "cherry banana", [0.0, 0.0, 1.0]),
        ("south", "date", [-1.0, 0.1, 0.0]),
    ];
    let mut ids = Vec::new();
    for (title, text, v) in docs {
        ids.push(s.agent_doc(a, doc(title, &[text]).embeddings(Some(vec![v.to_vec()]))).await.id);
    }
    (a, ids)
}

#[tokio::test]
async fn vector_search_finds_the_nearest_embedding_first() {
    let s = TestServer::start().await;
    let (a, ids) = vector_corpus(&s).await;
    let search = |v: Vec<f32>| {
        s.client.agent_search().id(a).body(types::SearchRequest::builder().vector(Some(v))).send()
    };
    let hits = search(vec![0.1, 0.9, 0.05]).await.unwrap().into_inner().docs;
    assert_eq!(hits[0].id, ids[2], "east is nearest");
    assert_eq!(hits[1].id, ids[1]);
    assert_eq!(hits.len(), 5, "every snippet with a vector is a candidate");
    assert!((hits[0].score - 0.99).abs() < 0.02, "cosine similarity: {}", hits[0].score);
    let hits = search(vec![-2.0, 0.0, 0.0]).await.unwrap().into_inner().docs;
    assert_eq!(hits[0].title, "south");
    s.stop().await;
}

#[tokio::test]
async fn hybrid_with_alpha_0_ranks_as_text_and_1_as_vector() {
    let s = TestServer::start().await;
    let (a, _) = vector_corpus(&s).await;
    let (text, vector) = ("apple cherry", vec![0.0f32, 0.2, 1.0]);
    let run = |body: types::builder::SearchRequest| {
        let body = body.limit(std::num::NonZeroU64::new(100).unwrap());
        let c = &s.client;
        async move { c.agent_search().id(a).body(body).send().await.unwrap().into_inner().docs }
    };
    let by_text = run(text_query(text)).await;
    let by_vector = run(types::SearchRequest::builder().vector(Some(vector.clone()))).await;
    assert_ne!(
        keys(&by_text),
        keys(&by_vector)[..by_text.len()],
        "the corpus must disagree to prove anything"
    );
    let hybrid = |alpha: f64| run(text_query(text).vector(Some(vector.clone())).alpha(alpha));
    let h0 = hybrid(0.0).await;
    assert_eq!(keys(&h0)[..by_text.len()], keys(&by_text)[..], "alpha 0 orders as text search");
    let h1 = hybrid(1.0).await;
    assert_eq!(keys(&h1), keys(&by_vector), "alpha 1 orders as vector search");
    // Both given and no mode means hybrid: fused scores lie within 0..=1.
    let mid = hybrid(0.5).await;
    assert!(mid.iter().all(|h| (0.0..=1.0).contains(&h.score)), "{mid:?}");
    let explicit =
        run(text_query(text).vector(Some(vector.clone())).mode(Some(types::SearchMode::Hybrid))).await;
    assert_eq!(keys(&explicit), keys(&mid));
    // An explicit mode wins over what is given.
    let text_only = run(text_query(text).vector(Some(vector)).mode(Some(types::SearchMode::Text))).await;
    assert_eq!(keys(&text_only), keys(&by_text));
    s.stop().await;
}

#[tokio::test]
async fn vector_search_without_a_vector_and_no_embedding_model_is_400() {
    let s = TestServer::start().await;
    let (a, _) = vector_corpus(&s).await;
    for mode in ["vector", "hybrid"] {
        let r = s
            .raw(
                "POST",
                &format!("/api/agents/{a}/search"),
                Some(&json!({"text": "apple", "mode": mode}).to_string()),
            )
            .await;
        assert_eq!(r.status, 400, "{mode}: {}", r.body);
        assert_eq!(r.body["code"], "bad_request");
        assert!(r.body["detail"].as_str().unwrap().contains("embedding model"), "{}", r.body);
    }
    s.stop().await;
}

#[tokio::test]
async fn a_query_vector_of_the_wrong_dimension_is_422() {
    let s = TestServer::start().await;
    let (a, _) = vector_corpus(&s).await;
    let r = s.raw("POST", &format!("/api/agents/{a}/search"), Some(r#"{"vector": [1.0, 0.0]}"#)).await;
    r.assert_422(json!(["body", "vector"]), "value_error");
    assert!(r.body["detail"][0]["msg"].as_str().unwrap().contains("dimension 3"), "{}", r.body);
    let r = s
        .raw("POST", &format!("/api/agents/{a}/search"), Some(r#"{"text": "apple", "vector": [1.0]}"#))
        .await;
    r.assert_422(json!(["body", "vector"]), "value_error");
    s.stop().await;
}

#[tokio::test]
async fn bad_search_parameters_are_422() {
    let s = TestServer::start().await;
    let (a, _) = corpus(&s).await;
    let get = |q: &str| {
        let path = format!("/api/agents/{}/search?{q}", a.id);
        let s = &s;
        async move { s.raw("GET", &path, None).await }
    };
    get("text=").await.assert_422(json!(["query", "text"]), "string_too_short");
    get("limit=3").await.assert_422(json!(["query", "text"]), "missing");
    get(&format!("text={}", "a".repeat(10_001)))
        .await
        .assert_422(json!(["query", "text"]), "string_too_long");
    get("text=zebra&limit=0").await.assert_422(json!(["query", "limit"]), "greater_than_equal");
    get("text=zebra&limit=101").await.assert_422(json!(["query", "limit"]), "less_than_equal");
    get("text=zebra&limit=x").await.assert_422(json!(["query", "limit"]), "int_parsing");
    get("text=zebra&metadata_filter=nope")
        .await
        .assert_422(json!(["query", "metadata_filter"]), "json_invalid");
    assert_eq!(get("text=zebra&limit=100").await.status, 200);
    assert_eq!(get("text=zebra&limit=1").await.status, 200);

    let post = |body: serde_json::Value| {
        let path = format!("/api/agents/{}/search", a.id);
        let s = &s;
        async move { s.raw("POST", &path, Some(&body.to_string())).await }
    };
    post(json!({"text": ""})).await.assert_422(json!(["body", "text"]), "string_too_short");
    post(json!({"text": "x", "limit": 0})).await.assert_422(json!(["body", "limit"]), "greater_than_equal");
    post(json!({"text": "x", "limit": 101})).await.assert_422(json!(["body", "limit"]), "less_than_equal");
    post(json!({"text": "x", "alpha": 1.5})).await.assert_422(json!(["body", "alpha"]), "less_than_equal");
    post(json!({"text": "x", "alpha": -0.1}))
        .await
        .assert_422(json!(["body", "alpha"]), "greater_than_equal");
    post(json!({"text": "x", "mode": "fuzzy"})).await.assert_422(json!(["body", "mode"]), "enum");
    post(json!({"vector": []})).await.assert_422(json!(["body", "vector"]), "too_short");
    post(json!({"limit": 5})).await.assert_422(json!(["body"]), "value_error");
    post(json!({"vector": [1.0], "mode": "text"})).await.assert_422(json!(["body", "text"]), "missing");
    post(json!({"text": "x", "metadata_filter": "lang"}))
        .await
        .assert_422(json!(["body", "metadata_filter"]), "dict_type");
    s.stop().await;
}

#[tokio::test]
async fn searching_an_unknown_owner_is_404() {
    let s = TestServer::start().await;
    let nobody = Uuid::now_v7();
    assert_eq!(status_of(s.client.agent_search_text().id(nobody).text("x").send().await), 404);
    assert_eq!(status_of(s.client.agent_search().id(nobody).body(text_query("x")).send().await), 404);
    assert_eq!(status_of(s.client.user_search_text().user_id(nobody).text("x").send().await), 404);
    assert_eq!(status_of(s.client.user_search().user_id(nobody).body(text_query("x")).send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn another_owners_and_another_tenants_documents_never_appear() {
    let s = TestServer::start().await;
    let (a, b, u) = (s.create_agent("A").await, s.create_agent("B").await, s.create_user("U").await);
    s.agent_doc(a.id, doc("mine", &["shared secret words"])).await;
    s.agent_doc(b.id, doc("agent b", &["shared secret words"])).await;
    s.client
        .user_doc_create()
        .user_id(u.id)
        .body(doc("user u", &["shared secret words"]))
        .send()
        .await
        .unwrap();
    let other = s.other_tenant().await;
    let theirs = other
        .agent_create()
        .body(types::CreateAgentRequest::builder().name("Theirs"))
        .send()
        .await
        .unwrap()
        .into_inner();
    other
        .agent_doc_create()
        .id(theirs.id)
        .body(doc("tenant 2", &["shared secret words"]))
        .send()
        .await
        .unwrap();

    assert_eq!(titles(&search_text(&s.client, a.id, "shared secret").await), vec!["mine"]);
    assert_eq!(titles(&search_text(&s.client, b.id, "shared secret").await), vec!["agent b"]);
    let user_hits = s.client.user_search_text().user_id(u.id).text("secret").send().await.unwrap();
    assert_eq!(titles(&user_hits.docs), vec!["user u"]);
    assert_eq!(user_hits.docs[0].owner, types::DocOwner { id: u.id, role: types::OwnerRole::User });
    let post = s.client.user_search().user_id(u.id).body(text_query("secret")).send().await.unwrap();
    assert_eq!(titles(&post.docs), vec!["user u"]);
    assert_eq!(titles(&search_text(&other, theirs.id, "shared secret").await), vec!["tenant 2"]);
    // Another tenant's owner answers exactly as a missing one does.
    assert_eq!(status_of(other.agent_search_text().id(a.id).text("shared").send().await), 404);
    assert_eq!(status_of(other.user_search().user_id(u.id).body(text_query("shared")).send().await), 404);
    assert_eq!(status_of(s.client.agent_search_text().id(theirs.id).text("shared").send().await), 404);
    // An agent's id is not a user's.
    assert_eq!(status_of(s.client.user_search_text().user_id(a.id).text("shared").send().await), 404);
    s.stop().await;
}

#[tokio::test]
async fn searches_right_after_create_find_the_document() {
    let s = TestServer::start().await;
    let a = s.create_agent("Fresh").await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let c = s.client.clone();
            let a = a.id;
            tokio::spawn(async move {
                let word = format!("uniqueword{i}x");
                let d = c.agent_doc_create().id(a).body(doc("fresh", &[&word])).send().await.unwrap();
                let hits =
                    c.agent_search_text().id(a).text(word.as_str()).send().await.unwrap().into_inner().docs;
                assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![d.id], "{word}");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(search_text(&s.client, a.id, "fresh").await.len(), 0, "titles are not searched, snippets are");
    s.stop().await;
}

#[tokio::test]
async fn a_deleted_document_never_comes_back_even_after_a_restart() {
    let mut s = TestServer::start().await;
    let (a, ids) = corpus(&s).await;
    let zebras = ids.iter().find(|(t, _)| t == "Zebras").unwrap().1;
    s.client.agent_doc_delete().id(a.id).doc_id(zebras).send().await.unwrap();
    assert!(search_text(&s.client, a.id, "zebra").await.is_empty(), "gone as soon as the delete answers");
    assert_eq!(titles(&search_text(&s.client, a.id, "budget").await), vec!["Budget", "Budget"]);

    s.restart().await;
    assert!(
        search_text(&s.client, a.id, "zebra").await.is_empty(),
        "the rebuilt index agrees with the store"
    );
    assert_eq!(titles(&search_text(&s.client, a.id, "budget").await), vec!["Budget", "Budget"]);
    assert_eq!(titles(&search_text(&s.client, a.id, "cafe").await), vec!["Rendez-vous"]);
    s.stop().await;
}

/// `kill -9` right after the answers: the rebuilt index has exactly the documents the store kept.
#[tokio::test]
async fn after_a_kill_the_rebuilt_index_agrees_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let p = Process::serve(dir.path());
    let key = p.key.clone().expect("a first key");
    let c = Client::with_key(&p.base, &key).unwrap();
    let a = c.agent_create().body(types::CreateAgentRequest::builder().name("Durable")).send().await.unwrap();
    let kept = c.agent_doc_create().id(a.id).body(doc("kept", &["persistent zebra"])).send().await.unwrap();
    let gone = c.agent_doc_create().id(a.id).body(doc("gone", &["ephemeral zebra"])).send().await.unwrap();
    c.agent_doc_delete().id(a.id).doc_id(gone.id).send().await.unwrap();
    p.kill();

    let p = Process::serve(dir.path());
    let c = Client::with_key(&p.base, &key).unwrap();
    let hits = c.agent_search_text().id(a.id).text("zebra").send().await.unwrap().into_inner().docs;
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![kept.id]);
    assert_eq!(c.agent_doc_list().id(a.id).send().await.unwrap().items.len(), 1);
    p.kill();
}

/// A restarted server answers at once; `healthz` says whether search is ready
/// yet, and a search that comes while the index is being built is a 503
/// `search_warming` with `Retry-After` (never a wrong answer). Once ready, the
/// answers are those of before the restart: whether the index was opened from
/// its directory, or rebuilt from the store because the directory was deleted.
#[tokio::test]
async fn a_restarted_server_says_when_search_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let p = Process::serve(dir.path());
    let key = p.key.clone().expect("a first key");
    let c = Client::with_key(&p.base, &key).unwrap();
    let health = c.healthz().send().await.unwrap().into_inner();
    assert_eq!(health.search, types::SearchStatus::Ready, "an empty store's index is ready at once");
    let a = c.agent_create().body(types::CreateAgentRequest::builder().name("Library")).send().await.unwrap();
    for d in 0..40 {
        let snippets: Vec<String> = (0..50)
            .map(|i| format!("volume {d} page {i} of the harbour chronicles, word{}", (d * 50 + i) % 97))
            .collect();
        let snippets: Vec<&str> = snippets.iter().map(String::as_str).collect();
        c.agent_doc_create().id(a.id).body(doc(&format!("volume {d}"), &snippets)).send().await.unwrap();
    }
    let before = keys(&c.agent_search_text().id(a.id).text("word13 harbour").send().await.unwrap().docs);
    assert_eq!(before.len(), 10);
    p.stop();
    // The embedded store keeps its index in the data dir (PostgreSQL searches in the database).
    let on_sled = agent_platform_tests::backend::postgres().is_none();
    let index = dir.path().join("search-index");
    assert_eq!(index.is_dir(), on_sled, "the index is kept in the data dir");

    let p = Process::serve(dir.path());
    let c = Client::with_key(&p.base, &key).unwrap();
    wait_until_search_is_ready(&p, &key, a.id).await;
    let after = keys(&c.agent_search_text().id(a.id).text("word13 harbour").send().await.unwrap().docs);
    assert_eq!(after, before, "the opened index answers as before the restart");
    p.stop();

    if on_sled {
        std::fs::remove_dir_all(&index).unwrap();
    }
    let p = Process::serve(dir.path());
    let c = Client::with_key(&p.base, &key).unwrap();
    wait_until_search_is_ready(&p, &key, a.id).await;
    let after = keys(&c.agent_search_text().id(a.id).text("word13 harbour").send().await.unwrap().docs);
    assert_eq!(after, before, "the rebuilt index answers as before the restart");
    p.stop();
}

/// Polls `healthz` until search is ready; meanwhile it says `warming`, and a
/// search of `agent` answers 200, or 503 `search_warming` with `Retry-After`.
async fn wait_until_search_is_ready(p: &Process, key: &str, agent: Uuid) {
    let c = Client::with_key(&p.base, key).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let health = c.healthz().send().await.unwrap().into_inner();
        assert_eq!(health.status, "ok");
        if health.search == types::SearchStatus::Ready {
            return;
        }
        assert_eq!(health.search, types::SearchStatus::Warming);
        let raw = reqwest::Client::new()
            .get(format!("{}/api/agents/{agent}/search?text=harbour", p.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        if raw.status() == 503 {
            assert!(raw.headers().contains_key("retry-after"), "a warming 503 says when to retry");
            let body: serde_json::Value = raw.json().await.unwrap();
            assert_eq!(body["code"], "search_warming", "{body}");
        } else {
            assert_eq!(raw.status(), 200, "a search while warming waits, then answers 200 or 503");
        }
        assert!(std::time::Instant::now() < deadline, "search still warming after 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// An owner with more vectors than `vector_graph_min` is searched through an
/// approximate-nearest-neighbour graph the server builds in the background and
/// keeps on disk: the answers are those of the exact search before it, a doc
/// added or deleted afterwards counts at once, and a restarted server opens
/// the graph (the log says when one is built). PostgreSQL searches in the
/// database: the same answers, no graph.
#[tokio::test]
async fn an_agent_with_many_vectors_is_searched_through_a_graph_kept_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("AGENT_PLATFORM_VECTOR_GRAPH_MIN", "300")];
    let p = Process::serve_with_env(dir.path(), &env);
    let key = p.key.clone().expect("a first key");
    let c = Client::with_key(&p.base, &key).unwrap();
    let a = c.agent_create().body(types::CreateAgentRequest::builder().name("Atlas")).send().await.unwrap();
    // 400 vectors on a circle in 4 dimensions (the 4th tells docs apart): neighbours are known.
    let at = |i: usize| {
        let t = i as f32 * std::f32::consts::TAU / 400.0;
        vec![t.cos(), t.sin(), 0.1 * (i % 7) as f32, 0.0]
    };
    for d in 0..40 {
        let snippets: Vec<String> = (0..10).map(|k| format!("point {}", d * 10 + k)).collect();
        let snippets: Vec<&str> = snippets.iter().map(String::as_str).collect();
        let embeddings = (0..10).map(|k| at(d * 10 + k)).collect();
        c.agent_doc_create()
            .id(a.id)
            .body(doc(&format!("arc {d}"), &snippets).embeddings(Some(embeddings)))
            .send()
            .await
            .unwrap();
    }
    let search = |c: &Client, v: Vec<f32>| {
        let (c, id) = (c.clone(), a.id);
        async move {
            let body =
                types::SearchRequest::builder().vector(Some(v)).limit(std::num::NonZeroU64::new(10).unwrap());
            c.agent_search().id(id).body(body).send().await.unwrap().into_inner().docs
        }
    };
    let queries: Vec<Vec<f32>> = (0..20).map(|i| at(i * 20 + 3)).collect();
    let mut exact = Vec::new();
    for q in &queries {
        exact.push(keys(&search(&c, q.clone()).await));
    }
    let on_sled = agent_platform_tests::backend::postgres().is_none();
    let graphs = dir.path().join("search-index").join("ann");
    // The graph files: name (owner and the last snippet it holds) and when written.
    let files = || -> Vec<(std::ffi::OsString, std::time::SystemTime)> {
        let Ok(dir) = std::fs::read_dir(&graphs) else { return Vec::new() };
        dir.flatten().map(|e| (e.file_name(), e.metadata().unwrap().modified().unwrap())).collect()
    };
    if on_sled {
        // The first searches asked for the graph; it is built in the background.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while files().is_empty() {
            assert!(std::time::Instant::now() < deadline, "no graph built within 30 s");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    for (q, want) in queries.iter().zip(&exact) {
        assert_eq!(&keys(&search(&c, q.clone()).await), want, "the graph's answers are the exact ones");
    }
    // Added and deleted after the graph: counted at once.
    let probe = vec![0.3, -0.2, 5.0, 1.0];
    let added = c
        .agent_doc_create()
        .id(a.id)
        .body(doc("added", &["late point"]).embeddings(Some(vec![probe.clone()])))
        .send()
        .await
        .unwrap();
    assert_eq!(search(&c, probe.clone()).await[0].id, added.id, "added after the graph");
    let first = search(&c, queries[0].clone()).await[0].id;
    c.agent_doc_delete().id(a.id).doc_id(first).send().await.unwrap();
    assert!(search(&c, queries[0].clone()).await.iter().all(|h| h.id != first), "deleted after the graph");
    let now = keys(&search(&c, queries[5].clone()).await);
    p.stop();
    let built = files();
    assert_eq!(built.len(), usize::from(on_sled), "one graph: {built:?}");

    let p = Process::serve_with_env(dir.path(), &env);
    let c = Client::with_key(&p.base, &key).unwrap();
    wait_until_search_is_ready(&p, &key, a.id).await;
    assert_eq!(keys(&search(&c, queries[5].clone()).await), now, "the same after a restart");
    assert_eq!(search(&c, probe).await[0].id, added.id);
    assert!(search(&c, queries[0].clone()).await.iter().all(|h| h.id != first));
    p.stop();
    assert_eq!(files(), built, "the graph was opened, not built again");
}
