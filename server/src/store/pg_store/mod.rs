//! The PostgreSQL backend: the [`Store`] trait over one table of records, for
//! any number of servers sharing one database.
//!
//! This module owns connecting (a pool of connections, TLS unless the URL says
//! `sslmode=disable`), the schema (versioned migrations in `migrations/`, run
//! at start; a schema newer than this binary is refused), and the trait's
//! reads and atomic commits, each one transaction. Nothing a server keeps in
//! memory is the truth here: other servers write too, and what they change is
//! heard through [`Store::changes`].

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{ClientWrapper, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;
use uuid::Uuid;

use super::{DocSearch, Domain, Kind, ListQuery, Op, Record, Store, StoreError, StoreResult};
use crate::config::StoreConfig;
use crate::search::{Hit, OwnerKey, Query, SearchError};

mod commit;
mod errors;
mod notify;
mod read;
mod rows;
mod search;

use errors::Fault;

/// The primary key of `records`, as a unique violation names it.
const PKEY: &str = "records_pkey";
/// The unique index of names within a scope, as a unique violation names it.
const UNIQUE_NAME: &str = "records_unique_name";
/// How many times a commit runs when concurrent transactions keep
/// conflicting with it (serialization failures, deadlocks).
const COMMIT_ATTEMPTS: u32 = 8;

/// How many connections reads of one record by id share (see `PgStore::shared`).
const SHARED_READERS: usize = 2;

/// How many times a start runs the migrations when another server's start
/// migrates the same empty database at the same moment.
const MIGRATE_ATTEMPTS: u32 = 5;

mod embedded {
    refinery::embed_migrations!("src/store/pg_store/migrations");
}

/// A store in a PostgreSQL database.
pub struct PgStore {
    pool: Pool,
    /// Where the database is, without credentials: for messages and the banner.
    target: String,
    /// The longest any operation takes before it answers
    /// [`StoreError::Unavailable`]: a wait for a connection (or opening one),
    /// then its statements. Kept by the client too, so that a database that
    /// does not answer at all cannot hold a request.
    op_timeout: Duration,
    /// Whether this start created the schema (the database held no store before).
    created: bool,
    /// Hears every server's commits (see [`notify`]).
    listener: notify::Listener,
    /// Which changes to tell, where docs keep what search indexes.
    domain: Domain,
    /// pgvector's version, when the database has it (see [`search`]).
    pgvector: Option<String>,
    /// How many documents written before search was in the database this start indexed.
    indexed: u64,
    /// Connections that reads of one record by id share (see [`PgStore::shared`]).
    shared: Box<[std::sync::Mutex<Option<Arc<Conn>>>]>,
    next_shared: std::sync::atomic::AtomicUsize,
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
    /// newer than this binary knows. `domain` says which changes other
    /// servers act on and how docs are indexed.
    pub async fn connect(cfg: &StoreConfig, domain: Domain) -> anyhow::Result<PgStore> {
        let url = cfg.url.as_deref().ok_or_else(|| anyhow::anyhow!("store.url is not set"))?;
        let mut pg: tokio_postgres::Config =
            url.parse().map_err(|e| anyhow::anyhow!("store.url is not a PostgreSQL URL: {e}"))?;
        let target = describe(&pg);
        let statement_timeout = Duration::from_secs_f64(cfg.statement_timeout_s);
        let connect_timeout = Duration::from_secs_f64(cfg.connect_timeout_s);
        pg.connect_timeout(connect_timeout);
        pg.application_name("agent-platform");
        // No JIT: it compiles for a statement the planner thinks costly (a
        // search scoring many snippets) and takes longer than the statement.
        pg.options(format!("-c statement_timeout={} -c jit=off", statement_timeout.as_millis()));
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
        // Of servers starting together on an empty database, only the one
        // whose migration created the schema applied V1: the others' failed
        // on its tables and, run again, found it applied.
        let created = migrate(&pool, &target).await?;
        let op_timeout = statement_timeout + connect_timeout;
        let mut client =
            pool.get().await.map_err(|e| anyhow::anyhow!("{}", errors::pool_error(&target, &e)))?;
        let pgvector = search::pgvector(&client).await;
        let indexed = search::backfill(&mut client, &domain.docs).await.map_err(|f| {
            let e = match f {
                Fault::Store(e) => e,
                Fault::Db(e) => errors::store_error(&target, &e),
            };
            anyhow::anyhow!("cannot index the documents written before search was in the database: {e}")
        })?;
        drop(client);
        let shared = (0..if cfg.pool_size >= 4 { SHARED_READERS } else { 0 })
            .map(|_| std::sync::Mutex::new(None))
            .collect();
        Ok(PgStore {
            pool,
            target,
            op_timeout,
            created,
            listener,
            domain,
            pgvector,
            indexed,
            shared,
            next_shared: Default::default(),
        })
    }

    /// Whether this start created the schema: the database held no store before.
    pub fn is_new(&self) -> bool {
        self.created
    }

    /// pgvector's version, when the database has the extension: vector
    /// search is then computed by the database, else by the server.
    pub fn pgvector(&self) -> Option<&str> {
        self.pgvector.as_deref()
    }

    /// How many documents written before search was in the database
    /// (an older schema) this start indexed.
    pub fn indexed_at_start(&self) -> u64 {
        self.indexed
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
        for slot in &self.shared {
            slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        self.pool.close();
    }

    /// A connection that reads of one record share: tokio-postgres sends the
    /// statements of concurrent reads on one connection together and reads
    /// their answers together, so many reads cost a few system calls on each
    /// side rather than a few each. Taken from the pool and kept until it is
    /// found closed, a read finds it lost or a read on it runs out of time:
    /// then it is closed (as a failed connection of the pool is) and the next
    /// read takes another. `None` when the pool is too small to spare them.
    async fn shared(&self) -> StoreResult<Option<Arc<Conn>>> {
        if self.shared.is_empty() {
            return Ok(None);
        }
        let slot = &self.shared[self.next_shared.fetch_add(1, Ordering::Relaxed) % self.shared.len()];
        if let Some(c) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref().filter(|c| !c.is_closed()) {
            return Ok(Some(c.clone()));
        }
        let fresh = Arc::new(self.conn().await?);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh.clone());
        Ok(Some(fresh))
    }

    /// A connection from the pool (opening one if none is free), within the pool's timeouts.
    async fn conn(&self) -> StoreResult<Conn> {
        match self.pool.get().await {
            Ok(c) => Ok(Conn(Some(c))),
            Err(e) => Err(errors::pool_error(&self.target, &e)),
        }
    }

    /// `work`, or [`StoreError::Unavailable`] once it has taken [`PgStore::op_timeout`].
    async fn bounded<T>(&self, work: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        match tokio::time::timeout(self.op_timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(errors::unavailable(
                &self.target,
                format_args!("no answer within {} s", self.op_timeout.as_secs_f64()),
            )),
        }
    }

    /// Gives a connection back to the pool, unless what it answered says it
    /// is no good for the next operation (lost, or to a database that is now
    /// a standby): then it is closed, and the pool opens a new one.
    fn finish<T>(&self, conn: Conn, outcome: &Result<T, Fault>) {
        match outcome {
            Err(Fault::Db(e)) if errors::spoils_connection(e) => drop(conn),
            _ => conn.release(),
        }
    }

    fn fault(&self, f: Fault) -> StoreError {
        match f {
            Fault::Store(e) => e,
            Fault::Db(e) => errors::store_error(&self.target, &e),
        }
    }

    /// Runs a commit's transaction until it does not conflict with another,
    /// a bounded number of times, with a growing random pause between runs.
    async fn commit_retrying(&self, tenant: Uuid, ops: &[Op], committing: &AtomicBool) -> StoreResult<()> {
        let docs = search::prepare(ops, &self.domain.docs).await?;
        let (mut attempt, mut lost_once) = (0, false);
        loop {
            attempt += 1;
            let mut conn = self.conn().await?;
            let outcome = commit::run(&mut conn, tenant, ops, &docs, self.domain.heard, committing).await;
            self.finish(conn, &outcome);
            let e = match outcome {
                Ok(()) => return Ok(()),
                Err(Fault::Store(e)) => return Err(e),
                Err(Fault::Db(e)) => e,
            };
            let committed = committing.load(Ordering::Acquire);
            if committed && errors::connection_lost(&e) {
                return Err(self.outcome_unknown(errors::with_causes(&e)));
            }
            // A connection lost before the COMMIT was sent took the
            // transaction with it: run it again, once, on another.
            let lost_before_commit = !committed && errors::connection_lost(&e) && !lost_once;
            lost_once |= lost_before_commit;
            if !(lost_before_commit || errors::is_conflict(&e)) || attempt >= COMMIT_ATTEMPTS {
                return Err(errors::store_error(&self.target, &e));
            }
            committing.store(false, Ordering::Release);
            let pause_ms = rand::random_range(1..=(4u64 << attempt));
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
    }

    fn outcome_unknown(&self, what: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable(format!(
            "the database at {} did not confirm the write ({what}): it may or may not have been saved; \
             retry it with the same Idempotency-Key",
            self.target
        ))
    }
}

/// Runs the migrations, again when a concurrent start made them fail.
/// Answers whether this start applied the first one (created the schema),
/// in any attempt: one that applied it may fail on a later migration that a
/// concurrent start applied meanwhile.
async fn migrate(pool: &Pool, target: &str) -> anyhow::Result<bool> {
    let created_by = |report: Option<&refinery::Report>| {
        report.is_some_and(|r| r.applied_migrations().iter().any(|m| m.version() == 1))
    };
    let mut created = false;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut client =
            pool.get().await.map_err(|e| anyhow::anyhow!("{}", errors::pool_error(target, &e)))?;
        match embedded::migrations::runner().set_abort_missing(true).run_async(&mut **client).await {
            Ok(report) => return Ok(created || created_by(Some(&report))),
            // A statement failed: most likely another server creating the
            // same tables at the same moment (its transaction won; ours, run
            // again, finds the migration applied).
            Err(e)
                if attempt < MIGRATE_ATTEMPTS
                    && matches!(e.kind(), refinery::error::Kind::Connection(..)) =>
            {
                created |= created_by(e.report());
                drop(client);
                tokio::time::sleep(Duration::from_millis(rand::random_range(20..=200))).await;
            }
            Err(e) if matches!(e.kind(), refinery::error::Kind::MissingVersion(..)) => anyhow::bail!(
                "the database at {target} has a schema newer than this binary knows ({e}): \
                 run the newer agent-platform that migrated it"
            ),
            Err(e) => {
                anyhow::bail!(
                    "cannot bring the schema of the database at {target} up to date: {}",
                    errors::with_causes(&e)
                )
            }
        }
    }
}

/// A pooled connection, taken out of the pool (closed) when dropped without
/// [`Conn::release`]: an operation given up on may have left it waiting for
/// an answer, and the next one must not queue behind that.
struct Conn(Option<Object>);

impl Conn {
    /// Gives the connection back to the pool.
    fn release(mut self) {
        self.0.take();
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            drop(Object::take(c));
        }
    }
}

impl Deref for Conn {
    type Target = ClientWrapper;
    fn deref(&self) -> &ClientWrapper {
        self.0.as_ref().expect("a connection until released")
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        self.0.as_mut().expect("a connection until released")
    }
}

/// A shared connection a read is waiting on: forgotten by the store when
/// dropped before [`Unanswered::answered`] (the connection was lost, or the
/// read's time ran out).
struct Unanswered<'a>(&'a PgStore, Option<Arc<Conn>>);

impl Unanswered<'_> {
    fn answered(mut self) {
        self.1.take();
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.1.take() {
            for slot in &self.0.shared {
                let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                if slot.as_ref().is_some_and(|held| Arc::ptr_eq(held, &c)) {
                    slot.take();
                }
            }
        }
    }
}

/// Runs a read on a pooled connection, within [`PgStore::op_timeout`]. A read
/// whose connection turns out lost (the database restarted, or ended it, and
/// the pool had not noticed yet) runs once more, on another connection.
macro_rules! read {
    ($store:ident, |$c:ident| $read:expr) => {
        $store
            .bounded(async {
                let mut retried = false;
                loop {
                    let conn = $store.conn().await?;
                    let outcome = {
                        let $c: &ClientWrapper = &conn;
                        $read.await
                    };
                    match outcome {
                        Err(Fault::Db(e)) if !retried && errors::connection_lost(&e) => {
                            drop(conn);
                            retried = true;
                        }
                        outcome => {
                            $store.finish(conn, &outcome);
                            return outcome.map_err(|f| $store.fault(f));
                        }
                    }
                }
            })
            .await
    };
}

#[async_trait]
impl Store for PgStore {
    async fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        self.bounded(async {
            if let Some(c) = self.shared().await? {
                // Forgotten unless it answers: a connection that did not
                // answer in time may never (a peer gone without a word).
                let unanswered = Unanswered(self, Some(c.clone()));
                match read::get(&c, tenant, kind, id).await {
                    // Lost: the read runs again below, on a connection of the pool.
                    Err(Fault::Db(e)) if errors::connection_lost(&e) => drop(unanswered),
                    outcome => {
                        unanswered.answered();
                        return outcome.map_err(|f| self.fault(f));
                    }
                }
            }
            read!(self, |c| read::get(c, tenant, kind, id))
        })
        .await
    }

    async fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
        read!(self, |c| read::list(c, tenant, kind, scope, q))
    }

    async fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>> {
        read!(self, |c| read::referencing(c, tenant, kind, target))
    }

    async fn lookup_unique(
        &self,
        tenant: Uuid,
        kind: Kind,
        scope: Uuid,
        name: &str,
    ) -> StoreResult<Option<Uuid>> {
        read!(self, |c| read::lookup_unique(c, tenant, kind, scope, name))
    }

    async fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        let mut all: Vec<(Uuid, Record)> = Vec::new();
        loop {
            let after = all.last().map(|(tenant, r)| (*tenant, r.id));
            let chunk = read!(self, |c| read::scan_kind_after(c, kind, after))?;
            let done = (chunk.len() as i64) < read::SCAN_CHUNK;
            all.extend(chunk);
            if done {
                return Ok(all);
            }
        }
    }

    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let committing = AtomicBool::new(false);
        match tokio::time::timeout(self.op_timeout, self.commit_retrying(tenant, &ops, &committing)).await {
            Ok(r) => r,
            Err(_) if committing.load(Ordering::Acquire) => {
                Err(self
                    .outcome_unknown(format_args!("no answer within {} s", self.op_timeout.as_secs_f64())))
            }
            Err(_) => Err(errors::unavailable(
                &self.target,
                format_args!(
                    "no answer within {} s, so the write was not saved",
                    self.op_timeout.as_secs_f64()
                ),
            )),
        }
    }

    async fn health(&self) -> StoreResult<()> {
        self.bounded(async {
            let c = self.conn().await?;
            let outcome = c.simple_query("SELECT 1").await.map(drop).map_err(Fault::Db);
            self.finish(c, &outcome);
            outcome.map_err(|f| self.fault(f))
        })
        .await
    }

    fn shared(&self) -> bool {
        true
    }

    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<super::Change>> {
        Some(self.listener.subscribe())
    }

    fn doc_search(&self) -> Option<&dyn DocSearch> {
        Some(self)
    }
}

#[async_trait]
impl DocSearch for PgStore {
    async fn search_owner(&self, owner: OwnerKey, q: &Query) -> StoreResult<Result<Vec<Hit>, SearchError>> {
        if let Err(e) = q.validate() {
            return Ok(Err(e));
        }
        if q.limit == 0 {
            return Ok(Ok(Vec::new()));
        }
        let pgvector = self.pgvector.is_some();
        read!(self, |c| search::search(c, owner, q, pgvector))
    }

    async fn owner_snippets(&self, owner: OwnerKey) -> StoreResult<usize> {
        read!(self, |c| search::owner_snippets(c, owner))
    }

    async fn owner_dimension(&self, owner: OwnerKey) -> StoreResult<Option<usize>> {
        read!(self, |c| search::owner_dimension(c, owner))
    }
}

/// Test databases are named in SQL as they are given: letters, digits and _ only.
fn check_database_name(name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "a database name of lowercase letters, digits and _ only: {name:?}"
    );
    Ok(())
}

/// Creates a new, empty database `name` through the server at `admin_url`
/// (any database of it that the URL's user may connect to, with the right to
/// create databases) and answers the URL of the new one: for tests, which
/// give each server a database of its own.
pub async fn create_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    check_database_name(name)?;
    admin_statement(admin_url, &format!("CREATE DATABASE {name}")).await?;
    Ok(with_dbname(admin_url, name))
}

/// Drops database `name` (closing its connections) through the server at
/// `admin_url`; nothing if it does not exist. For tests, after [`create_database`].
pub async fn drop_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    check_database_name(name)?;
    admin_statement(admin_url, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await
}

/// How many connections of agent-platform servers (their pools and
/// listeners, by `application_name`) database `name` has, through the server
/// at `admin_url`. For tests: a killed server's transactions are settled (its
/// pipelined `COMMIT` carried out or not) once its connections are gone.
pub async fn servers_connected(admin_url: &str, name: &str) -> anyhow::Result<i64> {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'agent-platform%'";
    let row = on_admin_connection(admin_url, |client, target| async move {
        client.query_one(sql, &[&name]).await.map_err(|e| anyhow::anyhow!("`{sql}` failed at {target}: {e}"))
    })
    .await?;
    Ok(row.get(0))
}

/// Runs one statement on a connection of its own to the server at `admin_url`.
async fn admin_statement(admin_url: &str, sql: &str) -> anyhow::Result<()> {
    on_admin_connection(admin_url, |client, target| async move {
        client.batch_execute(sql).await.map_err(|e| anyhow::anyhow!("`{sql}` failed at {target}: {e}"))
    })
    .await
}

/// Runs `f` on a connection of its own to the server at `admin_url` (given
/// the connection, which it closes by dropping, and the server's description).
async fn on_admin_connection<T, F, Fut>(admin_url: &str, f: F) -> anyhow::Result<T>
where
    F: FnOnce(tokio_postgres::Client, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let cfg: tokio_postgres::Config =
        admin_url.parse().map_err(|e| anyhow::anyhow!("not a PostgreSQL URL: {e}"))?;
    let target = describe(&cfg);
    let (client, connection) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {target}: {e}"))?;
    let driver = tokio::spawn(connection);
    let answer = f(client, target).await;
    let _ = driver.await;
    answer
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
