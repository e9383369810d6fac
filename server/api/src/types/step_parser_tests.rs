//! The step parser: every kind's shape, and every way a step is refused.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::error::Issue;

fn at() -> Vec<LocPart> {
    vec![LocPart::Key("main".into()), LocPart::Index(0)]
}

/// Parses one step at `main[0]`: the step, or its issues as `(loc, kind, msg)`.
fn parse(step: Value) -> Result<Step, Vec<(String, String, String)>> {
    let mut issues = Issues::new(Source::Body);
    let step = parse_step(step.as_object().expect("a step object"), &at(), &mut issues);
    let issues: Vec<Issue> = issues.into_vec();
    match step {
        Some(s) if issues.is_empty() => Ok(s),
        _ => {
            assert!(!issues.is_empty(), "a step that does not parse says why");
            Err(issues.into_iter().map(|i| (place(&i.loc[1..]), i.kind, i.msg)).collect())
        }
    }
}

/// The one issue of a step that is refused: `(place, kind, msg)`.
fn refused(step: Value) -> (String, String, String) {
    let mut issues = parse(step.clone()).expect_err(&format!("{step} is refused"));
    assert_eq!(issues.len(), 1, "{issues:?}");
    issues.remove(0)
}

fn e(v: Value) -> Expr {
    Expr(v)
}

#[test]
fn each_kind_parses_into_its_step() {
    assert_eq!(
        parse(json!({"evaluate": {"x": "_.a + 1", "y": 2, "z": {"k": "$ _.b"}}})).unwrap(),
        Step::Evaluate(vec![
            ("x".into(), e(json!("_.a + 1"))),
            ("y".into(), e(json!(2))),
            ("z".into(), e(json!({"k": "$ _.b"}))),
        ])
    );
    assert_eq!(
        parse(json!({"prompt": "Hi {{ _.name }}", "tools": "all", "unwrap": true, "settings": {"temperature": 0}}))
            .unwrap(),
        Step::Prompt {
            prompt: PromptInput::Text(Template("Hi {{ _.name }}".into())),
            tools: Some(PromptTools::All),
            tool_choice: None,
            settings: Some(json!({"temperature": 0}).as_object().unwrap().clone()),
            unwrap: true,
        }
    );
    let Step::Prompt { prompt, tools, unwrap, .. } =
        parse(json!({"prompt": [{"role": "user", "content": "{{ input.q }}"}], "tools": ["a", "b"]}))
            .unwrap()
    else {
        panic!("a prompt")
    };
    assert_eq!(
        prompt,
        PromptInput::Messages(vec![PromptMessage {
            role: "user".into(),
            content: Template("{{ input.q }}".into())
        }])
    );
    assert_eq!(tools, Some(PromptTools::Named(vec!["a".into(), "b".into()])));
    assert!(!unwrap, "unwrap defaults to false");
    let Step::Prompt { prompt, .. } = parse(json!({"prompt": "$ _.messages"})).unwrap() else { panic!() };
    assert_eq!(prompt, PromptInput::Expr(e(json!("$ _.messages"))));
    for key in ["tool", "tool_call"] {
        assert_eq!(
            parse(json!({key: "weather", "arguments": {"city": "_.city"}})).unwrap(),
            Step::ToolCall { tool: "weather".into(), arguments: vec![("city".into(), e(json!("_.city")))] }
        );
    }
    assert_eq!(
        parse(json!({"if": "_.x > 0", "then": {"log": "pos"}, "else": [{"log": "neg"}, {"return": {}}]}))
            .unwrap(),
        Step::If {
            cond: e(json!("_.x > 0")),
            then: vec![Step::Log(Template("pos".into()))],
            otherwise: Some(vec![Step::Log(Template("neg".into())), Step::Return(vec![])]),
        }
    );
    assert_eq!(
        parse(json!({"switch": [{"case": "_.x == 1", "then": {"log": "one"}}, {"case": "_", "then": [{"log": "other"}]}]}))
            .unwrap(),
        Step::Switch(vec![
            (Some(e(json!("_.x == 1"))), vec![Step::Log(Template("one".into()))]),
            (None, vec![Step::Log(Template("other".into()))]),
        ])
    );
    assert_eq!(
        parse(json!({"foreach": {"in": "range(3)", "do": {"evaluate": {"i": "_"}}}})).unwrap(),
        Step::Foreach {
            items: e(json!("range(3)")),
            body: vec![Step::Evaluate(vec![("i".into(), e(json!("_")))])]
        }
    );
    assert_eq!(
        parse(json!({"over": "_.items", "map": {"evaluate": {"d": "_ * 2"}}, "reduce": "results + [_]", "initial": [], "parallelism": 4}))
            .unwrap(),
        Step::MapReduce {
            over: e(json!("_.items")),
            map: Box::new(Step::Evaluate(vec![("d".into(), e(json!("_ * 2")))])),
            reduce: Some(e(json!("results + [_]"))),
            initial: Some(json!([])),
            parallelism: 4,
        }
    );
    let Step::MapReduce { parallelism, reduce, .. } =
        parse(json!({"over": "[1]", "map": {"log": "x"}})).unwrap()
    else {
        panic!()
    };
    assert_eq!((parallelism, reduce), (1, None), "parallelism defaults to 1, reduce to none");
    assert_eq!(
        parse(json!({"parallel": [{"log": "a"}, {"get": "k"}]})).unwrap(),
        Step::Parallel(vec![Step::Log(Template("a".into())), Step::Get("k".into())])
    );
    assert_eq!(
        parse(json!({"sleep": {"seconds": 30, "minutes": 1, "hours": 1, "days": 1}})).unwrap(),
        Step::Sleep { seconds: 30.0 + 60.0 + 3600.0 + 86400.0 }
    );
    assert_eq!(
        parse(json!({"wait_for_input": {"info": {"message": "'go?'"}}})).unwrap(),
        Step::WaitForInput { info: vec![("message".into(), e(json!("'go?'")))] }
    );
    assert_eq!(parse(json!({"wait_for_input": {}})).unwrap(), Step::WaitForInput { info: vec![] });
    assert_eq!(
        parse(json!({"return": {"ok": true}})).unwrap(),
        Step::Return(vec![("ok".into(), e(json!(true)))])
    );
    assert_eq!(
        parse(json!({"workflow": "sub", "arguments": {"n": "_.n"}})).unwrap(),
        Step::Yield { workflow: "sub".into(), arguments: vec![("n".into(), e(json!("_.n")))] }
    );
    assert_eq!(parse(json!({"log": "{{ _ }}"})).unwrap(), Step::Log(Template("{{ _ }}".into())));
    assert_eq!(parse(json!({"get": "count"})).unwrap(), Step::Get("count".into()));
    assert_eq!(
        parse(json!({"set": {"count": "1"}})).unwrap(),
        Step::Set(vec![("count".into(), e(json!("1")))])
    );
    assert_eq!(
        parse(json!({"error": "$ 'bad: ' ~ _.why"})).unwrap(),
        Step::Error(Template("$ 'bad: ' ~ _.why".into()))
    );
    // Keys that are not the kind's are kept as sent, and ignored.
    assert!(parse(json!({"log": "x", "label": "first"})).is_ok());
}

#[test]
fn a_step_has_exactly_one_kind() {
    let (place, kind, msg) = refused(json!({"label": "nothing"}));
    assert_eq!((place.as_str(), kind.as_str()), ("main[0]", "value_error"));
    assert!(msg.contains("(found: none)"), "{msg}");
    let (_, _, msg) = refused(json!({"prompt": "a", "log": "b"}));
    assert!(msg.contains("(found: prompt, log)"), "{msg}");
    let (_, _, msg) = refused(json!({"tool": "a", "tool_call": "b"}));
    assert!(msg.contains("(found: tool_call, tool)"), "{msg}");
}

#[test]
fn an_expression_that_does_not_compile_is_refused_where_it_is() {
    let (place, kind, msg) = refused(json!({"evaluate": {"x": "_.a +"}}));
    assert_eq!((place.as_str(), kind.as_str()), ("main[0].evaluate.x", "value_error"));
    assert!(msg.starts_with("the expression does not compile: "), "{msg}");
    assert_eq!(refused(json!({"evaluate": {"x": "$ (("}})).0, "main[0].evaluate.x");
    assert_eq!(
        refused(json!({"evaluate": {"x": "$ "}})).2,
        "the expression does not compile: the expression is empty"
    );
    // A text where an expression goes: the message says how to write one.
    let (_, _, msg) = refused(json!({"wait_for_input": {"info": {"message": "go?"}}}));
    assert!(msg.ends_with("(a text here is written quoted, e.g. \"'hello'\")"), "{msg}");
    // In a literal, only `$ ` strings are expressions.
    assert!(parse(json!({"evaluate": {"x": {"a": "not (( an expression", "b": ["(("]}}})).is_ok());
    assert_eq!(refused(json!({"evaluate": {"x": {"a": ["$ ((" ]}}})).0, "main[0].evaluate.x.a[0]");
    assert_eq!(refused(json!({"if": "((", "then": {"log": "x"}})).0, "main[0].if");
    assert_eq!(
        refused(json!({"switch": [{"case": "((", "then": {"log": "x"}}]})).0,
        "main[0].switch[0].case"
    );
    assert_eq!(refused(json!({"foreach": {"in": "((", "do": {"log": "x"}}})).0, "main[0].foreach.in");
    assert_eq!(refused(json!({"over": "((", "map": {"log": "x"}})).0, "main[0].over");
    assert_eq!(refused(json!({"over": "[]", "map": {"log": "x"}, "reduce": "(("})).0, "main[0].reduce");
    assert_eq!(refused(json!({"tool": "t", "arguments": {"a": "(("}})).0, "main[0].arguments.a");
    assert_eq!(refused(json!({"workflow": "w", "arguments": {"a": "(("}})).0, "main[0].arguments.a");
    assert_eq!(refused(json!({"wait_for_input": {"info": {"a": "(("}}})).0, "main[0].wait_for_input.info.a");
    assert_eq!(refused(json!({"return": {"a": "(("}})).0, "main[0].return.a");
    assert_eq!(refused(json!({"set": {"a": "(("}})).0, "main[0].set.a");
    assert_eq!(refused(json!({"prompt": "$ (("})).0, "main[0].prompt");
}

#[test]
fn a_template_that_does_not_compile_is_refused_where_it_is() {
    let (place, kind, msg) = refused(json!({"log": "{{ x "}));
    assert_eq!((place.as_str(), kind.as_str()), ("main[0].log", "value_error"));
    assert!(msg.starts_with("the template does not compile: "), "{msg}");
    assert_eq!(refused(json!({"error": "{% if %}"})).0, "main[0].error");
    assert_eq!(refused(json!({"prompt": "{{"})).0, "main[0].prompt");
    assert_eq!(
        refused(json!({"prompt": [{"role": "user", "content": "{{"}]})).0,
        "main[0].prompt[0].content"
    );
    // A `$ ` template is an expression.
    assert!(refused(json!({"log": "$ (("})).2.starts_with("the expression does not compile: "));
    assert!(parse(json!({"log": "$ _.a ~ 'b'"})).is_ok());
}

#[test]
fn shapes_that_are_wrong_are_refused_where_they_are() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"evaluate": "x"}), "main[0].evaluate", "dict_type"),
        (json!({"return": [1]}), "main[0].return", "dict_type"),
        (json!({"set": 1}), "main[0].set", "dict_type"),
        (json!({"tool": 1}), "main[0].tool", "string_type"),
        (json!({"tool_call": ""}), "main[0].tool_call", "string_too_short"),
        (json!({"tool": "t", "arguments": "x"}), "main[0].arguments", "dict_type"),
        (json!({"get": {}}), "main[0].get", "string_type"),
        (json!({"log": 1}), "main[0].log", "string_type"),
        (json!({"error": null}), "main[0].error", "string_type"),
        (json!({"if": "x"}), "main[0].then", "missing"),
        (json!({"if": "x", "then": "log"}), "main[0].then", "value_error"),
        (json!({"if": "x", "then": []}), "main[0].then", "too_short"),
        (
            json!({"if": "x", "then": {"log": "a"}, "else": [{"log": "a"}, 3]}),
            "main[0].else[1]",
            "value_error",
        ),
        (json!({"if": "x", "then": {"nope": 1}}), "main[0].then", "value_error"),
        (json!({"switch": {}}), "main[0].switch", "list_type"),
        (json!({"switch": []}), "main[0].switch", "too_short"),
        (json!({"switch": [{"then": {"log": "a"}}]}), "main[0].switch[0].case", "missing"),
        (json!({"switch": [{"case": "_"}]}), "main[0].switch[0].then", "missing"),
        (json!({"switch": [{"case": "_", "then": {"x": 1}}]}), "main[0].switch[0].then", "value_error"),
        (json!({"foreach": []}), "main[0].foreach", "dict_type"),
        (json!({"foreach": {"do": {"log": "a"}}}), "main[0].foreach.in", "missing"),
        (json!({"foreach": {"in": "x"}}), "main[0].foreach.do", "missing"),
        (json!({"foreach": {"in": "x", "do": {"sleeps": 1}}}), "main[0].foreach.do", "value_error"),
        (json!({"over": "x"}), "main[0].map", "missing"),
        (json!({"over": "x", "map": [{"log": "a"}]}), "main[0].map", "dict_type"),
        (json!({"over": "x", "map": {"bad": 1}}), "main[0].map", "value_error"),
        (json!({"over": "x", "map": {"log": "a"}, "parallelism": 0}), "main[0].parallelism", "value_error"),
        (json!({"over": "x", "map": {"log": "a"}, "parallelism": 101}), "main[0].parallelism", "value_error"),
        (json!({"over": "x", "map": {"log": "a"}, "parallelism": 1.5}), "main[0].parallelism", "value_error"),
        (json!({"parallel": {}}), "main[0].parallel", "list_type"),
        (json!({"parallel": []}), "main[0].parallel", "value_error"),
        (json!({"parallel": vec![json!({"log": "a"}); 101]}), "main[0].parallel", "value_error"),
        (json!({"parallel": [{"log": "a"}, "b"]}), "main[0].parallel[1]", "dict_type"),
        (json!({"parallel": [{"log": "a"}, {"b": 1}]}), "main[0].parallel[1]", "value_error"),
        (json!({"sleep": 5}), "main[0].sleep", "dict_type"),
        (json!({"sleep": {}}), "main[0].sleep", "value_error"),
        (json!({"sleep": {"seconds": 0}}), "main[0].sleep", "value_error"),
        (json!({"sleep": {"days": 31}}), "main[0].sleep", "value_error"),
        (json!({"sleep": {"days": 30, "seconds": 1}}), "main[0].sleep", "value_error"),
        (json!({"sleep": {"seconds": 1, "weeks": 1}}), "main[0].sleep.weeks", "value_error"),
        (json!({"sleep": {"seconds": 1, "minutes": -1}}), "main[0].sleep.minutes", "value_error"),
        (json!({"sleep": {"seconds": "1"}}), "main[0].sleep.seconds", "value_error"),
        (json!({"wait_for_input": "x"}), "main[0].wait_for_input", "dict_type"),
        (json!({"wait_for_input": {"info": []}}), "main[0].wait_for_input.info", "dict_type"),
        (json!({"workflow": 3}), "main[0].workflow", "string_type"),
        (json!({"prompt": 3}), "main[0].prompt", "value_error"),
        (json!({"prompt": ["hi"]}), "main[0].prompt[0]", "dict_type"),
        (json!({"prompt": [{"content": "hi"}]}), "main[0].prompt[0].role", "missing"),
        (json!({"prompt": [{"role": "user"}]}), "main[0].prompt[0].content", "missing"),
        (json!({"prompt": [{"role": "user", "content": 1}]}), "main[0].prompt[0].content", "string_type"),
        (json!({"prompt": "x", "tools": "some"}), "main[0].tools", "value_error"),
        (json!({"prompt": "x", "tools": ["a", 1]}), "main[0].tools", "value_error"),
        (json!({"prompt": "x", "unwrap": "yes"}), "main[0].unwrap", "bool_type"),
        (json!({"prompt": "x", "settings": []}), "main[0].settings", "dict_type"),
    ];
    for (step, place, kind) in cases {
        let (got_place, got_kind, msg) = refused(step.clone());
        assert_eq!((got_place.as_str(), got_kind.as_str()), (place, kind), "{step}: {msg}");
    }
    assert!(parse(json!({"sleep": {"days": 30}})).is_ok(), "30 days is the longest sleep");
    assert!(parse(json!({"sleep": {"seconds": 0.5}})).is_ok());
    assert!(parse(json!({"parallel": vec![json!({"log": "a"}); 100]})).is_ok(), "100 branches at most");
}

#[test]
fn a_sleep_past_the_bound_names_its_length_readably() {
    let (_, _, msg) = refused(json!({"sleep": {"seconds": 1e308}}));
    assert_eq!(msg, "a sleep lasts more than 0 s and at most 30 days, got 1e308 s");
    let (_, _, msg) = refused(json!({"sleep": {"days": 1e308}}));
    assert_eq!(
        msg,
        "a sleep lasts more than 0 s and at most 30 days, got more seconds than a number can hold"
    );
    let (_, _, msg) = refused(json!({"sleep": {"days": 31}}));
    assert_eq!(msg, "a sleep lasts more than 0 s and at most 30 days, got 31 days (2678400 s)");
    assert_eq!(readable_seconds(1e-300), "1e-300 s");
    assert_eq!(readable_seconds(1.5), "1.5 s");
    assert_eq!(readable_seconds(0.0), "0 s");
}

#[test]
fn every_issue_of_a_step_is_reported_not_just_the_first() {
    let issues =
        parse(json!({"if": "((", "then": [{"log": "{{"}, {"nope": 1}], "else": {"evaluate": {"a": "))"}}}))
            .unwrap_err();
    let places: Vec<&str> = issues.iter().map(|(p, ..)| p.as_str()).collect();
    assert_eq!(places, ["main[0].if", "main[0].then[0].log", "main[0].then[1]", "main[0].else.evaluate.a"]);
}

fn steps(v: Value) -> Vec<JsonObject> {
    v.as_array().unwrap().iter().map(|s| s.as_object().unwrap().clone()).collect()
}

#[test]
fn workflows_parse_main_and_the_named_ones_and_yields_name_one_of_them() {
    let main = steps(json!([{"workflow": "double", "arguments": {"n": "_.n"}}, {"workflow": "main"}]));
    let named = BTreeMap::from([("double".to_string(), steps(json!([{"return": {"n": "_.n * 2"}}])))]);
    let parsed = parse_workflows(&main, &named).unwrap();
    assert_eq!(parsed.workflows.keys().collect::<Vec<_>>(), ["double", "main"]);
    assert_eq!(parsed.workflows["double"], vec![Step::Return(vec![("n".into(), e(json!("_.n * 2")))])]);

    let main = steps(json!([{"log": "x"}, {"if": "1", "then": {"workflow": "missing"}}]));
    let err = parse_workflows(&main, &named).unwrap_err();
    assert_eq!(
        err,
        "main[1].then.workflow: the task has no workflow named 'missing' (its workflows: double, main)"
    );
    let named = BTreeMap::from([("sub".to_string(), steps(json!([{"evaluate": {"x": "(("}}])))]);
    let err = parse_workflows(&steps(json!([{"log": "x"}])), &named).unwrap_err();
    assert!(err.starts_with("workflows.sub[0].evaluate.x: the expression does not compile: "), "{err}");
}

#[test]
fn a_lone_step_does_not_check_its_yield_against_workflows() {
    assert!(parse(json!({"workflow": "anything"})).is_ok());
}

/// A task body through the request's own validation: the task, or `(place, kind)` of each issue.
fn task(body: Value) -> Result<crate::types::PutTaskRequest, Vec<(String, String)>> {
    crate::validate::validate_value::<crate::types::PutTaskRequest>(Source::Body, &body)
        .map_err(|issues| issues.into_iter().map(|i| (place(&i.loc[1..]), i.kind)).collect())
}

#[test]
fn a_task_gathers_its_sub_workflows_from_workflows_and_from_top_level_lists_of_steps() {
    let req = task(json!({
        "name": "t",
        "main": [{"workflow": "double"}, {"workflow": "shout"}],
        "workflows": {"double": [{"return": {"n": "_.n * 2"}}]},
        "shout": [{"log": "{{ _ | upper }}"}],
        "label": "not a workflow",
        "notes": ["not steps"],
    }))
    .unwrap();
    assert_eq!(req.all_workflows().keys().collect::<Vec<_>>(), ["double", "shout"]);
    assert_eq!(
        task(json!({"name": "t", "main": [{"workflow": "nope"}]})).unwrap_err(),
        [("main[0].workflow".to_string(), "value_error".to_string())]
    );
}

#[test]
fn a_sub_workflow_is_checked_as_main_is_and_named_as_the_rules_say() {
    let err = |body: Value| task(body).unwrap_err();
    assert_eq!(
        err(json!({"name": "t", "main": [{"log": "x"}], "sub": [{"log": "{{"}]})),
        [("sub[0].log".to_string(), "value_error".to_string())]
    );
    assert_eq!(
        err(json!({"name": "t", "main": [{"log": "x"}], "workflows": {"sub": [{"nope": 1}]}})),
        [("workflows.sub[0]".to_string(), "value_error".to_string())]
    );
    for name in ["main", "tools", "a.b", "a[0]"] {
        let issues = err(json!({"name": "t", "main": [{"log": "x"}], "workflows": {name: [{"log": "x"}]}}));
        assert_eq!(issues, [(format!("workflows.{name}"), "value_error".to_string())], "{name}");
    }
    assert_eq!(
        err(json!({"name": "t", "main": [{"log": "x"}], "workflows": {"sub": []}})),
        [("workflows.sub".to_string(), "too_short".to_string())]
    );
    let twice = err(
        json!({"name": "t", "main": [{"log": "x"}], "workflows": {"sub": [{"log": "a"}]}, "sub": [{"log": "b"}]}),
    );
    assert_eq!(twice, [("sub".to_string(), "value_error".to_string())]);
}
