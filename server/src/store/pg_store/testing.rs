//! Databases for tests of the PostgreSQL backend: each test gets a new, empty
//! one on the server named by `AGENT_PLATFORM_TEST_DATABASE_URL`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::PgStore;
use crate::config::{StoreBackend, StoreConfig};

/// The variable naming a PostgreSQL server for tests (a URL whose user may create databases).
pub const TEST_DATABASE_URL: &str = "AGENT_PLATFORM_TEST_DATABASE_URL";

/// The URL of a new database named after `prefix`, or `None` (with a note)
/// when no test server is configured. Under `CI=true` a missing server fails
/// the test instead: CI must run these.
pub async fn fresh_database(prefix: &str) -> Option<String> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let Ok(admin) = std::env::var(TEST_DATABASE_URL) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{TEST_DATABASE_URL} is not set: CI runs the PostgreSQL tests"
        );
        eprintln!("skipped: set {TEST_DATABASE_URL} to run the PostgreSQL tests");
        return None;
    };
    let micros = chrono::Utc::now().timestamp_micros();
    let name = format!("{prefix}_{}_{}_{micros}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed));
    Some(super::create_database(&admin, &name).await.expect("a test database"))
}

/// A store on the database at `url`, as a server would open it.
pub async fn connect(url: &str) -> PgStore {
    let cfg = StoreConfig { backend: StoreBackend::Postgres, url: Some(url.into()), ..Default::default() };
    PgStore::connect(&cfg).await.expect("the test database")
}
