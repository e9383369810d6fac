//! The same HTTP load on each backend, every server a real process of the
//! release binary: sled; PostgreSQL with one server; PostgreSQL with two
//! servers on one database, the clients split between them. Each server
//! process is pinned to a core of its own with `taskset` when the machine has
//! the cores (the figures say which cores each got).
//!
//! With `AGENT_PLATFORM_BENCH_SERVER_CPU=<share>` (e.g. `0.25`), each server
//! process is also held to that share of a core by a cgroup CPU quota (needs
//! root): on a machine too small to give each server a whole core beside
//! PostgreSQL and the load, every server still gets the same CPU, so that two
//! servers against one measures what a second server adds, not what the
//! machine has left.
//!
//! Needs a PostgreSQL server: `AGENT_PLATFORM_BENCH_DATABASE_URL` is a URL of
//! it whose user may create databases (each run makes fresh ones). Without it
//! this part is skipped, saying so. Durable writes need the cluster's `fsync`
//! on (the default): one started with `fsync=off` gives figures of no use.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::process::{self, binary};
use super::{Figures, Req, agent_create, create_agent, load};

const SECS: f64 = 4.0;

/// A server process on a data dir of its own, killed when dropped.
struct Server {
    process: process::Server,
    /// Dropped after `process` has been killed.
    _limit: Option<CpuLimit>,
    /// The first key, printed by the server that created the store.
    key: Option<String>,
    _dir: tempfile::TempDir,
}

/// Starts `bin serve` (on `cpu`, held to `share` of a core, when given) with
/// `env`, and waits for its address.
fn spawn(bin: &Path, cpu: Option<usize>, share: Option<f64>, env: &[(&str, String)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut process = process::serve(bin, &dir.path().join("data"), cpu, env, Duration::from_secs(60));
    let limit = share.map(|share| CpuLimit::new(process.child.id(), share));
    // The key comes on stdout after the banner, only from a new store; the
    // banner's last line precedes it, so a short read decides.
    let stdout = process.child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next().and_then(Result::ok));
    });
    let key = rx.recv_timeout(Duration::from_secs(2)).ok().flatten();
    Server { process, _limit: limit, key, _dir: dir }
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

/// The machine's CPU time so far, busy and in all, in ticks (`/proc/stat`'s
/// first line; `None` where there is none).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> =
        stat.lines().next()?.split_whitespace().skip(1).map(|t| t.parse().unwrap_or(0)).collect();
    // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    let all: u64 = ticks.iter().take(8).sum();
    Some((all - ticks.get(3)? - ticks.get(4)?, all))
}

/// `load`'s figures, with how busy the whole machine was meanwhile, in percent.
async fn with_busy(load: impl std::future::Future<Output = Figures>) -> (Figures, Option<f64>) {
    let before = cpu_ticks();
    let f = load.await;
    let busy = before
        .zip(cpu_ticks())
        .map(|((b0, a0), (b1, a1))| 100.0 * (b1 - b0) as f64 / (a1 - a0).max(1) as f64);
    (f, busy)
}

/// The four figures of one deployment: GET and POST at 1 and 32 clients,
/// each printed with how busy the whole machine was meanwhile (near 100%, the
/// figure measures the machine rather than the servers).
async fn measure(name: &str, bases: &[String], key: &str) -> [Figures; 4] {
    let agent = create_agent(&bases[0], key).await;
    let id = agent["id"].as_str().expect("an agent id").to_string();
    let figures = [
        with_busy(gets(bases, key, &id, 1)).await,
        with_busy(gets(bases, key, &id, 32)).await,
        with_busy(posts(bases, key, 1)).await,
        with_busy(posts(bases, key, 32)).await,
    ];
    for (what, (f, busy)) in
        ["GET agent, 1 client", "GET agent, 32 clients", "POST agent, 1 client", "POST agent, 32 clients"]
            .iter()
            .zip(&figures)
    {
        let busy = busy.map_or_else(String::new, |b| format!("   machine busy {b:.0}%"));
        println!("{}{busy}", f.line(&format!("{name}: {what}")));
    }
    figures.map(|(f, _)| f)
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
    let share = std::env::var("AGENT_PLATFORM_BENCH_SERVER_CPU").ok().filter(|v| !v.is_empty()).map(|v| {
        v.parse::<f64>().ok().filter(|s| *s > 0.0 && *s <= cores as f64).unwrap_or_else(|| {
            panic!("AGENT_PLATFORM_BENCH_SERVER_CPU={v}: expected a share of a core, e.g. 0.25")
        })
    });
    let held =
        share.map_or_else(String::new, |s| format!(", each held to {s} of a core by a cgroup CPU quota"));
    println!(
        "\nbackends: the same load on each, servers as release processes, {SECS} s per figure ({cores} cores; \
         server 1 pinned to core {:?}, server 2 to core {:?}{held}; PostgreSQL and the clients unpinned)",
        pin(0),
        pin(1)
    );

    let sled = spawn(&bin, pin(0), share, &[]);
    let sled_key = sled.key.clone().expect("a new sled store prints its first key");
    let s = measure("sled", std::slice::from_ref(&sled.process.base), &sled_key).await;
    drop(sled);

    let name = format!("bench_{}", uuid::Uuid::now_v7().simple());
    let url =
        agent_platform::store::pg_store::create_database(&admin, &name).await.expect("a bench database");
    let env =
        [("AGENT_PLATFORM_STORE_BACKEND", "postgres".to_string()), ("AGENT_PLATFORM_DATABASE_URL", url)];
    let one = spawn(&bin, pin(0), share, &env);
    let key = one.key.clone().expect("a new PostgreSQL store prints its first key");
    let p1 = measure("postgres, 1 server", std::slice::from_ref(&one.process.base), &key).await;
    // The writes just measured filled a table that was empty: until its
    // statistics catch up, the planner may read an agent through a list
    // index rather than the primary key. Autovacuum analyzes such a table
    // within a minute; the bench does it at once.
    analyze(&env[1].1).await;
    let two = spawn(&bin, pin(1), share, &env);
    let both = [one.process.base.clone(), two.process.base.clone()];
    let p2 = measure("postgres, 2 servers", &both, &key).await;
    drop((one, two));

    println!(
        "postgres/sled GET at 32 clients: {:.2} (target >= 0.50); postgres POST at 32 clients: {:.0}/s \
         (target >= 5000{}); 2 servers/1 server GET at 32 clients: {:.2} (target >= 1.50{})",
        p1[1].rate() / s[1].rate(),
        p1[3].rate(),
        if share.is_some() { ", for servers with whole cores" } else { "" },
        p2[1].rate() / p1[1].rate(),
        share.map_or_else(String::new, |s| format!(", each server held to {s} of a core")),
    );
    let failed: usize = s.iter().chain(&p1).chain(&p2).map(|f| f.errors).sum();
    println!("backends: failed or hung requests: {failed}");
}

/// A process held to a share of one core by a cgroup CPU quota (v1's `cpu`
/// controller, or v2's `cpu.max`); the cgroup is removed when dropped, which
/// must come after its process has exited.
struct CpuLimit {
    dir: PathBuf,
}

impl CpuLimit {
    /// Moves process `pid` (all its threads) into a new cgroup allowed `share`
    /// of a core per 10 ms period. Needs root and a cgroup `cpu` controller;
    /// panics saying so otherwise.
    fn new(pid: u32, share: f64) -> CpuLimit {
        const PERIOD_US: u64 = 10_000;
        let quota = (share * PERIOD_US as f64).round() as u64;
        assert!(
            quota >= 1_000,
            "a CPU share of {share} is below 0.1 of a core (a quota's floor is 1 ms per period)"
        );
        let name = format!("agent-platform-bench-{}-{pid}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let dir = if v1.join("cpu.cfs_quota_us").exists() {
            let dir = v1.join(name);
            create(&dir);
            write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string());
            write(&dir.join("cpu.cfs_quota_us"), &quota.to_string());
            dir
        } else {
            let root = Path::new("/sys/fs/cgroup");
            write(&root.join("cgroup.subtree_control"), "+cpu");
            let dir = root.join(name);
            create(&dir);
            write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"));
            dir
        };
        write(&dir.join("cgroup.procs"), &pid.to_string());
        CpuLimit { dir }
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn create(dir: &Path) {
    std::fs::create_dir(dir).unwrap_or_else(|e| {
        panic!("cannot create the cgroup {} (a CPU share needs root and cgroups): {e}", dir.display())
    });
}

fn write(file: &Path, value: &str) {
    std::fs::write(file, value).unwrap_or_else(|e| panic!("cannot write {value} to {}: {e}", file.display()));
}
