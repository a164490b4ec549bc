//! Flagger's query templates: `{{ name }}`, `{{ namespace }}`, `{{ target }}`,
//! `{{ service }}`, `{{ ingress }}`, `{{ route }}`, `{{ interval }}` and
//! `{{ variables.X }}` in a PromQL query, a web metric's URL or a header value; and
//! weir's `{{ runStart }}` and `{{ runAge }}`, which place a query in the current run.
//!
//! Flagger renders these with Go's `text/template` (`observers.RenderQuery`, with
//! `missingkey=error`), each variable a niladic function. The subset a query template
//! can use there is what is accepted here, spelt the same way: spaces inside the braces
//! are optional, `{{-` and `-}}` trim the whitespace before and after the action as in
//! Go, and `variables.X` names a key of the metric's `templateVariables`. Any other
//! action (`{{ if }}`, pipelines, `{{ .Field }}`, Argo's `{{ args.x }}`) is refused
//! with the reason, at `weir check`, never sent to a provider half-rendered.
//!
//! Every value but the run's times is known when the config is loaded (the canary, its
//! route, the metric's interval and variables), and the run's times always exist at a
//! check, so a template that passes [`parse`] and whose variables are all defined
//! always renders. PURE: no IO.

use std::collections::BTreeMap;

/// `{{ namespace }}`: weir has no namespaces; Flagger receivers and pasted queries
/// expect one.
pub const NAMESPACE: &str = "default";

/// The variable names Flagger's template model defines, besides `variables.X`.
pub const VARIABLES: [&str; 9] = [
    "name",
    "namespace",
    "target",
    "service",
    "ingress",
    "route",
    "interval",
    "runStart",
    "runAge",
];

/// One `{{ … }}` action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    /// One of [`VARIABLES`].
    Model(&'static str),
    /// `variables.X`: a key of `templateVariables`.
    Custom(String),
}

impl std::fmt::Display for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Var::Model(v) => write!(f, "{{{{ {v} }}}}"),
            Var::Custom(k) => write!(f, "{{{{ variables.{k} }}}}"),
        }
    }
}

/// A template cut into literal text and variables (trim markers already applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Copied as written.
    Text(String),
    /// Replaced by its value.
    Var(Var),
}

/// The values of one metric's variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateVars {
    /// `{{ name }}`: the canary.
    pub name: String,
    /// `{{ namespace }}`: always `default` in weir.
    pub namespace: String,
    /// `{{ target }}`, `{{ service }}`, `{{ ingress }}`, `{{ route }}`: the canary's route.
    pub target: String,
    /// `{{ interval }}`: the metric's interval as a Prometheus duration (`1m`, `30s`).
    pub interval: String,
    /// `{{ variables.X }}`: the metric's `templateVariables`.
    pub variables: BTreeMap<String, String>,
    /// `{{ runStart }}` (weir's own): the Unix time in seconds where the check's run
    /// starts counting (the run's start, or a later change of the route made outside
    /// the engine), for PromQL's `@` modifier or a comparison with `timestamp()`.
    pub run_start: String,
    /// `{{ runAge }}` (weir's own): the time since then as a Prometheus duration, at
    /// least `1s`, so `rate(x[{{ runAge }}])` covers the run's traffic alone.
    pub run_age: String,
}

impl TemplateVars {
    /// The value of `var`, `None` for a `variables.X` that is not defined.
    pub fn get(&self, var: &Var) -> Option<&str> {
        match var {
            Var::Model("name") => Some(&self.name),
            Var::Model("namespace") => Some(&self.namespace),
            Var::Model("interval") => Some(&self.interval),
            Var::Model("runStart") => Some(&self.run_start),
            Var::Model("runAge") => Some(&self.run_age),
            Var::Model(_) => Some(&self.target),
            Var::Custom(k) => self.variables.get(k).map(String::as_str),
        }
    }
}

/// Whether a `variables.X` key can be written in a template (Go's identifier rule).
fn identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

fn action(inner: &str) -> Result<Var, String> {
    let word = inner.trim();
    if let Some(v) = VARIABLES.iter().find(|v| **v == word) {
        return Ok(Var::Model(v));
    }
    if let Some(key) = word.strip_prefix("variables.") {
        if identifier(key) {
            return Ok(Var::Custom(key.to_string()));
        }
        return Err(format!(
            "{{{{ {word} }}}}: a variable key uses letters, digits and '_' (Go's template syntax)"
        ));
    }
    if let Some(key) = word.strip_prefix("args.") {
        return Err(format!(
            "{{{{ {word} }}}} is Argo Rollouts' syntax: write {{{{ variables.{key} }}}} and set it in the metric's templateVariables"
        ));
    }
    Err(format!(
        "unknown template variable {{{{ {word} }}}}; known: {}, variables.X",
        VARIABLES.join(", ")
    ))
}

/// Cuts `src` into pieces; `Err` names the first action that is not a variable, or an
/// unclosed `{{`.
pub fn parse(src: &str) -> Result<Vec<Piece>, String> {
    let mut out: Vec<Piece> = Vec::new();
    let mut text = String::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut before = &rest[..start];
        if trim_next {
            before = before.trim_start();
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!(
                "unclosed {{{{ at {:?}",
                after.chars().take(30).collect::<String>()
            ));
        };
        let mut inner = &after[..end];
        // Go: "{{- " trims the text before, " -}}" the text after; the dash must be
        // set off by a space, else it is a number's sign.
        if let Some(r) = inner
            .strip_prefix('-')
            .filter(|r| r.starts_with(char::is_whitespace))
        {
            before = before.trim_end();
            inner = r;
        }
        trim_next = false;
        if let Some(r) = inner
            .strip_suffix('-')
            .filter(|r| r.ends_with(char::is_whitespace))
        {
            trim_next = true;
            inner = r;
        }
        text.push_str(before);
        let var = action(inner)?;
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(Piece::Var(var));
        rest = &after[end + 2..];
    }
    text.push_str(if trim_next { rest.trim_start() } else { rest });
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// The `variables.X` keys `pieces` uses that `variables` does not define, in order,
/// each once.
pub fn missing(pieces: &[Piece], variables: &BTreeMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in pieces {
        if let Piece::Var(Var::Custom(k)) = p {
            if !variables.contains_key(k) && !out.contains(k) {
                out.push(k.clone());
            }
        }
    }
    out
}

/// Renders `src` with `vars`. `Err` for a template [`parse`] refuses or a
/// `variables.X` that is not defined (which validation reports first, with its path).
pub fn render(src: &str, vars: &TemplateVars) -> Result<String, String> {
    let pieces = parse(src)?;
    let mut out = String::with_capacity(src.len());
    for p in &pieces {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Var(v) => match vars.get(v) {
                Some(value) => out.push_str(value),
                None => return Err(format!("{v} is not set in templateVariables")),
            },
        }
    }
    Ok(out)
}

/// `{{ interval }}`: a duration as Prometheus writes one (`2m`, `90s`, `500ms`).
pub fn prometheus_duration(d: std::time::Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms > 0 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms > 0 && ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}ms", ms.max(1))
    }
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
