//! The engine: runs executions on a bounded pool of workers inside the server.
//!
//! An execution is run by one [`Run`] at a time in this process: started when
//! the execution is created or resumed, when the server starts (every
//! execution that was under way at the last stop goes on from its last
//! transition), and again when a run could not reach the store. A run holds
//! one of `workers` slots while it works. A sleep outside concurrent branches
//! drops the run: the engine keeps only its due time (a timer, below) and
//! loads it again then; at start, such sleeping executions are only timed.
//! On a shared store the run also releases its lease, the execution's marker
//! says until when it sleeps, and every server times it (the first to claim
//! it when due runs it). A sleep inside a parallel branch keeps its run in
//! memory, giving its slot back. A cancel aborts the run at once (an
//! in-flight model or HTTP call is dropped).
//!
//! Every engine has an id of its own (new at every start). A run's commits
//! name it in the execution's record while the run works ([`ExecutionData::in_flight`]);
//! a clean stop clears it. A run that finds another engine's id there counts a
//! server that stopped mid-step, durably, before it runs anything; once
//! `executions.max_step_attempts` have, the execution fails instead (see
//! [`Run::begin`](super::run::Run)).
//!
//! On a shared store (several servers on one database) a run also holds the
//! execution's lease (see [`super::lease`]), and the engine looks every third
//! of `executions.lease_s` for executions under way whose lease nobody holds
//! (their server died, or stopped): it claims and runs them. That look is
//! also how a starting server resumes what was under way.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, Semaphore, broadcast, watch};
use tokio::task::AbortHandle;
use uuid::Uuid;

use super::expr::Evaluator;
use super::records::{ExecutionData, commit_ops, marker_asleep_until, marker_waits, read};
use super::run::{Run, Stop};
use crate::api::types::ExecutionStatus;
use crate::app::lease::{Claim, Held, Leases, Lost, lease_of};
use crate::app::{App, Tenant};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::store::{Change, Kind, Store, StoreError, StoreResult, now};
use crate::tools::api_call::ApiCallPolicy;

/// How long a run that could not reach the store waits before it tries again.
const STORE_RETRY: Duration = Duration::from_secs(2);
/// How long room under the cap of executions under way is trusted (see [`Engine::give_cap_room`]).
const CAP_ROOM_FOR: Duration = Duration::from_secs(1);
/// How long a stopping engine waits for its aborted runs to be gone.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// What is known of an execution this process runs.
struct Active {
    tenant: Tenant,
    /// The run under way.
    abort: Option<AbortHandle>,
    /// Run it again when this run ends (it was resumed while it ended).
    again: bool,
    /// The execution's lease, once this run claimed it (shared stores only).
    lease: Option<Arc<Held>>,
}

/// The executions asleep, unloaded, by due time.
#[derive(Default)]
struct Timers {
    due: BTreeSet<(DateTime<Utc>, Uuid)>,
    of: HashMap<Uuid, (DateTime<Utc>, Tenant)>,
}

/// How a run that was not stopped ended.
enum Ended {
    /// A commit ended the execution (and deleted its lease, if it had one).
    ByCommit,
    /// There was nothing to run: the execution is gone or has ended.
    Nothing,
}

pub struct Engine {
    /// This engine's id, new at every start (on a shared store, the server's id in leases).
    pub id: Uuid,
    /// This engine, for what runs its executions from `&self` (see [`super::change`]).
    pub(super) me: std::sync::Weak<Engine>,
    pub app: App,
    pub config: ExecutionsConfig,
    pub eval: Arc<Evaluator>,
    /// Where `api_call` tools may go (and the client that keeps to it).
    pub policy: ApiCallPolicy,
    pub(super) slots: Arc<Semaphore>,
    active: parking_lot::Mutex<HashMap<Uuid, Active>>,
    /// How many runs are loaded (in memory) now.
    pub(super) loaded: AtomicUsize,
    /// The executions asleep with no run loaded, and a wake for their timer
    /// task when an earlier one is added.
    timers: parking_lot::Mutex<Timers>,
    timers_changed: Arc<Notify>,
    /// Per tenant: how many more executions it may start, until when, before
    /// its count under way is looked at again (see [`Engine::take_cap_room`]).
    cap_room: parking_lot::Mutex<HashMap<Uuid, (std::time::Instant, usize)>>,
    /// Bumped by every commit of a transition: streams of transitions wait on it.
    changes: watch::Sender<u64>,
    stopping: std::sync::atomic::AtomicBool,
    /// On a shared store: which server runs what (see [`super::lease`]).
    leases: Option<Leases>,
    /// What runs beside the executions (on a shared store: the look for
    /// executions to take over, the listener of the store's changes).
    background: parking_lot::Mutex<Vec<AbortHandle>>,
    log: slog::Logger,
}

impl Engine {
    /// Starts the engine for `app` (which then starts, cancels and resumes
    /// executions through it, as its [`Runner`](crate::app::executions::Runner))
    /// and resumes every execution that was under way.
    pub async fn start(
        app: &App,
        config: &ExecutionsConfig,
        tools: &ToolsConfig,
        log: slog::Logger,
    ) -> crate::app::Result<Arc<Engine>> {
        let policy = ApiCallPolicy::from_config(tools, config).map_err(crate::app::Error::Internal)?;
        let leases = app.store.shared().then(|| Leases::new(config.lease_s));
        let engine = Arc::new_cyclic(|me| Engine {
            id: leases.as_ref().map_or_else(Uuid::new_v4, |l| l.server),
            me: me.clone(),
            app: app.clone(),
            config: config.clone(),
            eval: Arc::new(Evaluator::new(config.expression_bounds())),
            policy,
            slots: Arc::new(Semaphore::new(config.workers.max(1))),
            active: Default::default(),
            loaded: AtomicUsize::new(0),
            timers: Default::default(),
            timers_changed: Arc::default(),
            cap_room: Default::default(),
            changes: watch::channel(0).0,
            stopping: Default::default(),
            leases,
            background: Default::default(),
            log,
        });
        let runner: Arc<dyn crate::app::executions::Runner> = engine.clone();
        app.install_runner(Arc::downgrade(&runner));
        engine.start_timers();
        if engine.leases.is_some() {
            // What was under way is found by the first look, as is what another server leaves.
            engine.share();
            return Ok(engine);
        }
        let (mut resumed, mut asleep) = (0, 0);
        for (tenant, active) in app.store.scan_kind(Kind::ActiveExecution).await? {
            let Some(rec) = app.store.get(tenant, Kind::Execution, active.id).await? else { continue };
            let data: ExecutionData = read(&rec)?;
            if data.status().is_terminal() || data.status() == ExecutionStatus::AwaitingInput {
                continue;
            }
            match data.asleep_until {
                Some(due) if due > now() => {
                    engine.schedule(Tenant(tenant), rec.id, due);
                    asleep += 1;
                }
                _ => {
                    engine.enqueue(Tenant(tenant), rec.id);
                    resumed += 1;
                }
            }
        }
        if resumed + asleep > 0 {
            slog::info!(engine.log, "resuming executions that were under way at the last stop";
                "count" => resumed, "asleep" => asleep);
        }
        Ok(engine)
    }

    /// Runs the execution (again): now if no run of it is under way here, else
    /// once that run ends.
    pub fn enqueue(self: &Arc<Self>, tenant: Tenant, id: Uuid) {
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut active = self.active.lock();
        if let Some(a) = active.get_mut(&id) {
            a.again = true;
            return;
        }
        let engine = self.clone();
        let task = tokio::spawn(async move {
            let _done = Finished { engine: engine.clone(), tenant, id };
            if engine.leases.is_some() {
                return engine.run_leased(tenant, id).await;
            }
            if let Err(stop) = engine.run_once(tenant, id).await {
                engine.stopped(tenant, id, stop);
            }
        });
        active.insert(id, Active { tenant, abort: Some(task.abort_handle()), again: false, lease: None });
    }

    /// One run of the execution, in one of the engine's slots.
    async fn run_once(self: &Arc<Self>, tenant: Tenant, id: Uuid) -> Result<Ended, Stop> {
        let Ok(slot) = self.slots.clone().acquire_owned().await else { return Ok(Ended::Nothing) };
        let Some(run) = Run::load(self.clone(), tenant, id, slot).await? else { return Ok(Ended::Nothing) };
        run.run().await.map(|()| Ended::ByCommit)
    }

    /// One run of the execution on a shared store: while this server holds its
    /// lease, and not at all when another server does.
    async fn run_leased(self: &Arc<Self>, tenant: Tenant, id: Uuid) {
        let Some(leases) = &self.leases else { return };
        let store = self.app.store.as_ref();
        let held = match claim(leases, store, tenant, id).await {
            Ok(Claim::Held(held)) => held,
            Ok(Claim::Nothing) => return,
            Ok(Claim::Busy { holder, expires_at }) => {
                slog::debug!(self.log, "execution left to the server holding its lease";
                    "execution" => %id, "holder" => %holder, "expires_at" => %expires_at);
                return;
            }
            Err(e) => return self.stopped(tenant, id, Stop::Store(e.into())),
        };
        if let Some(old) = &held.took_over {
            slog::warn!(self.log, "taking over an execution whose server let its lease expire";
                "execution" => %id, "from" => %old.holder, "expired_at" => %old.expires_at);
        }
        if let Some(a) = self.active.lock().get_mut(&id) {
            a.lease = Some(held.clone());
        }
        let outcome = tokio::select! {
            ended = self.run_once(tenant, id) => ended,
            lost = leases.keep(store, &held) => {
                // The run is dropped here, mid-step if it was in one.
                return self.lost(tenant, id, lost);
            }
        };
        match outcome {
            Ok(Ended::ByCommit) => {}
            // Runs again here at once, or after a while: the lease stays this server's meanwhile.
            Err(stop @ (Stop::Reload | Stop::Store(_))) => self.stopped(tenant, id, stop),
            Ok(Ended::Nothing) => self.release(leases, &held).await,
            Err(stop) => {
                self.release(leases, &held).await;
                self.stopped(tenant, id, stop);
            }
        }
    }

    /// Gives up a lease whose run ended without a commit deleting it.
    async fn release(&self, leases: &Leases, held: &Held) {
        if let Err(e) = leases.release(self.app.store.as_ref(), held).await {
            slog::warn!(self.log, "cannot release the lease of an execution; it expires by itself";
                "execution" => %held.id(), "error" => %e, "lease_s" => leases.lease.as_secs());
        }
    }

    /// What follows a run stopped because its lease was lost.
    fn lost(self: &Arc<Self>, tenant: Tenant, id: Uuid, lost: Lost) {
        match lost {
            // The execution ended, or waits for input, by a commit of another server (a cancel).
            Lost::Released => {}
            Lost::TakenOver { by } => {
                slog::warn!(self.log, "another server took over an execution: its run here stopped";
                    "execution" => %id, "holder" => %by);
            }
            Lost::Unreachable(e) => {
                slog::warn!(self.log, "execution stopped: its lease could not be renewed";
                    "execution" => %id, "error" => %e);
                // Claimed again (by this server or another) once the store answers.
                self.stopped(tenant, id, Stop::Store(e.into()));
            }
        }
    }

    /// Starts what a server on a shared store runs beside its executions: the
    /// periodic look for executions to run, and the listener that stops a run
    /// at once when its lease changes elsewhere (and wakes the streams of
    /// transitions when an execution changes on any server).
    fn share(self: &Arc<Self>) {
        let Some(leases) = &self.leases else { return };
        let period = leases.period();
        let weak = Arc::downgrade(self);
        let look = tokio::spawn(async move {
            loop {
                let Some(engine) = weak.upgrade() else { return };
                if engine.stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                if let Err(e) = engine.discover().await {
                    slog::warn!(engine.log, "cannot look for executions to run; trying again";
                        "error" => %e, "retry_in_s" => period.as_secs_f64());
                }
                drop(engine);
                tokio::time::sleep(period).await;
            }
        });
        let mut background = vec![look.abort_handle()];
        if let Some(mut changes) = self.app.store.changes() {
            let weak = Arc::downgrade(self);
            let listen = tokio::spawn(async move {
                loop {
                    let change = changes.recv().await;
                    let Some(engine) = weak.upgrade() else { return };
                    match change {
                        Ok(Change::Record { kind: Kind::ExecutionLease, id, .. }) => {
                            engine.lease_changed(Some(id))
                        }
                        // An execution changed, maybe on another server: streams of transitions look.
                        Ok(Change::Record { kind: Kind::Execution, .. }) => engine.changed(),
                        Ok(Change::Unknown) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            engine.lease_changed(None);
                            engine.changed();
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
            background.push(listen.abort_handle());
        }
        self.background.lock().extend(background);
    }

    /// Wakes the keeper of the lease `id` (of every lease, for `None`), which
    /// checks whether it is still this server's.
    fn lease_changed(&self, id: Option<Uuid>) {
        let active = self.active.lock();
        let held = |a: &Active| a.lease.as_ref().map(|held| held.wake.clone());
        match id {
            Some(id) => active.get(&id).and_then(held).into_iter().for_each(|wake| wake.notify_one()),
            None => active.values().filter_map(held).for_each(|wake| wake.notify_one()),
        }
    }

    /// Runs every execution under way that no live lease covers (its server
    /// died or stopped): the start-up resume of a shared store, and its
    /// failover. An execution whose lease is held by a server that has not
    /// renewed it lately waits for that lease to expire, and says so.
    async fn discover(self: &Arc<Self>) -> StoreResult<()> {
        let Some(leases) = &self.leases else { return Ok(()) };
        let store = self.app.store.as_ref();
        let markers = store.scan_kind(Kind::ActiveExecution).await?;
        if markers.is_empty() {
            return Ok(());
        }
        let held: HashMap<(Uuid, Uuid), _> = store
            .scan_kind(Kind::ExecutionLease)
            .await?
            .into_iter()
            .map(|(t, rec)| ((t, rec.id), rec))
            .collect();
        let mut claimable = Vec::new();
        for (tenant, marker) in markers {
            if marker_waits(&marker) || self.active.lock().contains_key(&marker.id) {
                continue;
            }
            if let Some(due) = marker_asleep_until(&marker)
                && due > now()
            {
                // Nothing to claim before then; whichever server claims it first when due runs it.
                self.schedule(Tenant(tenant), marker.id, due);
                continue;
            }
            if let Some(rec) = held.get(&(tenant, marker.id)) {
                let lease = lease_of(rec);
                let at = now();
                if lease.holder != leases.server && lease.expires_at >= at {
                    let silent = (at - rec.updated_at).to_std().unwrap_or_default();
                    if silent > 2 * leases.period() {
                        slog::info!(self.log, "execution waits for the lease of a server that stopped renewing it";
                            "execution" => %marker.id, "holder" => %lease.holder,
                            "silent_s" => silent.as_secs_f64(), "taken_over_at" => %lease.expires_at);
                    }
                    continue;
                }
            }
            claimable.push((Tenant(tenant), marker.id));
        }
        let mut claiming = 0;
        for (tenant, id) in claimable {
            // One read each, in turn (not a burst of them): markers written
            // before they said whether their execution waits say nothing.
            let Some(rec) = store.get(tenant.0, Kind::Execution, id).await? else { continue };
            let runnable = read::<ExecutionData>(&rec).map_or(true, |d| {
                !d.status().is_terminal()
                    && d.status() != ExecutionStatus::AwaitingInput
                    && d.asleep_until.is_none_or(|due| due <= now())
            });
            if runnable {
                self.enqueue(tenant, id);
                claiming += 1;
            }
        }
        if claiming > 0 {
            slog::info!(self.log, "claiming executions under way that no server runs"; "count" => claiming);
        }
        Ok(())
    }

    /// What follows a run that stopped before the execution's end.
    fn stopped(self: &Arc<Self>, tenant: Tenant, id: Uuid, stop: Stop) {
        match stop {
            Stop::Suspended | Stop::Gone => {}
            Stop::Asleep(due) => self.schedule(tenant, id, due),
            // Called from the run itself: the execution runs again once this run is gone.
            Stop::Reload => self.enqueue(tenant, id),
            Stop::Failed(msg) => {
                // Failing could not even be recorded (the snapshot is unreadable).
                slog::error!(self.log, "execution cannot run"; "execution" => %id, "error" => msg);
            }
            Stop::Store(e) => {
                slog::warn!(self.log, "execution stopped: the store failed; trying again";
                    "execution" => %id, "error" => %e, "retry_in_s" => STORE_RETRY.as_secs());
                // Weak: a stopping server's engine is not kept alive by a retry.
                let engine = Arc::downgrade(self);
                tokio::spawn(async move {
                    tokio::time::sleep(STORE_RETRY).await;
                    if let Some(engine) = engine.upgrade() {
                        engine.enqueue(tenant, id);
                    }
                });
            }
        }
    }

    /// Stops the run of a cancelled execution, dropping its in-flight step.
    pub fn abort(&self, id: Uuid) {
        self.unschedule(id);
        if let Some(a) = self.active.lock().get_mut(&id) {
            a.again = false;
            if let Some(abort) = a.abort.take() {
                abort.abort();
            }
        }
    }

    /// Stops every run (the server is stopping): their executions go on at the
    /// next start. Waits (at most [`STOP_WAIT`]) until the runs are gone, so
    /// that nothing of this engine holds the store any more.
    ///
    /// On a shared store, the leases of those runs are released, so that
    /// another server goes on with them at its next look instead of after
    /// they expire.
    pub async fn stop(&self) {
        let (held, stopped) = self.halt_runs().await;
        // Their steps were stopped, not cut short by a death: not counted against them.
        let settle = futures::future::join_all(stopped.iter().map(|&(t, id)| self.settle(t, id)));
        if tokio::time::timeout(STOP_WAIT, settle).await.is_err() {
            slog::warn!(self.log, "executions not marked as stopped cleanly in time: their next run counts a stop mid-step";
                "count" => stopped.len());
        }
        let Some(leases) = &self.leases else { return };
        let store = self.app.store.as_ref();
        let releases = futures::future::join_all(held.iter().map(|h| leases.release(store, h)));
        if tokio::time::timeout(STOP_WAIT, releases).await.is_err() {
            slog::warn!(self.log, "leases not released in time: they expire by themselves";
                "count" => held.len(), "lease_s" => leases.lease.as_secs());
        }
    }

    /// Stops every run and what runs beside them, releasing nothing (as a
    /// server that dies would); answers the leases its runs held.
    #[cfg(test)]
    pub(crate) async fn halt(&self) -> Vec<Arc<Held>> {
        self.halt_runs().await.0
    }

    /// [`Engine::halt`], also answering the executions whose runs it stopped.
    async fn halt_runs(&self) -> (Vec<Arc<Held>>, Vec<(Tenant, Uuid)>) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        for task in self.background.lock().drain(..) {
            task.abort();
        }
        let mut held = Vec::new();
        let mut stopped = Vec::new();
        for (&id, a) in self.active.lock().iter_mut() {
            held.extend(a.lease.clone());
            if let Some(abort) = a.abort.take() {
                abort.abort();
                stopped.push((a.tenant, id));
            }
        }
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        while !self.active.lock().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (held, stopped)
    }

    /// Clears this engine's mark on an execution whose run a clean stop ended
    /// (see [`ExecutionData::in_flight`]), so that its next run does not count
    /// the stop as a death. Best effort: an execution left marked counts one.
    async fn settle(&self, tenant: Tenant, id: Uuid) {
        let store = self.app.store.as_ref();
        let settled = async {
            let Some(mut rec) = store.get(tenant.0, Kind::Execution, id).await? else { return Ok(()) };
            let mut data: ExecutionData = read(&rec).map_err(|e| StoreError::Unavailable(e.to_string()))?;
            if data.in_flight != Some(self.id) {
                return Ok(());
            }
            data.in_flight = None;
            let ops = commit_ops(store, tenant.0, &mut rec, &data, &[])
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            match store.commit(tenant.0, ops).await {
                // Written meanwhile (a cancel): whoever wrote it decided.
                Ok(()) | Err(StoreError::Stale) => Ok(()),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = settled.await {
            slog::warn!(self.log, "execution not marked as stopped cleanly: its next run counts a stop mid-step";
                "execution" => %id, "error" => %e);
        }
    }

    /// Runs the execution when `due` comes (it sleeps until then, unloaded).
    fn schedule(&self, tenant: Tenant, id: Uuid, due: DateTime<Utc>) {
        if self.stopping.load(Ordering::Relaxed) {
            return;
        }
        let mut timers = self.timers.lock();
        if let Some((old, _)) = timers.of.insert(id, (due, tenant)) {
            timers.due.remove(&(old, id));
        }
        let first = timers.due.first().is_none_or(|&(at, _)| due < at);
        timers.due.insert((due, id));
        drop(timers);
        if first {
            self.timers_changed.notify_one();
        }
    }

    fn unschedule(&self, id: Uuid) {
        let mut timers = self.timers.lock();
        if let Some((due, _)) = timers.of.remove(&id) {
            timers.due.remove(&(due, id));
        }
    }

    /// Enqueues the executions that are due; answers when the next one is.
    fn wake_due(self: &Arc<Self>) -> Option<DateTime<Utc>> {
        let at = now();
        let mut due = Vec::new();
        let next = {
            let mut timers = self.timers.lock();
            while let Some(&(when, id)) = timers.due.first()
                && when <= at
            {
                timers.due.pop_first();
                if let Some((_, tenant)) = timers.of.remove(&id) {
                    due.push((tenant, id));
                }
            }
            timers.due.first().map(|&(when, _)| when)
        };
        for (tenant, id) in due {
            self.enqueue(tenant, id);
        }
        next
    }

    /// Starts the task that runs sleeping executions when they are due.
    fn start_timers(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let changed = self.timers_changed.clone();
        let task = tokio::spawn(async move {
            loop {
                let notified = changed.notified();
                tokio::pin!(notified);
                // A timer added from here on wakes this wait.
                notified.as_mut().enable();
                let next = match weak.upgrade() {
                    Some(engine) => engine.wake_due(),
                    None => return,
                };
                match next {
                    None => notified.await,
                    Some(at) => {
                        let left = (at - now()).to_std().unwrap_or_default();
                        tokio::select! {
                            _ = tokio::time::sleep(left) => {}
                            _ = notified => {}
                        }
                    }
                }
            }
        });
        self.background.lock().push(task.abort_handle());
    }

    /// Takes one start of the room [`Engine::give_cap_room`] gave the tenant:
    /// false when it has none (its count under way must be looked at).
    pub fn take_cap_room(&self, tenant: Tenant) -> bool {
        let mut room = self.cap_room.lock();
        match room.get_mut(&tenant.0) {
            Some((given, left)) if *left > 0 && given.elapsed() < CAP_ROOM_FOR => {
                *left -= 1;
                true
            }
            _ => {
                room.remove(&tenant.0);
                false
            }
        }
    }

    /// The tenant was seen `n` or more executions under the cap
    /// (`executions.max_active_per_tenant`): its next `n` starts in this
    /// process may skip the look. Starts of other servers are not counted,
    /// hence a short time to live ([`CAP_ROOM_FOR`]).
    pub fn give_cap_room(&self, tenant: Tenant, n: usize) {
        self.cap_room.lock().insert(tenant.0, (std::time::Instant::now(), n));
    }

    /// Tells the streams of transitions that something committed.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later [`Engine::changed`].
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many executions this process is running (waiting for a worker,
    /// working, or asleep in memory: inside a parallel branch, or on a shared store).
    pub fn running(&self) -> usize {
        self.active.lock().len()
    }

    /// How many runs are loaded in memory (working, or asleep in memory).
    pub fn loaded(&self) -> usize {
        self.loaded.load(Ordering::Relaxed)
    }

    /// How many executions sleep unloaded, only their due time kept.
    pub fn scheduled(&self) -> usize {
        self.timers.lock().of.len()
    }

    /// Whether this process is running the execution (asleep in memory included).
    pub fn runs(&self, id: Uuid) -> bool {
        self.active.lock().contains_key(&id)
    }

    /// This server's id in the leases it holds (`None` on an unshared store).
    pub fn server_id(&self) -> Option<Uuid> {
        self.leases.as_ref().map(|l| l.server)
    }
}

/// Removes a run from the active ones when it ends (or is aborted), and
/// starts it again if it was resumed meanwhile.
struct Finished {
    engine: Arc<Engine>,
    tenant: Tenant,
    id: Uuid,
}

impl Drop for Finished {
    fn drop(&mut self) {
        let again = self.engine.active.lock().remove(&self.id).is_some_and(|a| a.again);
        if again {
            self.engine.enqueue(self.tenant, self.id);
        }
    }
}

/// Claims the lease of an execution that has something to run (not gone,
/// ended or waiting for input), if nobody else holds it live. An unreadable
/// execution is claimed too: its run reports it (and fails the execution).
async fn claim(leases: &Leases, store: &dyn Store, tenant: Tenant, id: Uuid) -> StoreResult<Claim> {
    let Some(execution) = store.get(tenant.0, Kind::Execution, id).await? else {
        return Ok(Claim::Nothing);
    };
    if let Ok(data) = read::<ExecutionData>(&execution)
        && (data.status().is_terminal() || data.status() == ExecutionStatus::AwaitingInput)
    {
        return Ok(Claim::Nothing);
    }
    leases.claim_of(store, tenant, Kind::ExecutionLease, (execution.id, execution.scope)).await
}
