//! The agent loop's own cost per tool round: what the server adds to a
//! session chat for each round of a tool it runs, beyond the model's time
//! and the tool's.
//!
//! `cargo bench -p agent-platform-benches --bench agent_loop`
//!
//! A session chat (not streamed, `save: false`, a session without history)
//! whose model calls one tool of the server's for N rounds (N = 0, 1, 3),
//! then answers text; the tool is an `api_call` (a GET on a local HTTP
//! server that answers at once) in one session, and an MCP server's tool
//! (`echo`, on an MCP server in this process) in another. Each turn is
//! followed by its direct twin, in the same order as the server works:
//! the N + 1 requests the server sent the provider for that turn (captured
//! once, replayed as they were, the fake scripted the same way), and between
//! them the N tool calls made straight — the same GET through the server's
//! own outbound client, or `tools/call` through the server's own MCP client
//! ([`agent_platform::tools::mcp::Mcp`]: connect, initialize, call, close,
//! as the loop does).
//!
//! A turn's added time is its p50 minus the p50 of its twin's total. The
//! figure per round is what N rounds add beyond the same turn without a
//! tool call (N = 0, which has the turn's own cost: auth, the session, the
//! plan, the lease): `(added(N) − added(0)) / N`.
//!
//! The cases are measured in the same rounds (one turn of each N in turn,
//! each followed by its twin), so that they see the machine in the same
//! state.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_platform::config::{Config, ToolsConfig};
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::store::sled_store::Durability;
use agent_platform::tools::mcp::{Mcp, McpConfig, McpServer};
use agent_platform::tools::outbound::Outbound;
use agent_platform_tests::http_target::HttpTarget;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

/// Measured rounds (each: one turn of every case, each followed by its twin).
const ROUNDS: usize = 400;
/// Tool rounds per turn, one case each; the first has none.
const TOOL_ROUNDS: [usize; 3] = [0, 1, 3];
const ANSWER: &str = "It is sunny in Paris.";

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A tool called straight, as the loop calls it.
enum Direct {
    /// The `api_call`'s GET, through the server's outbound client.
    Http { client: reqwest::Client, url: String },
    /// `tools/call`, through the server's MCP client.
    Mcp { mcp: Box<Mcp>, server: McpServer, tool: String, arguments: Map<String, Value> },
}

impl Direct {
    async fn call(&self) -> Duration {
        let started = Instant::now();
        match self {
            Direct::Http { client, url } => {
                let resp = client.get(url).send().await.unwrap();
                assert!(resp.status().is_success(), "{} from {url}", resp.status());
                resp.bytes().await.unwrap();
            }
            Direct::Mcp { mcp, server, tool, arguments } => {
                mcp.call_tool(server, tool, arguments.clone(), Duration::from_secs(30)).await.unwrap();
            }
        }
        started.elapsed()
    }
}

/// One kind of tool, in its own session.
struct Loop {
    label: &'static str,
    chat_url: String,
    /// The model's answer that calls the tool.
    call: Behaviour,
    direct: Direct,
}

/// A turn's timings: (the turn through the service, its twin's provider
/// calls, its twin's tool calls), one entry per round.
type Timings = [Vec<Duration>; 3];

struct Bench {
    http: reqwest::Client,
    fake: FakeUpstream,
    auth: String,
    upstream_url: String,
}

impl Bench {
    /// One turn through the service, with `n` tool rounds scripted.
    async fn turn(&self, l: &Loop, n: usize) -> (Duration, Value) {
        for _ in 0..n {
            self.fake.push(l.call.clone());
        }
        let body = json!({"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "save": false});
        let body = serde_json::to_vec(&body).unwrap();
        let started = Instant::now();
        let resp = self
            .http
            .post(&l.chat_url)
            .header("authorization", &self.auth)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{} from {}", resp.status(), l.chat_url);
        let bytes = resp.bytes().await.unwrap();
        (started.elapsed(), serde_json::from_slice(&bytes).unwrap())
    }

    /// The requests the server sends the provider for a turn of `n` rounds
    /// (after a warm-up), checking that the turn ran `n` tools and answered.
    async fn capture(&self, l: &Loop, n: usize) -> Vec<Vec<u8>> {
        for _ in 0..5 {
            self.turn(l, n).await;
        }
        self.fake.keep_requests(n + 1);
        let (_, answer) = self.turn(l, n).await;
        let runs = answer["tool_runs"].as_array().map_or(0, Vec::len);
        assert_eq!(runs, n, "{answer}");
        assert!(answer["tool_runs"].as_array().unwrap().iter().all(|r| r["error"].is_null()), "{answer}");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{answer}");
        let sent: Vec<Vec<u8>> =
            self.fake.requests().iter().map(|r| serde_json::to_vec(&r.body).unwrap()).collect();
        assert_eq!(sent.len(), n + 1);
        self.fake.keep_requests(1);
        sent
    }

    /// The twin of a turn of `n` rounds: its provider requests, and the
    /// tool's calls between them; (provider time, tool time).
    async fn direct(&self, l: &Loop, prompts: &[Vec<u8>]) -> (Duration, Duration) {
        let (mut provider, mut tool) = (Duration::ZERO, Duration::ZERO);
        for (i, prompt) in prompts.iter().enumerate() {
            let last = i + 1 == prompts.len();
            if !last {
                self.fake.push(l.call.clone());
            }
            let started = Instant::now();
            let resp = self
                .http
                .post(&self.upstream_url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(prompt.clone())
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            resp.bytes().await.unwrap();
            provider += started.elapsed();
            if !last {
                tool += l.direct.call().await;
            }
        }
        (provider, tool)
    }

    /// `ROUNDS` rounds of every case; prints one line per case, then the cost per tool round.
    async fn measure(&self, l: &Loop) {
        let mut prompts = Vec::new();
        for n in TOOL_ROUNDS {
            prompts.push(self.capture(l, n).await);
        }
        let mut timings: Vec<Timings> = TOOL_ROUNDS.iter().map(|_| Default::default()).collect();
        for _ in 0..ROUNDS {
            for ((n, t), prompts) in TOOL_ROUNDS.iter().zip(&mut timings).zip(&prompts) {
                t[0].push(self.turn(l, *n).await.0);
                let (provider, tool) = self.direct(l, prompts).await;
                t[1].push(provider);
                t[2].push(tool);
            }
        }
        let mut added = Vec::new();
        for (n, [turn, provider, tool]) in TOOL_ROUNDS.iter().zip(&mut timings) {
            let mut twin: Vec<Duration> = provider.iter().zip(tool.iter()).map(|(p, t)| *p + *t).collect();
            let (t50, t99, w50) = (pct(turn, 0.5), pct(turn, 0.99), pct(&mut twin, 0.5));
            let a = ms(t50) - ms(w50);
            println!(
                "{:<9} {n} rounds: turn p50 {:>7.3} ms p99 {:>7.3} ms | direct p50 {:>7.3} ms (provider ×{} {:>6.3}, \
                 tool ×{n} {:>6.3}) | added p50 {:>+7.3} ms",
                l.label,
                ms(t50),
                ms(t99),
                ms(w50),
                n + 1,
                ms(pct(provider, 0.5)),
                ms(pct(tool, 0.5)),
                a,
            );
            added.push(a);
        }
        let per_round: Vec<String> = TOOL_ROUNDS
            .iter()
            .zip(&added)
            .skip(1)
            .map(|(n, a)| format!("{n} rounds {:+.3} ms", (a - added[0]) / *n as f64))
            .collect();
        println!("{:<9} added per tool round, beyond a turn without one: {}", l.label, per_round.join(", "));
    }
}

#[tokio::main]
async fn main() {
    let fake = FakeUpstream::start().await;
    fake.set_default(Behaviour::Text(ANSWER.into()));
    let target = HttpTarget::start().await;
    let mcp_url = start_mcp().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.bind = "127.0.0.1:0".parse().unwrap();
    cfg.server.data_dir = dir.path().join("data");
    cfg.server.durability = Durability::Flush;
    cfg.log.level = "error".into();
    cfg.models = fake.models_config("bench-model");
    cfg.tools.allowed_hosts = vec!["127.0.0.1".into()];
    let running = agent_platform::server::start_with_env(&cfg, |_| None).await.unwrap();
    let base = format!("http://{}", running.local_addr());
    let auth = format!("Bearer {}", running.first_key.clone().unwrap());
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let req = http.post(format!("{base}{path}")).header("authorization", &auth).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            assert!(resp.status().is_success(), "{} from {path}", resp.status());
            resp.json::<Value>().await.unwrap()
        }
    };
    let user = post("/api/users".into(), json!({"name": "Bob"})).await;
    // One agent and session per kind of tool, so that each turn offers only its tool.
    let session_with = async |name: &str, tool: Value| {
        let agent = post("/api/agents".into(), json!({"name": name, "about": "a weather assistant"})).await;
        post(format!("/api/agents/{}/tools", agent["id"].as_str().unwrap()), tool).await;
        let session = post("/api/sessions".into(), json!({"agent": agent["id"], "user": user["id"]})).await;
        format!("{base}/api/sessions/{}/chat", session["id"].as_str().unwrap())
    };
    let weather = format!("{}/weather", target.url());
    let api_call = json!({"name": "get_weather", "type": "api_call", "description": "The weather in a city",
                          "api_call": {"method": "GET", "url": weather}});
    let api_chat = session_with("Ada", api_call).await;
    let mcp_tool =
        json!({"name": "fake", "type": "mcp", "mcp": {"server_url": mcp_url, "allowed_tools": ["echo"]}});
    let mcp_chat = session_with("Max", mcp_tool).await;

    let outbound = Outbound::new(["127.0.0.1"]).unwrap();
    let loops = [
        Loop {
            label: "api_call",
            chat_url: api_chat,
            call: Behaviour::ToolCall {
                name: "get_weather".into(),
                arguments: r#"{"city": "Paris"}"#.into(),
            },
            direct: Direct::Http { client: outbound.client(), url: format!("{weather}?city=Paris") },
        },
        Loop {
            label: "mcp",
            chat_url: mcp_chat,
            call: Behaviour::ToolCall { name: "echo".into(), arguments: r#"{"text": "Paris"}"#.into() },
            direct: Direct::Mcp {
                mcp: Box::new(Mcp::new(outbound.clone(), McpConfig::from_config(&ToolsConfig::default()))),
                server: McpServer { label: "fake".into(), url: mcp_url.clone(), headers: Default::default() },
                tool: "echo".into(),
                arguments: json!({"text": "Paris"}).as_object().unwrap().clone(),
            },
        },
    ];
    let bench = Bench { http, upstream_url: format!("{}/chat/completions", fake.base_url()), fake, auth };
    for l in &loops {
        let started = Instant::now();
        bench.measure(l).await;
        println!("{:<9} ({ROUNDS} rounds in {:.1} s)", l.label, started.elapsed().as_secs_f64());
    }
    println!(
        "(session chat, not streamed, save: false, an empty session; each turn followed by its direct twin: the \
         same provider requests and tool calls, one after another)"
    );
    running.shutdown().await.unwrap();
}

/// An MCP server with one tool, `echo {text}` (rmcp, Streamable HTTP, as
/// the tests' `fake-mcp` serves it), in this process; its endpoint.
async fn start_mcp() -> String {
    #[derive(Clone)]
    struct Echo;

    impl ServerHandler for Echo {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema =
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
            let schema: Arc<JsonObject> = Arc::new(schema.as_object().cloned().unwrap_or_default());
            Ok(ListToolsResult::with_all_items(vec![Tool::new("echo", "Answers its text", schema)]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let text = request
                .arguments
                .unwrap_or_default()
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
        }
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mcp: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Echo),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            // As servers in front of MCP servers do (uvicorn, nginx): each SSE
            // event leaves at once, not after the client's delayed ACK.
            let _ = stream.set_nodelay(true);
            let mcp = mcp.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let mcp = mcp.clone();
                    async move {
                        let response: hyper::Response<BoxBody<Bytes, Infallible>> = mcp.handle(request).await;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}
