//! The module layering of `src/lib.rs`, held by the code: every `crate::…`
//! path in a source file of `src/` names a module listed before the file's
//! own top-level module in [`ORDER`]. So no import cycle can come back, and a
//! lower layer (config, the data-plane state, the API framework) never learns
//! of a feature above it. Unit-test files (`tests.rs`, `*_tests.rs`, and
//! `#[cfg(test)] mod tests { … }` at the end of a file) may reach anywhere.

use std::path::{Path, PathBuf};

/// Bottom to top; a module may use only modules before it.
const ORDER: &[&str] = &[
    // pure or leaf
    "text",
    "stats",
    "affinity",
    "routing",
    "headers",
    "clock",
    "echo",
    "probe",
    // configuration, and the API documents (some are config's raw types)
    "config",
    "wire",
    // data-plane state
    "dataplane",
    // the proxy, the API framework, reload
    "proxy",
    "control",
    "reload",
    // features
    "endpoints",
    "providers",
    "table_api",
    "cluster",
    "rollout",
    "console",
    // composition and commands
    "app",
    "ctl",
    "load",
    "demo",
    "sim",
    "import",
    "cli",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's code without its trailing `#[cfg(test)] mod tests { … }`.
fn non_test_code(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    }
}

#[test]
fn every_module_uses_only_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let name = rel.file_name().unwrap().to_str().unwrap();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let top = rel
            .iter()
            .next()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs");
        if matches!(top, "lib" | "main") {
            continue;
        }
        let Some(me) = ORDER.iter().position(|m| *m == top) else {
            wrong.push(format!(
                "{}: module `{top}` is not in ORDER: place it in its layer",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (i, _) in non_test_code(&text).match_indices("crate::") {
            let used: String = text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if used.is_empty() || used == top {
                continue;
            }
            match ORDER.iter().position(|m| *m == used) {
                Some(u) if u < me => {}
                Some(_) => wrong.push(format!(
                    "{}: `{top}` uses `crate::{used}`, which is above it",
                    rel.display()
                )),
                None => wrong.push(format!(
                    "{}: `crate::{used}` is not in ORDER",
                    rel.display()
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}
