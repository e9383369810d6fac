//! The `agent-platform` command: run the server, manage API keys, end
//! executions, and call a running server's API (`api`, from the client crate).

use std::path::PathBuf;

use agent_platform::app::App;
use agent_platform::app::keys::DEFAULT_TENANT;
use agent_platform::config::Config;
use agent_platform::store::backend::Backend;
use agent_platform::store::open::Origin;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// A self-hostable backend for AI agents: users, agents, sessions, chat,
/// documents with search, tools and tasks over HTTP/JSON, on an embedded store.
///
/// Settings come from built-in defaults, then the config file (--config), then
/// AGENT_PLATFORM_* environment variables, then flags.
#[derive(Parser)]
#[command(name = "agent-platform", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Common {
    /// A TOML config file (see README: Configuration).
    #[arg(long, env = "AGENT_PLATFORM_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Directory of the embedded store (default ./data).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Open a store that lost data or is damaged (it was refused with a message
    /// saying so), and take what it holds now as its new checkpoint. Use once,
    /// after deciding not to restore the data dir from a backup.
    #[arg(long, global = true)]
    accept_data_loss: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server. On an empty store it creates an API key and prints it once.
    Serve {
        #[command(flatten)]
        common: Common,
        /// Address to listen on, e.g. 127.0.0.1:8080 or 0.0.0.0:8080 (default 127.0.0.1:8080).
        #[arg(long)]
        bind: Option<std::net::SocketAddr>,
    },
    /// Manage API keys (run while the server is stopped: the store allows one process).
    Keys {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        action: KeysAction,
    },
    /// End an execution that a server cannot (it stops the server each time it
    /// runs): on the embedded store, run while the server is stopped; on
    /// PostgreSQL, at any time (a server running it stops its run).
    Executions {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        action: ExecutionsAction,
    },
}

#[derive(Subcommand)]
enum ExecutionsAction {
    /// Cancel an execution under way (status `cancelled`).
    Cancel {
        /// The execution's id.
        id: uuid::Uuid,
        /// Why, kept as its error and in its `cancelled` transition.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Fail an execution that is running (status `failed`, an `error` transition).
    Fail {
        /// The execution's id.
        id: uuid::Uuid,
        /// Why, kept as its error (default: failed by an operator).
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum KeysAction {
    /// Create a key and print it (it is stored hashed and cannot be shown again).
    Create {
        /// The tenant the key belongs to; created on first use.
        #[arg(long, default_value = DEFAULT_TENANT)]
        tenant: String,
    },
    /// List keys: id, tenant, prefix, creation time. Never the keys themselves.
    List,
    /// Revoke a key, given its id, its listed prefix or the key itself.
    Revoke {
        /// Key id, prefix (ap_xxxxxxxx) or the full key.
        key: String,
    },
}

fn load_config(common: &Common) -> anyhow::Result<Config> {
    let mut cfg = match &common.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    cfg.apply_env(|k| std::env::var(k).ok())?;
    if let Some(d) = &common.data_dir {
        cfg.server.data_dir = d.clone();
    }
    cfg.server.accept_data_loss = common.accept_data_loss;
    Ok(cfg)
}

/// Stack of each runtime thread. An execution's steps run as nested futures,
/// one level of stack per nested step (`executions.max_depth` bounds them);
/// 4 MiB leaves room for that bound in any build (it is reserved, not used).
const THREAD_STACK_BYTES: usize = 4 << 20;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1)
        });
    runtime.block_on(serve_cli())
}

async fn serve_cli() {
    // `api` is built from the spec at run time (agent_platform_client::cli), beside the derived commands.
    let matches = Cli::command().subcommand(agent_platform_client::cli::command()).get_matches();
    let code = match matches.subcommand() {
        Some(("api", api)) => agent_platform_client::cli::run(api).await,
        _ => match run(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                1
            }
        },
    };
    // Exit now: dropping the runtime would wait for every blocking task, and a
    // read stuck on a dead disk must not hold a shutdown.
    std::process::exit(code);
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { common, bind } => {
            let mut cfg = load_config(&common)?;
            if let Some(b) = bind {
                cfg.server.bind = b;
            }
            serve(cfg).await
        }
        Command::Keys { common, action } => {
            let (store, app) = open_offline(&common).await?;
            let out = keys(&app, action).await;
            drop(app);
            store.close();
            out
        }
        Command::Executions { common, action } => {
            let (store, app) = open_offline(&common).await?;
            let out = end_execution(&app, action).await;
            drop(app);
            store.close();
            out
        }
    }
}

/// Opens the store for a command that runs beside no server (on the embedded
/// store) or beside any number of them (PostgreSQL).
async fn open_offline(common: &Common) -> anyhow::Result<(Backend, App)> {
    let cfg = load_config(common)?;
    let (store, app) =
        agent_platform::server::open_app(&cfg, agent_platform::app::SearchStart::Never).await?;
    if let Backend::Sled(sled) = &store
        && let Origin::AcceptedLoss(what) = &sled.opened().origin
    {
        eprintln!("accepted data loss in {}: {what}", cfg.server.data_dir.display());
    }
    Ok((store, app))
}

async fn end_execution(app: &App, action: ExecutionsAction) -> anyhow::Result<()> {
    let (id, fail, reason) = match action {
        ExecutionsAction::Cancel { id, reason } => (id, false, reason),
        ExecutionsAction::Fail { id, reason } => (id, true, reason),
    };
    let (_, e) = agent_platform::exec::change::end_by_operator(app, id, fail, reason).await?;
    println!("execution {} is {}: {}", e.id, e.status.as_str(), e.error.unwrap_or_default());
    Ok(())
}

async fn keys(app: &App, action: KeysAction) -> anyhow::Result<()> {
    match action {
        KeysAction::Create { tenant } => {
            let (key, info) = app.key_create(&tenant).await?;
            eprintln!("created key {} for tenant '{}'; it is shown once:", info.id, info.tenant);
            println!("{key}");
        }
        KeysAction::List => {
            println!("{:<36}  {:<14}  {:<25}  TENANT", "ID", "PREFIX", "CREATED");
            for k in app.key_list().await? {
                println!("{:<36}  {:<14}  {:<25}  {}", k.id, k.prefix, k.created_at.to_rfc3339(), k.tenant);
            }
        }
        KeysAction::Revoke { key } => {
            let info = app.key_revoke(&key).await?;
            println!("revoked key {} ({}) of tenant '{}'", info.id, info.prefix, info.tenant);
        }
    }
    Ok(())
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    // Listen for SIGTERM before the key is printed: a caller may stop us as soon as it has it.
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| anyhow::anyhow!("cannot listen for SIGTERM: {e}"))?;
    let running = agent_platform::server::start(&cfg).await?;
    let addr = running.local_addr();
    eprintln!("agent-platform {} listening on http://{addr}", env!("CARGO_PKG_VERSION"));
    let accepted_loss = match &running.store {
        Backend::Sled(sled) => {
            let opened = sled.opened();
            eprintln!(
                "  store:   {} (sled, {opened}, durability: {:?})",
                cfg.server.data_dir.display(),
                cfg.server.durability
            );
            match &opened.origin {
                Origin::AcceptedLoss(what) => Some(what.clone()),
                _ => None,
            }
        }
        Backend::Postgres(pg) => {
            eprintln!(
                "  store:   postgres at {} ({}, pool of {})",
                pg.target(),
                if pg.is_new() { "schema created" } else { "schema up to date" },
                cfg.store.pool_size
            );
            eprintln!(
                "  search:  in the database (full text: GIN; vectors: {})",
                match pg.pgvector() {
                    Some(v) => format!("pgvector {v}"),
                    None => "in the server, no pgvector".to_string(),
                }
            );
            if pg.indexed_at_start() > 0 {
                eprintln!(
                    "  indexed {} documents written before search was in the database",
                    pg.indexed_at_start()
                );
            }
            None
        }
    };
    if let Some(what) = &accepted_loss {
        eprintln!("  accepted data loss: {what}; what the store holds now is its new checkpoint");
        if running.app.no_keys().await? {
            eprintln!(
                "  it holds no API key: stop the server and run `agent-platform keys create --data-dir {}`",
                cfg.server.data_dir.display()
            );
        }
    }
    eprintln!("  health:  curl http://{addr}/api/healthz");
    eprintln!("  spec:    http://{addr}/api/openapi.json");
    if cfg.server.console {
        eprintln!("  console: http://{addr}/console");
    }
    let models = &running.server.app_private().app.models;
    if models.is_empty() {
        eprintln!("  models:  none (chat answers 503; set OPENAI_BASE_URL or add [[models.providers]])");
    } else {
        for p in models.list() {
            eprintln!("  models:  provider '{}' at {}", p.name(), p.base_url());
        }
        eprintln!(
            "  default model: {}",
            models.default_model().unwrap_or("(none: requests or agents name it)")
        );
    }
    if let Some(key) = &running.first_key {
        eprintln!("  The store is new, so an API key was created for tenant 'default'.");
        eprintln!("  It is shown this once; keep it (more with `agent-platform keys create`):");
        println!("{key}");
    }
    shutdown_signal(term).await;
    eprintln!("shutting down: finishing requests under way, flushing the store");
    running.shutdown().await
}

async fn shutdown_signal(mut term: tokio::signal::unix::Signal) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
