//! Graceful drain with the real binary (issue 7): SIGTERM stops accepting,
//! in-flight requests finish, the process exits 0 before the drain
//! timeout; a second signal exits at once.

mod proto_support;

use bytes::Bytes;
use http_body_util::Full;
use proto_support::*;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use weir::echo::{EchoHandle, EchoOptions};

async fn slow_echo(latency: Duration) -> EchoHandle {
    weir::echo::spawn(
        "127.0.0.1:0".parse().unwrap(),
        EchoOptions {
            version: "v1".into(),
            error_rate: 0.0,
            latency,
        },
    )
    .await
    .unwrap()
}

/// A running `weir serve` and its log lines.
struct Weir {
    child: Child,
    lines: mpsc::Receiver<String>,
    _dir: TempDir,
}

impl Weir {
    /// Starts the binary on a config with one route to `backend`; returns
    /// it with the proxy listener's address (read from its log).
    fn start(backend: SocketAddr, drain: &str) -> (Weir, SocketAddr) {
        let dir = TempDir::new("drain");
        let cfg = dir.write(
            "weir.yaml",
            &format!(
                "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n{}proxy:\n  drainTimeout: {drain}\n",
                one_route(backend, "", "")
            ),
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "-c"])
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run weir");
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(strip_ansi(&line));
                }
            });
        }
        let mut w = Weir {
            child,
            lines,
            _dir: dir,
        };
        let line = w
            .wait_line("proxy listening", Duration::from_secs(60))
            .expect("weir did not start");
        let addr = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("addr="))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no addr in {line:?}"));
        (w, addr)
    }

    fn wait_line(&mut self, needle: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit, up to `within`.
    fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_50_in_flight_requests_refuses_new_connections_and_exits_0() {
    let backend = slow_echo(Duration::from_secs(1)).await;
    let drain = Duration::from_secs(20);
    let (mut weir, addr) = Weir::start(backend.addr, "20s");

    // 50 slow requests: 40 on HTTP/1.1 connections of their own, 10 as
    // streams of one h2c connection.
    let mut calls = Vec::new();
    for i in 0..40 {
        calls.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            let mut s = h1::<_, Full<Bytes>>(stream).await;
            let r = s
                .send_request(get_req("app.test", &format!("/slow/{i}")))
                .await
                .expect("in-flight request failed");
            read_answer(r).await
        }));
    }
    let mut h2c = h2::<_, Full<Bytes>>(TcpStream::connect(addr).await.unwrap()).await;
    for i in 0..10 {
        let r = h2c.send_request(get_req_h2("http", "app.test", &format!("/slow/h2/{i}")));
        calls.push(tokio::spawn(async move {
            read_answer(r.await.expect("in-flight stream failed")).await
        }));
    }
    let arrived = eventually(Duration::from_secs(20), || async {
        backend.requests.load(Ordering::Relaxed) >= 50
    })
    .await;
    assert!(
        arrived,
        "only {} requests reached the backend",
        backend.requests.load(Ordering::Relaxed)
    );

    let signalled = Instant::now();
    weir.signal("-TERM");
    // New connections are refused while the old ones drain.
    let refused = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(addr).await.is_err()
    })
    .await;
    assert!(refused, "the listener still accepts after SIGTERM");
    assert!(
        weir.running(),
        "the process exited before its in-flight requests were done"
    );

    for c in calls {
        let a = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("in-flight request finished")
            .unwrap();
        assert_eq!(a.status, 200, "{}", a.text());
        if a.version == http::Version::HTTP_11 {
            assert_eq!(
                a.headers.get("connection").and_then(|v| v.to_str().ok()),
                Some("close"),
                "HTTP/1 responses during a drain close their connection"
            );
        }
    }
    // The HTTP/2 connection got a GOAWAY: no new stream on it.
    let late = h2c
        .send_request(get_req_h2("http", "app.test", "/late"))
        .await;
    assert!(late.is_err(), "a new stream was accepted during the drain");
    let status = tokio::task::spawn_blocking(move || {
        let st = weir.wait_exit(Duration::from_secs(25));
        (st, weir)
    })
    .await
    .unwrap();
    let exited = status.0.expect("weir did not exit");
    assert!(exited.success(), "exit status {exited:?}");
    assert!(
        signalled.elapsed() < drain,
        "exited after {:?}, not before the drain timeout",
        signalled.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let backend = slow_echo(Duration::from_secs(60)).await;
    let (mut weir, addr) = Weir::start(backend.addr, "60s");
    let call = tokio::spawn(async move {
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut s = h1::<_, Full<Bytes>>(stream).await;
        s.send_request(get_req("app.test", "/slow"))
            .await
            .map(|r| r.status())
    });
    assert!(
        eventually(Duration::from_secs(20), || async {
            backend.requests.load(Ordering::Relaxed) >= 1
        })
        .await
    );
    weir.signal("-TERM");
    assert!(
        weir.wait_line("shutting down", Duration::from_secs(20))
            .is_some(),
        "no drain started"
    );
    // The drain would wait up to 60 s for the request; a second signal ends it.
    // (Repeated, so a signal sent before the second handler is armed does not
    // make the test depend on timing.)
    let started = Instant::now();
    let (exited, _weir) = tokio::task::spawn_blocking(move || {
        for _ in 0..20 {
            weir.signal("-INT");
            if let Some(st) = weir.wait_exit(Duration::from_millis(500)) {
                return (Some(st), weir);
            }
        }
        (None, weir)
    })
    .await
    .unwrap();
    assert!(exited.is_some(), "weir did not exit on the second signal");
    assert!(started.elapsed() < Duration::from_secs(30));
    // The in-flight request was cut, not completed.
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap();
    assert!(r.is_err(), "the request completed: {r:?}");
}
