//! Edits of YAML text addressed by field path: cut a mapping entry, add one,
//! replace a value. What [`super::recover`] uses to get the reader past a
//! mistake; each keeps the rest of the document as it was written (block or
//! flow style, indentation), so the next parse reads the rest unchanged.

use super::yaml_tree::{Kind, Node, Tree};
use std::ops::Range;

/// Replace `range` of the current text with `with`.
pub struct Edit {
    /// Bytes of the current text.
    pub range: Range<usize>,
    /// What goes there.
    pub with: String,
}

impl Edit {
    /// The text with the edit made.
    pub fn apply(&self, text: &str) -> String {
        let mut s = String::with_capacity(text.len() + self.with.len());
        s.push_str(&text[..self.range.start]);
        s.push_str(&self.with);
        s.push_str(&text[self.range.end..]);
        s
    }
}

/// Cuts the `nth` entry named `key` out of the mapping at `parent`.
pub fn delete_entry(t: &Tree, text: &str, parent: &str, key: &str, nth: usize) -> Option<Edit> {
    let map = t.find(parent)?.node;
    let Kind::Map(entries) = &map.kind else {
        return None;
    };
    let i = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.key == key)
        .nth(nth)?
        .0;
    let e = &entries[i];
    if entries.len() == 1 {
        return Some(Edit {
            range: map.span.clone(),
            with: "{}".to_string(),
        });
    }
    let range = if map.flow {
        match entries.get(i + 1) {
            Some(next) => e.key_span.start..next.key_span.start,
            None => entries[i - 1].value.span.end..e.value.span.end,
        }
    } else {
        let line_start = text[..e.key_span.start].rfind('\n').map_or(0, |p| p + 1);
        let line_end = text[e.value.span.end..]
            .find('\n')
            .map_or(text.len(), |p| e.value.span.end + p);
        if text[line_start..e.key_span.start].trim().is_empty() {
            // The whole line(s), with the line break.
            line_start..(line_end + 1).min(text.len())
        } else {
            // `- key: v` opens a sequence item: keep the `- `.
            e.key_span.start..line_end
        }
    };
    Some(Edit {
        range,
        with: String::new(),
    })
}

/// Adds `field: <placeholder>` to the mapping at `path`, one edit per placeholder.
pub fn insert_field(
    t: &Tree,
    text: &str,
    path: &str,
    field: &str,
    placeholders: &[&str],
) -> Vec<Edit> {
    let Some(found) = t.find(path) else {
        return Vec::new();
    };
    let node = found.node;
    placeholders
        .iter()
        .map(|c| match &node.kind {
            Kind::Map(entries) if node.flow => Edit {
                range: node.span.start + 1..node.span.start + 1,
                with: if entries.is_empty() {
                    format!("{field}: {c}")
                } else {
                    format!("{field}: {c}, ")
                },
            },
            Kind::Map(entries) if !entries.is_empty() => {
                let at = entries[0].key_span.start;
                let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
                let col = text[line_start..at].chars().count();
                Edit {
                    range: at..at,
                    with: format!("{field}: {c}\n{}", " ".repeat(col)),
                }
            }
            _ => replace_node(node, &format!("{{{field}: {c}}}"), text),
        })
        .collect()
}

/// Replaces a node's text (an empty value is filled in after its key).
pub fn replace_node(node: &Node, with: &str, text: &str) -> Edit {
    if !node.span.is_empty() {
        return Edit {
            range: node.span.clone(),
            with: with.to_string(),
        };
    }
    // An empty value: write the placeholder at the end of its line, before a comment.
    let start = node.span.start.min(text.len());
    let line = &text[start..text[start..].find('\n').map_or(text.len(), |p| start + p)];
    let at = start + line.find(" #").unwrap_or(line.len());
    Edit {
        range: at..at,
        with: format!(" {with}"),
    }
}
