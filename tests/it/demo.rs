//! `weir demo` for every scenario, as a user (and CI) runs it: the real binary, a
//! time limit, exit status 0 and the outcome line. The scenarios run one at a time
//! (each drives a few hundred requests per second and 1 s analysis ticks; running six
//! at once on a small machine would only measure the machine).

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A scenario must finish well within this (it takes about ten seconds).
const LIMIT: Duration = Duration::from_secs(90);

fn demo(args: &[&str], scenario: &str) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("demo")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir demo");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let Some(status) = status else {
        panic!("weir demo {args:?} did not finish within {LIMIT:?}\n{stdout}\n{stderr}");
    };
    assert!(
        status.success(),
        "weir demo {args:?} exited {status}\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("demo {scenario}: OK")),
        "no OK line:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("outcome: "), "{stdout}");
}

#[test]
fn demo_promote_is_the_default_scenario() {
    demo(&[], "promote");
}

#[test]
fn demo_rollback() {
    demo(&["--scenario", "rollback"], "rollback");
}

#[test]
fn demo_ab() {
    demo(&["--scenario", "ab"], "ab");
}

#[test]
fn demo_bluegreen() {
    demo(&["--scenario", "bluegreen"], "bluegreen");
}

#[test]
fn demo_mirror() {
    demo(&["--scenario", "mirror"], "mirror");
}

#[test]
fn demo_affinity() {
    demo(&["--scenario", "affinity"], "affinity");
}

#[test]
fn an_unknown_scenario_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["demo", "--scenario", "yolo"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("promote"),
        "lists the scenarios"
    );
}
