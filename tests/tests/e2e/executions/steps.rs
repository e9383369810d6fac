//! Each step kind's output and the exact transitions it commits: places are
//! `workflow:step`, nested lists named `main[3].then`, `.else`,
//! `.switch[<case>]`, `.foreach[<item>]`, `.parallel`, `.map`.

use serde_json::{Value, json};

use super::{Ctx, assert_failed, assert_succeeded, lines, outputs};

#[tokio::test]
async fn evaluate_set_get_and_log_see_the_input_the_outputs_and_the_state() {
    let c = Ctx::new().await;
    let main = json!([
        {"evaluate": {"a": "_.x + 1"}},
        {"evaluate": {"b": "_.a * 2", "first": "outputs[0].a", "i": "inputs[0].x", "inp": "input.x"}},
        {"set": {"k": "_.b"}},
        {"get": "k"},
        {"log": "{{ state.k }} and {{ _ }} for {{ 'this task' if execution.task_id == task.id else 'another' }}"},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({"x": 1})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main:0 -> main:1",
            "step main:1 -> main:2",
            "step main:2 -> main:3",
            "step main:3 -> main:4",
            "step main:4 -> null",
            "finish",
        ]
    );
    assert_eq!(
        outputs(&ts),
        [
            json!({"x": 1}),
            json!({"a": 2}),
            json!({"b": 4, "first": 2, "i": 1, "inp": 1}),
            json!({"k": 4}),
            json!(4),
            json!("4 and 4 for this task"),
            json!("4 and 4 for this task"),
        ]
    );
    assert_succeeded(&e, json!("4 and 4 for this task"));
    assert_eq!(e["input"], json!({"x": 1}));
    assert!(ts.iter().all(|t| t["execution_id"] == e["id"]), "every transition names its execution");
}

#[tokio::test]
async fn expressions_take_the_dollar_prefix_literals_and_the_helper_functions() {
    let c = Ctx::new().await;
    let main = json!([{"evaluate": {
        "plain": "1 + 2",
        "prefixed": "$ 1 + 2",
        "literal": {"x": "$ _.v * 10", "y": "plain text", "z": [1, "$ _.v"]},
        "number": 5,
        "len": "len(_.items)",
        "sum": "sum(_.items)",
        "sorted": "sorted([3, 1, 2])",
        "min_max": "[min(_.items), max(_.items)]",
        "str_int": "[str(5), int('7'), float('1.5'), bool(0)]",
        "keys": "keys({'a': 1})",
        "values": "values({'a': 1})",
        "loads": "json_loads('{\"q\": [1]}')",
        "dumps": "json_loads(json_dumps({'r': 2}))",
        "list": "list(range(3))",
        "dict": "dict(a=1)",
        "filter": "_.name | upper",
        "compare": "_.v > 1 and _.name == 'ada'",
    }}]);
    let (e, _) = c.run_steps(main, json!({}), json!({"v": 2, "items": [4, 1, 7], "name": "ada"})).await;
    assert_succeeded(
        &e,
        json!({
            "plain": 3, "prefixed": 3,
            "literal": {"x": 20, "y": "plain text", "z": [1, 2]},
            "number": 5, "len": 3, "sum": 12, "sorted": [1, 2, 3], "min_max": [1, 7],
            "str_int": ["5", 7, 1.5, false], "keys": ["a"], "values": [1],
            "loads": {"q": [1]}, "dumps": {"r": 2}, "list": [0, 1, 2], "dict": {"a": 1},
            "filter": "ADA", "compare": true,
        }),
    );
}

#[tokio::test]
async fn if_runs_then_or_else_and_gives_the_branchs_output() {
    let c = Ctx::new().await;
    let task = c
        .task(
            json!([
                {"if": "_.x > 1",
                 "then": [{"evaluate": {"a": "'big'"}}, {"evaluate": {"b": "_.a ~ '!'"}}],
                 "else": {"evaluate": {"a": "'small'"}}},
                {"if": "$ false", "then": {"log": "never"}},
            ]),
            json!({}),
        )
        .await;
    let (e, ts) = c.run(task, json!({"x": 2})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].then:0 -> main[0].then:1",
            "step main[0].then:1 -> null",
            "step main:0 -> main:1",
            "step main:1 -> null",
            "finish",
        ]
    );
    assert_eq!(ts[3]["output"], json!({"b": "big!"}));
    assert_eq!(ts[4]["output"], Value::Null, "an if without else whose condition is false gives null");
    assert_succeeded(&e, Value::Null);

    let (e, ts) = c.run(task, json!({"x": 0})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].else:0 -> null",
            "step main:0 -> main:1",
            "step main:1 -> null",
            "finish"
        ]
    );
    assert_eq!(ts[2]["output"], json!({"a": "small"}));
    assert_eq!(e["status"], "succeeded");
}

#[tokio::test]
async fn switch_takes_the_first_true_case_and_underscore_is_the_default() {
    let c = Ctx::new().await;
    let task = c
        .task(
            json!([{"switch": [
                {"case": "_.k == 'a'", "then": {"evaluate": {"r": "'A'"}}},
                {"case": "_.k in ['b', 'c']", "then": [{"log": "{{ _.k }}"}, {"evaluate": {"r": "_ ~ '!'"}}]},
                {"case": "$ _.k == 'c'", "then": {"evaluate": {"r": "'never: an earlier case is true'"}}},
                {"case": "_", "then": {"evaluate": {"r": "'other'"}}},
            ]}]),
            json!({}),
        )
        .await;
    let (e, ts) = c.run(task, json!({"k": "a"})).await;
    assert_eq!(
        lines(&ts),
        ["init main:0 -> main:0", "step main[0].switch[0]:0 -> null", "step main:0 -> null", "finish"]
    );
    assert_succeeded(&e, json!({"r": "A"}));

    let (e, ts) = c.run(task, json!({"k": "c"})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].switch[1]:0 -> main[0].switch[1]:1",
            "step main[0].switch[1]:1 -> null",
            "step main:0 -> null",
            "finish",
        ]
    );
    assert_succeeded(&e, json!({"r": "c!"}));

    let (e, ts) = c.run(task, json!({"k": "z"})).await;
    assert_eq!(lines(&ts)[1], "step main[0].switch[3]:0 -> null");
    assert_succeeded(&e, json!({"r": "other"}));
}

#[tokio::test]
async fn foreach_runs_its_body_per_item_with_the_item_as_underscore() {
    let c = Ctx::new().await;
    let main = json!([
        {"foreach": {"in": "_.items", "do": [{"evaluate": {"d": "_ * 2"}}, {"evaluate": {"e": "_.d + 1"}}]}},
        {"evaluate": {"n": "len(_)"}},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({"items": [1, 2]})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].foreach[0]:0 -> main[0].foreach[0]:1",
            "step main[0].foreach[0]:1 -> null",
            "step main[0].foreach[1]:0 -> main[0].foreach[1]:1",
            "step main[0].foreach[1]:1 -> null",
            "step main:0 -> main:1",
            "step main:1 -> null",
            "finish",
        ]
    );
    assert_eq!(ts[5]["output"], json!([{"e": 3}, {"e": 5}]));
    assert_succeeded(&e, json!({"n": 2}));

    // Over nothing: no body runs, the output is an empty list.
    let (e, ts) =
        c.run_steps(json!([{"foreach": {"in": "[]", "do": {"log": "x"}}}]), json!({}), json!({})).await;
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> null", "finish"]);
    assert_succeeded(&e, json!([]));

    // Over something that is not a list: the step fails, saying so.
    let (e, ts) = c
        .run_steps(json!([{"foreach": {"in": "_.n", "do": {"log": "x"}}}]), json!({}), json!({"n": 3}))
        .await;
    assert_failed(&e, &ts, &["list"]);
}

#[tokio::test]
async fn map_reduce_maps_in_order_and_reduces_from_initial() {
    let c = Ctx::new().await;
    let map = json!({"evaluate": {"sq": "_ * _"}});
    let (e, ts) =
        c.run_steps(json!([{"over": "_.xs", "map": map}]), json!({}), json!({"xs": [1, 2, 3]})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].map:0 -> main[0].map:1",
            "step main[0].map:1 -> main[0].map:2",
            "step main[0].map:2 -> null",
            "step main:0 -> null",
            "finish",
        ]
    );
    assert_succeeded(&e, json!([{"sq": 1}, {"sq": 4}, {"sq": 9}]));

    // `reduce`: `results` starts at `initial`, `_` is each map output in order.
    let reduce = json!([{"over": "_.xs", "map": map, "reduce": "results + _.sq", "initial": 100}]);
    let (e, _) = c.run_steps(reduce, json!({}), json!({"xs": [1, 2, 3]})).await;
    assert_succeeded(&e, json!(114));
    // Without `initial`, `results` starts as an empty list.
    let reduce = json!([{"over": "_.xs", "map": map, "reduce": "results + [_.sq * 10]"}]);
    let (e, _) = c.run_steps(reduce, json!({}), json!({"xs": [1, 2]})).await;
    assert_succeeded(&e, json!([10, 40]));
}

/// With `parallelism` > 1 the maps run at once, the early items taking the
/// longest, and the outputs are still in input order.
#[tokio::test]
async fn map_reduce_with_parallelism_keeps_the_input_order() {
    let c = Ctx::new().await;
    let items: Vec<Value> = (0..8).map(|i| json!((0..(16 - 2 * i)).collect::<Vec<_>>())).collect();
    let map = json!({"foreach": {"in": "_", "do": {"evaluate": {"v": "_ * 10"}}}});
    let main = json!([{"over": "_.xs", "map": map, "parallelism": 4}]);
    let (e, ts) = c.run_steps(main, json!({}), json!({"xs": items})).await;
    let expected: Vec<Value> =
        (0..8).map(|i| json!((0..(16 - 2 * i)).map(|v| json!({"v": v * 10})).collect::<Vec<_>>())).collect();
    assert_succeeded(&e, json!(expected));
    // Each item's map committed its step once, at its own index.
    let mut maps: Vec<String> =
        lines(&ts).into_iter().filter(|l| l.starts_with("step main[0].map:")).collect();
    maps.sort();
    let mut want: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "step main[0].map:{i} -> {}",
                if i < 7 { format!("main[0].map:{}", i + 1) } else { "null".into() }
            )
        })
        .collect();
    want.sort();
    assert_eq!(maps, want);
    assert_eq!(lines(&ts)[ts.len() - 2], "step main:0 -> null");
}

#[tokio::test]
async fn parallel_runs_every_branch_and_gives_their_outputs_in_order() {
    let c = Ctx::new().await;
    let main = json!([
        {"parallel": [
            {"evaluate": {"a": "_.x + 1"}},
            {"foreach": {"in": "[1, 2, 3]", "do": {"evaluate": {"b": "_"}}}},
            {"return": {"c": "_.x"}},
            {"log": "x is {{ _.x }}"},
        ]},
        {"evaluate": {"all": "_"}},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({"x": 5})).await;
    let expected = json!([{"a": 6}, [{"b": 1}, {"b": 2}, {"b": 3}], {"c": 5}, "x is 5"]);
    assert_succeeded(&e, json!({"all": expected}));
    let mut inner: Vec<String> = lines(&ts)[1..ts.len() - 3].to_vec();
    inner.sort();
    let mut want = vec![
        "step main[0].parallel:0 -> main[0].parallel:1",
        "step main[0].parallel:1 -> main[0].parallel:2",
        "step main[0].parallel:2 -> main[0].parallel:3",
        "step main[0].parallel:3 -> null",
        "step main[0].parallel[1].foreach[0]:0 -> null",
        "step main[0].parallel[1].foreach[1]:0 -> null",
        "step main[0].parallel[1].foreach[2]:0 -> null",
    ];
    want.sort();
    assert_eq!(inner, want, "a return in a branch ends that branch only");
    assert_eq!(lines(&ts)[ts.len() - 3..], ["step main:0 -> main:1", "step main:1 -> null", "finish"]);
    assert_eq!(ts[ts.len() - 3]["output"], expected);
}

#[tokio::test]
async fn return_ends_main_with_its_value() {
    let c = Ctx::new().await;
    let main = json!([
        {"evaluate": {"a": 1}},
        {"return": {"r": "_.a", "twice": "_.a * 2"}},
        {"error": "never reached"},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({})).await;
    let kinds: Vec<&str> = ts.iter().map(|t| t["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["init", "step", "step", "finish"]);
    assert_eq!(ts[2]["current"], json!({"workflow": "main", "step": 1}));
    assert_eq!(ts[2]["output"], json!({"r": 1, "twice": 2}));
    assert_succeeded(&e, json!({"r": 1, "twice": 2}));
}

#[tokio::test]
async fn yield_runs_a_sub_workflow_with_its_arguments_and_gives_its_value() {
    let c = Ctx::new().await;
    let main = json!([
        {"evaluate": {"n": 3}},
        {"workflow": "double", "arguments": {"x": "_.n", "label": "'n'"}},
        {"evaluate": {"v": "_.y", "mine": "outputs[0].n"}},
    ]);
    let double = json!([
        {"evaluate": {"y": "_.x * 2", "seen": "_.label"}},
        {"log": "{{ outputs[0].y }}"},
        {"return": {"y": "outputs[0].y"}},
    ]);
    let (e, ts) = c.run_steps(main, json!({"double": double}), json!({})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main:0 -> main:1",
            "step main:1 -> double:0",
            "init_branch double:0 -> double:0",
            "step double:0 -> double:1",
            "step double:1 -> double:2",
            "step double:2 -> null",
            "finish_branch double:2 -> main:1",
            "step main:1 -> main:2",
            "step main:2 -> null",
            "finish",
        ]
    );
    let args = json!({"x": 3, "label": "n"});
    assert_eq!(ts[2]["output"], args, "the yield's first step carries the arguments");
    assert_eq!(ts[3]["output"], args);
    assert_eq!(ts[4]["output"], json!({"y": 6, "seen": "n"}));
    assert_eq!(ts[5]["output"], json!("6"));
    assert_eq!(ts[7]["output"], json!({"y": 6}));
    assert_eq!(ts[8]["output"], json!({"y": 6}));
    assert_succeeded(&e, json!({"v": 6, "mine": 3}));

    // A sub-workflow without a return gives its last step's output.
    let (e, _) = c
        .run_steps(
            json!([{"workflow": "inc", "arguments": {"x": 1}}]),
            json!({"inc": [{"evaluate": {"x": "_.x + 1"}}]}),
            json!({}),
        )
        .await;
    assert_succeeded(&e, json!({"x": 2}));
}

/// `if` in `foreach`, a `yield` in the `if`: every place is named by its path.
#[tokio::test]
async fn nested_if_foreach_and_yield_name_each_place_by_its_path() {
    let c = Ctx::new().await;
    let main = json!([{"foreach": {"in": "_.xs", "do": [
        {"if": "_ % 2 == 0",
         "then": {"workflow": "half", "arguments": {"n": "_"}},
         "else": {"evaluate": {"odd": "_"}}},
    ]}}]);
    let half = json!([{"evaluate": {"h": "_.n // 2"}}]);
    let (e, ts) = c.run_steps(main, json!({"half": half}), json!({"xs": [1, 4]})).await;
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main[0].foreach[0][0].else:0 -> null",
            "step main[0].foreach[0]:0 -> null",
            "step main[0].foreach[1][0].then:0 -> half:0",
            "init_branch half:0 -> half:0",
            "step half:0 -> null",
            "finish_branch half:0 -> main[0].foreach[1][0].then:0",
            "step main[0].foreach[1][0].then:0 -> null",
            "step main[0].foreach[1]:0 -> null",
            "step main:0 -> null",
            "finish",
        ]
    );
    assert_succeeded(&e, json!([{"odd": 1}, {"h": 2}]));
}

/// A `return` inside a foreach (in an if) ends `main`: later items do not run.
#[tokio::test]
async fn a_return_nested_in_main_ends_the_execution() {
    let c = Ctx::new().await;
    let main = json!([
        {"foreach": {"in": "[1, 2, 3]", "do": {"if": "_ == 2", "then": {"return": {"hit": "_"}}, "else": {"log": "{{ _ }}"}}}},
        {"error": "never reached"},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({})).await;
    assert_succeeded(&e, json!({"hit": 2}));
    assert!(
        !lines(&ts).iter().any(|l| l.contains("foreach[2]")),
        "the third item ran after the return: {:#?}",
        lines(&ts)
    );
}

#[tokio::test]
async fn log_renders_a_template_and_get_of_an_unset_key_is_null() {
    let c = Ctx::new().await;
    let main = json!([
        {"log": "Hello {{ input.name }}, {{ inputs[0].name | upper }} ({{ agent.name }})"},
        {"get": "missing"},
    ]);
    let (e, ts) = c.run_steps(main, json!({}), json!({"name": "Ada"})).await;
    assert_eq!(ts[1]["output"], json!("Hello Ada, ADA (Runner)"));
    assert_succeeded(&e, Value::Null);
}

#[tokio::test]
async fn an_error_step_fails_the_execution_with_its_message() {
    let c = Ctx::new().await;
    let (e, ts) = c
        .run_steps(
            json!([{"log": "x"}, {"error": "bad {{ _ }} input"}, {"log": "never"}]),
            json!({}),
            json!({}),
        )
        .await;
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> main:1", "error"]);
    assert_failed(&e, &ts, &["bad x input"]);
    assert!(e["output"].is_null(), "{e}");
}

#[tokio::test]
async fn an_expression_that_fails_at_run_time_fails_the_execution() {
    let c = Ctx::new().await;
    let (e, ts) = c
        .run_steps(json!([{"evaluate": {"ok": 1}}, {"evaluate": {"bad": "'a' - 1"}}]), json!({}), json!({}))
        .await;
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> main:1", "error"]);
    assert_failed(&e, &ts, &[]);
}

/// A wait inside concurrent branches would not know which branch the input is for.
#[tokio::test]
async fn waiting_for_input_inside_a_parallel_branch_fails_saying_so() {
    let c = Ctx::new().await;
    let main = json!([{"parallel": [{"log": "a"}, {"wait_for_input": {"info": {"q": "'?'"}}}]}]);
    let (e, ts) = c.run_steps(main, json!({}), json!({})).await;
    assert_failed(&e, &ts, &["parallel"]);
    let main = json!([{"over": "[1, 2]", "map": {"wait_for_input": {"info": {}}}, "parallelism": 2}]);
    let (e, ts) = c.run_steps(main, json!({}), json!({})).await;
    assert_failed(&e, &ts, &["parallelism"]);
}

/// The task is read once, at start: editing it does not change a run under way.
#[tokio::test]
async fn a_running_execution_keeps_the_task_it_started_with() {
    let c = Ctx::new().await;
    let body =
        json!({"name": "edited", "main": [{"wait_for_input": {"info": {}}}, {"evaluate": {"v": "'first'"}}]});
    let task = c.api.task(c.agent, &body).await;
    let e = c.start_until(task, json!({}), &["awaiting_input"]).await;
    let id = Ctx::id(&e);
    let edit = json!({"id": task, "name": "edited", "main": [{"evaluate": {"v": "'second'"}}]});
    let put = c.api.call("PUT", &format!("/api/agents/{}/tasks", c.agent), Some(&edit)).await;
    assert_eq!(put.0, 200, "{}", put.1);
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {}})).await;
    assert_eq!(status, 200, "{body}");
    let e = c.api.wait_ended(id, super::ENDS_WITHIN).await;
    assert_succeeded(&e, json!({"v": "first"}));
}
