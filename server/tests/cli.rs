//! The `agent-platform` command line: help and key management.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agent-platform"))
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = bin().args(args).env_remove("AGENT_PLATFORM_CONFIG").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn help_explains_the_commands() {
    let (ok, out, _) = run(&["--help"]);
    assert!(ok);
    for word in ["serve", "keys", "AGENT_PLATFORM_"] {
        assert!(out.contains(word), "--help lacks {word}: {out}");
    }
    let (ok, out, _) = run(&["serve", "--help"]);
    assert!(ok);
    for word in ["--bind", "--data-dir", "--config"] {
        assert!(out.contains(word), "serve --help lacks {word}: {out}");
    }
}

#[test]
fn keys_create_list_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (ok, key, _) = run(&["keys", "create", "--tenant", "acme", "--data-dir", d]);
    assert!(ok);
    let key = key.trim().to_string();
    assert!(key.starts_with("ap_") && key.len() > 40, "{key}");
    let (ok, list, _) = run(&["keys", "list", "--data-dir", d]);
    assert!(ok);
    assert!(list.contains("acme") && list.contains(&key[..11]), "{list}");
    assert!(!list.contains(&key), "keys list must never show a key");
    let (ok, out, _) = run(&["keys", "revoke", &key[..11], "--data-dir", d]);
    assert!(ok, "{out}");
    let (_, list, _) = run(&["keys", "list", "--data-dir", d]);
    assert!(!list.contains("acme"), "{list}");
    let (ok, _, err) = run(&["keys", "revoke", "ap_nothing", "--data-dir", d]);
    assert!(!ok && err.contains("no key matches"), "{err}");
}

#[test]
fn keys_are_stored_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (_, key, _) = run(&["keys", "create", "--data-dir", d]);
    let key = key.trim();
    let mut found = false;
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        found |= bytes.windows(key.len()).any(|w| w == key.as_bytes());
    }
    assert!(!found, "the plain key is in the store");
}

fn walk(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn serve_prints_a_first_key_and_stops_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = bin()
        .args(["serve", "--bind", &format!("127.0.0.1:{port}"), "--data-dir", dir.path().to_str().unwrap()])
        .env("AGENT_PLATFORM_LOG_LEVEL", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.trim().starts_with("ap_"), "first line of stdout is the key: {line:?}");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            assert!(code.success(), "exit status {code}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the server did not stop on SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("listening on") && err.contains("shutting down"), "{err}");
}
