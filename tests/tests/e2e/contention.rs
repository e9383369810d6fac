//! Many writers of one record at once: updates queue, none gives up.

use agent_platform_tests::TestServer;
use futures::future::join_all;
use serde_json::{Value, json};

/// Sends `n` concurrent `method path` requests whose bodies set the metadata key
/// `k<i>`, asserts every one answered 200, and answers the record read afterwards.
async fn concurrent_metadata_writes(s: &TestServer, method: &str, path: &str, n: usize) -> Value {
    let bodies: Vec<String> =
        (0..n).map(|i| json!({ "metadata": { format!("k{i}"): i } }).to_string()).collect();
    let answers = join_all(bodies.iter().map(|b| s.raw(method, path, Some(b)))).await;
    let failed: Vec<String> =
        answers.iter().filter(|r| r.status != 200).map(|r| format!("{} {}", r.status, r.body)).collect();
    assert!(failed.is_empty(), "{} of {n} {method}s failed: {failed:?}", failed.len());
    let got = s.raw("GET", path, None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    for i in 0..n {
        assert_eq!(got.body["metadata"][format!("k{i}")], json!(i), "key k{i} was lost: {}", got.body);
    }
    got.body
}

#[tokio::test]
async fn fifty_concurrent_patches_of_one_record_all_answer_200_and_keep_every_key() {
    let s = TestServer::start().await;
    let agent = s.create_agent("Busy").await;
    let user = s.create_user("Busy").await;
    let session = s.create_session(&[agent.id], &[user.id]).await;

    concurrent_metadata_writes(&s, "PATCH", &format!("/api/agents/{}", agent.id), 50).await;
    concurrent_metadata_writes(&s, "PATCH", &format!("/api/users/{}", user.id), 50).await;
    concurrent_metadata_writes(&s, "PUT", &format!("/api/sessions/{}", session.id), 50).await;
    s.stop().await;
}
