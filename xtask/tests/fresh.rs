//! The checked-in spec and client match what the API trait generates.

#[test]
fn spec_and_client_are_fresh() {
    let stale = xtask::stale_files().expect("generation works");
    assert!(
        stale.is_empty(),
        "generated files are stale: {}\nrun `cargo xtask generate` and commit the result",
        stale.join(", ")
    );
}
