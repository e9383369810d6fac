//! The spec's regex patterns with their Unicode property classes spelled out.
//!
//! The name pattern of the interface uses classes such as `\p{ID_Start}` and
//! `\p{Pattern_Syntax}`, which the server's `regex` crate knows and Python's
//! `re` does not, so schemathesis cannot draw names from it. `.ci/fuzz` hands
//! it this translation instead: the same pattern, its classes written as the
//! code-point ranges they denote in the server's Unicode tables, which both
//! understand. It is exact: re-parsed, it yields the very regex the server
//! compiles (see the tests).

use anyhow::{Context, bail};
use regex_syntax::hir::{Class, Hir, HirKind, Look};
use serde_json::{Map, Value};

/// Every distinct `pattern` in `doc` that uses a Unicode property class
/// (`\p{..}`, `\P{..}`), mapped to its [`spelled_out`] form.
pub fn spelled_out_patterns(doc: &Value) -> anyhow::Result<Map<String, Value>> {
    let mut found = Vec::new();
    collect_patterns(doc, &mut found);
    let mut out = Map::new();
    for p in found {
        if (p.contains(r"\p") || p.contains(r"\P")) && !out.contains_key(p) {
            out.insert(p.to_string(), Value::String(spelled_out(p)?));
        }
    }
    Ok(out)
}

fn collect_patterns<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("pattern", Value::String(p)) => out.push(p),
                    _ => collect_patterns(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_patterns(v, out)),
        _ => {}
    }
}

/// `pattern` with every character class written as explicit ranges, in the
/// syntax common to Rust's `regex`, Python's `re` and ECMA-262: `^`, `$`,
/// `[...]`, `(?:...)`, `|`, quantifiers, and literal characters (ASCII
/// controls and class metacharacters escaped).
pub fn spelled_out(pattern: &str) -> anyhow::Result<String> {
    let hir = regex_syntax::Parser::new().parse(pattern).with_context(|| format!("parsing {pattern:?}"))?;
    let mut out = String::new();
    write_hir(&hir, &mut out).with_context(|| format!("spelling out {pattern:?}"))?;
    Ok(out)
}

fn write_hir(hir: &Hir, out: &mut String) -> anyhow::Result<()> {
    match hir.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => {
            for c in std::str::from_utf8(&lit.0).context("a non-UTF-8 literal")?.chars() {
                write_char(c, out, false);
            }
        }
        HirKind::Class(Class::Unicode(class)) => {
            out.push('[');
            for r in class.ranges() {
                write_char(r.start(), out, true);
                if r.end() != r.start() {
                    out.push('-');
                    write_char(r.end(), out, true);
                }
            }
            out.push(']');
        }
        HirKind::Class(Class::Bytes(_)) => bail!("byte classes are not supported"),
        HirKind::Look(Look::Start) => out.push('^'),
        HirKind::Look(Look::End) => out.push('$'),
        HirKind::Look(other) => bail!("the assertion {other:?} is not supported"),
        HirKind::Repetition(rep) => {
            let atomic = matches!(rep.sub.kind(), HirKind::Class(_))
                || matches!(rep.sub.kind(), HirKind::Literal(l) if std::str::from_utf8(&l.0).is_ok_and(|s| s.chars().count() == 1));
            if !atomic {
                out.push_str("(?:");
            }
            write_hir(&rep.sub, out)?;
            if !atomic {
                out.push(')');
            }
            match (rep.min, rep.max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => out.push_str(&format!("{{{m},}}")),
                (m, Some(n)) if m == n => out.push_str(&format!("{{{m}}}")),
                (m, Some(n)) => out.push_str(&format!("{{{m},{n}}}")),
            }
            if !rep.greedy {
                out.push('?');
            }
        }
        HirKind::Capture(cap) => {
            out.push('(');
            write_hir(&cap.sub, out)?;
            out.push(')');
        }
        HirKind::Concat(subs) => {
            for sub in subs {
                let alternation = matches!(sub.kind(), HirKind::Alternation(_));
                if alternation {
                    out.push_str("(?:");
                }
                write_hir(sub, out)?;
                if alternation {
                    out.push(')');
                }
            }
        }
        HirKind::Alternation(subs) => {
            for (i, sub) in subs.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                write_hir(sub, out)?;
            }
        }
    }
    Ok(())
}

/// One character, escaped where a regex (or a class, `in_class`) needs it.
fn write_char(c: char, out: &mut String, in_class: bool) {
    let special = if in_class { r"\]-[^" } else { r"\.+*?()|[]{}^$" };
    if c.is_ascii_control() || c == ' ' {
        out.push_str(&format!(r"\x{:02X}", c as u32));
    } else if special.contains(c) {
        out.push('\\');
        out.push(c);
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_regex(pattern: &str) {
        let spelled = spelled_out(pattern).unwrap();
        let parse = |p: &str| regex_syntax::Parser::new().parse(p).unwrap();
        assert_eq!(parse(&spelled), parse(pattern), "{pattern:?} spelled out as {spelled:?}");
    }

    #[test]
    fn the_name_pattern_spelled_out_is_the_same_regex() {
        let p = agent_platform_api::types::NAME_PATTERN;
        same_regex(p);
        let spelled = spelled_out(p).unwrap();
        assert!(!spelled.contains(r"\p"), "{spelled}");
        assert!(spelled.starts_with("^[") && spelled.ends_with("]*$"), "{spelled}");
    }

    #[test]
    fn other_shapes_spell_out_to_the_same_regex() {
        for p in [
            r"^[a-zA-Z][a-zA-Z0-9_]*$",
            r"^(?:ab|\p{Lu}c)+x?\d{2,3}$",
            r"^\p{Greek}*?[\]\-\\^ \t]$",
            r"^(\pL)(?:x|y)\P{N}{4}$",
        ] {
            same_regex(p);
        }
    }

    #[test]
    fn the_spec_has_exactly_the_name_pattern_to_spell_out() {
        let found = spelled_out_patterns(&agent_platform_api::openapi()).unwrap();
        let keys: Vec<_> = found.keys().map(String::as_str).collect();
        assert_eq!(keys, [agent_platform_api::types::NAME_PATTERN]);
    }
}
