//! The sweep: every operation of the spec whose path takes an id, sent with
//! another tenant's ids (and, nested, the caller's own parent with another
//! tenant's child), answers exactly as with ids no one has; then the same
//! requests as the ids' owner succeed.

use std::collections::{BTreeMap, BTreeSet};

use agent_platform::models::fake_upstream::FakeUpstream;
use agent_platform_tests::TestServer;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Records, SHARED, assert_same_404, call, models, snapshot};

/// `path` with its `{params}` replaced, the n-th by `pick(n, root, collection)`.
fn fill(path: &str, pick: impl Fn(usize, &str, &str) -> Uuid) -> String {
    let segments: Vec<&str> = path.split('/').collect();
    let root = segments[2];
    let mut n = 0;
    let mut out = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        if seg.starts_with('{') {
            let id = pick(n, root, segments[i - 1]);
            // A response's id is `resp_` and the uuid's hex digits; a secret's name `s_` and them.
            out.push(match (root, segments[i - 1]) {
                ("responses", _) | ("sessions", "runs") => format!("resp_{}", id.simple()),
                ("secrets", _) => super::secret_name(id),
                _ => id.to_string(),
            });
            n += 1;
        } else {
            out.push((*seg).to_owned());
        }
    }
    out.join("/")
}

/// One request of the sweep: a query string, a body (valid, so validation,
/// which runs before any lookup, passes), and the status the owner of the ids
/// gets (`None`: the spec's success status).
struct Call {
    query: &'static str,
    body: Option<Value>,
    own: Option<u16>,
}

fn plain() -> Call {
    Call { query: "", body: None, own: None }
}

fn query(query: &'static str) -> Call {
    Call { query, body: None, own: None }
}

fn body(body: Value) -> Call {
    Call { query: "", body: Some(body), own: None }
}

/// The requests sent to every operation whose path takes an id, by operationId.
fn sweep_table() -> BTreeMap<&'static str, Vec<Call>> {
    let function_tool = |name: &str| json!({"name": name, "type": "function", "function": {}});
    let listed = || vec![plain(), query(SHARED), query("limit=1000&offset=0&direction=asc")];
    let text_search = || vec![query("text=words"), query("text=words&limit=5&metadata_filter=%7B%7D")];
    let search = || {
        vec![
            body(json!({"text": "words"})),
            body(json!({"vector": [1.0, 0.0, 0.0], "metadata_filter": {"shared": "yes"}})),
            body(json!({"text": "words", "vector": [1.0, 0.0, 0.0], "alpha": 0.3})),
            // The owner gets a 400 (no vector, no embedding model); anyone else a 404.
            Call { own: Some(400), ..body(json!({"text": "words", "mode": "vector"})) },
        ]
    };
    let chat = json!({"messages": [{"role": "user", "content": "hello"}]});
    let streamed = json!({"messages": [{"role": "user", "content": "hello"}], "stream": true});
    BTreeMap::from([
        ("agent_get", vec![plain()]),
        ("agent_update", vec![body(json!({"name": "Replaced"}))]),
        ("agent_patch", vec![body(json!({"about": "patched", "metadata": {"x": 1}}))]),
        ("agent_delete", vec![plain()]),
        ("agent_doc_list", listed()),
        ("agent_doc_create", vec![body(json!({"title": "new", "content": "new words"}))]),
        ("agent_doc_get", vec![plain()]),
        ("agent_doc_delete", vec![plain()]),
        ("agent_search_text", text_search()),
        ("agent_search", search()),
        ("task_list", listed()),
        ("task_create_or_update", vec![body(json!({"name": "t", "main": [{"log": "y"}]}))]),
        ("task_get", vec![plain()]),
        ("task_create", vec![body(json!({"name": "another", "main": [{"log": "y"}]}))]),
        ("task_get_by_id", vec![plain()]),
        ("execution_create", vec![body(json!({"input": {"words": "more"}}))]),
        ("execution_list", listed()),
        ("execution_get", vec![plain()]),
        // The owner's execution has ended: a cancel is a 409 (after the lookup).
        (
            "execution_update",
            vec![Call { own: Some(409), ..body(json!({"status": "cancelled", "reason": "r"})) }],
        ),
        ("transition_list", vec![plain(), query("limit=1000&offset=0&direction=asc")]),
        ("transition_get", vec![plain()]),
        // The execution has ended: the stream sends its transitions and ends.
        ("transition_stream", vec![plain()]),
        ("task_delete", vec![plain()]),
        ("tool_list", listed()),
        ("tool_create", vec![body(function_tool("another"))]),
        ("tool_update", vec![body(function_tool("lookup"))]),
        ("tool_patch", vec![body(json!({"description": "patched"}))]),
        ("tool_delete", vec![plain()]),
        ("session_get", vec![plain()]),
        ("session_update", vec![body(json!({"situation": "changed"}))]),
        ("session_patch", vec![body(json!({"situation": "changed", "metadata": {"x": 1}}))]),
        ("session_delete", vec![plain()]),
        ("session_chat", vec![body(chat), body(streamed)]),
        // An agent not of the session: a 400 for the owner (after the session's lookup), and no model call.
        (
            "session_run_create",
            vec![Call {
                own: Some(400),
                ..body(json!({"messages": [{"role": "user", "content": "hi"}], "agent": Uuid::now_v7()}))
            }],
        ),
        ("session_run_get", vec![plain()]),
        // It has ended: answered as it is.
        ("session_run_cancel", vec![plain()]),
        ("message_list", listed()),
        ("message_create", vec![body(json!({"role": "user", "content": "more"}))]),
        ("session_tool_list", vec![plain()]),
        ("user_get", vec![plain()]),
        ("user_update", vec![body(json!({"name": "Replaced"}))]),
        ("user_patch", vec![body(json!({"about": "patched", "metadata": {"x": 1}}))]),
        ("user_delete", vec![plain()]),
        ("user_doc_list", listed()),
        ("user_doc_create", vec![body(json!({"title": "new", "content": "new words"}))]),
        ("user_doc_get", vec![plain()]),
        ("user_doc_delete", vec![plain()]),
        ("user_search_text", text_search()),
        ("user_search", search()),
        ("key_delete", vec![plain()]),
        // Memory blocks: the revert (deeper) runs first for the owner, so its
        // block is at version 1 when the patch comes.
        ("agent_block_list", vec![plain()]),
        ("agent_block_create", vec![body(json!({"label": "more", "value": "v"}))]),
        ("agent_block_get", vec![plain()]),
        ("agent_block_patch", vec![body(json!({"version": 1, "description": "patched"}))]),
        ("agent_block_delete", vec![plain()]),
        ("agent_block_edits", vec![plain(), query("limit=5")]),
        ("agent_block_revert", vec![plain()]),
        ("user_block_list", vec![plain()]),
        ("user_block_create", vec![body(json!({"label": "more", "value": "v"}))]),
        ("user_block_get", vec![plain()]),
        ("user_block_patch", vec![body(json!({"version": 1, "description": "patched"}))]),
        ("user_block_delete", vec![plain()]),
        ("user_block_edits", vec![plain(), query("limit=5")]),
        ("user_block_revert", vec![plain()]),
        ("agent_export", vec![plain()]),
        ("agent_learning_get", vec![plain()]),
        ("agent_learning_put", vec![body(json!({"enabled": false, "mode": "approve"}))]),
        // The edit is the block's creation, no proposal: a 409 for its owner (after the lookups).
        ("user_block_approve", vec![Call { own: Some(409), ..plain() }]),
        ("user_block_reject", vec![Call { own: Some(409), ..plain() }]),
        // Its one id is `import` (`POST /api/agents/import`): an agent's id is a 404, the owner's too.
        ("agent_import", vec![Call { own: Some(404), ..body(json!({"agents": []})) }]),
        ("secret_update", vec![body(json!({"value": "replaced", "description": "d"}))]),
        ("secret_delete", vec![plain()]),
        // OpenAI's conversations: A's session, its items A's message.
        ("openai_conversation_get", vec![plain()]),
        ("openai_conversation_update", vec![body(json!({"metadata": {"x": "1"}}))]),
        // The session is gone by then: `session_delete` ran first (see `rank`).
        ("openai_conversation_delete", vec![Call { own: Some(404), ..plain() }]),
        ("openai_item_list", vec![plain(), query("order=asc&limit=100")]),
        ("openai_item_create", vec![body(json!({"items": [{"role": "user", "content": "more"}]}))]),
        ("openai_item_get", vec![plain()]),
        ("openai_item_delete", vec![plain()]),
        ("openai_model_get", vec![plain()]),
        ("openai_response_get", vec![plain()]),
        ("openai_response_input_items", vec![plain(), query("order=asc&limit=5")]),
        ("openai_response_delete", vec![plain()]),
        // Not a background response: a 400 for its owner, unknown (404) to the other tenant.
        ("openai_response_cancel", vec![Call { own: Some(400), ..plain() }]),
        // Its one id is `compact` (`POST /v1/responses/compact`): a response id is a 404, the owner's too.
        (
            "openai_response_compact",
            vec![Call { own: Some(404), ..body(json!({"model": "m", "input": "x"})) }],
        ),
    ])
}

/// An operation of the spec whose path takes an id.
struct Op {
    id: String,
    method: String,
    path: String,
    /// The success status the spec documents.
    success: u16,
}

fn id_operations() -> Vec<Op> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/openapi.json")).unwrap();
    let spec: Value = serde_json::from_str(&text).unwrap();
    let mut ops = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        if !path.contains('{') {
            continue;
        }
        for (method, op) in item.as_object().unwrap() {
            let success = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .filter_map(|k| k.parse::<u16>().ok())
                .find(|c| (200..300).contains(c))
                .unwrap_or_else(|| panic!("{method} {path} documents no success"));
            ops.push(Op {
                id: op["operationId"].as_str().unwrap().to_owned(),
                method: method.to_uppercase(),
                path: path.clone(),
                success,
            });
        }
    }
    ops
}

#[tokio::test]
async fn every_id_route_answers_another_tenants_ids_as_unknown_ones() {
    let fake = FakeUpstream::start().await;
    let (key_env, key) =
        ("E2E_SECRETS_KEY", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    let s = TestServer::with_config_env(
        |c| {
            c.models = models(&fake);
            c.secrets.key_env = Some(key_env.into());
        },
        &[(key_env, key)],
    )
    .await;
    let other_key = s.key_for("other-tenant").await;
    let a = Records::create(&s, &s.key, "alpha-corp", "shared words alpha", [1.0, 0.1, 0.0]).await;
    let b = Records::create(&s, &other_key, "beta-corp", "shared words beta", [0.1, 1.0, 0.0]).await;

    let ops = id_operations();
    let table = sweep_table();
    let in_spec: BTreeSet<&str> = ops.iter().map(|o| o.id.as_str()).collect();
    let in_table: BTreeSet<&str> = table.keys().copied().collect();
    let missing: Vec<_> = in_spec.difference(&in_table).collect();
    let stale: Vec<_> = in_table.difference(&in_spec).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "`sweep_table` must cover exactly the spec's operations with an id in their path: \
         missing {missing:?}, not in the spec {stale:?}"
    );

    let (a_before, b_before) = (snapshot(&s, &a).await, snapshot(&s, &b).await);
    for op in &ops {
        for c in &table[op.id.as_str()] {
            let srv = &s;
            let send = |key: &str, path: String| {
                let path = if c.query.is_empty() { path } else { format!("{path}?{}", c.query) };
                let key = key.to_owned();
                async move { call(srv, &key, &op.method, &path, c.body.as_ref()).await }
            };
            let what = format!(
                "{} {} ({}) {:?} {}",
                op.method,
                op.path,
                op.id,
                c.query,
                c.body.as_ref().unwrap_or(&Value::Null)
            );
            // B with A's ids, and A with ids no one has.
            let theirs = send(&b.key, fill(&op.path, |_, root, coll| a.id_for(root, coll))).await;
            let unknown = send(&a.key, fill(&op.path, |_, _, _| Uuid::now_v7())).await;
            assert_same_404(&what, &theirs, &unknown);
            // Nested: B's own parent with A's child, and with an unknown child.
            if op.path.matches('{').count() > 1 {
                let mixed = |child: Option<&Records>| {
                    fill(&op.path, |n, root, coll| match (n, child) {
                        (0, _) => b.id_for(root, coll),
                        (_, Some(r)) => r.id_for(root, coll),
                        (_, None) => Uuid::now_v7(),
                    })
                };
                let theirs = send(&b.key, mixed(Some(&a))).await;
                let unknown = send(&b.key, mixed(None)).await;
                assert_same_404(&format!("{what}, under the caller's own parent"), &theirs, &unknown);
            }
        }
    }
    // A compaction of another tenant's response: as one no one has.
    let compact =
        |previous: Uuid| json!({"model": "m", "previous_response_id": format!("resp_{}", previous.simple())});
    let theirs = call(&s, &b.key, "POST", "/v1/responses/compact", Some(&compact(a.response.unwrap()))).await;
    let unknown = call(&s, &b.key, "POST", "/v1/responses/compact", Some(&compact(Uuid::now_v7()))).await;
    assert_same_404("POST /v1/responses/compact with previous_response_id", &theirs, &unknown);
    assert_eq!(snapshot(&s, &a).await, a_before, "another tenant's requests changed nothing of A's");
    assert_eq!(snapshot(&s, &b).await, b_before, "and nothing of B's");

    // The same requests with A's key: the ids were real. Deletes last, children before parents.
    let rank = |o: &Op| {
        let depth = o.path.matches('{').count();
        // `/v1/conversations` (sessions too) after `/api`'s roots.
        let root = ["/api/sessions", "/api/users", "/api/agents", "/v1/conversations"]
            .iter()
            .position(|r| o.path.starts_with(r));
        (o.method == "DELETE", std::cmp::Reverse(depth), root)
    };
    let mut ordered: Vec<&Op> = ops.iter().collect();
    ordered.sort_by_key(|o| rank(o));
    for op in ordered {
        for c in &table[op.id.as_str()] {
            let mut path = fill(&op.path, |_, root, coll| a.id_for(root, coll));
            if !c.query.is_empty() {
                path = format!("{path}?{}", c.query);
            }
            let r = call(&s, &a.key, &op.method, &path, c.body.as_ref()).await;
            let expected = c.own.unwrap_or(op.success);
            assert_eq!(r.status, expected, "{} {path} as its owner: {}", op.method, r.body);
        }
    }
    // A response continued with another tenant's response id: as one no one has.
    let continued = |previous: Uuid| json!({"model": "m", "input": "hi", "previous_response_id": format!("resp_{}", previous.simple())});
    let theirs = call(&s, &b.key, "POST", "/v1/responses", Some(&continued(a.response.unwrap()))).await;
    let unknown = call(&s, &b.key, "POST", "/v1/responses", Some(&continued(Uuid::now_v7()))).await;
    assert_same_404("POST /v1/responses with previous_response_id", &theirs, &unknown);
    assert_eq!(
        fake.requests().iter().filter(|r| r.path == "/v1/chat/completions").count(),
        6,
        "only each tenant's stored response and session run, and A's two chats reached the model"
    );
    s.stop().await;
}
