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

/// `tests/fixtures/executions-0.1.0` (`tests/fixtures/make-executions.py`): executions of
/// every kind of step, ended and waiting, written by release 0.1.0. Its `ids.json` names them.
fn executions_fixture() -> (tempfile::TempDir, std::path::PathBuf, String, Value, Vec<Value>) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/executions-0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture.join("data"), &data);
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(fixture.join(name)).unwrap()).unwrap()
    };
    let key = read("keys.json")["acme"].as_str().unwrap().to_owned();
    let answers = read("answers.json").as_array().unwrap().clone();
    (dir, data, key, read("ids.json"), answers)
}

#[tokio::test]
async fn executions_written_by_release_0_1_0_read_the_same() {
    if agent_platform_tests::sled_only("data dirs written by an earlier release") {
        return;
    }
    let (_dir, data, key, _, answers) = executions_fixture();
    let server = Process::serve(&data);
    let http = reqwest::Client::new();
    for want in &answers {
        let path = want["path"].as_str().unwrap();
        let resp = http.get(format!("{}{path}", server.base)).bearer_auth(&key).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want["status"].as_u64().unwrap() as u16, "{path}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer, want["answer"], "GET {path}");
    }
    server.stop();
}

/// The keys of the transitions release 0.1.0 stored are the keys this
/// release builds for the same steps (a run replays by them), byte for byte.
#[tokio::test]
async fn executions_written_by_release_0_1_0_keep_the_keys_of_their_transitions() {
    use agent_platform::exec::key::{ListKey, Pause, StepKey, TransitionKey as K};
    use agent_platform::store::sled_store::{Durability, SledStore};
    use agent_platform::store::{Kind, Store};

    if agent_platform_tests::sled_only("data dirs written by an earlier release") {
        return;
    }
    let (_dir, data, _, ids, _) = executions_fixture();
    let store = SledStore::open(&data, Durability::Flush).unwrap();
    let mut stored: std::collections::HashMap<String, Vec<String>> = Default::default();
    for (_, rec) in store.scan_kind(Kind::Transition).await.unwrap() {
        stored.entry(rec.scope.to_string()).or_default().push(rec.data["key"].as_str().unwrap().to_owned());
    }
    let main = |i| ListKey::main().step(i);
    let step = |s: StepKey| K::Step(s);
    // The steps before the wait of `waits`, and all but the last four of `everything`.
    let nesting = || {
        let sub = main(7).yielded("sub");
        vec![
            step(main(0).foreach(0).step(0)),
            step(main(0).foreach(0).step(1)),
            step(main(0).foreach(1).step(0)),
            step(main(0).foreach(1).step(1)),
            step(main(0)),
            step(main(1).map().step(0)),
            step(main(1).map().step(1)),
            step(main(1)),
            step(main(2).map().step(0)),
            step(main(2).map().step(1)),
            step(main(2)),
            step(main(3).parallel().step(0)),
            step(main(3).parallel().step(1)),
            step(main(3).parallel().step(2)),
            step(main(3)),
            step(main(4).then().step(0)),
            step(main(4)),
            step(main(5).otherwise().step(0)),
            step(main(5)),
            step(main(6).case(1).step(0)),
            step(main(6)),
            K::YieldArgs(main(7)),
            K::YieldInit(main(7)),
            step(sub.step(0)),
            step(sub.step(1).foreach(0).step(0)),
            step(sub.step(1)),
            step(sub.step(2)),
            K::YieldFinish(main(7)),
            step(main(7)),
        ]
    };
    let input = main(8).wait(Pause::Input);
    let call = main(0).wait(Pause::Call(1));
    let with = |mut keys: Vec<K>, more: Vec<K>| {
        keys.insert(0, K::Init);
        keys.extend(more);
        keys
    };
    let want: Vec<(&str, Vec<K>)> = vec![
        ("everything.done", with(nesting(), (8..12).map(|i| step(main(i))).chain([K::Finish]).collect())),
        (
            "waits.resumed",
            with(nesting(), vec![K::Wait(input.clone()), K::Resume(input.clone()), step(main(9)), K::Finish]),
        ),
        ("waits.cancelled", with(nesting(), vec![K::Wait(input.clone()), K::Cancelled])),
        ("waits.waiting", with(nesting(), vec![K::Wait(input.clone())])),
        ("fails.failed", with(vec![], vec![step(main(0)), K::Error])),
    ]
    .into_iter()
    .chain(["prompt", "tool"].into_iter().flat_map(|name| {
        let resumed =
            vec![K::Wait(call.clone()), K::Resume(call.clone()), step(main(0)), step(main(1)), K::Finish];
        [
            (if name == "prompt" { "prompt.resumed" } else { "tool.resumed" }, with(vec![], resumed)),
            (
                if name == "prompt" { "prompt.waiting" } else { "tool.waiting" },
                with(vec![], vec![K::Wait(call.clone())]),
            ),
        ]
    }))
    .collect();
    assert_eq!(want.len(), ids.as_object().unwrap().keys().filter(|k| k.contains('.')).count());
    for (name, keys) in want {
        let mut got = stored.remove(ids[name].as_str().unwrap()).unwrap_or_default();
        for text in &got {
            let key: K = text.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&key.to_string(), text, "{name}: read back as the same text");
        }
        let mut keys: Vec<String> = keys.iter().map(K::to_string).collect();
        got.sort();
        keys.sort();
        assert_eq!(got, keys, "{name}");
    }
}

/// Executions left awaiting input by release 0.1.0 go on where they were:
/// what they ran before is replayed by its keys, not run again.
#[tokio::test]
async fn executions_left_waiting_by_release_0_1_0_resume_without_running_a_step_again() {
    use agent_platform::models::fake_upstream::FakeUpstream;

    if agent_platform_tests::sled_only("data dirs written by an earlier release") {
        return;
    }
    let (_dir, data, key, ids, answers) = executions_fixture();
    let fake = FakeUpstream::start().await;
    let url = fake.base_url();
    let env = [
        ("OPENAI_BASE_URL", url.as_str()),
        ("OPENAI_API_KEY", "sk-fixture"),
        ("AGENT_PLATFORM_DEFAULT_MODEL", "fake-model"),
    ];
    let server = Process::serve_with_env(&data, &env);
    let http = reqwest::Client::new();
    let get = |path: String| {
        let req = http.get(format!("{}{path}", server.base)).bearer_auth(&key);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let answered =
        |path: String| answers.iter().find(|a| a["path"] == path.as_str()).unwrap()["answer"].clone();
    // Where each transition is, and its output but for the ids of tool calls (new at every call).
    let shape = |transitions: &Value| -> Vec<Value> {
        transitions["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let mut output = t["output"].clone();
                if let Some(call) = output.get_mut("tool_call").and_then(Value::as_object_mut) {
                    call.remove("id");
                }
                serde_json::json!([t["type"], t["current"], t["next"], output])
            })
            .collect()
    };
    for name in ["waits", "prompt", "tool"] {
        let id = ids[format!("{name}.waiting")].as_str().unwrap();
        let resumed = ids[format!("{name}.resumed")].as_str().unwrap();
        let resp = http
            .put(format!("{}/api/executions/{id}", server.base))
            .bearer_auth(&key)
            .json(&serde_json::json!({"status": "running", "input": {"result": {"temp": 21}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{name}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let execution = loop {
            let e = get(format!("/api/executions/{id}")).await;
            if e["status"] != "running" && e["status"] != "awaiting_input"
                || std::time::Instant::now() > deadline
            {
                break e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let want = answered(format!("/api/executions/{resumed}"));
        assert_eq!(execution["status"], want["status"], "{name}: {execution}");
        assert_eq!(execution["output"], want["output"], "{name}");
        let got = shape(&get(format!("/api/executions/{id}/transitions?limit=100")).await);
        let want = shape(&answered(format!("/api/executions/{resumed}/transitions?limit=100")));
        assert_eq!(got, want, "{name}: the transitions of the one release 0.1.0 resumed");
    }
    server.stop();
}
