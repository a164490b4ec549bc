//! The README's quick start, run as written: the ```sh blocks between the
//! `<!-- quickstart ... -->` and `<!-- /quickstart -->` markers are joined into one bash
//! script (`set -eu`, so any failing command fails the test) and run against the binary
//! under test.
//!
//! So that the README stays copy-pasteable as written, the test rewrites only what a
//! parallel test run needs rewritten, and nothing else:
//! - `./target/release/weir` becomes the binary under test;
//! - every `127.0.0.1:PORT` of the script and of `config/canary.yaml` becomes a free
//!   loopback port (consistently in both), and the script's `config/canary.yaml` becomes
//!   the rewritten copy;
//! - `/tmp/NAME.log` files go to a directory of the test's own;
//! - `weir ctl` reaches the rewritten admin port through `WEIR_API`, as a user with
//!   another port would set it.
//!
//! Then the outcomes the README promises are checked in the script's output.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

const START: &str = "<!-- quickstart";
const END: &str = "<!-- /quickstart -->";
/// The binary as the README names it.
const README_BINARY: &str = "./target/release/weir";
/// The whole quick start takes about a minute (two runs of 5 s steps); a hang guard.
const GUARD: Duration = Duration::from_secs(300);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ```sh blocks between the markers, in order.
fn quickstart_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find(START)
        .expect("README has the quick-start start marker");
    let end = readme
        .find(END)
        .expect("README has the quick-start end marker");
    assert!(start < end, "markers out of order");
    let section = &readme[start..end];
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(open) = rest.find("```sh\n") {
        let body = &rest[open + 6..];
        let close = body.find("\n```").expect("an unclosed ```sh block");
        blocks.push(body[..close + 1].to_string());
        rest = &body[close + 4..];
    }
    blocks
}

/// Every `127.0.0.1:PORT` in `text`.
fn ports(text: &str) -> Vec<u16> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("127.0.0.1:") {
        rest = &rest[i + 10..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(p) = digits.parse::<u16>() {
            if p != 0 && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

fn rewrite_ports(text: &str, map: &BTreeMap<u16, u16>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + 10]);
        rest = &rest[i + 10..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        match digits.parse::<u16>().ok().and_then(|p| map.get(&p)) {
            Some(new) => out.push_str(&new.to_string()),
            None => out.push_str(&digits),
        }
        rest = &rest[digits.len()..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_markers_select_every_step_and_the_rewrite_keeps_the_rest() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = quickstart_blocks(&readme);
    assert_eq!(blocks.len(), 5, "{blocks:#?}");
    let script = blocks.concat();
    for cmd in [
        "weir echo --listen 127.0.0.1:9001 --version v1 &",
        "weir serve -c config/canary.yaml",
        "weir load http://127.0.0.1:8080/",
        "weir ctl deploy app-green 127.0.0.1:9102",
        "weir ctl watch app",
        "weir ctl deploy app-blue 127.0.0.1:9103",
        "kill $(jobs -p)",
    ] {
        assert!(script.contains(cmd), "the quick start lost {cmd:?}");
    }
    // One way of naming the binary throughout (the one the test substitutes).
    for line in script.lines().filter(|l| l.contains("weir ")) {
        assert!(line.contains(README_BINARY), "{line}");
    }
    let map: BTreeMap<u16, u16> = [(9001, 40001), (8080, 40002)].into();
    assert_eq!(
        rewrite_ports("a 127.0.0.1:9001 b 127.0.0.1:8080/ c 127.0.0.1:7 d", &map),
        "a 127.0.0.1:40001 b 127.0.0.1:40002/ c 127.0.0.1:7 d"
    );
    assert_eq!(
        ports("x 127.0.0.1:9001 127.0.0.1:9001, 127.0.0.1:80"),
        [9001, 80]
    );
}

/// Runs the quick start and checks what the README says happens.
#[test]
fn the_quick_start_works_as_written() {
    if !support::tool_available(
        "curl",
        "the_quick_start_works_as_written",
        "apt-get install curl",
    ) {
        return;
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let config = std::fs::read_to_string(root().join("config/canary.yaml")).unwrap();
    let script = quickstart_blocks(&readme).concat();
    let dir = std::env::temp_dir().join(format!("weir-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Free ports for every address of the script and the config, held until the
    // script starts (a port freed and re-bound by number can be taken in between by
    // another test: the window is kept to the spawn).
    let mut wanted = ports(&script);
    for p in ports(&config) {
        if !wanted.contains(&p) {
            wanted.push(p);
        }
    }
    let held: Vec<TcpListener> = wanted
        .iter()
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let map: BTreeMap<u16, u16> = wanted
        .iter()
        .zip(&held)
        .map(|(old, l)| (*old, l.local_addr().unwrap().port()))
        .collect();
    let config_path = dir.join("canary.yaml");
    std::fs::write(&config_path, rewrite_ports(&config, &map)).unwrap();
    let admin = map[&9901];

    let mut body = rewrite_ports(&script, &map)
        .replace(README_BINARY, env!("CARGO_BIN_EXE_weir"))
        .replace("config/canary.yaml", &config_path.display().to_string());
    for log in ["/tmp/weir.log", "/tmp/weir-load.log"] {
        let name = Path::new(log).file_name().unwrap().to_string_lossy();
        body = body.replace(log, &dir.join(&*name).display().to_string());
    }
    let full = format!(
        "set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{body}echo QUICKSTART-DONE\n"
    );
    std::fs::write(dir.join("quickstart.sh"), &full).unwrap();
    drop(held);
    let mut child = Command::new("bash")
        .arg(dir.join("quickstart.sh"))
        .current_dir(&dir)
        .env("WEIR_API", format!("http://127.0.0.1:{admin}"))
        .env_remove("WEIR_TOKEN_FILE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash");
    let pid = child.id();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if started.elapsed() > GUARD {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever happened, nothing it started outlives the test.
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{pid}")])
        .status();
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let logs = ["weir.log", "weir-load.log"]
        .iter()
        .map(|f| {
            format!(
                "--- {f}:\n{}",
                std::fs::read_to_string(dir.join(f)).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let all = format!("--- script:\n{full}\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}\n{logs}");
    let status = status.unwrap_or_else(|| panic!("the quick start did not finish:\n{all}"));
    assert!(
        status.success(),
        "a quick-start command failed ({status}):\n{all}"
    );
    assert!(stdout.ends_with("QUICKSTART-DONE\n"), "{all}");
    // What the README says happens, in order.
    let mut at = 0;
    for want in [
        "app-green: rolled out: 1/1 ready",
        "app: run finished: Succeeded (v2 promoted)",
        "\nv2\n",
        "app-blue: rolled out: 1/1 ready",
        "app: run finished: Failed (v3 rolled back; v2 serves)",
        "\nv2\n",
    ] {
        match stdout[at..].find(want) {
            Some(i) => at += i + want.len(),
            None => panic!("{want:?} missing (in order):\n{all}"),
        }
    }
    // What a user sees (shown with --nocapture).
    println!("{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
