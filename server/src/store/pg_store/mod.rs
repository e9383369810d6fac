//! The PostgreSQL backend: the [`Store`] trait over one table of records, for
//! any number of servers sharing one database.
//!
//! This module owns connecting (a pool of connections, TLS unless the URL says
//! `sslmode=disable`), the schema (versioned migrations in `migrations/`, run
//! at start; a schema newer than this binary is refused), and the trait's
//! reads and atomic commits, each one transaction. Nothing a server keeps in
//! memory is the truth here: other servers write too, and what they change is
//! heard through [`Store::changes`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;
use uuid::Uuid;

use super::{Kind, ListQuery, Op, Record, Store, StoreError, StoreResult};
use crate::config::StoreConfig;

mod notify;
mod search;
#[cfg(test)]
pub mod testing;

mod embedded {
    refinery::embed_migrations!("src/store/pg_store/migrations");
}

/// A store in a PostgreSQL database.
pub struct PgStore {
    pool: Pool,
    /// Where the database is, without credentials: for messages and the banner.
    target: String,
    statement_timeout: Duration,
    /// Whether this start created the schema (the database held no store before).
    created: bool,
    /// Hears every server's commits (see [`notify`]).
    listener: notify::Listener,
}

/// `host:port/dbname` of a connection config, never its user or password.
fn describe(cfg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = cfg.get_ports().get(i).or(cfg.get_ports().first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    format!("{}/{}", hosts.join(","), cfg.get_dbname().unwrap_or("(default database)"))
}

fn tls() -> anyhow::Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| anyhow::anyhow!("cannot set up TLS to the database: {e}"))?
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

impl PgStore {
    /// Connects to the database of `cfg.url` and brings its schema up to this
    /// binary's (creating it in an empty database). Fails, saying why, when the
    /// database cannot be reached within `connect_timeout_s`, or its schema is
    /// newer than this binary knows.
    pub async fn connect(cfg: &StoreConfig) -> anyhow::Result<PgStore> {
        let url = cfg.url.as_deref().ok_or_else(|| anyhow::anyhow!("store.url is not set"))?;
        let mut pg: tokio_postgres::Config =
            url.parse().map_err(|e| anyhow::anyhow!("store.url is not a PostgreSQL URL: {e}"))?;
        let target = describe(&pg);
        let statement_timeout = Duration::from_secs_f64(cfg.statement_timeout_s);
        let connect_timeout = Duration::from_secs_f64(cfg.connect_timeout_s);
        pg.connect_timeout(connect_timeout);
        pg.application_name("agent-platform");
        pg.options(format!("-c statement_timeout={}", statement_timeout.as_millis()));
        let listener = notify::Listener::start(pg.clone(), target.clone());
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match pg.get_ssl_mode() {
            SslMode::Disable => Manager::from_config(pg, tokio_postgres::NoTls, manager_config),
            _ => Manager::from_config(pg, tls()?, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(cfg.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(statement_timeout))
            .create_timeout(Some(connect_timeout))
            .recycle_timeout(Some(statement_timeout))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up the connection pool: {e}"))?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to the database at {target}: {e}"))?;
        let report =
            embedded::migrations::runner().set_abort_missing(true).run_async(&mut **client).await.map_err(
                |e| anyhow::anyhow!("cannot bring the schema of the database at {target} up to date: {e}"),
            )?;
        let created = report.applied_migrations().iter().any(|m| m.version() == 1);
        drop(client);
        Ok(PgStore { pool, target, statement_timeout, created, listener })
    }

    /// Whether this start created the schema: the database held no store before.
    pub fn is_new(&self) -> bool {
        self.created
    }

    /// `host:port/dbname`, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The pool of connections (for the other parts of this backend).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Closes the pool (requests still waiting for a connection answer 503)
    /// and stops listening for changes.
    pub fn close(&self) {
        self.listener.stop();
        self.pool.close();
    }

    #[allow(dead_code)]
    fn unavailable(&self, what: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable(format!("the database at {} does not answer: {what}", self.target))
    }
}

#[async_trait]
impl Store for PgStore {
    async fn get(&self, _tenant: Uuid, _kind: Kind, _id: Uuid) -> StoreResult<Option<Record>> {
        let _ = self.statement_timeout;
        Err(self.unavailable("not built yet"))
    }

    async fn list(
        &self,
        _tenant: Uuid,
        _kind: Kind,
        _scope: Uuid,
        _q: &ListQuery,
    ) -> StoreResult<Vec<Record>> {
        Err(self.unavailable("not built yet"))
    }

    async fn referencing(&self, _tenant: Uuid, _kind: Kind, _target: Uuid) -> StoreResult<Vec<Uuid>> {
        Err(self.unavailable("not built yet"))
    }

    async fn lookup_unique(
        &self,
        _tenant: Uuid,
        _kind: Kind,
        _scope: Uuid,
        _name: &str,
    ) -> StoreResult<Option<Uuid>> {
        Err(self.unavailable("not built yet"))
    }

    async fn scan_kind(&self, _kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        Err(self.unavailable("not built yet"))
    }

    async fn commit(&self, _tenant: Uuid, _ops: Vec<Op>) -> StoreResult<()> {
        Err(self.unavailable("not built yet"))
    }

    fn shared(&self) -> bool {
        true
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<super::Change>> {
        Some(self.listener.subscribe())
    }
}

/// Creates a new, empty database `name` through the server at `admin_url`
/// (any database of it that the URL's user may connect to, with the right to
/// create databases) and answers the URL of the new one: for tests, which
/// give each server a database of its own.
pub async fn create_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "a database name of lowercase letters, digits and _ only: {name:?}"
    );
    let cfg: tokio_postgres::Config =
        admin_url.parse().map_err(|e| anyhow::anyhow!("not a PostgreSQL URL: {e}"))?;
    let target = describe(&cfg);
    let (client, connection) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {target}: {e}"))?;
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| anyhow::anyhow!("cannot create database {name} at {target}: {e}"))?;
    drop(client);
    let _ = driver.await;
    Ok(with_dbname(admin_url, name))
}

/// `url` with its database name replaced by `name` (the path of a URL, or the
/// `dbname=` of a key=value string).
pub fn with_dbname(url: &str, name: &str) -> String {
    if let Some(rest) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) {
        let (before_query, query) = match rest.find('?') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let authority = before_query.split('/').next().unwrap_or(before_query);
        format!("postgres://{authority}/{name}{query}")
    } else {
        format!("{url} dbname={name}")
    }
}

#[cfg(test)]
mod url_tests {
    use super::with_dbname;

    #[test]
    fn the_database_name_of_a_url_is_replaced() {
        assert_eq!(
            with_dbname("postgres://u:p@h:5/postgres?sslmode=disable", "t_1"),
            "postgres://u:p@h:5/t_1?sslmode=disable"
        );
        assert_eq!(with_dbname("postgresql://h", "x"), "postgres://h/x");
        assert_eq!(with_dbname("host=h user=u", "x"), "host=h user=u dbname=x");
    }
}
