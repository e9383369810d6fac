//! The MCP client of `mcp` tools: lists a server's tools and calls one, over
//! Streamable HTTP (rmcp), through the outbound policy's client
//! ([`super::outbound`]): the server's URL is checked first, and every address
//! connected to.
//!
//! - **One connection per list or call** (connect, initialize, ask, close):
//!   nothing is kept between calls but the tool lists.
//! - **Tool lists are cached** per server URL and headers (by a digest: header
//!   values may hold secrets) for `[tools] mcp_list_cache_ttl_s`, at most
//!   `mcp_list_cache_entries` lists (the oldest goes first).
//! - **Nothing hangs:** a list takes at most `mcp_timeout_s`, a call the
//!   timeout its caller gives, both counting connect and initialize.
//! - **Output:** the text of the content blocks, one per line; other blocks
//!   are described (`[image: image/png]`, `[resource file:///a (text/plain)]`
//!   and its text); no content but structured content: that JSON. Longer than
//!   `max_output_bytes`: an error saying so (as `api_call` drops an answer
//!   over its bound), not a truncated output. `isError: true`: an error
//!   carrying the tool's text.
//! - **Errors** are messages for the model, naming the server's label and URL.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, PaginatedRequestParams};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::NeverRetry;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::worker::WorkerQuitReason;
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::outbound::Outbound;
use crate::config::ToolsConfig;

/// Pages of `tools/list` read at most (a server could page forever).
const MAX_LIST_PAGES: usize = 100;

/// Headers the transport sets itself; a tool's headers may not.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "connection",
    "transfer-encoding",
    "content-length",
    "content-type",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// An MCP server as a tool names it.
#[derive(Clone, Debug)]
pub struct McpServer {
    /// How messages name it (the tool's name).
    pub label: String,
    /// Its Streamable HTTP endpoint.
    pub url: String,
    /// Sent with every request, as they are (secrets already put in).
    pub headers: BTreeMap<String, String>,
}

/// One tool a server offers.
#[derive(Clone, Debug, PartialEq)]
pub struct McpTool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema object.
    pub input_schema: Map<String, Value>,
    /// As the server sent them (`readOnlyHint`, `idempotentHint`, ...): hints, not promises.
    pub annotations: Option<Value>,
}

/// The client's bounds (`[tools]`).
#[derive(Clone, Debug)]
pub struct McpConfig {
    /// Longest list of a server's tools.
    pub list_timeout: Duration,
    /// How long a list is kept (zero: not kept).
    pub list_cache_ttl: Duration,
    /// Lists kept at most (zero: none).
    pub list_cache_entries: usize,
    /// Longest output of a call, in bytes.
    pub max_output_bytes: usize,
}

impl McpConfig {
    pub fn from_config(tools: &ToolsConfig) -> McpConfig {
        McpConfig {
            list_timeout: Duration::from_secs(tools.mcp_timeout_s),
            list_cache_ttl: Duration::from_secs(tools.mcp_list_cache_ttl_s),
            list_cache_entries: tools.mcp_list_cache_entries,
            max_output_bytes: tools.max_output_bytes,
        }
    }
}

/// The MCP client: the policy's HTTP client and the cache of tool lists.
pub struct Mcp {
    outbound: Outbound,
    config: McpConfig,
    lists: parking_lot::Mutex<HashMap<[u8; 32], Listed>>,
}

/// A tool list and when it was read.
type Listed = (Instant, Arc<Vec<McpTool>>);

type Session = RunningService<RoleClient, ClientConfig>;

impl Mcp {
    pub fn new(outbound: Outbound, config: McpConfig) -> Mcp {
        Mcp { outbound, config, lists: Default::default() }
    }

    /// The server's tools, from the cache while fresh.
    pub async fn list_tools(&self, server: &McpServer) -> Result<Arc<Vec<McpTool>>, String> {
        let key = cache_key(server);
        if let Some((at, tools)) = self.lists.lock().get(&key)
            && at.elapsed() < self.config.list_cache_ttl
        {
            return Ok(tools.clone());
        }
        let timeout = self.config.list_timeout;
        let tools = bounded(server, timeout, "tools/list", async {
            let session = self.connect(server).await?;
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_LIST_PAGES {
                let page = session
                    .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                    .await
                    .map_err(|e| failed(server, "tools/list", &e))?;
                tools.extend(page.tools.into_iter().map(|tool| McpTool {
                    name: tool.name.into_owned(),
                    description: tool.description.map(|d| d.into_owned()),
                    input_schema: Arc::unwrap_or_clone(tool.input_schema),
                    annotations: tool.annotations.and_then(|a| serde_json::to_value(a).ok()),
                }));
                cursor = page.next_cursor;
                if cursor.is_none() {
                    close(session);
                    return Ok(Arc::new(tools));
                }
            }
            Err(format!("{}: tools/list had more than {MAX_LIST_PAGES} pages", name(server)))
        })
        .await?;
        self.remember(key, tools.clone());
        Ok(tools)
    }

    /// Calls one tool: its output, or why there is none (for the model).
    /// `timeout` bounds connect, initialize and the call.
    pub async fn call_tool(
        &self,
        server: &McpServer,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<String, String> {
        let what = format!("tools/call {tool}");
        let result = bounded(server, timeout, &what, async {
            let session = self.connect(server).await?;
            let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
            let result = session.call_tool(params).await.map_err(|e| failed(server, &what, &e))?;
            close(session);
            Ok(result)
        })
        .await?;
        let is_error = result.is_error == Some(true);
        let text = output_text(result);
        if text.len() > self.config.max_output_bytes {
            return Err(format!(
                "{}: the output of {tool} is {} bytes, more than tools.max_output_bytes ({}); it was dropped. \
                 Ask the tool for less",
                name(server),
                text.len(),
                self.config.max_output_bytes
            ));
        }
        match is_error {
            false => Ok(text),
            true if text.is_empty() => Err(format!("{}: {tool} failed and said nothing", name(server))),
            true => Err(text),
        }
    }

    /// A session with the server: policy checked, initialized.
    async fn connect(&self, server: &McpServer) -> Result<Session, String> {
        let url = Url::parse(&server.url).map_err(|e| format!("{}: not a valid URL: {e}", name(server)))?;
        self.outbound.check_url(&url).map_err(|why| format!("{}: {why}", name(server)))?;
        let mut headers = HashMap::new();
        for (key, value) in &server.headers {
            if RESERVED_HEADERS.iter().any(|r| r.eq_ignore_ascii_case(key)) {
                return Err(format!("{}: the header {key:?} is set by the client itself", name(server)));
            }
            let key_ = HeaderName::from_bytes(key.as_bytes())
                .map_err(|_| format!("{}: {key:?} is not a valid HTTP header name", name(server)))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("{}: the header {key:?} has a value not valid in HTTP", name(server)))?;
            headers.insert(key_, value);
        }
        // JSON escapes can make a text several times longer on the wire.
        let wire_limit = self.config.max_output_bytes.saturating_mul(6).saturating_add(64 << 10);
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
            .custom_headers(headers)
            .max_json_response_size(wire_limit)
            .max_sse_event_size(wire_limit)
            .reinit_on_expired_session(false);
        // A stream that breaks is an error, not a reconnection (the call is bounded anyway).
        config.retry_config = Arc::new(NeverRetry::default());
        let transport = StreamableHttpClientTransport::with_client(self.outbound.client(), config);
        ClientConfig::default()
            .serve(transport)
            .await
            .map_err(|e| format!("{}: could not connect and initialize: {}", name(server), causes(&e)))
    }

    fn remember(&self, key: [u8; 32], tools: Arc<Vec<McpTool>>) {
        if self.config.list_cache_entries == 0 || self.config.list_cache_ttl.is_zero() {
            return;
        }
        let mut lists = self.lists.lock();
        let ttl = self.config.list_cache_ttl;
        lists.retain(|_, (at, _)| at.elapsed() < ttl);
        while lists.len() >= self.config.list_cache_entries && !lists.contains_key(&key) {
            let Some(oldest) = lists.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k) else { break };
            lists.remove(&oldest);
        }
        lists.insert(key, (Instant::now(), tools));
    }
}

/// How messages name a server: its label and URL.
fn name(server: &McpServer) -> String {
    format!("MCP server {} ({})", server.label, server.url)
}

/// Runs `work` for at most `timeout`.
async fn bounded<T>(
    server: &McpServer,
    timeout: Duration,
    what: &str,
    work: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
        Err(format!("{}: no answer to {what} within {} s", name(server), timeout.as_secs_f64()))
    })
}

/// Ends the session without waiting on the server (it is told, in the background).
fn close(session: Session) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), session.cancel()).await;
    });
}

fn failed(server: &McpServer, what: &str, e: &ServiceError) -> String {
    match e {
        // The server's own error (an unknown tool, bad arguments): its words.
        ServiceError::McpError(data) => format!("{}: {what} failed: {}", name(server), data.message),
        // rmcp keeps the reason to itself (it logs it).
        ServiceError::TransportClosed => format!(
            "{}: {what} failed: the connection ended before the answer came (the server stopped or \
             dropped it, or sent more than the client reads for tools.max_output_bytes)",
            name(server)
        ),
        other => format!("{}: {what} failed: {}", name(server), causes(other)),
    }
}

/// An error of rmcp as a message: from the HTTP client's error down when there
/// is one (rmcp's wrappers around it name Rust types, and some do not give it
/// as their source, so the walk steps through them itself).
fn causes(top: &(dyn std::error::Error + 'static)) -> String {
    type HttpError = StreamableHttpError<reqwest::Error>;
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next = Some(top);
    while let Some(e) = next {
        chain.push(e);
        next = if let Some(ClientInitializeError::TransportError { error, .. }) = e.downcast_ref() {
            Some(error)
        } else if let Some(StreamableHttpError::Client(inner)) = e.downcast_ref::<HttpError>() {
            Some(inner)
        } else if let Some(WorkerQuitReason::Fatal { error, .. }) =
            e.downcast_ref::<WorkerQuitReason<HttpError>>()
        {
            Some(error)
        } else {
            e.source()
        };
    }
    let start = chain.iter().position(|e| e.is::<reqwest::Error>()).unwrap_or(0);
    let mut text = String::new();
    for e in &chain[start..] {
        let said = e.to_string();
        if !text.contains(&said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&said);
        }
    }
    text
}

fn cache_key(server: &McpServer) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(server.url.as_bytes());
    for (key, value) in &server.headers {
        // Lengths first, so that no two header sets hash alike by their joins.
        digest.update((key.len() as u64).to_le_bytes());
        digest.update(key.to_ascii_lowercase().as_bytes());
        digest.update((value.len() as u64).to_le_bytes());
        digest.update(value.as_bytes());
    }
    digest.finalize().into()
}

/// A call's result as text (see the module's docs).
fn output_text(result: CallToolResult) -> String {
    let mut parts = Vec::with_capacity(result.content.len());
    for block in &result.content {
        // Through JSON: the content types are many and grow with the protocol.
        let block = serde_json::to_value(block).unwrap_or(Value::Null);
        let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        parts.push(match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => field(&block, "text"),
            kind @ ("image" | "audio") => format!("[{kind}: {}]", field(&block, "mimeType")),
            "resource" => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                let (uri, mime) = (field(&resource, "uri"), field(&resource, "mimeType"));
                let head = match mime.as_str() {
                    "" => format!("[resource {uri}]"),
                    mime => format!("[resource {uri} ({mime})]"),
                };
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => format!("{head}\n{text}"),
                    None => format!("{head} (binary, not shown)"),
                }
            }
            "resource_link" => format!("[resource link: {}]", field(&block, "uri")),
            other => format!("[{other} content]"),
        });
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        return structured.to_string();
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests;
