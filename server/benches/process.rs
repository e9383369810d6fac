//! The release binary, and server processes of it, for the benches that run
//! the server as a process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Builds the server binary in the profile this bench was built in and
/// answers its path: the release binary under `cargo bench`; under `cargo
/// test` (CI runs the scale bench small that way) the one the end-to-end tests
/// run, found as they find it ([`agent_platform_tests::binary`]: the one
/// `cargo test --workspace` built, so nothing is compiled again).
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    if profile_dir.file_name().is_none_or(|n| n != "release") {
        return agent_platform_tests::binary();
    }
    let target_dir = profile_dir.parent().expect("target/<profile>");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--release", "-p", "agent-platform", "--bin", "agent-platform"])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the server binary failed");
    profile_dir.join("agent-platform")
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    /// Where it listens, e.g. `http://127.0.0.1:40123`.
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin serve` on `data_dir` (on core `cpu` when given) with `env`,
/// logging errors only, and waits up to `wait` for its address. Its standard
/// error is read to the end (so it never blocks the server); its standard
/// output is piped for the caller (a new store's key comes there).
pub fn serve(
    bin: &Path,
    data_dir: &Path,
    cpu: Option<usize>,
    env: &[(&str, String)],
    wait: Duration,
) -> Server {
    let mut cmd = match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c.to_string()).arg(bin);
            cmd
        }
        None => Command::new(bin),
    };
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("AGENT_PLATFORM_LOG_LEVEL", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the server starts");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(at) = line.split("listening on ").nth(1) {
                let _ = tx.send(at.trim().to_string());
            }
        }
    });
    // Killed if it does not say where it listens.
    let mut server = Server { child, base: String::new() };
    server.base = rx.recv_timeout(wait).expect("the server did not say where it listens (it exited?)");
    server
}
