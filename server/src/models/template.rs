//! System-prompt templates: Jinja (minijinja) syntax checking and rendering,
//! and the built-in default template.
//!
//! Rendering is sandboxed the way minijinja is: templates can only read the
//! context they are given (no file system, no `include`/`import`, no I/O).
//! Undefined variables are *chainable*: `{{ agent.missing.deeper }}` renders
//! as empty instead of failing. Runaway templates are stopped by fuel
//! ([`RENDER_FUEL`] instructions), an output cap ([`MAX_OUTPUT_BYTES`]), a
//! cap on every byte a render builds on the way ([`MAX_RENDER_BYTES`]:
//! strings, lists and captured text, counted before they are allocated, so
//! that `{{ 'x' | indent(10**12) }}` fails instead of asking for a terabyte)
//! and a deadline ([`MAX_RENDER_TIME`]).

use std::fmt;
use std::io;
use std::sync::LazyLock;
use std::time::Duration;

use minijinja::limits::{Exceeded, Limits};
use minijinja::value::Serde;
use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value};

/// Instructions one render may execute before it is stopped.
pub const RENDER_FUEL: u64 = 500_000;
/// Most bytes one render may produce.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Most bytes one render may build in all, its output included.
pub const MAX_RENDER_BYTES: usize = 32 << 20;
/// Longest one render may run.
pub const MAX_RENDER_TIME: Duration = Duration::from_millis(500);

/// The text of [`BLOCKS_SECTION`] (a macro, so that the default template can `concat!` it).
macro_rules! memory_blocks_section {
    () => {
        r#"{% if blocks %}

Memory blocks (kept in view in every conversation; edit those not read_only with your memory tools, if you have them):
{% for block in blocks %}

<{{ block.label }} chars="{{ block.chars }}/{{ block.limit }}"{% if block.read_only %} read_only="true"{% endif %}{% if block.owner == "user" %} of="the user"{% endif %}>
{% if block.description %}{{ block.description }}
---
{% endif %}{{ block.value }}
</{{ block.label }}>
{% endfor %}
{% endif %}
"#
    };
}

/// The built-in system prompt. Reads (all optional): `agent.name`,
/// `agent.about`, `agent.instructions` (list of strings, or one string),
/// `user` or `users` (`name`, `about`), `session.situation`, `tools`
/// (`name`, `description`) and `docs` (`title`, `content` or `snippet`).
pub const DEFAULT_SYSTEM_TEMPLATE: &str = concat!(
    r#"{% if agent.name %}
You are {{ agent.name }}{% if agent.about %}, {{ agent.about }}{% endif %}.
{% else %}
You are a helpful assistant.{% if agent.about %} {{ agent.about }}{% endif %}

{% endif %}
{% if agent.instructions %}

Instructions:
{% if agent.instructions is string %}
- {{ agent.instructions }}
{% else %}
{% for instruction in agent.instructions %}
- {{ instruction }}
{% endfor %}
{% endif %}
{% endif %}
{% set people = users if users else ([user] if user else []) %}
{% if people %}

{% if people | length == 1 %}
You are talking with {{ people[0].name or "a user" }}{% if people[0].about %} ({{ people[0].about }}){% endif %}.
{% else %}
You are talking with:
{% for person in people %}
- {{ person.name or "a user" }}{% if person.about %}: {{ person.about }}{% endif %}

{% endfor %}
{% endif %}
{% endif %}
{% if session.situation %}

Situation: {{ session.situation }}
{% endif %}
{% if tools %}

You can use these tools:
{% for tool in tools %}
- {{ tool.name }}{% if tool.description %}: {{ tool.description }}{% endif %}

{% endfor %}
{% endif %}
{% if docs %}

Relevant documents:
{% for doc in docs %}

## {{ doc.title or "Untitled" }}
{{ doc.content or doc.snippet }}
{% endfor %}
{% endif %}
"#,
    memory_blocks_section!()
);

/// The memory blocks' section of the system message: the end of the default
/// template, and what follows a session's own template when that template
/// does not place `blocks` itself.
pub const BLOCKS_SECTION: &str = memory_blocks_section!();

/// A template that does not compile or render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TemplateError {
    /// 1-based line in the template source, when known.
    pub line: Option<usize>,
    pub message: String,
    /// It passed a bound of one render (bytes, time, fuel, output), not a
    /// mistake of the template's own.
    pub bound: bool,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "template error on line {line}: {}", self.message),
            None => write!(f, "template error: {}", self.message),
        }
    }
}

impl From<minijinja::Error> for TemplateError {
    fn from(e: minijinja::Error) -> Self {
        let message = match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        };
        TemplateError { line: e.line().filter(|l| *l > 0), message, bound: false }
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    // The syntax the contract checks templates in when they are sent.
    env.set_syntax(crate::api::types::template_syntax());
    env.set_undefined_behavior(UndefinedBehavior::Chainable);
    env.set_fuel(Some(RENDER_FUEL));
    env
}

/// The default template, compiled once.
static DEFAULT: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = environment();
    env.add_template("default", DEFAULT_SYSTEM_TEMPLATE).expect("the default template compiles");
    env
});

/// Renders `src` with `ctx` (normally a JSON object). The default template
/// is compiled once; others at each call (sessions' templates are few and short).
pub fn render(src: &str, ctx: &serde_json::Value) -> Result<String, TemplateError> {
    if src == DEFAULT_SYSTEM_TEMPLATE {
        return render_template(&DEFAULT.get_template("default")?, ctx);
    }
    let env = environment();
    render_template(&env.template_from_str(src)?, ctx)
}

/// Renders a template whose source a client chose with no context: a template
/// that passes a bound of one render ([`MAX_RENDER_BYTES`], [`MAX_RENDER_TIME`],
/// [`RENDER_FUEL`], [`MAX_OUTPUT_BYTES`]) even so is refused when it is
/// written, instead of at each use. Other errors (a filter given an undefined
/// value) are left for the render with its context to report.
pub fn check_bounds(src: &str) -> Result<(), TemplateError> {
    match render(src, &serde_json::json!({})) {
        Err(e) if e.bound => Err(e),
        _ => Ok(()),
    }
}

fn render_template(
    template: &minijinja::Template<'_, '_>,
    ctx: &serde_json::Value,
) -> Result<String, TemplateError> {
    let limits = Limits { max_bytes: MAX_RENDER_BYTES, max_time: Some(MAX_RENDER_TIME) };
    let (rendered, exceeded) = minijinja::limits::with_limits(limits, || render_capped(template, ctx));
    let message = match exceeded {
        None => return rendered,
        Some(Exceeded::Bytes(max)) => {
            format!("the template would build more than {max} bytes, the limit of one render")
        }
        Some(Exceeded::Time(max)) => {
            format!("the template ran longer than {} ms, the limit of one render", max.as_millis())
        }
    };
    Err(TemplateError { line: None, message, bound: true })
}

fn render_capped(
    template: &minijinja::Template<'_, '_>,
    ctx: &serde_json::Value,
) -> Result<String, TemplateError> {
    let mut out = CappedWriter::default();
    match template.render_captured_to(Value::from(Serde(ctx)), &mut out) {
        Ok(_) => {}
        Err(_) if out.overflowed => {
            return Err(TemplateError {
                line: None,
                message: format!("the rendered text is longer than {MAX_OUTPUT_BYTES} bytes"),
                bound: true,
            });
        }
        Err(e) if e.kind() == ErrorKind::OutOfFuel => {
            return Err(TemplateError {
                line: e.line().filter(|l| *l > 0),
                message: format!(
                    "the template ran too long (more than {RENDER_FUEL} steps); is there a runaway loop?"
                ),
                bound: true,
            });
        }
        Err(e) => return Err(e.into()),
    }
    String::from_utf8(out.buf).map_err(|e| TemplateError {
        line: None,
        message: format!("the rendered text is not UTF-8: {e}"),
        bound: false,
    })
}

/// Collects output, refusing writes past [`MAX_OUTPUT_BYTES`] (templates here,
/// and the templates of task steps).
#[derive(Default)]
pub(crate) struct CappedWriter {
    pub buf: Vec<u8>,
    pub overflowed: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > MAX_OUTPUT_BYTES {
            self.overflowed = true;
            return Err(io::Error::other("template output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_default_template_with_full_context() {
        let ctx = json!({
            "agent": {
                "name": "Ada",
                "about": "a research assistant",
                "instructions": ["Be concise.", "Cite sources."]
            },
            "user": {"name": "Bob", "about": "a biologist"},
            "session": {"situation": "Bob is preparing a talk."},
            "tools": [{"name": "search", "description": "Search the documents"}],
            "docs": [{"title": "Cells", "content": "Cells are small."}]
        });
        let out = render(DEFAULT_SYSTEM_TEMPLATE, &ctx).unwrap();
        let expected = "\
You are Ada, a research assistant.

Instructions:
- Be concise.
- Cite sources.

You are talking with Bob (a biologist).

Situation: Bob is preparing a talk.

You can use these tools:
- search: Search the documents

Relevant documents:

## Cells
Cells are small.
";
        assert_eq!(out, expected);
    }

    #[test]
    fn default_template_ends_with_the_memory_blocks() {
        let ctx = json!({
            "agent": {"name": "Ada"},
            "blocks": [
                {"label": "persona", "value": "I am Ada.", "description": "", "limit": 100, "chars": 9, "read_only": true, "owner": "agent"},
                {"label": "human", "value": "Name: Ann", "description": "About the user.", "limit": 50, "chars": 9, "read_only": false, "owner": "user"},
            ],
        });
        let expected = "You are Ada.

Memory blocks (kept in view in every conversation; edit those not read_only with your memory tools, if you have them):

<persona chars=\"9/100\" read_only=\"true\">
I am Ada.
</persona>

<human chars=\"9/50\" of=\"the user\">
About the user.
---
Name: Ann
</human>
";
        assert_eq!(render(DEFAULT_SYSTEM_TEMPLATE, &ctx).unwrap(), expected);
    }

    #[test]
    fn default_template_with_empty_and_partial_context() {
        assert_eq!(render(DEFAULT_SYSTEM_TEMPLATE, &json!({})).unwrap(), "You are a helpful assistant.\n");
        let out = render(
            DEFAULT_SYSTEM_TEMPLATE,
            &json!({
                "agent": {"instructions": "Answer in French."},
                "users": [{"name": "A"}, {"name": "B", "about": "admin"}],
                "docs": [{"title": "T", "snippet": "snip"}]
            }),
        )
        .unwrap();
        assert_eq!(
            out,
            "You are a helpful assistant.\n\nInstructions:\n- Answer in French.\n\n\
             You are talking with:\n- A\n- B: admin\n\nRelevant documents:\n\n## T\nsnip\n"
        );
    }

    #[test]
    fn undefined_variables_do_not_fail() {
        let out = render("[{{ nope }}][{{ agent.x.y.z }}]", &json!({"agent": {}})).unwrap();
        assert_eq!(out, "[][]");
    }

    #[test]
    fn syntax_error_reports_its_line() {
        let src = "Hello {{ agent.name }}\nline two\n{% if x %}never closed\n";
        let err = render(src, &json!({})).unwrap_err();
        let src2 = "line one\nline two\n{{ agent.name | }}\n";
        let err2 = render(src2, &json!({})).unwrap_err();
        assert_eq!(err2.line, Some(3), "{err2}");
        assert!(err2.to_string().contains("line 3"), "{err2}");
        assert!(err.line.is_some(), "{err}");
        assert!(crate::api::types::compile_template(DEFAULT_SYSTEM_TEMPLATE).is_ok());
    }

    #[test]
    fn runaway_templates_are_stopped() {
        let err = render(
            "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
            &json!({}),
        )
        .unwrap_err();
        assert!(err.message.contains("ran too long"), "{err}");
        let err = render("{{ 'x' * 1000000 }}", &json!({})).unwrap_err();
        assert!(err.message.contains("longer than"), "{err}");
    }

    #[test]
    fn templates_that_would_build_too_much_fail_before_allocating() {
        for src in [
            "{{ 'a\nb' | indent(10**12) }}",
            "{{ ('x' * 10**7) | replace('x', 'x' * 100) }}",
            "{{ [('x' * 10**7)] * 100 }}",
            "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "{% set big %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endset %}",
        ] {
            let err = render(src, &json!({})).unwrap_err();
            assert!(err.bound, "{src}: {err}");
            assert!(
                err.message.contains("limit of one render") || err.message.contains("longer than"),
                "{src}: {err}"
            );
            assert!(check_bounds(src).is_err(), "{src}");
        }
        // A template that only fails for want of its context is left to its render.
        assert!(check_bounds("{{ agent.name | upper }} {{ nope(1) }}").is_ok());
        let two_lines = "{{ (agent.name ~ '\n' ~ agent.name) | indent(10**12) }}";
        assert!(check_bounds(two_lines).is_ok(), "nothing to indent without a name: nothing built");
        let err = render(two_lines, &json!({"agent": {"name": "Ada"}})).unwrap_err();
        assert!(err.bound, "{err}");
        assert!(check_bounds(DEFAULT_SYSTEM_TEMPLATE).is_ok());
    }

    #[test]
    fn a_slow_template_stops_at_the_deadline() {
        let src =
            "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}";
        let started = std::time::Instant::now();
        let err = render(src, &json!({})).unwrap_err();
        assert!(err.bound && err.message.contains("ran longer than 500 ms"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(3), "{:?}", started.elapsed());
    }

    #[test]
    fn no_file_access() {
        assert!(render("{% include 'etc/passwd' %}", &json!({})).is_err());
    }
}
