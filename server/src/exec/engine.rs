//! The engine: runs executions on a bounded pool of workers inside the server.
//!
//! An execution is run by one [`Run`] at a time in this process: started when
//! the execution is created or resumed, when the server starts (every
//! execution that was under way at the last stop goes on from its last
//! transition), and again when a run could not reach the store. A run holds
//! one of `workers` slots while it works; a sleeping run gives its slot back.
//! A cancel aborts the run at once (an in-flight model or HTTP call is dropped).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::AbortHandle;
use uuid::Uuid;

use super::api_call::ApiCallPolicy;
use super::expr::Evaluator;
use super::records::{ExecutionData, read};
use super::run::{Run, Stop};
use crate::app::{App, Tenant};
use crate::config::{ExecutionsConfig, ToolsConfig};
use crate::store::Kind;

/// How long a run that could not reach the store waits before it tries again.
const STORE_RETRY: Duration = Duration::from_secs(2);
/// How long a stopping engine waits for its aborted runs to be gone.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// What is known of an execution this process runs.
#[derive(Default)]
struct Active {
    /// The run under way.
    abort: Option<AbortHandle>,
    /// Run it again when this run ends (it was resumed while it ended).
    again: bool,
}

pub struct Engine {
    pub app: App,
    pub config: ExecutionsConfig,
    pub eval: Evaluator,
    pub policy: ApiCallPolicy,
    /// For `api_call` tools: no credentials of ours, no redirects.
    pub http: reqwest::Client,
    pub(super) slots: Arc<Semaphore>,
    active: parking_lot::Mutex<HashMap<Uuid, Active>>,
    /// Bumped by every commit of a transition: streams of transitions wait on it.
    changes: watch::Sender<u64>,
    stopping: std::sync::atomic::AtomicBool,
    log: slog::Logger,
}

impl Engine {
    /// Starts the engine for `app` (which then starts and stops executions
    /// through it) and resumes every execution that was under way.
    pub async fn start(
        app: &App,
        config: &ExecutionsConfig,
        tools: &ToolsConfig,
        log: slog::Logger,
    ) -> crate::app::Result<Arc<Engine>> {
        let http =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().map_err(|e| {
                crate::app::Error::Internal(format!("cannot build the HTTP client of api_call tools: {e}"))
            })?;
        let engine = Arc::new(Engine {
            app: app.clone(),
            config: config.clone(),
            eval: Evaluator::new(config.expression_fuel),
            policy: ApiCallPolicy::from_config(tools, config),
            http,
            slots: Arc::new(Semaphore::new(config.workers.max(1))),
            active: Default::default(),
            changes: watch::channel(0).0,
            stopping: Default::default(),
            log,
        });
        app.install_engine(&engine);
        let mut resumed = 0;
        for (tenant, active) in app.store.scan_kind(Kind::ActiveExecution).await? {
            let Some(rec) = app.store.get(tenant, Kind::Execution, active.id).await? else { continue };
            let data: ExecutionData = read(&rec)?;
            if !data.status().is_terminal()
                && data.status() != crate::api::types::ExecutionStatus::AwaitingInput
            {
                engine.enqueue(Tenant(tenant), rec.id);
                resumed += 1;
            }
        }
        if resumed > 0 {
            slog::info!(engine.log, "resuming executions that were under way at the last stop"; "count" => resumed);
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
            let Ok(slot) = engine.slots.clone().acquire_owned().await else { return };
            let run = match Run::load(engine.clone(), tenant, id, slot).await {
                Ok(Some(run)) => run,
                Ok(None) => return,
                Err(stop) => return engine.stopped(tenant, id, stop),
            };
            if let Err(stop) = run.run().await {
                engine.stopped(tenant, id, stop);
            }
        });
        active.insert(id, Active { abort: Some(task.abort_handle()), again: false });
    }

    /// What follows a run that stopped before the execution's end.
    fn stopped(self: &Arc<Self>, tenant: Tenant, id: Uuid, stop: Stop) {
        match stop {
            Stop::Suspended | Stop::Gone => {}
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
    pub async fn stop(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        for a in self.active.lock().values_mut() {
            if let Some(abort) = a.abort.take() {
                abort.abort();
            }
        }
        let deadline = tokio::time::Instant::now() + STOP_WAIT;
        while !self.active.lock().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Tells the streams of transitions that something committed.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later [`Engine::changed`].
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// How many executions this process is running (sleeping ones included).
    pub fn running(&self) -> usize {
        self.active.lock().len()
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
