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
    Evaluator::new(crate::exec::expr::Bounds::with_fuel(100_000))
        .eval(&Expr(Json::String(src.into())), &ctx())
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
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(1000));
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
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(1000));
    assert_eq!(ev.eval(&Expr(json!("results + [_]")), &c).unwrap(), json!([1, 2, 4]));
}

#[test]
fn literals_with_expressions_inside() {
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(1000));
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
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(10_000));
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
    let tiny = Evaluator::new(crate::exec::expr::Bounds::with_fuel(3));
    let e = tiny.eval(&Expr(json!("_.x + 1 + 2 + 3 + 4")), &ctx()).expect_err("too much work for 3 fuel");
    assert!(e.contains("ran out of fuel"), "{e}");
    assert!(e.contains("limit of 3 steps") && e.contains("executions.expression_fuel"), "{e}");
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(1_000));
    let t = Template("{% for i in range(100000) %}{% endfor %}".into());
    let e = ev.render(&t, &ctx()).unwrap_err();
    assert!(e.contains("executions.expression_fuel"), "{e}");
}

#[test]
fn templates() {
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(100_000));
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
    let ev = Evaluator::new(crate::exec::expr::Bounds::with_fuel(100_000));
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

fn bounded(max_bytes: usize, timeout_ms: u64) -> Evaluator {
    Evaluator::new(crate::exec::expr::Bounds {
        fuel: 100_000,
        max_bytes,
        timeout: std::time::Duration::from_millis(timeout_ms),
    })
}

/// Each of these would ask for gigabytes to terabytes in one instruction (or
/// a few): every one fails before allocating, naming the setting.
#[test]
fn values_that_would_pass_the_byte_bound_fail_before_they_are_built() {
    let ev = bounded(8 << 20, 10_000);
    let bombs = [
        "'a\\nb' | indent(10**12)",
        "('a\\n' * 1000) | indent(10**9)",
        "'x' * 10**8",
        "('x' * 10**6) | replace('x', 'x' * 100)",
        "[('x' * 10**6)] * 100",
        "[1] * 10**8",
        "('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6) ~ ('x' * 10**6)",
        "', '.join([('x' * 10**6)] * 100)",
        "','.join([('x' * 10**6)] * 100)",
        "json_dumps([('x' * 10**6)] * 100)",
        "str([('x' * 10**6)] * 100)",
        "'%0999999999d' | format(1)",
        "(('x' * 10**6) | list) | length",
        "('x' * 10**6).upper() ~ ('x' * 10**6).upper() ~ ('x' * 10**6).upper()",
        "('ab' * 10**6).split('b') | length",
        "[('x' * 10**6), ('y' * 10**6), ('z' * 10**6), ('w' * 10**6), ('v' * 10**6), ('u' * 10**6), ('t' * 10**6), ('s' * 10**6), ('r' * 10**6)]",
    ];
    for src in bombs {
        let started = Instant::now();
        let e = ev.eval(&Expr(json!(src)), &ctx()).expect_err(src);
        assert!(
            e.contains("would build more than the limit of 8388608 bytes (executions.expression_max_bytes)"),
            "{src}: {e}"
        );
        assert!(started.elapsed().as_secs() < 5, "{src} took {:?}", started.elapsed());
    }
    // Templates too: text captured by `set` blocks and doubled in a loop.
    let doubling = "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    let e = ev.render(&Template(doubling.into()), &ctx()).unwrap_err();
    assert!(e.contains("executions.expression_max_bytes"), "{e}");
    let captured =
        "{% set big %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}{{ big | length }}";
    let e = ev.render(&Template(captured.into()), &ctx()).unwrap_err();
    assert!(e.contains("executions.expression_max_bytes"), "{e}");
    // What stays within the bound works as without it.
    assert_eq!(ev.eval(&Expr(json!("('x' * 1000) | length")), &ctx()).unwrap(), json!(1000));
    assert_eq!(ev.eval(&Expr(json!("'a\\nb' | indent(2)")), &ctx()).unwrap(), json!("a\n  b"));
}

#[test]
fn a_slow_evaluation_stops_at_its_time_bound() {
    let ev = bounded(64 << 20, 50);
    let scan =
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}";
    let started = Instant::now();
    let e = ev.render(&Template(scan.into()), &ctx()).unwrap_err();
    assert!(e.contains("ran longer than the limit of 50 ms (executions.expression_timeout_ms)"), "{e}");
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}

/// The bounds hold random compositions of the operations that grow
/// values, in a child process whose address space is limited: an evaluation
/// that allocated past the bound would abort the child ("memory allocation of
/// N bytes failed"), failing this test.
#[test]
fn random_growing_expressions_stay_within_a_memory_bound() {
    const CHILD: &str = "AGENT_PLATFORM_EXPR_FUZZ_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return fuzz_random_expressions();
    }
    if std::process::Command::new("prlimit").arg("--version").output().is_err() {
        panic!("prlimit (util-linux) is needed to limit the child's address space");
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new("prlimit")
        .arg(format!("--as={}", 3u64 << 30))
        .arg("--")
        .arg(exe)
        .args([
            "exec::expr::tests::random_growing_expressions_stay_within_a_memory_bound",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the child runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed ({:?}):\n{text}", out.status);
    assert!(text.contains("random expressions evaluated"), "{text}");
}

fn fuzz_random_expressions() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(40);
    // The default bounds, but for a smaller budget of bytes (the bound is
    // the same code; a debug build takes a while to build 64 MiB 300 times).
    let ev = bounded(8 << 20, 500);
    let (mut failed, mut bounded) = (0, 0);
    let rounds = 200;
    for _ in 0..rounds {
        let src = random_expr(&mut rng, 3);
        let started = Instant::now();
        match ev.eval(&Expr(json!(src)), &ctx()) {
            Ok(v) => assert!(serde_json::to_vec(&v).unwrap().len() <= 8 << 20, "{src}"),
            Err(e) => {
                failed += 1;
                if e.contains("executions.expression_max_bytes")
                    || e.contains("executions.expression_timeout_ms")
                {
                    bounded += 1;
                }
            }
        }
        assert!(started.elapsed().as_secs() < 10, "{src} took {:?}", started.elapsed());
    }
    println!("{rounds} random expressions evaluated: {failed} failed, {bounded} of them at a bound");
    assert!(bounded > rounds / 10, "the generator should often pass the bound: {bounded}");
}

/// A random expression whose value is a string, built from operations that grow values.
fn random_expr(rng: &mut impl rand::Rng, depth: u32) -> String {
    use rand::Rng;
    fn n(rng: &mut impl Rng) -> String {
        10u64.pow(rng.random_range(0..=12)).to_string()
    }
    if depth == 0 {
        return format!("('ab\\n' * {})", 10u64.pow(rng.random_range(0..=7)));
    }
    let inner = random_expr(rng, depth - 1);
    match rng.random_range(0..14) {
        0 => format!("({inner} * {})", n(rng)),
        1 => format!("({inner} | indent({}))", n(rng)),
        2 => format!("({inner} | replace('a', {}))", random_expr(rng, depth - 1)),
        3 => format!("({inner} ~ {inner})"),
        4 => format!("(', '.join([{inner}] * {}))", n(rng)),
        5 => format!("json_dumps([{inner}] * {})", n(rng)),
        6 => format!("str([{inner}, {inner}] * {})", n(rng)),
        7 => format!("({inner} | upper)"),
        8 => format!("({inner}.replace('b', {inner}))"),
        9 => format!("(({inner} | list) | join('-'))"),
        10 => format!("('%0{}d' | format(1))", n(rng)),
        11 => format!("({inner} + {inner})"),
        12 => format!("(({inner}).split('a') | join({inner}))"),
        _ => format!("({inner} | title | trim)"),
    }
}
