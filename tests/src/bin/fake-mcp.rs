//! `fake-mcp`: an MCP server (rmcp, Streamable HTTP) with tools that fail in
//! the ways a real one can, for the tests of the MCP client.
//!
//! Listens on `127.0.0.1:0`, prints its endpoint (`http://127.0.0.1:PORT/mcp`)
//! as the first line of stdout and serves until it is killed. Tools:
//!
//! - `echo {text}` answers `text`; `add {a, b}` answers the sum (as text).
//! - `slow {ms}` sleeps that long, then answers `slept {ms} ms`; `wait {ms}`
//!   does the same, annotated `idempotentHint: true`.
//! - `crash` exits the process in the middle of the call (status 3).
//! - `huge {bytes}` answers that many `x`.
//! - `fail {text}` answers `text` with `isError: true`.
//! - `bump` adds the tool `bumped` to the list (every session sees it).
//! - `note {text}` answers `noted <text>` (not idempotent: the crash test
//!   counts how often each text was noted).
//! - `echo` is annotated `idempotentHint: true`, `bump` `idempotentHint: false`.
//!
//! `GET /calls` (plain HTTP, not MCP) answers how many `tools/list` and
//! `tools/call` requests it has served (a call counts when it begins), as
//! `{"lists": N, "calls": N, "tools": {"<tool>": N, ...}}`, so a test can see
//! whether a list came from its cache, and which calls began how often;
//! `"notes": {"<text>": N}` counts the calls of `note` by their text.

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

#[derive(Default)]
struct State {
    bumped: AtomicBool,
    lists: AtomicU64,
    calls: AtomicU64,
    by_tool: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    notes: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

#[derive(Clone)]
struct Fake {
    state: Arc<State>,
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

impl Fake {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new("echo", "Answers its text", schema(json!({"text": {"type": "string"}}), &["text"]))
                .annotate(ToolAnnotations::new().idempotent(true).read_only(true)),
            Tool::new(
                "add",
                "Adds two numbers",
                schema(json!({"a": {"type": "number"}, "b": {"type": "number"}}), &["a", "b"]),
            ),
            Tool::new("slow", "Sleeps ms milliseconds", schema(json!({"ms": {"type": "integer"}}), &["ms"])),
            Tool::new("wait", "Sleeps ms milliseconds", schema(json!({"ms": {"type": "integer"}}), &["ms"]))
                .annotate(ToolAnnotations::new().idempotent(true)),
            Tool::new("crash", "Exits the server mid-call", schema(json!({}), &[])),
            Tool::new("huge", "Answers bytes x", schema(json!({"bytes": {"type": "integer"}}), &["bytes"])),
            Tool::new("fail", "Fails with its text", schema(json!({"text": {"type": "string"}}), &["text"])),
            Tool::new("note", "Notes its text", schema(json!({"text": {"type": "string"}}), &["text"])),
            Tool::new("bump", "Adds the tool bumped", schema(json!({}), &[]))
                .annotate(ToolAnnotations::new().idempotent(false)),
        ];
        if self.state.bumped.load(Ordering::SeqCst) {
            tools.push(Tool::new("bumped", "Added by bump", schema(json!({}), &[])));
        }
        tools
    }
}

impl ServerHandler for Fake {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.state.lists.fetch_add(1, Ordering::SeqCst);
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.state.calls.fetch_add(1, Ordering::SeqCst);
        *self.state.by_tool.lock().unwrap().entry(request.name.to_string()).or_default() += 1;
        let args = request.arguments.unwrap_or_default();
        let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let number = |key: &str| args.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![ContentBlock::text(text("text"))]),
            "add" => {
                CallToolResult::success(vec![ContentBlock::text((number("a") + number("b")).to_string())])
            }
            "slow" | "wait" => {
                let ms = number("ms") as u64;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "crash" => {
                eprintln!("fake-mcp: crash called; exiting");
                std::process::exit(3);
            }
            "huge" => CallToolResult::success(vec![ContentBlock::text("x".repeat(number("bytes") as usize))]),
            "fail" => CallToolResult::error(vec![ContentBlock::text(text("text"))]),
            "note" => {
                *self.state.notes.lock().unwrap().entry(text("text")).or_default() += 1;
                CallToolResult::success(vec![ContentBlock::text(format!("noted {}", text("text")))])
            }
            "bump" => {
                self.state.bumped.store(true, Ordering::SeqCst);
                CallToolResult::success(vec![ContentBlock::text("bumped")])
            }
            "bumped" if self.state.bumped.load(Ordering::SeqCst) => {
                CallToolResult::success(vec![ContentBlock::text("here")])
            }
            other => return Err(ErrorData::invalid_params(format!("no tool named {other:?}"), None)),
        };
        Ok(result.into())
    }
}

#[tokio::main]
async fn main() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("the bound address");
    let state = Arc::new(State::default());
    let fake = Fake { state: state.clone() };
    let mcp: StreamableHttpService<Fake, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(fake.clone()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "http://{addr}/mcp").expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (mcp, state) = (mcp.clone(), state.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let (mcp, state) = (mcp.clone(), state.clone());
                async move {
                    let response: hyper::Response<BoxBody<Bytes, Infallible>> = match request.uri().path() {
                        "/calls" => {
                            let counts = json!({
                                "lists": state.lists.load(Ordering::SeqCst),
                                "calls": state.calls.load(Ordering::SeqCst),
                                "tools": *state.by_tool.lock().unwrap(),
                                "notes": *state.notes.lock().unwrap(),
                            });
                            hyper::Response::new(Full::new(Bytes::from(counts.to_string())).boxed())
                        }
                        _ => mcp.handle(request).await,
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
