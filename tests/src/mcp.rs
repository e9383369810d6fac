//! [`FakeMcp`]: the `fake-mcp` binary (tests/src/bin/fake-mcp.rs) as a child
//! process, killed when dropped. A process of its own, so that its `crash`
//! tool can end it in the middle of a call.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `fake-mcp`.
pub struct FakeMcp {
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    pub child: Child,
}

impl FakeMcp {
    /// Starts `fake-mcp` and waits (at most 20 s) for the URL it prints.
    pub fn start() -> FakeMcp {
        let mut child = Command::new(binary())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line.trim().to_string());
        });
        let url = rx.recv_timeout(Duration::from_secs(20)).ok().filter(|u| u.starts_with("http://"));
        let Some(url) = url else {
            let _ = child.kill();
            panic!("fake-mcp printed no URL within 20 s");
        };
        FakeMcp { url, child }
    }

    /// How many `tools/list` and `tools/call` requests it has served.
    pub async fn counts(&self) -> (u64, u64) {
        let base = self.url.trim_end_matches("/mcp");
        let counts: Value =
            reqwest::get(format!("{base}/calls")).await.unwrap().json().await.expect("fake-mcp's counts");
        (counts["lists"].as_u64().unwrap(), counts["calls"].as_u64().unwrap())
    }

    /// How many calls of `tool` have begun.
    pub async fn calls_of(&self, tool: &str) -> u64 {
        let base = self.url.trim_end_matches("/mcp");
        let counts: Value =
            reqwest::get(format!("{base}/calls")).await.unwrap().json().await.expect("fake-mcp's counts");
        counts["tools"][tool].as_u64().unwrap_or(0)
    }

    /// How many times `note` was called with each text.
    pub async fn notes(&self) -> std::collections::BTreeMap<String, u64> {
        let base = self.url.trim_end_matches("/mcp");
        let counts: Value =
            reqwest::get(format!("{base}/calls")).await.unwrap().json().await.expect("fake-mcp's counts");
        serde_json::from_value(counts["notes"].clone()).unwrap_or_default()
    }

    /// Whether the process has exited (as `crash` makes it).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

impl Drop for FakeMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary: `FAKE_MCP_BIN` when set (CI, from `cargo xtask test-binaries`),
/// else the one cargo built beside the test binary (`target/<profile>/fake-mcp`:
/// cargo builds a package's binaries before its integration tests).
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FAKE_MCP_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/..");
    let path = profile_dir.join(format!("fake-mcp{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} is missing: build it with `cargo test --workspace --no-run`", path.display());
    path
}
