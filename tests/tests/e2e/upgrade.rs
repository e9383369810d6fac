//! A data dir written by an earlier release opens with this binary and answers the same.
//!
//! `tests/fixtures/store-0.1.0` was written by the release of the commit that added it
//! (`tests/fixtures/make-store.py`): its `data/` dir, the tenants' keys, and the answers
//! that release gave to every read route. The binary under test serves a copy of it.

use std::path::Path;

use agent_platform_tests::{Process, copy_dir};
use serde_json::Value;

#[tokio::test]
async fn a_store_written_by_release_0_1_0_opens_and_answers_the_same() {
    if agent_platform_tests::sled_only("data dirs written by an earlier release") {
        return;
    }
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
        assert!(
            alike(&answer, &want["answer"]),
            "{method} {path} as {}:\n{answer}\nexpected\n{}",
            want["tenant"],
            want["answer"]
        );
    }
    server.stop();
}

/// Equal, except that search scores may differ by rounding (the index of
/// release 0.1.0 scored in f64, tantivy scores in f32).
fn alike(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, v)| {
                    y.get(k).is_some_and(|w| match (k.as_str(), v.as_f64(), w.as_f64()) {
                        ("score", Some(p), Some(q)) => (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0),
                        _ => alike(v, w),
                    })
                })
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| alike(v, w)),
        _ => a == b,
    }
}

/// Release 0.1.0 indexed metadata by the value's text, so a list filter
/// `{"n": 1}` missed records stored with `{"n": 1.0}`; the store is upgraded
/// at its first open, and lists then find both spellings with either filter.
#[tokio::test]
async fn a_store_of_release_0_1_0_lists_metadata_numbers_by_value_after_its_upgrade() {
    if agent_platform_tests::sled_only("data dirs written by an earlier release") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/store-0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture.join("data"), &data);
    let keys: Value = serde_json::from_slice(&std::fs::read(fixture.join("keys.json")).unwrap()).unwrap();
    let key = keys["acme"].as_str().unwrap().to_string();
    let answers: Vec<Value> =
        serde_json::from_slice(&std::fs::read(fixture.join("answers.json")).unwrap()).unwrap();
    // The agent with docs stored as {"n": 1.0} and {"n": 1, "kind": "rodent"}.
    let docs_path = answers
        .iter()
        .map(|a| a["path"].as_str().unwrap())
        .find(|p| p.starts_with("/api/agents/") && p.ends_with("/docs"))
        .unwrap()
        .to_string();
    let manifest =
        || -> Value { serde_json::from_slice(&std::fs::read(data.join("manifest.json")).unwrap()).unwrap() };
    assert_eq!(manifest()["format_version"], 1);

    let server = Process::serve(&data);
    let http = reqwest::Client::new();
    let get = |path: String| {
        let req = http.get(format!("{}{path}", server.base)).header("authorization", format!("Bearer {key}"));
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 200, "{path}");
            resp.json::<Value>().await.unwrap()
        }
    };
    let names = |answer: Value, field: &str| -> Vec<String> {
        let mut names: Vec<String> = answer["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i[field].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    for filter in [r#"{"n":1}"#, r#"{"n":1.0}"#] {
        let q = format!("metadata_filter={}", urlencode(filter));
        assert_eq!(names(get(format!("{docs_path}?{q}")).await, "title"), ["Beavers", "Otters"], "{filter}");
        assert_eq!(names(get(format!("/api/users?{q}")).await, "name"), ["Ada", "Bob"], "{filter}");
        assert_eq!(get(format!("/api/sessions?{q}")).await["items"].as_array().unwrap().len(), 1, "{filter}");
        let search =
            get(format!("{}/search?text=otters%20beavers&{q}", docs_path.trim_end_matches("/docs"))).await;
        let mut titles: Vec<&str> =
            search["docs"].as_array().unwrap().iter().map(|d| d["title"].as_str().unwrap()).collect();
        titles.sort();
        titles.dedup(); // a doc has an entry per matching snippet
        assert_eq!(titles, ["Beavers", "Otters"], "search {filter}");
    }
    let kind = format!("metadata_filter={}", urlencode(r#"{"n":1.0,"kind":"rodent"}"#));
    assert_eq!(names(get(format!("{docs_path}?{kind}")).await, "title"), ["Beavers"]);
    server.stop();
    let manifest = manifest();
    assert_eq!(manifest["format_version"], 2, "{manifest}");
    assert!(manifest.get("upgrading_from").is_none(), "the upgrade is done: {manifest}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
