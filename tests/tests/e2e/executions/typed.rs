//! The execution operations through the generated client, and the client's
//! typed stream of transitions: a run that waits, is resumed, and ends.

use std::time::{Duration, Instant};

use agent_platform_tests::{Client, status_of, types};
use futures::StreamExt;
use serde_json::json;

use super::shared;

fn map(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().expect("an object").clone()
}

#[tokio::test]
async fn the_generated_client_creates_starts_follows_and_resumes() {
    let s = shared();
    let client = Client::with_key(&s.base, &s.key).unwrap();
    let agent = client
        .agent_create()
        .body(types::CreateAgentRequest::builder().name("Typed"))
        .send()
        .await
        .unwrap()
        .into_inner();
    let main = vec![
        map(json!({"evaluate": {"n": "_.n + 1"}})),
        map(json!({"wait_for_input": {"info": {"n": "_.n"}}})),
        map(json!({"return": {"got": "_.answer"}})),
    ];
    let body = types::PutTaskRequest::builder().name("typed").main(main);
    let task = client.task_create().id(agent.id).body(body).send().await.unwrap();
    assert_eq!(task.status(), 201);
    let task = task.into_inner();
    let got = client.task_get_by_id().task_id(task.id).send().await.unwrap().into_inner();
    assert_eq!(got, task);

    let start = types::CreateExecutionRequest::builder().input(map(json!({"n": 1})));
    let created = client.execution_create().task_id(task.id).body(start).send().await.unwrap();
    assert_eq!(created.status(), 201);
    let execution = created.into_inner();
    assert_eq!(execution.status, types::ExecutionStatus::Queued);
    assert_eq!(execution.task_id, task.id);

    // Follow it with the typed stream; resume when it waits.
    let mut stream = client.execution_transitions_stream(execution.id, None).await.unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(t) =
        tokio::time::timeout_at(deadline.into(), stream.next()).await.expect("the stream ends in time")
    {
        let t = t.expect("a transition");
        if t.type_ == types::TransitionType::Wait {
            assert_eq!(t.output, json!({"info": {"n": 2}}));
            let listed = client.execution_get().id(execution.id).send().await.unwrap().into_inner();
            assert_eq!(listed.status, types::ExecutionStatus::AwaitingInput);
            let resume = types::UpdateExecutionRequest::builder()
                .status(types::RequestedStatus::Running)
                .input(Some(json!({"answer": 42})));
            let resumed = client.execution_update().id(execution.id).body(resume).send().await.unwrap();
            assert_eq!(resumed.into_inner().id, execution.id);
        }
        seen.push(t);
    }
    let kinds: Vec<types::TransitionType> = seen.iter().map(|t| t.type_).collect();
    use types::TransitionType::*;
    assert_eq!(kinds, [Init, Step, Wait, Resume, Step, Finish]);

    let done = client.execution_get().id(execution.id).send().await.unwrap().into_inner();
    assert_eq!(done.status, types::ExecutionStatus::Succeeded);
    assert_eq!(done.output, Some(json!({"got": 42})));
    let listed = client.transition_list().id(execution.id).send().await.unwrap().into_inner().items;
    assert_eq!(listed, seen, "the stream and the list agree");
    let one = client.transition_get().id(execution.id).transition_id(seen[2].id).send().await.unwrap();
    assert_eq!(one.into_inner(), seen[2]);
    let runs = client.execution_list().task_id(task.id).send().await.unwrap().into_inner().items;
    assert_eq!(runs.iter().map(|e| e.id).collect::<Vec<_>>(), [execution.id]);

    // Resuming where it stopped: after the wait, the rest.
    let rest: Vec<_> = client
        .execution_transitions_stream(execution.id, Some(seen[2].id))
        .await
        .unwrap()
        .map(|t| t.expect("a transition"))
        .collect()
        .await;
    assert_eq!(rest, seen[3..]);

    let cancel = types::UpdateExecutionRequest::builder().status(types::RequestedStatus::Cancelled);
    assert_eq!(status_of(client.execution_update().id(execution.id).body(cancel).send().await), 409);
}
