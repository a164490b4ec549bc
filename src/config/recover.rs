//! Every parse error of a file, not only the first.
//!
//! serde stops at the first mistake. To find the next one the text is
//! repaired where the deserializer stopped and parsed again, a bounded number
//! of times: an unknown or duplicate key is cut out, a value of the wrong type
//! is replaced by a placeholder of a type that fits, a missing required field
//! gets one. The paths of placeholders are remembered, so that what they cause
//! later (a `''` backend name is "unknown", a `{}` lacks its required fields)
//! is not reported as the user's mistake. A syntax error ends the search: what
//! follows it cannot be read.
//!
//! Positions always come from the *original* text (its [`Tree`]), looked up by
//! field path, so the edits never shift what the user is shown.

use super::locate::join_key;
use super::suggest::{all_of, did_you_mean};
use super::yaml_edit::{delete_entry, insert_field, replace_node, Edit};
use super::yaml_tree::{is_within, Found, Kind, Node, SyntaxError, Tree};
use serde::de::DeserializeOwned;
use std::ops::Range;

/// At most this many parse problems are collected from one file.
const MAX_PROBLEMS: usize = 50;
/// At most this many parses are spent on one file (each problem takes 1..6).
const MAX_ATTEMPTS: usize = 300;

/// One problem found while turning the text into the raw schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Field path of the place (for an unknown or duplicate key: its mapping).
    pub path: String,
    /// What is wrong.
    pub reason: String,
    /// Bytes of the original text to underline.
    pub span: Option<Range<usize>>,
    /// A hint: the field probably meant, the fields allowed, how to write it.
    pub help: Option<String>,
    /// Context: e.g. where a duplicated key was first set.
    pub note: Option<String>,
}

/// The outcome of [`parse_all`].
#[derive(Debug)]
pub struct Recovered<T> {
    /// The value: as written when `problems` is empty, else with the repairs
    /// (`None` when the text could not be repaired far enough, e.g. a syntax error).
    pub value: Option<T>,
    /// Every problem found, in the order the deserializer met them.
    pub problems: Vec<Problem>,
    /// Paths that hold a placeholder: nothing found at or under them is the user's.
    pub repaired: Vec<String>,
    /// For each misspelt field with a suggestion, the path of the field meant
    /// (`canaries[0].analysis.stepWeight`): its absence is the same mistake.
    pub misspelt: Vec<String>,
    /// The original text's tree (for locating later errors).
    pub tree: Tree,
}

/// Parses `src` into `T`, collecting every problem (bounded).
pub fn parse_all<T: DeserializeOwned>(src: &str) -> Recovered<T> {
    let tree = Tree::parse(src);
    let mut out = Recovered {
        value: None,
        problems: Vec::new(),
        repaired: Vec::new(),
        misspelt: Vec::new(),
        tree,
    };
    let mut text = src.to_string();
    let mut failure = match serde_saphyr::from_str::<T>(&text) {
        Ok(v) => {
            out.value = Some(v);
            return out;
        }
        Err(e) => tracked::<T>(&text)
            .err()
            .unwrap_or_else(|| Failure::untracked(e)),
    };
    let mut attempts = 1;
    loop {
        let current = Tree::parse(&text);
        let edited = text != src;
        if edited && current.syntax.is_some() && out.tree.syntax.is_none() {
            // A repair broke the text: stop with what was found (never blame the user).
            return out;
        }
        let artifact = out.repaired.iter().any(|r| is_within(&failure.path, r));
        let Some(plan) = plan(&failure, &out.tree, src, &current, &text) else {
            // Where the reader had no key yet in an edited text, the edit may be the cause.
            let unsure = edited && failure.path.contains('?');
            if (!artifact && !unsure) || out.tree.syntax.is_some() {
                out.problems
                    .push(describe_stop(&failure, &out.tree, src, edited));
            }
            return out;
        };
        if !artifact {
            out.problems.push(plan.problem.clone());
            out.misspelt.extend(plan.meant.clone());
        }
        if out.problems.len() >= MAX_PROBLEMS {
            return out;
        }
        // Try the edits in order; keep the first after which the parser gets further.
        let mut next = None;
        for edit in &plan.edits {
            if attempts >= MAX_ATTEMPTS {
                return out;
            }
            attempts += 1;
            let candidate = edit.apply(&text);
            match tracked::<T>(&candidate) {
                Ok(v) => {
                    out.repaired.extend(plan.repaired.iter().cloned());
                    out.value = Some(v);
                    return out;
                }
                Err(f) if f.path != failure.path || f.message != failure.message => {
                    next = Some((candidate, f));
                    break;
                }
                Err(_) => {}
            }
        }
        let Some((candidate, f)) = next else {
            return out;
        };
        out.repaired.extend(plan.repaired.iter().cloned());
        text = candidate;
        failure = f;
    }
}

/// A deserializer error with the path where it happened.
#[derive(Debug)]
struct Failure {
    /// Field path, `?` where the deserializer had not read the key yet.
    path: String,
    /// The message without position, for telling two failures apart.
    message: String,
    /// Boxed: serde-saphyr's error is large and a failure is moved around.
    error: Box<serde_saphyr::Error>,
}

impl Failure {
    fn untracked(error: serde_saphyr::Error) -> Failure {
        Failure {
            path: String::new(),
            message: message(&error),
            error: Box::new(error),
        }
    }
}

fn tracked<T: DeserializeOwned>(text: &str) -> Result<T, Failure> {
    let mut path = String::new();
    let r = serde_saphyr::with_deserializer_from_str(text, |de| {
        let mut track = serde_path_to_error::Track::new();
        let r = T::deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
        if r.is_err() {
            path = track.path().to_string();
        }
        r
    });
    r.map_err(|error| Failure {
        path: if path == "." { String::new() } else { path },
        message: message(&error),
        error: Box::new(error),
    })
}

fn message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    serde_saphyr::UserMessageFormatter
        .format_message(e.without_snippet())
        .into_owned()
}

/// What to report for a failure and how to get past it.
struct Plan {
    problem: Problem,
    /// Alternative edits of the current text, best first.
    edits: Vec<Edit>,
    /// Paths that will hold a placeholder once an edit is applied.
    repaired: Vec<String>,
    /// The path of the field a misspelt one probably meant.
    meant: Option<String>,
}

fn plan(f: &Failure, orig: &Tree, src: &str, current: &Tree, text: &str) -> Option<Plan> {
    use serde_saphyr::Error as E;
    match f.error.without_snippet() {
        E::SerdeUnknownField {
            field, expected, ..
        } => {
            let parent = f
                .path
                .strip_suffix(field.as_str())
                .map(|p| p.strip_suffix('.').unwrap_or(p))
                .unwrap_or(&f.path)
                .to_string();
            let at = orig.find(&join_key(&parent, field));
            let meant = did_you_mean(field, expected.iter().copied());
            let help = match meant {
                Some(m) => Some(format!("did you mean `{m}`?")),
                None if expected.is_empty() => Some("no fields are allowed here".to_string()),
                None => Some(format!("the fields allowed here are {}", all_of(expected))),
            };
            Some(Plan {
                problem: Problem {
                    path: parent.clone(),
                    reason: format!("unknown field `{field}`"),
                    span: at.and_then(|a| a.key_span.cloned()),
                    help,
                    note: None,
                },
                edits: delete_entry(current, text, &parent, field, 0)
                    .into_iter()
                    .collect(),
                repaired: Vec::new(),
                meant: meant.map(|m| join_key(&parent, m)),
            })
        }
        E::DuplicateMappingKey { key: Some(key), .. } => {
            let parent = f
                .path
                .trim_end_matches('?')
                .trim_end_matches('.')
                .to_string();
            let (span, note) = match orig.find(&parent).map(|p| &p.node.kind) {
                Some(Kind::Map(entries)) => {
                    let mut same = entries.iter().filter(|e| &e.key == key);
                    let first = same.next();
                    (
                        same.next().map(|e| e.key_span.clone()),
                        first.map(|e| {
                            format!(
                                "`{key}` is first set on line {}",
                                line_of(src, e.key_span.start)
                            )
                        }),
                    )
                }
                _ => (None, None),
            };
            Some(Plan {
                problem: Problem {
                    path: parent.clone(),
                    reason: format!("duplicate key `{key}`"),
                    span,
                    help: Some("a key may appear only once in a mapping".to_string()),
                    note,
                },
                edits: delete_entry(current, text, &parent, key, 1)
                    .into_iter()
                    .collect(),
                repaired: Vec::new(),
                meant: None,
            })
        }
        E::SerdeMissingField { field, .. } => {
            if f.path.contains('?') {
                return None;
            }
            let at = orig.find(&f.path);
            Some(Plan {
                problem: Problem {
                    path: f.path.clone(),
                    reason: format!("missing required field `{field}`"),
                    span: at.map(|a| head_span(a, src)),
                    help: None,
                    note: None,
                },
                edits: insert_field(current, text, &f.path, field, &Expect::Unknown.candidates()),
                repaired: vec![join_key(&f.path, field)],
                meant: None,
            })
        }
        E::ExternalMessage { .. } => None,
        other => {
            if f.path.contains('?') {
                return None;
            }
            let (expected, wanted) = expectation(other, &f.message);
            let at = orig.find(&f.path);
            let reason = match (expected, at) {
                (Expect::Unknown, _) | (_, None) => wanted,
                (_, Some(a)) => format!("expected {wanted}, found {}", describe(a.node)),
            };
            let help = match (expected, at.map(|a| &a.node.kind)) {
                (Expect::List, Some(Kind::Scalar { value, .. })) if !value.is_empty() => Some(
                    format!("a list is written `[{value}]`, or one `- item` per line"),
                ),
                (Expect::Mapping, Some(Kind::Scalar { .. })) => indent_hint(orig, &f.path),
                _ => None,
            };
            let node = current.find(&f.path)?.node;
            Some(Plan {
                problem: Problem {
                    path: f.path.clone(),
                    reason,
                    span: at.map(|a| match a.key_span {
                        // An empty value: underline its key.
                        Some(k) if a.node.span.is_empty() => k.clone(),
                        _ => first_line(&a.node.span, src),
                    }),
                    help,
                    note: None,
                },
                edits: expected
                    .candidates()
                    .iter()
                    .map(|c| replace_node(node, c, text))
                    .collect(),
                repaired: vec![f.path.clone()],
                meant: None,
            })
        }
    }
}

/// The problem to report when no repair is possible: the syntax error if the
/// original text has one, else the deserializer's own message where it stopped.
fn describe_stop(f: &Failure, orig: &Tree, src: &str, edited: bool) -> Problem {
    if let Some(SyntaxError { message, offset }) = &orig.syntax {
        return syntax_problem(message, *offset, src);
    }
    let path = f
        .path
        .trim_end_matches('?')
        .trim_end_matches('.')
        .to_string();
    let span = if edited {
        orig.find(&path).map(|a| head_span(a, src))
    } else {
        f.error.location().and_then(|l| {
            let start = usize::try_from(l.span().byte_offset()?).ok()?;
            let len = usize::try_from(l.span().byte_len().unwrap_or(1)).ok()?;
            (start <= src.len()).then(|| first_line(&(start..start.saturating_add(len)), src))
        })
    };
    Problem {
        path,
        reason: f.message.clone(),
        span,
        help: None,
        note: None,
    }
}

/// A YAML syntax error, with a hint when the line is indented unlike its neighbours.
fn syntax_problem(message: &str, offset: usize, src: &str) -> Problem {
    let offset = offset.min(src.len());
    let line_start = src[..offset].rfind('\n').map_or(0, |i| i + 1);
    let this = &src[line_start..];
    let this = &this[..this.find('\n').unwrap_or(this.len())];
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let above = src[..line_start]
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let help = match above {
        Some(a) if !this.trim().is_empty() && indent(a) != indent(this) && !a.trim_end().ends_with(':') => Some(format!(
            "this line is indented by {} spaces and the line above by {}: the keys of one mapping must line up",
            indent(this),
            indent(a)
        )),
        _ if this.contains('\t') => Some("YAML indents with spaces, not tabs".to_string()),
        _ => None,
    };
    let end = if offset < src.len() && !src[offset..].starts_with('\n') {
        offset + src[offset..].chars().next().map_or(1, char::len_utf8)
    } else {
        offset
    };
    Problem {
        path: String::new(),
        reason: format!("invalid YAML: {message}"),
        span: Some(offset..end),
        help,
        note: None,
    }
}

/// A `key: value` where a named mapping was expected, right after a sibling
/// mapping: most often a field of that sibling indented too little.
fn indent_hint(orig: &Tree, path: &str) -> Option<String> {
    let (parent, key) = path.rsplit_once('.')?;
    let Kind::Map(entries) = &orig.find(parent)?.node.kind else {
        return None;
    };
    let i = entries.iter().position(|e| e.key == key)?;
    let prev = entries.get(i.checked_sub(1)?)?;
    match &prev.value.kind {
        Kind::Map(fields) if !prev.value.flow && !fields.is_empty() => Some(format!(
            "if `{key}` is a field of `{}` above, indent it as far as `{}`",
            prev.key, fields[0].key
        )),
        _ => None,
    }
}

/// What the deserializer wanted, in words, and placeholders of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Integer,
    Number,
    Bool,
    Str,
    List,
    Mapping,
    Unknown,
}

impl Expect {
    /// Placeholders to try, the one of the wanted type first.
    fn candidates(self) -> Vec<&'static str> {
        let first = match self {
            Expect::Integer | Expect::Number => "0",
            Expect::Bool => "false",
            Expect::Str => "''",
            Expect::List => "[]",
            Expect::Mapping => "{}",
            Expect::Unknown => "0",
        };
        let mut all = vec![first];
        for c in ["0", "''", "false", "[]", "{}"] {
            if !all.contains(&c) {
                all.push(c);
            }
        }
        all
    }
}

fn expectation(e: &serde_saphyr::Error, message: &str) -> (Expect, String) {
    use serde_saphyr::Error as E;
    let from_type = |t: &str| -> (Expect, String) {
        let t = t.trim();
        if t.starts_with('i') || t.starts_with('u') && t[1..].chars().all(|c| c.is_ascii_digit()) {
            (Expect::Integer, "an integer".into())
        } else if t.starts_with('f') && t.len() <= 3 {
            (Expect::Number, "a number".into())
        } else if t == "bool" || t == "a boolean" {
            (Expect::Bool, "`true` or `false`".into())
        } else if t.contains("string") {
            (Expect::Str, "a string".into())
        } else if t.contains("sequence") {
            (Expect::List, "a list".into())
        } else if t.contains("map") || t.starts_with("struct") {
            (Expect::Mapping, "a mapping".into())
        } else {
            (Expect::Unknown, message.to_string())
        }
    };
    match e {
        E::InvalidScalar { ty, .. } => from_type(ty),
        E::Unexpected { expected, .. } => from_type(expected),
        E::SerdeInvalidType { expected, .. } => from_type(expected),
        E::NullIntoString { .. } => (Expect::Str, "a string".into()),
        E::InvalidBooleanStrict { .. } => (Expect::Bool, "`true` or `false`".into()),
        _ if message.contains("untagged enum RawIntOrPercent") => (
            Expect::Integer,
            "a count or a percentage (`1`, `\"25%\"`)".into(),
        ),
        _ if message.contains("untagged enum RawReplicas") => {
            (Expect::Integer, "a number or `auto`".into())
        }
        _ => (Expect::Unknown, message.to_string()),
    }
}

/// How a node reads in "found …".
fn describe(n: &Node) -> String {
    match &n.kind {
        Kind::Scalar { value, quoted } => {
            if !quoted && matches!(value.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                "nothing (null)".to_string()
            } else {
                let line = value.lines().next().unwrap_or("");
                let short: String = line.chars().take(40).collect();
                let more = if short.len() < value.trim_end().len() {
                    "…"
                } else {
                    ""
                };
                if *quoted {
                    format!("the string \"{short}{more}\"")
                } else {
                    format!("`{short}{more}`")
                }
            }
        }
        Kind::Seq(_) => "a list".to_string(),
        Kind::Map(_) => "a mapping".to_string(),
    }
}

/// The key of a mapping value, else the first key of a mapping (a sequence
/// item), else the first line of the node.
fn head_span(f: Found<'_>, src: &str) -> Range<usize> {
    match (f.key_span, &f.node.kind) {
        (Some(k), _) => k.clone(),
        (None, Kind::Map(entries)) if !entries.is_empty() => entries[0].key_span.clone(),
        _ => first_line(&f.node.span, src),
    }
}

/// `span` cut at its first line break, without trailing blanks; at least one character.
pub fn first_line(span: &Range<usize>, src: &str) -> Range<usize> {
    let start = span.start.min(src.len());
    let end = span.end.clamp(start, src.len());
    let text = &src[start..end];
    let cut = text.find('\n').unwrap_or(text.len());
    let len = text[..cut].trim_end().len();
    if len == 0 {
        let next = src[start..].chars().next().filter(|c| *c != '\n');
        return start..start + next.map_or(0, char::len_utf8);
    }
    start..start + len
}

/// 1-based line of a byte offset.
pub fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())].matches('\n').count() + 1
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
