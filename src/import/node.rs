//! Reading a manifest field by field: every field a mapper takes is removed
//! from its object, and whatever is left when the mapper is done is, by
//! construction, a field the import did not map. So the list of unmapped
//! fields is complete without a list of Flagger's fields to keep in step.

use serde_json::{Map, Value};

/// A field the import could not map, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The manifest, e.g. `Canary test/podinfo (istio-canary.yaml)`.
    pub subject: String,
    /// The field path in it, e.g. `spec.autoscalerRef`.
    pub path: String,
    pub reason: String,
}

/// The notes of one manifest.
pub struct Notes<'n> {
    pub subject: String,
    pub out: &'n mut Vec<Note>,
}

impl Notes<'_> {
    pub fn add(&mut self, path: &str, reason: impl Into<String>) {
        self.out.push(Note {
            subject: self.subject.clone(),
            path: path.to_string(),
            reason: reason.into(),
        });
    }
}

/// An object being mapped, with its path in the manifest.
pub struct Node {
    pub path: String,
    map: Map<String, Value>,
}

impl Node {
    /// The object at `path`, or a note when `v` is something else (null is
    /// an empty object, as Kubernetes reads it).
    pub fn new(path: impl Into<String>, v: Value, notes: &mut Notes<'_>) -> Option<Node> {
        let path = path.into();
        match v {
            Value::Object(map) => Some(Node { path, map }),
            Value::Null => Some(Node {
                path,
                map: Map::new(),
            }),
            other => {
                notes.add(&path, format!("expected an object, found {}", kind(&other)));
                None
            }
        }
    }

    pub fn at(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Takes `key` (a null is absent).
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// The value at `key`, not taken.
    pub fn peek(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// The keys not taken yet.
    pub fn keys(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    pub fn child(&mut self, key: &str, notes: &mut Notes<'_>) -> Option<Node> {
        let v = self.take(key)?;
        Node::new(self.at(key), v, notes)
    }

    pub fn string(&mut self, key: &str, notes: &mut Notes<'_>) -> Option<String> {
        match self.take(key)? {
            Value::String(s) => Some(s),
            // A number or a boolean where Kubernetes would coerce: keep its text.
            v @ (Value::Number(_) | Value::Bool(_)) => Some(v.to_string()),
            other => {
                notes.add(
                    &self.at(key),
                    format!("expected a string, found {}", kind(&other)),
                );
                None
            }
        }
    }

    pub fn int(&mut self, key: &str, notes: &mut Notes<'_>) -> Option<i64> {
        match self.take(key)? {
            Value::Number(n) if n.as_i64().is_some() => n.as_i64(),
            other => {
                notes.add(&self.at(key), format!("expected an integer, found {other}"));
                None
            }
        }
    }

    pub fn float(&mut self, key: &str, notes: &mut Notes<'_>) -> Option<f64> {
        match self.take(key)? {
            Value::Number(n) => n.as_f64(),
            Value::String(s) if s.trim().parse::<f64>().is_ok() => s.trim().parse().ok(),
            other => {
                notes.add(&self.at(key), format!("expected a number, found {other}"));
                None
            }
        }
    }

    pub fn bool(&mut self, key: &str, notes: &mut Notes<'_>) -> Option<bool> {
        match self.take(key)? {
            Value::Bool(b) => Some(b),
            other => {
                notes.add(
                    &self.at(key),
                    format!("expected true or false, found {other}"),
                );
                None
            }
        }
    }

    /// The list at `key` (absent: empty).
    pub fn list(&mut self, key: &str, notes: &mut Notes<'_>) -> Vec<Value> {
        match self.take(key) {
            None => Vec::new(),
            Some(Value::Array(a)) => a,
            Some(other) => {
                notes.add(
                    &self.at(key),
                    format!("expected a list, found {}", kind(&other)),
                );
                Vec::new()
            }
        }
    }

    /// A map of strings at `key` (absent: empty); other values are noted.
    pub fn strings(&mut self, key: &str, notes: &mut Notes<'_>) -> Vec<(String, String)> {
        let Some(mut n) = self.child(key, notes) else {
            return Vec::new();
        };
        let keys: Vec<String> = n.map.keys().cloned().collect();
        keys.into_iter()
            .filter_map(|k| n.string(&k, notes).map(|v| (k, v)))
            .collect()
    }

    /// Every field left: a note each, with the reason `why` gives for its
    /// path (or a generic one).
    pub fn finish(self, notes: &mut Notes<'_>, why: impl Fn(&str) -> Option<String>) {
        for (k, v) in self.map {
            if v.is_null() {
                continue;
            }
            let path = if self.path.is_empty() {
                k.clone()
            } else {
                format!("{}.{k}", self.path)
            };
            let generic = path_without_indices(&path);
            let reason =
                why(&generic).unwrap_or_else(|| "weir has no equivalent of this field".into());
            notes.add(&path, reason);
        }
    }
}

/// `a.b[2].c` → `a.b.c`: reasons are per field, not per list item.
pub fn path_without_indices(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
