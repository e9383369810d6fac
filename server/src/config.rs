//! Configuration: built-in defaults, then a TOML file, then environment
//! variables (`AGENT_PLATFORM_*`), then command-line flags — each overriding the last.
//!
//! ```toml
//! [server]
//! bind = "127.0.0.1:8080"
//! data_dir = "./data"
//! request_body_max_bytes = 2097152
//! request_body_timeout_s = 30 # a body not fully arrived by then answers 408
//! idle_timeout_s = 30         # a connection with no complete request head by then is closed
//! websocket_idle_timeout_s = 900  # a WebSocket of /v1/responses with no message by then is closed
//! durability = "fsync"        # or "flush"
//! store_timeout_s = 10        # a write waits at most this for the disk, then 503
//! store_min_free_mb = 16      # writes answer 507 while the disk has less free
//! store_cache_mb = 64          # memory for the embedded store's page cache
//! vector_graph_min = 20000    # an owner with this many vectors is searched through an
//!                             # approximate-nearest-neighbour graph on disk (fewer: exactly)
//! max_keys_per_tenant = 100   # API keys a tenant may hold (POST /api/keys beyond it: 409)
//! console = true              # the web console at /console (false: 404 there; AGENT_PLATFORM_CONSOLE)
//!
//! [store]
//! backend = "sled"            # or "postgres": many servers on one database
//! url = "postgres://ap@db1,db2/ap?target_session_attrs=read-write"  # postgres only; or
//!                             # AGENT_PLATFORM_DATABASE_URL, then DATABASE_URL
//! pool_size = 16              # connections each server keeps to the database
//! statement_timeout_s = 10    # a statement (or a wait for a connection) longer than this answers 503
//! connect_timeout_s = 5       # a connection attempt longer than this fails (503 while serving)
//!
//! [log]
//! level = "info"              # trace, debug, info, warn, error
//! format = "pretty"           # or "json" (bunyan, one object per line on stdout)
//!
//! [models]
//! default_model = "llama3.2"  # or AGENT_PLATFORM_DEFAULT_MODEL
//! request_timeout_s = 120     # 504 after this (stream_idle_timeout_s for streams)
//! max_answer_bytes = 8388608  # a longer model answer is a 502 (AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES)
//! max_input_part_bytes = 8388608  # a larger image or file part of a /v1 request is a 400
//!                             # (AGENT_PLATFORM_MODELS_MAX_INPUT_PART_BYTES)
//! list_cache_s = 300          # how long GET /v1/models keeps each provider's own list
//! list_timeout_s = 5          # the longest wait for a provider's list
//! [[models.providers]]
//! name = "local"
//! base_url = "http://127.0.0.1:11434/v1"
//! api_key_env = "LOCAL_API_KEY"   # the variable's name; the key never goes in the file
//! models = []                     # empty: serves every model
//!
//! [tools]
//! allowed_hosts = []              # loopback, link-local, private and unspecified hosts that
//!                                 # api_call and MCP tools may reach anyway: "mcp.internal",
//!                                 # "10.0.0.5" or "localhost:8081" (with a port: only that port);
//!                                 # public hosts need no entry (tools::outbound)
//! api_call_allowed_hosts = []     # the former name of allowed_hosts: read, and merged into it
//! mcp_timeout_s = 30              # longest MCP tools/list (connect, initialize, list)
//! mcp_list_cache_ttl_s = 300      # how long an MCP server's tool list is kept (0: not kept)
//! mcp_list_cache_entries = 256    # tool lists kept at most (server URL and headers each)
//! max_output_bytes = 1048576      # a longer MCP tool output is an error, not the output
//! max_rounds = 10                 # rounds of server-run tool calls one chat turn may make
//! max_calls_per_turn = 64         # server-run tool calls one chat turn may make in all
//! background_runs = 256           # background responses running at once (more wait, queued);
//!                                 # they resume after a restart, and on postgres another server
//!                                 # takes one over after executions.lease_s; one begun
//!                                 # executions.max_step_attempts times fails instead
//! background_max_per_tenant = 1000 # background responses a tenant may have under way; more: 429
//!
//! [secrets]
//! key_env = "AGENT_PLATFORM_SECRETS_KEY"  # the NAME of the environment variable holding
//!                                 # the key that encrypts tenants' secrets: 32 bytes as 64 hex
//!                                 # characters (`openssl rand -hex 32`) or as base64. Unset (the
//!                                 # default): creating a secret is a 409. Named but missing or
//!                                 # malformed: the server does not start.
//!
//! [executions]
//! max_steps = 10000               # transitions per execution
//! max_foreach_items = 1000        # items one foreach or map_reduce may run over
//! max_parallel_branches = 100     # branches of one parallel step
//! max_sleep_s = 2592000           # longest sleep step (30 days)
//! api_call_timeout_s = 30         # longest api_call (a tool's timeout_s may only shorten it)
//! expression_fuel = 100000        # instructions one expression or template may run
//! expression_max_bytes = 67108864 # bytes one expression or template may build in all
//! expression_timeout_ms = 2000    # longest one expression or template may run
//! max_depth = 32                  # steps nested in steps (yield, if, foreach, ...) on one path
//! workers = 64                    # executions advancing at once
//! lease_s = 15                    # (postgres) another server takes over an execution
//!                                 # whose server has not renewed its claim for this long
//! max_step_attempts = 3           # an execution whose step was under way through this many
//!                                 # server deaths (or lease takeovers) fails instead of running it again
//! max_active_per_tenant = 1000    # executions a tenant may have under way (not ended); more: 429
//! ```
//!
//! Every `[executions]` setting has an `AGENT_PLATFORM_EXECUTIONS_<NAME>`
//! variable (e.g. `AGENT_PLATFORM_EXECUTIONS_MAX_STEPS`), every `[tools]` one an
//! `AGENT_PLATFORM_TOOLS_<NAME>` variable (e.g. `AGENT_PLATFORM_TOOLS_MCP_TIMEOUT_S`;
//! the lists of hosts comma-separated: `AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS`, and the
//! former `AGENT_PLATFORM_TOOLS_API_CALL_ALLOWED_HOSTS`);
//! `secrets.key_env` from `AGENT_PLATFORM_SECRETS_KEY_ENV` (empty: none).
//!
//! With no `[[models.providers]]`, `OPENAI_BASE_URL` and `OPENAI_API_KEY` define
//! the one provider (see [`crate::models::Providers::from_config`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::models::ModelsConfig;
use crate::store::sled_store::Durability;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub log: LogConfig,
    pub models: ModelsConfig,
    pub tools: ToolsConfig,
    pub executions: ExecutionsConfig,
    pub secrets: SecretsConfig,
}

/// Where the key that encrypts tenants' secrets comes from (see [`crate::app::secrets`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// The name of the environment variable that holds the key (never the key
    /// itself: it does not belong in a file). `None`: no key, and secrets
    /// cannot be created.
    pub key_env: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Hosts tools may reach although they are loopback, link-local, private or
    /// unspecified addresses (or names resolving to one), by exact name or IP
    /// (`mcp.internal`, `10.0.0.5`: any port) or with a port (`127.0.0.1:8081`:
    /// that port only). Public hosts need no entry (see [`crate::tools::outbound`]).
    pub allowed_hosts: Vec<String>,
    /// The former name of [`ToolsConfig::allowed_hosts`], still read: both lists
    /// are one (see [`ToolsConfig::allowed_hosts`]).
    pub api_call_allowed_hosts: Vec<String>,
    /// Rounds of server-run tool calls (model, then its calls) one turn of
    /// session chat or `/v1/responses` may make; then the turn ends with
    /// `finish_reason` `max_tool_rounds` (status `incomplete`).
    pub max_rounds: u32,
    /// Server-run tool calls one turn may make in all; then it ends with
    /// `finish_reason` `max_tool_calls`.
    pub max_calls_per_turn: usize,
    /// Longest listing of an MCP server's tools (connect, initialize, list), in seconds.
    pub mcp_timeout_s: u64,
    /// Seconds an MCP server's tool list is kept before it is asked again (0: never kept).
    pub mcp_list_cache_ttl_s: u64,
    /// Tool lists kept at most, one per server URL and headers (0: none kept).
    pub mcp_list_cache_entries: usize,
    /// Longest output of an MCP tool call, in bytes; a longer one is an error
    /// told to the model, not a truncated output.
    pub max_output_bytes: usize,
    /// Background responses running at once on this server; more wait, `queued`.
    pub background_runs: usize,
    /// Background responses one tenant may have under way; more are a 429.
    pub background_max_per_tenant: usize,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            allowed_hosts: Vec::new(),
            api_call_allowed_hosts: Vec::new(),
            mcp_timeout_s: 30,
            mcp_list_cache_ttl_s: 300,
            mcp_list_cache_entries: 256,
            max_output_bytes: 1 << 20,
            max_rounds: crate::app::turn::tools::DEFAULT_MAX_ROUNDS,
            max_calls_per_turn: crate::app::turn::tools::DEFAULT_MAX_CALLS,
            background_runs: 256,
            background_max_per_tenant: 1000,
        }
    }
}

impl ToolsConfig {
    /// `allowed_hosts` and the former `api_call_allowed_hosts`, as one list.
    pub fn allowed_hosts(&self) -> impl Iterator<Item = &str> {
        self.allowed_hosts.iter().chain(&self.api_call_allowed_hosts).map(String::as_str)
    }

    /// Reads `AGENT_PLATFORM_TOOLS_*` and checks the bounds.
    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        let hosts =
            |v: String| v.split(',').map(str::trim).filter(|h| !h.is_empty()).map(String::from).collect();
        if let Some(v) = env("AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS") {
            self.allowed_hosts = hosts(v);
        }
        if let Some(v) = env("AGENT_PLATFORM_TOOLS_API_CALL_ALLOWED_HOSTS") {
            self.api_call_allowed_hosts = hosts(v);
        }
        set_from_env(env, "TOOLS", "mcp_timeout_s", &mut self.mcp_timeout_s)?;
        set_from_env(env, "TOOLS", "mcp_list_cache_ttl_s", &mut self.mcp_list_cache_ttl_s)?;
        set_from_env(env, "TOOLS", "mcp_list_cache_entries", &mut self.mcp_list_cache_entries)?;
        set_from_env(env, "TOOLS", "max_output_bytes", &mut self.max_output_bytes)?;
        set_from_env(env, "TOOLS", "max_rounds", &mut self.max_rounds)?;
        set_from_env(env, "TOOLS", "max_calls_per_turn", &mut self.max_calls_per_turn)?;
        set_from_env(env, "TOOLS", "background_runs", &mut self.background_runs)?;
        set_from_env(env, "TOOLS", "background_max_per_tenant", &mut self.background_max_per_tenant)?;
        for (setting, value) in [
            ("mcp_timeout_s", self.mcp_timeout_s),
            ("max_output_bytes", self.max_output_bytes as u64),
            ("background_runs", self.background_runs as u64),
            ("background_max_per_tenant", self.background_max_per_tenant as u64),
        ] {
            if value == 0 {
                anyhow::bail!("tools.{setting} = 0: expected at least 1");
            }
        }
        Ok(())
    }
}

/// Sets `field` from `AGENT_PLATFORM_<SECTION>_<SETTING>` when that variable is set.
fn set_from_env<T: std::str::FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    section: &str,
    setting: &str,
    field: &mut T,
) -> anyhow::Result<()>
where
    T::Err: std::fmt::Display,
{
    let name = format!("AGENT_PLATFORM_{section}_{}", setting.to_uppercase());
    if let Some(v) = env(&name) {
        *field = v.trim().parse().map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}"))?;
    }
    Ok(())
}

/// Limits of task executions. Over one, an execution fails with an error naming it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutionsConfig {
    /// Transitions one execution may commit.
    pub max_steps: u64,
    /// Items one `foreach` or `map_reduce` may run over.
    pub max_foreach_items: usize,
    /// Branches one `parallel` step may have (also the most `parallelism` of a `map_reduce`).
    pub max_parallel_branches: usize,
    /// Longest `sleep` step, in seconds.
    pub max_sleep_s: u64,
    /// Longest `api_call` tool request, in seconds; a tool's own `timeout_s` may only shorten it.
    pub api_call_timeout_s: u64,
    /// Instructions one expression or template may run before it is stopped.
    pub expression_fuel: u64,
    /// Bytes one expression or template may build in all (every string, list
    /// and text it makes, counted before it is allocated), so that no step can
    /// ask for more memory than this.
    pub expression_max_bytes: usize,
    /// Milliseconds one expression or template may run.
    pub expression_timeout_ms: u64,
    /// How deep steps may nest on one path of a run: a `yield` (a workflow
    /// calling a workflow, itself included), and each `if`, `switch`,
    /// `foreach`, `map_reduce` and `parallel`, is one level.
    pub max_depth: usize,
    /// Executions advancing at once (the rest wait their turn).
    pub workers: usize,
    /// Seconds a server's claim on an execution lasts without renewal: on a
    /// shared (PostgreSQL) store, another server takes over an execution whose
    /// server stopped renewing for this long.
    pub lease_s: u64,
    /// How many times the server may stop (die, or lose the execution's lease
    /// to a takeover) while a step of one execution is under way, with nothing
    /// committed since, before the execution fails instead of running it again.
    pub max_step_attempts: u32,
    /// Executions one tenant may have under way (queued, running, sleeping or
    /// awaiting input); starting one more answers 429.
    pub max_active_per_tenant: usize,
}

impl Default for ExecutionsConfig {
    fn default() -> Self {
        ExecutionsConfig {
            max_steps: 10_000,
            max_foreach_items: 1_000,
            max_parallel_branches: 100,
            max_sleep_s: 30 * 24 * 3600,
            api_call_timeout_s: 30,
            expression_fuel: 100_000,
            expression_max_bytes: 64 << 20,
            expression_timeout_ms: 2_000,
            max_depth: 32,
            workers: 64,
            lease_s: 15,
            max_step_attempts: 3,
            max_active_per_tenant: 1000,
        }
    }
}

impl ExecutionsConfig {
    /// What one expression or template of a step may use.
    pub fn expression_bounds(&self) -> crate::exec::expr::Bounds {
        crate::exec::expr::Bounds {
            fuel: self.expression_fuel,
            max_bytes: self.expression_max_bytes,
            timeout: std::time::Duration::from_millis(self.expression_timeout_ms),
        }
    }

    /// Reads `AGENT_PLATFORM_EXECUTIONS_*` and checks that every limit is at least 1.
    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        set_from_env(env, "EXECUTIONS", "max_steps", &mut self.max_steps)?;
        set_from_env(env, "EXECUTIONS", "max_foreach_items", &mut self.max_foreach_items)?;
        set_from_env(env, "EXECUTIONS", "max_parallel_branches", &mut self.max_parallel_branches)?;
        set_from_env(env, "EXECUTIONS", "max_sleep_s", &mut self.max_sleep_s)?;
        set_from_env(env, "EXECUTIONS", "api_call_timeout_s", &mut self.api_call_timeout_s)?;
        set_from_env(env, "EXECUTIONS", "expression_fuel", &mut self.expression_fuel)?;
        set_from_env(env, "EXECUTIONS", "expression_max_bytes", &mut self.expression_max_bytes)?;
        set_from_env(env, "EXECUTIONS", "expression_timeout_ms", &mut self.expression_timeout_ms)?;
        set_from_env(env, "EXECUTIONS", "max_depth", &mut self.max_depth)?;
        set_from_env(env, "EXECUTIONS", "workers", &mut self.workers)?;
        set_from_env(env, "EXECUTIONS", "lease_s", &mut self.lease_s)?;
        set_from_env(env, "EXECUTIONS", "max_step_attempts", &mut self.max_step_attempts)?;
        set_from_env(env, "EXECUTIONS", "max_active_per_tenant", &mut self.max_active_per_tenant)?;
        let limits = [
            ("max_steps", self.max_steps),
            ("max_foreach_items", self.max_foreach_items as u64),
            ("max_parallel_branches", self.max_parallel_branches as u64),
            ("max_sleep_s", self.max_sleep_s),
            ("api_call_timeout_s", self.api_call_timeout_s),
            ("expression_fuel", self.expression_fuel),
            ("expression_max_bytes", self.expression_max_bytes as u64),
            ("expression_timeout_ms", self.expression_timeout_ms),
            ("max_depth", self.max_depth as u64),
            ("workers", self.workers as u64),
            ("lease_s", self.lease_s),
            ("max_step_attempts", u64::from(self.max_step_attempts)),
            ("max_active_per_tenant", self.max_active_per_tenant as u64),
        ];
        for (setting, value) in limits {
            if value == 0 {
                anyhow::bail!("executions.{setting} = 0: expected at least 1");
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address and port to listen on.
    pub bind: SocketAddr,
    /// Directory of the embedded store (created if missing).
    pub data_dir: PathBuf,
    /// Largest accepted request body; larger ones answer 413.
    pub request_body_max_bytes: usize,
    /// Seconds a request body may take to arrive in full, counted from the end of
    /// its headers; a body still incomplete then (a client that stalls or trickles
    /// it) answers 408 and the connection is closed, so it holds no descriptor.
    pub request_body_timeout_s: u64,
    /// Seconds a connection may go without bringing a complete request head,
    /// counted from the moment the server waits for one: at accept, and after
    /// each answer on a keep-alive connection. It closes a connection that sends
    /// nothing, one that sends its headers slowly (slowloris) and one idle between
    /// requests, so none holds a descriptor for longer.
    pub idle_timeout_s: u64,
    /// Seconds a WebSocket of `GET /v1/responses` may go without a message
    /// from its client while no response runs; then the server closes it.
    pub websocket_idle_timeout_s: u64,
    /// `fsync` (default): a 2xx write survives power loss; `flush`: it survives the process being killed.
    pub durability: Durability,
    /// Open a store that lost data or is damaged, taking what it holds as the new
    /// checkpoint. Only from the `--accept-data-loss` flag: a one-time decision,
    /// never a setting left in a file or an environment.
    #[serde(skip)]
    pub accept_data_loss: bool,
    /// How long a write may wait for the store's disk before it answers 503
    /// `store_unavailable` (and the longest `healthz` tolerates a stuck disk).
    pub store_timeout_s: f64,
    /// Writes answer 507 `insufficient_storage` while the store's disk has less
    /// than this many MiB free (0: only when the disk itself refuses a write).
    pub store_min_free_mb: u64,
    /// The most memory, in MiB, the embedded store keeps as its page cache
    /// (what is not cached is read from the disk, usually the OS's cache).
    pub store_cache_mb: u64,
    /// Owners (agents, users) with at least this many document vectors are
    /// searched through an approximate-nearest-neighbour graph (HNSW), built in
    /// the background and kept on disk beside the search index; owners with
    /// fewer, and filtered or hybrid searches, score every vector exactly.
    /// Embedded store only.
    pub vector_graph_min: u64,
    /// API keys a tenant may create through the API (`POST /api/keys`) before
    /// it must delete one; the CLI's `keys create` is not held to it.
    pub max_keys_per_tenant: usize,
    /// Whether `GET /console` serves the web console (a 404 when off). It
    /// uses the public API only, with a key the person enters.
    pub console: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8080".parse().expect("a valid address"),
            data_dir: PathBuf::from("./data"),
            request_body_max_bytes: 2 * 1024 * 1024,
            // The largest body (2 MiB) at ~70 KB/s: slow links pass, stalls do not.
            request_body_timeout_s: 30,
            // hyper's own default for the header read timeout.
            idle_timeout_s: 30,
            // A person reads and types between two responses.
            websocket_idle_timeout_s: 900,
            durability: Durability::Fsync,
            accept_data_loss: false,
            store_timeout_s: crate::store::sled_store::DEFAULT_WRITE_TIMEOUT.as_secs_f64(),
            store_min_free_mb: crate::store::sled_store::DEFAULT_MIN_FREE_BYTES >> 20,
            store_cache_mb: crate::store::sled_store::DEFAULT_CACHE_BYTES >> 20,
            vector_graph_min: crate::search::DEFAULT_VECTOR_GRAPH_MIN,
            max_keys_per_tenant: crate::app::keys::DEFAULT_MAX_KEYS_PER_TENANT,
            console: true,
        }
    }
}

/// Which store holds the records.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// The embedded store in `server.data_dir`: one process, no set-up.
    #[default]
    Sled,
    /// A PostgreSQL database at `store.url`: any number of servers share it.
    Postgres,
}

/// The store: which backend, and (PostgreSQL) how to reach it.
#[derive(Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    /// The PostgreSQL connection URL (`postgres://user:password@host:port/db?...`;
    /// several hosts with `target_session_attrs=read-write` to follow a failover).
    pub url: Option<String>,
    /// Connections each server keeps open to the database (with 4 or more,
    /// two of them are shared by all reads of one record by id).
    pub pool_size: usize,
    /// Longest a statement may run, or a request wait for a free connection,
    /// before it answers 503 `store_unavailable`.
    pub statement_timeout_s: f64,
    /// Longest a new connection to the database may take to open.
    pub connect_timeout_s: f64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Sled,
            url: None,
            pool_size: 16,
            statement_timeout_s: 10.0,
            connect_timeout_s: 5.0,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    // The URL may hold a password: never in a log or an error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("backend", &self.backend)
            .field("url", &self.url.as_ref().map(|_| "<set>"))
            .field("pool_size", &self.pool_size)
            .field("statement_timeout_s", &self.statement_timeout_s)
            .field("connect_timeout_s", &self.connect_timeout_s)
            .finish()
    }
}

impl StoreConfig {
    /// Reads `AGENT_PLATFORM_STORE_*` and the database URL
    /// (`AGENT_PLATFORM_DATABASE_URL`, then `DATABASE_URL`), and checks the values.
    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        fn parse<T: std::str::FromStr>(name: &str, v: String) -> anyhow::Result<T>
        where
            T::Err: std::fmt::Display,
        {
            v.trim().parse().map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}"))
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_BACKEND") {
            self.backend = match v.trim() {
                "sled" => StoreBackend::Sled,
                "postgres" | "postgresql" => StoreBackend::Postgres,
                _ => anyhow::bail!("AGENT_PLATFORM_STORE_BACKEND={v:?}: expected sled or postgres"),
            };
        }
        if let Some(v) = env("AGENT_PLATFORM_DATABASE_URL").or_else(|| env("DATABASE_URL")) {
            self.url = Some(v);
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_POOL_SIZE") {
            self.pool_size = parse("AGENT_PLATFORM_STORE_POOL_SIZE", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_STATEMENT_TIMEOUT_S") {
            self.statement_timeout_s = parse("AGENT_PLATFORM_STORE_STATEMENT_TIMEOUT_S", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_CONNECT_TIMEOUT_S") {
            self.connect_timeout_s = parse("AGENT_PLATFORM_STORE_CONNECT_TIMEOUT_S", v)?;
        }
        if self.pool_size == 0 {
            anyhow::bail!("store.pool_size = 0: expected at least 1 connection");
        }
        for (setting, value) in
            [("statement_timeout_s", self.statement_timeout_s), ("connect_timeout_s", self.connect_timeout_s)]
        {
            if !(value > 0.0 && value <= 3600.0) {
                anyhow::bail!("store.{setting} = {value}: expected seconds between 0 and 3600");
            }
        }
        if self.backend == StoreBackend::Postgres && self.url.as_deref().is_none_or(|u| u.trim().is_empty()) {
            anyhow::bail!(
                "store.backend = \"postgres\" needs the database's URL: set store.url, \
                 AGENT_PLATFORM_DATABASE_URL or DATABASE_URL (e.g. postgres://user@host/db)"
            );
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Pretty,
    Json,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into(), format: LogFormat::Pretty }
    }
}

impl ServerConfig {
    /// The store's bounds: `store_timeout_s`, `store_min_free_mb`.
    pub fn store_limits(&self) -> crate::store::sled_store::StoreLimits {
        crate::store::sled_store::StoreLimits {
            write_timeout: std::time::Duration::from_secs_f64(self.store_timeout_s),
            min_free_bytes: self.store_min_free_mb.saturating_mul(1 << 20),
        }
    }
}

impl Config {
    /// Reads a config file (TOML).
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
    }

    /// Applies `AGENT_PLATFORM_*` environment variables from `env`.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        fn parse<T: std::str::FromStr>(name: &str, v: String) -> anyhow::Result<T>
        where
            T::Err: std::fmt::Display,
        {
            v.parse().map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}"))
        }
        if let Some(v) = env("AGENT_PLATFORM_BIND") {
            self.server.bind = parse("AGENT_PLATFORM_BIND", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_DATA_DIR") {
            self.server.data_dir = PathBuf::from(v);
        }
        if let Some(v) = env("AGENT_PLATFORM_REQUEST_BODY_MAX_BYTES") {
            self.server.request_body_max_bytes = parse("AGENT_PLATFORM_REQUEST_BODY_MAX_BYTES", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_REQUEST_BODY_TIMEOUT_S") {
            self.server.request_body_timeout_s = parse("AGENT_PLATFORM_REQUEST_BODY_TIMEOUT_S", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_IDLE_TIMEOUT_S") {
            self.server.idle_timeout_s = parse("AGENT_PLATFORM_IDLE_TIMEOUT_S", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_WEBSOCKET_IDLE_TIMEOUT_S") {
            self.server.websocket_idle_timeout_s = parse("AGENT_PLATFORM_WEBSOCKET_IDLE_TIMEOUT_S", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_DURABILITY") {
            self.server.durability = match v.as_str() {
                "fsync" => Durability::Fsync,
                "flush" => Durability::Flush,
                _ => anyhow::bail!("AGENT_PLATFORM_DURABILITY={v:?}: expected fsync or flush"),
            };
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_TIMEOUT_S") {
            self.server.store_timeout_s = parse("AGENT_PLATFORM_STORE_TIMEOUT_S", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_MIN_FREE_MB") {
            self.server.store_min_free_mb = parse("AGENT_PLATFORM_STORE_MIN_FREE_MB", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_STORE_CACHE_MB") {
            self.server.store_cache_mb = parse("AGENT_PLATFORM_STORE_CACHE_MB", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_VECTOR_GRAPH_MIN") {
            self.server.vector_graph_min = parse("AGENT_PLATFORM_VECTOR_GRAPH_MIN", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_MAX_KEYS_PER_TENANT") {
            self.server.max_keys_per_tenant = parse("AGENT_PLATFORM_MAX_KEYS_PER_TENANT", v)?;
        }
        if let Some(v) = env("AGENT_PLATFORM_CONSOLE") {
            self.server.console = match v.trim() {
                "true" | "1" | "on" => true,
                "false" | "0" | "off" => false,
                _ => anyhow::bail!("AGENT_PLATFORM_CONSOLE={v:?}: expected true or false"),
            };
        }
        if self.server.max_keys_per_tenant == 0 {
            anyhow::bail!("max_keys_per_tenant = 0: expected at least 1 (a tenant needs a key)");
        }
        if self.server.vector_graph_min == 0 {
            anyhow::bail!("vector_graph_min = 0: expected at least 1 (a large number turns the graphs off)");
        }
        if !(1..=1 << 20).contains(&self.server.store_cache_mb) {
            anyhow::bail!(
                "store_cache_mb = {}: expected MiB between 1 and 1048576",
                self.server.store_cache_mb
            );
        }
        if !(self.server.store_timeout_s > 0.0 && self.server.store_timeout_s <= 3600.0) {
            anyhow::bail!(
                "store_timeout_s = {}: expected seconds between 0 and 3600",
                self.server.store_timeout_s
            );
        }
        if let Some(v) = env("AGENT_PLATFORM_DEFAULT_MODEL").filter(|v| !v.trim().is_empty()) {
            self.models.default_model = Some(v);
        }
        if let Some(v) = env("AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES") {
            self.models.max_answer_bytes = Some(parse("AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES", v)?);
        }
        if let Some(v) = env("AGENT_PLATFORM_MODELS_MAX_INPUT_PART_BYTES") {
            self.models.max_input_part_bytes = Some(parse("AGENT_PLATFORM_MODELS_MAX_INPUT_PART_BYTES", v)?);
        }
        self.tools.apply_env(&env)?;
        if let Some(v) = env("AGENT_PLATFORM_SECRETS_KEY_ENV") {
            self.secrets.key_env = Some(v.trim().to_string()).filter(|v| !v.is_empty());
        }
        self.executions.apply_env(&env)?;
        self.store.apply_env(&env)?;
        if let Some(v) = env("AGENT_PLATFORM_LOG_LEVEL") {
            self.log.level = v;
        }
        if let Some(v) = env("AGENT_PLATFORM_LOG_FORMAT") {
            self.log.format = match v.as_str() {
                "pretty" => LogFormat::Pretty,
                "json" => LogFormat::Json,
                _ => anyhow::bail!("AGENT_PLATFORM_LOG_FORMAT={v:?}: expected pretty or json"),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_section_and_default_model_from_the_environment() {
        let mut cfg: Config = toml::from_str(
            "[models]\ndefault_model = \"a\"\n[[models.providers]]\nname = \"local\"\n\
             base_url = \"http://127.0.0.1:11434/v1\"\n",
        )
        .unwrap();
        assert_eq!(cfg.models.providers[0].name, "local");
        assert_eq!(cfg.models.default_model.as_deref(), Some("a"));
        cfg.apply_env(|k| (k == "AGENT_PLATFORM_DEFAULT_MODEL").then(|| "b".to_string())).unwrap();
        assert_eq!(cfg.models.default_model.as_deref(), Some("b"));
        let providers = crate::models::Providers::from_config(&cfg.models, |_| None).unwrap();
        assert_eq!(providers.resolve("b").unwrap().name(), "local");
    }

    #[test]
    fn max_answer_bytes_from_the_file_and_the_environment() {
        let mut cfg: Config = toml::from_str("[models]\nmax_answer_bytes = 1000\n").unwrap();
        assert_eq!(cfg.models.max_answer_bytes, Some(1000));
        cfg.apply_env(|k| (k == "AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES").then(|| "2000".to_string()))
            .unwrap();
        assert_eq!(cfg.models.max_answer_bytes, Some(2000));
        assert!(
            cfg.apply_env(|k| (k == "AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES").then(|| "lots".into()))
                .is_err()
        );
        cfg.models.max_answer_bytes = Some(0);
        let zero = crate::models::Providers::from_config(&cfg.models, |_| None).unwrap_err();
        assert_eq!(zero, crate::models::ConfigError::BadMaxAnswerBytes);
    }

    #[test]
    fn console_is_on_unless_the_file_or_the_environment_turns_it_off() {
        assert!(Config::default().server.console);
        let mut cfg: Config = toml::from_str("[server]\nconsole = false\n").unwrap();
        assert!(!cfg.server.console);
        let env = |v: &'static str| move |k: &str| (k == "AGENT_PLATFORM_CONSOLE").then(|| v.into());
        cfg.apply_env(env("true")).unwrap();
        assert!(cfg.server.console);
        cfg.apply_env(env("off")).unwrap();
        assert!(!cfg.server.console);
        let err = cfg.apply_env(env("maybe")).unwrap_err();
        assert!(err.to_string().contains("AGENT_PLATFORM_CONSOLE"), "{err}");
    }

    #[test]
    fn request_body_timeout_from_the_file_then_the_environment() {
        assert_eq!(Config::default().server.request_body_timeout_s, 30);
        let mut cfg: Config = toml::from_str("[server]\nrequest_body_timeout_s = 5\n").unwrap();
        assert_eq!(cfg.server.request_body_timeout_s, 5);
        let env =
            |v: &'static str| move |k: &str| (k == "AGENT_PLATFORM_REQUEST_BODY_TIMEOUT_S").then(|| v.into());
        cfg.apply_env(env("7")).unwrap();
        assert_eq!(cfg.server.request_body_timeout_s, 7);
        let err = cfg.apply_env(env("soon")).unwrap_err();
        assert!(err.to_string().contains("AGENT_PLATFORM_REQUEST_BODY_TIMEOUT_S"), "{err}");
    }

    #[test]
    fn executions_and_tools_from_the_file_then_the_environment() {
        let defaults = Config::default();
        assert_eq!(defaults.executions.max_steps, 10_000);
        assert_eq!(defaults.executions.max_sleep_s, 2_592_000);
        assert_eq!(defaults.executions.workers, 64);
        assert_eq!(defaults.executions.max_step_attempts, 3);
        assert_eq!(defaults.executions.max_active_per_tenant, 1000);
        assert!(defaults.tools.allowed_hosts().next().is_none());
        assert_eq!(defaults.tools.mcp_timeout_s, 30);
        assert_eq!(defaults.tools.max_output_bytes, 1 << 20);
        let mut cfg: Config = toml::from_str(
            "[tools]\napi_call_allowed_hosts = [\"api.example.com\"]\nmcp_list_cache_ttl_s = 5\n\
             [executions]\nmax_foreach_items = 5\nexpression_fuel = 10\nmax_step_attempts = 2\n",
        )
        .unwrap();
        assert_eq!(cfg.tools.allowed_hosts().collect::<Vec<_>>(), ["api.example.com"]);
        assert_eq!(cfg.tools.mcp_list_cache_ttl_s, 5);
        assert_eq!(cfg.executions.max_foreach_items, 5);
        assert_eq!(cfg.executions.api_call_timeout_s, 30);
        assert_eq!(cfg.executions.max_step_attempts, 2);
        cfg.apply_env(|k| match k {
            "AGENT_PLATFORM_EXECUTIONS_MAX_ACTIVE_PER_TENANT" => Some("9".into()),
            "AGENT_PLATFORM_EXECUTIONS_MAX_FOREACH_ITEMS" => Some("7".into()),
            "AGENT_PLATFORM_EXECUTIONS_WORKERS" => Some("2".into()),
            "AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS" => Some("a.test, 127.0.0.1:9000,".into()),
            "AGENT_PLATFORM_TOOLS_MCP_TIMEOUT_S" => Some("4".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.executions.max_foreach_items, 7);
        assert_eq!(cfg.executions.workers, 2);
        assert_eq!(cfg.executions.expression_fuel, 10);
        assert_eq!(cfg.executions.max_active_per_tenant, 9);
        // The former list still counts, merged into the new one.
        assert_eq!(
            cfg.tools.allowed_hosts().collect::<Vec<_>>(),
            ["a.test", "127.0.0.1:9000", "api.example.com"]
        );
        assert_eq!(cfg.tools.mcp_timeout_s, 4);
        let err = Config::default()
            .apply_env(|k| (k == "AGENT_PLATFORM_TOOLS_MAX_OUTPUT_BYTES").then(|| "0".into()))
            .unwrap_err();
        assert!(err.to_string().contains("tools.max_output_bytes"), "{err}");
        let err = cfg
            .apply_env(|k| (k == "AGENT_PLATFORM_EXECUTIONS_MAX_STEPS").then(|| "many".into()))
            .unwrap_err();
        assert!(err.to_string().contains("AGENT_PLATFORM_EXECUTIONS_MAX_STEPS"), "{err}");
        let err =
            cfg.apply_env(|k| (k == "AGENT_PLATFORM_EXECUTIONS_WORKERS").then(|| "0".into())).unwrap_err();
        assert!(err.to_string().contains("executions.workers"), "{err}");
        assert!(toml::from_str::<Config>("[executions]\nmax_stepz = 1\n").is_err());
    }

    #[test]
    fn secrets_key_env_from_the_file_then_the_environment() {
        assert_eq!(Config::default().secrets.key_env, None);
        let mut cfg: Config = toml::from_str("[secrets]\nkey_env = \"MY_KEY\"\n").unwrap();
        assert_eq!(cfg.secrets.key_env.as_deref(), Some("MY_KEY"));
        let env = |v: &'static str| move |k: &str| (k == "AGENT_PLATFORM_SECRETS_KEY_ENV").then(|| v.into());
        cfg.apply_env(env("OTHER_KEY")).unwrap();
        assert_eq!(cfg.secrets.key_env.as_deref(), Some("OTHER_KEY"));
        cfg.apply_env(env("")).unwrap();
        assert_eq!(cfg.secrets.key_env, None, "an empty name turns secrets off");
        assert!(toml::from_str::<Config>("[secrets]\nkey = \"abc\"\n").is_err(), "never the key itself");
    }

    #[test]
    fn max_keys_per_tenant_from_the_file_then_the_environment() {
        assert_eq!(Config::default().server.max_keys_per_tenant, 100);
        let mut cfg: Config = toml::from_str("[server]\nmax_keys_per_tenant = 5\n").unwrap();
        assert_eq!(cfg.server.max_keys_per_tenant, 5);
        let env =
            |v: &'static str| move |k: &str| (k == "AGENT_PLATFORM_MAX_KEYS_PER_TENANT").then(|| v.into());
        cfg.apply_env(env("7")).unwrap();
        assert_eq!(cfg.server.max_keys_per_tenant, 7);
        let err = cfg.apply_env(env("0")).unwrap_err();
        assert!(err.to_string().contains("max_keys_per_tenant"), "{err}");
    }

    #[test]
    fn idle_timeout_from_the_file_then_the_environment() {
        assert_eq!(Config::default().server.idle_timeout_s, 30);
        let mut cfg: Config = toml::from_str("[server]\nidle_timeout_s = 5\n").unwrap();
        assert_eq!(cfg.server.idle_timeout_s, 5);
        cfg.apply_env(|k| (k == "AGENT_PLATFORM_IDLE_TIMEOUT_S").then(|| "9".into())).unwrap();
        assert_eq!(cfg.server.idle_timeout_s, 9);
    }

    #[test]
    fn websocket_idle_timeout_from_the_file_then_the_environment() {
        assert_eq!(Config::default().server.websocket_idle_timeout_s, 900);
        let mut cfg: Config = toml::from_str("[server]\nwebsocket_idle_timeout_s = 5\n").unwrap();
        assert_eq!(cfg.server.websocket_idle_timeout_s, 5);
        cfg.apply_env(|k| (k == "AGENT_PLATFORM_WEBSOCKET_IDLE_TIMEOUT_S").then(|| "9".into())).unwrap();
        assert_eq!(cfg.server.websocket_idle_timeout_s, 9);
    }

    #[test]
    fn store_from_the_file_then_the_environment() {
        let mut cfg: Config =
            toml::from_str("[store]\nbackend = \"postgres\"\nurl = \"postgres://f/db\"\npool_size = 4\n")
                .unwrap();
        cfg.apply_env(|_| None).unwrap();
        assert_eq!(
            (cfg.store.backend, cfg.store.url.as_deref(), cfg.store.pool_size),
            (StoreBackend::Postgres, Some("postgres://f/db"), 4)
        );
        // AGENT_PLATFORM_DATABASE_URL wins over DATABASE_URL, which wins over the file.
        cfg.apply_env(|k| (k == "DATABASE_URL").then(|| "postgres://d/db".into())).unwrap();
        assert_eq!(cfg.store.url.as_deref(), Some("postgres://d/db"));
        cfg.apply_env(|k| match k {
            "AGENT_PLATFORM_DATABASE_URL" => Some("postgres://a/db".into()),
            "DATABASE_URL" => Some("postgres://d/db".into()),
            "AGENT_PLATFORM_STORE_POOL_SIZE" => Some("7".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((cfg.store.url.as_deref(), cfg.store.pool_size), (Some("postgres://a/db"), 7));
        let err = cfg.apply_env(|k| (k == "AGENT_PLATFORM_STORE_POOL_SIZE").then(|| "0".into())).unwrap_err();
        assert!(err.to_string().contains("pool_size"), "{err}");
        // postgres without a URL says where to put one; the URL never shows in Debug.
        let mut cfg = Config::default();
        let err =
            cfg.apply_env(|k| (k == "AGENT_PLATFORM_STORE_BACKEND").then(|| "postgres".into())).unwrap_err();
        assert!(err.to_string().contains("AGENT_PLATFORM_DATABASE_URL"), "{err}");
        cfg.store.url = Some("postgres://u:secret@h/db".into());
        assert!(!format!("{:?}", cfg.store).contains("secret"));
        let err =
            cfg.apply_env(|k| (k == "AGENT_PLATFORM_STORE_BACKEND").then(|| "mysql".into())).unwrap_err();
        assert!(err.to_string().contains("sled or postgres"), "{err}");
    }
}
