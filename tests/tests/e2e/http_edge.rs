//! The HTTP connection edge, below the handlers: what a client that does not
//! finish its request gets. Raw TCP, since an HTTP client always finishes.

use std::time::{Duration, Instant};

use agent_platform_tests::TestServer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The server's `request_body_timeout_s` in these tests.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a test waits for the server to act before failing.
const PATIENCE: Duration = Duration::from_secs(15);

async fn server_with_body_timeout() -> TestServer {
    TestServer::with_config(|cfg| cfg.server.request_body_timeout_s = BODY_TIMEOUT.as_secs()).await
}

/// The head of a `POST /api/agents` announcing a body of `len` bytes.
fn post_head(srv: &TestServer, len: usize) -> String {
    format!(
        "POST /api/agents HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n",
        srv.key
    )
}

/// Reads until the server closes the connection (a reset counts: it may come
/// after the answer when the client is still sending); fails after [`PATIENCE`].
async fn read_until_closed(conn: &mut (impl AsyncReadExt + Unpin)) -> String {
    let read_all = async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return answer,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    let answer = tokio::time::timeout(PATIENCE, read_all).await.expect("the server closes the connection");
    String::from_utf8(answer).expect("a text answer")
}

/// Asserts a 408 in the contract's error shape, its request id in the header too.
#[track_caller]
fn assert_request_timeout(answer: &str) {
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 408 "), "expected a 408, got:\n{answer}");
    let body: Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(body["code"], "request_timeout", "{body}");
    assert!(body["detail"].as_str().is_some_and(|d| d.contains("did not arrive")), "{body}");
    let header_id =
        head.lines().find_map(|l| l.strip_prefix("x-request-id: ")).expect("an x-request-id header");
    assert_eq!(body["request_id"], header_id, "{body}");
}

#[tokio::test]
async fn a_body_that_stalls_answers_408_and_the_connection_closes() {
    let srv = server_with_body_timeout().await;
    let mut conn = TcpStream::connect(srv.addr()).await.unwrap();
    let body = r#"{"name": "Ada Lovelace"}"#;
    // Half the body, then nothing.
    let sent = format!("{}{}", post_head(&srv, body.len()), &body[..10]);
    conn.write_all(sent.as_bytes()).await.unwrap();
    let start = Instant::now();
    let answer = read_until_closed(&mut conn).await;
    assert_request_timeout(&answer);
    assert!(start.elapsed() >= BODY_TIMEOUT, "answered before the timeout: {:?}", start.elapsed());
    let agents = srv.client.agent_list().send().await.unwrap().into_inner().items;
    assert!(agents.is_empty(), "nothing is created from half a body");
}

#[tokio::test]
async fn a_body_that_trickles_past_the_timeout_answers_408() {
    let srv = server_with_body_timeout().await;
    let conn = TcpStream::connect(srv.addr()).await.unwrap();
    let (mut rx, mut tx) = conn.into_split();
    let body = format!(r#"{{"name": "Ada Lovelace", "about": "{}"}}"#, "x".repeat(100));
    tx.write_all(post_head(&srv, body.len()).as_bytes()).await.unwrap();
    // A byte every 100 ms never stalls for long, but would take 12 s in all:
    // the bound is on the whole body. The client keeps sending until it is cut off.
    let trickle = async {
        for b in body.as_bytes() {
            if tx.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (answer, ()) = tokio::join!(read_until_closed(&mut rx), trickle);
    assert_request_timeout(&answer);
}

#[tokio::test]
async fn a_body_timeout_of_zero_is_refused_at_start() {
    let mut cfg = agent_platform::config::Config::default();
    cfg.server.bind = "127.0.0.1:0".parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    cfg.server.data_dir = dir.path().join("data");
    cfg.server.request_body_timeout_s = 0;
    let err = agent_platform::server::start_with_env(&cfg, |_| None).await.err().expect("refused");
    assert!(err.to_string().contains("request_body_timeout_s"), "{err}");
}

// ---- connections that bring no request, and the router's own errors

/// The server's `idle_timeout_s` in these tests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(1);

async fn server_with_idle_timeout() -> TestServer {
    TestServer::with_config(|cfg| cfg.server.idle_timeout_s = IDLE_TIMEOUT.as_secs()).await
}

/// Asserts that the server closes `conn` no sooner than the idle timeout after `since`.
async fn assert_closed_after_idle_timeout(conn: &mut TcpStream, since: Instant) {
    let answer = read_until_closed(conn).await;
    assert!(since.elapsed() >= IDLE_TIMEOUT, "closed before the idle timeout: {:?}", since.elapsed());
    assert!(!answer.contains("HTTP/1.1 2"), "no request was answered, got:\n{answer}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let srv = server_with_idle_timeout().await;
    let start = Instant::now();
    let mut conn = TcpStream::connect(srv.addr()).await.unwrap();
    assert_closed_after_idle_timeout(&mut conn, start).await;
}

#[tokio::test]
async fn headers_that_never_finish_are_dropped_after_the_idle_timeout() {
    let srv = server_with_idle_timeout().await;
    let mut conn = TcpStream::connect(srv.addr()).await.unwrap();
    let start = Instant::now();
    conn.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: test\r\nX-Slow: ").await.unwrap();
    assert_closed_after_idle_timeout(&mut conn, start).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let srv = server_with_idle_timeout().await;
    let mut conn = TcpStream::connect(srv.addr()).await.unwrap();
    conn.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    // The answer comes, and the connection stays open for another request...
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\"ok\"") {
        let n = tokio::time::timeout(PATIENCE, conn.read(&mut buf)).await.expect("an answer").unwrap();
        assert!(n > 0, "the connection closed right after the answer");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&answer));
    // ...until it has been idle for the timeout.
    let idle_since = Instant::now();
    assert_closed_after_idle_timeout(&mut conn, idle_since).await;
}

#[tokio::test]
async fn an_unknown_route_is_404_in_the_contract_shape() {
    let srv = TestServer::start().await;
    for path in ["/api/nope", "/nope", "/api/agents/00000000-0000-0000-0000-000000000000/nope"] {
        let r = srv.raw("GET", path, None).await;
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(r.body["code"], "not_found", "{path}: {}", r.body);
        assert!(r.body["detail"].as_str().is_some_and(|d| d.contains("no such route")), "{}", r.body);
        assert_eq!(r.body["request_id"], r.headers["x-request-id"].to_str().unwrap(), "{}", r.body);
        assert!(r.body.get("message").is_none(), "dropshot's own shape: {}", r.body);
    }
}

#[tokio::test]
async fn a_method_the_route_lacks_is_405_in_the_contract_shape_with_allow() {
    let srv = TestServer::start().await;
    for (method, path, allowed) in
        [("DELETE", "/api/healthz", "GET"), ("PUT", "/api/agents", "GET"), ("FOO", "/api/users", "GET")]
    {
        let r = srv.raw(method, path, None).await;
        assert_eq!(r.status, 405, "{method} {path}: {}", r.body);
        assert_eq!(r.body["code"], "method_not_allowed", "{}", r.body);
        assert_eq!(r.body["request_id"], r.headers["x-request-id"].to_str().unwrap(), "{}", r.body);
        let allow: Vec<&str> = r.headers.get_all("allow").iter().map(|v| v.to_str().unwrap()).collect();
        assert!(allow.contains(&allowed), "{method} {path}: Allow {allow:?}");
        assert!(r.body["detail"].as_str().unwrap().contains(allowed), "{}", r.body);
    }
}

#[tokio::test]
async fn shutdown_does_not_wait_for_idle_or_silent_connections() {
    // The default idle timeout (30 s): shutting down must not wait for it.
    let srv = TestServer::start().await;
    let mut idle = TcpStream::connect(srv.addr()).await.unwrap();
    idle.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: test\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(PATIENCE, idle.read(&mut buf)).await.expect("an answer").unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200 "));
    let _silent = TcpStream::connect(srv.addr()).await.unwrap();
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), srv.stop()).await.expect("shutdown ends promptly");
    assert!(start.elapsed() < Duration::from_secs(5));
}
