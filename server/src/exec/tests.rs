//! The engine on a real store: what survives a stop, and what is never done twice.
//! (Every step kind's semantics are tested end to end, through HTTP, in `tests/`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use super::engine::Engine;
use crate::api::types::{
    CreateExecutionRequest, Execution, ExecutionStatus, PutTaskRequest, RequestedStatus, Transition,
    TransitionType, UpdateExecutionRequest,
};
use crate::app::{App, Tenant};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::store::sled_store::{Durability, SledStore};
use crate::store::{Direction, ListQuery, SortBy};

const T: Tenant = Tenant(Uuid::from_u128(7));

fn quiet() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

async fn engine_on(store: Arc<SledStore>) -> (App, Arc<Engine>) {
    engine_with(store, &ExecutionsConfig::default()).await
}

async fn engine_with(store: Arc<SledStore>, config: &ExecutionsConfig) -> (App, Arc<Engine>) {
    let app = App::new(store).await.unwrap();
    let engine = Engine::start(&app, config, &ToolsConfig::default(), quiet()).await.unwrap();
    (app, engine)
}

/// The execution's stored fields.
async fn stored(app: &App, id: Uuid) -> super::records::ExecutionData {
    let rec = app.store.get(T.0, crate::store::Kind::Execution, id).await.unwrap().unwrap();
    super::records::read(&rec).unwrap()
}

/// Waits until `engine`'s run works on the execution (its commits name it).
async fn worked_on_by(app: &App, engine: &Engine, id: Uuid) -> super::records::ExecutionData {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let data = stored(app, id).await;
        if data.in_flight == Some(engine.id) {
            return data;
        }
        assert!(Instant::now() < deadline, "execution {id} not worked on by the new engine: {data:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn task(app: &App, body: Value) -> Uuid {
    let agent = app.agent_create(T, serde_json::from_value(json!({"name": "A"})).unwrap()).await.unwrap();
    let req: PutTaskRequest = serde_json::from_value(body).unwrap();
    app.task_put(T, agent.id, req).await.unwrap().id
}

async fn start(app: &App, task: Uuid, input: Value) -> Execution {
    let req = CreateExecutionRequest { input: serde_json::from_value(input).unwrap(), metadata: None };
    app.execution_start(T, task, req).await.unwrap()
}

async fn until(app: &App, id: Uuid, done: impl Fn(ExecutionStatus) -> bool) -> Execution {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = app.execution_get(T, id).await.unwrap();
        if done(e.status) {
            return e;
        }
        assert!(Instant::now() < deadline, "execution {id} still {:?}", e.status);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn transitions(app: &App, id: Uuid) -> Vec<Transition> {
    let q = ListQuery {
        limit: 1000,
        direction: Direction::Asc,
        sort_by: SortBy::CreatedAt,
        ..Default::default()
    };
    app.transition_list(T, id, &q).await.unwrap()
}

/// Whether the execution is among those a starting server resumes.
async fn marked_active(app: &App, id: Uuid) -> bool {
    app.store.get(T.0, crate::store::Kind::ActiveExecution, id).await.unwrap().is_some()
}

fn kinds(ts: &[Transition]) -> Vec<TransitionType> {
    ts.iter().map(|t| t.kind).collect()
}

fn assert_allowed(ts: &[Transition]) {
    for w in ts.windows(2) {
        assert!(w[0].kind.allows_next(w[1].kind), "{:?} then {:?}", w[0].kind, w[1].kind);
    }
}

#[tokio::test]
async fn a_wait_survives_a_restart_and_nothing_before_it_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, engine) = engine_on(store.clone()).await;
    let id = task(
        &app,
        json!({"name": "t", "main": [
            {"evaluate": {"x": "_.n + 1"}},
            {"set": {"seen": "_.x"}},
            {"wait_for_input": {"info": {"asked": "$ _.seen"}}},
            {"evaluate": {"sum": "state.seen + _.more"}},
        ]}),
    )
    .await;
    let e = start(&app, id, json!({"n": 1})).await;
    until(&app, e.id, |s| s == ExecutionStatus::AwaitingInput).await;
    assert!(marked_active(&app, e.id).await, "a waiting execution is still marked active");
    engine.stop().await;
    let before = transitions(&app, e.id).await;
    assert_eq!(
        kinds(&before),
        [TransitionType::Init, TransitionType::Step, TransitionType::Step, TransitionType::Wait]
    );
    assert_eq!(before[3].output, json!({"info": {"asked": 2}}));

    // A new process on the same store: it resumes nothing that waits.
    let (app, _engine) = engine_on(store).await;
    let resume = UpdateExecutionRequest {
        status: RequestedStatus::Running,
        reason: None,
        input: Some(json!({"more": 40})),
    };
    app.execution_update(T, e.id, resume).await.unwrap();
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output, Some(json!({"sum": 42})));
    let after = transitions(&app, e.id).await;
    assert_eq!(
        &after[..4].iter().map(|t| t.id).collect::<Vec<_>>(),
        &before.iter().map(|t| t.id).collect::<Vec<_>>()
    );
    assert_eq!(kinds(&after[4..]), [TransitionType::Resume, TransitionType::Step, TransitionType::Finish]);
    assert_allowed(&after);
}

#[tokio::test]
async fn a_sleep_stopped_midway_ends_at_its_first_due_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, engine) = engine_on(store.clone()).await;
    let id =
        task(&app, json!({"name": "t", "main": [{"sleep": {"seconds": 1}}, {"return": {"ok": true}}]})).await;
    let e = start(&app, id, json!({})).await;
    let sleeping = loop {
        let now = app.execution_get(T, e.id).await.unwrap();
        if let Some(due) = now.sleeping_until {
            break due;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    engine.stop().await;
    let (app, _engine) = engine_on(store).await;
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded);
    assert!(!marked_active(&app, e.id).await, "an ended execution is no longer marked active");
    let ts = transitions(&app, e.id).await;
    assert_eq!(
        kinds(&ts),
        [TransitionType::Init, TransitionType::Step, TransitionType::Step, TransitionType::Finish]
    );
    let slept = ts[1].created_at;
    assert!(slept >= sleeping, "the sleep ended at {slept}, before its due time {sleeping}");
    assert!(slept < sleeping + chrono::Duration::seconds(1), "the sleep started again after the restart");
    assert_eq!(done.sleeping_until, None);
}

#[tokio::test]
async fn a_cancel_stops_a_sleeping_execution_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, engine) = engine_on(store).await;
    let id = task(&app, json!({"name": "t", "main": [{"sleep": {"hours": 1}}]})).await;
    let e = start(&app, id, json!({})).await;
    while app.execution_get(T, e.id).await.unwrap().sleeping_until.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancel =
        UpdateExecutionRequest { status: RequestedStatus::Cancelled, reason: Some("no".into()), input: None };
    let cancelled = app.execution_update(T, e.id, cancel.clone()).await.unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert_eq!(cancelled.error.as_deref(), Some("no"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.running() > 0 {
        assert!(Instant::now() < deadline, "the sleeping run was not stopped");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!marked_active(&app, e.id).await, "a cancelled execution is no longer marked active");
    let again = app.execution_update(T, e.id, cancel).await.unwrap_err();
    assert!(again.to_string().contains("cancelled to cancelled"), "{again}");
    assert_eq!(kinds(&transitions(&app, e.id).await), [TransitionType::Init, TransitionType::Cancelled]);
}

#[tokio::test]
async fn composite_steps_commit_their_inner_steps_then_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, _engine) = engine_on(store).await;
    let id = task(
        &app,
        json!({"name": "t", "main": [
            {"if": "_.n > 1", "then": [{"evaluate": {"big": true}}], "else": {"evaluate": {"big": false}}},
            {"foreach": {"in": "[1, 2]", "do": {"evaluate": {"twice": "_ * 2"}}}},
            {"over": "[3, 1, 2]", "map": {"evaluate": {"v": "_"}}, "parallelism": 3},
            {"over": "[3, 1, 2]", "map": {"evaluate": {"v": "_"}}, "reduce": "results + [_.v]", "initial": [0]},
            {"parallel": [{"evaluate": {"a": 1}}, {"evaluate": {"b": 2}}]},
            {"evaluate": {"all": "outputs"}},
        ]}),
    )
    .await;
    let e = start(&app, id, json!({"n": 2})).await;
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    let ts = transitions(&app, e.id).await;
    assert_allowed(&ts);
    let all = &done.output.unwrap()["all"];
    assert_eq!(all[0], json!({"big": true}));
    assert_eq!(all[1], json!([{"twice": 2}, {"twice": 4}]));
    assert_eq!(all[2], json!([{"v": 3}, {"v": 1}, {"v": 2}]));
    assert_eq!(all[3], json!([0, 3, 1, 2]));
    assert_eq!(all[4], json!([{"a": 1}, {"b": 2}]));
    let places: Vec<String> =
        ts.iter().map(|t| format!("{:?} {}[{}]", t.kind, t.current.workflow, t.current.step)).collect();
    assert_eq!(
        places[..5],
        [
            "Init main[0]",
            "Step main[0].then[0]",
            "Step main[0]",
            "Step main[1].foreach[0][0]",
            "Step main[1].foreach[1][0]"
        ]
    );
    assert_eq!(ts.len(), 1 + 2 + 3 + 4 + 4 + 3 + 1 + 1, "{places:#?}");
}

/// A run whose record changed under it (here a version bump while it sleeps;
/// in life a sibling branch's commit whose answer was dropped) does not stop
/// there: a new run reads the store again and finishes the execution.
#[tokio::test]
async fn a_run_whose_record_changed_under_it_starts_again_and_finishes() {
    use crate::store::{Kind, Op, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, _engine) = engine_on(store.clone()).await;
    // A sleep in a parallel branch keeps its run loaded.
    let main = json!([{"parallel": [{"sleep": {"seconds": 0.3}}]}, {"return": {"ok": true}}]);
    let id = task(&app, json!({"name": "t", "main": main})).await;
    let e = start(&app, id, json!({})).await;
    while app.execution_get(T, e.id).await.unwrap().sleeping_until.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    store.commit(T.0, vec![Op::Touch { kind: Kind::Execution, id: e.id }]).await.unwrap();
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    let ts = transitions(&app, e.id).await;
    let step = TransitionType::Step;
    assert_eq!(kinds(&ts), [TransitionType::Init, step, step, step, TransitionType::Finish]);
}

/// Sleeping executions hold no run, only their due time: while they sleep,
/// and after a restart, which times them instead of loading them; one that
/// is due wakes, is loaded, and finishes.
#[tokio::test]
async fn sleeping_executions_are_timed_not_loaded_and_wake_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let (app, engine) = engine_on(store.clone()).await;
    let long =
        task(&app, json!({"name": "long", "main": [{"evaluate": {"x": 1}}, {"sleep": {"hours": 1}}]})).await;
    let short = task(
        &app,
        json!({"name": "short", "main": [{"evaluate": {"x": 1}}, {"sleep": {"seconds": 3}}, {"return": {"ok": true}}]}),
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(start(&app, long, json!({})).await.id);
    }
    let quick = start(&app, short, json!({})).await.id;
    for &id in ids.iter().chain([&quick]) {
        until(&app, id, |_| true).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while app.execution_get(T, id).await.unwrap().sleeping_until.is_none() {
            assert!(Instant::now() < deadline, "execution {id} never slept");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.loaded() > 0 || engine.running() > 0 {
        assert!(Instant::now() < deadline, "{} runs loaded, {} running", engine.loaded(), engine.running());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(engine.scheduled(), 41);
    engine.stop().await;

    let (app, engine) = engine_on(store).await;
    assert_eq!(
        (engine.scheduled(), engine.loaded(), engine.running()),
        (41, 0, 0),
        "timed at start, not loaded"
    );
    let done = until(&app, quick, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output, Some(json!({"ok": true})));
    let ts = transitions(&app, quick).await;
    assert_allowed(&ts);
    let step = TransitionType::Step;
    assert_eq!(kinds(&ts), [TransitionType::Init, step, step, step, TransitionType::Finish]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.loaded() > 0 {
        assert!(Instant::now() < deadline, "the finished run is still loaded");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(engine.scheduled(), 40);
    assert!(stored(&app, ids[0]).await.asleep_until.is_some());
}

/// A step under way each time its server dies (here: stops without a clean
/// stop) is not run again past `max_step_attempts` deaths: the execution
/// fails saying so. A clean stop in between is not counted; a commit would
/// have reset the count.
#[tokio::test]
async fn a_step_under_way_through_max_step_attempts_deaths_fails_the_execution() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let config = ExecutionsConfig { max_step_attempts: 2, ..Default::default() };
    let (app, engine) = engine_with(store.clone(), &config).await;
    // A sleep inside a parallel branch: a step that stays under way, its run loaded.
    let main = json!([{"evaluate": {"x": 1}}, {"parallel": [{"sleep": {"hours": 1}}]}]);
    let id = task(&app, json!({"name": "t", "main": main})).await;
    let e = start(&app, id, json!({})).await;
    let data = worked_on_by(&app, &engine, e.id).await;
    assert_eq!(data.stopped_mid_step, 0);
    while stored(&app, e.id).await.timers.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.halt().await;

    let (app, engine) = engine_with(store.clone(), &config).await;
    assert_eq!(worked_on_by(&app, &engine, e.id).await.stopped_mid_step, 1, "one death counted");
    engine.stop().await;
    let data = stored(&app, e.id).await;
    assert_eq!((data.in_flight, data.stopped_mid_step), (None, 1), "a clean stop is not a death");

    let (app, engine) = engine_with(store.clone(), &config).await;
    assert_eq!(worked_on_by(&app, &engine, e.id).await.stopped_mid_step, 1);
    engine.halt().await;

    let (app, _engine) = engine_with(store, &config).await;
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Failed);
    let error = done.error.unwrap();
    assert!(
        error.contains("the server stopped 2 times while running this step")
            && error.contains("executions.max_step_attempts"),
        "{error}"
    );
    let ts = transitions(&app, e.id).await;
    assert_allowed(&ts);
    assert_eq!(kinds(&ts), [TransitionType::Init, TransitionType::Step, TransitionType::Error]);
    assert_eq!((ts[2].current.workflow.as_str(), ts[2].current.step), ("main", 1), "at the step under way");
}

/// A quick look at the time per step (the `executions` bench measures it properly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures"]
async fn time_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Fsync).unwrap());
    let (app, _engine) = engine_on(store).await;
    let steps: Vec<Value> = (0..1000).map(|i| json!({"evaluate": {"i": i, "next": "_.i"}})).collect();
    let id = task(&app, json!({"name": "t", "main": steps})).await;
    let t0 = Instant::now();
    let e = start(&app, id, json!({"i": 0})).await;
    let done = until(&app, e.id, ExecutionStatus::is_terminal).await;
    assert_eq!(done.status, ExecutionStatus::Succeeded, "{:?}", done.error);
    let ts = transitions(&app, e.id).await;
    let mut gaps: Vec<i64> =
        ts.windows(2).map(|w| (w[1].created_at - w[0].created_at).num_microseconds().unwrap()).collect();
    gaps.sort();
    println!(
        "1000 steps in {:?}; p50 {} µs, p90 {} µs",
        t0.elapsed(),
        gaps[gaps.len() / 2],
        gaps[gaps.len() * 9 / 10]
    );
}

/// The floor under [`time_per_step`]: the same commits, made directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures"]
async fn time_per_commit() {
    use crate::store::{Expect, Kind, Op, Record, Store};
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Fsync).unwrap());
    let exec = Uuid::now_v7();
    let mut rec = Record::new(Kind::Execution, exec, Uuid::nil(), json!({"status": "running", "input": {}}));
    store.commit(T.0, vec![Op::Put { record: rec.clone(), expect: Expect::Absent }]).await.unwrap();
    let mut gaps = Vec::new();
    for i in 0..1000 {
        let t0 = Instant::now();
        let t = Record::fresh(
            Kind::Transition,
            exec,
            json!({"type": "step", "output": {"i": i}, "key": format!("main[{i}]")}),
        );
        let v = rec.version;
        rec.data["transitions"] = json!(i);
        store
            .commit(
                T.0,
                vec![
                    Op::Put { record: t, expect: Expect::Absent },
                    Op::Put { record: rec.clone(), expect: Expect::Version(v) },
                ],
            )
            .await
            .unwrap();
        rec.version += 1;
        gaps.push(t0.elapsed().as_micros());
    }
    gaps.sort();
    println!("1000 commits: p50 {} µs, p90 {} µs", gaps[500], gaps[900]);
}
