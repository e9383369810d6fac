//! A data dir written by an earlier release opens with this binary and answers the same.
//!
//! `tests/fixtures/store-0.1.0` was written by the release of the commit that added it
//! (`tests/fixtures/make-store.py`): its `data/` dir, the tenants' keys, and the answers
//! that release gave to every read route. The binary under test serves a copy of it.

use std::path::Path;

use agent_platform_tests::Process;
use serde_json::Value;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
async fn a_store_written_by_release_0_1_0_opens_and_answers_the_same() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/store-0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture.join("data"), &data);
    let keys: Value = serde_json::from_slice(&std::fs::read(fixture.join("keys.json")).unwrap()).unwrap();
    let answers: Vec<Value> =
        serde_json::from_slice(&std::fs::read(fixture.join("answers.json")).unwrap()).unwrap();

    let server = Process::serve(&data);
    assert!(server.key.is_none(), "a store with keys is not new: no first key");
    let http = reqwest::Client::new();
    for want in &answers {
        let (method, path) = (want["method"].as_str().unwrap(), want["path"].as_str().unwrap());
        let key = keys[want["tenant"].as_str().unwrap()].as_str().unwrap();
        let mut req = http
            .request(method.parse().unwrap(), format!("{}{path}", server.base))
            .header("authorization", format!("Bearer {key}"));
        if !want["body"].is_null() {
            req = req.json(&want["body"]);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let mut answer: Value = resp.json().await.unwrap();
        if let Some(o) = answer.as_object_mut() {
            o.remove("request_id"); // new for every request
            o.remove("time"); // how long a search took
        }
        assert_eq!(status, want["status"].as_u64().unwrap() as u16, "{method} {path} as {}", want["tenant"]);
        assert_eq!(answer, want["answer"], "{method} {path} as {}", want["tenant"]);
    }
    server.stop();
}
