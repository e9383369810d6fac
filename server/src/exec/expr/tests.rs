use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value as Json, json};

use super::{Context, Evaluator};
use crate::api::types::{Expr, Template};

fn ctx_with(last: Json) -> Context {
    Context {
        last: Arc::new(last),
        input: Arc::new(json!({"topic": "cats", "n": 3})),
        outputs: Arc::new(json!([{"a": 1}, {"a": 2}])),
        state: Arc::new(json!({"count": 7})),
        execution: Arc::new(json!({"id": "e1", "task_id": "t1"})),
        agent: Arc::new(json!({"name": "Ada", "model": "m"})),
        task: Arc::new(json!({"name": "demo", "main": []})),
        results: None,
    }
}

fn ctx() -> Context {
    ctx_with(json!({
        "x": 2,
        "name": "Bob",
        "items": [{"a": 1, "b": "p"}, {"a": 5, "b": "q"}],
        "k": "v",
        "f": 1.5,
        "nested": {"deep": {"deeper": [10, 20, 30]}}
    }))
}

fn eval(src: &str) -> Result<Json, String> {
    Evaluator::new(100_000).eval(&Expr(Json::String(src.into())), &ctx())
}

fn ok(src: &str) -> Json {
    eval(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

#[test]
fn julep_expressions() {
    assert_eq!(ok("_.x"), json!(2));
    assert_eq!(ok("$ _.x"), json!(2));
    assert_eq!(ok("_.x + 1"), json!(3));
    assert_eq!(ok("_.f * 2"), json!(3.0));
    assert_eq!(ok("inputs[0].topic"), json!("cats"));
    assert_eq!(ok("input.topic"), json!("cats"));
    assert_eq!(ok("len(_)"), json!(6));
    assert_eq!(ok("len(_.items)"), json!(2));
    assert_eq!(ok("_['k']"), json!("v"));
    assert_eq!(ok("_.x > 1 and _.x <= 2"), json!(true));
    assert_eq!(ok("_.name == 'Bob'"), json!(true));
    assert_eq!(ok("'yes' if _.x > 1 else 'no'"), json!("yes"));
    assert_eq!(ok("[1, _.x, 'a']"), json!([1, 2, "a"]));
    assert_eq!(ok("{'a': _.x, 'b': [_.k]}"), json!({"a": 2, "b": ["v"]}));
    assert_eq!(ok("_.items | map(attribute='a') | list"), json!([1, 5]));
    assert_eq!(ok("_.items[-1].b"), json!("q"));
    assert_eq!(ok("_.nested.deep.deeper[1]"), json!(20));
    assert_eq!(ok("outputs[1].a"), json!(2));
    assert_eq!(ok("state.count"), json!(7));
    assert_eq!(ok("execution.id ~ '/' ~ execution.task_id"), json!("e1/t1"));
    assert_eq!(ok("agent.name"), json!("Ada"));
    assert_eq!(ok("task.name"), json!("demo"));
    assert_eq!(ok("'cats' in input.topic"), json!(true));
    assert_eq!(ok("'x' in _"), json!(true));
    assert_eq!(ok("_.items | selectattr('a', 'gt', 2) | map(attribute='b') | list"), json!(["q"]));
    assert_eq!(ok("_.name | upper"), json!("BOB"));
    assert_eq!(ok("none"), Json::Null);
    assert_eq!(ok("True and not False"), json!(true));
}

#[test]
fn whole_values_come_back_as_they_were() {
    assert_eq!(ok("_"), (*ctx().last).clone());
    assert_eq!(ok("_.items"), json!([{"a": 1, "b": "p"}, {"a": 5, "b": "q"}]));
    assert_eq!(ok("inputs"), json!([{"topic": "cats", "n": 3}]));
    assert_eq!(ok("outputs"), json!([{"a": 1}, {"a": 2}]));
    let big = json!(u64::MAX);
    let ev = Evaluator::new(1000);
    assert_eq!(ev.eval(&Expr(json!("_")), &ctx_with(big.clone())).unwrap(), big);
    assert_eq!(ev.eval(&Expr(json!("_")), &ctx_with(json!(-3))).unwrap(), json!(-3));
}

#[test]
fn missing_values_are_null() {
    assert_eq!(ok("_.missing"), Json::Null);
    assert_eq!(ok("_.missing.deeper"), Json::Null);
    assert_eq!(ok("_.items[7]"), Json::Null);
    assert_eq!(ok("nothing_here"), Json::Null);
    assert_eq!(ok("results"), Json::Null);
    assert_eq!(ok("_.missing is defined"), json!(false));
    assert_eq!(ok("_.missing or 'default'"), json!("default"));
}

#[test]
fn results_in_reduce() {
    let mut c = ctx_with(json!(4));
    c.results = Some(Arc::new(json!([1, 2])));
    let ev = Evaluator::new(1000);
    assert_eq!(ev.eval(&Expr(json!("results + [_]")), &c).unwrap(), json!([1, 2, 4]));
}

#[test]
fn literals_with_expressions_inside() {
    let ev = Evaluator::new(1000);
    let expr = Expr(
        json!({"plain": "just text", "e": "$ _.x * 10", "list": [1, "$ _.k", {"n": "$ len(_.items)"}], "t": true}),
    );
    assert_eq!(
        ev.eval(&expr, &ctx()).unwrap(),
        json!({"plain": "just text", "e": 20, "list": [1, "v", {"n": 2}], "t": true})
    );
    assert_eq!(ev.eval(&Expr(json!(5)), &ctx()).unwrap(), json!(5));
    let pairs = vec![("b".to_string(), Expr(json!("_.x"))), ("a".to_string(), Expr(json!([1])))];
    assert_eq!(ev.eval_object(&pairs, &ctx()).unwrap(), json!({"b": 2, "a": [1]}));
}

#[test]
fn helper_functions() {
    assert_eq!(ok("str(_.x) ~ '!'"), json!("2!"));
    assert_eq!(ok("str(_.items[0])"), json!(r#"{"a":1,"b":"p"}"#));
    assert_eq!(ok("int('42') + int(3.9) + int(true)"), json!(46));
    assert_eq!(ok("float('1.5') + float(1)"), json!(2.5));
    assert_eq!(ok("[bool(0), bool('a'), bool([])]"), json!([false, true, false]));
    assert_eq!(ok("range(3) | list"), json!([0, 1, 2]));
    assert_eq!(ok("list(range(1, 7, 2))"), json!([1, 3, 5]));
    assert_eq!(ok("[min([3, 1, 2]), max(3, 9, 4), min(_.nested.deep.deeper)]"), json!([1, 9, 10]));
    assert_eq!(ok("[sum([1, 2, 3]), sum([1, 2.5]), sum([1], 10)]"), json!([6, 3.5, 11]));
    assert_eq!(ok("sorted([3, 1, 2])"), json!([1, 2, 3]));
    assert_eq!(ok("sorted(['b', 'a'], reverse=true)"), json!(["b", "a"]));
    assert_eq!(ok("list('ab')"), json!(["a", "b"]));
    assert_eq!(ok("list(_.items[0])"), json!(["a", "b"]));
    assert_eq!(ok("dict(a=1, b=_.x)"), json!({"a": 1, "b": 2}));
    assert_eq!(ok("dict([['a', 1], ['b', 2]])"), json!({"a": 1, "b": 2}));
    assert_eq!(ok("dict(_.items[0], c=3)"), json!({"a": 1, "b": "p", "c": 3}));
    assert_eq!(ok("keys(_.items[0])"), json!(["a", "b"]));
    assert_eq!(ok("values(_.items[1])"), json!([5, "q"]));
    assert_eq!(ok("json_dumps(_.items[0])"), json!(r#"{"a":1,"b":"p"}"#));
    assert_eq!(ok(r#"json_loads('{"z": [1, 2]}').z[1]"#), json!(2));
    assert_eq!(ok("len('héllo')"), json!(5));
}

#[test]
fn python_methods() {
    assert_eq!(ok("_.name.upper() ~ _.name.lower()"), json!("BOBbob"));
    assert_eq!(ok("'  a b  '.strip()"), json!("a b"));
    assert_eq!(ok("'xxaxx'.strip('x')"), json!("a"));
    assert_eq!(ok("'a,b,,c'.split(',')"), json!(["a", "b", "", "c"]));
    assert_eq!(ok("'a b  c'.split()"), json!(["a", "b", "c"]));
    assert_eq!(ok("'a,b,c'.split(',', 1)"), json!(["a", "b,c"]));
    assert_eq!(ok("', '.join(_.items | map(attribute='b'))"), json!("p, q"));
    assert_eq!(ok("'-'.join([1, 2])"), json!("1-2"));
    assert_eq!(ok("'hello world'.title()"), json!("Hello World"));
    assert_eq!(ok("'aXb'.replace('X', '-')"), json!("a-b"));
    assert_eq!(ok("[_.name.startswith('B'), _.name.endswith(('x', 'b'))]"), json!([true, true]));
    assert_eq!(ok("['héllo'.find('l'), 'abc'.find('z'), 'aaa'.count('a')]"), json!([2, -1, 3]));
    assert_eq!(ok("[_.get('x'), _.get('nope'), _.get('nope', 5)]"), json!([2, null, 5]));
    assert_eq!(ok("_.items[0].keys()"), json!(["a", "b"]));
    assert_eq!(ok("_.items[0].values()"), json!([1, "p"]));
    assert_eq!(ok("_.items[0].items()"), json!([["a", 1], ["b", "p"]]));
    assert_eq!(ok("[[1, 2, 1].count(1), [1, 2].index(2)]"), json!([2, 1]));
    assert_eq!(ok("'12'.isdigit() and not '1a'.isdigit()"), json!(true));
    let e = eval("_.name.nosuch()").unwrap_err();
    assert!(e.contains("unknown method"), "{e}");
}

#[test]
fn comparisons_of_context_values_and_literals() {
    assert_eq!(ok("_.items[0] == {'a': 1, 'b': 'p'}"), json!(true));
    assert_eq!(ok("_.nested.deep.deeper == [10, 20, 30]"), json!(true));
    assert_eq!(ok("20 in _.nested.deep.deeper"), json!(true));
    assert_eq!(ok("_.items | first"), json!({"a": 1, "b": "p"}));
    assert_eq!(ok("_.items[0] | tojson"), json!(r#"{"a":1,"b":"p"}"#));
    assert_eq!(ok("_.items[0] | items | list"), json!([["a", 1], ["b", "p"]]));
    assert_eq!(
        ok("_.x is number and _.name is string and _.items is sequence and _ is mapping"),
        json!(true)
    );
    let ev = Evaluator::new(10_000);
    let t = Template("{% for k, v in _.items[1] | items %}{{ k }}={{ v }};{% endfor %}".into());
    assert_eq!(ev.render(&t, &ctx()).unwrap(), json!("a=5;b=q;"));
}

#[test]
fn helper_errors_say_what_is_wrong() {
    let e = eval("int('abc')").unwrap_err();
    assert!(e.contains("int() cannot read \"abc\""), "{e}");
    let e = eval("len(5)").unwrap_err();
    assert!(e.contains("len()"), "{e}");
    let e = eval("min([])").unwrap_err();
    assert!(e.contains("empty"), "{e}");
    let e = eval("json_loads('{nope')").unwrap_err();
    assert!(e.contains("not JSON"), "{e}");
    let e = eval("range(1000000) | list").unwrap_err();
    assert!(e.contains("too many"), "{e}");
}

#[test]
fn compile_and_run_errors_name_the_expression() {
    let e = eval("_.x +").unwrap_err();
    assert!(e.starts_with("expression `_.x +` does not compile"), "{e}");
    let e = eval("_.x + 'a'").unwrap_err();
    assert!(e.contains("`_.x + 'a'` failed"), "{e}");
}

#[test]
fn fuel_stops_runaway_expressions() {
    // Expressions have no loops (filters run natively, over bounded data), so
    // only a tiny fuel stops one; templates' loops are where fuel matters.
    let tiny = Evaluator::new(3);
    let e = tiny.eval(&Expr(json!("_.x + 1 + 2 + 3 + 4")), &ctx()).expect_err("too much work for 3 fuel");
    assert!(e.contains("ran out of fuel"), "{e}");
    assert!(e.contains("limit of 3 steps") && e.contains("executions.expression_fuel"), "{e}");
    let ev = Evaluator::new(1_000);
    let t = Template("{% for i in range(100000) %}{% endfor %}".into());
    let e = ev.render(&t, &ctx()).unwrap_err();
    assert!(e.contains("executions.expression_fuel"), "{e}");
}

#[test]
fn templates() {
    let ev = Evaluator::new(100_000);
    let t = |s: &str| Template(s.to_string());
    assert_eq!(
        ev.render(&t("Write about {{ inputs[0].topic }}."), &ctx()).unwrap(),
        json!("Write about cats.")
    );
    assert_eq!(ev.render(&t("{% for i in _.items %}{{ i.b }}{% endfor %}"), &ctx()).unwrap(), json!("pq"));
    assert_eq!(ev.render(&t("[{{ _.missing.x }}]"), &ctx()).unwrap(), json!("[]"));
    // `$ ` makes it an expression: its value, not text.
    assert_eq!(ev.render(&t("$ _.items[0]"), &ctx()).unwrap(), json!({"a": 1, "b": "p"}));
    assert_eq!(ev.render_text(&t("$ _.items[0]"), &ctx()).unwrap(), r#"{"a":1,"b":"p"}"#);
    assert_eq!(ev.render_text(&t("$ _.name"), &ctx()).unwrap(), "Bob");
    assert_eq!(ev.render_text(&t("n={{ _.x }}"), &ctx()).unwrap(), "n=2");
    let e = ev.render(&t("{{ 'x' * 1000000 }}"), &ctx()).unwrap_err();
    assert!(e.contains("longer than"), "{e}");
    let e = ev.render(&t("{% if %}"), &ctx()).unwrap_err();
    assert!(e.contains("does not compile"), "{e}");
    assert!(ev.render(&t("{% include 'etc/passwd' %}"), &ctx()).is_err());
}

/// Not a benchmark: shows that an expression over a big context stays cheap
/// (the context is read lazily, never converted whole).
#[test]
fn eval_over_a_big_context_is_cheap() {
    let steps: Vec<Json> = (0..1000).map(|i| json!({"evaluate": {"x": format!("_.x + {i}")}})).collect();
    let outputs: Vec<Json> = (0..1000).map(|i| json!({"x": i, "text": "some output text"})).collect();
    let mut c = ctx_with(json!({"x": 1}));
    c.task = Arc::new(json!({"name": "big", "main": steps}));
    c.outputs = Arc::new(Json::Array(outputs));
    let ev = Evaluator::new(100_000);
    let exprs = [Expr(json!("_.x + 1")), Expr(json!("outputs[-1].x")), Expr(json!("len(outputs)"))];
    let rounds = 2_000;
    let started = Instant::now();
    for _ in 0..rounds {
        for e in &exprs {
            ev.eval(e, &c).unwrap();
        }
    }
    let per_eval = started.elapsed() / (rounds * exprs.len() as u32);
    println!("one eval over a 1,000-step task and 1,000 outputs: {per_eval:?}");
    assert_eq!(ev.eval(&exprs[1], &c).unwrap(), json!(999));
}
