//! Acknowledged steps across a fleet of real `weir serve` processes and a REAL etcd:
//! one replica is frozen (SIGSTOP) for a few seconds during a run; the owner waits
//! for it and names it (`WaitingForReplicas`, then `ReplicaLagging` past
//! `ackTimeout`, the lag in `/api/v1/cluster` and the lag series), continues once it
//! resumes, and the run ends as it should (promoted, or rolled back); not one of the
//! requests sent to the three listeners meanwhile is lost.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::etcd::Etcd;

/// How long the frozen replica stays stopped: past `ackTimeout` (1 s), within the
/// owner's call timeout (5 s) and well within the lease TTL (6 s at a 2 s heartbeat),
/// so the replica stays a member the run must wait for.
const FREEZE: Duration = Duration::from_millis(3500);
/// A run's whole course on a loaded 2-core machine.
const RUN_WAIT: Duration = Duration::from_secs(90);
/// Bound on one proxied request: longer than the freeze.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests each listener gets at least (one every 20 ms per listener).
const MIN_PER_LISTENER: u64 = 300;

/// One `weir serve` process, killed when dropped.
struct Replica {
    name: String,
    child: Child,
    proxy: SocketAddr,
    admin: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Replica {
    fn start(dir: &Path, name: &str, yaml: &str) -> Replica {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--log-format", "json", "serve", "-c"])
            .arg(&file)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weir serve");
        let stderr = child.stderr.take().unwrap();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel::<(String, String)>();
        let keep = log.clone();
        // Reads every line for as long as the process lives: a full pipe would
        // block the replica.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let f = &v["fields"];
                    match f["message"].as_str() {
                        Some("proxy listening") => {
                            let _ =
                                tx.send(("proxy".into(), f["addr"].as_str().unwrap_or("").into()));
                        }
                        Some("admin API listening") => {
                            let _ = tx.send((
                                "admin".into(),
                                f["admin_addr"].as_str().unwrap_or("").into(),
                            ));
                        }
                        _ => {}
                    }
                }
                keep.lock().unwrap().push(line);
            }
        });
        let (mut proxy, mut admin) = (None, None);
        while proxy.is_none() || admin.is_none() {
            let (what, addr) = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| {
                    panic!(
                        "{name} never said where it listens:\n{}",
                        log.lock().unwrap().join("\n")
                    )
                });
            let addr: SocketAddr = addr.parse().expect("address");
            if what == "proxy" {
                proxy = Some(addr);
            } else {
                admin = Some(addr);
            }
        }
        Replica {
            name: name.into(),
            child,
            proxy: proxy.unwrap(),
            admin: admin.unwrap(),
            log,
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {}", self.name);
    }

    async fn get(&self, path: &str) -> Value {
        let r = support::get_once(&support::client(), self.admin, path, &[]).await;
        assert_eq!(r.status, 200, "{} {path}: {}", self.name, r.text());
        r.json()
    }
}

fn yaml(etcd: &Etcd, name: &str, blue: SocketAddr, green: SocketAddr) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n\
         cluster:\n  etcd: [\"{}\"]\n  prefix: /weir-acks\n  replicas: auto\n  heartbeat: 2s\n  name: {name}\n  ackTimeout: 1s\n\
         backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\n\
         routes:\n  - name: app\n    hosts: [\"app.test\"]\n    primary: app-blue\n    canary: app-green\n\
         canaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1s\n      threshold: 2\n      stepWeight: 20\n      maxWeight: 60\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 30s\n          minRequests: 3\n",
        etcd.url()
    )
}

/// Traffic through one listener until stopped and at least [`MIN_PER_LISTENER`] were
/// sent: the count, and every request weir lost (no answer, or an answer that did
/// not come from a backend).
fn load(proxy: SocketAddr, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let c = support::client();
        let mut n = 0u64;
        let mut lost = Vec::new();
        while n < MIN_PER_LISTENER || !stop.load(Ordering::SeqCst) {
            n += 1;
            match support::version_exchange(&c, proxy, "app.test", REQUEST_TIMEOUT).await {
                Ok((_, v)) if v != "-" => {}
                Ok((status, _)) => lost.push(format!("request {n}: {status} from weir itself")),
                Err(e) => lost.push(format!("request {n}: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (n, lost)
    })
}

/// The owner's events of the canary (reason, message).
async fn events(r: &Replica) -> Vec<(String, String)> {
    let s = r.get("/api/v1/canaries/app").await;
    s["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["reason"].as_str().unwrap_or("").to_string(),
                        e["message"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn phase(r: &Replica) -> (String, u64) {
    let s = r.get("/api/v1/canaries/app").await;
    (
        s["phase"].as_str().unwrap_or("").to_string(),
        s["canaryWeight"].as_u64().unwrap_or(0),
    )
}

/// Polls `f` on the owner every 100 ms until it holds, or panics with its logs.
async fn until<F, Fut>(what: &str, bound: Duration, replicas: &[Replica], mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs: Vec<String> = replicas
        .iter()
        .map(|r| {
            let l = r.log.lock().unwrap();
            let tail = l.len().saturating_sub(40);
            format!("---- {}\n{}", r.name, l[tail..].join("\n"))
        })
        .collect();
    panic!("timed out waiting for {what}\n{}", logs.join("\n"));
}

/// Three replicas, one canary; `freeze_when` says when (by the owner's phase and
/// weight) a replica that does not own the canary is frozen. Returns the owner's
/// final phase after checking the wait was named, and that no request was lost.
async fn freeze_during_a_run(
    test: &str,
    canary_errors: f64,
    freeze_when: fn(&str, u64) -> bool,
    ends: &str,
) {
    let Some(etcd) = Etcd::start(test).await else {
        return;
    };
    let dir: PathBuf =
        std::env::temp_dir().join(format!("weir-acks-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let blue = support::echo("v1").await;
    let green = support::echo_with("v2", canary_errors, Duration::ZERO).await;
    let replicas: Vec<Replica> = ["r0", "r1", "r2"]
        .iter()
        .map(|n| Replica::start(&dir, n, &yaml(&etcd, n, blue.addr, green.addr)))
        .collect();
    // Every replica sees the three members, and one of them owns the canary.
    let mut owner = None;
    let deadline = tokio::time::Instant::now() + RUN_WAIT;
    'find: while tokio::time::Instant::now() < deadline {
        for (i, r) in replicas.iter().enumerate() {
            let c = r.get("/api/v1/cluster").await;
            let members = c["members"].as_array().map_or(0, Vec::len);
            let owns = c["owned"]
                .as_array()
                .is_some_and(|o| o.iter().any(|x| x == "app"));
            if members == 3 && owns {
                let s = r.get("/api/v1/canaries/app").await;
                let planes = s["dataPlanes"].as_array().map_or(0, Vec::len);
                if s["phase"] == "Initialized" && planes == 3 {
                    owner = Some(i);
                    break 'find;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(owner) = owner else {
        until(
            "three members and an owner",
            Duration::ZERO,
            &replicas,
            || async { false },
        )
        .await;
        return;
    };
    let owner = &replicas[owner];
    let victim = replicas
        .iter()
        .find(|r| r.name != owner.name)
        .expect("another replica");

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = replicas
        .iter()
        .map(|r| load(r.proxy, stop.clone()))
        .collect();
    let req = http::Request::post(format!("http://{}/api/v1/canaries/app/start", owner.admin))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"{\"revision\": \"v2\"}",
        )))
        .unwrap();
    let started = support::send(&support::client(), req).await;
    assert_eq!(started.status, 200, "{}", started.text());
    until("the moment to freeze", RUN_WAIT, &replicas, || async move {
        let (p, w) = phase(owner).await;
        freeze_when(&p, w)
    })
    .await;
    victim.signal("-STOP");
    let frozen_at = tokio::time::Instant::now();
    // While it is frozen, the owner names it, then reports it lagging.
    let name = victim.name.clone();
    until(
        "WaitingForReplicas and ReplicaLagging naming the frozen replica",
        FREEZE,
        &replicas,
        || {
            let name = name.clone();
            async move {
                let ev = events(owner).await;
                let said = |reason: &str| ev.iter().any(|(r, m)| r == reason && m.contains(&name));
                said("WaitingForReplicas") && said("ReplicaLagging")
            }
        },
    )
    .await;
    let status = owner.get("/api/v1/canaries/app").await;
    assert_eq!(
        status["waitingForReplicas"],
        serde_json::json!([victim.name]),
        "{status}"
    );
    let cluster = owner.get("/api/v1/cluster").await;
    let lag = cluster["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == victim.name.as_str())
        .map(|m| m["lagMs"].as_u64().unwrap_or(0))
        .unwrap_or(0);
    assert!(
        lag >= 1000,
        "lag of {} past ackTimeout: {cluster}",
        victim.name
    );
    let metrics = support::get_once(&support::client(), owner.admin, "/metrics", &[])
        .await
        .text();
    let series = format!(
        "weir_cluster_replica_lag_seconds{{member=\"{}\"}} ",
        victim.name
    );
    let value: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} in\n{metrics}"));
    assert!(value >= 1.0, "{series}{value}");
    // Nothing stepped while it was frozen.
    let weight_frozen = phase(owner).await.1;
    tokio::time::sleep_until(frozen_at + FREEZE).await;
    assert_eq!(
        phase(owner).await.1,
        weight_frozen,
        "a step was taken while a replica was frozen"
    );
    victim.signal("-CONT");

    until(
        &format!("the run {ends}"),
        RUN_WAIT,
        &replicas,
        || async move { phase(owner).await.0 == ends },
    )
    .await;
    let ev = events(owner).await;
    assert!(
        ev.iter()
            .any(|(r, m)| r == "ReplicasAcknowledged" && m.contains(&victim.name)),
        "{ev:?}"
    );
    let status = owner.get("/api/v1/canaries/app").await;
    assert!(status.get("waitingForReplicas").is_none(), "{status}");
    // Every replica has the run's last routing (the idle slot gets nothing).
    for r in &replicas {
        let route = r.get("/api/v1/routes/app").await;
        assert_eq!(
            route["canaryWeight"].as_i64().unwrap_or(0),
            0,
            "{}: {route}",
            r.name
        );
    }
    stop.store(true, Ordering::SeqCst);
    for (r, l) in replicas.iter().zip(loads) {
        let (n, lost) = l.await.unwrap();
        assert!(n >= MIN_PER_LISTENER, "{}: {n}", r.name);
        assert!(
            lost.is_empty(),
            "{} lost {} of {n} requests: {lost:?}",
            r.name,
            lost.len()
        );
    }
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_holds_the_run_named_and_the_promotion_loses_nothing() {
    freeze_during_a_run(
        "a_frozen_replica_holds_the_run_named_and_the_promotion_loses_nothing",
        0.0,
        |p, w| p == "Progressing" && w >= 20,
        "Succeeded",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_holds_the_rollback_named_and_loses_nothing() {
    freeze_during_a_run(
        "a_frozen_replica_holds_the_rollback_named_and_loses_nothing",
        0.3,
        |p, w| p == "Progressing" && w >= 20,
        "Failed",
    )
    .await;
}
