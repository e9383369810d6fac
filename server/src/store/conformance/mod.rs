//! The rules of the [`Store`] trait, checked on both backends: every rule in
//! `rules` runs on a sled store in a temporary directory, then on a
//! PostgreSQL store in a database of its own, made through
//! `AGENT_PLATFORM_TEST_DATABASE_URL` (a URL of any database of a server
//! whose user may create databases). Without that variable the PostgreSQL
//! half is skipped, with a note; under `CI=true` it fails instead. What only
//! PostgreSQL has to keep (servers racing on one database, the database
//! failing) is in `faults`.

mod faults;
mod rules;
mod search;

use std::sync::Arc;

use super::Store;
use super::pg_store::{self, PgStore};
use super::sled_store::{Durability, SledStore};
use crate::app::records::STORE_DOMAIN;
use crate::config::{StoreBackend, StoreConfig};

/// The variable naming the PostgreSQL server the tests make databases on.
const DATABASE_URL_VAR: &str = "AGENT_PLATFORM_TEST_DATABASE_URL";

/// A database of its own for one test, dropped by [`TestDb::drop`].
pub(crate) struct TestDb {
    admin_url: String,
    pub(crate) name: String,
    pub(crate) url: String,
}

impl TestDb {
    /// A new empty database, or `None` (with a note) when no server is
    /// configured and this is not CI.
    pub(crate) async fn create() -> Option<TestDb> {
        let Some(admin_url) = std::env::var(DATABASE_URL_VAR).ok().filter(|u| !u.trim().is_empty()) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{DATABASE_URL_VAR} is not set: under CI=true the PostgreSQL half of the store's tests must run"
            );
            eprintln!("note: {DATABASE_URL_VAR} is not set: the PostgreSQL half of this test is skipped");
            return None;
        };
        let name = format!("store_test_{}", uuid::Uuid::now_v7().simple());
        let url = pg_store::create_database(&admin_url, &name).await.expect("create a test database");
        Some(TestDb { admin_url, name, url })
    }

    /// The store settings for this database.
    pub(crate) fn config(&self) -> StoreConfig {
        StoreConfig {
            backend: StoreBackend::Postgres,
            url: Some(self.url.clone()),
            pool_size: 8,
            statement_timeout_s: 10.0,
            connect_timeout_s: 5.0,
        }
    }

    pub(crate) async fn store(&self) -> PgStore {
        PgStore::connect(&self.config(), STORE_DOMAIN).await.expect("connect to the test database")
    }

    /// A plain connection to this database, for what a test does behind the store's back.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    /// Drops the database (closing whatever is still connected to it).
    pub(crate) async fn drop(self) {
        let _ = pg_store::drop_database(&self.admin_url, &self.name).await;
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Runs `rule` on a new sled store, then on a new PostgreSQL store (when configured).
async fn on_both(rule: impl AsyncFn(&dyn Store)) {
    let dir = tempfile::tempdir().unwrap();
    let sled = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    eprintln!("on sled:");
    rule(&*sled).await;
    sled.close();
    if let Some(db) = TestDb::create().await {
        eprintln!("on PostgreSQL ({}):", db.name);
        let pg = db.store().await;
        rule(&pg).await;
        pg.close();
        db.drop().await;
    }
}
