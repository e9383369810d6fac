//! The engine that runs tasks: executions advance step by step, each step's
//! outcome committed as a transition before the next starts.
//!
//! - [`engine`]: the pool of workers that runs executions, resumes them at start, cancels them.
//! - [`change`]: the writes of an execution by others than its run (start, cancel, resume,
//!   an operator's fail), and the engine as the domain's [`crate::app::executions::Runner`].
//! - [`crate::app::lease`]: on a shared store, which server runs an execution.
//! - [`run`]: one run of an execution: the interpreter, replaying committed transitions.
//! - [`key`]: the keys of transitions (which step, which moment of it), by which runs replay.
//! - [`records`]: what is stored of executions, transitions and task snapshots.
//! - [`expr`]: the expression language of steps (minijinja expressions, sandboxed, with fuel).
//! - [`crate::tools::api_call`]: `api_call` tools, run by the server, only to allowed hosts.
//! - [`prompt`]: `prompt` steps and `tool_call` steps: the model, and the tools it calls.

pub mod change;
pub mod engine;
pub mod expr;
pub mod key;
pub mod prompt;
pub mod records;
pub mod run;

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod tests;
