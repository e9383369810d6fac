//! The MCP client (`agent_platform::tools::mcp`) against MCP servers in
//! processes of their own: `fake-mcp` (tests/src/bin/fake-mcp.rs), whose tools
//! are slow, crash, answer too much or change the list; and, in CI, the
//! reference server `@modelcontextprotocol/server-everything`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent_platform::tools::mcp::{Mcp, McpConfig, McpServer};
use agent_platform::tools::outbound::Outbound;
use agent_platform_tests::mcp::FakeMcp;
use serde_json::{Map, Value, json};

/// A client allowed to reach 127.0.0.1 (where the test servers listen).
fn client(config: McpConfig) -> Mcp {
    Mcp::new(Outbound::new(["127.0.0.1"]).unwrap(), config)
}

fn config() -> McpConfig {
    McpConfig {
        list_timeout: Duration::from_secs(10),
        list_cache_ttl: Duration::from_secs(300),
        list_cache_entries: 16,
        max_output_bytes: 1 << 20,
    }
}

fn server(url: &str) -> McpServer {
    McpServer { label: "fake".into(), url: url.into(), headers: BTreeMap::new() }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

const CALL: Duration = Duration::from_secs(10);

#[tokio::test]
async fn tools_are_listed_with_their_schema_and_hints() {
    let fake = FakeMcp::start();
    let mcp = client(config());
    let tools = mcp.list_tools(&server(&fake.url)).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "add", "slow", "wait", "crash", "huge", "fail", "note", "bump"]);
    let echo = &tools[0];
    assert_eq!(echo.description.as_deref(), Some("Answers its text"));
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(echo.annotations.as_ref().unwrap()["idempotentHint"], true);
    assert_eq!(echo.annotations.as_ref().unwrap()["readOnlyHint"], true);
    assert_eq!(tools[8].annotations.as_ref().unwrap()["idempotentHint"], false);
    assert_eq!(tools[3].annotations.as_ref().unwrap()["idempotentHint"], true);
    assert!(tools[1].annotations.is_none());
}

#[tokio::test]
async fn a_list_is_cached_until_its_ttl_then_the_changed_list_shows() {
    let fake = FakeMcp::start();
    let mcp = client(McpConfig { list_cache_ttl: Duration::from_secs(1), ..config() });
    let s = server(&fake.url);
    let first = mcp.list_tools(&s).await.unwrap();
    assert_eq!(fake.counts().await, (1, 0));
    mcp.call_tool(&s, "bump", Map::new(), CALL).await.unwrap();
    let cached = mcp.list_tools(&s).await.unwrap();
    assert_eq!(cached, first, "still the list in the cache");
    assert_eq!(fake.counts().await, (1, 1), "the second list did not reach the server");
    // Other headers: another entry (the headers may name another account).
    let mut other = s.clone();
    other.headers.insert("authorization".into(), "Bearer b".into());
    assert!(mcp.list_tools(&other).await.unwrap().iter().any(|t| t.name == "bumped"));
    assert_eq!(fake.counts().await.0, 2);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = mcp.list_tools(&s).await.unwrap();
    assert!(fresh.iter().any(|t| t.name == "bumped"), "after the TTL the changed list shows");
    assert_eq!(fake.counts().await.0, 3);
}

#[tokio::test]
async fn the_cache_keeps_at_most_its_bound_of_lists() {
    let fake = FakeMcp::start();
    let mcp = client(McpConfig { list_cache_entries: 1, ..config() });
    let a = server(&fake.url);
    let mut b = a.clone();
    b.headers.insert("x-account".into(), "b".into());
    mcp.list_tools(&a).await.unwrap();
    mcp.list_tools(&b).await.unwrap();
    mcp.list_tools(&a).await.unwrap();
    assert_eq!(fake.counts().await.0, 3, "b's list pushed a's out");
}

#[tokio::test]
async fn a_call_answers_the_tools_text() {
    let fake = FakeMcp::start();
    let mcp = client(config());
    let s = server(&fake.url);
    assert_eq!(mcp.call_tool(&s, "echo", args(json!({"text": "hi there"})), CALL).await.unwrap(), "hi there");
    assert_eq!(mcp.call_tool(&s, "add", args(json!({"a": 2, "b": 3})), CALL).await.unwrap(), "5");
}

#[tokio::test]
async fn a_tool_error_is_an_error_with_the_tools_text() {
    let fake = FakeMcp::start();
    let mcp = client(config());
    let s = server(&fake.url);
    let err = mcp.call_tool(&s, "fail", args(json!({"text": "no such city"})), CALL).await.unwrap_err();
    assert_eq!(err, "no such city");
    // A tool the server does not have: the server's JSON-RPC error, naming the server.
    let err = mcp.call_tool(&s, "nope", Map::new(), CALL).await.unwrap_err();
    assert!(err.contains("MCP server fake (http://127.0.0.1:") && err.contains("no tool named"), "{err}");
}

#[tokio::test]
async fn a_slow_tool_is_an_error_once_the_timeout_passes() {
    let fake = FakeMcp::start();
    let mcp = client(config());
    let started = Instant::now();
    let err = mcp
        .call_tool(&server(&fake.url), "slow", args(json!({"ms": 10_000})), Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(
        err.contains("MCP server fake (") && err.contains("no answer to tools/call slow within 0.5 s"),
        "{err}"
    );
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_an_error_not_a_hang() {
    let mut fake = FakeMcp::start();
    let mcp = client(config());
    let started = Instant::now();
    let err = mcp.call_tool(&server(&fake.url), "crash", Map::new(), CALL).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}: {err}", started.elapsed());
    assert!(err.contains("MCP server fake (") && err.contains("tools/call crash failed"), "{err}");
    assert!(err.contains("the connection ended before the answer came"), "{err}");
    assert!(fake.exited());
}

#[tokio::test]
async fn an_output_over_the_bound_is_an_error_saying_so() {
    let fake = FakeMcp::start();
    let mcp = client(McpConfig { max_output_bytes: 1000, ..config() });
    let s = server(&fake.url);
    assert_eq!(mcp.call_tool(&s, "huge", args(json!({"bytes": 1000})), CALL).await.unwrap().len(), 1000);
    let err = mcp.call_tool(&s, "huge", args(json!({"bytes": 1001})), CALL).await.unwrap_err();
    assert!(err.contains("1001 bytes, more than tools.max_output_bytes (1000)"), "{err}");
    // Far over: refused while it is read, not after.
    let err = mcp.call_tool(&s, "huge", args(json!({"bytes": 1 << 20})), CALL).await.unwrap_err();
    assert!(err.contains("MCP server fake ("), "{err}");
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_naming_it() {
    // A port nobody listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mcp = client(config());
    let started = Instant::now();
    let err = mcp.list_tools(&server(&url)).await.unwrap_err();
    assert!(err.starts_with(&format!("MCP server fake ({url}): could not connect")), "{err}");
    let err = mcp.call_tool(&server(&url), "echo", Map::new(), CALL).await.unwrap_err();
    assert!(err.starts_with(&format!("MCP server fake ({url}): could not connect")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = mcp.list_tools(&server("not a url")).await.unwrap_err();
    assert!(err.contains("not a valid URL"), "{err}");
}

#[tokio::test]
async fn a_private_address_is_refused_unless_listed() {
    let fake = FakeMcp::start();
    let mcp = Mcp::new(Outbound::new::<&str>([]).unwrap(), config());
    let err = mcp.list_tools(&server(&fake.url)).await.unwrap_err();
    assert!(err.starts_with(&format!("MCP server fake ({}): 127.0.0.1:", fake.url)), "{err}");
    assert!(err.contains("is not allowed: it is a loopback address"), "{err}");
    assert!(err.contains("tools.allowed_hosts"), "{err}");
    // By a name that resolves to it: refused when resolved.
    let by_name = fake.url.replace("127.0.0.1", "localhost");
    let err = mcp.call_tool(&server(&by_name), "echo", Map::new(), CALL).await.unwrap_err();
    assert!(err.contains("localhost is not allowed: it resolves to"), "{err}");
    assert_eq!(fake.counts().await, (0, 0), "nothing reached the server");
    // Listed: allowed.
    let listed = Mcp::new(Outbound::new(["localhost"]).unwrap(), config());
    let answer = listed.call_tool(&server(&by_name), "echo", args(json!({"text": "in"})), CALL).await;
    assert_eq!(answer.unwrap(), "in");
}

#[tokio::test]
async fn headers_the_transport_sets_are_refused() {
    let fake = FakeMcp::start();
    let mcp = client(config());
    let mut s = server(&fake.url);
    s.headers.insert("Mcp-Session-Id".into(), "x".into());
    let err = mcp.list_tools(&s).await.unwrap_err();
    assert!(err.contains("\"Mcp-Session-Id\" is set by the client itself"), "{err}");
}

/// The reference server, `@modelcontextprotocol/server-everything`, as
/// `.ci/mcp-everything/install` installs it (`AGENT_PLATFORM_TEST_MCP_EVERYTHING`
/// names its executable). Under `CI=true` its absence fails the test;
/// elsewhere the test is skipped, saying so.
#[tokio::test]
async fn the_reference_server_lists_its_tools_and_echoes() {
    let Some(bin) = std::env::var_os("AGENT_PLATFORM_TEST_MCP_EVERYTHING") else {
        let msg = "AGENT_PLATFORM_TEST_MCP_EVERYTHING is not set: install the reference MCP server with \
                   `.ci/mcp-everything/install DIR` and set it to the path that prints";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("skipped: {msg}");
        return;
    };
    let (mut child, url) = start_everything(&bin);
    let mcp = client(config());
    let s = McpServer { label: "everything".into(), url, headers: BTreeMap::new() };
    let tools = mcp.list_tools(&s).await;
    let echoed = mcp.call_tool(&s, "echo", args(json!({"message": "hello"})), CALL).await;
    let _ = child.kill();
    let _ = child.wait();
    let tools = tools.unwrap();
    let echo = tools.iter().find(|t| t.name == "echo").expect("an echo tool");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    assert_eq!(echo.annotations.as_ref().unwrap()["idempotentHint"], true);
    assert_eq!(echoed.unwrap(), "Echo: hello");
}

/// Starts the reference server on a free port (it takes one from `PORT` and
/// cannot say which it picked) and waits until it listens.
fn start_everything(bin: &std::ffi::OsStr) -> (std::process::Child, String) {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = std::process::Command::new(bin)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.to_string_lossy()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break; // the port was taken meanwhile: another one
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, format!("http://127.0.0.1:{port}/mcp"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("the reference MCP server did not start listening");
}
