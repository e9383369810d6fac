//! Answers as text tables (`--table`): a list (a JSON array, or an object
//! whose `items` or `data` is one) is one row per item with a column per
//! scalar field; any other object is one row per field.

use serde_json::Value;

/// The longest cell, in characters; longer ones end with `…`.
const MAX_CELL: usize = 60;

/// `value` as an aligned text table, ending with a newline.
pub fn table(value: &Value) -> String {
    match list_of(value) {
        Some(items) => rows_table(items),
        None => match value {
            Value::Object(fields) => render(
                &["FIELD".to_string(), "VALUE".to_string()],
                fields.iter().map(|(k, v)| vec![k.clone(), cell(v)]).collect(),
            ),
            other => format!("{}\n", cell(other)),
        },
    }
}

/// The items of a list answer.
fn list_of(value: &Value) -> Option<&Vec<Value>> {
    match value {
        Value::Array(items) => Some(items),
        Value::Object(fields) => ["items", "data"].iter().find_map(|k| fields.get(*k)?.as_array()),
        _ => None,
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn rows_table(items: &[Value]) -> String {
    if items.is_empty() {
        return "(no items)\n".to_string();
    }
    if !items.iter().all(Value::is_object) {
        return render(&["VALUE".to_string()], items.iter().map(|v| vec![cell(v)]).collect());
    }
    // The scalar fields, in the order they first appear.
    let mut columns: Vec<&str> = Vec::new();
    for item in items {
        for (k, v) in item.as_object().into_iter().flatten() {
            if is_scalar(v) && !v.is_null() && !columns.contains(&k.as_str()) {
                columns.push(k);
            }
        }
    }
    let header: Vec<String> = columns.iter().map(|c| c.to_uppercase()).collect();
    let rows = items
        .iter()
        .map(|item| columns.iter().map(|c| item.get(*c).map(cell).unwrap_or_default()).collect())
        .collect();
    render(&header, rows)
}

/// A value as one line: strings as they are, null as nothing, the rest as
/// compact JSON; cut at [`MAX_CELL`] characters.
fn cell(v: &Value) -> String {
    let text = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if one_line.chars().count() > MAX_CELL {
        let mut cut: String = one_line.chars().take(MAX_CELL - 1).collect();
        cut.push('…');
        cut
    } else {
        one_line
    }
}

fn render(header: &[String], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(c);
                out.extend(std::iter::repeat_n(' ', w - c.chars().count() + 2));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;
    use serde_json::json;

    #[test]
    fn a_list_is_a_row_per_item_with_its_scalar_fields() {
        let page = json!({"items": [
            {"id": "a1", "name": "Ada", "tags": ["x"], "model": null},
            {"id": "b22", "name": "Bob", "model": "gpt", "about": {"k": 1}},
        ]});
        assert_eq!(table(&page), "ID   NAME  MODEL\na1   Ada\nb22  Bob   gpt\n");
    }

    #[test]
    fn openai_lists_are_under_data() {
        let page = json!({"object": "list", "data": [{"id": "m", "object": "model"}]});
        assert_eq!(table(&page), "ID  OBJECT\nm   model\n");
    }

    #[test]
    fn one_object_is_a_row_per_field() {
        let agent = json!({"id": "a1", "instructions": ["be brief"], "note": "two\nlines"});
        assert_eq!(
            table(&agent),
            "FIELD         VALUE\nid            a1\ninstructions  [\"be brief\"]\nnote          two lines\n"
        );
    }

    #[test]
    fn long_cells_are_cut_and_empty_lists_said() {
        let long = "é".repeat(100);
        let out = table(&json!([{"t": long}]));
        let row = out.lines().nth(1).unwrap();
        assert_eq!(row.chars().count(), 60);
        assert!(row.ends_with('…'));
        assert_eq!(table(&json!({"items": []})), "(no items)\n");
        assert_eq!(table(&json!(["a", 1])), "VALUE\na\n1\n");
    }
}
