//! Which store the tests' servers run on: sled (the default) or PostgreSQL,
//! chosen for the whole run by `AGENT_PLATFORM_TEST_BACKEND=postgres`, with
//! `AGENT_PLATFORM_TEST_DATABASE_URL` the URL of a PostgreSQL server whose
//! user may create databases (`.ci/postgres` starts a throw-away one).
//!
//! On PostgreSQL every server gets a database of its own, named after its
//! data dir, so that a restart on the same data dir (or a `keys` command run
//! on it) finds the same store, as it would on sled.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The admin URL when the run is on PostgreSQL; `None` on sled.
pub fn postgres() -> Option<&'static str> {
    static CHOSEN: OnceLock<Option<String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| match std::env::var("AGENT_PLATFORM_TEST_BACKEND").as_deref() {
            Ok("postgres") => Some(std::env::var("AGENT_PLATFORM_TEST_DATABASE_URL").unwrap_or_else(|_| {
                panic!(
                    "AGENT_PLATFORM_TEST_BACKEND=postgres needs AGENT_PLATFORM_TEST_DATABASE_URL: the URL of a \
                     PostgreSQL server whose user may create databases (`eval \"$(.ci/postgres start DIR)\"` \
                     starts a throw-away one)"
                )
            })),
            Ok("sled") | Ok("") | Err(_) => None,
            Ok(other) => panic!("AGENT_PLATFORM_TEST_BACKEND={other:?}: expected sled or postgres"),
        })
        .as_deref()
}

/// True (and says so) when the run is on PostgreSQL and the calling test is
/// about sled itself: it then returns early.
pub fn sled_only(why: &str) -> bool {
    if postgres().is_some() {
        eprintln!("skipped on PostgreSQL (sled only: {why})");
        return true;
    }
    false
}

/// True (and says so) when the run is on sled and the calling test needs
/// PostgreSQL (several servers on one database): it then returns early.
pub fn postgres_only(why: &str) -> bool {
    if postgres().is_none() {
        eprintln!("skipped on sled (PostgreSQL only: {why}; run with AGENT_PLATFORM_TEST_BACKEND=postgres)");
        return true;
    }
    false
}

/// The name of the database of a data dir.
pub fn database_name(data_dir: &Path) -> String {
    let path = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(path);
    format!("e2e_{hash:016x}")
}

/// Databases this process created.
fn created() -> &'static Mutex<HashSet<String>> {
    static CREATED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    CREATED.get_or_init(Default::default)
}

/// Runs `f` to completion on a runtime of its own, on a thread of its own
/// (callable from async code and from plain threads alike).
fn block_on<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime").block_on(f)
    })
    .join()
    .expect("the database call did not panic")
}

/// On PostgreSQL: the URL of the data dir's database, and whether this call
/// created it (a new store); `None` on sled.
pub fn database_for(data_dir: &Path) -> Option<(String, bool)> {
    let admin = postgres()?;
    let name = database_name(data_dir);
    let url = agent_platform::store::pg_store::with_dbname(admin, &name);
    if !created().lock().unwrap().insert(name.clone()) {
        return Some((url, false));
    }
    let made = block_on({
        let (admin, name) = (admin.to_string(), name.clone());
        async move { agent_platform::store::pg_store::create_database(&admin, &name).await }
    });
    match made {
        Ok(url) => Some((url, true)),
        Err(e) => panic!("cannot make the test database {name}: {e:#}"),
    }
}

/// Drops the data dir's database, if this process made it (in the background:
/// a test never waits for it).
pub fn forget_database(data_dir: &Path) {
    let Some(admin) = postgres() else { return };
    let name = database_name(data_dir);
    if !created().lock().unwrap().remove(&name) {
        return;
    }
    let admin = admin.to_string();
    std::thread::spawn(move || {
        let _ = block_on(async move { agent_platform::store::pg_store::drop_database(&admin, &name).await });
    });
}

/// On PostgreSQL, after a server of `data_dir` was killed: waits until the
/// database has no connection of any agent-platform server left. A killed
/// server's transaction sent whole (`BEGIN` ... `COMMIT` in one pipeline) and
/// waiting on a lock (a deadlock takes `deadlock_timeout` to break) is still
/// carried out when the lock frees, after its client is gone; only once its
/// connection has ended is its fate settled. Panics after 30 s (a statement
/// ends within the server's `statement_timeout`, 10 s by default). Answers
/// how long it waited. Nothing on sled.
pub fn wait_until_no_server_is_connected(data_dir: &Path) -> std::time::Duration {
    let started = std::time::Instant::now();
    let Some(admin) = postgres() else { return started.elapsed() };
    let name = database_name(data_dir);
    let deadline = started + std::time::Duration::from_secs(30);
    loop {
        let connected = block_on({
            let (admin, name) = (admin.to_string(), name.clone());
            async move { agent_platform::store::pg_store::servers_connected(&admin, &name).await }
        })
        .unwrap_or_else(|e| panic!("cannot count the connections to {name}: {e:#}"));
        if connected == 0 {
            return started.elapsed();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{connected} connections of a killed server to {name} are still open after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The environment that points the binary at the data dir's database (none on sled).
pub fn env_for(data_dir: &Path) -> Vec<(String, String)> {
    database_for(data_dir).map(|(url, _)| env_of(url)).unwrap_or_default()
}

/// The environment that points the binary at the database at `url`.
pub fn env_of(url: String) -> Vec<(String, String)> {
    vec![
        ("AGENT_PLATFORM_STORE_BACKEND".into(), "postgres".into()),
        ("AGENT_PLATFORM_DATABASE_URL".into(), url),
    ]
}
