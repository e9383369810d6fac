//! API keys through the API (`GET|POST /api/keys`, `DELETE /api/keys/{key_id}`):
//! each tenant its own, effective at once.

use agent_platform_tests::{Client, Raw, TestServer, types};
use serde_json::Value;

async fn as_key(s: &TestServer, key: &str, method: &str, path: &str) -> Raw {
    s.raw_with(method, path, None, Some(&format!("Bearer {key}"))).await
}

fn ids(list: &Raw) -> Vec<String> {
    list.body["items"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_created_key_works_at_once_and_is_never_listed() {
    let s = TestServer::start().await;
    let created = as_key(&s, &s.key, "POST", "/api/keys").await;
    assert_eq!(created.status, 201, "{}", created.body);
    let key = created.body["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with(created.body["prefix"].as_str().unwrap()), "{}", created.body);

    // The new key is of the same tenant: it sees what the first key made.
    let agent = s.create_agent("Shared").await;
    let got = as_key(&s, &key, "GET", &format!("/api/agents/{}", agent.id)).await;
    assert_eq!(got.status, 200, "the new key works at once: {}", got.body);

    let list = as_key(&s, &key, "GET", "/api/keys").await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(
        list.body["items"].as_array().unwrap().len(),
        2,
        "the first key and the new one: {}",
        list.body
    );
    assert!(ids(&list).contains(&created.body["id"].as_str().unwrap().to_owned()));
    let text = list.body.to_string();
    assert!(!text.contains(&key) && !text.contains(&s.key), "a list never shows a key: {text}");
    for item in list.body["items"].as_array().unwrap() {
        let fields: Vec<&String> = item.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["created_at", "id", "prefix"], "{item}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_deleted_key_is_refused_at_once_even_the_one_calling() {
    let s = TestServer::start().await;
    let created = as_key(&s, &s.key, "POST", "/api/keys").await;
    let (id, key) = (created.body["id"].as_str().unwrap(), created.body["key"].as_str().unwrap());
    // Used once, so the server has it cached.
    assert_eq!(as_key(&s, key, "GET", "/api/agents").await.status, 200);
    let deleted = as_key(&s, &s.key, "DELETE", &format!("/api/keys/{id}")).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let refused = as_key(&s, key, "GET", "/api/agents").await;
    assert_eq!(refused.status, 401, "a revoked key is refused at once: {}", refused.body);
    assert_eq!(as_key(&s, &s.key, "DELETE", &format!("/api/keys/{id}")).await.status, 404, "deleted twice");

    // A key may revoke itself (once it is not the last): this request
    // answers, the next is refused.
    let list = as_key(&s, &s.key, "GET", "/api/keys").await;
    let own = ids(&list).pop().unwrap();
    assert_eq!(as_key(&s, &s.key, "POST", "/api/keys").await.status, 201);
    assert_eq!(as_key(&s, &s.key, "DELETE", &format!("/api/keys/{own}")).await.status, 204);
    assert_eq!(as_key(&s, &s.key, "GET", "/api/keys").await.status, 401);
    s.stop().await;
}

#[tokio::test]
async fn another_tenant_can_neither_list_nor_delete_our_keys() {
    let s = TestServer::start().await;
    let other = s.key_for("other-tenant").await;
    let ours = ids(&as_key(&s, &s.key, "GET", "/api/keys").await);
    let theirs = as_key(&s, &other, "GET", "/api/keys").await;
    assert_eq!(theirs.status, 200);
    assert_eq!(ids(&theirs).len(), 1, "only their own key: {}", theirs.body);
    assert!(!ids(&theirs).contains(&ours[0]));
    let r = as_key(&s, &other, "DELETE", &format!("/api/keys/{}", ours[0])).await;
    assert_eq!(r.status, 404, "another tenant's key is as missing as an unknown one: {}", r.body);
    assert_eq!(r.body["code"], Value::from("not_found"));
    assert_eq!(as_key(&s, &s.key, "GET", "/api/agents").await.status, 200, "our key still works");
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_key_creation_creates_no_second_key_and_does_not_show_the_first() {
    let s = TestServer::start().await;
    let send = || {
        reqwest::Client::new()
            .post(format!("{}/api/keys", s.base))
            .header("authorization", format!("Bearer {}", s.key))
            .header("idempotency-key", "new-key-1")
            .send()
    };
    let first = send().await.unwrap();
    assert_eq!(first.status().as_u16(), 201);
    let first: Value = first.json().await.unwrap();
    let again = send().await.unwrap();
    assert_eq!(again.status().as_u16(), 409);
    let again = again.text().await.unwrap();
    assert!(again.contains(first["id"].as_str().unwrap()), "the 409 names the key: {again}");
    assert!(!again.contains(first["key"].as_str().unwrap()), "but never shows it: {again}");
    assert_eq!(ids(&as_key(&s, &s.key, "GET", "/api/keys").await).len(), 2, "one key was created");
    s.stop().await;
}

/// The status and `detail` of a generated client's error answer.
fn refusal<T: std::fmt::Debug>(r: Result<T, agent_platform_client::Error<types::Error>>) -> (u16, String) {
    match r {
        Err(agent_platform_client::Error::ErrorResponse(rv)) => match (rv.status().as_u16(), rv.into_inner())
        {
            (status, types::Error::ErrorResponse(e)) => (status, e.detail),
            other => panic!("expected an ErrorResponse, got {other:?}"),
        },
        other => panic!("expected an error answer, got {other:?}"),
    }
}

async fn key_ids(c: &Client, limit: u64, offset: u64) -> Vec<uuid::Uuid> {
    let page = c.key_list().limit(limit).offset(offset).send().await.unwrap().into_inner();
    page.items.iter().map(|k| k.id).collect()
}

#[tokio::test]
async fn keys_page_with_limit_and_offset_and_a_tenant_holds_at_most_max_keys_per_tenant() {
    let s = TestServer::with_config(|c| c.server.max_keys_per_tenant = 5).await;
    let mut made = Vec::new();
    for _ in 0..4 {
        made.push(s.client.key_create().send().await.unwrap().into_inner().id);
    }
    let newest_first: Vec<_> = made.iter().rev().copied().collect();
    assert_eq!(key_ids(&s.client, 2, 0).await, newest_first[..2]);
    assert_eq!(key_ids(&s.client, 2, 2).await, newest_first[2..4]);
    assert_eq!(key_ids(&s.client, 2, 4).await.len(), 1, "the first key, oldest");
    assert!(key_ids(&s.client, 2, 5).await.is_empty());
    let asc =
        s.client.key_list().direction(types::Direction::Asc).limit(4u64).offset(1u64).send().await.unwrap();
    assert_eq!(asc.items.iter().map(|k| k.id).collect::<Vec<_>>(), made);

    let (status, detail) = refusal(s.client.key_create().send().await);
    assert_eq!(status, 409);
    assert!(detail.contains("max_keys_per_tenant") && detail.contains('5'), "{detail}");
    assert_eq!(key_ids(&s.client, 100, 0).await.len(), 5, "the refused creation made no key");
    // Another tenant has its own allowance.
    let other = s.other_tenant().await;
    assert!(other.key_create().send().await.is_ok());
    s.stop().await;
}

#[tokio::test]
async fn the_tenants_last_key_cannot_be_deleted_and_the_409_says_how_to_rotate() {
    let s = TestServer::start().await;
    let own = key_ids(&s.client, 10, 0).await;
    assert_eq!(own.len(), 1);
    let (status, detail) = refusal(s.client.key_delete().key_id(own[0]).send().await);
    assert_eq!(status, 409);
    assert!(detail.contains("last key") && detail.contains("create a new key first"), "{detail}");
    assert!(s.client.agent_list().send().await.is_ok(), "the key still works");

    // Rotation: a new key first, then the old one goes.
    let new = s.client.key_create().send().await.unwrap().into_inner();
    s.client.key_delete().key_id(own[0]).send().await.unwrap();
    let rotated = Client::with_key(&s.base, &new.key).unwrap();
    assert_eq!(key_ids(&rotated, 10, 0).await, [new.id]);
    assert_eq!(refusal(rotated.key_delete().key_id(new.id).send().await).0, 409);
    s.stop().await;
}

#[tokio::test]
async fn concurrent_deletes_of_a_tenants_two_keys_leave_it_one() {
    let s = TestServer::start().await;
    let second = s.client.key_create().send().await.unwrap().into_inner();
    let both = key_ids(&s.client, 10, 0).await;
    let other = Client::with_key(&s.base, &second.key).unwrap();
    let (a, b) =
        tokio::join!(s.client.key_delete().key_id(both[0]).send(), other.key_delete().key_id(both[1]).send());
    assert_eq!(a.is_ok() as u8 + b.is_ok() as u8, 1, "one delete lands, one is refused: {a:?} {b:?}");
    let left = s.app().key_list().await.unwrap();
    assert_eq!(left.iter().filter(|k| k.tenant == "default").count(), 1);
    s.stop().await;
}

/// Stops the real binary with SIGTERM and waits (at most 10 s) for it to exit.
fn stop(mut p: agent_platform_tests::Process) {
    let killed = std::process::Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status();
    assert!(killed.unwrap().success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while p.child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the server did not stop on SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `agent-platform keys <args> --data-dir <data>`: (success, stdout + stderr).
fn cli(data: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(agent_platform_tests::binary())
        .arg("keys")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .envs(agent_platform_tests::backend::env_for(data))
        .env_remove("AGENT_PLATFORM_CONFIG")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test]
async fn the_cli_manages_keys_made_through_the_api_once_the_server_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = agent_platform_tests::Process::serve(&data);
    let first = p.key.clone().unwrap();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}/api/keys", p.base))
        .bearer_auth(&first)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (id, key) = (created["id"].as_str().unwrap().to_owned(), created["key"].as_str().unwrap().to_owned());
    stop(p);

    let (ok, list) = cli(&data, &["list"]);
    assert!(ok && list.contains(&id) && !list.contains(&key), "{list}");
    let (ok, out) = cli(&data, &["revoke", &id]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&data, &["create", "--tenant", "acme"]);
    assert!(ok && out.contains("ap_"), "{out}");

    let p = agent_platform_tests::Process::serve(&data);
    let status = |k: String| {
        let req = http.get(format!("{}/api/keys", p.base)).bearer_auth(k).send();
        async move { req.await.unwrap().status().as_u16() }
    };
    assert_eq!(status(key).await, 401, "revoked by the CLI");
    assert_eq!(status(first).await, 200, "the first key still works");
    stop(p);
}
