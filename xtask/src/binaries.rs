//! `cargo xtask test-binaries`: the executables that `cargo test --workspace`
//! builds, as shell `export` lines, so that CI runs them as they are instead
//! of asking cargo again with another target selection (which resolves other
//! features and compiles the whole server a second time).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// What each exported variable names: (variable, target name, target kind, built as a test harness).
const WANTED: [(&str, &str, &str, bool); 5] = [
    ("AGENT_PLATFORM_BIN", "agent-platform", "bin", false),
    ("FAKE_UPSTREAM_BIN", "fake-upstream", "bin", false),
    ("FAKE_MCP_BIN", "fake-mcp", "bin", false),
    ("E2E_TEST_BIN", "e2e", "test", true),
    ("SERVER_UNIT_TEST_BIN", "agent_platform", "lib", true),
];

/// Builds (or finds fresh) everything `cargo test --workspace --locked` builds and
/// returns `export NAME='path'` lines for the executables in [`WANTED`].
pub fn test_binaries(root: &Path) -> anyhow::Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(out.status.success(), "`cargo test --workspace --no-run` failed: see its errors above");
    let artifacts: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .collect();
    let mut lines = String::new();
    for (var, name, kind, test) in WANTED {
        let path = artifacts
            .iter()
            .filter(|m| m["target"]["name"] == name && m["target"]["kind"] == serde_json::json!([kind]))
            .filter(|m| m["profile"]["test"] == test)
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .ok_or_else(|| anyhow::anyhow!("`cargo test --workspace --no-run` built no {kind} `{name}`"))?;
        let path = path.to_str().ok_or_else(|| anyhow::anyhow!("{} is not UTF-8", path.display()))?;
        anyhow::ensure!(!path.contains('\''), "{path} contains a quote");
        lines.push_str(&format!("export {var}='{path}'\n"));
    }
    Ok(lines)
}
