//! The same HTTP load on each backend, every server a real process of the
//! release binary: sled; PostgreSQL with one server; PostgreSQL with two
//! servers on one database, the clients split between them. Each server
//! process is pinned to a core of its own with `taskset` when the machine has
//! the cores (the figures say which cores each got).
//!
//! Needs a PostgreSQL server: `AGENT_PLATFORM_BENCH_DATABASE_URL` is a URL of
//! it whose user may create databases (each run makes fresh ones). Without it
//! this part is skipped, saying so. Durable writes need the cluster's `fsync`
//! on (the default): one started with `fsync=off` gives figures of no use.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Duration;

use super::process::{self, binary};
use super::{Figures, Req, agent_create, create_agent, load};

const SECS: f64 = 4.0;

/// A server process on a data dir of its own, killed when dropped.
struct Server {
    process: process::Server,
    /// The first key, printed by the server that created the store.
    key: Option<String>,
    _dir: tempfile::TempDir,
}

/// Starts `bin serve` (on `cpu` when given) with `env`, and waits for its address.
fn spawn(bin: &Path, cpu: Option<usize>, env: &[(&str, String)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut process = process::serve(bin, &dir.path().join("data"), cpu, env, Duration::from_secs(60));
    // The key comes on stdout after the banner, only from a new store; the
    // banner's last line precedes it, so a short read decides.
    let stdout = process.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
    });
    let key = rx.recv_timeout(Duration::from_secs(2)).ok().flatten();
    Server { process, key, _dir: dir }
}

/// GET of one agent, each client on `bases[client % bases.len()]`.
async fn gets(bases: &[String], key: &str, id: &str, clients: usize) -> Figures {
    let (bases, path, auth) = (bases.to_vec(), format!("/api/agents/{id}"), format!("Bearer {key}"));
    load(clients, SECS, move |i| Req::get(&bases[(i / 1_000_000) % bases.len()], path.clone(), Some(&auth)))
        .await
}

/// Durable agent creates, each client on `bases[client % bases.len()]`.
async fn posts(bases: &[String], key: &str, clients: usize) -> Figures {
    let (bases, auth) = (bases.to_vec(), format!("Bearer {key}"));
    load(clients, SECS, move |i| agent_create(&bases[(i / 1_000_000) % bases.len()], &auth, i)).await
}

/// The four figures of one deployment: GET and POST at 1 and 32 clients.
async fn measure(name: &str, bases: &[String], key: &str) -> [Figures; 4] {
    let agent = create_agent(&bases[0], key).await;
    let id = agent["id"].as_str().expect("an agent id").to_string();
    let figures = [
        gets(bases, key, &id, 1).await,
        gets(bases, key, &id, 32).await,
        posts(bases, key, 1).await,
        posts(bases, key, 32).await,
    ];
    for (what, f) in
        ["GET agent, 1 client", "GET agent, 32 clients", "POST agent, 1 client", "POST agent, 32 clients"]
            .iter()
            .zip(&figures)
    {
        println!("{}", f.line(&format!("{name}: {what}")));
    }
    figures
}

/// Brings the planner's statistics of the database at `url` up to date.
async fn analyze(url: &str) {
    let (client, connection) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect to the bench database");
    let driver = tokio::spawn(connection);
    client.batch_execute("ANALYZE").await.expect("ANALYZE");
    drop(client);
    let _ = driver.await;
}

/// Runs the comparison; prints why when it cannot.
pub async fn run() {
    let Ok(admin) = std::env::var("AGENT_PLATFORM_BENCH_DATABASE_URL") else {
        println!(
            "\nbackends: skipped (set AGENT_PLATFORM_BENCH_DATABASE_URL to a PostgreSQL URL whose user \
             may create databases to compare sled with PostgreSQL)"
        );
        return;
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bin = binary();
    // One core per server process when there are cores for them; the load
    // generator and PostgreSQL share whatever is left (or everything).
    let pin = |n: usize| (cores >= 2).then_some(n % cores);
    println!(
        "\nbackends: the same load on each, servers as release processes, {SECS} s per figure ({cores} cores; \
         server 1 pinned to core {:?}, server 2 to core {:?}; PostgreSQL and the clients unpinned)",
        pin(0),
        pin(1)
    );

    let sled = spawn(&bin, pin(0), &[]);
    let sled_key = sled.key.clone().expect("a new sled store prints its first key");
    let s = measure("sled", std::slice::from_ref(&sled.process.base), &sled_key).await;
    drop(sled);

    let name = format!("bench_{}", uuid::Uuid::now_v7().simple());
    let url =
        agent_platform::store::pg_store::create_database(&admin, &name).await.expect("a bench database");
    let env =
        [("AGENT_PLATFORM_STORE_BACKEND", "postgres".to_string()), ("AGENT_PLATFORM_DATABASE_URL", url)];
    let one = spawn(&bin, pin(0), &env);
    let key = one.key.clone().expect("a new PostgreSQL store prints its first key");
    let p1 = measure("postgres, 1 server", std::slice::from_ref(&one.process.base), &key).await;
    // The writes just measured filled a table that was empty: until its
    // statistics catch up, the planner may read an agent through a list
    // index rather than the primary key. Autovacuum analyzes such a table
    // within a minute; the bench does it at once.
    analyze(&env[1].1).await;
    let two = spawn(&bin, pin(1), &env);
    let both = [one.process.base.clone(), two.process.base.clone()];
    let p2 = measure("postgres, 2 servers", &both, &key).await;
    drop((one, two));

    println!(
        "postgres/sled GET at 32 clients: {:.2} (target >= 0.50); postgres POST at 32 clients: {:.0}/s \
         (target >= 5000); 2 servers/1 server GET at 32 clients: {:.2} (target >= 1.50)",
        p1[1].rate() / s[1].rate(),
        p1[3].rate(),
        p2[1].rate() / p1[1].rate()
    );
    let failed: usize = s.iter().chain(&p1).chain(&p2).map(|f| f.errors).sum();
    println!("backends: failed or hung requests: {failed}");
}
