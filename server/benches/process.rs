//! The release binary, for the benches that run the server as a process.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the release binary (the bench profile's target dir) and answers its path.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/..");
    let target_dir = profile_dir.parent().expect("target/<profile>");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--release", "-p", "agent-platform", "--bin", "agent-platform"])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the release binary failed");
    target_dir.join("release").join("agent-platform")
}
