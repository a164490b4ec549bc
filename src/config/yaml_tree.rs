//! A YAML document as a tree of nodes with their byte spans, addressed by the
//! field paths validation uses (`routes[0].canaryWeight`).
//!
//! serde forgets where a value came from; the diagnostics need it twice: to
//! underline the offending text in the original file, and to edit the text
//! (drop an unknown key, stand a placeholder in for a value of the wrong type)
//! so that the deserializer can go on and find the next mistake. A document
//! that does not parse gives the tree up to the syntax error, plus that error.

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Span};
use std::ops::Range;

/// One node of the document.
#[derive(Debug, Clone)]
pub struct Node {
    /// Bytes of the node's own text (for a block collection: first to last child).
    pub span: Range<usize>,
    /// What the node is.
    pub kind: Kind,
    /// Written in flow style (`[a, b]`, `{a: 1}`); block collections are not.
    pub flow: bool,
}

/// The three shapes of YAML nodes (an alias counts as a scalar: its text is `*name`).
#[derive(Debug, Clone)]
pub enum Kind {
    /// A scalar and how it was quoted.
    Scalar { value: String, quoted: bool },
    /// A sequence's items.
    Seq(Vec<Node>),
    /// A mapping's entries, in document order.
    Map(Vec<Entry>),
}

/// A mapping entry: its key (as text, and where it is) and its value.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key's scalar value.
    pub key: String,
    /// Bytes of the key.
    pub key_span: Range<usize>,
    /// The value node.
    pub value: Node,
}

/// A syntax error of the document: why and where (byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The parser's message.
    pub message: String,
    /// Byte offset where the parser gave up.
    pub offset: usize,
}

/// A parsed document.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The root node (`None` for an empty document).
    pub root: Option<Node>,
    /// The first syntax error, if the document does not parse.
    pub syntax: Option<SyntaxError>,
}

/// What a path addresses in the tree.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    /// The node itself.
    pub node: &'a Node,
    /// Its key when it is a mapping value.
    pub key_span: Option<&'a Range<usize>>,
}

enum Open {
    Seq {
        start: usize,
        flow: bool,
        items: Vec<Node>,
    },
    Map {
        start: usize,
        flow: bool,
        entries: Vec<Entry>,
        key: Option<(String, Range<usize>)>,
    },
}

impl Tree {
    /// Parses `src` (one document).
    pub fn parse(src: &str) -> Tree {
        let mut stack: Vec<Open> = Vec::new();
        let mut root = None;
        let mut syntax = None;
        for item in Parser::new_from_str(src) {
            let (event, span) = match item {
                Ok(e) => e,
                Err(e) => {
                    let offset = e.marker().byte_offset().unwrap_or(src.len()).min(src.len());
                    syntax = Some(SyntaxError {
                        message: e.info().to_string(),
                        offset,
                    });
                    break;
                }
            };
            let range = byte_range(&span, src);
            match event {
                Event::Scalar(value, style, ..) => {
                    let quoted =
                        matches!(style, ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted);
                    let start = scalar_start(src, &span, style);
                    // A block scalar's span runs to the next line; its node ends with its text.
                    let end = start + src[start..range.end.max(start)].trim_end().len();
                    let node = Node {
                        span: start..end,
                        kind: Kind::Scalar {
                            value: value.into_owned(),
                            quoted,
                        },
                        flow: false,
                    };
                    push(&mut stack, &mut root, node);
                }
                Event::Alias(_) => {
                    let node = Node {
                        span: range.clone(),
                        kind: Kind::Scalar {
                            value: src[range].to_string(),
                            quoted: false,
                        },
                        flow: false,
                    };
                    push(&mut stack, &mut root, node);
                }
                Event::SequenceStart(..) => stack.push(Open::Seq {
                    start: range.start,
                    flow: range.end > range.start,
                    items: Vec::new(),
                }),
                Event::MappingStart(..) => stack.push(Open::Map {
                    start: range.start,
                    flow: range.end > range.start,
                    entries: Vec::new(),
                    key: None,
                }),
                Event::SequenceEnd | Event::MappingEnd => {
                    if let Some(open) = stack.pop() {
                        let node = close(open, Some(range.end), src);
                        push(&mut stack, &mut root, node);
                    }
                }
                _ => {}
            }
        }
        // A syntax error leaves collections open: close them where they got to.
        while let Some(open) = stack.pop() {
            let node = close(open, None, src);
            push(&mut stack, &mut root, node);
        }
        Tree { root, syntax }
    }

    /// The node at `path` (`a.b[2].c`), if the document has it. Keys are
    /// matched as whole words, so a backend named `app.v1` is found too.
    pub fn find(&self, path: &str) -> Option<Found<'_>> {
        let mut found = Found {
            node: self.root.as_ref()?,
            key_span: None,
        };
        let mut rest = path;
        while !rest.is_empty() {
            found = match &found.node.kind {
                Kind::Map(entries) => {
                    let r = rest.strip_prefix('.').unwrap_or(rest);
                    let e = entries
                        .iter()
                        .filter(|e| {
                            r.starts_with(e.key.as_str())
                                && matches!(r.as_bytes().get(e.key.len()), None | Some(b'.' | b'['))
                        })
                        .max_by_key(|e| e.key.len())?;
                    rest = &r[e.key.len()..];
                    Found {
                        node: &e.value,
                        key_span: Some(&e.key_span),
                    }
                }
                Kind::Seq(items) => {
                    let r = rest.strip_prefix('[')?;
                    let close = r.find(']')?;
                    let i: usize = r[..close].parse().ok()?;
                    rest = &r[close + 1..];
                    Found {
                        node: items.get(i)?,
                        key_span: None,
                    }
                }
                Kind::Scalar { .. } => return None,
            };
        }
        Some(found)
    }

    /// The node at `path` or at its closest ancestor present in the document,
    /// with the path actually found.
    pub fn find_nearest(&self, path: &str) -> Option<(Found<'_>, String)> {
        let mut p = path.to_string();
        loop {
            if let Some(f) = self.find(&p) {
                return Some((f, p));
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }
}

/// Whether `path` is `base` or lies under it.
pub fn is_within(path: &str, base: &str) -> bool {
    base.is_empty()
        || path == base
        || (path.starts_with(base) && matches!(path.as_bytes().get(base.len()), Some(b'.' | b'[')))
}

fn byte_range(span: &Span, src: &str) -> Range<usize> {
    match span.byte_range() {
        Some(r) if r.start <= r.end && r.end <= src.len() => r,
        _ => src.len()..src.len(),
    }
}

/// A block scalar's span starts at its content; the `|` or `>` header belongs
/// to the node too (an edit must replace it as well).
fn scalar_start(src: &str, span: &Span, style: ScalarStyle) -> usize {
    let start = byte_range(span, src).start;
    if !matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
        return start;
    }
    let head = &src[..start];
    match head.rfind(['|', '>']) {
        Some(i)
            if head[i + 1..]
                .chars()
                .all(|c| c.is_whitespace() || c.is_ascii_digit() || c == '+' || c == '-') =>
        {
            i
        }
        _ => start,
    }
}

fn push(stack: &mut [Open], root: &mut Option<Node>, node: Node) {
    match stack.last_mut() {
        None => *root = Some(node),
        Some(Open::Seq { items, .. }) => items.push(node),
        Some(Open::Map { entries, key, .. }) => match key.take() {
            None => {
                let text = match &node.kind {
                    Kind::Scalar { value, .. } => value.clone(),
                    // A collection as a key: weir's schema has none; keep it findable by nothing.
                    _ => String::new(),
                };
                *key = Some((text, node.span));
            }
            Some((k, key_span)) => entries.push(Entry {
                key: k,
                key_span,
                value: node,
            }),
        },
    }
}

fn close(open: Open, end: Option<usize>, src: &str) -> Node {
    match open {
        Open::Seq { start, flow, items } => {
            let last = items.last().map_or(start, |n| n.span.end);
            let end = if flow { end.unwrap_or(last) } else { last };
            Node {
                span: start..end.max(start),
                kind: Kind::Seq(items),
                flow,
            }
        }
        Open::Map {
            start,
            flow,
            entries,
            ..
        } => {
            // An empty value (`key:`) has an empty span before its colon: the entry
            // ends after the colon.
            let last = entries.last().map_or(start, |e| {
                if e.value.span.is_empty() {
                    let colon = src[e.key_span.end..].find(':').map_or(0, |i| i + 1);
                    (e.key_span.end + colon).max(e.value.span.end)
                } else {
                    e.value.span.end
                }
            });
            let end = if flow { end.unwrap_or(last) } else { last };
            Node {
                span: start..end.max(start),
                kind: Kind::Map(entries),
                flow,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_keys_values_and_collections() {
        let src =
            "a:\n  b: 1\n  c: [x, y]\n  d:\n    - e: f\n      g: h\nz: {p: 1}\nt: |\n  text\n";
        let t = Tree::parse(src);
        assert!(t.syntax.is_none());
        let text = |p: &str| &src[t.find(p).unwrap().node.span.clone()];
        assert_eq!(text("a.b"), "1");
        assert_eq!(text("a.c"), "[x, y]");
        assert_eq!(text("a.c[1]"), "y");
        assert_eq!(text("a.d[0]"), "e: f\n      g: h");
        assert_eq!(text("z"), "{p: 1}");
        assert_eq!(text("t"), "|\n  text");
        let f = t.find("a.d[0].g").unwrap();
        assert_eq!(&src[f.key_span.unwrap().clone()], "g");
        assert!(t.find("a.nope").is_none());
        let (_, at) = t.find_nearest("a.d[0].nope.deeper").unwrap();
        assert_eq!(at, "a.d[0]");
    }

    #[test]
    fn a_syntax_error_keeps_the_tree_before_it() {
        let src = "a: 1\nb:\n  c: 2\n   d: 3\n";
        let t = Tree::parse(src);
        let e = t.syntax.clone().expect("syntax error");
        assert_eq!(&src[..e.offset].lines().count(), &4, "{e:?}");
        assert_eq!(&src[t.find("a").unwrap().node.span.clone()], "1");
    }

    #[test]
    fn paths_nest_and_keys_may_hold_dots() {
        let src = "backends:\n  app.v1:\n    endpoints: [a]\n  app:\n    endpoints: [b]\n";
        let t = Tree::parse(src);
        assert_eq!(
            &src[t
                .find("backends.app.v1.endpoints[0]")
                .unwrap()
                .node
                .span
                .clone()],
            "a"
        );
        assert_eq!(
            &src[t
                .find("backends.app.endpoints[0]")
                .unwrap()
                .node
                .span
                .clone()],
            "b"
        );
        assert!(is_within("a.b[1].c", "a.b"));
        assert!(is_within("a.b", "a.b"));
        assert!(!is_within("a.bc", "a.b"));
    }
}
