//! TEMPORARY minimal evaluator (helper B's real one replaces this file).
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::api::types::{Expr, Template};

#[derive(Clone)]
pub struct Context {
    pub last: Arc<Value>,
    pub input: Arc<Value>,
    pub outputs: Arc<Value>,
    pub state: Arc<Value>,
    pub execution: Arc<Value>,
    pub agent: Arc<Value>,
    pub task: Arc<Value>,
    pub results: Option<Arc<Value>>,
}

pub struct Evaluator {
    env: minijinja::Environment<'static>,
}

impl Context {
    fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("_".into(), (*self.last).clone());
        m.insert("input".into(), (*self.input).clone());
        m.insert("inputs".into(), Value::Array(vec![(*self.input).clone()]));
        m.insert("outputs".into(), (*self.outputs).clone());
        m.insert("state".into(), (*self.state).clone());
        m.insert("execution".into(), (*self.execution).clone());
        if let Some(r) = &self.results {
            m.insert("results".into(), (**r).clone());
        }
        Value::Object(m)
    }
}

impl Evaluator {
    pub fn new(fuel: u64) -> Self {
        let mut env = minijinja::Environment::new();
        env.set_fuel(Some(fuel));
        env.add_function("len", |v: minijinja::Value| v.len().unwrap_or(0));
        Evaluator { env }
    }

    fn expr(&self, src: &str, ctx: &Context) -> Result<Value, String> {
        let src = src.strip_prefix("$ ").unwrap_or(src);
        let e = self.env.compile_expression(src).map_err(|e| e.to_string())?;
        let v =
            e.eval(minijinja::Value::from(minijinja::value::Serde(ctx.json()))).map_err(|e| e.to_string())?;
        serde_json::to_value(&v).map_err(|e| e.to_string())
    }

    fn literal(&self, v: &Value, ctx: &Context) -> Result<Value, String> {
        Ok(match v {
            Value::String(s) if s.starts_with("$ ") => self.expr(s, ctx)?,
            Value::Array(a) => {
                Value::Array(a.iter().map(|x| self.literal(x, ctx)).collect::<Result<_, _>>()?)
            }
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| Ok((k.clone(), self.literal(x, ctx)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }

    pub fn eval(&self, expr: &Expr, ctx: &Context) -> Result<Value, String> {
        match &expr.0 {
            Value::String(s) => self.expr(s, ctx),
            other => self.literal(other, ctx),
        }
    }

    pub fn eval_object(&self, pairs: &[(String, Expr)], ctx: &Context) -> Result<Value, String> {
        let mut m = Map::new();
        for (k, e) in pairs {
            m.insert(k.clone(), self.eval(e, ctx)?);
        }
        Ok(Value::Object(m))
    }

    pub fn render(&self, t: &Template, ctx: &Context) -> Result<Value, String> {
        if t.0.starts_with("$ ") {
            return self.expr(&t.0, ctx);
        }
        self.env
            .render_str(&t.0, minijinja::Value::from(minijinja::value::Serde(ctx.json())))
            .map(Value::String)
            .map_err(|e| e.to_string())
    }

    pub fn render_text(&self, t: &Template, ctx: &Context) -> Result<String, String> {
        Ok(match self.render(t, ctx)? {
            Value::String(s) => s,
            other => other.to_string(),
        })
    }
}
