//! A store that is missing, damaged or in use is never served as a fresh one.
//!
//! The real binary makes a store (a first key, then agents written through the
//! API, then a clean stop on SIGTERM); each test damages a copy of its data
//! dir the way a failed mount, a bad copy or a bad disk would, and starts
//! `serve` on it. A refused start exits non-zero in bounded time, names the
//! dir, what is wrong and what to do, prints no key, panics not, and leaves
//! the data dir exactly as it found it (so a restore is still possible).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_platform_tests::{Client, Exited, Process, copy_dir, run_to_exit, types};
use futures::StreamExt;

/// Agents the base store holds (besides its key).
const AGENTS: usize = 300;
/// A refused start must end within this (a debug build on a busy machine).
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

/// A store made by the binary and stopped cleanly; tests work on copies.
struct Base {
    _dir: tempfile::TempDir,
    data: PathBuf,
    key: String,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let p = Process::serve(&data);
        let key = p.key.clone().expect("a new store prints a first key");
        write_agents(&p.base, &key, "base", AGENTS);
        p.stop();
        Base { _dir: dir, data, key }
    })
}

fn write_agents(base: &str, key: &str, prefix: &str, n: usize) {
    let client = Client::with_key(base, key).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        futures::stream::iter(0..n)
            .map(|i| {
                let client = client.clone();
                async move {
                    let body = types::CreateAgentRequest::builder().name(format!("{prefix} {i}"));
                    client.agent_create().body(body).send().await.expect("agent_create")
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
    });
}

fn agent_count(base: &str, key: &str) -> usize {
    let client = Client::with_key(base, key).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        client.agent_list().limit(1000).send().await.expect("agent_list").into_inner().items.len()
    })
}

/// A copy of the base store's data dir, in a dir of its own.
fn copy_of_base() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&base().data, &data);
    (dir, data)
}

/// Every file under `dir` with its content.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(contents(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

fn db(data: &Path) -> PathBuf {
    data.join("db")
}

fn cut_db(data: &Path, new_len: impl FnOnce(u64) -> u64) {
    let f = std::fs::OpenOptions::new().write(true).open(db(data)).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(new_len(len)).unwrap();
}

fn serve_on(data: &Path, extra: &[&str]) -> Exited {
    let mut args: Vec<&OsStr> = vec!["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    args.extend(extra.iter().map(|a| OsStr::new(*a)));
    run_to_exit(&args, REFUSED_WITHIN)
}

/// Starts `serve` on `data`, expects a refusal saying `what`, and checks that
/// it named the dir and what to do, printed no key and no panic, and left
/// every file as it was.
#[track_caller]
fn assert_refused(data: &Path, what: &str) -> Exited {
    let before = contents(data.parent().unwrap());
    let started = Instant::now();
    let out = serve_on(data, &[]);
    assert!(!out.status.success(), "serve started on a damaged store: {out:?}");
    assert!(out.stdout.is_empty(), "a refused start printed on stdout (a key?): {:?}", out.stdout);
    let err = &out.stderr;
    assert!(err.contains(&format!("the store in {}", data.display())), "the dir is not named: {err}");
    assert!(err.contains(what), "expected {what:?} in: {err}");
    assert!(err.contains("Restore the data dir from a backup"), "no advice: {err}");
    assert!(err.contains("--accept-data-loss"), "the flag is not named: {err}");
    for noise in ["panicked", "backtrace", "RUST_BACKTRACE", "listening on"] {
        assert!(!err.contains(noise), "{noise:?} in: {err}");
    }
    assert!(before == contents(data.parent().unwrap()), "the refused start changed the data dir");
    eprintln!("refused in {:?}: {err}", started.elapsed());
    out
}

#[test]
fn a_deleted_db_is_refused_and_left_as_it_was() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    std::fs::remove_file(db(&data)).unwrap();
    assert_refused(&data, "has no db file, though its manifest says it was initialised");
}

#[test]
fn an_emptied_db_is_refused() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    cut_db(&data, |_| 0);
    assert_refused(&data, "has an empty db file");
}

#[test]
fn a_db_cut_to_half_is_refused() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    cut_db(&data, |len| len / 2);
    assert_refused(&data, "data was lost (a truncated or replaced db file?)");
}

#[test]
fn a_db_cut_by_a_tenth_is_refused() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    cut_db(&data, |len| len - len / 10);
    assert_refused(&data, "data was lost (a truncated or replaced db file?)");
}

#[test]
fn a_db_cut_by_1_kb_is_refused() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    cut_db(&data, |len| len - 1024);
    assert_refused(&data, "data was lost (a truncated or replaced db file?)");
}

#[test]
fn flipped_bytes_in_the_db_are_refused_as_corrupt() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    let mut bytes = std::fs::read(db(&data)).unwrap();
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 16] {
        *b = !*b;
    }
    std::fs::write(db(&data), bytes).unwrap();
    assert_refused(&data, "is corrupt: ");
}

/// After an unclean stop the manifest carries no fingerprint; the commit
/// sequence inside sled is what tells an older `db` (put back from a copy,
/// or a volume snapshot) from the store the manifest last saw.
#[test]
fn an_older_db_after_an_unclean_stop_is_refused_as_behind_its_checkpoint() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    let older = data.with_file_name("older");
    copy_dir(&data, &older);
    let p = Process::serve(&data);
    write_agents(&p.base, &base().key, "later", 20);
    p.stop();
    // The older db and its snapshots, under the newer manifest, as an unclean stop leaves it.
    for entry in std::fs::read_dir(&data).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with("snap.") {
            std::fs::remove_file(data.join(name)).unwrap();
        }
    }
    for entry in std::fs::read_dir(&older).unwrap() {
        let name = entry.unwrap().file_name();
        if name == "db" || name.to_string_lossy().starts_with("snap.") {
            std::fs::copy(older.join(&name), data.join(&name)).unwrap();
        }
    }
    let manifest_path = data.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["clean_stop"] = false.into();
    manifest.as_object_mut().unwrap().remove("db_file");
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();

    let checkpoint = manifest["checkpoint"].as_u64().unwrap();
    let out = serve_on(&data, &[]);
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
    let err = &out.stderr;
    assert!(err.contains(&format!("the store in {} is behind its checkpoint", data.display())), "{err}");
    assert!(err.contains(&format!("checkpointed at {checkpoint}")), "{err}");
    assert!(err.contains("Restore the data dir from a backup"), "{err}");
}

/// A data dir of the release before the manifest (no manifest, no store id
/// or sequence inside sled): it opens as it is, with all its data, and mints
/// no key.
#[test]
fn a_data_dir_of_the_previous_release_opens_with_its_data_and_no_new_key() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    std::fs::remove_file(data.join("manifest.json")).unwrap();
    {
        let db = sled::open(&data).unwrap();
        let reserved: Vec<_> = db.scan_prefix([0u8]).keys().map(Result::unwrap).collect();
        assert_eq!(reserved.len(), 2, "the store id and the commit sequence");
        for key in reserved {
            db.remove(key).unwrap();
        }
        db.flush().unwrap();
    }
    let p = Process::serve(&data);
    assert_eq!(agent_count(&p.base, &base().key), AGENTS);
    let stdout = p.stop();
    assert!(stdout.is_empty(), "a key was printed for an existing store: {stdout:?}");
    assert!(data.join("manifest.json").exists(), "the manifest is written when the dir is adopted");
    // And it is the same store at the next start.
    let p = Process::serve(&data);
    assert_eq!(agent_count(&p.base, &base().key), AGENTS);
    p.stop();
}

#[test]
fn a_second_process_on_a_store_in_use_is_told_another_process_holds_it() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let (_dir, data) = copy_of_base();
    let p = Process::serve(&data);
    let expected = format!("another agent-platform process holds the store in {}", data.display());
    let serve = serve_on(&data, &[]);
    let keys = run_to_exit(
        &["keys".as_ref(), "list".as_ref(), "--data-dir".as_ref(), data.as_os_str()],
        REFUSED_WITHIN,
    );
    for (what, out) in [("serve", serve), ("keys list", keys)] {
        assert!(!out.status.success(), "{what}: {out:?}");
        assert!(out.stderr.contains(&expected), "{what}: {}", out.stderr);
        assert!(out.stderr.contains("Stop it first"), "{what}: {}", out.stderr);
        assert!(!out.stderr.contains("WouldBlock"), "{what}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{what}: {}", out.stdout);
    }
    // The running server was not disturbed.
    assert_eq!(agent_count(&p.base, &base().key), AGENTS);
    p.stop();
}

/// `--accept-data-loss` serves what a cut store still holds, mints no key,
/// and makes that the new checkpoint: the next start needs no flag.
#[test]
fn accept_data_loss_serves_what_a_cut_store_holds() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    // The manifest says what was cut, or (garbled) says nothing: either way
    // sled's snapshot of the clean stop, which points past the cut, is not trusted.
    for garble_manifest in [false, true] {
        let (_dir, data) = copy_of_base();
        cut_db(&data, |len| len / 2);
        if garble_manifest {
            std::fs::write(data.join("manifest.json"), b"{ not json").unwrap();
        }
        let p = Process::serve_with(&data, &["--accept-data-loss"], &[]);
        let left = agent_count(&p.base, &base().key);
        assert!(
            left < AGENTS,
            "{left} agents after cutting the db to half (manifest garbled: {garble_manifest})"
        );
        assert!(p.stop().is_empty(), "a key was printed for a store that lost data");
        let p = Process::serve(&data);
        assert_eq!(agent_count(&p.base, &base().key), left);
        p.stop();
    }
}

/// A record the start-up scans cannot decode (here a doc whose fields are not
/// a doc's) makes the store corrupt, said as such, not an internal error:
/// before the server answers when the index is built at once, and as a failed
/// search index (searches 503, everything else served) when it is built in
/// the background, as `serve` does.
#[tokio::test]
async fn a_record_that_cannot_be_read_at_start_is_reported_as_a_corrupt_store() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    use agent_platform::app::{SearchStart, SearchState};
    use agent_platform::store::sled_store::{Durability, SledStore};
    use agent_platform::store::{Expect, Kind, Op, Record, Store};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = SledStore::open(&data, Durability::Flush).unwrap();
    let doc =
        Record::new(Kind::Doc, uuid::Uuid::now_v7(), uuid::Uuid::now_v7(), serde_json::json!({"content": 5}));
    store.commit(uuid::Uuid::now_v7(), vec![Op::Put { record: doc, expect: Expect::Absent }]).await.unwrap();
    drop(store);
    let mut cfg = agent_platform::config::Config::default();
    cfg.server.data_dir = data.clone();
    let err = agent_platform::server::open_app(&cfg, SearchStart::Now)
        .await
        .err()
        .expect("a store with an unreadable doc is refused");
    let err = format!("{err:#}");
    assert!(err.starts_with(&format!("the store in {} is corrupt: stored doc", data.display())), "{err}");
    assert!(err.contains("Restore the data dir from a backup"), "{err}");

    let (store, app) = agent_platform::server::open_app(&cfg, SearchStart::Background)
        .await
        .expect("with the index built in the background the store opens");
    match app.search_settled().await {
        SearchState::Failed(why) => assert!(why.starts_with("stored doc"), "{why}"),
        other => panic!("the index of a store with an unreadable doc was built: {other:?}"),
    }
    drop(app);
    store.close();
}

/// A new store whose first start failed after the store was made (here: the
/// port is taken) took no commit: the next start still gives the first key.
#[test]
fn a_first_start_that_cannot_listen_leaves_the_first_key_to_the_next_start() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = taken.local_addr().unwrap().to_string();
    let out = run_to_exit(
        &["serve".as_ref(), "--bind".as_ref(), bind.as_ref(), "--data-dir".as_ref(), data.as_os_str()],
        REFUSED_WITHIN,
    );
    assert!(!out.status.success() && out.stderr.contains("cannot listen"), "{out:?}");
    assert!(out.stdout.is_empty(), "a key was printed by a server that did not start: {out:?}");
    let stdout = Process::serve(&data).stop();
    assert!(stdout.trim().starts_with("ap_"), "no first key at the next start: {stdout:?}");
}
