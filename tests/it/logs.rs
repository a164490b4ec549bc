//! Log lines of the real binary: plain text with no colour escapes when stderr is not a
//! terminal, and one JSON object per line with `--log-format json`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const CONFIG: &str = "listeners:
  - name: web
    address: 127.0.0.1:0
admin:
  address: 127.0.0.1:0
backends:
  b: { endpoints: [\"127.0.0.1:9\"] }
routes:
  - name: r
    primary: b
";

/// Starts `weir serve` with `args` before the subcommand, reads stderr up to the admin
/// listener's line, stops it and returns the lines read.
fn first_lines(args: &[&str], test: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("weir-logs-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("weir.yaml");
    std::fs::write(&config, CONFIG).expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .arg("serve")
        .arg("-c")
        .arg(&config)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        let line = line.expect("utf-8 log line");
        let done = line.contains("admin API listening");
        lines.push(line);
        if done || lines.len() > 50 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        lines.iter().any(|l| l.contains("admin API listening")),
        "weir never said it listens: {lines:#?}"
    );
    lines
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_escapes() {
    let lines = first_lines(&[], "text");
    for l in &lines {
        assert!(!l.contains('\u{1b}'), "ANSI escape in {l:?}");
    }
    assert!(lines.iter().any(|l| l.contains("INFO")), "{lines:#?}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let lines = first_lines(&["--log-format", "json"], "json");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        assert!(v["timestamp"].is_string(), "{l}");
        assert!(v["level"].is_string(), "{l}");
        assert!(v["fields"]["message"].is_string(), "{l}");
    }
    let admin = lines
        .iter()
        .find(|l| l.contains("admin API listening"))
        .expect("admin line");
    let v: serde_json::Value = serde_json::from_str(admin).expect("json");
    assert!(
        v["fields"]["admin_addr"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{admin}"
    );
}
