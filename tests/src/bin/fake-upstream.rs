//! `fake-upstream`: the tests' scripted OpenAI-compatible server, on its own.
//!
//! Listens on `127.0.0.1:0`, prints its base URL (`http://127.0.0.1:PORT/v1`)
//! on stdout and serves until it is killed: every chat completion answers the
//! last user message back (streamed or not; see `Behaviour::Echo` for tool
//! calls), `/v1/embeddings` answers deterministic vectors. `.ci/fuzz` points the fuzzed server at it, so that
//! chat and embeddings run end to end without a real model.
//!
//! `fake-upstream --call-mentioned-tools` also calls an offered tool whose
//! subject the last user message names (`Behaviour::CallMentionedTools`), as
//! conformance suites that ask a model to use a tool expect.

use std::io::Write;

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};

#[tokio::main]
async fn main() {
    let fake = FakeUpstream::start().await;
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--call-mentioned-tools") => fake.set_default(Behaviour::CallMentionedTools),
        Some(other) => {
            eprintln!("fake-upstream: unknown argument {other:?} (the one known: --call-mentioned-tools)");
            std::process::exit(2);
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", fake.base_url()).expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    std::future::pending::<()>().await;
}
