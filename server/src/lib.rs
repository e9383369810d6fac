//! agent-platform: a self-hostable backend for AI agents over HTTP/JSON.
//!
//! Layers, outermost first: [`api`] (the contract, in its own crate
//! `agent-platform-api`: Dropshot trait, types, errors, validation) →
//! [`http`] (the handlers: all of HTTP and nothing else) → [`app`] (the
//! domain, with [`models`], the language models) → [`store`] (storage behind
//! an async trait; sled embedded, or PostgreSQL) → [`search`] (text analysis
//! and the document index, which the store and the domain use) and
//! [`metadata`] (what a metadata filter matches, for lists and searches alike).
//! [`tools`] holds the outbound side of tools the server runs (the policy of
//! where they may go, the MCP client).
//! [`server`] wires them together from a [`config::Config`].

#![forbid(unsafe_code)]

/// The allocator: mimalloc, not the C library's. Parsing a request or
/// assembling a prompt makes thousands of small allocations (a chat
/// completion of 1,000 messages builds and drops ~8,000 values); on glibc's
/// allocator `malloc`/`free` take 29% of the chat bench's CPU time
/// (consolidating and unlinking chunks). Declared in the library, not in
/// `main.rs`, so that whatever runs the service in process (the benches, the
/// tests) allocates as the binary does. Built with mimalloc's `no_thp`
/// feature (the workspace's `Cargo.toml`): it does not ask the kernel for
/// transparent huge pages, which are resident (and zeroed) 2 MiB at a time;
/// with them, 1M messages + 1M snippets keep 45–70 MB more resident, the first
/// answer after a restart takes twice as long, and under 32 writing clients
/// page faults double the p99 (server/docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The contract crate, under the path the server's modules name it by.
pub mod api {
    pub use agent_platform_api::*;
}
pub mod app;
pub mod config;
pub mod exec;
pub mod http;
pub mod metadata;
pub mod models;
pub mod search;
pub mod server;
pub mod store;
pub mod tools;
