//! Python's methods on strings, objects and lists, for the expressions Julep
//! tasks were written with (`_.name.upper()`, `_.get('k', 0)`,
//! `', '.join(items)`, `text.split(',')`). minijinja has filters for these
//! but not the method calls; this is the usual subset, nothing more.

use minijinja::value::{ValueKind, from_args};
use minijinja::{Error, ErrorKind, State, Value};

/// minijinja's hook for a method it does not know.
pub(super) fn call(_state: &mut State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::String => string_method(value.as_str().unwrap_or_default(), method, args),
        ValueKind::Map => map_method(value, method, args),
        ValueKind::Seq => list_method(value, method, args),
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

fn string_method(s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let text = |t: String| Ok(Value::from(t));
    // What a method builds is charged to the evaluation's budget before it is built.
    let charge = minijinja::limits::charge;
    match method {
        "upper" | "lower" | "title" | "capitalize" => charge(s.len().saturating_mul(3))?,
        "strip" | "lstrip" | "rstrip" | "split" | "splitlines" => charge(s.len())?,
        _ => {}
    }
    match method {
        "upper" => text(s.to_uppercase()),
        "lower" => text(s.to_lowercase()),
        "title" => text(title(s)),
        "capitalize" => {
            let mut chars = s.chars();
            text(
                chars
                    .next()
                    .map(|c| c.to_uppercase().chain(chars.flat_map(char::to_lowercase)).collect())
                    .unwrap_or_default(),
            )
        }
        "strip" | "lstrip" | "rstrip" => {
            let (chars,): (Option<&str>,) = from_args(args)?;
            let trim = |c: char| chars.map_or(c.is_whitespace(), |set| set.contains(c));
            text(
                match method {
                    "strip" => s.trim_matches(trim),
                    "lstrip" => s.trim_start_matches(trim),
                    _ => s.trim_end_matches(trim),
                }
                .to_string(),
            )
        }
        "split" => {
            let (sep, maxsplit): (Option<&str>, Option<i64>) = from_args(args)?;
            let limit = maxsplit.filter(|n| *n >= 0).map(|n| n as usize + 1).unwrap_or(usize::MAX);
            let parts: Vec<Value> = match sep {
                Some("") => return Err(Error::new(ErrorKind::InvalidOperation, "split(): empty separator")),
                Some(sep) => {
                    minijinja::limits::charge_items(s.matches(sep).count() + 1)?;
                    s.splitn(limit, sep).map(Value::from).collect()
                }
                None => {
                    minijinja::limits::charge_items(s.split_whitespace().count())?;
                    s.split_whitespace().map(Value::from).collect()
                }
            };
            Ok(Value::from(parts))
        }
        "splitlines" => {
            minijinja::limits::charge_items(s.lines().count())?;
            Ok(Value::from(s.lines().map(Value::from).collect::<Vec<_>>()))
        }
        "join" => {
            let (items,): (Value,) = from_args(args)?;
            let mut out = String::new();
            for (i, item) in items.try_iter()?.enumerate() {
                if i > 0 {
                    charge(s.len())?;
                    out.push_str(s);
                }
                match item.as_str() {
                    Some(part) => {
                        charge(part.len())?;
                        out.push_str(part);
                    }
                    None => out.push_str(&minijinja::limits::display(&item)?),
                }
            }
            text(out)
        }
        "replace" => {
            let (old, new, count): (&str, &str, Option<i64>) = from_args(args)?;
            let matches = if old.is_empty() { s.chars().count() + 1 } else { s.matches(old).count() };
            let matches = count.filter(|n| *n >= 0).map_or(matches, |n| matches.min(n as usize));
            charge(s.len().saturating_add(matches.saturating_mul(new.len())))?;
            text(match count.filter(|n| *n >= 0) {
                Some(n) => s.replacen(old, new, n as usize),
                None => s.replace(old, new),
            })
        }
        "startswith" | "endswith" => {
            let (affix,): (Value,) = from_args(args)?;
            let test = |a: &str| if method == "startswith" { s.starts_with(a) } else { s.ends_with(a) };
            Ok(Value::from(match affix.as_str() {
                Some(a) => test(a),
                // A tuple or list of prefixes, as Python allows.
                None => affix.try_iter()?.any(|a| a.as_str().is_some_and(test)),
            }))
        }
        "find" => {
            let (sub,): (&str,) = from_args(args)?;
            Ok(Value::from(s.find(sub).map_or(-1, |byte| s[..byte].chars().count() as i64)))
        }
        "count" => {
            let (sub,): (&str,) = from_args(args)?;
            Ok(Value::from(if sub.is_empty() { s.chars().count() + 1 } else { s.matches(sub).count() }))
        }
        "isdigit" => Ok(Value::from(!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))),
        "isalpha" => Ok(Value::from(!s.is_empty() && s.chars().all(char::is_alphabetic))),
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut at_word_start = true;
    for c in s.chars() {
        if at_word_start {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
        at_word_start = !c.is_alphanumeric();
    }
    out
}

fn map_method(map: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    match method {
        "get" => {
            let (key, default): (Value, Option<Value>) = from_args(args)?;
            let found = map.get_item(&key)?;
            Ok(if found.is_undefined() { default.unwrap_or(Value::from(())) } else { found })
        }
        "keys" => {
            let () = from_args(args)?;
            Ok(Value::from(map.try_iter()?.collect::<Vec<_>>()))
        }
        "values" => {
            let () = from_args(args)?;
            Ok(Value::from(map.try_iter()?.map(|k| map.get_item(&k)).collect::<Result<Vec<_>, _>>()?))
        }
        "items" => {
            let () = from_args(args)?;
            let pairs = map
                .try_iter()?
                .map(|k| Ok(Value::from(vec![k.clone(), map.get_item(&k)?])))
                .collect::<Result<Vec<_>, Error>>()?;
            Ok(Value::from(pairs))
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

fn list_method(list: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    match method {
        "count" => {
            let (x,): (Value,) = from_args(args)?;
            Ok(Value::from(list.try_iter()?.filter(|item| *item == x).count()))
        }
        "index" => {
            let (x,): (Value,) = from_args(args)?;
            list.try_iter()?.position(|item| item == x).map(Value::from).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, format!("index(): {x} is not in the list"))
            })
        }
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}
