//! A store that is missing, damaged or in use is never served as a fresh one.
//!
//! The real binary makes a store (a first key, then agents written through the
//! API, then a clean stop on SIGTERM); each test damages a copy of its data
//! dir the way a failed mount, a bad copy or a bad disk would, and starts
//! `serve` on it. A refused start exits non-zero in bounded time, names the
//! dir, what is wrong and what to do, prints no key, panics not, and leaves
//! the data dir exactly as it found it (so a restore is still possible).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
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
    // The older db, its snapshots and its durable point, under the newer
    // manifest, as an unclean stop leaves it.
    for entry in std::fs::read_dir(&data).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with("snap.") {
            std::fs::remove_file(data.join(name)).unwrap();
        }
    }
    for entry in std::fs::read_dir(&older).unwrap() {
        let name = entry.unwrap().file_name();
        if name == "db" || name == "checkpoint" || name.to_string_lossy().starts_with("snap.") {
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

/// How a start on a cut copy of a data dir ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Refused,
    Served,
}

/// Cuts a copy of `prepared`'s `db` to `at` bytes and starts `serve` on it:
/// it must refuse (exit 1, saying data was lost and what to do), or serve
/// the key and every agent in `acked`.
fn start_on_cut(prepared: &Path, at: u64, key: &str, acked: &BTreeSet<String>) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(prepared, &data);
    let len = std::fs::metadata(db(&data)).unwrap().len();
    cut_db(&data, |_| at);
    let cut = format!("the db cut to {at} of {len} bytes");
    match Process::try_serve_with(&data, &[], &[]) {
        Err(said) => {
            assert!(said.contains("exited early (exit status: 1)"), "{cut}: {said}");
            assert!(said.contains(&format!("the store in {}", data.display())), "{cut}: {said}");
            for advice in ["Restore the data dir from a backup", "--accept-data-loss"] {
                assert!(said.contains(advice), "{cut}: no {advice:?} in: {said}");
            }
            assert!(!said.contains("panicked"), "{cut}: {said}");
            Outcome::Refused
        }
        Ok(p) => {
            let names = agent_names(&p.base, key);
            p.kill();
            let names = names.unwrap_or_else(|e| panic!("{cut} was served, but its agents are not: {e}"));
            let missing: Vec<_> = acked.difference(&names).collect();
            assert!(
                missing.is_empty(),
                "{cut} was served without {} of {} acknowledged agents: {missing:?}",
                missing.len(),
                acked.len()
            );
            Outcome::Served
        }
    }
}

/// The names of every agent the server lists.
fn agent_names(base: &str, key: &str) -> Result<BTreeSet<String>, String> {
    let client = Client::with_key(base, key).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut names = BTreeSet::new();
        loop {
            let page = client.agent_list().limit(1000).offset(names.len() as u64).send().await;
            let items = page.map_err(|e| e.to_string())?.into_inner().items;
            let got = items.len();
            names.extend(items.into_iter().map(|a| a.name));
            if got < 1000 {
                return Ok(names);
            }
        }
    })
}

/// Writes agents from 16 clients until `acked` of them were answered, then
/// SIGKILLs the server with writes under way; returns the names answered 201.
fn write_until_killed(p: Process, key: &str, acked: usize) -> BTreeSet<String> {
    let client = Client::with_key(&p.base, key).unwrap();
    let answered = Arc::new(Mutex::new(BTreeSet::new()));
    let enough = Arc::new(tokio::sync::Notify::new());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let writers: Vec<_> = (0..16)
            .map(|w| {
                let (client, answered, enough) = (client.clone(), answered.clone(), enough.clone());
                tokio::spawn(async move {
                    for i in (w..).step_by(16) {
                        let name = format!("killed {i}");
                        let body = types::CreateAgentRequest::builder().name(name.clone());
                        if client.agent_create().body(body).send().await.is_err() {
                            return; // the server is gone
                        }
                        let mut answered = answered.lock().unwrap();
                        answered.insert(name);
                        if answered.len() >= acked {
                            enough.notify_one();
                        }
                    }
                })
            })
            .collect();
        enough.notified().await;
        p.kill();
        for w in writers {
            w.await.unwrap();
        }
    });
    Arc::try_unwrap(answered).unwrap().into_inner().unwrap()
}

/// A small xorshift generator: the offsets of a run are reproducible from its seed.
fn offsets(seed: u64, n: usize, range: std::ops::Range<u64>) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            range.start + x % (range.end - range.start)
        })
        .collect()
}

/// Cuts `prepared`'s db at each of `cuts` and checks each start; returns (refused, served).
/// The store uncut is served whole first: refusing every store would pass the rest.
fn cut_at_each(
    what: &str,
    prepared: &Path,
    cuts: &[u64],
    key: &str,
    acked: &BTreeSet<String>,
) -> (usize, usize) {
    let started = Instant::now();
    let len = std::fs::metadata(db(prepared)).unwrap().len();
    assert_eq!(start_on_cut(prepared, len, key, acked), Outcome::Served, "{what}: refused uncut");
    let outcomes: Vec<_> = cuts.iter().map(|&at| start_on_cut(prepared, at, key, acked)).collect();
    let served = outcomes.iter().filter(|o| **o == Outcome::Served).count();
    eprintln!(
        "{what}: {} cuts, {} refused, {served} served whole, in {:?}",
        cuts.len(),
        cuts.len() - served,
        started.elapsed()
    );
    (cuts.len() - served, served)
}

/// Every few KiB of a small store's `db`, after a clean stop and after a
/// SIGKILL with writes under way: each start on the cut store refuses with
/// the message, or serves every write that was acknowledged.
#[test]
fn a_small_store_cut_anywhere_is_refused_or_served_whole() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (clean, killed) = (dir.path().join("clean"), dir.path().join("killed"));
    let p = Process::serve(&clean);
    let key = p.key.clone().expect("a new store prints a first key");
    write_agents(&p.base, &key, "clean", 40);
    p.stop();
    let acked: BTreeSet<_> = (0..40).map(|i| format!("clean {i}")).collect();
    copy_dir(&clean, &killed);
    let every = |data: &Path| {
        let len = std::fs::metadata(db(data)).unwrap().len();
        let step = (len / 48).next_multiple_of(4096).max(4096);
        (0..len).step_by(step as usize).chain([len - 1]).collect::<Vec<_>>()
    };
    let cuts = every(&clean);
    let (refused, _) = cut_at_each("a small store after a clean stop", &clean, &cuts, &key, &acked);
    assert_eq!(refused, cuts.len(), "a cut after a clean stop is always refused (the db changed)");

    let p = Process::serve(&killed);
    let mut acked = acked;
    acked.extend(write_until_killed(p, &key, 40));
    cut_at_each("a small store after a SIGKILL", &killed, &every(&killed), &key, &acked);
}

/// Random offsets of a larger store's `db`, SIGKILLed with writes under way:
/// anywhere in the file, and in its last 512 KiB (sled's segment: the last
/// writes before the kill are there or before).
#[test]
fn a_larger_store_killed_mid_writes_and_cut_at_random_is_refused_or_served_whole() {
    if agent_platform_tests::sled_only("what opening a data dir checks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = Process::serve(&data);
    let key = p.key.clone().expect("a new store prints a first key");
    let acked = write_until_killed(p, &key, 1500);
    let len = std::fs::metadata(db(&data)).unwrap().len();
    let seed = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64;
    eprintln!("{} agents acknowledged, db of {len} bytes, offsets from seed {seed}", acked.len());
    let mut cuts = offsets(seed, 24, 0..len);
    cuts.extend(offsets(seed.rotate_left(17), 24, len.saturating_sub(512 << 10)..len));
    cut_at_each("a larger store after a SIGKILL", &data, &cuts, &key, &acked);
}
