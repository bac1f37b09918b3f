//! Printing answers: `-o json` prints the broker's JSON as it came (pretty),
//! `-o table` picks columns into aligned text (tabwriter, kubectl style).
//! Without `-o`, a terminal gets a table and a pipe JSON, as the reference
//! CLI does. `tail` ignores `-o`: it always prints NDJSON.

use std::io::{IsTerminal as _, Write as _};

use serde_json::Value;

use crate::error::CliError;

/// `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns.
    Table,
    /// The broker's JSON, pretty-printed.
    Json,
}

impl Format {
    /// The format of this run: the flag, else by whether stdout is a terminal.
    pub(crate) fn pick(flag: Option<Format>) -> Format {
        flag.unwrap_or_else(|| {
            if std::io::stdout().is_terminal() {
                Format::Table
            } else {
                Format::Json
            }
        })
    }
}

/// A column: its header and how to read a cell from a row.
pub(crate) struct Column {
    pub(crate) header: &'static str,
    /// A JSON pointer into the row (`/messages/pending`).
    pub(crate) pointer: &'static str,
}

pub(crate) const fn col(header: &'static str, pointer: &'static str) -> Column {
    Column { header, pointer }
}

/// Print `value` pretty on stdout.
pub(crate) fn json(value: &Value) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
        .map_err(CliError::io("writing to stdout"))
}

/// Print `rows` under `columns` as aligned text on stdout.
pub(crate) fn table(columns: &[Column], rows: &[Value]) -> Result<(), CliError> {
    let mut out = tabwriter::TabWriter::new(std::io::stdout().lock()).padding(3);
    let header: Vec<&str> = columns.iter().map(|c| c.header).collect();
    let mut text = header.join("\t");
    text.push('\n');
    for row in rows {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| cell(row.pointer(c.pointer)))
            .collect();
        text.push_str(&cells.join("\t"));
        text.push('\n');
    }
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))
}

/// Print `value`'s scalar fields (nested ones as `a.b`) as `key: value` lines.
pub(crate) fn fields(value: &Value) -> Result<(), CliError> {
    let mut lines = Vec::new();
    flatten("", value, &mut lines);
    let mut out = tabwriter::TabWriter::new(std::io::stdout().lock()).padding(2);
    let text: String = lines
        .iter()
        .map(|(key, value)| format!("{key}:\t{value}\n"))
        .collect();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))
}

fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&key, inner, out);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            out.push((prefix.to_owned(), format!("[{} entries]", items.len())));
        }
        other => out.push((prefix.to_owned(), cell(Some(other)))),
    }
}

/// A cell's text: strings bare, `null` and absent as `-`.
fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(text)) if text.is_empty() => "-".to_owned(),
        // Tabs and newlines would break the columns.
        Some(Value::String(text)) => text.replace(['\t', '\n', '\r'], " "),
        Some(other) => other.to_string(),
    }
}

/// A JSON array at `pointer` in `value` (`""`: `value` itself), or an error
/// naming what was expected.
pub(crate) fn rows<'a>(
    reply: &crate::client::Reply,
    value: &'a Value,
    pointer: &str,
) -> Result<&'a [Value], CliError> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| {
            reply.unexpected(if pointer.is_empty() {
                "expected an array".to_owned()
            } else {
                format!("expected an array at {pointer}")
            })
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cells_and_fields_read_nested_values() {
        assert_eq!(cell(Some(&json!("a\tb"))), "a b");
        assert_eq!(cell(Some(&json!(null))), "-");
        assert_eq!(cell(None), "-");
        assert_eq!(cell(Some(&json!(3))), "3");
        let mut lines = Vec::new();
        flatten(
            "",
            &json!({"a": {"b": 1}, "c": [1, 2], "d": [{"x": 1}]}),
            &mut lines,
        );
        assert_eq!(
            lines,
            vec![
                ("a.b".to_owned(), "1".to_owned()),
                ("c".to_owned(), "[1,2]".to_owned()),
                ("d".to_owned(), "[1 entries]".to_owned()),
            ]
        );
    }
}
