//! A record of every `/v1` answer the tests receive, for checking against
//! the published types of OpenAI's API and of the Open Responses
//! specification (`tests/python/v1_schemas.py`, run by `.ci/v1-schemas`).
//!
//! Off unless `AGENT_PLATFORM_TEST_RECORD_V1` names a file: each answer is
//! then appended to it as one JSON line, `{"method", "path", "status",
//! "body"}` for a whole answer (the body as JSON, or as text when it is not:
//! a stream read whole) and `{"method", "path", "status", "event", "data"}`
//! for each event of a stream read event by event (its method unknown: null;
//! the messages of `/v1/responses`' WebSocket mode as `/v1/responses#socket`).

use std::io::Write;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

/// The variable naming the file the answers are appended to.
pub const RECORD_V1: &str = "AGENT_PLATFORM_TEST_RECORD_V1";

fn file() -> Option<&'static Mutex<std::fs::File>> {
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os(RECORD_V1)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{RECORD_V1}={}: {e}", path.to_string_lossy()));
        Some(Mutex::new(file))
    })
    .as_ref()
}

fn append(line: Value) {
    let Some(file) = file() else { return };
    let mut text = line.to_string();
    text.push('\n');
    let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
    file.write_all(text.as_bytes()).expect("the record of /v1 answers takes a line");
}

/// Whether `path` (with its query, if any) is a `/v1` route.
fn is_v1(path: &str) -> bool {
    path.starts_with("/v1/")
}

/// Records a whole answer of a `/v1` route.
pub fn answer(method: &str, path: &str, status: u16, body: &Value) {
    if is_v1(path) {
        append(json!({"method": method, "path": path, "status": status, "body": body}));
    }
}

/// Records one event of a `/v1` stream (its data as JSON, or as text).
pub fn event(path: &str, status: u16, event: Option<&str>, data: &str) {
    if is_v1(path) {
        let data = serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()));
        append(json!({"method": null, "path": path, "status": status, "event": event, "data": data}));
    }
}
