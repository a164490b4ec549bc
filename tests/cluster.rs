//! Fleet coordination against a REAL etcd (Debian `etcd-server`), started by each
//! test on free loopback ports and killed at its end. Without `etcd` on PATH every
//! test prints one skip line and passes (CI installs `etcd-server`).
//!
//! Time: the replicas use a 500 ms heartbeat, so the lease TTL is 2 s (3 × 0.5 s
//! rounded up to etcd's whole seconds). Waits are bounded polls; a bound is the
//! protocol's own deadline plus a stated slack for a loaded 2-core CI machine, never
//! a measured duration.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::cluster::etcd::EtcdClient;
use weir::cluster::{
    Algorithm, Cluster, ClusterEvent, ClusterOptions, ClusterSettings, Replicas, SaveError,
};

const HEARTBEAT: Duration = Duration::from_millis(500);
/// 3 × heartbeat rounded up to whole seconds.
const TTL: Duration = Duration::from_secs(2);
/// Slack added to protocol deadlines for a loaded CI machine.
const SLACK: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(50);

// ------------------------------------------------------------------ etcd fixture

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A throwaway single-node etcd.
struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

impl Etcd {
    /// Starts etcd, or returns `None` (after printing why) when it is not installed.
    async fn start(test: &str) -> Option<Etcd> {
        if Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            println!("SKIP {test}: `etcd` is not on PATH (apt-get install etcd-server)");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "weir-etcd-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let mut e = Etcd {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        e.spawn().await;
        Some(e)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Runs etcd on the fixture's ports and data dir, and waits until it answers.
    async fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.with_extension("log")).expect("etcd log");
        let child = Command::new("etcd")
            .arg("--name")
            .arg("default")
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            // A short election timeout lowers etcd's minimum lease TTL (1.5 × election
            // timeout) below the 2 s the tests ask for.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
        let c = EtcdClient::new(&[client], Duration::from_millis(500)).expect("client");
        for _ in 0..200 {
            if c.range("/", true).await.is_ok() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!(
            "etcd did not start; see {}",
            self.dir.with_extension("log").display()
        );
    }

    /// SIGKILL: as abrupt as a crash or a partition.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.dir.with_extension("log"));
    }
}

// ------------------------------------------------------------------ replicas

fn settings(etcd: &Etcd, replicas: Replicas, algorithm: Algorithm) -> ClusterSettings {
    ClusterSettings {
        etcd: vec![etcd.url()],
        prefix: "/weir-test".into(),
        replicas,
        heartbeat: HEARTBEAT,
        algorithm,
        name: None,
        api_url: None,
    }
}

fn canaries() -> Vec<String> {
    ["api", "app", "auth", "checkout", "search", "web"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn replica(s: &ClusterSettings, name: &str) -> Cluster {
    Cluster::start(ClusterOptions {
        settings: s.clone(),
        name: name.into(),
        api_url: format!("http://{name}.invalid:9901"),
        canaries: canaries(),
    })
    .expect("start replica")
}

/// Who may drive each canary now, by replica name.
fn drivers(replicas: &[&Cluster]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> =
        canaries().into_iter().map(|c| (c, Vec::new())).collect();
    for r in replicas {
        for c in canaries() {
            if r.may_drive(&c) {
                out.entry(c).or_default().push(r.name().to_string());
            }
        }
    }
    out
}

/// Polls `cond` every 50 ms for at most `bound`; false if it never held.
async fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let polls = (bound.as_millis() / POLL.as_millis()).max(1);
    for _ in 0..polls {
        if cond() {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    cond()
}

/// Every canary driven by exactly one of `replicas`.
fn each_once(replicas: &[&Cluster]) -> bool {
    drivers(replicas).values().all(|d| d.len() == 1)
}

/// Converged: `shards` shards held in every replica's view, and every canary driven
/// by exactly the holder of its assigned shard.
fn settled(replicas: &[&Cluster], shards: usize) -> bool {
    if !each_once(replicas) {
        return false;
    }
    let d = drivers(replicas);
    replicas.iter().all(|r| {
        let st = r.status();
        let holders: BTreeMap<u32, String> = st
            .shards
            .iter()
            .filter_map(|s| s.replica.clone().map(|h| (s.shard, h)))
            .collect();
        holders.len() == shards
            && st
                .canaries
                .iter()
                .all(|c| c.shard.and_then(|s| holders.get(&s)) == Some(&d[&c.canary][0]))
    })
}

/// Samples every replica's `may_drive` for every canary in a loop and records any
/// moment where two replicas would drive the same canary.
struct Sampler {
    stop: Arc<AtomicBool>,
    violations: Arc<Mutex<Vec<String>>>,
    samples: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(replicas: Vec<Cluster>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let samples = Arc::new(AtomicU64::new(0));
        let (s, v, n) = (stop.clone(), violations.clone(), samples.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                let refs: Vec<&Cluster> = replicas.iter().collect();
                for (c, d) in drivers(&refs) {
                    if d.len() > 1 {
                        v.lock().unwrap().push(format!("{c} driven by {d:?}"));
                    }
                }
                n.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Sampler {
            stop,
            violations,
            samples,
            task,
        }
    }

    async fn finish(self) -> (Vec<String>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let v = self.violations.lock().unwrap().clone();
        (v, self.samples.load(Ordering::Relaxed))
    }
}

/// From the replicas' event logs: per canary, the revision intervals during which each
/// replica owned it (acquired at the owner key's create revision, released at the
/// deletion's revision; a replica halted while owning owns until `end`). Checks that
/// no two intervals of one canary overlap.
fn check_log_exclusive(logs: &[Vec<ClusterEvent>], end: i64) -> Result<usize, String> {
    let mut intervals: BTreeMap<String, Vec<(i64, i64, String)>> = BTreeMap::new();
    for log in logs {
        let mut open: BTreeMap<String, i64> = BTreeMap::new();
        for e in log {
            let Some(c) = &e.canary else { continue };
            match e.kind.as_str() {
                "CanaryAcquired" => {
                    open.insert(c.clone(), e.revision);
                }
                "CanaryReleased" | "CanaryLost" => {
                    if let Some(start) = open.remove(c) {
                        let stop = if e.revision > 0 { e.revision } else { end };
                        intervals.entry(c.clone()).or_default().push((
                            start,
                            stop,
                            e.replica.clone(),
                        ));
                    }
                }
                _ => {}
            }
        }
        for (c, start) in open {
            let who = log.first().map(|e| e.replica.clone()).unwrap_or_default();
            intervals.entry(c).or_default().push((start, end, who));
        }
    }
    let mut n = 0;
    for (c, mut iv) in intervals {
        iv.sort();
        for w in iv.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(format!("{c}: {:?} overlaps {:?}", w[0], w[1]));
            }
        }
        n += iv.len();
    }
    Ok(n)
}

// ------------------------------------------------------------------ tests

/// 3 replicas (fixed 3 shards, round-robin), 6 canaries: every canary is driven by
/// exactly one replica, two each, and etcd's owner keys agree with the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_six_canaries_each_owned_once() {
    let Some(etcd) = Etcd::start("three_replicas_six_canaries_each_owned_once").await else {
        return;
    };
    let s = settings(&etcd, Replicas::Fixed(3), Algorithm::RoundRobin);
    let (a, b, c) = (replica(&s, "a"), replica(&s, "b"), replica(&s, "c"));
    let all = [&a, &b, &c];
    assert!(
        eventually(TTL + SLACK, || settled(&all, 3)).await,
        "every canary owned once: {:?}",
        drivers(&all)
    );
    for r in all {
        assert_eq!(
            r.owned().len(),
            2,
            "round-robin over 3 shards: {} owns {:?}",
            r.name(),
            r.owned()
        );
        assert!(r.has_valid_lease());
    }
    // etcd's view: one owner key per canary, bound to the replica that drives it.
    let client = EtcdClient::new(&[etcd.url()], Duration::from_secs(2)).expect("client");
    let (owners, _) = client
        .range("/weir-test/owners/", true)
        .await
        .expect("owners");
    assert_eq!(owners.len(), 6);
    let d = drivers(&all);
    for kv in owners {
        let rec: serde_json::Value = serde_json::from_slice(&kv.value).expect("owner record");
        let canary = kv.key.trim_start_matches("/weir-test/owners/");
        assert_eq!(
            rec["replica"].as_str(),
            Some(d[canary][0].as_str()),
            "{canary}"
        );
    }
    let (shards, _) = client
        .range("/weir-test/shards/", true)
        .await
        .expect("shards");
    assert_eq!(shards.len(), 3, "one shard per replica");
    // Status agrees too.
    let st = a.status();
    assert_eq!(st.shards.len(), 3);
    assert_eq!(st.canaries.iter().filter(|c| c.owner.is_some()).count(), 6);
    assert_eq!(st.members.len(), 3);
    for r in all {
        r.shutdown().await;
    }
}

/// A replica dies (its tasks stop, nothing is released): its canaries are re-owned
/// by the others once its lease expires. Bound: TTL (2 s = 3 × heartbeat rounded up)
/// + one reconcile period (one heartbeat) + slack. Nobody drives a canary twice
/// meanwhile (sampled continuously, and checked on the event logs' revisions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replica_canaries_reowned_after_lease_expiry() {
    let Some(etcd) = Etcd::start("dead_replica_canaries_reowned_after_lease_expiry").await else {
        return;
    };
    let s = settings(&etcd, Replicas::Fixed(3), Algorithm::Hash);
    let (a, b, c) = (replica(&s, "a"), replica(&s, "b"), replica(&s, "c"));
    assert!(eventually(TTL + SLACK, || settled(&[&a, &b, &c], 3)).await);
    // The victim is the replica driving the most canaries (hash balance is not ±1: a
    // shard may have none). Names are rebound so that `b` is the victim.
    let mut three = [a, b, c];
    three.sort_by_key(|r| std::cmp::Reverse(r.owned().len()));
    let [b, a, c] = three;
    let victim_canaries = b.owned();
    assert!(!victim_canaries.is_empty());
    let sampler = Sampler::start(vec![a.clone(), b.clone(), c.clone()]);
    b.halt();
    assert!(
        !victim_canaries.iter().any(|x| b.may_drive(x)),
        "a halted replica drives nothing"
    );
    let survivors = [&a, &c];
    assert!(
        eventually(TTL + HEARTBEAT + SLACK, || settled(&survivors, 3)).await,
        "canaries of b {victim_canaries:?} re-owned: {:?}",
        drivers(&survivors)
    );
    let (violations, samples) = sampler.finish().await;
    assert!(violations.is_empty(), "{violations:?}");
    assert!(samples > 0, "the sampler ran ({samples} samples)");
    // The dead replica's shard was adopted: 3 shards held by 2 replicas.
    let st = a.status();
    let held: BTreeSet<String> = st.shards.iter().filter_map(|s| s.replica.clone()).collect();
    assert!(!held.contains(b.name()), "{held:?}");
    assert_eq!(st.shards.iter().filter(|s| s.replica.is_some()).count(), 3);
    // The survivors' logs: their intervals never overlap. (The dead replica logged
    // no release: its ownership ended with its lease, which the sampler covers.)
    let logs = vec![a.event_log(), c.event_log()];
    let n = check_log_exclusive(&logs, i64::MAX).expect("ownership intervals never overlap");
    assert!(n >= 6, "{n} intervals");
    let dead_acquired = b
        .event_log()
        .iter()
        .filter(|e| e.kind == "CanaryAcquired")
        .map(|e| e.revision)
        .max()
        .unwrap_or(0);
    for e in logs.iter().flatten().filter(|e| e.kind == "CanaryAcquired") {
        if victim_canaries.contains(e.canary.as_ref().unwrap()) {
            assert!(
                e.revision > dead_acquired,
                "re-owned after the dead owner's key: {e:?}"
            );
        }
    }
    for r in [&a, &c] {
        r.shutdown().await;
    }
}

/// A third replica joins (auto mode, hash): the canaries that move to it are
/// released by their old owner before it takes them. Sampled continuously and checked
/// on the revisions of the event logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_replica_redistributes_without_double_ownership() {
    let Some(etcd) = Etcd::start("joining_replica_redistributes_without_double_ownership").await
    else {
        return;
    };
    let s = settings(&etcd, Replicas::Auto, Algorithm::Hash);
    let (a, b) = (replica(&s, "a"), replica(&s, "b"));
    assert!(eventually(TTL + SLACK, || settled(&[&a, &b], 2)).await);
    let before: BTreeMap<String, Vec<String>> = drivers(&[&a, &b]);
    let sampler = Sampler::start(vec![a.clone(), b.clone()]);
    let c = replica(&s, "c");
    let sampler_c = Sampler::start(vec![a.clone(), b.clone(), c.clone()]);
    assert!(
        eventually(TTL + SLACK, || settled(&[&a, &b, &c], 3)).await,
        "{:?}",
        drivers(&[&a, &b, &c])
    );
    let after = drivers(&[&a, &b, &c]);
    // Hash: only canaries moving to the new shard moved.
    for (canary, owners) in &after {
        if owners[0] != "c" {
            assert_eq!(
                &before[canary], owners,
                "{canary} moved between old replicas"
            );
        }
    }
    let (v1, _) = sampler.finish().await;
    let (v2, n) = sampler_c.finish().await;
    assert!(v1.is_empty() && v2.is_empty(), "{v1:?} {v2:?}");
    assert!(n > 10);
    let logs = vec![a.event_log(), b.event_log(), c.event_log()];
    check_log_exclusive(&logs, i64::MAX).expect("ownership intervals never overlap");
    for r in [&a, &b, &c] {
        r.shutdown().await;
    }
}

/// etcd goes away: every replica stops driving at once (within one heartbeat and one
/// call timeout), reports no valid lease; when etcd comes back with the leases still
/// alive, the same owners drive again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lost_stops_every_replica_then_recovers() {
    let Some(mut etcd) = Etcd::start("etcd_lost_stops_every_replica_then_recovers").await else {
        return;
    };
    let s = settings(&etcd, Replicas::Fixed(3), Algorithm::RoundRobin);
    let (a, b, c) = (replica(&s, "a"), replica(&s, "b"), replica(&s, "c"));
    let all = [&a, &b, &c];
    assert!(eventually(TTL + SLACK, || settled(&all, 3)).await);
    let owners_before = drivers(&all);
    etcd.kill();
    assert!(
        eventually(HEARTBEAT * 2 + SLACK, || all
            .iter()
            .all(|r| r.owned().is_empty() && !r.has_valid_lease()))
        .await,
        "{:?}",
        drivers(&all)
    );
    for r in all {
        assert!(!r.status().ready);
        assert!(r.event_log().iter().any(|e| e.kind == "EtcdUnavailable"));
    }
    etcd.spawn().await;
    assert!(
        eventually(TTL + SLACK, || settled(&all, 3)).await,
        "{:?}",
        drivers(&all)
    );
    assert_eq!(
        drivers(&all),
        owners_before,
        "the leases survived: same owners"
    );
    for r in all {
        r.shutdown().await;
    }
}

/// The rollout state is fenced by the owner key: only the owner saves; after the
/// owner leaves, the new owner reads what it saved, and the old handle cannot write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_is_fenced_by_the_owner_key() {
    let Some(etcd) = Etcd::start("state_is_fenced_by_the_owner_key").await else {
        return;
    };
    let s = settings(&etcd, Replicas::Auto, Algorithm::RoundRobin);
    let (a, b) = (replica(&s, "a"), replica(&s, "b"));
    assert!(eventually(TTL + SLACK, || settled(&[&a, &b], 2)).await);
    let (owner, other) = if a.may_drive("app") {
        (&a, &b)
    } else {
        (&b, &a)
    };
    owner
        .save_state("app", b"{\"step\":1}")
        .await
        .expect("owner saves");
    assert!(matches!(
        other.save_state("app", b"{\"step\":99}").await,
        Err(SaveError::NotOwner(_))
    ));
    assert_eq!(
        other.load_state("app").await.expect("load").as_deref(),
        Some(&b"{\"step\":1}"[..])
    );
    // A guard is handed out only to the owner.
    assert!(owner.guard("app").await.is_some());
    assert!(other.guard("app").await.is_none());
    // Graceful leave: lease revoked, the other takes over without waiting for the TTL.
    owner.shutdown().await;
    assert!(matches!(
        owner.save_state("app", b"{\"step\":2}").await,
        Err(SaveError::NotOwner(_))
    ));
    assert!(eventually(HEARTBEAT * 2 + SLACK, || other.may_drive("app")).await);
    assert_eq!(
        other.load_state("app").await.expect("load").as_deref(),
        Some(&b"{\"step\":1}"[..])
    );
    other
        .save_state("app", b"{\"step\":2}")
        .await
        .expect("new owner saves");
    other.shutdown().await;
}
