//! What only the PostgreSQL store has to keep: servers (each its own pool)
//! racing on one database, several starting at once, and the database
//! failing under them (not answering, cutting connections, timing out a
//! statement): always [`StoreError::Unavailable`] in bounded time, never a
//! 500, and back by itself when the database is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use uuid::Uuid;

use super::TestDb;
use crate::app::records::STORE_DOMAIN;
use crate::store::pg_store::{PgStore, with_dbname};
use crate::store::{Expect, Kind, ListQuery, Op, Record, Store, StoreError};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_require_racing_its_owners_delete_leaves_no_orphan() {
    let Some(db) = TestDb::create().await else { return };
    let (a, b) = (db.store().await, db.store().await);
    let t = Uuid::now_v7();
    for round in 0..40 {
        let owner = Record::fresh(Kind::Agent, t, json!({}));
        a.commit(t, vec![Op::Put { record: owner.clone(), expect: Expect::Absent }]).await.unwrap();
        let doc = Record::fresh(Kind::Doc, owner.id, json!({ "round": round }));
        let put = Op::Put { record: doc.clone(), expect: Expect::Absent };
        let require = Op::Require { kind: Kind::Agent, id: owner.id };
        let create = if round % 2 == 0 { vec![require, put] } else { vec![put, require] };
        let delete = Op::Delete { kind: Kind::Agent, id: owner.id, version: None };
        let scope = Op::DeleteScope { kind: Kind::Doc, scope: owner.id };
        let remove = if round % 4 < 2 { vec![delete, scope] } else { vec![scope, delete] };
        let (created, removed) = tokio::join!(a.commit(t, create), b.commit(t, remove));
        removed.unwrap();
        assert!(matches!(created, Ok(()) | Err(StoreError::NotFound { .. })), "{created:?}");
        assert!(a.get(t, Kind::Agent, owner.id).await.unwrap().is_none());
        assert!(a.get(t, Kind::Doc, doc.id).await.unwrap().is_none(), "round {round}: an orphaned doc");
        assert!(a.list(t, Kind::Doc, owner.id, &ListQuery::oldest_first(0, 10)).await.unwrap().is_empty());
    }
    a.close();
    b.close();
    db.drop().await;
}

/// Two commits that deadlock (each holds a row the other waits for): the
/// database ends one, which runs again, and both go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_victim_of_a_deadlock_runs_again() {
    let Some(db) = TestDb::create().await else { return };
    let s = Arc::new(db.store().await);
    let t = Uuid::now_v7();
    let [a, b, x] = [0, 1, 2].map(|_| Record::fresh(Kind::Agent, t, json!({})));
    for r in [&a, &b, &x] {
        s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Absent }]).await.unwrap();
    }
    let touch =
        |rs: &[&Record]| rs.iter().map(|r| Op::Touch { kind: Kind::Agent, id: r.id }).collect::<Vec<_>>();
    // Another session holds x: the first commit takes a, then waits for x...
    let mut holder = db.client().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM records WHERE id = $1 FOR UPDATE", &[&x.id]).await.unwrap();
    let first = tokio::spawn({
        let (s, ops) = (s.clone(), touch(&[&a, &x, &b]));
        async move { s.commit(t, ops).await }
    });
    let waiting = async |n: i64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let admin = db.client().await;
        loop {
            let row = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{n} commits never waited for a lock");
        }
    };
    waiting(1).await;
    // ...the second takes b, then waits for a; x let go, the first wants b.
    let second = tokio::spawn({
        let (s, ops) = (s.clone(), touch(&[&b, &a]));
        async move { s.commit(t, ops).await }
    });
    waiting(2).await;
    tx.rollback().await.unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    for (r, version) in [(&a, 2), (&b, 2), (&x, 1)] {
        assert_eq!(s.get(t, Kind::Agent, r.id).await.unwrap().unwrap().version, version);
    }
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_racing_on_one_version_through_their_own_pools_keep_it() {
    let Some(db) = TestDb::create().await else { return };
    let stores: Vec<Arc<PgStore>> = vec![Arc::new(db.store().await), Arc::new(db.store().await)];
    let t = Uuid::now_v7();
    let counter = Record::fresh(Kind::Agent, t, json!({ "n": 0 }));
    stores[0].commit(t, vec![Op::Put { record: counter.clone(), expect: Expect::Absent }]).await.unwrap();
    // Each of 8 writers adds 1, 10 times, re-reading on Stale: no increment is lost.
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let s = stores[w % 2].clone();
            tokio::spawn(async move {
                let mut done = 0;
                while done < 10 {
                    let mut r = s.get(t, Kind::Agent, counter.id).await.unwrap().unwrap();
                    let version = r.version;
                    r.data = json!({ "n": r.data["n"].as_u64().unwrap() + 1 });
                    match s.commit(t, vec![Op::Put { record: r, expect: Expect::Version(version) }]).await {
                        Ok(()) => done += 1,
                        Err(StoreError::Stale) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let r = stores[1].get(t, Kind::Agent, counter.id).await.unwrap().unwrap();
    assert_eq!((r.data["n"].as_u64(), r.version), (Some(80), 80));
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_servers_starting_together_on_an_empty_database_one_finds_it_new() {
    let Some(db) = TestDb::create().await else { return };
    let cfg = db.config();
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let cfg = cfg.clone();
            tokio::spawn(async move { PgStore::connect(&cfg, STORE_DOMAIN).await })
        })
        .collect();
    let mut new = 0;
    for s in starts {
        let s = s.await.unwrap().expect("every start migrates or finds the schema");
        new += usize::from(s.is_new());
        s.close();
    }
    assert_eq!(new, 1);
    assert!(!db.store().await.is_new());
    db.drop().await;
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused() {
    let Some(db) = TestDb::create().await else { return };
    db.store().await.close();
    db.client()
        .await
        .execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
             VALUES (999, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
            &[],
        )
        .await
        .unwrap();
    let err = PgStore::connect(&db.config(), STORE_DOMAIN)
        .await
        .err()
        .expect("a newer schema is refused")
        .to_string();
    assert!(err.contains("newer than this binary") && err.contains(&db.name), "{err}");
    db.drop().await;
}

#[tokio::test]
async fn a_database_nobody_listens_for_fails_the_start_naming_it_without_the_password() {
    // Port 1 on the loopback: nothing listens there.
    let cfg = crate::config::StoreConfig {
        backend: crate::config::StoreBackend::Postgres,
        url: Some("postgres://someone:s3cret-pw@127.0.0.1:1/db?sslmode=disable".into()),
        connect_timeout_s: 2.0,
        ..Default::default()
    };
    let started = Instant::now();
    let err = PgStore::connect(&cfg, STORE_DOMAIN).await.err().expect("nothing to connect to").to_string();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err.contains("127.0.0.1:1/db"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_past_its_timeout_answers_unavailable() {
    let Some(db) = TestDb::create().await else { return };
    let mut cfg = db.config();
    cfg.statement_timeout_s = 0.5;
    let s = PgStore::connect(&cfg, STORE_DOMAIN).await.unwrap();
    let t = Uuid::now_v7();
    let r = Record::fresh(Kind::Agent, t, json!({}));
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Absent }]).await.unwrap();
    // Another session holds the row: the replace waits for it, past its timeout.
    let mut holder = db.client().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM records WHERE id = $1 FOR UPDATE", &[&r.id]).await.unwrap();
    let started = Instant::now();
    let err = s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Version(0) }]).await.unwrap_err();
    assert!(matches!(&err, StoreError::Unavailable(m) if m.contains(s.target())), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    tx.rollback().await.unwrap();
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Version(0) }]).await.unwrap();
    s.close();
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_ended_by_the_database_are_replaced() {
    let Some(db) = TestDb::create().await else { return };
    let s = db.store().await;
    let t = Uuid::now_v7();
    let r = Record::fresh(Kind::Agent, t, json!({}));
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Absent }]).await.unwrap();
    let admin = db.client().await;
    for _ in 0..3 {
        // An administrator (or a failover) ends every connection of the store.
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let touch = || s.commit(t, vec![Op::Touch { kind: Kind::Agent, id: r.id }]);
        loop {
            let read_and_write =
                async { Ok::<_, StoreError>((s.get(t, Kind::Agent, r.id).await?, touch().await?)) };
            match read_and_write.await {
                Ok((got, ())) => {
                    assert!(got.is_some());
                    break;
                }
                Err(StoreError::Unavailable(m)) => {
                    assert!(m.contains(s.target()), "{m}");
                    assert!(Instant::now() < deadline, "still unavailable: {m}");
                }
                Err(e) => panic!("not unavailable: {e:?}"),
            }
        }
    }
    s.close();
    db.drop().await;
}

/// How the proxy between a store and its database behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Passes every byte both ways.
    Up,
    /// Passes nothing, answers nothing, closes nothing: a database that hangs.
    Silent,
    /// Closes every connection, and every new one at once: a database that is gone.
    Down,
}

/// A TCP proxy to the database whose [`Link`] a test sets.
struct Proxy {
    port: u16,
    link: watch::Sender<Link>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (link, watching) = watch::channel(Link::Up);
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if *watching.borrow() == Link::Down {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, watching.clone()));
                tokio::spawn(pump(sr, cw, watching.clone()));
            }
        });
        Proxy { port, link }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = link.changed() => {
                if changed.is_err() || *link.borrow() == Link::Down {
                    return;
                }
                continue;
            }
        };
        loop {
            match *link.borrow_and_update() {
                Link::Up => break,
                Link::Down => return,
                Link::Silent => {}
            }
            if link.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_hangs_or_goes_away_answers_unavailable_in_time_and_is_back_when_it_is() {
    let Some(db) = TestDb::create().await else { return };
    let cfg: tokio_postgres::Config = db.url.parse().unwrap();
    let upstream = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => format!("{h}:{}", cfg.get_ports()[0]),
        other => panic!("a TCP host for the proxy: {other:?}"),
    };
    let proxy = Proxy::start(upstream).await;
    let mut store_cfg = db.config();
    store_cfg.url = Some(with_dbname(
        &format!(
            "postgres://{}@127.0.0.1:{}/x?sslmode=disable",
            cfg.get_user().unwrap_or("postgres"),
            proxy.port
        ),
        &db.name,
    ));
    store_cfg.statement_timeout_s = 1.0;
    store_cfg.connect_timeout_s = 1.0;
    let s = PgStore::connect(&store_cfg, STORE_DOMAIN).await.unwrap();
    let t = Uuid::now_v7();
    let r = Record::fresh(Kind::Agent, t, json!({}));
    s.commit(t, vec![Op::Put { record: r.clone(), expect: Expect::Absent }]).await.unwrap();
    let bound = Duration::from_secs(4);

    for link in [Link::Silent, Link::Down] {
        proxy.link.send(link).unwrap();
        for _ in 0..2 {
            let started = Instant::now();
            let got = s.get(t, Kind::Agent, r.id).await;
            assert!(
                matches!(&got, Err(StoreError::Unavailable(m)) if m.contains(s.target())),
                "{link:?}: {got:?}"
            );
            let put = Op::Put { record: Record::fresh(Kind::Agent, t, json!({})), expect: Expect::Absent };
            let committed = s.commit(t, vec![put]).await;
            assert!(matches!(&committed, Err(StoreError::Unavailable(_))), "{link:?}: {committed:?}");
            assert!(matches!(s.health().await, Err(StoreError::Unavailable(_))));
            assert!(started.elapsed() < 3 * bound, "{link:?}: {:?}", started.elapsed());
        }
        proxy.link.send(Link::Up).unwrap();
        let deadline = Instant::now() + 3 * bound;
        loop {
            match s.get(t, Kind::Agent, r.id).await {
                Ok(Some(_)) => break,
                other => assert!(Instant::now() < deadline, "{link:?}, then up: still {other:?}"),
            }
        }
        s.health().await.unwrap();
    }
    s.close();
    db.drop().await;
}
