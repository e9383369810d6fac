//! The end-to-end tests, one module per resource or concern, all linked into
//! this one test binary (the client, the server and reqwest are linked once,
//! not once per file). Each test starts its own server (in-process, or the
//! real binary as a child process) on its own temporary data dir, so tests
//! run in parallel; `store_open`'s tests share only a store made once, which
//! each copies before damaging it.
//!
//! Select a module or a test by its path:
//! `cargo test -p agent-platform-tests -- agents::` or
//! `cargo test -p agent-platform-tests --test e2e -- crash:: --nocapture`.

mod agent_file;
mod agent_loop;
mod agents;
mod background;
mod bounds;
mod browser;
mod cascades;
mod chat;
mod cli;
mod console;
mod contention;
mod crash;
mod disk_full;
mod docs;
mod executions;
mod hardening;
mod http_edge;
mod idempotency;
mod isolation;
mod keys;
mod lists;
mod mcp_client;
mod memory;
mod openai;
mod openai_compat;
mod openai_socket;
mod openai_wire;
mod scale_out;
mod search;
mod secrets;
mod sessions;
mod store_open;
mod tasks;
mod tools;
mod upgrade;
mod users;
