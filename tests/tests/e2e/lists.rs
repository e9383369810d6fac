//! Pagination, order and metadata filters of lists.

use agent_platform_tests::{TestServer, types};
use serde_json::json;
use uuid::Uuid;

/// Creates `n` agents named a0..a{n-1} with metadata {"i": i, "even": i % 2 == 0}.
async fn agents(s: &TestServer, n: usize) -> Vec<types::Agent> {
    let mut out = Vec::new();
    for i in 0..n {
        let meta = json!({"i": i, "even": i % 2 == 0, "lang": if i < 3 { "en" } else { "fr" }});
        let a = s
            .client
            .agent_create()
            .body(
                types::CreateAgentRequest::builder()
                    .name(format!("a{i}"))
                    .metadata(Some(meta.as_object().unwrap().clone())),
            )
            .send()
            .await
            .unwrap()
            .into_inner();
        out.push(a);
    }
    out
}

fn ids(items: &[types::Agent]) -> Vec<Uuid> {
    items.iter().map(|a| a.id).collect()
}

#[tokio::test]
async fn lists_default_to_newest_first_and_page_with_limit_and_offset() {
    let s = TestServer::start().await;
    let made = agents(&s, 7).await;
    let newest_first: Vec<Uuid> = made.iter().rev().map(|a| a.id).collect();
    let all = s.client.agent_list().send().await.unwrap().into_inner().items;
    assert_eq!(ids(&all), newest_first);
    let page = s.client.agent_list().limit(3).offset(2).send().await.unwrap().into_inner().items;
    assert_eq!(ids(&page), newest_first[2..5]);
    let tail = s.client.agent_list().limit(3).offset(6).send().await.unwrap().into_inner().items;
    assert_eq!(ids(&tail), newest_first[6..]);
    let past = s.client.agent_list().offset(7).send().await.unwrap().into_inner().items;
    assert!(past.is_empty());
    let asc = s.client.agent_list().direction(types::Direction::Asc).send().await.unwrap().into_inner().items;
    assert_eq!(ids(&asc), ids(&made));
    s.stop().await;
}

#[tokio::test]
async fn sort_by_updated_at_follows_the_last_change_in_both_directions() {
    let s = TestServer::start().await;
    let made = agents(&s, 4).await;
    // Touch a1 then a0: updated order (oldest first) becomes a2, a3, a1, a0.
    for i in [1, 0] {
        s.client
            .agent_patch()
            .id(made[i].id)
            .body(types::PatchAgentRequest::builder().about(Some("x".parse().unwrap())))
            .send()
            .await
            .unwrap();
    }
    let want = vec![made[2].id, made[3].id, made[1].id, made[0].id];
    let asc = s
        .client
        .agent_list()
        .sort_by(types::SortBy::UpdatedAt)
        .direction(types::Direction::Asc)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(ids(&asc), want);
    let desc =
        s.client.agent_list().sort_by(types::SortBy::UpdatedAt).send().await.unwrap().into_inner().items;
    assert_eq!(ids(&desc), want.iter().rev().copied().collect::<Vec<_>>());
    let desc_page = s
        .client
        .agent_list()
        .sort_by(types::SortBy::UpdatedAt)
        .limit(2)
        .offset(1)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(ids(&desc_page), vec![made[1].id, made[3].id]);
    // created_at order is unchanged by updates.
    let created =
        s.client.agent_list().direction(types::Direction::Asc).send().await.unwrap().into_inner().items;
    assert_eq!(ids(&created), ids(&made));
    s.stop().await;
}

#[tokio::test]
async fn limit_and_offset_bounds_are_422() {
    let s = TestServer::start().await;
    for (q, loc, kind) in [
        ("limit=0", "limit", "greater_than_equal"),
        ("limit=1001", "limit", "less_than_equal"),
        ("limit=ten", "limit", "int_parsing"),
        ("offset=-1", "offset", "greater_than_equal"),
        ("sort_by=name", "sort_by", "enum"),
        ("direction=up", "direction", "enum"),
        ("metadata_filter=%5B1%5D", "metadata_filter", "dict_type"),
        ("metadata_filter=%7Bbad", "metadata_filter", "json_invalid"),
    ] {
        s.raw("GET", &format!("/api/agents?{q}"), None).await.assert_422(json!(["query", loc]), kind);
    }
    assert_eq!(s.raw("GET", "/api/agents?limit=1000", None).await.status, 200);
    assert_eq!(s.raw("GET", "/api/agents?limit=1", None).await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn metadata_filter_matches_every_given_key() {
    let s = TestServer::start().await;
    let made = agents(&s, 6).await;
    let q = |f: serde_json::Value| {
        let s = &s;
        async move {
            let r = s
                .raw(
                    "GET",
                    &format!("/api/agents?direction=asc&metadata_filter={}", urlencode(&f.to_string())),
                    None,
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(q(json!({"lang": "en"})).await, ["a0", "a1", "a2"]);
    assert_eq!(q(json!({"lang": "fr", "even": true})).await, ["a4"]);
    assert_eq!(q(json!({"i": 5})).await, ["a5"]);
    assert!(q(json!({"lang": "de"})).await.is_empty());
    assert!(q(json!({"missing": null})).await.is_empty());
    assert_eq!(q(json!({})).await.len(), 6, "an empty filter matches everything");
    // Paging applies after filtering.
    let r = s
        .raw(
            "GET",
            &format!(
                "/api/agents?direction=asc&limit=1&offset=1&metadata_filter={}",
                urlencode(r#"{"even":true}"#)
            ),
            None,
        )
        .await;
    assert_eq!(r.body["items"][0]["id"], made[2].id.to_string());
    // Changing metadata moves a record between filter results.
    s.raw("PATCH", &format!("/api/agents/{}", made[0].id), Some(r#"{"metadata": {"lang": "de"}}"#)).await;
    assert_eq!(q(json!({"lang": "en"})).await, ["a1", "a2"]);
    assert_eq!(q(json!({"lang": "de"})).await, ["a0"]);
    s.stop().await;
}

/// Numbers in metadata compare by value, in lists as in search: `1`, `1.0`
/// and `1e0` are one filter, whichever spelling a record was stored with.
#[tokio::test]
async fn metadata_filters_compare_numbers_by_value() {
    let s = TestServer::start().await;
    let stored = [json!({"n": 1.0}), json!({"n": 1}), json!({"n": 1.5, "v": [2.0]})];
    let (mut agent_ids, mut user_ids) = (Vec::new(), Vec::new());
    for (i, metadata) in stored.iter().enumerate() {
        let metadata = Some(metadata.as_object().unwrap().clone());
        let body = types::CreateAgentRequest::builder().name(format!("n{i}")).metadata(metadata.clone());
        agent_ids.push(s.client.agent_create().body(body).send().await.unwrap().id);
        let body = types::CreateUserRequest::builder()
            .name(Some(format!("n{i}").parse().unwrap()))
            .metadata(metadata);
        user_ids.push(s.client.user_create().body(body).send().await.unwrap().id);
    }
    for (filter, found) in [
        (r#"{"n":1}"#, 0..2),
        (r#"{"n":1.0}"#, 0..2),
        (r#"{"n":1e0}"#, 0..2),
        (r#"{"n":1.5}"#, 2..3),
        (r#"{"v":[2]}"#, 2..3),
        (r#"{"n":2}"#, 0..0),
    ] {
        let agents = s
            .client
            .agent_list()
            .direction(types::Direction::Asc)
            .metadata_filter(filter)
            .send()
            .await
            .unwrap()
            .into_inner()
            .items;
        assert_eq!(ids(&agents), agent_ids[found.clone()], "agents {filter}");
        let users = s
            .client
            .user_list()
            .direction(types::Direction::Asc)
            .metadata_filter(filter)
            .send()
            .await
            .unwrap()
            .into_inner()
            .items;
        assert_eq!(users.iter().map(|u| u.id).collect::<Vec<_>>(), user_ids[found], "users {filter}");
    }
    // Stored as sent: the filter's spelling does not change what comes back.
    let agent = s.client.agent_get().id(agent_ids[0]).send().await.unwrap();
    assert_eq!(agent.metadata.as_ref().unwrap()["n"].to_string(), "1.0");
    s.stop().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
