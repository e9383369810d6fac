//! `cargo xtask generate [--check]`: write (or check) spec/openapi.json, the client, its commands and the console's api.gen.js.
//! `cargo xtask spelled-out-patterns`: the spec's Unicode-class patterns as ranges (for `.ci/fuzz`).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["generate"] => {
            let root = xtask::root();
            for (path, text) in xtask::generated_files()? {
                std::fs::write(root.join(path), text)?;
                println!("wrote {path}");
            }
            Ok(())
        }
        ["generate", "--check"] => {
            let stale = xtask::stale_files()?;
            if stale.is_empty() {
                println!("spec, client, CLI and console API are fresh");
                return Ok(());
            }
            for file in &stale {
                print!(
                    "{}",
                    xtask::unified_diff(file.path, &file.checked_in, &file.generated, xtask::MAX_DIFF_LINES)
                );
            }
            let paths: Vec<&str> = stale.iter().map(|file| file.path).collect();
            anyhow::bail!("stale: {}; run `cargo xtask generate` and commit the result", paths.join(", "))
        }
        ["spelled-out-patterns"] => {
            let map = xtask::patterns::spelled_out_patterns(&agent_platform_api::openapi())?;
            println!("{}", serde_json::to_string_pretty(&map)?);
            Ok(())
        }
        ["test-binaries"] => {
            print!("{}", xtask::binaries::test_binaries(&xtask::root())?);
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask generate [--check] | spelled-out-patterns | test-binaries\n\n  generate          write spec/openapi.json (from the API trait), client/src/generated.rs,\n                    client/src/cli_generated.rs (the `api` commands) and\n                    server/console/api.gen.js (all from the spec)\n  generate --check  fail if any is stale, showing the difference\n  spelled-out-patterns\n                    print, as JSON, each spec pattern with Unicode property classes (\\p{{..}})\n                    and the same regex with them written as ranges (schemathesis reads those)\n  test-binaries     build what `cargo test --workspace` builds and print `export` lines naming\n                    the server, the fake model provider, the end-to-end tests and the server's\n                    unit tests (CI runs these as they are)"
            );
            std::process::exit(2)
        }
    }
}
