//! The checked-in spec and client match what the API trait generates.

#[test]
fn spec_and_client_are_fresh() {
    let stale = xtask::stale_files().expect("generation works");
    let diffs: String = stale
        .iter()
        .map(|file| xtask::unified_diff(file.path, &file.checked_in, &file.generated, xtask::MAX_DIFF_LINES))
        .collect();
    let paths: Vec<&str> = stale.iter().map(|file| file.path).collect();
    assert!(
        stale.is_empty(),
        "generated files are stale: {}\n{diffs}\nrun `cargo xtask generate` and commit the result",
        paths.join(", ")
    );
}
