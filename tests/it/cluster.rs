//! Fleet coordination against a REAL etcd (Debian `etcd-server`, the fixture in
//! `support::etcd`), started by each test on free loopback ports and killed at its end.
//! Without `etcd` on PATH every test prints one skip line and passes (CI installs
//! `etcd-server`, and fails there instead).
//!
//! Time: the replicas use a 500 ms heartbeat, so the lease TTL is 2 s (3 × 0.5 s
//! rounded up to etcd's whole seconds). Waits are bounded polls; a bound is the
//! protocol's own deadline plus a stated slack for a loaded 2-core CI machine, never
//! a measured duration.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::etcd::Etcd;
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
        peer_token: None,
        peer_allow: weir::config::cluster::default_peer_allow(),
        ack_timeout: weir::config::cluster::DEFAULT_ACK_TIMEOUT,
        etcd_tls: None,
        etcd_auth: None,
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

/// Who may drive each canary now, by replica name (the canaries the replicas were
/// configured with).
fn drivers(replicas: &[&Cluster]) -> BTreeMap<String, Vec<String>> {
    let names: Vec<String> = replicas
        .first()
        .map(|r| r.status().canaries.into_iter().map(|c| c.canary).collect())
        .unwrap_or_default();
    let mut out: BTreeMap<String, Vec<String>> =
        names.iter().map(|c| (c.clone(), Vec::new())).collect();
    for r in replicas {
        for c in &names {
            if r.may_drive(c) {
                out.entry(c.clone()).or_default().push(r.name().to_string());
            }
        }
    }
    out
}

/// Polls `cond` every 50 ms for at most `bound`; false if it never held.
pub(crate) async fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
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

    /// Waits until the sampler has looked more than `n` times: on a loaded machine
    /// its 2 ms period stretches, so a short transition may otherwise end with only a
    /// few samples taken.
    async fn sampled_more_than(&self, n: u64) {
        let samples = self.samples.clone();
        assert!(
            eventually(SLACK, || samples.load(Ordering::Relaxed) > n).await,
            "the sampler took {} samples in {SLACK:?}",
            self.samples.load(Ordering::Relaxed)
        );
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
    sampler_c.sampled_more_than(10).await;
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

/// A lease that expires in etcd (revoked here from outside, as an expiry after a long
/// partition would) takes every key of the replica with it: the replica notices at its
/// next keepalive, drops everything (`LeaseExpired`, `CanaryLost`), joins again with a
/// new lease and re-acquires its canaries under NEW ownership tokens (owner keys'
/// create revisions), so an engine can tell that another replica may have driven the
/// canary in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_drops_everything_and_rejoins_with_new_tokens() {
    let Some(etcd) =
        Etcd::start("expired_lease_drops_everything_and_rejoins_with_new_tokens").await
    else {
        return;
    };
    let s = settings(&etcd, Replicas::Fixed(1), Algorithm::RoundRobin);
    let a = replica(&s, "a");
    assert!(eventually(TTL + SLACK, || settled(&[&a], 1)).await);
    let before: BTreeMap<String, i64> = canaries()
        .into_iter()
        .map(|c| {
            let t = a.token(&c).expect("token");
            (c, t)
        })
        .collect();
    let lease = a.status().lease.expect("lease").id;
    let id = u64::from_str_radix(&lease, 16).expect("hex lease id") as i64;
    let client = EtcdClient::new(&[etcd.url()], Duration::from_secs(2)).expect("client");
    client.lease_revoke(id).await.expect("revoke");
    assert!(
        eventually(HEARTBEAT * 2 + TTL + SLACK, || {
            a.event_log().iter().any(|e| e.kind == "LeaseExpired")
                && settled(&[&a], 1)
                && canaries()
                    .iter()
                    .all(|c| a.token(c).is_some_and(|t| t != before[c]))
        })
        .await,
        "{:#?}",
        a.event_log()
    );
    // Lost either by the snapshot that saw the owner keys gone (the watch wakes it at
    // once) or by the keepalive that found the lease gone, whichever came first.
    let log = a.event_log();
    let lost: BTreeSet<&str> = log
        .iter()
        .filter(|e| e.kind == "CanaryLost")
        .filter_map(|e| e.canary.as_deref())
        .collect();
    assert_eq!(lost.len(), 6, "every canary reported lost: {log:#?}");
    a.shutdown().await;
}

// ------------------------------------------------------------------ whole replicas
//
// Three (or more) complete weirs in this process (proxy, control API, engine, cluster
// membership), two `weir echo` slots shared by six routes `c0..c5` (hosts `cN.test`),
// six canaries with a 300 ms analysis interval. Each canary's owner judges the traffic
// on the sum of every replica's stats.
//
// No check depends on how fast the machine is. The analysis traffic is sent by the
// canaries' own `rollout` webhook ([`TrafficHook`]) while the tick waits for it, so
// every analysed tick sees its batch whatever the load; the proxying checks send fixed
// batches and check every answer; "nothing stepped" is waited for on the engines'
// skipped-tick counters, not on a clock.

use crate::support;

use std::net::SocketAddr;
use weir::app::RunningApp;
use weir::rollout::driver::FOLLOWER_REFRESH;
use weir::rollout::{CanaryStatus, Phase};

/// Longest wait for a run to reach its end.
const RUN_WAIT: Duration = Duration::from_secs(60);

/// The checks' `minRequests`, and the canary answers every analysed tick's batch
/// collects.
const MIN_REQUESTS: u64 = 5;

/// Most requests one batch sends. The owner's own proxy, one of at most three taken in
/// turn, routes at least 20 % to the canary once a run is analysed: fewer than 5
/// canary answers in 2000 requests (p ≥ 0.2/3) has a probability below 10⁻⁴⁰.
const BATCH_MAX: u64 = 2000;

/// Timeout of one of the test's own requests: a bound for a hung exchange, far above
/// any latency of a loaded machine (how fast the proxy answers is not tested here).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn canary_names() -> Vec<String> {
    (0..6).map(|i| format!("c{i}")).collect()
}

/// One replica's config: six routes and canaries on the shared slots. The success-rate
/// window (a minute) holds the whole batch the tick's `rollout` hook sent, however long
/// the batch took (at most the hook's 30 s timeout).
fn replica_yaml(
    etcd: &Etcd,
    name: &str,
    replicas: &str,
    blue: SocketAddr,
    green: SocketAddr,
    hook: &TrafficHook,
) -> String {
    let mut y = format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\n\
         cluster:\n  etcd: [\"{}\"]\n  prefix: /weir-fleet\n  replicas: {replicas}\n  heartbeat: 500ms\n  algorithm: round-robin\n  name: {name}\n\
         backends:\n  app-blue:\n    endpoints: [\"{blue}\"]\n  app-green:\n    endpoints: [\"{green}\"]\nroutes:\n",
        etcd.url()
    );
    for c in canary_names() {
        y.push_str(&format!(
            "  - name: {c}\n    hosts: [\"{c}.test\"]\n    primary: app-blue\n    canary: app-green\n"
        ));
    }
    y.push_str("canaries:\n");
    for c in canary_names() {
        y.push_str(&format!(
            "  - name: {c}\n    route: {c}\n    analysis:\n      interval: 300ms\n      threshold: 3\n      stepWeight: 20\n      maxWeight: 60\n      metrics:\n        - name: request-success-rate\n          thresholdRange: {{ min: 99 }}\n          interval: 1m\n          minRequests: {MIN_REQUESTS}\n      webhooks:\n        - name: traffic\n          type: rollout\n          url: {}\n          timeout: 30s\n",
            hook.server.url(&format!("/{c}"))
        ));
    }
    y
}

pub(crate) async fn start_app(yaml: &str) -> RunningApp {
    let cfg = weir::config::parse_yaml(yaml, "fleet.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    weir::app::start(cfg).await.expect("start app")
}

pub(crate) fn cl(app: &RunningApp) -> &Cluster {
    app.cluster.as_ref().expect("cluster configured")
}

/// The app driving canary `c` (exactly one, or `None`).
fn owner_app<'a>(apps: &[&'a RunningApp], c: &str) -> Option<&'a RunningApp> {
    let d: Vec<&RunningApp> = apps
        .iter()
        .copied()
        .filter(|a| cl(a).may_drive(c))
        .collect();
    (d.len() == 1).then(|| d[0])
}

/// Canary `c`'s status on the replica that drives it.
fn owner_status(apps: &[&RunningApp], c: &str) -> Option<CanaryStatus> {
    owner_app(apps, c).and_then(|a| a.engine.status(c))
}

/// Polls until `f` holds for every canary's status on its owner, or panics after `bound`.
async fn all_canaries(
    apps: &[&RunningApp],
    bound: Duration,
    what: &str,
    f: impl Fn(&CanaryStatus) -> bool,
) {
    let ok = eventually(bound, || {
        canary_names()
            .iter()
            .all(|c| owner_status(apps, c).is_some_and(|s| f(&s)))
    })
    .await;
    if !ok {
        let st: Vec<String> = canary_names()
            .iter()
            .map(|c| match owner_status(apps, c) {
                Some(s) => format!(
                    "{c}: {:?} weight {} driven by {:?} ({:?}): {}",
                    s.phase, s.canary_weight, s.owner, s.data_plane_error, s.message
                ),
                None => format!("{c}: no single owner"),
            })
            .collect();
        panic!("timed out waiting for {what}:\n{}", st.join("\n"));
    }
}

/// Every canary's `skippedTicks` on every replica, replica by replica.
fn skipped_ticks(apps: &[&RunningApp]) -> Vec<u64> {
    apps.iter()
        .flat_map(|a| {
            canary_names()
                .into_iter()
                .map(|c| a.engine.status(&c).expect("status").skipped_ticks)
        })
        .collect()
}

/// Waits until every canary's task on every replica has counted `n` more skipped
/// ticks than in `since`: it went round its loop `n` times, found that it may not
/// drive the canary, and stepped nothing. A task counts one at its ownership gate, with
/// nothing of its own under way, so once each has counted one after a loss no tick
/// is in flight anywhere. Bound: `n` follower refreshes (a task that may not drive
/// wakes every 2 s) and one more, plus slack.
async fn all_skipped(apps: &[&RunningApp], since: &[u64], n: u64, what: &str) {
    let bound = FOLLOWER_REFRESH * (n as u32 + 1) + SLACK;
    let done = || {
        skipped_ticks(apps)
            .iter()
            .zip(since)
            .all(|(now, was)| *now >= was + n)
    };
    assert!(
        eventually(bound, done).await,
        "{what}: skipped ticks {:?}, were {since:?}",
        skipped_ticks(apps)
    );
}

/// Sends `n` requests through `proxy`, to the six routes in turn, and returns every
/// exchange that was not a 200, described.
async fn fixed_batch(proxy: SocketAddr, n: usize) -> Vec<String> {
    let c = support::client();
    let mut failures = Vec::new();
    for (i, c_name) in canary_names().iter().cycle().take(n).enumerate() {
        match support::version_exchange(&c, proxy, &format!("{c_name}.test"), REQUEST_TIMEOUT).await
        {
            Ok((200, _)) => {}
            Ok((status, v)) => failures.push(format!("request {i} ({c_name}): {status} from {v}")),
            Err(e) => failures.push(format!("request {i} ({c_name}): {e}")),
        }
    }
    failures
}

/// What the traffic hook sent through one replica.
#[derive(Clone, Debug, Default)]
struct Sent {
    /// Exchanges over (answered or failed).
    requests: u64,
    /// Every exchange that was not a 200, described.
    failures: Vec<String>,
}

/// The canaries' `rollout` webhook: a load tester in the manner of Flagger's, but
/// synchronous. Every analysed tick of canary `cN` POSTs to `/cN`, and the hook answers
/// only once it has sent requests to `cN.test`, through the live replicas' proxies in
/// turn, until [`MIN_REQUESTS`] of them were answered by the canary slot (`v2`). The
/// tick measures right after, so every check sees at least that many canary requests
/// (summed over the replicas, as the owner judges them) however slowly the machine
/// runs. A replica is a data plane of the owner whenever it can route to the canary:
/// only the owner re-asserts a run's weight on a replica, and only on its own fleet.
struct TrafficHook {
    /// The receiver ([`weir::demo::HookServer`], stopped when dropped).
    server: weir::demo::HookServer,
    /// The proxies to send through, by replica name.
    proxies: Arc<Mutex<BTreeMap<String, SocketAddr>>>,
    /// What was sent through each replica.
    sent: Arc<Mutex<BTreeMap<String, Sent>>>,
}

impl TrafficHook {
    async fn start() -> TrafficHook {
        let proxies: Arc<Mutex<BTreeMap<String, SocketAddr>>> = Arc::default();
        let sent: Arc<Mutex<BTreeMap<String, Sent>>> = Arc::default();
        let (p, s) = (proxies.clone(), sent.clone());
        let handler: weir::demo::HookHandler = Arc::new(move |path, _payload| {
            let (p, s) = (p.clone(), s.clone());
            Box::pin(async move {
                TrafficHook::send_batch(path.trim_start_matches('/'), &p, &s).await;
                (200, String::new())
            })
        });
        let server = weir::demo::HookServer::spawn_with(handler)
            .await
            .expect("start the hook");
        TrafficHook {
            server,
            proxies,
            sent,
        }
    }

    /// Sends through `app`'s proxy from now on.
    fn add(&self, app: &RunningApp) {
        self.proxies
            .lock()
            .unwrap()
            .insert(cl(app).name().to_string(), app.proxy_addr());
    }

    /// Stops sending through replica `name` (before it is killed).
    fn remove(&self, name: &str) {
        self.proxies.lock().unwrap().remove(name);
    }

    /// What was sent through replica `name` so far.
    fn sent(&self, name: &str) -> Sent {
        self.sent
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// One hook call for `canary`: requests to `canary.test` through the live
    /// replicas in turn until [`MIN_REQUESTS`] were answered by the canary slot.
    async fn send_batch(
        canary: &str,
        proxies: &Mutex<BTreeMap<String, SocketAddr>>,
        sent: &Mutex<BTreeMap<String, Sent>>,
    ) {
        let through: Vec<(String, SocketAddr)> = proxies
            .lock()
            .unwrap()
            .iter()
            .map(|(n, a)| (n.clone(), *a))
            .collect();
        let host = format!("{canary}.test");
        let c = support::client();
        let mut canary_answers = 0;
        let mut i = 0;
        while canary_answers < MIN_REQUESTS && i < BATCH_MAX && !through.is_empty() {
            let (name, proxy) = &through[i as usize % through.len()];
            i += 1;
            let answer = support::version_exchange(&c, *proxy, &host, REQUEST_TIMEOUT).await;
            let mut sent = sent.lock().unwrap();
            let tally = sent.entry(name.clone()).or_default();
            tally.requests += 1;
            match answer {
                Ok((200, v)) => canary_answers += u64::from(v == "v2"),
                Ok((status, v)) => tally.failures.push(format!("{canary}: {status} from {v}")),
                Err(e) => tally.failures.push(format!("{canary}: {e}")),
            }
        }
    }
}

async fn readyz(app: &RunningApp) -> support::Resp {
    support::get_once(&support::client(), app.admin_addr, "/readyz", &[]).await
}

/// One replica's table: its version and every route's (primary, canaryWeight).
type TablePicture = (u64, Vec<(String, Option<i64>)>);

/// `POST /api/v1/canaries/{c}/start` on `app` (forwarded to the owner if need be).
async fn start_run(app: &RunningApp, c: &str) -> support::Resp {
    let req = http::Request::post(format!(
        "http://{}/api/v1/canaries/{c}/start",
        app.admin_addr
    ))
    .header("content-type", "application/json")
    .body(http_body_util::Full::new(bytes::Bytes::from_static(
        b"{\"revision\":\"v2\"}",
    )))
    .expect("request");
    support::send(&support::client(), req).await
}

pub(crate) fn route_of(app: &RunningApp, c: &str) -> weir::config::raw::RawRoute {
    app.store
        .load()
        .spec
        .raw
        .routes
        .iter()
        .find(|r| r.name == c)
        .cloned()
        .expect("route")
}

/// Starts the replicas `names`, their analysis traffic sent by `hook` through each.
async fn fleet(
    etcd: &Etcd,
    names: &[&str],
    replicas: &str,
    blue: SocketAddr,
    green: SocketAddr,
    hook: &TrafficHook,
) -> Vec<RunningApp> {
    let mut apps = Vec::new();
    for n in names {
        let app = start_app(&replica_yaml(etcd, n, replicas, blue, green, hook)).await;
        hook.add(&app);
        apps.push(app);
    }
    apps
}

/// Starts a run of every canary through replica `via` (commands to canaries it does
/// not own are forwarded), once each canary is initialised on its owner.
async fn start_all_runs(apps: &[&RunningApp], via: &RunningApp) {
    all_canaries(
        apps,
        TTL + SLACK,
        "every canary initialised on its owner",
        |s| s.phase == Phase::Initialized,
    )
    .await;
    for c in canary_names() {
        let r = start_run(via, &c).await;
        assert_eq!(
            r.status,
            200,
            "start {c} through {}: {}",
            cl(via).name(),
            r.text()
        );
    }
}

/// Every request the hook sent through these replicas was answered with a 200, and
/// each of them carried some.
fn hook_traffic_all_answered(hook: &TrafficHook, apps: &[&RunningApp]) {
    for a in apps {
        let name = cl(a).name();
        let sent = hook.sent(name);
        assert!(sent.requests > 0, "the hook sent through {name}");
        assert!(
            sent.failures.is_empty(),
            "{name} kept proxying ({} requests): {:?}",
            sent.requests,
            sent.failures
        );
    }
}

/// A replica dies mid-run: its canaries are re-owned by the survivors once its lease
/// expires, continue from the state it stored in etcd (a `Restored` event at the
/// weight reached, no re-initialisation) and are promoted; no canary is ever driven by
/// two replicas (sampled, and on the survivors' event-log revisions); the survivors
/// answer every request meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_dead_replica_runs_continue_on_the_new_owner() {
    let Some(etcd) = Etcd::start("fleet_dead_replica_runs_continue_on_the_new_owner").await else {
        return;
    };
    let (blue, green) = (support::echo("v1").await, support::echo("v2").await);
    let hook = TrafficHook::start().await;
    let mut apps = fleet(
        &etcd,
        &["r0", "r1", "r2"],
        "3",
        blue.addr,
        green.addr,
        &hook,
    )
    .await;
    {
        let refs: Vec<&RunningApp> = apps.iter().collect();
        let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
        assert!(
            eventually(TTL + SLACK, || settled(&clusters, 3)).await,
            "{:?}",
            drivers(&clusters)
        );
        start_all_runs(&refs, &apps[0]).await;
        // Every run is under way (a step taken) before the crash.
        all_canaries(&refs, RUN_WAIT, "every run at weight 20 or more", |s| {
            s.phase == Phase::Progressing && s.canary_weight >= 20
        })
        .await;
    }
    // The victim: the replica driving the most canaries.
    let victim = (0..apps.len())
        .max_by_key(|i| cl(&apps[*i]).owned().len())
        .expect("replicas");
    let lost = cl(&apps[victim]).owned();
    assert!(!lost.is_empty());
    let sampler = Sampler::start(apps.iter().map(|a| cl(a).clone()).collect());
    hook.remove(cl(&apps[victim]).name());
    cl(&apps[victim]).halt(); // a crash: nothing released, the lease runs out
    let dead = apps.remove(victim);
    let dead_name = cl(&dead).name().to_string();
    dead.shutdown().await;
    let refs: Vec<&RunningApp> = apps.iter().collect();
    let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
    // The survivors answer while the dead replica's canaries wait for a new owner.
    for a in &refs {
        let failures = fixed_batch(a.proxy_addr(), 60).await;
        assert!(
            failures.is_empty(),
            "{} kept proxying: {failures:?}",
            cl(a).name()
        );
    }
    assert!(
        eventually(TTL + HEARTBEAT + SLACK, || lost
            .iter()
            .all(|c| owner_app(&refs, c).is_some()))
        .await,
        "canaries {lost:?} of {dead_name} re-owned: {:?}",
        drivers(&clusters)
    );
    all_canaries(&refs, RUN_WAIT, "every run promoted", |s| {
        s.phase == Phase::Succeeded && s.revision.as_deref() == Some("v2")
    })
    .await;
    for c in &lost {
        let s = owner_status(&refs, c).expect("owner");
        // (A replica may have owned the canary for a moment while the fleet formed:
        // look at what followed the takeover.)
        let at = s
            .events
            .iter()
            .rposition(|e| e.reason == "Restored")
            .unwrap_or_else(|| panic!("{c}: the new owner continued from etcd: {:#?}", s.events));
        let restored = &s.events[at];
        assert!(
            restored.canary_weight >= 20,
            "{c} continued mid-run: {restored:?}"
        );
        assert!(
            !s.events[at..]
                .iter()
                .any(|e| e.reason == "Initialized" || e.reason == "OwnershipAcquired"),
            "{c} was not re-initialised after the takeover: {:#?}",
            s.events
        );
        // Promotion swapped the slots on every surviving replica's table.
        for a in &refs {
            let r = route_of(a, c);
            assert_eq!(
                (r.primary.as_str(), r.canary_weight.unwrap_or(0)),
                ("app-green", 0),
                "{c} on {}",
                cl(a).name()
            );
        }
    }
    let (violations, _) = sampler.finish().await;
    assert!(violations.is_empty(), "{violations:?}");
    let logs: Vec<Vec<ClusterEvent>> = apps.iter().map(|a| cl(a).event_log()).collect();
    check_log_exclusive(&logs, i64::MAX).expect("ownership intervals never overlap");
    hook_traffic_all_answered(&hook, &refs);
    for a in apps {
        a.shutdown().await;
    }
}

/// etcd goes away mid-run: no replica steps any canary (every table stays at its
/// version and weight), every replica keeps proxying and reports not ready; when etcd
/// is back the runs resume and are promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_without_etcd_steps_nothing_and_keeps_proxying() {
    let Some(mut etcd) = Etcd::start("fleet_without_etcd_steps_nothing_and_keeps_proxying").await
    else {
        return;
    };
    let (blue, green) = (support::echo("v1").await, support::echo("v2").await);
    let hook = TrafficHook::start().await;
    let apps = fleet(
        &etcd,
        &["r0", "r1", "r2"],
        "3",
        blue.addr,
        green.addr,
        &hook,
    )
    .await;
    let refs: Vec<&RunningApp> = apps.iter().collect();
    let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
    assert!(eventually(TTL + SLACK, || settled(&clusters, 3)).await);
    start_all_runs(&refs, &apps[1]).await;
    all_canaries(&refs, RUN_WAIT, "every run at weight 20 or more", |s| {
        s.phase == Phase::Progressing && s.canary_weight >= 20
    })
    .await;
    // Who drove what when etcd went away.
    let owners: Vec<(String, usize)> = canary_names()
        .into_iter()
        .map(|c| {
            let i = refs
                .iter()
                .position(|a| cl(a).may_drive(&c))
                .expect("an owner");
            (c, i)
        })
        .collect();
    etcd.kill();
    assert!(
        eventually(HEARTBEAT * 2 + SLACK, || clusters
            .iter()
            .all(|c| !c.has_valid_lease() && c.owned().is_empty()))
        .await,
        "every replica lost its lease"
    );
    // A tick under way when the lease went may still end (its save fails: it is
    // dropped). Once every canary's task on every replica has been back to its
    // ownership gate and found it may not drive, none is under way, and none can start
    // without a lease: then the reference picture is taken.
    let lost = skipped_ticks(&refs);
    all_skipped(
        &refs,
        &lost,
        1,
        "every canary task idle after the lease loss",
    )
    .await;
    let picture = |apps: &[&RunningApp]| -> Vec<TablePicture> {
        apps.iter()
            .map(|a| {
                let snap = a.store.load();
                (
                    snap.version,
                    snap.spec
                        .raw
                        .routes
                        .iter()
                        .map(|r| (r.primary.clone(), r.canary_weight))
                        .collect(),
                )
            })
            .collect()
    };
    let before = picture(&refs);
    let states = |refs: &[&RunningApp]| -> Vec<(Phase, u8, u32)> {
        owners
            .iter()
            .map(|(c, i)| {
                let s = refs[*i].engine.status(c).expect("status");
                (s.phase, s.canary_weight, s.iterations)
            })
            .collect()
    };
    let states_before = states(&refs);
    assert!(
        states_before
            .iter()
            .all(|(p, w, _)| *p == Phase::Progressing && *w >= 20),
        "{states_before:?}"
    );
    let idle = skipped_ticks(&refs);
    // Every replica keeps proxying: a fixed batch through each, every answer a 200.
    for a in &refs {
        let failures = fixed_batch(a.proxy_addr(), 60).await;
        assert!(
            failures.is_empty(),
            "{} kept proxying without etcd: {failures:?}",
            cl(a).name()
        );
    }
    // Every canary's task on every replica wakes twice more (at least two follower
    // refreshes, more than ten analysis intervals), finds that it may not drive and
    // steps nothing.
    all_skipped(&refs, &idle, 2, "two more idle wake-ups without etcd").await;
    assert_eq!(
        picture(&refs),
        before,
        "no replica wrote any table without etcd"
    );
    assert_eq!(
        states(&refs),
        states_before,
        "no owner stepped any canary without etcd"
    );
    for a in &refs {
        let r = readyz(a).await;
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.json()["status"], "no-lease");
        let resp = support::get_once(
            &support::client(),
            a.proxy_addr(),
            "/",
            &[("host", "c0.test")],
        )
        .await;
        assert_eq!(resp.status, 200, "still proxying");
    }
    etcd.spawn().await;
    all_canaries(
        &refs,
        RUN_WAIT,
        "every run promoted after etcd came back",
        |s| s.phase == Phase::Succeeded && s.revision.as_deref() == Some("v2"),
    )
    .await;
    for a in &refs {
        assert_eq!(readyz(a).await.status, 200);
    }
    hook_traffic_all_answered(&hook, &refs);
    for a in apps {
        a.shutdown().await;
    }
}

/// A replica joins mid-run (auto mode): the canaries that move to it are released by
/// their old owner (after its tick in progress) before it takes them, and their runs
/// continue there to promotion. No canary is driven twice at any moment (sampled, and
/// on the event logs' etcd revisions); `GET /api/v1/cluster` and `weir ctl cluster`
/// show the new layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_joining_replica_takes_over_runs_without_double_ownership() {
    let Some(etcd) =
        Etcd::start("fleet_joining_replica_takes_over_runs_without_double_ownership").await
    else {
        return;
    };
    let (blue, green) = (support::echo("v1").await, support::echo("v2").await);
    let hook = TrafficHook::start().await;
    let mut apps = fleet(&etcd, &["r0", "r1"], "auto", blue.addr, green.addr, &hook).await;
    {
        let refs: Vec<&RunningApp> = apps.iter().collect();
        let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
        assert!(eventually(TTL + SLACK, || settled(&clusters, 2)).await);
        start_all_runs(&refs, &apps[0]).await;
        all_canaries(&refs, RUN_WAIT, "every run at weight 20 or more", |s| {
            s.phase == Phase::Progressing && s.canary_weight >= 20
        })
        .await;
    }
    let sampler = Sampler::start(apps.iter().map(|a| cl(a).clone()).collect());
    apps.push(
        start_app(&replica_yaml(
            &etcd, "r2", "auto", blue.addr, green.addr, &hook,
        ))
        .await,
    );
    hook.add(&apps[2]);
    let sampler3 = Sampler::start(apps.iter().map(|a| cl(a).clone()).collect());
    let refs: Vec<&RunningApp> = apps.iter().collect();
    let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
    assert!(
        eventually(TTL + SLACK, || settled(&clusters, 3)).await,
        "{:?}",
        drivers(&clusters)
    );
    let moved = cl(&apps[2]).owned();
    assert_eq!(
        moved.len(),
        2,
        "round-robin over 3 shards gives the newcomer 2 canaries"
    );
    // Every replica answers while the moved runs change hands.
    for a in &refs {
        let failures = fixed_batch(a.proxy_addr(), 60).await;
        assert!(
            failures.is_empty(),
            "{} kept proxying: {failures:?}",
            cl(a).name()
        );
    }
    all_canaries(&refs, RUN_WAIT, "every run promoted", |s| {
        s.phase == Phase::Succeeded && s.revision.as_deref() == Some("v2")
    })
    .await;
    for c in &moved {
        let s = apps[2].engine.status(c).expect("status");
        assert!(
            s.events.iter().any(|e| e.reason == "Restored"),
            "{c} continued on r2: {:#?}",
            s.events
        );
        assert_eq!(s.driven_here, Some(true));
    }
    let (v1, _) = sampler.finish().await;
    let (v2, _) = sampler3.finish().await;
    assert!(v1.is_empty() && v2.is_empty(), "{v1:?} {v2:?}");
    let logs: Vec<Vec<ClusterEvent>> = clusters.iter().map(|c| c.event_log()).collect();
    check_log_exclusive(&logs, i64::MAX).expect("ownership intervals never overlap");
    // The moved canaries were released (owner key deleted) before r2 acquired them.
    for c in &moved {
        let released = logs
            .iter()
            .flatten()
            .filter(|e| e.kind == "CanaryReleased" && e.canary.as_deref() == Some(c))
            .map(|e| e.revision)
            .max()
            .unwrap_or_else(|| panic!("{c} released by its old owner"));
        let acquired = cl(&apps[2])
            .event_log()
            .iter()
            .filter(|e| e.kind == "CanaryAcquired" && e.canary.as_deref() == Some(c))
            .map(|e| e.revision)
            .min()
            .expect("acquired by r2");
        assert!(
            acquired > released,
            "{c}: acquired at {acquired}, released at {released}"
        );
    }
    // The API and the ctl view.
    let doc = support::get_once(
        &support::client(),
        apps[1].admin_addr,
        "/api/v1/cluster",
        &[],
    )
    .await;
    assert_eq!(doc.status, 200);
    let v = doc.json();
    assert_eq!(v["enabled"], true);
    assert_eq!(v["members"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        v["canaries"]
            .as_array()
            .map(|a| a.iter().filter(|c| c["owner"].is_string()).count()),
        Some(6)
    );
    let text = weir::cluster::api::render(&v, 0);
    assert!(
        text.contains("r2") && text.contains("this replica drives"),
        "{text}"
    );
    hook_traffic_all_answered(&hook, &refs);
    for a in apps {
        a.shutdown().await;
    }
}

/// A refused command sent to a replica that does not own the canary is forwarded to the
/// owner, and the owner's 409 with its reason reaches the original caller unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_a_refused_command_is_a_409_for_the_original_caller() {
    let Some(etcd) = Etcd::start("fleet_a_refused_command_is_a_409_for_the_original_caller").await
    else {
        return;
    };
    let (blue, green) = (support::echo("v1").await, support::echo("v2").await);
    let hook = TrafficHook::start().await;
    let apps = fleet(&etcd, &["r0", "r1"], "2", blue.addr, green.addr, &hook).await;
    let refs: Vec<&RunningApp> = apps.iter().collect();
    let clusters: Vec<&Cluster> = apps.iter().map(cl).collect();
    assert!(eventually(TTL + SLACK, || settled(&clusters, 2)).await);
    all_canaries(&refs, TTL + SLACK, "every canary initialised", |s| {
        s.phase == Phase::Initialized
    })
    .await;
    let c = canary_names()
        .into_iter()
        .find(|c| !cl(&apps[0]).may_drive(c))
        .expect("a canary r0 does not own");
    let req = http::Request::post(format!(
        "http://{}/api/v1/canaries/{c}/resume",
        apps[0].admin_addr
    ))
    .header("x-weir-request", "1")
    .body(http_body_util::Full::new(bytes::Bytes::new()))
    .expect("request");
    let r = support::send(&support::client(), req).await;
    assert_eq!(r.status, 409, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"], "command-refused", "{e}");
    assert!(
        e["reason"]
            .as_str()
            .is_some_and(|s| s.contains("resume refused: not paused")),
        "{e}"
    );
    for a in apps {
        a.shutdown().await;
    }
}
