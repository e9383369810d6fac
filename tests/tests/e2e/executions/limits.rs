//! The `[executions]` limits, on a server with small ones: over a limit the
//! execution fails (never hangs) with an error naming the limit's setting.

use agent_platform_tests::TestServer;
use serde_json::json;

use super::{Ctx, assert_failed, assert_succeeded};

async fn small_limits() -> TestServer {
    TestServer::with_config(|c| {
        c.executions.max_steps = 20;
        c.executions.max_foreach_items = 5;
        c.executions.max_parallel_branches = 3;
        c.executions.max_sleep_s = 10;
        c.executions.expression_fuel = 2_000;
    })
    .await
}

#[tokio::test]
async fn each_limit_fails_the_execution_naming_its_setting() {
    let s = small_limits().await;
    let c = Ctx::on(&s.base, &s.key).await;

    // At the limits: fine.
    let (e, _) = c
        .run_steps(
            json!([
                {"foreach": {"in": "range(5)", "do": {"evaluate": {"v": "_"}}}},
                {"parallel": [{"log": "a"}, {"log": "b"}, {"log": "c"}]},
            ]),
            json!({}),
            json!({}),
        )
        .await;
    assert_succeeded(&e, json!(["a", "b", "c"]));

    let cases = [
        (json!([{"foreach": {"in": "range(6)", "do": {"log": "x"}}}]), "executions.max_foreach_items"),
        (json!([{"over": "range(6)", "map": {"log": "x"}}]), "executions.max_foreach_items"),
        (
            json!([{"parallel": [{"log": "a"}, {"log": "b"}, {"log": "c"}, {"log": "d"}]}]),
            "executions.max_parallel_branches",
        ),
        (json!([{"sleep": {"seconds": 11}}]), "executions.max_sleep_s"),
        (
            json!([{"foreach": {"in": "range(5)", "do": [{"log": "a"}, {"log": "b"}, {"log": "c"}, {"log": "d"}, {"log": "e"}]}}]),
            "executions.max_steps",
        ),
        (json!([{"log": "{% for i in range(50000) %}{{ i }}{% endfor %}"}]), "expression_fuel"),
    ];
    for (main, setting) in cases {
        let (e, ts) = c.run_steps(main.clone(), json!({}), json!({})).await;
        assert_failed(&e, &ts, &[setting]);
        assert!(ts.len() <= 21, "{main}: {} transitions, over max_steps", ts.len());
    }
    s.stop().await;
}
