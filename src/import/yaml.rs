//! A small YAML writer for the import's output: block style, two-space
//! indentation, a comment line above any entry, every string either
//! double-quoted (a JSON string is a valid YAML double-quoted scalar) or,
//! when it spans lines, a literal block, so a PromQL query stays readable.
//! Nothing here guesses a type from text: `"1"` stays a string.

use serde_json::Value;

/// A YAML node with its order kept (the output follows weir's schema order).
#[derive(Debug, Clone, PartialEq)]
pub enum Y {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Y>),
    Map(Vec<Entry>),
}

/// One `key: value` of a mapping, with comment lines written above it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub value: Y,
    pub comment: Vec<String>,
}

impl Y {
    pub fn str(s: impl Into<String>) -> Y {
        Y::Str(s.into())
    }

    /// A mapping from `(key, value)` pairs, in order.
    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Y)>) -> Y {
        Y::Map(entries.into_iter().map(|(k, v)| Entry::new(k, v)).collect())
    }

    /// The input's own value, as read (object keys in the order serde_json keeps them).
    pub fn from_json(v: &Value) -> Y {
        match v {
            Value::Null => Y::Null,
            Value::Bool(b) => Y::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Y::Int(i),
                None => Y::Float(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => Y::Str(s.clone()),
            Value::Array(a) => Y::Seq(a.iter().map(Y::from_json).collect()),
            Value::Object(o) => Y::Map(
                o.iter()
                    .map(|(k, v)| Entry::new(k.clone(), Y::from_json(v)))
                    .collect(),
            ),
        }
    }
}

impl Entry {
    pub fn new(key: impl Into<String>, value: Y) -> Self {
        Entry {
            key: key.into(),
            value,
            comment: Vec::new(),
        }
    }

    /// The same entry with a comment line above it.
    pub fn note(mut self, line: impl Into<String>) -> Self {
        self.comment.push(line.into());
        self
    }
}

/// The document for a top-level mapping.
pub fn document(entries: &[Entry]) -> String {
    let mut lines = Vec::new();
    map_lines(entries, 0, &mut lines);
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn pad(n: usize) -> String {
    " ".repeat(n)
}

fn comment_lines(comment: &[String], indent: usize, out: &mut Vec<String>) {
    for c in comment {
        for l in c.lines() {
            out.push(format!("{}# {l}", pad(indent)).trim_end().to_string());
        }
    }
}

fn map_lines(entries: &[Entry], indent: usize, out: &mut Vec<String>) {
    for e in entries {
        comment_lines(&e.comment, indent, out);
        let head = format!("{}{}:", pad(indent), key(&e.key));
        value_after(head, &e.value, indent, out);
    }
}

/// Writes `value` after `head` (`key:` or `-`), nested ones on the lines below.
fn value_after(head: String, value: &Y, indent: usize, out: &mut Vec<String>) {
    match value {
        Y::Map(m) if !m.is_empty() => {
            out.push(head);
            map_lines(m, indent + 2, out);
        }
        Y::Seq(s) if !s.is_empty() => {
            out.push(head);
            seq_lines(s, indent + 2, out);
        }
        Y::Str(s) if literal_ok(s) => {
            let chomp = if !s.ends_with('\n') {
                "-"
            } else if s.ends_with("\n\n") {
                "+"
            } else {
                ""
            };
            out.push(format!("{head} |{chomp}"));
            let body = s.strip_suffix('\n').unwrap_or(s);
            for l in body.split('\n') {
                if l.is_empty() {
                    out.push(String::new());
                } else {
                    out.push(format!("{}{l}", pad(indent + 2)));
                }
            }
        }
        scalar => out.push(format!("{head} {}", inline(scalar))),
    }
}

fn seq_lines(items: &[Y], indent: usize, out: &mut Vec<String>) {
    for item in items {
        match item {
            Y::Map(m) if !m.is_empty() => {
                let mut lines = Vec::new();
                map_lines(m, indent + 2, &mut lines);
                // The first key goes on the dash's line; comments above it stay above.
                let first = lines
                    .iter()
                    .position(|l| !l.trim_start().starts_with('#'))
                    .unwrap_or(0);
                lines[first] = format!("{}- {}", pad(indent), &lines[first][indent + 2..]);
                out.extend(lines);
            }
            other => value_after(format!("{}-", pad(indent)), other, indent, out),
        }
    }
}

/// A string that a literal block writes back exactly.
fn literal_ok(s: &str) -> bool {
    s.contains('\n')
        && !s.contains('\r')
        && !s.starts_with([' ', '\t', '\n'])
        && s.trim_end_matches('\n')
            .split('\n')
            .all(|l| l.is_empty() || !l.trim().is_empty())
        && !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// A scalar or an empty collection on one line.
fn inline(v: &Y) -> String {
    match v {
        Y::Null => "null".into(),
        Y::Bool(b) => b.to_string(),
        Y::Int(i) => i.to_string(),
        Y::Float(f) if f.is_finite() => f.to_string(),
        Y::Float(_) => "null".into(),
        Y::Str(s) if plain_ok(s) => s.clone(),
        Y::Str(s) => quoted(s),
        Y::Seq(_) => "[]".into(),
        Y::Map(_) => "{}".into(),
    }
}

/// A string that a YAML 1.2 (and 1.1) reader can only read back as this
/// string: names, paths, durations. Anything else is quoted.
fn plain_ok(s: &str) -> bool {
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null" | "~"
        )
        && s.parse::<f64>().is_err()
        && !s.starts_with("0x")
        && !s.starts_with("0o")
        && !s.starts_with("0b")
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A key as a plain scalar when it cannot be read as anything but that
/// string, else quoted.
fn key(k: &str) -> String {
    if plain_ok(k) {
        k.to_string()
    } else {
        quoted(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever is written reads back as the same value.
    #[test]
    fn written_yaml_reads_back_as_the_same_value() {
        let query = "100 - sum(\n  rate(x{a=\"{{ target }}\"}[{{ interval }}])\n)\n";
        let doc = vec![
            Entry::new("plain", Y::str("a: b # not a comment")).note("a comment\nof two lines"),
            Entry::new("query", Y::str(query)),
            Entry::new("unterminated", Y::str("a\nb")),
            Entry::new("kept", Y::str("a\n\n")),
            Entry::new("indented", Y::str(" a\nb")),
            Entry::new("blank line of spaces", Y::str("a\n  \nb")),
            Entry::new("yes", Y::Bool(true)),
            Entry::new("1", Y::str("1")),
            Entry::new("hex", Y::str("0x1F")),
            Entry::new("inf", Y::str("inf")),
            Entry::new("no", Y::str("off")),
            Entry::new("duration", Y::str("15s")),
            Entry::new("n", Y::Float(99.5)),
            Entry::new("empty", Y::Map(vec![])),
            Entry::new(
                "list",
                Y::Seq(vec![
                    Y::map([("name", Y::str("x")), ("port", Y::Int(80))]),
                    Y::Map(vec![Entry::new(
                        "k",
                        Y::Seq(vec![Y::Int(1), Y::str("two")]),
                    )
                    .note("above")]),
                    Y::str("line\nbreak"),
                ]),
            ),
        ];
        let text = document(&doc);
        let back: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let want = serde_json::json!({
            "plain": "a: b # not a comment",
            "query": query,
            "unterminated": "a\nb",
            "kept": "a\n\n",
            "indented": " a\nb",
            "blank line of spaces": "a\n  \nb",
            "yes": true,
            "1": "1",
            "hex": "0x1F",
            "inf": "inf",
            "no": "off",
            "duration": "15s",
            "n": 99.5,
            "empty": {},
            "list": [{"name": "x", "port": 80}, {"k": [1, "two"]}, "line\nbreak"],
        });
        assert_eq!(back, want, "{text}");
        assert!(text.contains("query: |\n  100 - sum("), "{text}");
        assert!(text.contains("duration: 15s\n"), "{text}");
    }
}
