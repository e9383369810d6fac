//! Deleting an agent, a user or a session takes what depends on it along, in one
//! commit, and concurrent writes never leave an orphan behind. `orphans()` looks
//! at every record in the store, across tenants.

use agent_platform_tests::{TestServer, status_of, types};
use serde_json::json;

#[tokio::test]
async fn deleting_an_agent_removes_its_tools_tasks_and_sole_sessions_with_their_messages() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let b = s.create_agent("Bea").await;
    let u = s.create_user("Cy").await;
    for (agent, name) in [(a.id, "one"), (a.id, "two"), (b.id, "one")] {
        let tool = json!({"name": name, "type": "function", "function": {}}).to_string();
        assert_eq!(s.raw("POST", &format!("/api/agents/{agent}/tools"), Some(&tool)).await.status, 201);
    }
    let task = json!({"name": "t", "main": [{"log": "x"}]}).to_string();
    assert_eq!(s.raw("PUT", &format!("/api/agents/{}/tasks", a.id), Some(&task)).await.status, 200);
    assert_eq!(s.raw("PUT", &format!("/api/agents/{}/tasks", b.id), Some(&task)).await.status, 200);
    let only_a = s.create_session(&[a.id], &[u.id]).await;
    let shared = s.create_session(&[a.id, b.id], &[u.id]).await;
    let only_b = s.create_session(&[b.id], &[]).await;
    for session in [&only_a, &shared, &only_b] {
        s.say(session.id, "hello").await;
        s.say(session.id, "again").await;
    }

    s.client.agent_delete().id(a.id).send().await.unwrap();

    assert_eq!(s.orphans().await, Vec::<String>::new());
    assert_eq!(status_of(s.client.tool_list().id(a.id).send().await), 404);
    assert_eq!(status_of(s.client.task_list().id(a.id).send().await), 404);
    assert_eq!(status_of(s.client.session_get().id(only_a.id).send().await), 404);
    assert_eq!(status_of(s.client.message_list().id(only_a.id).send().await), 404);
    let shared_now = s.client.session_get().id(shared.id).send().await.unwrap().into_inner();
    assert_eq!(shared_now.agents, vec![b.id], "the agent leaves the sessions it shares");
    assert_eq!(shared_now.users, vec![u.id]);
    assert_eq!(s.client.message_list().id(shared.id).send().await.unwrap().items.len(), 2);
    let sessions: Vec<_> = s.client.session_list().send().await.unwrap().into_inner().items;
    assert_eq!(sessions.iter().map(|x| x.id).collect::<Vec<_>>(), vec![only_b.id, shared.id]);
    // The other agent keeps everything.
    assert_eq!(s.client.tool_list().id(b.id).send().await.unwrap().items.len(), 1);
    assert_eq!(s.client.task_list().id(b.id).send().await.unwrap().items.len(), 1);
    assert_eq!(s.client.message_list().id(only_b.id).send().await.unwrap().items.len(), 2);
    let tools = s.client.session_tool_list().id(shared.id).send().await.unwrap().into_inner().items;
    assert_eq!(tools.iter().map(|t| t.agent_id).collect::<Vec<_>>(), vec![b.id]);
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_user_removes_its_sole_sessions_with_their_messages() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let u1 = s.create_user("Bob").await;
    let u2 = s.create_user("Cy").await;
    let only_u1 = s.create_session(&[a.id], &[u1.id]).await;
    let shared = s.create_session(&[a.id], &[u1.id, u2.id]).await;
    let no_user = s.create_session(&[a.id], &[]).await;
    for session in [&only_u1, &shared, &no_user] {
        s.say(session.id, "hello").await;
    }

    s.client.user_delete().user_id(u1.id).send().await.unwrap();

    assert_eq!(s.orphans().await, Vec::<String>::new());
    assert_eq!(status_of(s.client.session_get().id(only_u1.id).send().await), 404);
    assert_eq!(status_of(s.client.message_list().id(only_u1.id).send().await), 404);
    let shared_now = s.client.session_get().id(shared.id).send().await.unwrap().into_inner();
    assert_eq!(shared_now.users, vec![u2.id]);
    assert_eq!(shared_now.agents, vec![a.id]);
    assert_eq!(s.client.message_list().id(shared.id).send().await.unwrap().items.len(), 1);
    assert_eq!(s.client.message_list().id(no_user.id).send().await.unwrap().items.len(), 1);
    assert_eq!(s.client.session_list().send().await.unwrap().items.len(), 2);
    s.client.agent_get().id(a.id).send().await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_session_deletes_its_messages_only() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let gone = s.create_session(&[a.id], &[]).await;
    let kept = s.create_session(&[a.id], &[]).await;
    for i in 0..5 {
        s.say(gone.id, &format!("m{i}")).await;
    }
    s.say(kept.id, "stay").await;

    s.client.session_delete().id(gone.id).send().await.unwrap();

    assert_eq!(s.orphans().await, Vec::<String>::new());
    assert_eq!(status_of(s.client.message_list().id(gone.id).send().await), 404);
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("late");
    assert_eq!(status_of(s.client.message_create().id(gone.id).body(msg).send().await), 404);
    assert_eq!(s.client.message_list().id(kept.id).send().await.unwrap().items.len(), 1);
    s.client.agent_get().id(a.id).send().await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn a_session_created_while_its_agent_is_deleted_is_never_orphaned() {
    let s = TestServer::start().await;
    let u = s.create_user("Bob").await;
    for _ in 0..60 {
        let a = s.create_agent("Ada").await;
        let create = s
            .client
            .session_create()
            .body(types::CreateSessionRequest::builder().agent(a.id).user(u.id))
            .send();
        let delete = s.client.agent_delete().id(a.id).send();
        let (created, deleted) = tokio::join!(create, delete);
        deleted.unwrap();
        if let Err(e) = created {
            assert_eq!(e.status().map(|s| s.as_u16()), Some(404), "{e}");
        }
    }
    assert_eq!(s.orphans().await, Vec::<String>::new());
    assert!(
        s.client.session_list().send().await.unwrap().items.is_empty(),
        "every session went with its agent"
    );
    s.stop().await;
}

#[tokio::test]
async fn messages_appended_while_their_session_is_deleted_are_never_orphaned() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    for _ in 0..60 {
        let session = s.create_session(&[a.id], &[]).await;
        let appends = (0..4).map(|i| {
            let body = types::CreateMessageRequest::builder().role(types::Role::User).content(format!("{i}"));
            s.client.message_create().id(session.id).body(body).send()
        });
        let delete = s.client.session_delete().id(session.id).send();
        let (appended, deleted) = tokio::join!(futures::future::join_all(appends), delete);
        deleted.unwrap();
        for r in appended {
            if let Err(e) = r {
                assert_eq!(e.status().map(|s| s.as_u16()), Some(404), "{e}");
            }
        }
    }
    assert_eq!(s.orphans().await, Vec::<String>::new());
    s.stop().await;
}

#[tokio::test]
async fn tools_and_tasks_created_while_their_agent_is_deleted_are_never_orphaned() {
    let s = TestServer::start().await;
    for _ in 0..60 {
        let a = s.create_agent("Ada").await;
        let tool = json!({"name": "t", "type": "function", "function": {}}).to_string();
        let task = json!({"name": "t", "main": [{"log": "x"}]}).to_string();
        let tool_path = format!("/api/agents/{}/tools", a.id);
        let task_path = format!("/api/agents/{}/tasks", a.id);
        let (tool_r, task_r, deleted) = tokio::join!(
            s.raw("POST", &tool_path, Some(&tool)),
            s.raw("PUT", &task_path, Some(&task)),
            s.client.agent_delete().id(a.id).send()
        );
        deleted.unwrap();
        assert!([201, 404].contains(&tool_r.status), "{}", tool_r.body);
        assert!([200, 404].contains(&task_r.status), "{}", task_r.body);
    }
    assert_eq!(s.orphans().await, Vec::<String>::new());
    s.stop().await;
}
