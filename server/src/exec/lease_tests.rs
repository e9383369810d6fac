//! Two servers on one shared store, in one process: each execution is run by
//! one of them at a time, and one whose server dies is finished by the other.
//!
//! Every scenario runs twice: on PostgreSQL (a fresh database per test, at
//! `AGENT_PLATFORM_TEST_DATABASE_URL`; skipped with a note when it is unset,
//! failing under `CI=true`), and on one sled store that two `App`s share,
//! said to be shared so that the engines take leases (the same lease logic,
//! without a database).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use uuid::Uuid;

use super::engine::Engine;
use crate::api::types::{
    CreateExecutionRequest, Execution, ExecutionStatus, PutTaskRequest, RequestedStatus, Transition,
    TransitionType, UpdateExecutionRequest,
};
use crate::app::lease::{LeaseData, lease_of};
use crate::app::{App, Tenant};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::store::conformance::TestDb;
use crate::store::sled_store::{Durability, SledStore};
use crate::store::{Kind, ListQuery, Op, Record, Store, StoreError, StoreResult};

const T: Tenant = Tenant(Uuid::from_u128(7));

/// A sled store that says it is shared: engines on it take leases. Cut,
/// it answers every call `Unavailable`, as a database out of reach does.
#[derive(Default)]
struct SharedSled {
    inner: Option<Arc<SledStore>>,
    cut: AtomicBool,
}

impl SharedSled {
    fn on(inner: Arc<SledStore>) -> Self {
        SharedSled { inner: Some(inner), cut: AtomicBool::new(false) }
    }

    fn reach(&self) -> StoreResult<&SledStore> {
        match &self.inner {
            Some(inner) if !self.cut.load(Ordering::Relaxed) => Ok(inner),
            _ => Err(StoreError::Unavailable("the test cut this server off its store".into())),
        }
    }
}

#[async_trait]
impl Store for SharedSled {
    async fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        self.reach()?.get(tenant, kind, id).await
    }
    async fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
        self.reach()?.list(tenant, kind, scope, q).await
    }
    async fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>> {
        self.reach()?.referencing(tenant, kind, target).await
    }
    async fn lookup_unique(
        &self,
        tenant: Uuid,
        kind: Kind,
        scope: Uuid,
        name: &str,
    ) -> StoreResult<Option<Uuid>> {
        self.reach()?.lookup_unique(tenant, kind, scope, name).await
    }
    async fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        self.reach()?.scan_kind(kind).await
    }
    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
        self.reach()?.commit(tenant, ops).await
    }
    fn shared(&self) -> bool {
        true
    }
}

/// One server: an application and its engine.
struct Server {
    app: App,
    engine: Arc<Engine>,
}

fn quiet() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

async fn server(store: Arc<dyn Store>, lease_s: u64) -> Server {
    let app = App::new(store).await.unwrap();
    let config = ExecutionsConfig { lease_s, ..Default::default() };
    let engine = Engine::start(&app, &config, &ToolsConfig::default(), quiet()).await.unwrap();
    Server { app, engine }
}

enum Backend {
    Sled,
    Postgres,
}

/// Cuts a server off its store.
type Cut = Box<dyn Fn() + Send + Sync>;

/// Two servers on one new store.
struct Pair {
    a: Server,
    b: Server,
    _dir: tempfile::TempDir,
    db: Option<TestDb>,
    /// Cut server A, or B, off the store for good (its database out of reach).
    cuts: [Cut; 2],
}

/// Two servers on one new store; `None` (with a note) when PostgreSQL is not configured.
async fn two_servers(backend: Backend, lease_s: u64) -> Option<Pair> {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, db, cuts): (Arc<dyn Store>, Arc<dyn Store>, _, [Cut; 2]) = match backend {
        Backend::Sled => {
            let sled = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
            let (a, b) = (Arc::new(SharedSled::on(sled.clone())), Arc::new(SharedSled::on(sled)));
            let cut = |s: &Arc<SharedSled>| -> Cut {
                let s = s.clone();
                Box::new(move || s.cut.store(true, Ordering::Relaxed))
            };
            let cuts = [cut(&a), cut(&b)];
            (a, b, None, cuts)
        }
        Backend::Postgres => {
            let db = TestDb::create().await?;
            let (a, b) = (Arc::new(db.store().await), Arc::new(db.store().await));
            let cut = |s: &Arc<crate::store::pg_store::PgStore>| -> Cut {
                let s = s.clone();
                Box::new(move || s.close())
            };
            let cuts = [cut(&a), cut(&b)];
            (a, b, Some(db), cuts)
        }
    };
    Some(Pair { a: server(a, lease_s).await, b: server(b, lease_s).await, _dir: dir, db, cuts })
}

impl Pair {
    fn server(&self, i: usize) -> &Server {
        if i == 0 { &self.a } else { &self.b }
    }

    /// Which server runs the execution (holding its lease): 0 for A, 1 for B.
    /// Usually the one that started it, but the other may claim it first, at
    /// a look between the start's commit and its claim.
    async fn runner_of(&self, id: Uuid) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let holder = lease(&self.a.app, id).await.map(|l| l.holder);
            for i in 0..2 {
                let s = self.server(i);
                if holder.is_some() && holder == s.engine.server_id() && s.engine.runs(id) {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no server runs execution {id}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops both servers and drops the database.
    async fn finish(self) {
        self.a.engine.halt().await;
        self.b.engine.halt().await;
        drop((self.a, self.b));
        if let Some(db) = self.db {
            db.drop().await;
        }
    }
}

async fn task(app: &App, body: Value) -> Uuid {
    let agent = app.agent_create(T, serde_json::from_value(json!({"name": "A"})).unwrap()).await.unwrap();
    let req: PutTaskRequest = serde_json::from_value(body).unwrap();
    app.task_put(T, agent.id, req).await.unwrap().id
}

async fn start(app: &App, task: Uuid) -> Execution {
    let req = CreateExecutionRequest { input: serde_json::from_value(json!({})).unwrap(), metadata: None };
    app.execution_start(T, task, req).await.unwrap()
}

async fn until<F: Fn(&Execution) -> bool>(app: &App, id: Uuid, within: Duration, done: F) -> Execution {
    let deadline = Instant::now() + within;
    loop {
        let e = app.execution_get(T, id).await.unwrap();
        if done(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "execution {id} still {:?} after {within:?}", e.status);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn transitions(app: &App, id: Uuid) -> Vec<Transition> {
    app.transition_list(T, id, &ListQuery::oldest_first(0, 1000)).await.unwrap()
}

fn kinds(ts: &[Transition]) -> Vec<TransitionType> {
    ts.iter().map(|t| t.kind).collect()
}

async fn lease(app: &App, id: Uuid) -> Option<LeaseData> {
    app.store.get(T.0, Kind::ExecutionLease, id).await.unwrap().as_ref().map(lease_of)
}

/// Executions started on either server, each also asked of the other: each
/// runs (a sleep in a parallel branch, its run loaded) on exactly one, which
/// holds its lease; none commits a step twice.
async fn each_execution_runs_on_exactly_one_server(backend: Backend) {
    let Some(pair) = two_servers(backend, 15).await else { return };
    let (a, b) = (&pair.a, &pair.b);
    let id = task(
        &a.app,
        json!({"name": "t", "main": [
        {"evaluate": {"x": 1}}, {"parallel": [{"sleep": {"seconds": 0.5}}]}, {"evaluate": {"y": 2}}]}),
    )
    .await;
    let mut started = Vec::new();
    for i in 0..6 {
        let (on, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let e = start(&on.app, id).await;
        other.engine.enqueue(T, e.id);
        started.push((e.id, on.engine.server_id()));
    }
    for (id, starter) in &started {
        until(&a.app, *id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
        let holder = lease(&a.app, *id).await.expect("a sleeping execution's lease").holder;
        let servers = [a.engine.server_id(), b.engine.server_id()];
        assert!(servers.contains(&Some(holder)) && servers.contains(starter));
        let deadline = Instant::now() + Duration::from_secs(5);
        // The other server's attempt ends as soon as it finds the lease held.
        while a.engine.runs(*id) && b.engine.runs(*id) {
            assert!(Instant::now() < deadline, "execution {id} runs on both servers");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let runner = if a.engine.runs(*id) { &a } else { &b };
        assert_eq!(runner.engine.server_id(), Some(holder), "the lease's holder runs it");
    }
    for (id, _) in &started {
        let done = until(&b.app, *id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
        assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
        let ts = transitions(&b.app, *id).await;
        let step = TransitionType::Step;
        assert_eq!(kinds(&ts), [TransitionType::Init, step, step, step, step, TransitionType::Finish]);
        assert!(lease(&a.app, *id).await.is_none(), "the ending commit deleted the lease");
    }
    pair.finish().await;
}

/// A server that dies while an execution sleeps on it (in a parallel branch:
/// its run loaded, its lease held): the other takes its lease over once it
/// expires, and ends the sleep at its first due time.
async fn a_dead_servers_sleeping_execution_is_finished_by_another(backend: Backend) {
    let Some(pair) = two_servers(backend, 1).await else { return };
    let a = &pair.a;
    let id = task(
        &a.app,
        json!({"name": "t", "main": [
        {"evaluate": {"x": 1}}, {"parallel": [{"sleep": {"seconds": 2}}]}, {"return": {"ok": true}}]}),
    )
    .await;
    let e = start(&a.app, id).await;
    let due =
        until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await.sleeping_until;
    let due = due.unwrap();
    let runner = pair.runner_of(e.id).await;
    let (a, b) = (pair.server(runner), pair.server(1 - runner));
    // Dies: nothing is released, nothing renewed.
    a.engine.halt().await;
    assert_eq!(lease(&b.app, e.id).await.map(|l| l.holder), a.engine.server_id(), "still the dead one's");
    let deadline = Instant::now() + Duration::from_secs(10);
    // (Its run is under way as soon as it claims: before its claim is written.)
    while lease(&b.app, e.id).await.map(|l| l.holder) != b.engine.server_id() {
        assert!(Instant::now() < deadline, "the other server did not take the execution over");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(b.engine.runs(e.id));
    let done = until(&b.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output, Some(json!({"ok": true})));
    let ts = transitions(&b.app, e.id).await;
    let step = TransitionType::Step;
    assert_eq!(kinds(&ts), [TransitionType::Init, step, step, step, step, TransitionType::Finish]);
    let slept = ts[2].created_at;
    assert!(slept >= due, "the sleep ended at {slept}, before its due time {due}");
    assert!(slept < due + chrono::Duration::seconds(2), "the sleep started again on the other server");
    assert!(lease(&b.app, e.id).await.is_none());
    pair.finish().await;
}

/// A cancel through the server that does not run the execution stops its
/// run on the other at once, though it sleeps (its lease is deleted).
async fn a_cancel_through_another_server_stops_the_run(backend: Backend) {
    let Some(pair) = two_servers(backend, 1).await else { return };
    let a = &pair.a;
    let id = task(&a.app, json!({"name": "t", "main": [{"parallel": [{"sleep": {"hours": 1}}]}]})).await;
    let e = start(&a.app, id).await;
    until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    let runner = pair.runner_of(e.id).await;
    let (a, b) = (pair.server(runner), pair.server(1 - runner));
    let cancel = UpdateExecutionRequest { status: RequestedStatus::Cancelled, reason: None, input: None };
    let cancelled = b.app.execution_update(T, e.id, cancel).await.unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert!(lease(&a.app, e.id).await.is_none(), "the cancel deleted the lease");
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.engine.runs(e.id) {
        assert!(Instant::now() < deadline, "the sleeping run on the other server was not stopped");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ts = kinds(&transitions(&a.app, e.id).await);
    assert_eq!(ts, [TransitionType::Init, TransitionType::Cancelled]);
    pair.finish().await;
}

/// A sleep outside parallel branches drops its run and releases its lease;
/// the marker says until when it sleeps. When its server has died, the
/// other wakes it at its due time.
async fn an_asleep_execution_holds_no_lease_and_another_server_wakes_it(backend: Backend) {
    let Some(pair) = two_servers(backend, 15).await else { return };
    let a = &pair.a;
    let id =
        task(&a.app, json!({"name": "t", "main": [{"sleep": {"seconds": 2}}, {"return": {"ok": true}}]}))
            .await;
    let e = start(&a.app, id).await;
    let due = until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    let due = due.sleeping_until.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lease(&a.app, e.id).await.is_some() || pair.a.engine.runs(e.id) || pair.b.engine.runs(e.id) {
        assert!(Instant::now() < deadline, "an asleep execution still has a run or a lease");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let marker = a.app.store.get(T.0, Kind::ActiveExecution, e.id).await.unwrap().expect("its marker");
    assert_eq!(super::records::marker_asleep_until(&marker), Some(due));
    // The server that put it to sleep dies; the other wakes it (lease_s 15: no takeover needed).
    a.engine.halt().await;
    let b = &pair.b;
    let done = until(&b.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    let ts = transitions(&b.app, e.id).await;
    let slept = ts[1].created_at;
    assert!(slept >= due, "the sleep ended at {slept}, before its due time {due}");
    assert!(slept < due + chrono::Duration::seconds(6), "woken at {slept}, long after {due}");
    pair.finish().await;
}

/// A wait releases the lease; a resume through the other server runs the
/// execution there, without waiting for a look.
async fn a_resume_through_another_server_runs_there_at_once(backend: Backend) {
    let Some(pair) = two_servers(backend, 15).await else { return };
    let (a, b) = (&pair.a, &pair.b);
    let id = task(
        &a.app,
        json!({"name": "t", "main": [
        {"wait_for_input": {"info": {"q": 1}}}, {"evaluate": {"got": "_.more"}}]}),
    )
    .await;
    let e = start(&a.app, id).await;
    until(&a.app, e.id, Duration::from_secs(10), |e| e.status == ExecutionStatus::AwaitingInput).await;
    assert!(lease(&a.app, e.id).await.is_none(), "a waiting execution holds no lease");
    let marker = a.app.store.get(T.0, Kind::ActiveExecution, e.id).await.unwrap().expect("its marker");
    assert!(super::records::marker_waits(&marker), "the looks skip it without reading it");
    let t0 = Instant::now();
    let resume = UpdateExecutionRequest {
        status: RequestedStatus::Running,
        reason: None,
        input: Some(json!({"more": 5})),
    };
    b.app.execution_update(T, e.id, resume).await.unwrap();
    let done = until(&b.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output, Some(json!({"got": 5})));
    assert!(t0.elapsed() < Duration::from_secs(4), "the resume waited {:?} for a look", t0.elapsed());
    assert!(lease(&a.app, e.id).await.is_none());
    pair.finish().await;
}

/// A server that stops cleanly releases its leases: the other goes on with
/// the execution at its next look, not once the lease would have expired.
async fn a_stopping_server_hands_its_executions_over(backend: Backend) {
    let Some(pair) = two_servers(backend, 6).await else { return };
    let a = &pair.a;
    let main = json!([{"parallel": [{"sleep": {"seconds": 4}}]}, {"return": {"n": 1}}]);
    let id = task(&a.app, json!({"name": "t", "main": main})).await;
    let e = start(&a.app, id).await;
    until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    let runner = pair.runner_of(e.id).await;
    let (a, b) = (pair.server(runner), pair.server(1 - runner));
    let t0 = Instant::now();
    a.engine.stop().await;
    // A look every 2 s (lease_s 6): well before the 6 s a dead server's lease takes.
    let deadline = t0 + Duration::from_secs(4);
    while lease(&b.app, e.id).await.map(|l| l.holder) != b.engine.server_id() {
        assert!(Instant::now() < deadline, "a stopping server's execution was not handed over at once");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = until(&b.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    pair.finish().await;
}

/// A server cut off its store while an execution sleeps on it stops that
/// run before its lease expires; the other server takes over and finishes it.
async fn a_server_that_cannot_renew_stops_and_another_finishes(backend: Backend) {
    let Some(pair) = two_servers(backend, 1).await else { return };
    let a = &pair.a;
    let main = json!([{"parallel": [{"sleep": {"seconds": 2.5}}]}, {"return": {"ok": true}}]);
    let id = task(&a.app, json!({"name": "t", "main": main})).await;
    let e = start(&a.app, id).await;
    until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    let runner = pair.runner_of(e.id).await;
    let (a, b) = (pair.server(runner), pair.server(1 - runner));
    let cut = Instant::now();
    (pair.cuts[runner])();
    // Tried again every few seconds, each try failing at once: never a run for long.
    let deadline = cut + Duration::from_secs(1);
    while a.engine.runs(e.id) {
        assert!(Instant::now() < deadline, "a server that cannot renew its lease still runs the execution");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = until(&b.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    let step = TransitionType::Step;
    assert_eq!(
        kinds(&transitions(&b.app, e.id).await),
        [TransitionType::Init, step, step, step, TransitionType::Finish]
    );
    pair.finish().await;
}

/// On an unshared store there are no leases: nothing is written for them.
#[tokio::test]
async fn an_unshared_store_takes_no_leases() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let s = server(store.clone(), 1).await;
    assert_eq!(s.engine.server_id(), None);
    let id =
        task(&s.app, json!({"name": "t", "main": [{"sleep": {"seconds": 0.3}}, {"return": {"ok": true}}]}))
            .await;
    let e = start(&s.app, id).await;
    until(&s.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    assert!(store.scan_kind(Kind::ExecutionLease).await.unwrap().is_empty());
    let done = until(&s.app, e.id, Duration::from_secs(20), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
}

/// Where the store reports its changes (PostgreSQL's notifications), a
/// cancel through another server stops the run there at once, not at its
/// next renewal of the lease.
async fn a_cancel_elsewhere_is_heard_at_once(backend: Backend) {
    let Some(pair) = two_servers(backend, 15).await else { return };
    let a = &pair.a;
    if a.app.store.changes().is_none() {
        eprintln!("skipped: this store does not report its changes");
        return pair.finish().await;
    }
    let id = task(&a.app, json!({"name": "t", "main": [{"parallel": [{"sleep": {"hours": 1}}]}]})).await;
    let e = start(&a.app, id).await;
    until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    let runner = pair.runner_of(e.id).await;
    let (a, b) = (pair.server(runner), pair.server(1 - runner));
    let cancel = UpdateExecutionRequest { status: RequestedStatus::Cancelled, reason: None, input: None };
    b.app.execution_update(T, e.id, cancel).await.unwrap();
    // The next renewal is 5 s away (lease_s 15).
    let deadline = Instant::now() + Duration::from_secs(2);
    while a.engine.runs(e.id) {
        assert!(Instant::now() < deadline, "the run on the other server did not hear of the cancel");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    pair.finish().await;
}

/// A waiting execution's marker says so (the looks skip it), and stops
/// saying so once a resume makes it run again.
async fn a_waiting_executions_marker_says_so(backend: Backend) {
    let Some(pair) = two_servers(backend, 15).await else { return };
    let a = &pair.a;
    let id = task(
        &a.app,
        json!({"name": "t", "main": [
        {"wait_for_input": {"info": {}}}, {"sleep": {"seconds": 0.3}}, {"wait_for_input": {"info": {}}}]}),
    )
    .await;
    let e = start(&a.app, id).await;
    let waits = || async {
        let marker = a.app.store.get(T.0, Kind::ActiveExecution, e.id).await.unwrap().expect("its marker");
        super::records::marker_waits(&marker)
    };
    let resume = UpdateExecutionRequest { status: RequestedStatus::Running, reason: None, input: None };
    until(&a.app, e.id, Duration::from_secs(10), |e| e.status == ExecutionStatus::AwaitingInput).await;
    assert!(waits().await);
    a.app.execution_update(T, e.id, resume.clone()).await.unwrap();
    until(&a.app, e.id, Duration::from_secs(10), |e| e.sleeping_until.is_some()).await;
    assert!(!waits().await, "a resumed execution's marker still says it waits");
    until(&a.app, e.id, Duration::from_secs(10), |e| e.status == ExecutionStatus::AwaitingInput).await;
    assert!(waits().await);
    a.app.execution_update(T, e.id, resume).await.unwrap();
    let done = until(&a.app, e.id, Duration::from_secs(10), |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    pair.finish().await;
}

macro_rules! on_both {
    ($($scenario:ident),* $(,)?) => {
        mod on_sled {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario(super::Backend::Sled).await
            })*
        }
        mod on_postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario(super::Backend::Postgres).await
            })*
        }
    };
}

on_both!(
    each_execution_runs_on_exactly_one_server,
    a_dead_servers_sleeping_execution_is_finished_by_another,
    a_cancel_through_another_server_stops_the_run,
    an_asleep_execution_holds_no_lease_and_another_server_wakes_it,
    a_resume_through_another_server_runs_there_at_once,
    a_stopping_server_hands_its_executions_over,
    a_server_that_cannot_renew_stops_and_another_finishes,
    a_cancel_elsewhere_is_heard_at_once,
    a_waiting_executions_marker_says_so,
);
