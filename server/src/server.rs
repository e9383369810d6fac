//! Wiring: opens the store, builds the application and starts the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;

use dropshot::{
    ConfigDropshot, ConfigLogging, ConfigLoggingIfExists, ConfigLoggingLevel, ConnectionConfig,
    HandlerTaskMode, ServerBuilder,
};

use crate::api::agent_platform_api_mod;
use crate::app::App;
use crate::app::keys::DEFAULT_TENANT;
use crate::chat::Providers;
use crate::config::{Config, LogFormat};
use crate::http::{Ctx, Impl};
use crate::store::sled_store::SledStore;

/// A running server.
pub struct Running {
    pub server: dropshot::HttpServer<Ctx>,
    pub store: Arc<SledStore>,
    /// The application the server runs (shares the store and the search index).
    pub app: App,
    /// The key created because the store had none (shown once).
    pub first_key: Option<String>,
}

impl Running {
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops accepting requests, finishes the ones under way, and closes the store.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.server.close().await.map_err(|e| anyhow::anyhow!(e))?;
        self.store.close();
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
        cfg.server.idle_timeout_s > 0,
        "idle_timeout_s is 0: set it to the seconds a connection may wait for a request (default 30)"
    );
    let models = Providers::from_config(&cfg.models, env).map_err(|e| anyhow::anyhow!("config: {e}"))?;
    // The tokenizer takes seconds to build; not inside the first chat.
    tokio::task::spawn_blocking(crate::chat::tokens::warm_up);
    let store = Arc::new(SledStore::open(&cfg.server.data_dir, cfg.server.durability)?);
    // Rebuilds the search index from the store before the first request.
    let app = App::new(store.clone())?.with_models(models);
    let spec = match crate::api::openapi() {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("an OpenAPI document is an object"),
    };
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
    let server = ServerBuilder::new(api, Ctx { app: app.clone(), spec, body_read_timeout }, log.clone())
        .config(config)
        .connections(connections)
        .router_error_response(crate::api::error::router_error_response)
        .start()
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.server.bind))?;
    // Only once we listen: a key printed by a server that failed to start would be lost.
    let first_key = if app.no_keys()? { Some(app.key_create(DEFAULT_TENANT).await?.0) } else { None };
    Ok(Running { server, store, app, first_key })
}
