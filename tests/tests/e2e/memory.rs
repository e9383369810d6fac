//! Memory blocks: their API (versions, edits with provenance, revert,
//! bounds, cascades, tenants), blocks in the system message of the turns they
//! belong to, and the memory tools the model calls (the fake model scripted
//! to call them): a fact told in one session is in view in the user's next
//! session, its edit listed and revertible; `conversation_search` finds the
//! user's earlier messages. Driven through the generated client.

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::{TestServer, fake_models, status_of, types};
use serde_json::{Value, json};
use uuid::Uuid;

fn block(v: Value) -> types::CreateBlockRequest {
    serde_json::from_value(v).unwrap()
}

fn patch(v: Value) -> types::PatchBlockRequest {
    serde_json::from_value(v).unwrap()
}

fn learning(v: Value) -> types::LearningPolicy {
    serde_json::from_value(v).unwrap()
}

fn user_says(text: &str) -> types::ChatRequest {
    serde_json::from_value(json!({"messages": [{"role": "user", "content": text}]})).unwrap()
}

/// The system message of the provider's `n`th request.
fn system_of(fake: &FakeUpstream, n: usize) -> String {
    let request = &fake.requests()[n].body;
    let first = &request["messages"][0];
    assert_eq!(first["role"], "system", "{request}");
    first["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn blocks_keep_every_edit_with_its_version_and_revert_the_latest() {
    let s = TestServer::start().await;
    let agent = s.create_agent("Ada").await;
    let c = &s.client;

    // Created at version 0; its creation is its first edit, naming the request.
    let persona = c
        .agent_block_create()
        .id(agent.id)
        .body(block(
            json!({"label": "persona", "value": "I am Ada.", "description": "Who I am", "limit": 40}),
        ))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!((persona.version, persona.limit, persona.read_only), (0, 40, false));
    assert_eq!((persona.owner.id, persona.owner.role), (agent.id, types::OwnerRole::Agent));
    let edits =
        c.agent_block_edits().id(agent.id).block_id(persona.id).send().await.unwrap().into_inner().items;
    assert_eq!(edits.len(), 1);
    assert_eq!(
        (edits[0].op, edits[0].before.as_str(), edits[0].after.as_str()),
        (types::BlockEditOp::Create, "", "I am Ada.")
    );
    assert!(edits[0].source.request_id.is_some(), "{:?}", edits[0].source);

    // A label taken is a 409; a value over the limit is a 422 naming `value`.
    let again = c.agent_block_create().id(agent.id).body(block(json!({"label": "persona"}))).send().await;
    assert_eq!(status_of(again), 409);
    let long = s
        .raw(
            "POST",
            &format!("/api/agents/{}/blocks", agent.id),
            Some(&json!({"label": "x", "value": "abc", "limit": 2}).to_string()),
        )
        .await;
    long.assert_422(json!(["body", "value"]), "string_too_long");
    let bad_label =
        s.raw("POST", &format!("/api/agents/{}/blocks", agent.id), Some(r#"{"label": "no spaces"}"#)).await;
    bad_label.assert_422(json!(["body", "label"]), "string_pattern_mismatch");

    // An update names the version it read: a stale one is a 409 and changes nothing.
    let stale = c
        .agent_block_patch()
        .id(agent.id)
        .block_id(persona.id)
        .body(patch(json!({"version": 5, "value": "lost"})))
        .send()
        .await;
    assert_eq!(status_of(stale), 409);
    let updated = c
        .agent_block_patch()
        .id(agent.id)
        .block_id(persona.id)
        .body(patch(json!({"version": 0, "value": "I am Ada, a cook."})))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!((updated.version, updated.value.as_str()), (1, "I am Ada, a cook."));
    let read = c.agent_block_get().id(agent.id).block_id(persona.id).send().await.unwrap().into_inner();
    assert_eq!(read, updated);
    let over = s
        .raw(
            "PATCH",
            &format!("/api/agents/{}/blocks/{}", agent.id, persona.id),
            Some(&json!({"version": 1, "value": "x".repeat(41)}).to_string()),
        )
        .await;
    over.assert_422(json!(["body", "value"]), "value_error");

    // Edits newest first; the create cannot be reverted while the update stands.
    let edits =
        c.agent_block_edits().id(agent.id).block_id(persona.id).send().await.unwrap().into_inner().items;
    let ops: Vec<_> = edits.iter().map(|e| e.op).collect();
    assert_eq!(ops, [types::BlockEditOp::Update, types::BlockEditOp::Create]);
    assert_eq!(edits[0].version, 1);
    let create = edits[1].id;
    let early = c.agent_block_revert().id(agent.id).block_id(persona.id).edit_id(create).send().await;
    assert_eq!(status_of(early), 409);
    let reverted = c
        .agent_block_revert()
        .id(agent.id)
        .block_id(persona.id)
        .edit_id(edits[0].id)
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!((reverted.version, reverted.value.as_str()), (2, "I am Ada."));
    let twice = c.agent_block_revert().id(agent.id).block_id(persona.id).edit_id(edits[0].id).send().await;
    assert_eq!(status_of(twice), 409, "an edit is reverted once");
    let edits =
        c.agent_block_edits().id(agent.id).block_id(persona.id).send().await.unwrap().into_inner().items;
    assert_eq!(edits[0].op, types::BlockEditOp::Revert);
    assert_eq!(edits[1].reverted_by, Some(edits[0].id));

    // Another owner's path, and another tenant, find nothing.
    let user = s.create_user("Ann").await;
    let wrong = c.user_block_get().user_id(user.id).block_id(persona.id).send().await;
    assert_eq!(status_of(wrong), 404);
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.agent_block_get().id(agent.id).block_id(persona.id).send().await), 404);
    assert_eq!(status_of(other.agent_block_list().id(agent.id).send().await), 404);
    let theirs = other.agent_block_create().id(agent.id).body(block(json!({"label": "spy"}))).send().await;
    assert_eq!(status_of(theirs), 404);
    let ours = c.agent_block_list().id(agent.id).send().await.unwrap().into_inner().items;
    assert_eq!(ours.len(), 1, "nothing of the other tenant's: {ours:?}");

    // Deleting the owner deletes its blocks and their edits; others stay.
    let human = c
        .user_block_create()
        .user_id(user.id)
        .body(block(json!({"label": "human", "value": "Ann"})))
        .send()
        .await
        .unwrap()
        .into_inner();
    c.user_delete().user_id(user.id).send().await.unwrap();
    assert_eq!(status_of(c.user_block_get().user_id(user.id).block_id(human.id).send().await), 404);
    assert_eq!(c.agent_block_list().id(agent.id).send().await.unwrap().into_inner().items.len(), 1);
    c.agent_block_delete().id(agent.id).block_id(persona.id).send().await.unwrap();
    assert_eq!(status_of(c.agent_block_get().id(agent.id).block_id(persona.id).send().await), 404);
    // No block or edit is left without its owner (`orphans` reads the store).
    assert_eq!(s.orphans().await, Vec::<String>::new());
    s.stop().await;
}

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    agent: Uuid,
    user: Uuid,
}

/// A server on the fake model; an agent with the memory tools and
/// `conversation_search`, a persona block (read-only), and a user with a
/// `human` block.
async fn setup() -> Setup {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_config(|c| c.models = fake_models(&fake, 10.0)).await;
    let agent = s.create_agent("Ada").await.id;
    for tool in [
        json!({"name": "memory", "type": "memory"}),
        json!({"name": "conversation_search", "type": "conversation_search"}),
    ] {
        let r = s.raw("POST", &format!("/api/agents/{agent}/tools"), Some(&tool.to_string())).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let c = &s.client;
    let persona = json!({"label": "persona", "value": "I am Ada, a helpful cook.", "read_only": true});
    c.agent_block_create().id(agent).body(block(persona)).send().await.unwrap();
    let user = s.create_user("Ann").await.id;
    let human = json!({"label": "human", "description": "What I know of the user.", "limit": 200});
    c.user_block_create().user_id(user).body(block(human)).send().await.unwrap();
    Setup { s, fake, agent, user }
}

impl Setup {
    async fn chat(&self, session: Uuid, text: &str) -> types::ChatResponse {
        self.s.client.session_chat().id(session).body(user_says(text)).send().await.unwrap().into_inner()
    }

    async fn human(&self) -> types::Block {
        let blocks =
            self.s.client.user_block_list().user_id(self.user).send().await.unwrap().into_inner().items;
        blocks.into_iter().find(|b| b.label == "human").unwrap()
    }
}

#[tokio::test]
async fn a_fact_told_in_one_session_is_remembered_in_the_next_and_its_edit_can_be_reverted() {
    let t = setup().await;
    let c = &t.s.client;
    let first = t.s.create_session(&[t.agent], &[t.user]).await.id;

    // The blocks are in the system message, the memory tools on offer.
    let insert = json!({"label": "human", "new_str": "Favourite colour: green"}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "memory_insert".into(), arguments: insert });
    let answer = t.chat(first, "My favourite colour is green.").await;
    let system = system_of(&t.fake, 0);
    assert!(system.contains("I am Ada, a helpful cook."), "{system}");
    assert!(system.contains("<persona chars=\"25/5000\" read_only=\"true\">"), "{system}");
    assert!(system.contains("<human chars=\"0/200\" of=\"the user\">"), "{system}");
    let offered: Vec<String> = t.fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(offered, ["conversation_search", "memory_insert", "memory_replace", "memory_rethink"]);

    // The server ran the edit; the block holds the fact.
    assert_eq!(answer.tool_runs.len(), 1);
    let run = &answer.tool_runs[0];
    assert_eq!(run.type_, types::ToolRunType::Memory);
    assert!(run.error.is_none(), "{run:?}");
    assert!(run.output.as_deref().unwrap().contains("Favourite colour: green"), "{run:?}");
    let human = t.human().await;
    assert_eq!((human.value.as_str(), human.version), ("Favourite colour: green", 1));

    // The edit names its turn: agent, session, the calling message, the call.
    let edits =
        c.user_block_edits().user_id(t.user).block_id(human.id).send().await.unwrap().into_inner().items;
    assert_eq!(edits[0].op, types::BlockEditOp::Insert);
    let source = &edits[0].source;
    assert_eq!((source.agent_id, source.session_id), (Some(t.agent), Some(first)));
    assert_eq!(source.tool_call_id.as_deref(), Some(run.id.as_str()));
    let saved = c.message_list().id(first).send().await.unwrap().into_inner().items;
    let calling = saved.iter().find(|m| m.tool_calls.is_some()).expect("the calling message");
    assert_eq!(source.message_id, Some(calling.id));

    // Another session of the same user: the fact is in view.
    let second = t.s.create_session(&[t.agent], &[t.user]).await.id;
    t.chat(second, "What is my favourite colour?").await;
    let n = t.fake.requests().len() - 1;
    assert!(system_of(&t.fake, n).contains("Favourite colour: green"), "{}", system_of(&t.fake, n));

    // conversation_search finds what the user said in the first session.
    let search = json!({"query": "favourite colour", "roles": ["user"]}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "conversation_search".into(), arguments: search });
    let found = t.chat(second, "Did I tell you my colour before?").await;
    let run = &found.tool_runs[0];
    assert_eq!(run.type_, types::ToolRunType::ConversationSearch);
    let results: Vec<Value> = serde_json::from_str(run.output.as_deref().unwrap()).unwrap();
    assert!(!results.is_empty(), "{results:?}");
    assert!(results.iter().all(|r| r["role"] == "user"), "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| r["content"] == "My favourite colour is green." && r["session_id"] == first.to_string()),
        "{results:?}"
    );

    // Reverted, the fact is out of view again.
    let reverted =
        c.user_block_revert().user_id(t.user).block_id(human.id).edit_id(edits[0].id).send().await.unwrap();
    assert_eq!(reverted.into_inner().value, "");
    t.chat(second, "And now?").await;
    let n = t.fake.requests().len() - 1;
    assert!(!system_of(&t.fake, n).contains("Favourite colour"), "{}", system_of(&t.fake, n));
    t.s.stop().await;
}

#[tokio::test]
async fn the_model_is_told_why_an_edit_cannot_be_made_and_nothing_changes() {
    let t = setup().await;
    let session = t.s.create_session(&[t.agent], &[t.user]).await.id;
    let calls = vec![
        // read-only
        ("memory_rethink".to_owned(), json!({"label": "persona", "new_memory": "I am evil."}).to_string()),
        // no such block
        ("memory_insert".to_owned(), json!({"label": "nope", "new_str": "x"}).to_string()),
        // over the limit
        ("memory_insert".to_owned(), json!({"label": "human", "new_str": "y".repeat(201)}).to_string()),
        // not in the block
        (
            "memory_replace".to_owned(),
            json!({"label": "human", "old_str": "blue", "new_str": "red"}).to_string(),
        ),
        // arguments missing
        ("memory_replace".to_owned(), json!({"label": "human"}).to_string()),
    ];
    t.fake.push(Behaviour::ToolCalls(calls));
    let answer = t.chat(session, "Try these.").await;
    let errors: Vec<String> = answer.tool_runs.iter().map(|r| r.error.clone().expect("each fails")).collect();
    assert!(errors[0].contains("read-only"), "{errors:?}");
    assert!(
        errors[1].contains("no memory block labelled \"nope\"") && errors[1].contains("human, persona")
            || errors[1].contains("persona, human"),
        "{errors:?}"
    );
    assert!(errors[2].contains("over its limit of 200"), "{errors:?}");
    assert!(errors[3].contains("does not occur"), "{errors:?}");
    assert!(errors[4].contains("old_str"), "{errors:?}");
    assert_eq!(t.human().await.version, 0, "nothing was edited");
    let persona = t.s.client.agent_block_list().id(t.agent).send().await.unwrap().into_inner().items;
    assert_eq!(persona[0].value, "I am Ada, a helpful cook.");

    // A session's own template places the blocks, or has them after it.
    let placed =
        json!({"system_template": "Blocks: {% for b in blocks %}[{{ b.label }}={{ b.value }}]{% endfor %}"});
    let r = t.s.raw("PATCH", &format!("/api/sessions/{session}"), Some(&placed.to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    t.chat(session, "hi").await;
    let n = t.fake.requests().len() - 1;
    assert_eq!(system_of(&t.fake, n), "Blocks: [persona=I am Ada, a helpful cook.][human=]");
    let own = json!({"system_template": "You are terse."});
    t.s.raw("PATCH", &format!("/api/sessions/{session}"), Some(&own.to_string())).await;
    t.chat(session, "hi").await;
    let n = t.fake.requests().len() - 1;
    let system = system_of(&t.fake, n);
    assert!(system.starts_with("You are terse.\n"), "{system}");
    assert!(system.contains("<persona chars="), "{system}");
    t.s.stop().await;
}

/// Polls (at most 20 s) until `done` holds of the user's `human` block's edits.
async fn edits_until(
    t: &Setup,
    block: Uuid,
    done: impl Fn(&[types::BlockEdit]) -> bool,
) -> Vec<types::BlockEdit> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let edits =
            t.s.client
                .user_block_edits()
                .user_id(t.user)
                .block_id(block)
                .send()
                .await
                .unwrap()
                .into_inner()
                .items;
        if done(&edits) {
            return edits;
        }
        assert!(std::time::Instant::now() < deadline, "learning did not happen: {edits:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_agent_that_learns_keeps_facts_about_its_users_after_each_turn_once_across_a_restart() {
    let mut t = setup().await;
    let c = t.s.client.clone();
    let policy: types::LearningPolicy = c.agent_learning_get().id(t.agent).send().await.unwrap().into_inner();
    assert!(!policy.enabled, "off by default");
    let on = learning(json!({"enabled": true, "blocks": ["human"]}));
    c.agent_learning_put().id(t.agent).body(on).send().await.unwrap();
    let session = t.s.create_session(&[t.agent], &[t.user]).await.id;
    let human = t.human().await.id;

    // The turn's answer, then the learning job's model call: it keeps a fact.
    t.fake.push(Behaviour::Text("Nice to meet you.".into()));
    let fact = json!({"label": "human", "new_str": "Works as a nurse."}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "memory_insert".into(), arguments: fact });
    t.chat(session, "I work as a nurse.").await;
    let edits = edits_until(&t, human, |e| e.len() == 2).await;
    assert_eq!(t.human().await.value, "Works as a nurse.");
    let learned = &edits[0];
    assert_eq!((learned.op, learned.status), (types::BlockEditOp::Insert, types::EditStatus::Applied));
    assert!(learned.source.learning_job_id.is_some());
    assert_eq!((learned.source.agent_id, learned.source.session_id), (Some(t.agent), Some(session)));
    let saved = c.message_list().id(session).send().await.unwrap().into_inner().items;
    assert_eq!(learned.source.message_id, Some(saved.last().unwrap().id), "the turn's answer");
    // What the job sent: the users' writable blocks (not the agent's), the turn, the memory tools.
    let asked = &t.fake.requests()[1].body;
    let system = asked["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("<human chars=\"0/200\">") && !system.contains("persona"), "{system}");
    let turn = asked["messages"][1]["content"].as_str().unwrap();
    assert!(
        turn.contains("user: I work as a nurse.") && turn.contains("assistant: Nice to meet you."),
        "{turn}"
    );
    assert_eq!(asked["tools"].as_array().unwrap().len(), 3);

    // Approve mode: proposed, not applied, until a person decides.
    let approve = learning(json!({"enabled": true, "mode": "approve"}));
    c.agent_learning_put().id(t.agent).body(approve).send().await.unwrap();
    t.fake.push(Behaviour::Text("Noted.".into()));
    let promoted = json!({"label": "human", "old_str": "a nurse", "new_str": "a head nurse"}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "memory_replace".into(), arguments: promoted });
    t.chat(session, "I was promoted to head nurse.").await;
    let edits = edits_until(&t, human, |e| e.len() == 3).await;
    assert_eq!(edits[0].status, types::EditStatus::Proposed);
    assert_eq!(t.human().await.value, "Works as a nurse.", "a proposal changes nothing");
    let approved = c
        .user_block_approve()
        .user_id(t.user)
        .block_id(human)
        .edit_id(edits[0].id)
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!((approved.value.as_str(), approved.version), ("Works as a head nurse.", 2));
    let again = c.user_block_approve().user_id(t.user).block_id(human).edit_id(edits[0].id).send().await;
    assert_eq!(status_of(again), 409, "decided once");
    let rejected = c.user_block_reject().user_id(t.user).block_id(human).edit_id(edits[0].id).send().await;
    assert_eq!(status_of(rejected), 409, "an applied edit is no proposal");
    t.fake.push(Behaviour::Text("I see.".into()));
    let guess = json!({"label": "human", "new_str": "Dislikes night shifts."}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "memory_insert".into(), arguments: guess });
    t.chat(session, "Night shifts again this week.").await;
    let edits = edits_until(&t, human, |e| e.len() == 4).await;
    let rejected = c
        .user_block_reject()
        .user_id(t.user)
        .block_id(human)
        .edit_id(edits[0].id)
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (rejected.status, rejected.after.as_str()),
        (types::EditStatus::Rejected, "Works as a head nurse.\nDislikes night shifts.")
    );
    assert_eq!(t.human().await.value, "Works as a head nurse.", "a rejected proposal changes nothing");

    // A job under way when the server stops begins again at the next start, and is applied once.
    let apply = learning(json!({"enabled": true}));
    c.agent_learning_put().id(t.agent).body(apply).send().await.unwrap();
    t.fake.push(Behaviour::Text("Sure.".into()));
    t.fake.push(Behaviour::Hang(std::time::Duration::from_secs(60)));
    let requests = t.fake.requests().len();
    t.chat(session, "I live in Bergen.").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while t.fake.requests().len() < requests + 2 {
        assert!(std::time::Instant::now() < deadline, "the job never called the model");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let city = json!({"label": "human", "new_str": "Lives in Bergen."}).to_string();
    t.fake.push(Behaviour::ToolCall { name: "memory_insert".into(), arguments: city });
    t.s.restart().await;
    let c = t.s.client.clone();
    // The approved proposal is one edit, now applied: create, insert, replace, the rejected one, insert.
    let edits = edits_until(&t, human, |e| e.len() == 5).await;
    assert_eq!(t.human().await.value, "Works as a head nurse.\nLives in Bergen.");
    assert_eq!(edits.iter().filter(|e| e.after.contains("Bergen")).count(), 1, "applied once: {edits:?}");

    // Disabled: a turn starts no job.
    let off = learning(json!({"enabled": false}));
    c.agent_learning_put().id(t.agent).body(off).send().await.unwrap();
    let requests = t.fake.requests().len();
    t.chat(session, "I like jazz.").await;
    assert_eq!(t.fake.requests().len(), requests + 1);
    assert_eq!(
        c.user_block_edits().user_id(t.user).block_id(human).send().await.unwrap().into_inner().items.len(),
        5
    );
    t.s.stop().await;
}
