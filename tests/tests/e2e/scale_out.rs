//! Several servers on one PostgreSQL database behave as one service: real
//! server processes (the binary), on one database, driven over HTTP. Only in
//! a run on PostgreSQL (`AGENT_PLATFORM_TEST_BACKEND=postgres`); a run on sled
//! says they are skipped.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::FakeUpstream;
use agent_platform_tests::executions::{Api, id_of};
use agent_platform_tests::{Process, postgres_only, run_to_exit};
use serde_json::{Value, json};

/// Two servers on the database of `data` (the first makes it and prints the key).
fn two_servers(data: &Path, env: &[(&str, &str)]) -> (Process, Process, String) {
    let a = Process::serve_with_env(data, env);
    let key = a.key.clone().expect("the first server on a new database prints a key");
    // The same data dir names the same database: the second server finds the store made.
    let b = Process::serve_with_env(data, env);
    assert!(b.key.is_none(), "a second server on the database makes no key");
    (a, b, key)
}

#[tokio::test]
async fn a_write_through_one_server_is_read_at_once_through_the_other() {
    if postgres_only("several servers on one database") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b, key) = two_servers(&dir.path().join("data"), &[]);
    let (on_a, on_b) = (Api::new(&a.base, &key), Api::new(&b.base, &key));
    // Every kind of record, created through A, read through B at once.
    let user = on_a.expect(201, on_a.call("POST", "/api/users", Some(&json!({"name": "Ada"}))).await, "user");
    let agent = on_a.agent("Helper").await;
    let session = on_a.expect(
        201,
        on_a.call("POST", "/api/sessions", Some(&json!({"agents": [agent], "users": [id_of(&user)]}))).await,
        "session",
    );
    let message = on_a.expect(
        201,
        on_a.call(
            "POST",
            &format!("/api/sessions/{}/messages", id_of(&session)),
            Some(&json!({"role": "user", "content": "hello"})),
        )
        .await,
        "message",
    );
    let tool = on_a.expect(
        201,
        on_a.call(
            "POST",
            &format!("/api/agents/{agent}/tools"),
            Some(&json!({"name": "lookup", "type": "function", "function": {"parameters": {"type": "object"}}})),
        )
        .await,
        "tool",
    );
    let doc = on_a.expect(
        201,
        on_a.call(
            "POST",
            &format!("/api/agents/{agent}/docs"),
            Some(&json!({"title": "t", "content": "octopus arms"})),
        )
        .await,
        "doc",
    );
    let task = on_a.task(agent, &json!({"name": "t", "main": [{"evaluate": {"x": 1}}]})).await;
    let new_key = on_a.expect(201, on_a.call("POST", "/api/keys", None).await, "key");
    for path in [
        format!("/api/users/{}", id_of(&user)),
        format!("/api/agents/{agent}"),
        format!("/api/sessions/{}", id_of(&session)),
        format!("/api/agents/{agent}/docs/{}", id_of(&doc)),
        format!("/api/tasks/{task}"),
    ] {
        on_b.expect(
            200,
            on_b.call("GET", &path, None).await,
            &format!("GET {path} through the other server"),
        );
    }
    let tools =
        on_b.expect(200, on_b.call("GET", &format!("/api/agents/{agent}/tools"), None).await, "tools");
    assert_eq!(tools["items"][0]["id"], tool["id"], "{tools}");
    let messages = on_b.expect(
        200,
        on_b.call("GET", &format!("/api/sessions/{}/messages", id_of(&session)), None).await,
        "list",
    );
    assert_eq!(messages["items"][0]["id"], message["id"], "{messages}");
    let found = on_b.expect(
        200,
        on_b.call("POST", &format!("/api/agents/{agent}/search"), Some(&json!({"text": "octopus"}))).await,
        "search",
    );
    assert_eq!(found["docs"][0]["id"], doc["id"], "a doc made through A is found through B: {found}");
    let with_new_key = Api::new(&b.base, new_key["key"].as_str().unwrap());
    with_new_key.expect(
        200,
        with_new_key.call("GET", "/api/agents", None).await,
        "a key made through A, on B",
    );
    // An update through B is read through A, and a delete through A is gone on B.
    on_b.expect(
        200,
        on_b.call("PATCH", &format!("/api/agents/{agent}"), Some(&json!({"about": "changed"}))).await,
        "patch",
    );
    let seen = on_a.expect(200, on_a.call("GET", &format!("/api/agents/{agent}"), None).await, "get");
    assert_eq!(seen["about"], "changed");
    on_a.expect(204, on_a.call("DELETE", &format!("/api/users/{}", id_of(&user)), None).await, "delete");
    on_b.expect(404, on_b.call("GET", &format!("/api/users/{}", id_of(&user)), None).await, "deleted");
    // Another tenant sees none of it, on either server.
    let other = run_to_exit(
        &[
            "keys".as_ref(),
            "create".as_ref(),
            "--tenant".as_ref(),
            "other".as_ref(),
            "--data-dir".as_ref(),
            dir.path().join("data").as_os_str(),
        ],
        Duration::from_secs(30),
    );
    assert!(other.status.success(), "{}", other.stderr);
    let other = other.stdout.trim().to_string();
    for server in [&a, &b] {
        let as_other = Api::new(&server.base, &other);
        as_other.expect(
            404,
            as_other.call("GET", &format!("/api/agents/{agent}"), None).await,
            "other tenant",
        );
        let list =
            as_other.expect(200, as_other.call("GET", "/api/agents", None).await, "other tenant's list");
        assert_eq!(list["items"], json!([]), "{list}");
    }
    a.kill();
    b.kill();
}

#[tokio::test]
async fn a_key_revoked_by_the_cli_is_refused_by_every_server_within_a_second() {
    if postgres_only("several servers on one database") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (a, b, key) = two_servers(&data, &[]);
    let made = Api::new(&a.base, &key).call("POST", "/api/keys", None).await;
    assert_eq!(made.0, 201, "{}", made.1);
    let (id, new_key) =
        (made.1["id"].as_str().unwrap().to_string(), made.1["key"].as_str().unwrap().to_string());
    // Both servers know (and cache) the key before it is revoked.
    for server in [&a, &b] {
        assert_eq!(Api::new(&server.base, &new_key).call("GET", "/api/agents", None).await.0, 200);
    }
    let revoked = run_to_exit(
        &["keys".as_ref(), "revoke".as_ref(), id.as_ref(), "--data-dir".as_ref(), data.as_os_str()],
        Duration::from_secs(30),
    );
    assert!(revoked.status.success(), "{}", revoked.stderr);
    let since = Instant::now();
    for server in [&a, &b] {
        let api = Api::new(&server.base, &new_key);
        loop {
            if api.call("GET", "/api/agents", None).await.0 == 401 {
                break;
            }
            assert!(
                since.elapsed() < Duration::from_secs(1),
                "{} still takes the revoked key after 1 s",
                server.base
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    a.kill();
    b.kill();
}

#[tokio::test]
async fn chats_through_two_servers_send_the_whole_ordered_history_and_keep_exchanges_together() {
    if postgres_only("several servers on one database") {
        return;
    }
    let fake = FakeUpstream::start().await;
    let upstream = fake.base_url();
    let env = [("OPENAI_BASE_URL", upstream.as_str()), ("AGENT_PLATFORM_DEFAULT_MODEL", "fake-model")];
    let dir = tempfile::tempdir().unwrap();
    let (a, b, key) = two_servers(&dir.path().join("data"), &env);
    let (on_a, on_b) = (Api::new(&a.base, &key), Api::new(&b.base, &key));
    let agent = on_a.agent("Helper").await;
    let session = id_of(&on_a.expect(
        201,
        on_a.call("POST", "/api/sessions", Some(&json!({"agents": [agent]}))).await,
        "s",
    ));
    // Alternating: each request to the model carries every earlier exchange, in order.
    for turn in 0..4 {
        let api = if turn % 2 == 0 { &on_a } else { &on_b };
        let body = json!({"messages": [{"role": "user", "content": format!("turn {turn}")}]});
        let answered = api.call("POST", &format!("/api/sessions/{session}/chat"), Some(&body)).await;
        assert_eq!(answered.0, 200, "{}", answered.1);
        let sent = fake.last_request().expect("the model was asked");
        let users: Vec<String> = sent.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect();
        let expected: Vec<String> = (0..=turn).map(|t| format!("turn {t}")).collect();
        assert_eq!(users, expected, "turn {turn} through {} sent the whole history", api.base);
    }
    // Concurrent: chats through both servers at once never interleave their messages.
    let chats: Vec<_> = (0..6)
        .map(|i| {
            let api = if i % 2 == 0 { Api::new(&a.base, &key) } else { Api::new(&b.base, &key) };
            let (path, body) = (
                format!("/api/sessions/{session}/chat"),
                json!({"messages": [{"role": "user", "content": format!("together {i}")}]}),
            );
            tokio::spawn(async move { api.call("POST", &path, Some(&body)).await })
        })
        .collect();
    for c in chats {
        let (status, body) = c.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let listed = on_b.expect(
        200,
        on_b.call("GET", &format!("/api/sessions/{session}/messages?limit=100&direction=asc"), None).await,
        "messages",
    );
    let items: Vec<&Value> = listed["items"].as_array().unwrap().iter().collect();
    assert_eq!(items.len(), 20, "10 exchanges of two messages: {listed}");
    for pair in items.chunks(2) {
        assert_eq!(
            (pair[0]["role"].as_str(), pair[1]["role"].as_str()),
            (Some("user"), Some("assistant")),
            "{listed}"
        );
    }
    a.kill();
    b.kill();
}

#[tokio::test]
async fn acknowledged_writes_through_a_killed_server_are_all_read_through_the_other() {
    if postgres_only("several servers on one database") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b, key) = two_servers(&dir.path().join("data"), &[]);
    let on_b = Api::new(&b.base, &key);
    let agent = Api::new(&a.base, &key).agent("Helper").await;
    let session = id_of(&on_b.expect(
        201,
        on_b.call("POST", "/api/sessions", Some(&json!({"agents": [agent]}))).await,
        "s",
    ));
    // Writers of users, messages and agent updates through A until it is killed.
    let writers: Vec<_> = (0..6)
        .map(|w| {
            let api = Api::new(&a.base, &key);
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0.. {
                    let (path, body) = match (w + i) % 3 {
                        0 => ("/api/users".to_string(), json!({"name": format!("u{w}-{i}")})),
                        1 => (
                            format!("/api/sessions/{session}/messages"),
                            json!({"role": "user", "content": format!("m{w}-{i}")}),
                        ),
                        _ => ("/api/agents".to_string(), json!({"name": format!("a{w}-{i}")})),
                    };
                    let sent = api
                        .http
                        .post(format!("{}{path}", api.base))
                        .bearer_auth(&api.key)
                        .json(&body)
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status().as_u16() == 201 => {
                            let v: Value = r.json().await.unwrap_or(Value::Null);
                            if let Some(id) = v["id"].as_str() {
                                acknowledged.push((path.clone(), id.to_string()));
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return acknowledged,
                    }
                }
                acknowledged
            })
        })
        .collect();
    // Let them write for a while, then SIGKILL A (no shutdown, no flush).
    let on_b_count = || async {
        let got = on_b.call("GET", &format!("/api/sessions/{session}/messages?limit=1"), None).await;
        got.1["items"].as_array().map_or(0, Vec::len)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while on_b_count().await == 0 {
        assert!(Instant::now() < deadline, "no write went through A");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.kill();
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.extend(w.await.unwrap());
    }
    assert!(acknowledged.len() > 10, "the writers got {} writes through", acknowledged.len());
    let messages = on_b.expect(
        200,
        on_b.call("GET", &format!("/api/sessions/{session}/messages?limit=1000"), None).await,
        "messages",
    );
    let message_ids: Vec<&str> =
        messages["items"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    for (path, id) in &acknowledged {
        if path.ends_with("/messages") {
            assert!(message_ids.contains(&id.as_str()), "acknowledged message {id} is lost");
        } else {
            let got = on_b.call("GET", &format!("{path}/{id}"), None).await;
            assert_eq!(got.0, 200, "acknowledged {path}/{id} is lost: {}", got.1);
        }
    }
    b.kill();
}

#[tokio::test]
async fn an_execution_on_a_killed_server_is_finished_by_the_other() {
    if postgres_only("several servers on one database") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b, key) = two_servers(&dir.path().join("data"), &[("AGENT_PLATFORM_EXECUTIONS_LEASE_S", "2")]);
    let (on_a, on_b) = (Api::new(&a.base, &key), Api::new(&b.base, &key));
    let agent = on_a.agent("Runner").await;
    let task = on_a
        .task(
            agent,
            &json!({"name": "slow", "main": [{"log": "start"}, {"sleep": {"seconds": 3}}, {"evaluate": {"done": true}}]}),
        )
        .await;
    // Started through A, which runs it (the server that takes a create claims it).
    let e = on_a.start(task, json!({})).await;
    let id = id_of(&e);
    on_a.wait_for(id, &["running"], Duration::from_secs(20)).await;
    a.kill();
    let done = on_b.wait_ended(id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["output"], json!({"done": true}), "{done}");
    let transitions = on_b.transitions(id).await;
    Api::checked(&transitions, true);
    let steps: Vec<&Value> = transitions.iter().filter(|t| t["type"] == "step").collect();
    let mut paths: Vec<String> = steps.iter().map(|t| t["current"].to_string()).collect();
    let n = paths.len();
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), n, "no step committed twice: {transitions:#?}");
    b.kill();
}

/// A throw-away cluster of this test's own (`.ci/postgres`), stopped when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    admin: String,
}

impl Cluster {
    fn script() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/postgres")
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        // PostgreSQL may run as another user (as root: `pgci`), who must reach the dir.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let out = Command::new(Self::script()).arg("start").arg(dir.path().join("pg")).output().unwrap();
        assert!(out.status.success(), "the cluster starts: {}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout);
        let admin = said.split('\'').nth(1).expect("the script prints the URL").to_string();
        Cluster { dir, admin }
    }

    fn run(&self, what: &str) {
        let out = Command::new(Self::script()).arg(what).arg(self.dir.path().join("pg")).output().unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Self::script()).arg("stop").arg(self.dir.path().join("pg")).output();
    }
}

#[tokio::test]
async fn a_database_that_goes_away_answers_503_and_its_return_brings_2xx_back() {
    if postgres_only("the database going away") {
        return;
    }
    let cluster = Cluster::start();
    let url = agent_platform::store::pg_store::create_database(&cluster.admin, "away").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AGENT_PLATFORM_DATABASE_URL", url.as_str()),
        ("AGENT_PLATFORM_STORE_STATEMENT_TIMEOUT_S", "2"),
        ("AGENT_PLATFORM_STORE_CONNECT_TIMEOUT_S", "1"),
    ];
    // Not the harness's database: this one is made above, so the first key is read by hand.
    let a = Process::serve_with_env(&dir.path().join("data"), &env);
    let key = match &a.key {
        Some(k) => k.clone(),
        None => panic!("a new database prints a first key"),
    };
    let api = Api::new(&a.base, &key);
    api.expect(201, api.call("POST", "/api/users", Some(&json!({"name": "before"}))).await, "before");
    cluster.run("stop");
    for (method, path, body) in
        [("GET", "/api/users", None), ("POST", "/api/users", Some(json!({"name": "while away"})))]
    {
        let asked = Instant::now();
        let (status, answer) = api.call(method, path, body.as_ref()).await;
        assert_eq!(status, 503, "{method} {path} while the database is away: {answer}");
        assert_eq!(answer["code"], "store_unavailable", "{answer}");
        assert!(asked.elapsed() < Duration::from_secs(5), "answered after {:?}", asked.elapsed());
    }
    cluster.run("resume");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = api.call("POST", "/api/users", Some(&json!({"name": "after"}))).await;
        if status == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "no 2xx 20 s after the database came back (last {status})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let users = api.expect(200, api.call("GET", "/api/users", None).await, "users");
    assert_eq!(users["items"].as_array().unwrap().len(), 2, "{users}");
    a.kill();
}
