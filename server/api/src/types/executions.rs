//! Contract types of executions: runs of a task, and the transitions each
//! step of a run commits.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::types::{
    Direction, JsonObject, Limit, ListParams, Metadata, Offset, SortBy, parse_metadata_filter,
};
use crate::validate::{Check, Issues};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecutionPath {
    /// The execution's id.
    pub id: Uuid,
}

impl Check for ExecutionPath {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ExecutionTransitionPath {
    /// The execution's id.
    pub id: Uuid,
    /// The transition's id.
    pub transition_id: Uuid,
}

impl Check for ExecutionTransitionPath {}

/// Where an execution is. `queued → starting → running ↔ awaiting_input →
/// succeeded | failed | cancelled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    Queued,
    Starting,
    Running,
    AwaitingInput,
    Succeeded,
    Failed,
    Cancelled,
}

impl ExecutionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Queued => "queued",
            ExecutionStatus::Starting => "starting",
            ExecutionStatus::Running => "running",
            ExecutionStatus::AwaitingInput => "awaiting_input",
            ExecutionStatus::Succeeded => "succeeded",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the execution has ended (nothing changes it any more).
    pub fn is_terminal(self) -> bool {
        matches!(self, ExecutionStatus::Succeeded | ExecutionStatus::Failed | ExecutionStatus::Cancelled)
    }

    /// Whether an execution may go from `from` to `self`.
    pub fn allowed_from(self, from: ExecutionStatus) -> bool {
        use ExecutionStatus::*;
        match self {
            Queued => false,
            Starting => from == Queued,
            Running => matches!(from, Starting | AwaitingInput | Running),
            AwaitingInput => matches!(from, Starting | Running),
            Cancelled => matches!(from, Queued | Starting | AwaitingInput | Running),
            Succeeded => matches!(from, Starting | AwaitingInput | Running),
            Failed => matches!(from, Starting | Running),
        }
    }
}

/// A run of a task.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Execution {
    pub id: Uuid,
    pub task_id: Uuid,
    pub status: ExecutionStatus,
    /// The input the execution was started with.
    pub input: JsonObject,
    /// The value the task returned (when `succeeded`).
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// While a `sleep` step waits: when it ends (the execution keeps its status:
    /// `running`, or `starting` when the sleep is its first step).
    pub sleeping_until: Option<DateTime<Utc>>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a transition records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransitionType {
    Init,
    InitBranch,
    Step,
    Resume,
    FinishBranch,
    Wait,
    Finish,
    Error,
    Cancelled,
}

impl TransitionType {
    /// The status an execution has after a transition of this type.
    pub fn status(self) -> ExecutionStatus {
        use TransitionType::*;
        match self {
            Init => ExecutionStatus::Starting,
            InitBranch | Step | Resume | FinishBranch => ExecutionStatus::Running,
            Wait => ExecutionStatus::AwaitingInput,
            Finish => ExecutionStatus::Succeeded,
            Error => ExecutionStatus::Failed,
            Cancelled => ExecutionStatus::Cancelled,
        }
    }

    /// Whether a transition of type `next` may follow one of this type.
    pub fn allows_next(self, next: TransitionType) -> bool {
        use TransitionType::*;
        match self {
            Init => matches!(next, Wait | Error | Step | Cancelled | InitBranch | Finish),
            InitBranch => matches!(next, Wait | Error | Step | Cancelled | FinishBranch),
            Wait => matches!(next, Resume | Step | Cancelled | Finish | FinishBranch),
            Step | Resume => {
                matches!(next, Wait | Error | Cancelled | Step | Finish | FinishBranch | InitBranch)
            }
            FinishBranch => matches!(next, Wait | Error | Cancelled | Step | Finish | InitBranch),
            Finish | Error | Cancelled => false,
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, TransitionType::Finish | TransitionType::Error | TransitionType::Cancelled)
    }
}

/// A place in a task: a workflow (`main`, a named sub-workflow, or a nested
/// list of steps such as `main[2].then`) and a step's index in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TransitionTarget {
    pub workflow: String,
    pub step: i64,
}

/// One committed change of an execution.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Transition {
    pub id: Uuid,
    pub execution_id: Uuid,
    #[serde(rename = "type")]
    pub kind: TransitionType,
    /// The step's output (see each type).
    pub output: Value,
    /// The step this transition ends or enters.
    pub current: TransitionTarget,
    /// The step that runs next, or null (after `wait`, `finish`, `error`, `cancelled`).
    pub next: Option<TransitionTarget>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /api/tasks/{task_id}/executions`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateExecutionRequest {
    /// The task's input, checked against its `input_schema`.
    pub input: JsonObject,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

impl Check for CreateExecutionRequest {}

/// The statuses a client may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestedStatus {
    /// Stop the execution.
    Cancelled,
    /// Resume an execution that is `awaiting_input`.
    Running,
}

/// Body of `PUT /api/executions/{id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct UpdateExecutionRequest {
    pub status: RequestedStatus,
    /// With `cancelled`: why (kept as the execution's `error`).
    #[serde(default)]
    pub reason: Option<String>,
    /// With `running`: the input the waiting step gets.
    #[serde(default)]
    pub input: Option<Value>,
}

impl Check for UpdateExecutionRequest {}

fn asc() -> Direction {
    Direction::Asc
}

/// Paging, order and filter of an execution's transitions: oldest first
/// unless asked (a transition never changes, so it has no `sort_by`).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct TransitionListParams {
    /// How many transitions to answer at most (1 to 1000). A page also stops
    /// adding transitions once its body would pass 8 MiB (it always has at
    /// least one): page on with `offset += len(items)` until a page comes back empty.
    #[serde(default)]
    pub limit: Limit,
    /// How many transitions to skip first.
    #[serde(default)]
    pub offset: Offset,
    /// Oldest first (`asc`, the default) or newest first (`desc`).
    #[serde(default = "asc")]
    pub direction: Direction,
    /// A JSON object, e.g. `{"lang":"en"}`: only transitions whose metadata has
    /// every given top-level key with an equal value. Bounded as metadata is (at
    /// most 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<String>,
}

impl Check for TransitionListParams {
    fn check(&self, issues: &mut Issues) {
        parse_metadata_filter(self.metadata_filter.as_deref(), issues);
    }
}

impl From<TransitionListParams> for ListParams {
    fn from(p: TransitionListParams) -> Self {
        ListParams {
            limit: p.limit,
            offset: p.offset,
            sort_by: SortBy::CreatedAt,
            direction: p.direction,
            metadata_filter: p.metadata_filter,
        }
    }
}

/// The headers of `GET /api/executions/{id}/transitions.stream`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LastEventIdHeader {
    /// The `id` of the last event received: the stream resumes after that
    /// transition (an event source sends it by itself when it reconnects).
    #[serde(rename = "last-event-id", default)]
    pub last_event_id: Option<Uuid>,
}

impl Check for LastEventIdHeader {}
