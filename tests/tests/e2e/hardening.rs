//! One request must never take the service down: templates and expressions
//! that ask for a terabyte, and workflows that recurse without end, against
//! the real binary held to an address-space limit (`prlimit`), so that an
//! allocation the bounds let through would abort it ("memory allocation of N
//! bytes failed") and a recursion they let through would overflow its stack.

use std::time::Duration;

use agent_platform::models::fake_upstream::FakeUpstream;
use agent_platform_tests::Process;
use agent_platform_tests::executions::{Api, id_of};
use serde_json::{Value, json};

/// Holds the process to its address space now plus `extra` bytes.
fn limit_address_space(pid: u32, extra: u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize");
    let limit = kb * 1024 + extra;
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--as={limit}")])
        .output()
        .expect("prlimit (util-linux) runs");
    assert!(out.status.success(), "prlimit: {}", String::from_utf8_lossy(&out.stderr));
}

async fn alive(api: &Api) {
    let (status, body) = api.call("GET", "/api/healthz", None).await;
    assert_eq!(status, 200, "the server answers: {body}");
}

#[tokio::test]
async fn template_bombs_and_endless_recursion_fail_the_request_not_the_server() {
    let upstream = FakeUpstream::start().await;
    let url = upstream.base_url();
    let env = [
        ("OPENAI_BASE_URL", url.as_str()),
        ("OPENAI_API_KEY", "sk-hardening"),
        ("AGENT_PLATFORM_DEFAULT_MODEL", "m"),
        ("AGENT_PLATFORM_EXECUTIONS_MAX_DEPTH", "8"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Process::serve_with_env(&data, &env);
    let key = server.key.clone().expect("a first key");
    limit_address_space(server.child.id(), 2 << 30);
    let api = Api::new(&server.base, &key);

    // Chat: a message rendered as a template.
    let agent = api.agent("hardening").await;
    let (status, session) =
        api.call("POST", "/api/sessions", Some(&json!({"agent": agent, "render_templates": true}))).await;
    assert_eq!(status, 201, "{session}");
    let session = id_of(&session);
    for bomb in ["{{ 'a\nb' | indent(10**12) }}", "{{ ('x' * 10**7) | replace('x', 'x' * 100) }}"] {
        let body = json!({"messages": [{"role": "user", "content": bomb}]});
        let (status, answer) = api.call("POST", &format!("/api/sessions/{session}/chat"), Some(&body)).await;
        assert_eq!(status, 400, "{bomb}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("messages[0].content") && detail.contains("limit of one render"), "{answer}");
    }
    // A system template that cannot render within the bounds whatever its context: 422 when written.
    let body = json!({"agent": agent, "system_template": "{{ 'a\nb' | indent(10**12) }}"});
    let (status, answer) = api.call("POST", "/api/sessions", Some(&body)).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["detail"][0]["loc"], json!(["body", "system_template"]), "{answer}");
    // One that only blows up with its context (an agent's name makes two lines to indent): 400 when used.
    let body =
        json!({"agent": agent, "system_template": "{{ (agent.name ~ '\n' ~ agent.name) | indent(10**12) }}"});
    let (status, created) = api.call("POST", "/api/sessions", Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) =
        api.call("POST", &format!("/api/sessions/{}/chat", id_of(&created)), Some(&body)).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["detail"].as_str().unwrap_or_default().contains("system_template"), "{answer}");
    alive(&api).await;

    // Executions: a step that asks for a terabyte, and a workflow that yields to itself.
    let bomb = api
        .task(agent, &json!({"name": "bomb", "main": [{"evaluate": {"x": "'a\\nb' | indent(10**12)"}}]}))
        .await;
    let endless = api
        .task(
            agent,
            &json!({"name": "endless", "main": [{"workflow": "again", "arguments": {"n": 0}}],
                    "again": [{"workflow": "again", "arguments": {"n": "_.n + 1"}}]}),
        )
        .await;
    // Workflows nested `levels` deep: main yields to w1, w1 to w2, and so on.
    let chain = |levels: usize| {
        let mut task =
            json!({"name": format!("chain{levels}"), "main": [{"workflow": "w1", "arguments": {}}]});
        for level in 1..=levels {
            let step = if level < levels {
                json!([{"workflow": format!("w{}", level + 1), "arguments": {}}])
            } else {
                json!([{"evaluate": {"depth": level}}])
            };
            task[format!("w{level}")] = step;
        }
        task
    };
    let at_limit = api.task(agent, &chain(8)).await;
    let past_limit = api.task(agent, &chain(9)).await;
    let mut ids = Vec::new();
    for task in [bomb, endless, past_limit, at_limit] {
        ids.push(id_of(&api.start(task, json!({})).await));
    }
    let e = api.wait_ended(ids[0], Duration::from_secs(60)).await;
    assert_eq!(e["status"], "failed", "{e}");
    assert!(e["error"].as_str().unwrap().contains("executions.expression_max_bytes"), "{e}");
    let e = api.wait_ended(ids[1], Duration::from_secs(60)).await;
    assert_eq!(e["status"], "failed", "{e}");
    assert!(e["error"].as_str().unwrap().contains("executions.max_depth"), "{e}");
    let e = api.wait_ended(ids[2], Duration::from_secs(60)).await;
    assert_eq!(e["status"], "failed", "one level past the limit: {e}");
    assert!(e["error"].as_str().unwrap().contains("limit of 8 levels"), "{e}");
    let e = api.wait_ended(ids[3], Duration::from_secs(60)).await;
    assert_eq!(e["status"], "succeeded", "at the limit: {e}");
    alive(&api).await;

    // A restart finds nothing to run again: the poisoned executions have ended.
    server.kill();
    let server = Process::serve_with_env(&data, &env);
    limit_address_space(server.child.id(), 2 << 30);
    let api = Api::new(&server.base, &key);
    alive(&api).await;
    for id in &ids[..3] {
        assert_eq!(api.execution(*id).await["status"], "failed");
    }
    let _: Value = json!(server.stop());
}
