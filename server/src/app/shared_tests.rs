//! Two servers on one PostgreSQL database, as two `App`s in one process:
//! what one changes, the other's caches do not hide, and chats on one
//! session take turns across them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{App, Tenant};
use crate::api::types::Agent;
use crate::api::types::ChatRequest;
use crate::api::types::Session;
use crate::models::fake_upstream::{Behaviour, FakeUpstream};
use crate::models::provider_config::Providers;
use crate::store::conformance::TestDb;
use crate::store::{Expect, Kind, ListQuery, Op, Record, Store};

/// Two servers' applications on one new database (`None`: no test database).
async fn two_servers(fake: Option<&FakeUpstream>) -> Option<(App, App, TestDb)> {
    let db = TestDb::create().await?;
    let mut apps = Vec::new();
    for _ in 0..2 {
        let store: Arc<dyn Store> = Arc::new(db.store().await);
        let mut app = App::new(store).await.expect("an application on the database");
        if let Some(fake) = fake {
            let models = fake.models_config("fake-default");
            app = app.with_models(Providers::from_config(&models, |_| None).unwrap());
        }
        apps.push(app);
    }
    let b = apps.pop().unwrap();
    Some((apps.pop().unwrap(), b, db))
}

/// Stops both servers, then drops their database.
async fn finish(a: App, b: App, db: TestDb) {
    drop((a, b));
    db.drop().await;
}

/// A tenant with an agent and a session (made through `app`).
async fn session(app: &App) -> (Tenant, Uuid) {
    let (key, _) = app.key_create(&format!("t{}", Uuid::now_v7().simple())).await.unwrap();
    let tenant = app.authenticate(&key).await.unwrap().unwrap();
    let agent: Agent = app.agent_create(tenant, from(json!({"name": "Ada"}))).await.unwrap();
    let session: Session = app.session_create(tenant, from(json!({"agent": agent.id}))).await.unwrap();
    (tenant, session.id)
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn say(text: &str) -> ChatRequest {
    from(json!({"messages": [{"role": "user", "content": text}], "recall": false}))
}

/// The contents of the session's messages, oldest first.
async fn contents(app: &App, t: Tenant, session: Uuid) -> Vec<String> {
    let all = ListQuery::oldest_first(0, 1000);
    app.message_list(t, session, &all).await.unwrap().into_iter().map(|m| m.content).collect()
}

/// The contents of the messages a chat request sent to the model, after the system message.
fn sent(request: &Value) -> Vec<String> {
    request["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_through_one_server_is_refused_by_the_other_within_a_second() {
    let Some((a, b, db)) = two_servers(None).await else { return };
    for revoke_unheard in [false, true] {
        let (key, info) = a.key_create("acme").await.unwrap();
        assert!(
            b.authenticate(&key).await.unwrap().is_some(),
            "a key made through one server works on the other"
        );
        let revoked = Instant::now();
        if revoke_unheard {
            // A writer that sends no notification: the time to live alone must do.
            delete_without_notification(&db, info.id).await;
        } else {
            a.key_revoke(&info.id.to_string()).await.unwrap();
        }
        loop {
            if b.authenticate(&key).await.unwrap().is_none() {
                break;
            }
            assert!(revoked.elapsed() < Duration::from_secs(1), "a revoked key still works after 1 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    finish(a, b, db).await;
}

/// Deletes a key's record in SQL, as no server would: no notification is sent.
async fn delete_without_notification(db: &TestDb, key: Uuid) {
    let deleted = db
        .client()
        .await
        .execute("DELETE FROM records WHERE kind = $1 AND id = $2", &[&(Kind::ApiKey as i16), &key])
        .await
        .unwrap();
    assert_eq!(deleted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_alternating_between_servers_send_the_whole_history() {
    let fake = FakeUpstream::start().await;
    let Some((a, b, db)) = two_servers(Some(&fake)).await else { return };
    let (t, s) = session(&a).await;
    let mut expected: Vec<String> = Vec::new();
    for (i, app) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        let text = format!("message {i}");
        app.chat(t, s, say(&text)).await.unwrap();
        let request = fake.last_request().unwrap().body;
        expected.push(text.clone());
        assert_eq!(sent(&request), expected, "chat {i} sends the whole history, in order");
        expected.push(text); // the fake echoes
    }
    assert_eq!(contents(&b, t, s).await, expected);
    // A message added outside chats, through the other server, is in the next chat's history.
    b.message_create(t, s, from(json!({"role": "user", "content": "aside"}))).await.unwrap();
    a.chat(t, s, say("last")).await.unwrap();
    let request = fake.last_request().unwrap().body;
    assert_eq!(sent(&request).iter().rev().nth(1).map(String::as_str), Some("aside"));
    // A chat that saves nothing has released the session's lock by the time it answers.
    let mut unsaved = say("unsaved");
    unsaved.save = false;
    b.chat(t, s, unsaved).await.unwrap();
    assert!(a.store.get(t.0, Kind::SessionLock, s).await.unwrap().is_none());
    finish(a, b, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_chats_through_two_servers_keep_each_exchange_together() {
    let fake = FakeUpstream::start().await;
    // Slow enough answers that the chats overlap.
    fake.set_default(Behaviour::Hang(Duration::from_millis(100)));
    let Some((a, b, db)) = two_servers(Some(&fake)).await else { return };
    let (t, s) = session(&a).await;
    let chats = (0..6).map(|i| {
        let app = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move {
            let text = format!("chat {i}");
            if i % 3 == 0 {
                // Streamed chats take turns too.
                let mut req = say(&text);
                req.stream = true;
                let mut chunks = app.chat_stream(t, s, req).await.unwrap();
                while let Some(chunk) = chunks.next().await {
                    chunk.unwrap();
                }
            } else {
                app.chat(t, s, say(&text)).await.unwrap();
            }
        })
    });
    for chat in futures::future::join_all(chats).await {
        chat.unwrap();
    }
    let messages = contents(&a, t, s).await;
    assert_eq!(messages.len(), 12);
    for pair in messages.chunks(2) {
        assert_eq!(pair[0], pair[1], "each question is followed by its own answer: {messages:?}");
    }
    // Each chat saw every exchange before it, whole.
    for request in fake.requests().iter().filter(|r| r.path.ends_with("/chat/completions")) {
        let history = sent(&request.body);
        assert_eq!(history.len() % 2, 1, "whole exchanges, then the new message: {history:?}");
        assert_eq!(history[..history.len() - 1], messages[..history.len() - 1]);
    }
    finish(a, b, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lock_left_by_a_dead_server_is_taken_over_once_expired() {
    let fake = FakeUpstream::start().await;
    let Some((a, b, db)) = two_servers(Some(&fake)).await else { return };
    let (t, s) = session(&a).await;
    // A server took the session's lock for a chat, then died: the lock expires in a second.
    let expires_at = crate::store::now() + Duration::from_secs(1);
    let data = json!({"holder": Uuid::now_v7(), "expires_at": expires_at});
    let lock = Record::new(Kind::SessionLock, s, Uuid::nil(), data);
    a.store.commit(t.0, vec![Op::Put { record: lock, expect: Expect::Absent }]).await.unwrap();
    let started = Instant::now();
    b.chat(t, s, say("after the crash")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(800), "the chat waited for the lock to expire");
    assert!(started.elapsed() < Duration::from_secs(5), "and took it over soon after");
    assert_eq!(contents(&a, t, s).await, ["after the crash", "after the crash"]);
    // Released in the exchange's commit.
    assert!(a.store.get(t.0, Kind::SessionLock, s).await.unwrap().is_none());
    finish(a, b, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_session_lock_was_taken_over_saves_nothing() {
    let fake = FakeUpstream::start().await;
    fake.push(Behaviour::Hang(Duration::from_millis(500)));
    let Some((a, b, db)) = two_servers(Some(&fake)).await else { return };
    let (t, s) = session(&a).await;
    let chat = tokio::spawn({
        let a = a.clone();
        async move { a.chat(t, s, say("slow")).await }
    });
    // While the model answers, another server takes the lock over (as if it had expired).
    let deadline = Instant::now() + Duration::from_secs(5);
    let held = loop {
        if let Some(held) = b.store.get(t.0, Kind::SessionLock, s).await.unwrap() {
            break held;
        }
        assert!(Instant::now() < deadline, "the chat never took the session's lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let data = json!({"holder": Uuid::now_v7(), "expires_at": crate::store::now() + Duration::from_secs(60)});
    let taken = Record::new(Kind::SessionLock, s, Uuid::nil(), data);
    b.store
        .commit(t.0, vec![Op::Put { record: taken, expect: Expect::Version(held.version) }])
        .await
        .unwrap();
    match chat.await.unwrap() {
        Err(super::Error::Conflict(message)) => assert!(message.contains("nothing was saved"), "{message}"),
        other => panic!("a chat that lost its lock must not save: {other:?}"),
    }
    assert!(contents(&b, t, s).await.is_empty());
    finish(a, b, db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_longer_than_its_lease_keeps_it_by_renewing_it() {
    let fake = FakeUpstream::start().await;
    fake.push(Behaviour::Hang(super::chat_lock::LEASE * 2));
    let Some((a, b, db)) = two_servers(Some(&fake)).await else { return };
    let (t, s) = session(&a).await;
    let slow = tokio::spawn({
        let a = a.clone();
        async move { a.chat(t, s, say("slow")).await }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while b.store.get(t.0, Kind::SessionLock, s).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "the chat never took the session's lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Through the other server: it waits for the slow chat, which keeps its lease past its first expiry.
    b.chat(t, s, say("quick")).await.unwrap();
    slow.await.unwrap().unwrap();
    assert_eq!(contents(&a, t, s).await, ["slow", "slow", "quick", "quick"]);
    finish(a, b, db).await;
}
