//! `fake-upstream`: the tests' scripted OpenAI-compatible server, on its own.
//!
//! Listens on `127.0.0.1:0`, prints its base URL (`http://127.0.0.1:PORT/v1`)
//! on stdout and serves until it is killed: every chat completion answers the
//! last user message back (streamed or not; see `Behaviour::Echo` for tool
//! calls), `/v1/embeddings` answers deterministic vectors. `.ci/fuzz` points the fuzzed server at it, so that
//! chat and embeddings run end to end without a real model.

use std::io::Write;

use agent_platform::models::fake_upstream::FakeUpstream;

#[tokio::main]
async fn main() {
    let fake = FakeUpstream::start().await;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", fake.base_url()).expect("stdout");
    out.flush().expect("stdout");
    drop(out);
    std::future::pending::<()>().await;
}
