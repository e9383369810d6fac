//! No single request can take gigabytes: `metadata` is bounded on every
//! resource (64 keys, 16 KiB as JSON; merged PATCHes too), filters alike, and a
//! list page stops adding items before its body passes 8 MiB.

use agent_platform_tests::TestServer;
use serde_json::{Map, Value, json};

/// Metadata of `n` small keys.
fn keys(n: usize) -> Value {
    Value::Object((0..n).map(|i| (format!("k{i}"), json!(i))).collect::<Map<_, _>>())
}

/// Metadata of one key holding `bytes` bytes of text.
fn bulky(bytes: usize) -> Value {
    json!({ "blob": "x".repeat(bytes) })
}

/// Every route that writes metadata, as (method, path, body with `metadata`).
async fn metadata_writes(s: &TestServer) -> Vec<(&'static str, String, Value)> {
    let agent = s.create_agent("Helper").await.id;
    let user = s.create_user("Ada").await.id;
    let session = s.create_session(&[agent], &[user]).await.id;
    let tool = s
        .raw(
            "POST",
            &format!("/api/agents/{agent}/tools"),
            Some(&json!({"name": "t", "type": "function", "function": {"parameters": {}}}).to_string()),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let tool = tool.body["id"].as_str().unwrap().to_owned();
    vec![
        ("POST", "/api/users".into(), json!({"name": "Bob"})),
        ("PUT", format!("/api/users/{user}"), json!({"name": "Bob"})),
        ("PATCH", format!("/api/users/{user}"), json!({})),
        ("POST", "/api/agents".into(), json!({"name": "Other"})),
        ("PUT", format!("/api/agents/{agent}"), json!({"name": "Other"})),
        ("PATCH", format!("/api/agents/{agent}"), json!({})),
        ("POST", "/api/sessions".into(), json!({"agent": agent})),
        ("PUT", format!("/api/sessions/{session}"), json!({})),
        ("PATCH", format!("/api/sessions/{session}"), json!({})),
        ("POST", format!("/api/sessions/{session}/messages"), json!({"role": "user", "content": "hi"})),
        ("POST", format!("/api/agents/{agent}/docs"), json!({"title": "T", "content": "text"})),
        ("POST", format!("/api/users/{user}/docs"), json!({"title": "T", "content": "text"})),
        (
            "POST",
            format!("/api/agents/{agent}/tools"),
            json!({"name": "u", "type": "function", "function": {}}),
        ),
        (
            "PUT",
            format!("/api/agents/{agent}/tools/{tool}"),
            json!({"name": "t", "type": "function", "function": {}}),
        ),
        ("PATCH", format!("/api/agents/{agent}/tools/{tool}"), json!({})),
        ("PUT", format!("/api/agents/{agent}/tasks"), json!({"name": "task", "main": [{"log": "hi"}]})),
    ]
}

async fn each_write_with_metadata_is_422(metadata: Value, msg_has: &str) {
    let s = TestServer::start().await;
    for (method, path, mut body) in metadata_writes(&s).await {
        body["metadata"] = metadata.clone();
        let r = s.raw(method, &path, Some(&body.to_string())).await;
        r.assert_422(json!(["body", "metadata"]), "too_long");
        assert!(r.body.to_string().contains(msg_has), "{method} {path}: {}", r.body);
    }
    s.stop().await;
}

#[tokio::test]
async fn metadata_with_65_keys_is_422_naming_metadata_on_every_write() {
    each_write_with_metadata_is_422(keys(65), "64 keys").await;
}

#[tokio::test]
async fn metadata_over_16_kib_as_json_is_422_naming_metadata_on_every_write() {
    each_write_with_metadata_is_422(bulky(17 * 1024), "16384 bytes").await;
}

#[tokio::test]
async fn metadata_at_the_bounds_is_accepted() {
    let s = TestServer::start().await;
    for metadata in [keys(64), bulky(16 * 1024 - 20)] {
        let body = json!({"name": "A", "metadata": metadata});
        let r = s.raw("POST", "/api/agents", Some(&body.to_string())).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["metadata"], metadata);
    }
    s.stop().await;
}

#[tokio::test]
async fn patch_that_would_merge_metadata_over_the_bounds_is_422_and_changes_nothing() {
    let s = TestServer::start().await;
    let mut stored = keys(60);
    stored["note"] = json!("x".repeat(9000));
    let created =
        s.raw("POST", "/api/agents", Some(&json!({"name": "A", "metadata": stored}).to_string())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/api/agents/{}", created.body["id"].as_str().unwrap());

    // 5 new keys: 66 once merged, though the PATCH itself has only 5.
    let more_keys = json!({"name": "B", "metadata": {"n1": 1, "n2": 2, "n3": 3, "n4": 4, "n5": 5}});
    // 9,000 more bytes: over 16 KiB once merged, though each half is under.
    let more_bytes = json!({"name": "B", "metadata": {"other": "y".repeat(9000)}});
    for patch in [more_keys, more_bytes] {
        let r = s.raw("PATCH", &path, Some(&patch.to_string())).await;
        r.assert_422(json!(["body", "metadata"]), "too_long");
        let now = s.raw("GET", &path, None).await;
        assert_eq!(now.body["metadata"], stored, "a refused PATCH changes nothing");
        assert_eq!(now.body["name"], "A");
        assert_eq!(now.body["updated_at"], created.body["updated_at"]);
    }
    // Replacing keys keeps the count: fine.
    let r =
        s.raw("PATCH", &path, Some(&json!({"metadata": {"k0": "zero", "note": "short"}}).to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.stop().await;
}

#[tokio::test]
async fn metadata_filter_beyond_the_bounds_is_422_naming_it() {
    let s = TestServer::start().await;
    let filter = keys(65).to_string();
    let r = s.raw("GET", &format!("/api/agents?metadata_filter={filter}"), None).await;
    r.assert_422(json!(["query", "metadata_filter"]), "too_long");
    let agent = s.create_agent("Helper").await.id;
    let search = json!({"text": "x", "metadata_filter": keys(65)});
    let r = s.raw("POST", &format!("/api/agents/{agent}/search"), Some(&search.to_string())).await;
    r.assert_422(json!(["body", "metadata_filter"]), "too_long");
    s.stop().await;
}

#[tokio::test]
async fn a_list_page_stops_before_8_mib_and_paging_on_reaches_every_record() {
    let s = TestServer::start().await;
    let agent = s.create_agent("Helper").await.id;
    // Five tools of ~1.9 MB each (a request is at most 2 MiB): 9.5 MB in all.
    let mut ids = Vec::new();
    for i in 0..5 {
        let parameters = json!({"type": "object", "description": "p".repeat(1_900_000)});
        let body =
            json!({"name": format!("tool_{i}"), "type": "function", "function": {"parameters": parameters}});
        let r = s.raw("POST", &format!("/api/agents/{agent}/tools"), Some(&body.to_string())).await;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    let http = reqwest::Client::new();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let url = format!("{}/api/agents/{agent}/tools?limit=1000&offset={}", s.base, seen.len());
        let resp = http.get(url).bearer_auth(&s.key).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.bytes().await.unwrap();
        assert!(body.len() <= 8 * 1024 * 1024, "a page of {} bytes", body.len());
        let page: Value = serde_json::from_slice(&body).unwrap();
        let items = page["items"].as_array().unwrap();
        if items.is_empty() {
            break;
        }
        pages += 1;
        seen.extend(items.iter().map(|t| t["id"].as_str().unwrap().to_owned()));
    }
    assert!(pages >= 2, "9.5 MB do not fit one page");
    ids.reverse(); // newest first
    assert_eq!(seen, ids, "paging on with offset += len(items) reaches every record once");
    s.stop().await;
}

// ---------------------------------------------------------------- the writer's longest commits

/// Runs `heavy` while another tenant writes one small record after another;
/// answers how long `heavy` took and the longest of those small writes (how
/// long the heavy request held the single writer, give or take one flush).
async fn writes_beside<F: std::future::Future<Output = u16>>(s: &TestServer, heavy: F) -> (u16, f64, f64) {
    writes_beside_lingering(s, heavy, std::time::Duration::ZERO).await
}

/// [`writes_beside`], the small writes going on for `linger` after the heavy
/// request is answered (while the work it left in the background is done).
async fn writes_beside_lingering<F: std::future::Future<Output = u16>>(
    s: &TestServer,
    heavy: F,
    linger: std::time::Duration,
) -> (u16, f64, f64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let key = s.key_for("bystander").await;
    let (base, done) = (s.base.clone(), Arc::new(AtomicBool::new(false)));
    let stop = done.clone();
    let bystander = tokio::spawn(async move {
        let http = reqwest::Client::new();
        let mut longest = 0f64;
        while !stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            let r =
                http.post(format!("{base}/api/users")).bearer_auth(&key).json(&json!({"name": "B"})).send();
            assert_eq!(r.await.unwrap().status(), 201);
            longest = longest.max(started.elapsed().as_secs_f64() * 1000.0);
        }
        longest
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let started = Instant::now();
    let status = heavy.await;
    let took = started.elapsed().as_secs_f64() * 1000.0;
    tokio::time::sleep(linger).await;
    done.store(true, Ordering::SeqCst);
    (status, took, bystander.await.unwrap())
}

/// The heaviest single requests the contract allows (2 MiB bodies), each run
/// while another tenant writes: prints how long each took and the longest
/// small write beside it. A measurement, not a check: `cargo test -p
/// agent-platform-tests --test bounds -- --ignored --nocapture writer`.
#[tokio::test]
#[ignore]
async fn writer_measurement_of_the_heaviest_single_requests() {
    let s = TestServer::start().await;
    let agent = s.create_agent("Helper").await.id;
    let session = s.create_session(&[agent], &[]).await.id;
    let big_doc =
        json!({"title": "big", "content": vec!["lorem ipsum dolor ".repeat(105); 1000]}).to_string();
    let big_task =
        json!({"name": "big", "main": [{"evaluate": {"x": format!("'{}'", "x".repeat(1_900_000))}}]})
            .to_string();
    let big_message = json!({"role": "user", "content": "word ".repeat(380_000)}).to_string();
    let report = |what: &str, (status, took, longest): (u16, f64, f64)| {
        println!("{what:<55} {status}  {took:>8.0} ms   longest write beside it {longest:>6.0} ms");
    };
    let post = |path: String, body: String| {
        let s = &s;
        async move { s.raw("POST", &path, Some(&body)).await.status }
    };
    for i in 0..10 {
        let r = writes_beside(&s, post(format!("/api/agents/{agent}/docs"), big_doc.clone())).await;
        if i == 0 {
            report(&format!("POST a doc of 1000 snippets, {} bytes", big_doc.len()), r);
        }
    }
    let r = writes_beside(&s, async {
        s.raw("PUT", &format!("/api/agents/{agent}/tasks"), Some(&big_task)).await.status
    })
    .await;
    report(&format!("PUT a task of {} bytes", big_task.len()), r);
    let r = writes_beside(&s, post(format!("/api/sessions/{session}/messages"), big_message.clone())).await;
    report(&format!("POST a message of {} bytes", big_message.len()), r);
    // The most messages one request can append: a chat's new messages (saved
    // in one commit with the answer).
    let n = 256;
    let messages: Vec<Value> = (0..n).map(|_| json!({"role": "user", "content": "x"})).collect();
    let chat = json!({"messages": messages, "recall": false}).to_string();
    let fake = agent_platform::models::fake_upstream::FakeUpstream::start().await;
    s.stop().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 120.0)).await;
    let agent = s.create_agent("Helper").await.id;
    let session = s.create_session(&[agent], &[]).await.id;
    let r = writes_beside(&s, async {
        s.raw("POST", &format!("/api/sessions/{session}/chat"), Some(&chat)).await.status
    })
    .await;
    report(&format!("POST a chat of {n} new messages ({} bytes)", chat.len()), r);
    // A session grows by many requests; seeded here in-process, 5,000 at a time.
    let tenant = s.app().authenticate(&s.key).await.unwrap().unwrap();
    for _ in 0..10 {
        let batch = (0..5000)
            .map(|_| serde_json::from_value(json!({"role": "user", "content": "x"})).unwrap())
            .collect();
        s.app().append_messages(tenant, session, batch, |_| None::<()>).await.unwrap();
    }
    // Deleted scopes are purged in the background after the answer: the small
    // writes go on for a while, to see the purge's steps too.
    let purge = std::time::Duration::from_secs(3);
    let r = writes_beside_lingering(
        &s,
        async { s.raw("DELETE", &format!("/api/sessions/{session}"), None).await.status },
        purge,
    )
    .await;
    report(&format!("DELETE a session of {} messages (and its purge)", n + 1 + 50_000), r);
    let big_doc_agent = s.create_agent("Docs").await.id;
    for _ in 0..10 {
        assert_eq!(
            s.raw("POST", &format!("/api/agents/{big_doc_agent}/docs"), Some(&big_doc)).await.status,
            201
        );
    }
    let r = writes_beside_lingering(
        &s,
        async { s.raw("DELETE", &format!("/api/agents/{big_doc_agent}"), None).await.status },
        purge,
    )
    .await;
    report("DELETE an agent of 10 docs of 2 MB (and its purge)", r);
    s.stop().await;
}

#[tokio::test]
async fn a_chat_of_more_than_256_new_messages_is_422_naming_messages() {
    // They are saved in one atomic write: 2 MiB of tiny messages (~55,000)
    // held the single writer for 15 s.
    let s = TestServer::start().await;
    let agent = s.create_agent("Helper").await.id;
    let session = s.create_session(&[agent], &[]).await.id;
    let messages: Vec<Value> = (0..257).map(|_| json!({"role": "user", "content": "x"})).collect();
    let body = json!({"messages": messages}).to_string();
    let r = s.raw("POST", &format!("/api/sessions/{session}/chat"), Some(&body)).await;
    r.assert_422(json!(["body", "messages"]), "too_long");
    s.stop().await;
}
