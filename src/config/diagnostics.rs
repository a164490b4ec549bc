//! `weir check`'s report: every parse and validation error of a file, and
//! every warning, each with its field path, `file:line:col`, the source line
//! with a caret under the offending text and a hint where one helps, rendered
//! as rustc and cargo render theirs (with their own renderer,
//! `annotate-snippets`). `weir serve` and a SIGHUP reload print the same.
//!
//! ```text
//! error: canaries[0].analysis: unknown field `stepWieght`
//!   --> weir.yaml:14:7
//!    |
//! 14 |       stepWieght: 10
//!    |       ^^^^^^^^^^
//!    |
//!    = help: did you mean `stepWeight`?
//! ```

use super::locate::Locations;
use super::raw::RawConfig;
use super::recover::{first_line, parse_all};
use super::suggest::did_you_mean;
use super::validate::{validate_all, Config};
use super::yaml_tree::{is_within, Kind, Tree};
use super::{ConfigError, ConfigErrors};
use annotate_snippets::{AnnotationKind, Group, Level, Origin, Renderer, Snippet};
use std::ops::Range;
use std::path::Path;

/// Whether a diagnostic refuses the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file is refused.
    Error,
    /// Reported only: the field is accepted and has no effect.
    Warning,
}

/// One finding, ready to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Field path and reason, with the location the one-line form prints.
    pub error: ConfigError,
    /// Bytes of the source to underline.
    pub span: Option<Range<usize>>,
    /// `= help:` line.
    pub help: Option<String>,
    /// `= note:` line.
    pub note: Option<String>,
}

/// Everything found in one file.
#[derive(Debug, Clone)]
pub struct Report {
    /// The file name as given.
    pub file: String,
    /// The file's text (the excerpts are cut from it).
    pub source: String,
    /// In document order.
    pub diagnostics: Vec<Diagnostic>,
}

/// A checked file: its report and, when it has no error, the loaded config.
#[derive(Debug)]
pub struct Checked {
    /// What was found.
    pub report: Report,
    /// The file as parsed and its validated config; `None` on any error.
    pub loaded: Option<(RawConfig, Config)>,
}

/// Reads and checks a file (relative paths inside are resolved against its directory).
pub fn check_file(path: &Path) -> Checked {
    let label = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(src) => check_source(&src, &label, path.parent().unwrap_or(Path::new("."))),
        Err(e) => Checked {
            report: Report {
                file: label,
                source: String::new(),
                diagnostics: vec![Diagnostic {
                    severity: Severity::Error,
                    error: ConfigError::new("", format!("cannot read file: {e}")),
                    span: None,
                    help: None,
                    note: None,
                }],
            },
            loaded: None,
        },
    }
}

/// Checks YAML text: all parse errors, then (on what could be parsed or
/// repaired) all validation errors and warnings.
pub fn check_source(src: &str, label: &str, base: &Path) -> Checked {
    let recovered = parse_all::<RawConfig>(src);
    let tree = &recovered.tree;
    let locations = Locations::index(src);
    let mut diagnostics: Vec<Diagnostic> = recovered
        .problems
        .iter()
        .map(|p| Diagnostic {
            severity: Severity::Error,
            error: ConfigError {
                path: p.path.clone(),
                reason: p.reason.clone(),
                location: p.span.as_ref().map(|s| line_col(src, s.start)),
            },
            span: p.span.clone(),
            help: p.help.clone(),
            note: p.note.clone(),
        })
        .collect();
    let mut loaded = None;
    if let Some(raw) = recovered.value {
        let (result, warnings) = validate_all(raw.clone(), base);
        // What a placeholder caused is not the user's mistake, nor is the
        // absence of a field whose misspelling was already reported.
        let theirs = |e: &ConfigError| {
            !recovered.repaired.iter().any(|r| is_within(&e.path, r))
                && !recovered
                    .misspelt
                    .iter()
                    .any(|m| is_within(&e.path, m) && tree.find(m).is_none())
        };
        let mut add = |severity, mut e: ConfigError| {
            e.location = locations.find(&e.path);
            let help = reference_help(&e, &raw).or_else(|| value_help(&e, tree));
            diagnostics.push(Diagnostic {
                severity,
                span: span_of(tree, src, &e.path),
                help,
                note: None,
                error: e,
            });
        };
        for w in warnings.into_iter().filter(|w| theirs(w)) {
            add(Severity::Warning, w);
        }
        match result {
            Ok(mut cfg) if recovered.problems.is_empty() => {
                for w in &mut cfg.warnings {
                    w.location = locations.find(&w.path);
                }
                cfg.warnings
                    .sort_by_key(|w| w.location.unwrap_or((usize::MAX, 0)));
                loaded = Some((raw, cfg));
            }
            Ok(_) => {}
            Err(errors) => {
                for e in errors.into_iter().filter(|e| theirs(e)) {
                    add(Severity::Error, e);
                }
            }
        }
    }
    // Document order, as a compiler reports; what has no place comes last.
    diagnostics.sort_by_key(|d| d.span.as_ref().map_or(usize::MAX, |s| s.start));
    Checked {
        report: Report {
            file: label.to_string(),
            source: src.to_string(),
            diagnostics,
        },
        loaded,
    }
}

/// `weir check`: the report on stderr, the verdict on stdout; true when the
/// file has no error.
pub fn check_command(path: &Path, colour: bool) -> bool {
    let checked = check_file(path);
    eprint!("{}", checked.report.render(colour));
    match &checked.loaded {
        Some((_, c)) => {
            for note in super::provider_notes(c) {
                println!("{}: note: {note}", path.display());
            }
            println!(
                "{}: ok ({} listeners, {} backends, {} routes, {} canaries)",
                path.display(),
                c.listeners.len(),
                c.table.backends.len(),
                c.table.routing.routes.len(),
                c.canaries.len()
            );
            true
        }
        None => false,
    }
}

impl Report {
    /// How many diagnostics refuse the file.
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// How many are warnings.
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, s: Severity) -> usize {
        self.diagnostics.iter().filter(|d| d.severity == s).count()
    }

    /// The errors in the one-line form (`file:line:col: path: reason`), as the
    /// library's loaders return them.
    pub fn config_errors(&self) -> ConfigErrors {
        ConfigErrors {
            file: self.file.clone(),
            errors: self
                .diagnostics
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .map(|d| d.error.clone())
                .collect(),
        }
    }

    /// Every diagnostic and the summary line, with ANSI colour when `colour`.
    /// Empty when there is nothing to say.
    pub fn render(&self, colour: bool) -> String {
        let renderer = if colour {
            Renderer::styled()
        } else {
            Renderer::plain()
        };
        let mut out = String::new();
        for d in &self.diagnostics {
            out.push_str(&renderer.render(&[self.group(d)]));
            out.push_str("\n\n");
        }
        let (errors, warnings) = (self.errors(), self.warnings());
        let summary = if errors > 0 {
            let mut s = format!(
                "could not validate `{}` due to {}",
                self.file,
                plural(errors, "previous error")
            );
            if warnings > 0 {
                s.push_str(&format!("; {} emitted", plural(warnings, "warning")));
            }
            Some(Level::ERROR.primary_title(s))
        } else if warnings > 0 {
            Some(Level::WARNING.primary_title(format!(
                "`{}` generated {}",
                self.file,
                plural(warnings, "warning")
            )))
        } else {
            None
        };
        if let Some(title) = summary {
            out.push_str(&renderer.render(&[Group::with_title(title)]));
            out.push('\n');
        }
        out
    }

    fn group<'a>(&'a self, d: &'a Diagnostic) -> Group<'a> {
        let level = match d.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let e = &d.error;
        let title = if e.path.is_empty() {
            e.reason.clone()
        } else {
            format!("{}: {}", e.path, e.reason)
        };
        let mut group = Group::with_title(level.primary_title(title));
        group = match &d.span {
            Some(span) => group.element(
                Snippet::source(self.source.as_str())
                    .path(self.file.as_str())
                    .annotation(AnnotationKind::Primary.span(span.clone())),
            ),
            None => group.element(Origin::path(self.file.as_str())),
        };
        if let Some(note) = &d.note {
            group = group.element(Level::NOTE.message(note.as_str()));
        }
        if let Some(help) = &d.help {
            group = group.element(Level::HELP.message(help.as_str()));
        }
        group
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let line_start = src[..offset].rfind('\n').map_or(0, |i| i + 1);
    (
        src[..offset].matches('\n').count() + 1,
        src[line_start..offset].chars().count() + 1,
    )
}

/// What to underline for an error at `path`: a scalar value itself, else the
/// key of the value (or of its closest ancestor in the file: a missing field
/// is reported on the mapping that lacks it).
fn span_of(tree: &Tree, src: &str, path: &str) -> Option<Range<usize>> {
    let (found, at) = tree.find_nearest(path)?;
    if at == path && matches!(found.node.kind, Kind::Scalar { .. }) && !found.node.span.is_empty() {
        return Some(first_line(&found.node.span, src));
    }
    match found.key_span {
        Some(k) => Some(k.clone()),
        None => Some(first_line(&found.node.span, src)),
    }
}

/// "did you mean `app-blue`?" for a name that refers to another section.
fn reference_help(e: &ConfigError, raw: &RawConfig) -> Option<String> {
    let name = e
        .reason
        .split_once('"')
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(n, _)| n)?;
    let candidates: Vec<&str> = if e.reason.starts_with("unknown backend") {
        raw.backends.keys().map(String::as_str).collect()
    } else if e.reason.starts_with("unknown route") {
        raw.routes.iter().map(|r| r.name.as_str()).collect()
    } else if e.reason.starts_with("no alertProviders entry named") {
        raw.alert_providers.keys().map(String::as_str).collect()
    } else {
        return None;
    };
    match did_you_mean(name, candidates.iter().copied()) {
        Some(m) => Some(format!("did you mean `{m}`?")),
        None if candidates.is_empty() => None,
        None => Some(format!(
            "defined here: {}",
            super::suggest::one_of(&candidates)
        )),
    }
}

/// How to write a value that almost parses: a word close to one of the words
/// the reason lists (`expected swap or webhook (got "swapp")`), a duration
/// with a space.
fn value_help(e: &ConfigError, tree: &Tree) -> Option<String> {
    if let Some(m) = choice_help(&e.reason) {
        return Some(m);
    }
    if !e.reason.contains("in duration") {
        return None;
    }
    let Kind::Scalar { value, .. } = &tree.find(&e.path)?.node.kind else {
        return None;
    };
    let joined: String = value.split_whitespace().collect();
    (joined != *value && super::parse_duration(&joined).is_ok())
        .then(|| format!("write it without spaces: `{joined}`"))
}

/// "did you mean" for a reason of the form `expected a, b or c (got "x")` or
/// `unknown … "x"; expected one of a, b, c`, when every choice is one word.
fn choice_help(reason: &str) -> Option<String> {
    let got = reason.split_once('"')?.1.split_once('"')?.0;
    let list = reason.split_once("expected ")?.1;
    let list = list.strip_prefix("one of ").unwrap_or(list);
    let list = list.split([';', '(']).next()?.trim();
    let choices: Vec<&str> = list
        .split(", ")
        .flat_map(|c| c.split(" or "))
        .map(str::trim)
        .collect();
    let one_word = |c: &&str| {
        !c.is_empty()
            && c.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == ':')
    };
    if choices.len() < 2 || !choices.iter().all(one_word) {
        return None;
    }
    did_you_mean(got, choices.iter().copied()).map(|m| format!("did you mean `{m}`?"))
}

#[cfg(test)]
#[path = "diagnostics_tests.rs"]
mod tests;
