//! Field path → `line:col` index of a YAML document.
//!
//! serde gives us typed values but forgets where they came from; validation
//! errors must still point at the line. We walk the parser's event stream once
//! and remember, for every mapping key and sequence item, the position of the
//! node. Paths use the same spelling as validation errors: `routes[0].canaryWeight`.

use serde_saphyr::granit_parser::{Event, Parser};
use std::collections::HashMap;

/// Where each field path starts in the source (1-based line and column).
#[derive(Debug, Default, Clone)]
pub struct Locations {
    map: HashMap<String, (usize, usize)>,
}

enum Frame {
    /// Inside a mapping; `key` is the pending key whose value comes next.
    Map { path: String, key: Option<String> },
    /// Inside a sequence; `next` is the index of the next item.
    Seq { path: String, next: usize },
}

impl Locations {
    /// Index `source`. A document that does not parse yields an empty index:
    /// the deserializer reports the syntax error with its own position.
    pub fn index(source: &str) -> Self {
        let mut map = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let parser = Parser::new_from_str(source);
        for item in parser {
            let Ok((event, span)) = item else { break };
            let pos = (span.start.line(), span.start.col() + 1);
            match event {
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map {
                        key: key @ None, ..
                    }) = stack.last_mut()
                    {
                        *key = Some(value.into_owned());
                        let path = child_path(&stack);
                        map.entry(path).or_insert(pos);
                    } else {
                        let path = child_path(&stack);
                        map.entry(path).or_insert(pos);
                        finish_value(&mut stack);
                    }
                }
                Event::Alias(_) => {
                    let path = child_path(&stack);
                    map.entry(path).or_insert(pos);
                    finish_value(&mut stack);
                }
                Event::MappingStart(..) => {
                    let path = child_path(&stack);
                    map.entry(path.clone()).or_insert(pos);
                    stack.push(Frame::Map { path, key: None });
                }
                Event::SequenceStart(..) => {
                    let path = child_path(&stack);
                    map.entry(path.clone()).or_insert(pos);
                    stack.push(Frame::Seq { path, next: 0 });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    finish_value(&mut stack);
                }
                _ => {}
            }
        }
        Locations { map }
    }

    /// Position of `path`, or of its closest indexed ancestor (a missing
    /// field is reported where its parent starts).
    pub fn find(&self, path: &str) -> Option<(usize, usize)> {
        let mut p = path;
        loop {
            if let Some(pos) = self.map.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

/// The path of the node that comes next in the innermost open collection.
fn child_path(stack: &[Frame]) -> String {
    match stack.last() {
        None => String::new(),
        Some(Frame::Map { path, key: Some(k) }) => join_key(path, k),
        // A key that is itself a collection: index it under the parent.
        Some(Frame::Map { path, key: None }) => path.clone(),
        Some(Frame::Seq { path, next }) => format!("{path}[{next}]"),
    }
}

/// Appends `.key` (or just `key` at the root).
pub fn join_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A value (scalar or collection) has ended: advance the parent.
fn finish_value(stack: &mut [Frame]) {
    match stack.last_mut() {
        Some(Frame::Map { key, .. }) => *key = None,
        Some(Frame::Seq { next, .. }) => *next += 1,
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_keys_and_items() {
        let src = "routes:\n  - name: a\n    canaryWeight: 150\n  - name: b\n    match:\n      - headers: { x-canary: { exact: yes } }\nbackends:\n  blue:\n    endpoints: [\"x:1\", \"y:2\"]\n";
        let l = Locations::index(src);
        assert_eq!(l.find("routes[0].canaryWeight"), Some((3, 5)));
        assert_eq!(l.find("routes[1].name"), Some((4, 5)));
        assert_eq!(
            l.find("routes[1].match[0].headers.x-canary.exact"),
            Some((6, 32))
        );
        assert_eq!(l.find("backends.blue.endpoints[1]"), Some((9, 24)));
        // Missing field: falls back to the parent.
        assert_eq!(l.find("routes[0].primary"), Some((2, 5)));
    }

    #[test]
    fn broken_yaml_gives_partial_index() {
        let l = Locations::index("a: [1, 2\nb: 3");
        assert_eq!(l.find("zzz"), None);
    }
}
