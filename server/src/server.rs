//! Wiring: opens the store, builds the application and starts the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;

use dropshot::{
    ConfigDropshot, ConfigLogging, ConfigLoggingIfExists, ConfigLoggingLevel, ConnectionConfig,
    HandlerTaskMode, ServerBuilder,
};

use crate::api::agent_platform_api_mod;
use crate::api::extract::read_body_timeout_from;
use crate::app::keys::DEFAULT_TENANT;
use crate::app::secrets::SecretsKey;
use crate::app::{App, SearchStart, SearchState};
use crate::config::StoreBackend;
use crate::config::{Config, LogFormat};
use crate::http::{Ctx, Impl};
use crate::models::Providers;
use crate::search::GraphEvent;
use crate::store::backend::Backend;
use crate::store::open::{OpenError, quietly_async};
use crate::store::pg_store::PgStore;
use crate::store::sled_store::{OpenOptions, SledStore};

/// How long a shutdown waits for requests under way (a write waits for the
/// store at most `store_timeout_s`, a chat for its model).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A running server.
pub struct Running {
    pub server: dropshot::HttpServer<Ctx>,
    pub store: Backend,
    /// The application the server runs (shares the store and the search index).
    pub app: App,
    /// The key created because the store is new (shown once).
    pub first_key: Option<String>,
    /// Runs the executions of tasks.
    pub engine: Arc<crate::exec::engine::Engine>,
}

impl Running {
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops accepting requests, finishes the ones under way, and closes the
    /// store, in at most about [`SHUTDOWN_GRACE`] plus a few seconds: a disk
    /// that does not answer cannot hold the process (an error says the store
    /// was not closed cleanly; the next start recovers from its log).
    pub async fn shutdown(self) -> anyhow::Result<()> {
        // WebSockets close now (a response under way stops, saving nothing).
        self.server.app_private().closing.send_replace(true);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, self.server.close()).await;
        // Executions under way stop here and go on from their last transition at the next start.
        self.engine.stop().await;
        // Background responses stop here and go on at the next start (or on another server).
        self.app.background.stop();
        self.app.stop_learning().await;
        if let Err(e) = self.app.search.close() {
            eprintln!(
                "the search index was not closed cleanly ({e}): the next start checks it against the store"
            );
        }
        // Also answers the writes still waiting for the store (503).
        let closed = self.store.close();
        match drained {
            Ok(r) => r.map_err(|e| anyhow::anyhow!(e))?,
            Err(_) => eprintln!("requests still under way after {} s were cut off", SHUTDOWN_GRACE.as_secs()),
        }
        if !closed {
            anyhow::bail!("the store was not closed cleanly (its disk does not answer)");
        }
        Ok(())
    }
}

fn logger(cfg: &Config) -> anyhow::Result<slog::Logger> {
    let level = match cfg.log.level.to_ascii_lowercase().as_str() {
        "trace" => ConfigLoggingLevel::Trace,
        "debug" => ConfigLoggingLevel::Debug,
        "info" => ConfigLoggingLevel::Info,
        "warn" | "warning" => ConfigLoggingLevel::Warn,
        "error" => ConfigLoggingLevel::Error,
        "critical" | "off" => ConfigLoggingLevel::Critical,
        other => anyhow::bail!("unknown log level {other:?}: use trace, debug, info, warn or error"),
    };
    let logging = match cfg.log.format {
        LogFormat::Pretty => ConfigLogging::StderrTerminal { level },
        LogFormat::Json => ConfigLogging::File {
            level,
            path: "/dev/stdout".into(),
            if_exists: ConfigLoggingIfExists::Append,
        },
    };
    logging.to_logger("agent-platform").map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// Opens the store in the configured data directory and starts serving.
pub async fn start(cfg: &Config) -> anyhow::Result<Running> {
    start_with_env(cfg, |v| std::env::var(v).ok()).await
}

/// [`start`], reading the providers' environment variables (`OPENAI_BASE_URL`,
/// `OPENAI_API_KEY`, the `api_key_env`s) through `env`.
pub async fn start_with_env(cfg: &Config, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Running> {
    let log = logger(cfg)?;
    anyhow::ensure!(
        cfg.server.request_body_timeout_s > 0,
        "request_body_timeout_s is 0: set it to the seconds a request body may take to arrive (default 30)"
    );
    anyhow::ensure!(
        cfg.server.websocket_idle_timeout_s > 0,
        "websocket_idle_timeout_s is 0: set it to the seconds a WebSocket may wait for a message (default 900)"
    );
    anyhow::ensure!(
        cfg.server.idle_timeout_s > 0,
        "idle_timeout_s is 0: set it to the seconds a connection may wait for a request (default 30)"
    );
    let secrets_key =
        SecretsKey::from_config(&cfg.secrets, &env).map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let models = Providers::from_config(&cfg.models, env).map_err(|e| anyhow::anyhow!("config: {e}"))?;
    // The tokenizer takes seconds to build; not inside the first chat.
    tokio::task::spawn_blocking(crate::models::tokens::warm_up);
    let (store, app) = open_app(cfg, SearchStart::Background).await?;
    let mut app = app.with_models(models).with_secrets_key(secrets_key).with_tool_runner(
        crate::app::turn::tools::ToolRunner::from_config(&cfg.tools, &cfg.executions)
            .map_err(|e| anyhow::anyhow!("config: {e}"))?,
    );
    app.max_keys_per_tenant = cfg.server.max_keys_per_tenant;
    log_search_readiness(&app, &log, &cfg.server.data_dir);
    let spec = match crate::api::openapi() {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("an OpenAPI document is an object"),
    };
    read_body_timeout_from::<Ctx>();
    let api = agent_platform_api_mod::api_description::<Impl>().map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = ConfigDropshot {
        bind_address: cfg.server.bind,
        default_request_body_max_bytes: cfg.server.request_body_max_bytes,
        default_handler_task_mode: HandlerTaskMode::Detached,
        log_headers: Vec::new(),
        ..Default::default()
    };
    let body_read_timeout = std::time::Duration::from_secs(cfg.server.request_body_timeout_s);
    let connections = ConnectionConfig {
        // HTTP/1 only: the protocol is then not sniffed from the first bytes,
        // a wait that has no bound, so the idle timeout covers a silent client too.
        http1_only: true,
        header_read_timeout: Some(std::time::Duration::from_secs(cfg.server.idle_timeout_s)),
        // A streamed chat answer is many small writes; with Nagle's algorithm on,
        // each waits for the client's delayed ACK (~40 ms on Linux).
        tcp_nodelay: true,
    };
    // Before the first request: executions can be started (and those under way at
    // the last stop go on) as soon as the server answers.
    let engine = crate::exec::engine::Engine::start(&app, &cfg.executions, &cfg.tools, log.clone()).await?;
    app.start_background_runs(&cfg.tools, &cfg.executions, log.clone()).await?;
    app.start_learning(&cfg.executions, &cfg.tools, log.clone()).await?;
    let sockets = crate::http::socket::Limits {
        max_message_bytes: cfg.server.request_body_max_bytes,
        idle_timeout: std::time::Duration::from_secs(cfg.server.websocket_idle_timeout_s),
        lifetime: crate::http::socket::LIFETIME,
    };
    let (closing, _) = tokio::sync::watch::channel(false);
    let ctx =
        Ctx { app: app.clone(), spec, body_read_timeout, sockets, closing, console: cfg.server.console };
    let server = ServerBuilder::new(api, ctx, log.clone())
        .config(config)
        .connections(connections)
        .router_error_response(crate::api::error::router_error_response)
        .start()
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.server.bind))?;
    // Only once we listen: a key printed by a server that failed to start would be lost.
    // Only for a new store: a store that lost its keys must not hand a key to
    // whoever restarts it.
    let first_key = if store.is_new() && app.no_keys().await? {
        Some(app.key_create(DEFAULT_TENANT).await?.0)
    } else {
        None
    };
    Ok(Running { server, store, app, first_key, engine })
}

/// Says in the log how the search index of an embedded store started (opened
/// from its directory, or new and why), when it is ready, and whenever it
/// fails (searches then answer 503 until a restart mends it).
fn log_search_readiness(app: &App, log: &slog::Logger, data_dir: &std::path::Path) {
    if app.store.shared() {
        return;
    }
    match app.search.fresh() {
        None => {
            slog::info!(log, "search index opened"; "dir" => data_dir.join(SEARCH_INDEX_DIR).display().to_string())
        }
        Some(why) => slog::info!(log, "search index is new: every document is indexed"; "why" => why),
    }
    let graphs = log.clone();
    app.search.on_vector_graph(move |event| match event {
        GraphEvent::Built { owner, vectors, seconds } => slog::info!(graphs, "vector graph built: this owner's vector searches use it";
            "tenant" => owner.tenant.to_string(), "owner" => owner.owner.to_string(), "vectors" => vectors, "seconds" => seconds),
        GraphEvent::Failed { owner, error } => slog::warn!(graphs, "vector graph not built: this owner's vector searches stay exact (slower)";
            "tenant" => owner.tenant.to_string(), "owner" => owner.owner.to_string(), "error" => error),
    });
    let (mut states, log, dir) = (app.watch_search(), log.clone(), data_dir.display().to_string());
    let started = std::time::Instant::now();
    tokio::spawn(async move {
        let mut said_ready = false;
        loop {
            let state = states.borrow_and_update().clone();
            match state {
                SearchState::Failed(why) => {
                    slog::error!(log, "search is unavailable: searches answer 503 until a restart";
                    "error" => why, "hint" => format!("a restart brings the index in step with the store in {dir}; \
                    if a stored document is unreadable, that store may be corrupt: restore it from a backup"));
                    return;
                }
                SearchState::Ready if !said_ready => {
                    said_ready = true;
                    slog::info!(log, "search index ready"; "seconds" => started.elapsed().as_secs_f64());
                }
                _ => {}
            }
            if states.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Opens the store of `cfg` and the application on it: what `serve` and the
/// `keys` command share.
pub async fn open_app(cfg: &Config, search: SearchStart) -> anyhow::Result<(Backend, App)> {
    match cfg.store.backend {
        StoreBackend::Sled => {
            let (store, app) = open_sled_app(cfg, search).await?;
            Ok((Backend::Sled(store), app))
        }
        StoreBackend::Postgres => {
            let store = Arc::new(PgStore::connect(&cfg.store, crate::app::records::STORE_DOMAIN).await?);
            let app = App::open(store.clone(), search).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok((Backend::Postgres(store), app))
        }
    }
}

/// The sled store in the data directory and the application on it (which
/// builds the search index from every document, as `search` says). A record
/// that cannot be read at start means a corrupt store, reported as one.
/// Where, in the data directory, the search index is kept.
pub const SEARCH_INDEX_DIR: &str = "search-index";

async fn open_sled_app(cfg: &Config, search: SearchStart) -> anyhow::Result<(Arc<SledStore>, App)> {
    let dir = &cfg.server.data_dir;
    let options = OpenOptions {
        durability: cfg.server.durability,
        accept_data_loss: cfg.server.accept_data_loss,
        cache_bytes: cfg.server.store_cache_mb.saturating_mul(1 << 20),
    };
    let store = Arc::new(SledStore::open_with(dir, options)?.with_limits(cfg.server.store_limits()));
    let corrupt =
        |what| OpenError::Corrupt { dir: dir.clone(), what, accepting: cfg.server.accept_data_loss }.into();
    let index_dir = dir.join(SEARCH_INDEX_DIR);
    let app = match quietly_async(App::open_in(store.clone(), search, Some(&index_dir))).await {
        Ok(Ok(app)) => app,
        Ok(Err(e)) => return Err(corrupt(e.to_string())),
        Err(panic) => return Err(corrupt(panic)),
    };
    app.search.set_vector_graph_min(cfg.server.vector_graph_min);
    Ok((store, app))
}
