//! `weir load` with the real binary against in-process backends and a proxy
//! (127.0.0.1:0): per-second lines, the total, versions, headers, bounds.

use crate::support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::*;

/// Runs `weir load <args>` off the runtime (the targets answer from this process).
async fn load(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("load")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run weir load")
    });
    tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("weir load did not finish")
        .expect("join")
}

fn total_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("total "))
        .unwrap_or_else(|| panic!("no total line:\n{}", String::from_utf8_lossy(&out.stdout)))
        .to_string()
}

/// The number after `word` in `line`.
fn count(line: &str, word: &str) -> u64 {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            return it.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    panic!("{word} not in {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_sends_at_the_rate_and_counts_versions_and_classes() {
    let blue = echo("v1").await;
    let green = echo_with("v2", 1.0, Duration::ZERO).await;
    let app = proxy(&two_slot_config(
        blue.addr,
        green.addr,
        "    canaryWeight: 0\n    match:\n      - headers: { x-canary: { exact: insider } }\n      - cookies: { canary: { exact: always } }\n",
    ))
    .await;
    let url = format!("http://{}/", app.proxy_addr());
    let out = load(&[&url, "--rate", "40", "--duration", "2s"]).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("weir load {url}: 40/s for 2s")),
        "{text}"
    );
    assert!(lines[1].starts_with("   1s  sent "), "{text}");
    assert!(lines[2].starts_with("   2s  sent "), "{text}");
    let total = total_line(&out);
    // Open loop: rate × duration requests, exactly (the pacer owes none at the end).
    assert_eq!(count(&total, "sent"), 80, "{total}");
    assert_eq!(count(&total, "ok"), 80, "{total}");
    assert!(total.contains("versions v1=80"), "{total}");
    assert!(total.contains(" p99 ") && total.contains("ms"), "{total}");
    // A header and a cookie reach the canary, which answers 500 every time.
    for extra in [
        ["-H", "x-canary: insider"],
        ["--cookie", "a=b; canary=always"],
    ] {
        let out = load(&[&url, "--rate", "20", "--duration", "1s", extra[0], extra[1]]).await;
        let total = total_line(&out);
        assert_eq!(count(&total, "5xx"), 20, "{extra:?}: {total}");
        assert!(total.contains("versions v2=20"), "{extra:?}: {total}");
        // Not one 2xx: the exit code says the target is not serving.
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no request of 20 got a 2xx answer"),
            "{extra:?}"
        );
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_target_counts_errors_and_bad_flags_are_named() {
    let (_held, addr) = refusing_addr();
    let out = load(&[
        &format!("http://{addr}/"),
        "--rate",
        "10",
        "--duration",
        "1s",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let total = total_line(&out);
    assert_eq!(count(&total, "errors"), 10, "{total}");
    for (args, want) in [
        (
            &["http://127.0.0.1:1/", "--rate", "0"][..],
            "--rate must be 1..=10000",
        ),
        (
            &["http://127.0.0.1:1/", "--rate", "10001"][..],
            "--rate must be 1..=10000",
        ),
        (
            &["http://127.0.0.1:1/", "--duration", "2h"][..],
            "--duration must be",
        ),
        (
            &["http://127.0.0.1:1/", "--concurrency", "0"][..],
            "--concurrency must be",
        ),
        (&["https://127.0.0.1:1/"][..], "https is not supported"),
        (
            &["http://127.0.0.1:1/", "-H", "no-colon"][..],
            "expected 'name: value'",
        ),
    ] {
        let out = load(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing sent");
    }
}
