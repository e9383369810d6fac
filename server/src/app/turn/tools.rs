//! The tools a turn's server runs: which are on offer ([`Toolbox`]), and
//! running a round of their calls ([`App::run_tools`]).
//!
//! A turn offers the model its client's `function` tools and the server's
//! own: an agent's `api_call` tools (one HTTP request each, under the
//! outbound policy of [`crate::tools::outbound`]), the tools of MCP servers
//! (an agent's `mcp` tools, a response's `mcp` tools: listed through the
//! cache of [`crate::tools::mcp`], each offered under its own name; a
//! server that cannot be listed offers none, and the model is told why in a
//! system message), and `file_search` over documents where the route offers
//! it. The model's calls of the server's tools run here, all the calls of one
//! round at once, each within the runner's time limit; every call ends as a
//! [`ToolRun`]: its output, or why there is none (a refused host, a failed
//! request, a timeout, arguments that are not JSON), which the model reads
//! as `error: …` and may work around.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Map, Value, json};

use super::super::memory_tools::{MemoryEdit, MemoryScope};
use super::super::{App, Tenant};
use crate::api::types::{
    ApiCallDef, DocOwner, HttpMethod, McpDef, OwnerRole, RequireApproval, SearchMode, SearchRequest, Session,
    Tool,
};
use crate::api::types::{ConversationItem, McpListedTool, ToolRun, ToolRunType, ToolType};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::models::wire;
use crate::tools::api_call::{ApiCallPolicy, run_api_call};
use crate::tools::mcp::{Mcp, McpConfig, McpServer};

/// Defaults of [`ToolRunner`]'s limits (`[tools]` in the config).
pub const DEFAULT_MAX_ROUNDS: u32 = 10;
pub const DEFAULT_MAX_CALLS: usize = 64;
/// The most snippets one `file_search` call gives the model.
pub const FILE_SEARCH_RESULTS: usize = 5;
/// The most bytes of a tool's output the model is given (and a [`ToolRun`] keeps).
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// What runs server-side tools, and its limits.
#[derive(Clone)]
pub struct ToolRunner {
    /// Where `api_call` tools may go, and for how long.
    pub policy: ApiCallPolicy,
    /// The MCP client (its tool lists cached), on the same outbound policy.
    pub mcp: Arc<Mcp>,
    /// The longest MCP call (`tools.mcp_timeout_s`).
    pub mcp_timeout: Duration,
    /// Rounds of server-run tool calls one turn may make (`tools.max_rounds`).
    pub max_rounds: u32,
    /// Server-run tool calls one turn may make in all (`tools.max_calls_per_turn`).
    pub max_calls: usize,
}

impl ToolRunner {
    /// From the config; an entry of `tools.allowed_hosts` that is no host is an error.
    pub fn from_config(tools: &ToolsConfig, executions: &ExecutionsConfig) -> Result<Self, String> {
        let policy = ApiCallPolicy::from_config(tools, executions)?;
        Ok(ToolRunner {
            mcp: Arc::new(Mcp::new(policy.outbound.clone(), McpConfig::from_config(tools))),
            policy,
            mcp_timeout: Duration::from_secs(tools.mcp_timeout_s.max(1)),
            max_rounds: tools.max_rounds,
            max_calls: tools.max_calls_per_turn,
        })
    }
}

impl Default for ToolRunner {
    /// No local host allowed, the default limits.
    fn default() -> Self {
        ToolRunner::from_config(&ToolsConfig::default(), &ExecutionsConfig::default())
            .expect("the default config has no hosts to parse")
    }
}

/// What a server-run tool does when called.
#[derive(Clone, Debug)]
pub enum Runs {
    ApiCall(ApiCallDef),
    /// A tool of an MCP server (its headers' secrets put in).
    Mcp {
        server: McpServer,
        tool: String,
    },
    /// Searches these owners' documents.
    FileSearch(Vec<DocOwner>),
    /// Edits a memory block of the scope's owners.
    Memory(MemoryEdit, Arc<MemoryScope>),
    /// Searches the past messages of the scope's session and users.
    ConversationSearch(Arc<MemoryScope>),
}

/// A tool the server runs, as offered to the model.
#[derive(Clone, Debug)]
pub struct ServerTool {
    pub runs: Runs,
    pub spec: wire::ToolSpec,
    /// Its calls wait for a person's approval (see [`super::rounds`]).
    pub approval: bool,
    /// The MCP server's label, for an MCP server's tool.
    pub server: Option<String>,
    /// Running a call twice does what running it once does: a background
    /// turn that a stopped server left in flight runs it again (else it is
    /// answered as interrupted). An MCP tool annotated `idempotentHint`, an
    /// `api_call` by GET, HEAD, PUT or DELETE, `file_search`.
    pub idempotent: bool,
}

/// The server-run tools a turn offers, by name.
#[derive(Clone, Debug, Default)]
pub struct Toolbox {
    tools: BTreeMap<String, ServerTool>,
    /// The assistant message whose calls run now, when its id is known: what
    /// a memory edit names as its provenance.
    pub calling: Option<uuid::Uuid>,
}

impl Toolbox {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tool the model calls by this name, if the server runs it.
    pub fn get(&self, name: &str) -> Option<&ServerTool> {
        self.tools.get(name)
    }

    /// What kind of tool the model calls by this name (an unknown name: `api_call`).
    pub fn kind_of(&self, name: &str) -> ToolRunType {
        match self.get(name).map(|t| &t.runs) {
            Some(Runs::FileSearch(_)) => ToolRunType::FileSearch,
            Some(Runs::Memory(..)) => ToolRunType::Memory,
            Some(Runs::ConversationSearch(_)) => ToolRunType::ConversationSearch,
            Some(Runs::Mcp { .. }) => ToolRunType::Mcp,
            Some(Runs::ApiCall(_)) | None => ToolRunType::ApiCall,
        }
    }

    /// Whether a call of this tool may run twice (see [`ServerTool::idempotent`]).
    pub fn idempotent(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.idempotent)
    }

    /// Whether calls of this tool wait for a person's approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.get(name).is_some_and(|t| t.approval)
    }

    /// The MCP server's label of the tool the model calls by this name, if any.
    pub fn server_of(&self, name: &str) -> Option<String> {
        self.get(name).and_then(|t| t.server.clone())
    }

    /// The specs to offer, in name order.
    pub fn specs(&self) -> impl Iterator<Item = &wire::ToolSpec> {
        self.tools.values().map(|t| &t.spec)
    }

    /// Adds a tool, unless one of that name is on offer (the first stays).
    pub fn add(&mut self, tool: ServerTool) {
        self.tools.entry(tool.spec.function.name.clone()).or_insert(tool);
    }

    /// The server-run tools among an agent's (or a session's agents') stored
    /// tools: `api_call` tools (any object as arguments).
    pub fn of_stored(stored: &[Tool]) -> Toolbox {
        let mut toolbox = Toolbox::default();
        for tool in stored {
            if let (ToolType::ApiCall, Some(def)) = (tool.kind, &tool.api_call) {
                let description = (!tool.description.is_empty()).then(|| tool.description.clone());
                toolbox.add(ServerTool {
                    runs: Runs::ApiCall(def.clone()),
                    spec: wire::ToolSpec::function(&tool.name, description, json!({"type": "object"})),
                    approval: false,
                    server: None,
                    idempotent: matches!(
                        def.method,
                        HttpMethod::Get | HttpMethod::Head | HttpMethod::Put | HttpMethod::Delete
                    ),
                });
            }
        }
        toolbox
    }

    /// Offers `file_search` over `owners`' documents.
    pub fn with_file_search(self, owners: Vec<DocOwner>) -> Toolbox {
        self.with_file_search_as("file_search", None, owners)
    }

    /// The `file_search` tools among stored tools (an agent's, or a session's
    /// agents'), each over its agent's documents and `users`'.
    pub fn with_stored_file_search(mut self, stored: &[Tool], users: &[uuid::Uuid]) -> Toolbox {
        for tool in stored.iter().filter(|t| t.kind == ToolType::FileSearch) {
            let mut owners = vec![DocOwner { id: tool.agent_id, role: OwnerRole::Agent }];
            owners.extend(users.iter().map(|u| DocOwner { id: *u, role: OwnerRole::User }));
            let description = (!tool.description.is_empty()).then(|| tool.description.clone());
            self = self.with_file_search_as(&tool.name, description, owners);
        }
        self
    }

    /// The memory tools among stored tools (an agent's, or a session's
    /// agents'): a `memory` tool offers `memory_insert`, `memory_replace` and
    /// `memory_rethink` over its agent's blocks and `users`'; a
    /// `conversation_search` tool, under its name, searches `session`'s
    /// messages and those of `users`' other sessions.
    pub fn with_stored_memory(
        mut self,
        stored: &[Tool],
        users: &[uuid::Uuid],
        session: Option<uuid::Uuid>,
    ) -> Toolbox {
        for tool in stored {
            let scope =
                MemoryScope { agent: Some(tool.agent_id), users: users.to_vec(), session, execution: None };
            self = self.with_memory_tool(tool.kind, &tool.name, &tool.description, scope);
        }
        self
    }

    /// Offers what a tool of `kind` named `name` offers, if it is a memory
    /// tool (`memory`, `conversation_search`), over `scope`.
    pub fn with_memory_tool(
        mut self,
        kind: ToolType,
        name: &str,
        description: &str,
        scope: MemoryScope,
    ) -> Toolbox {
        let scope = Arc::new(scope);
        match kind {
            ToolType::Memory => {
                for edit in MemoryEdit::ALL {
                    self.add(ServerTool {
                        runs: Runs::Memory(edit, scope.clone()),
                        spec: wire::ToolSpec::function(
                            edit.name(),
                            Some(edit.description().to_owned()),
                            edit.parameters(),
                        ),
                        approval: false,
                        server: None,
                        // A rewrite twice is the rewrite once; an insert or a replace is not.
                        idempotent: edit == MemoryEdit::Rethink,
                    });
                }
            }
            ToolType::ConversationSearch => {
                let description = if description.is_empty() {
                    "Searches the past messages of this conversation and of the user's other conversations \
                     (best matches first)."
                } else {
                    description
                };
                self.add(ServerTool {
                    runs: Runs::ConversationSearch(scope),
                    spec: wire::ToolSpec::function(
                        name,
                        Some(description.to_owned()),
                        json!({
                            "type": "object",
                            "properties": {
                                "query": {"type": "string", "description": "The words to look for."},
                                "roles": {"type": "array", "items": {"type": "string", "enum": ["user", "assistant", "system", "tool"]}, "description": "Only messages of these roles."},
                                "start_date": {"type": "string", "description": "Only messages from this date (YYYY-MM-DD) or time (RFC 3339) on."},
                                "end_date": {"type": "string", "description": "Only messages up to this date (inclusive) or before this time."},
                                "limit": {"type": "integer", "description": "At most this many results (1 to 20; default 5)."},
                            },
                            "required": ["query"],
                        }),
                    ),
                    approval: false,
                    server: None,
                    idempotent: true,
                });
            }
            _ => {}
        }
        self
    }

    /// Offers a search over `owners`' documents under `name`.
    pub fn with_file_search_as(
        mut self,
        name: &str,
        description: Option<String>,
        owners: Vec<DocOwner>,
    ) -> Toolbox {
        let description = description
            .unwrap_or_else(|| "Searches the documents for the passages that best match a query.".into());
        let spec = wire::ToolSpec::function(
            name,
            Some(description),
            json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look for."}},
                "required": ["query"],
            }),
        );
        self.add(ServerTool {
            runs: Runs::FileSearch(owners),
            spec,
            approval: false,
            server: None,
            idempotent: true,
        });
        self
    }
}

impl App {
    /// Runs a round of calls of server-run tools at once; each ends as a
    /// [`ToolRun`], in the order of `calls`.
    pub async fn run_tools(&self, t: Tenant, toolbox: &Toolbox, calls: &[wire::ToolCall]) -> Vec<ToolRun> {
        let runs = calls.iter().map(|call| self.run_tool(t, toolbox, call));
        futures::future::join_all(runs).await
    }

    async fn run_tool(&self, t: Tenant, toolbox: &Toolbox, call: &wire::ToolCall) -> ToolRun {
        let started_at = Utc::now();
        let clock = Instant::now();
        let name = &call.function.name;
        let (kind, outcome) = match toolbox.get(name) {
            None => (ToolRunType::ApiCall, Err(format!("there is no tool named {name:?}"))),
            Some(tool) => {
                let kind = toolbox.kind_of(name);
                let outcome = match arguments(&call.function.arguments) {
                    Err(e) => Err(e),
                    Ok(arguments) => match &tool.runs {
                        Runs::Memory(edit, scope) => {
                            self.memory_tool(t, scope, *edit, &arguments, &call.id, toolbox.calling).await
                        }
                        runs => self.run_one(t, runs, arguments).await,
                    },
                };
                (kind, outcome)
            }
        };
        let (output, error) = match outcome {
            Ok(output) => (Some(capped(output)), None),
            Err(error) => (None, Some(error)),
        };
        ToolRun {
            id: call.id.clone(),
            kind,
            name: name.clone(),
            server: toolbox.server_of(name),
            arguments: call.function.arguments.clone(),
            output,
            error,
            started_at,
            ms: clock.elapsed().as_millis() as i64,
        }
    }

    async fn run_one(&self, t: Tenant, runs: &Runs, arguments: Map<String, Value>) -> Result<String, String> {
        match runs {
            // api_call bounds its own time (the tool's timeout_s, at most executions.api_call_timeout_s).
            Runs::ApiCall(def) => {
                let runner = &self.tool_runner;
                let def = self.api_call_with_secrets(t, def).await?;
                Box::pin(run_api_call(&def, &Value::Object(arguments), &runner.policy))
                    .await
                    .map(|answer| answer.to_string())
            }
            Runs::Mcp { server, tool } => {
                // Boxed, as the other tools' futures: they are large, and a
                // turn runs inside deep futures (a task's nested steps).
                Box::pin(self.tool_runner.mcp.call_tool(
                    server,
                    tool,
                    arguments,
                    self.tool_runner.mcp_timeout,
                ))
                .await
            }
            Runs::FileSearch(owners) => {
                let Some(query) =
                    arguments.get("query").and_then(Value::as_str).filter(|q| !q.trim().is_empty())
                else {
                    return Err("file_search needs a `query`: the text to look for".into());
                };
                let search = self.file_search(t, owners, query);
                match tokio::time::timeout(Duration::from_secs(30), search).await {
                    Ok(found) => found,
                    Err(_) => Err("file_search took longer than 30 s".into()),
                }
            }
            Runs::Memory(..) => Err("a memory edit runs with its call (see run_tool)".into()),
            Runs::ConversationSearch(scope) => {
                let search = self.conversation_search(t, scope, &arguments);
                match tokio::time::timeout(Duration::from_secs(30), search).await {
                    Ok(found) => found,
                    Err(_) => Err("conversation_search took longer than 30 s".into()),
                }
            }
        }
    }

    /// The best snippets of `owners`' documents for `query`, as JSON text.
    async fn file_search(&self, t: Tenant, owners: &[DocOwner], query: &str) -> Result<String, String> {
        let query: String = query.chars().take(10_000).collect();
        let mut docs = Vec::new();
        for owner in owners {
            let req = SearchRequest {
                text: Some(query.clone()),
                vector: None,
                mode: Some(if self.embedder.is_some() { SearchMode::Hybrid } else { SearchMode::Text }),
                limit: FILE_SEARCH_RESULTS as i64,
                alpha: 0.5,
                metadata_filter: None,
            };
            let found =
                self.doc_search(t, *owner, req).await.map_err(|e| format!("file_search failed: {e}"))?;
            docs.extend(found.docs);
        }
        docs.sort_by(|a, b| b.score.total_cmp(&a.score));
        docs.truncate(FILE_SEARCH_RESULTS);
        let results: Vec<Value> = docs
            .iter()
            .map(|d| {
                json!({
                    "doc_id": d.id, "title": d.title, "owner": d.owner,
                    "text": d.snippet.content, "score": d.score,
                })
            })
            .collect();
        Ok(Value::Array(results).to_string())
    }
}

/// An MCP server a turn offers the tools of.
pub struct McpSource<'a> {
    /// Its label: the agent tool's name, or a response's `server_label`.
    pub label: &'a str,
    pub def: &'a McpDef,
    /// Whether a call needs approval when `require_approval` is not given
    /// (an agent's tool: no; a response's: yes, as OpenAI's).
    pub approval_by_default: bool,
}

/// What listing a turn's MCP servers gave: an `mcp_list_tools` item per
/// server (its tools, or why it has none), and for the model a note of the
/// servers that could not be listed.
#[derive(Default)]
pub struct Listed {
    pub items: Vec<ConversationItem>,
    pub unavailable: Vec<String>,
}

impl Listed {
    /// What the model is told of the servers whose tools it does not have.
    pub fn note(&self) -> Option<String> {
        (!self.unavailable.is_empty())
            .then(|| format!("Some tools are unavailable in this turn: {}", self.unavailable.join("; ")))
    }
}

impl App {
    /// Adds the tools of these MCP servers to `toolbox`: each server
    /// listed (through the cache), its `allowed_tools` kept. The headers'
    /// `{{ secrets.NAME }}` are the tenant's secrets.
    pub async fn add_mcp_tools(&self, t: Tenant, toolbox: &mut Toolbox, sources: &[McpSource<'_>]) -> Listed {
        let mut listed = Listed::default();
        for source in sources {
            let McpSource { label, def, approval_by_default } = source;
            let item_id = format!("mcpl_{}", uuid::Uuid::now_v7().simple());
            let tools = match self.mcp_server(t, label, def).await {
                Ok(server) => {
                    Box::pin(self.tool_runner.mcp.list_tools(&server)).await.map(|tools| (server, tools))
                }
                Err(e) => Err(e),
            };
            let (server, tools) = match tools {
                Ok(found) => found,
                Err(error) => {
                    listed.unavailable.push(format!("MCP server {label}: {error}"));
                    listed.items.push(ConversationItem::McpListTools {
                        id: item_id,
                        server_label: label.to_string(),
                        tools: Vec::new(),
                        error: Some(error),
                    });
                    continue;
                }
            };
            let allowed = |name: &str| def.allowed_tools.as_ref().is_none_or(|a| a.iter().any(|n| n == name));
            let mut shown = Vec::new();
            for tool in tools.iter().filter(|tool| allowed(&tool.name)) {
                let approval = match &def.require_approval {
                    None => *approval_by_default,
                    given => RequireApproval::needs(given.as_ref(), &tool.name),
                };
                let parameters = Value::Object(tool.input_schema.clone());
                toolbox.add(ServerTool {
                    runs: Runs::Mcp { server: server.clone(), tool: tool.name.clone() },
                    spec: wire::ToolSpec::function(&tool.name, tool.description.clone(), parameters),
                    approval,
                    server: Some(label.to_string()),
                    idempotent: tool
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("idempotentHint"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                });
                shown.push(McpListedTool {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    input_schema: Value::Object(tool.input_schema.clone()),
                    annotations: tool.annotations.clone(),
                });
            }
            listed.items.push(ConversationItem::McpListTools {
                id: item_id,
                server_label: label.to_string(),
                tools: shown,
                error: None,
            });
        }
        listed
    }

    /// An `api_call` tool's request with its headers' `{{ secrets.NAME }}`
    /// put in (the tenant's secrets).
    pub async fn api_call_with_secrets(&self, t: Tenant, def: &ApiCallDef) -> Result<ApiCallDef, String> {
        let mut def = def.clone();
        for (name, value) in def.headers.iter_mut().flatten() {
            if value.contains("secrets.") {
                *value = self
                    .resolve_secrets(t, value)
                    .await
                    .map_err(|e| format!("the header {name:?} names a secret that cannot be read: {e}"))?;
            }
        }
        Ok(def)
    }

    /// The server of an `mcp` tool, its headers' secrets put in.
    async fn mcp_server(&self, t: Tenant, label: &str, def: &McpDef) -> Result<McpServer, String> {
        let mut headers = BTreeMap::new();
        for (name, value) in def.headers.iter().flatten() {
            let value = self
                .resolve_secrets(t, value)
                .await
                .map_err(|e| format!("the header {name:?} names a secret that cannot be read: {e}"))?;
            headers.insert(name.clone(), value);
        }
        Ok(McpServer { label: label.to_string(), url: def.server_url.clone(), headers })
    }

    /// The server-run tools of a session's turn: those of `stored` (its
    /// agents' tools: `api_call`, `mcp` and `file_search` tools, the last over
    /// the agent's documents and the session's users'), then the tools of the
    /// session's own MCP servers.
    pub async fn session_toolbox(&self, t: Tenant, stored: &[Tool], session: &Session) -> (Toolbox, Listed) {
        let (toolbox, mut listed) = self.stored_toolbox(t, stored).await;
        let mut toolbox = toolbox.with_stored_file_search(stored, &session.users).with_stored_memory(
            stored,
            &session.users,
            Some(session.id),
        );
        let sources: Vec<McpSource<'_>> = session
            .mcp_servers
            .iter()
            .map(|s| McpSource { label: &s.name, def: &s.mcp, approval_by_default: false })
            .collect();
        let more = self.add_mcp_tools(t, &mut toolbox, &sources).await;
        listed.items.extend(more.items);
        listed.unavailable.extend(more.unavailable);
        (toolbox, listed)
    }

    /// The server-run tools of stored tools (an agent's, or a session's
    /// agents'): their `api_call` tools and their MCP servers' tools.
    pub async fn stored_toolbox(&self, t: Tenant, stored: &[Tool]) -> (Toolbox, Listed) {
        let mut toolbox = Toolbox::of_stored(stored);
        let sources: Vec<McpSource<'_>> = stored
            .iter()
            .filter_map(|tool| match (tool.kind, &tool.mcp) {
                (ToolType::Mcp, Some(def)) => {
                    Some(McpSource { label: &tool.name, def, approval_by_default: false })
                }
                _ => None,
            })
            .collect();
        let listed = self.add_mcp_tools(t, &mut toolbox, &sources).await;
        (toolbox, listed)
    }
}

/// A call's arguments: a JSON object (empty text: none).
fn arguments(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("the arguments must be a JSON object, not {other}")),
        Err(e) => Err(format!("the arguments are not valid JSON: {e}")),
    }
}

/// `output`, cut to [`MAX_OUTPUT_BYTES`] (at a character boundary) with a note.
fn capped(mut output: String) -> String {
    if output.len() > MAX_OUTPUT_BYTES {
        let mut end = MAX_OUTPUT_BYTES;
        while !output.is_char_boundary(end) {
            end -= 1;
        }
        output.truncate(end);
        output.push_str("\n[the output was cut at 1 MiB]");
    }
    output
}

/// A call a person decided on: approved, it runs; denied, it ends as a run
/// whose error says so (with the reason given).
impl App {
    pub async fn run_decided(
        &self,
        t: Tenant,
        toolbox: &Toolbox,
        decided: &[(wire::ToolCall, bool, Option<String>)],
    ) -> Vec<ToolRun> {
        let calls: Vec<(&wire::ToolCall, Option<String>)> = decided
            .iter()
            .map(|(call, approve, reason)| {
                let denied = match reason.as_deref().filter(|r| !r.trim().is_empty()) {
                    Some(reason) => format!("the call was denied by a person: {reason}"),
                    None => "the call was denied by a person".to_owned(),
                };
                (call, (!approve).then_some(denied))
            })
            .collect();
        self.run_unless(t, toolbox, &calls).await
    }

    /// Runs at once the calls with no reason not to, and answers each of the
    /// others "not run" with its reason: a run per call, in their order.
    pub async fn run_unless(
        &self,
        t: Tenant,
        toolbox: &Toolbox,
        calls: &[(&wire::ToolCall, Option<String>)],
    ) -> Vec<ToolRun> {
        let to_run: Vec<wire::ToolCall> =
            calls.iter().filter(|(_, why)| why.is_none()).map(|(c, _)| (*c).clone()).collect();
        let mut ran = self.run_tools(t, toolbox, &to_run).await.into_iter();
        calls
            .iter()
            .map(|(call, why)| match why {
                None => ran.next().expect("a run per call run"),
                Some(why) => not_run(toolbox, call, why.clone()),
            })
            .collect()
    }
}

/// A call that did not run, and why (`error`).
pub fn not_run(toolbox: &Toolbox, call: &wire::ToolCall, error: String) -> ToolRun {
    ToolRun {
        id: call.id.clone(),
        kind: toolbox.kind_of(&call.function.name),
        name: call.function.name.clone(),
        server: toolbox.server_of(&call.function.name),
        arguments: call.function.arguments.clone(),
        output: None,
        error: Some(error),
        started_at: chrono::Utc::now(),
        ms: 0,
    }
}

/// What the model is told of a run: its output, or `error: ` and why.
pub fn told(run: &ToolRun) -> String {
    match (&run.output, &run.error) {
        (_, Some(error)) => format!("error: {error}"),
        (Some(output), None) => output.clone(),
        (None, None) => String::new(),
    }
}

/// A run as recorded in its `tool` message's metadata: without its output
/// (the message's content), its error cut to 1,000 characters.
pub fn recorded(run: &ToolRun) -> Value {
    let mut run = run.clone();
    run.output = None;
    // An MCP call's error is the tool's own (its `isError` text), unless the
    // MCP client said it (its errors name the server first) or the call did
    // not run: `error_kind` `tool` then shows it as OpenAI's
    // `mcp_tool_execution_error` (see `conversations::server_run`).
    let tool_said = run.kind == ToolRunType::Mcp
        && run.error.as_deref().is_some_and(|e| {
            !["MCP server ", "not run", "interrupted:", "the call was denied"]
                .iter()
                .any(|p| e.starts_with(p))
        });
    if let Some(error) = &mut run.error
        && error.chars().count() > 1000
    {
        *error = error.chars().take(1000).collect::<String>() + "…";
    }
    let mut value = serde_json::to_value(run).unwrap_or(Value::Null);
    if let (true, Some(map)) = (tool_said, value.as_object_mut()) {
        map.insert("error_kind".into(), Value::String("tool".into()));
    }
    value
}
