//! The engine's restart, owed-write and take-over paths on tokio's paused time: the
//! clock is injected ([`Clock::tokio_at`]), so an analysis interval of a minute passes
//! in no real time and "nothing stepped yet" is checked on the paused clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, RwLock};

use super::*;
use crate::cluster::{BoxFuture, DriveGuard, Ownership, Peer, SaveError};
use crate::rollout::convert::{canary_def, CanaryDef, RouteChange};
use crate::rollout::dataplane::{
    BackendView, DataPlane, DpError, Fleet, InProcess, RoleStats, RouteRead,
};
use crate::rollout::exporter::RolloutMetrics;
use crate::rollout::machine::{CanaryState, ManualCommand, Phase};

/// The analysis interval of the test canary.
const INTERVAL: Duration = Duration::from_secs(60);

/// One poll's step on the paused clock: far below the interval, so a poll cannot
/// stand in for a tick.
const POLL: Duration = Duration::from_millis(100);

/// Polls (on the paused clock) at most this many times for a condition.
const POLLS: usize = 10_000;

/// Two slots, route `app`, canary `app`: no metrics (every tick passes), stepWeight 10.
fn config() -> crate::config::Config {
    parse(CONFIG)
}

/// [`config`] with `skipAnalysis: true`: the first tick swaps the slots and succeeds.
fn skip_analysis_config() -> crate::config::Config {
    parse(&CONFIG.replace(
        "    route: app\n",
        "    route: app\n    skipAnalysis: true\n",
    ))
}

fn parse(yaml: &str) -> crate::config::Config {
    crate::config::parse_yaml(yaml, "test.yaml", std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
}

const CONFIG: &str = "listeners:\n  - name: http\n    address: 127.0.0.1:0\nbackends:\n  app-blue:\n    endpoints: [\"127.0.0.1:9001\"]\n  app-green:\n    endpoints: [\"127.0.0.1:9002\"]\nroutes:\n  - name: app\n    primary: app-blue\n    canary: app-green\ncanaries:\n  - name: app\n    route: app\n    analysis:\n      interval: 1m\n      threshold: 2\n      maxWeight: 50\n      stepWeight: 10\n";

fn clock() -> Clock {
    Clock::tokio_at(1_700_000_000_000)
}

fn store_weight(store: &TableStore) -> i64 {
    store.load().spec.raw.routes[0].canary_weight.unwrap_or(0)
}

/// Polls canary `app`'s status until `f` holds, advancing the paused clock by [`POLL`]
/// per poll.
async fn until(en: &Engine, what: &str, f: impl Fn(&CanaryStatus) -> bool) -> CanaryStatus {
    for _ in 0..POLLS {
        let s = en.status("app").expect("canary app");
        if f(&s) {
            return s;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("never: {what}; {:#?}", en.status("app"));
}

async fn start_run(en: &Engine) {
    until(en, "initialised", |s| s.phase == Phase::Initialized).await;
    let out = en
        .command(
            "app",
            ManualCommand::Start {
                revision: "v2".into(),
            },
        )
        .await
        .expect("delivered");
    assert!(out.accepted, "{}", out.message);
}

fn def(cfg: &crate::config::Config) -> CanaryDef {
    canary_def(&cfg.canaries[0])
}

fn in_process(store: &Arc<TableStore>) -> Arc<InProcess> {
    Arc::new(InProcess::new(store.clone(), Instant::now(), "engine:app"))
}

#[tokio::test(start_paused = true)]
async fn a_restarted_engine_reasserts_the_run_and_waits_one_interval() {
    let cfg = config();
    let dir = std::env::temp_dir().join(format!("weir-driver-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = clock();
    let opts = |store: &Arc<TableStore>| EngineOptions {
        state_dir: Some(dir.clone()),
        local: Some(LocalPlane {
            store: store.clone(),
            started: Instant::now(),
        }),
        clock,
        ..Default::default()
    };
    let first = TableStore::new(cfg.table.clone());
    let en = Engine::start(&cfg.canaries, opts(&first)).expect("engine");
    start_run(&en).await;
    until(&en, "two steps", |s| s.canary_weight == 20).await;
    assert_eq!(store_weight(&first), 20);
    en.shutdown().await;

    // The proxy restarted too: its table is the config file's (weight 0).
    let second = TableStore::new(cfg.table.clone());
    assert_eq!(store_weight(&second), 0);
    let en = Engine::start(&cfg.canaries, opts(&second)).expect("engine");
    let s = until(&en, "re-asserted", |s| {
        s.events.iter().any(|e| e.reason == "Restored") && s.pending_writes == 0
    })
    .await;
    assert_eq!(s.phase, Phase::Progressing, "{s:#?}");
    for _ in 0..POLLS {
        if store_weight(&second) == 20 {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(store_weight(&second), 20, "the recorded traffic is back");
    // The first analysis after the restart waits one full interval.
    tokio::time::sleep(INTERVAL - Duration::from_secs(1)).await;
    assert_eq!(en.status("app").unwrap().canary_weight, 20);
    assert_eq!(store_weight(&second), 20);
    until(&en, "the next step", |s| s.canary_weight == 30).await;
    en.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn the_run_history_and_the_plan_are_in_the_status_and_survive_a_restart() {
    let cfg = config();
    let dir = std::env::temp_dir().join(format!("weir-driver-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = clock();
    let opts = |store: &Arc<TableStore>| EngineOptions {
        state_dir: Some(dir.clone()),
        local: Some(LocalPlane {
            store: store.clone(),
            started: Instant::now(),
        }),
        clock,
        ..Default::default()
    };
    let store = TableStore::new(cfg.table.clone());
    let en = Engine::start(&cfg.canaries, opts(&store)).expect("engine");
    start_run(&en).await;
    let s = until(&en, "the first step", |s| s.canary_weight == 10).await;
    assert_eq!(s.weight_plan, vec![10, 20, 30, 40, 50]);
    assert_eq!(s.interval_ms, 60_000);
    let last_tick = s.next_tick_ms.expect("a tick is scheduled") - 60_000;
    assert!(last_tick >= 1_700_000_000_000, "{s:#?}");
    let paused = en.command("app", ManualCommand::Pause).await.unwrap();
    assert!(paused.accepted);
    assert_eq!(paused.status.next_tick_ms, None, "paused: no tick is due");
    en.command("app", ManualCommand::Resume).await.unwrap();
    let s = until(&en, "succeeded", |s| s.phase == Phase::Succeeded).await;
    assert_eq!(s.history.len(), 1, "{:#?}", s.history);
    let run = &s.history[0];
    assert_eq!(
        (run.result, run.revision.as_deref()),
        (Phase::Succeeded, Some("v2"))
    );
    assert!(
        run.duration_ms() >= 5 * 60_000,
        "five steps of a minute: {run:?}"
    );
    // A second run, aborted: a Failed entry after the first.
    let out = en
        .command(
            "app",
            ManualCommand::Start {
                revision: "v3".into(),
            },
        )
        .await
        .unwrap();
    assert!(out.accepted, "{}", out.message);
    until(&en, "v3 progressing", |s| s.canary_weight == 10).await;
    let out = en.command("app", ManualCommand::Abort).await.unwrap();
    assert!(out.accepted, "{}", out.message);
    let s = until(&en, "rolled back", |s| s.history.len() == 2).await;
    assert_eq!(s.history[1].result, Phase::Failed);
    assert_eq!(s.history[1].revision.as_deref(), Some("v3"));
    assert!(!s.history[1].reason.is_empty());
    en.shutdown().await;

    let en =
        Engine::start(&cfg.canaries, opts(&TableStore::new(cfg.table.clone()))).expect("engine");
    let s = until(&en, "restored", |s| {
        s.events.iter().any(|e| e.reason == "Restored")
    })
    .await;
    let revs: Vec<_> = s
        .history
        .iter()
        .map(|r| (r.result, r.revision.clone()))
        .collect();
    assert_eq!(
        revs,
        vec![
            (Phase::Succeeded, Some("v2".to_string())),
            (Phase::Failed, Some("v3".to_string()))
        ]
    );
    en.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An in-process table as a data plane (under its own id, or another replica's),
/// whose writes fail while `down` is set and wait, while `held` is set, until the
/// test releases them: a replica that is gone, or one that stopped answering.
struct Flaky {
    inner: Arc<InProcess>,
    id: Option<String>,
    down: AtomicBool,
    held: AtomicBool,
    release: tokio::sync::Notify,
}

impl Flaky {
    fn new(inner: Arc<InProcess>, id: Option<&str>) -> Arc<Flaky> {
        Arc::new(Flaky {
            inner,
            id: id.map(str::to_string),
            down: AtomicBool::new(false),
            held: AtomicBool::new(false),
            release: tokio::sync::Notify::new(),
        })
    }
}

impl DataPlane for Flaky {
    fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_else(|| self.inner.id())
    }
    fn read_route<'a>(&'a self, route: &'a str) -> BoxFuture<'a, Result<RouteRead, DpError>> {
        self.inner.read_route(route)
    }
    fn write_route<'a>(
        &'a self,
        route: &'a str,
        change: &'a RouteChange,
        def: &'a CanaryDef,
    ) -> BoxFuture<'a, Result<u64, DpError>> {
        Box::pin(async move {
            if self.down.load(Ordering::SeqCst) {
                return Err(DpError {
                    plane: "flaky".into(),
                    reason: "down".into(),
                });
            }
            if self.held.load(Ordering::SeqCst) {
                self.release.notified().await;
            }
            self.inner.write_route(route, change, def).await
        })
    }
    fn stats<'a>(
        &'a self,
        route: &'a str,
        window_secs: u64,
        max_age_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<RoleStats, DpError>> {
        self.inner.stats(route, window_secs, max_age_ms)
    }
    fn backend<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BackendView, DpError>> {
        self.inner.backend(name)
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_owed_to_a_down_plane_is_applied_once_it_is_back() {
    let cfg = config();
    let store = TableStore::new(cfg.table.clone());
    let plane = Flaky::new(in_process(&store), None);
    let en = Engine::start_on(
        vec![(def(&cfg), Fleet::new(vec![plane.clone()]))],
        EngineOptions {
            clock: clock(),
            ..Default::default()
        },
    );
    start_run(&en).await;
    until(&en, "the first step", |s| s.canary_weight == 10).await;
    assert_eq!(store_weight(&store), 10);
    plane.down.store(true, Ordering::SeqCst);
    let s = until(&en, "a write owed", |s| s.pending_writes > 0).await;
    assert_eq!(s.canary_weight, 20, "the step is decided: {s:#?}");
    assert_eq!(store_weight(&store), 10, "but not applied");
    // Still owed after several retries, each a wake-up that steps nothing.
    tokio::time::sleep(RETRY_MAX * 3).await;
    assert_eq!(store_weight(&store), 10);
    let owed = en.status("app").unwrap();
    assert!(owed.pending_writes > 0);
    assert_eq!(owed.ticks, s.ticks, "no tick while a write is owed");
    assert!(
        owed.skipped_ticks >= s.skipped_ticks + 3,
        "every retry counted: {} then {}",
        s.skipped_ticks,
        owed.skipped_ticks
    );
    plane.down.store(false, Ordering::SeqCst);
    let s = until(&en, "the owed write applied", |s| s.pending_writes == 0).await;
    assert_eq!(store_weight(&store), 20);
    assert_eq!(s.canary_weight, 20, "a retry is not a step: {s:#?}");
    en.shutdown().await;
}

/// `ticks` counts every tick stepped, also one that changes nothing (an idle canary's),
/// and none while paused; nothing here is a wake-up that steps nothing.
#[tokio::test(start_paused = true)]
async fn the_status_counts_the_ticks_that_change_nothing() {
    let cfg = config();
    let store = TableStore::new(cfg.table.clone());
    let en = Engine::start(
        &cfg.canaries,
        EngineOptions {
            local: Some(LocalPlane {
                store,
                started: Instant::now(),
            }),
            clock: clock(),
            ..Default::default()
        },
    )
    .expect("engine");
    let s = until(&en, "initialised", |s| s.phase == Phase::Initialized).await;
    assert_eq!(s.ticks, 1, "the initialising tick: {s:#?}");
    // Three and a half intervals: three more ticks, none of which changes anything.
    tokio::time::sleep(INTERVAL * 3 + INTERVAL / 2).await;
    let idle = en.status("app").unwrap();
    assert_eq!(idle.ticks, 4, "{idle:#?}");
    assert_eq!(idle.events, s.events, "the ticks changed nothing");
    assert_eq!(idle.skipped_ticks, 0);
    // Paused: no tick is due, none is counted.
    let out = en.command("app", ManualCommand::Pause).await.unwrap();
    assert!(out.accepted, "{}", out.message);
    tokio::time::sleep(INTERVAL * 3).await;
    let paused = en.status("app").unwrap();
    assert_eq!((paused.ticks, paused.skipped_ticks), (4, 0), "{paused:#?}");
    en.shutdown().await;
}

/// A fleet of one test replica whose ownership the test hands over; the stored state
/// is what the previous owner saved.
struct Handover {
    owned: AtomicBool,
    stored: Mutex<Option<Vec<u8>>>,
    changes: watch::Sender<u64>,
    lock: Arc<RwLock<()>>,
}

impl Ownership for Handover {
    fn may_drive<'a>(&'a self, _canary: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async { self.owned.load(Ordering::SeqCst) })
    }
    fn token(&self, _canary: &str) -> Option<i64> {
        self.owned.load(Ordering::SeqCst).then_some(7)
    }
    fn guard<'a>(&'a self, _canary: &'a str) -> BoxFuture<'a, Option<DriveGuard>> {
        Box::pin(async {
            if self.owned.load(Ordering::SeqCst) {
                Some(DriveGuard::hold(self.lock.clone(), 7).await)
            } else {
                None
            }
        })
    }
    fn load_state<'a>(
        &'a self,
        _canary: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, String>> {
        Box::pin(async { Ok(self.stored.lock().unwrap().clone()) })
    }
    fn save_state<'a>(
        &'a self,
        _canary: &'a str,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), SaveError>> {
        Box::pin(async {
            *self.stored.lock().unwrap() = Some(data.to_vec());
            Ok(())
        })
    }
    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
    fn peers(&self) -> Vec<Peer> {
        Vec::new()
    }
    fn owner_of(&self, _canary: &str) -> Option<Peer> {
        None
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_owner_continues_the_stored_run() {
    let cfg = config();
    let store = TableStore::new(cfg.table.clone());
    let clock = clock();
    // The previous owner's record: progressing at 30 %, analysed just now.
    let rec = Record {
        format: STATE_FORMAT,
        canary: "app".into(),
        route: "app".into(),
        state: CanaryState {
            phase: Phase::Progressing,
            canary_weight: 30,
            revision: Some("v2".into()),
            last_tick_ms: Some(clock.now_ms()),
            ..CanaryState::default()
        },
        saved_at_ms: clock.now_ms(),
        ..Record::default()
    };
    let (changes, _) = watch::channel(0);
    let fleet = Arc::new(Handover {
        owned: AtomicBool::new(false),
        stored: Mutex::new(Some(serde_json::to_vec(&rec).unwrap())),
        changes,
        lock: Arc::new(RwLock::new(())),
    });
    let exporter = Arc::new(RolloutMetrics::new(false));
    let en = Engine::start(
        &cfg.canaries,
        EngineOptions {
            local: Some(LocalPlane {
                store: store.clone(),
                started: Instant::now(),
            }),
            ownership: Some(fleet.clone()),
            clock,
            exporter: Some(exporter.clone()),
            ..Default::default()
        },
    )
    .expect("engine");
    // Not the owner: a few follower refreshes pass and nothing is written. The task
    // woke at once, then once per refresh (at 0, 2, 4 and 6 s), and stepped nothing.
    tokio::time::sleep(FOLLOWER_REFRESH * 3 + FOLLOWER_REFRESH / 2).await;
    assert_eq!(store_weight(&store), 0, "a follower writes nothing");
    let follower = en.status("app").unwrap();
    assert_eq!(follower.driven_here, Some(false));
    assert_eq!(
        (follower.ticks, follower.skipped_ticks),
        (0, 4),
        "{follower:#?}"
    );
    assert!(
        exporter.snapshot().canaries.is_empty(),
        "a follower exports no rollout gauges"
    );

    fleet.owned.store(true, Ordering::SeqCst);
    fleet.changes.send_modify(|v| *v += 1);
    let s = until(&en, "taken over", |s| s.driven_here == Some(true)).await;
    assert_eq!(s.phase, Phase::Progressing, "{s:#?}");
    let shown = exporter.snapshot().canaries["app"].clone();
    assert_eq!(
        (shown.phase, shown.canary_weight),
        (Phase::Progressing, 30),
        "the owner exports the taken-over run at once"
    );
    for _ in 0..POLLS {
        if store_weight(&store) == 30 {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        store_weight(&store),
        30,
        "the stored traffic is re-asserted"
    );
    // Like a restart, the first analysis waits one full interval.
    tokio::time::sleep(INTERVAL - Duration::from_secs(1)).await;
    assert_eq!(en.status("app").unwrap().canary_weight, 30);
    let s = until(&en, "the next step", |s| s.canary_weight == 40).await;
    assert_eq!(store_weight(&store), 40);
    assert!(
        s.ticks > 0 && s.skipped_ticks == 4,
        "the owner steps, and skips nothing: {s:#?}"
    );
    let saved: Record =
        serde_json::from_slice(&fleet.stored.lock().unwrap().clone().unwrap()).expect("a record");
    assert_eq!(
        saved.state.canary_weight, 40,
        "the new owner saves its steps"
    );
    assert_eq!(exporter.snapshot().canaries["app"].canary_weight, 40);
    // Lost again: the gauges go with it.
    fleet.owned.store(false, Ordering::SeqCst);
    fleet.changes.send_modify(|v| *v += 1);
    until(&en, "lost", |s| s.driven_here == Some(false)).await;
    assert!(exporter.snapshot().canaries.is_empty());
    en.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_rollout_series_follow_every_step_of_a_local_run() {
    let cfg = config();
    let store = TableStore::new(cfg.table.clone());
    let exporter = Arc::new(RolloutMetrics::new(false));
    let en = Engine::start(
        &cfg.canaries,
        EngineOptions {
            local: Some(LocalPlane {
                store: store.clone(),
                started: Instant::now(),
            }),
            clock: clock(),
            exporter: Some(exporter.clone()),
            ..Default::default()
        },
    )
    .expect("engine");
    start_run(&en).await;
    let seen = Mutex::new(Vec::new());
    let s = until(&en, "the end of the run", |s| {
        let shown = &exporter.snapshot().canaries["app"];
        // The exporter is written with the status: both show the same step.
        assert_eq!(
            (shown.phase, shown.canary_weight),
            (s.phase, s.canary_weight)
        );
        let mut seen = seen.lock().unwrap();
        if seen.last() != Some(&shown.canary_weight) {
            seen.push(shown.canary_weight);
        }
        s.phase == Phase::Succeeded
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), [0, 10, 20, 30, 40, 50, 0], "{s:#?}");
    let snap = exporter.snapshot();
    let runs = &snap.runs["app"];
    assert_eq!((runs.succeeded, runs.failed), (1, 0));
    assert_eq!(runs.durations.count, 1);
    assert!(
        runs.durations.sum >= 5.0 * INTERVAL.as_secs_f64(),
        "five steps of a minute at least: {}",
        runs.durations.sum
    );
    let revs = &snap.revisions["app"];
    assert_eq!(revs.len(), 2, "{revs:?}");
    assert!(
        revs.iter().any(|(b, _)| b == "app-blue") && revs.iter().any(|(b, _)| b == "app-green")
    );
    en.shutdown().await;
}

/// What the data plane had when an event was handed out: (reason, the event's canary
/// weight, the route's canary weight, the route's primary).
type Heard = Vec<(String, u8, i64, String)>;

/// Runs `cfg`'s canary on the in-process plane until it succeeds, with a sink that
/// reads the route at the moment each event is handed out.
async fn heard_over_a_run(cfg: crate::config::Config) -> Heard {
    let store = TableStore::new(cfg.table.clone());
    let heard: Arc<Mutex<Heard>> = Arc::default();
    let sink: EventSink = {
        let (store, heard) = (store.clone(), heard.clone());
        Arc::new(move |e: &RolloutEvent| {
            let route = store.load().spec.raw.routes[0].clone();
            heard.lock().unwrap().push((
                e.reason.clone(),
                e.canary_weight,
                route.canary_weight.unwrap_or(0),
                route.primary,
            ));
        })
    };
    let en = Engine::start(
        &cfg.canaries,
        EngineOptions {
            local: Some(LocalPlane {
                store: store.clone(),
                started: Instant::now(),
            }),
            sink: Some(sink),
            clock: clock(),
            ..Default::default()
        },
    )
    .expect("engine");
    start_run(&en).await;
    until(&en, "the end of the run", |s| s.phase == Phase::Succeeded).await;
    en.shutdown().await;
    let heard = heard.lock().unwrap().clone();
    heard
}

/// A step's route writes are applied before its events are handed out (and before the
/// status shows them): whoever hears of a step finds its traffic on the data plane.
/// With skipAnalysis the swap and `Succeeded` are one step, so a reader of `Succeeded`
/// must find the slots swapped.
#[tokio::test(start_paused = true)]
async fn every_event_finds_its_traffic_on_the_data_plane() {
    for (kind, cfg) in [
        ("stepped", config()),
        ("skipAnalysis", skip_analysis_config()),
    ] {
        let heard = heard_over_a_run(cfg).await;
        let (_, _, _, primary) = heard
            .iter()
            .find(|(reason, ..)| reason == "Succeeded")
            .unwrap_or_else(|| panic!("{kind}: no Succeeded heard: {heard:?}"));
        assert_eq!(primary, "app-green", "{kind}: {heard:?}");
        let ahead: Vec<_> = heard
            .iter()
            .filter(|(_, said, has, _)| i64::from(*said) != *has)
            .collect();
        assert!(
            ahead.is_empty(),
            "{kind}: heard before the data plane had their weight: {ahead:?}"
        );
    }
}

/// A step one plane does not answer: the run names it after the grace, reports it
/// lagging past the ack timeout, takes no further step however long it waits, and
/// goes on once the plane answers. All on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_step_waits_for_every_plane_and_names_the_one_it_waits_for() {
    let cfg = config();
    let here = TableStore::new(cfg.table.clone());
    let there = TableStore::new(cfg.table.clone());
    let slow = Flaky::new(in_process(&there), Some("http://replica-2:9901"));
    let en = Engine::start_on(
        vec![(def(&cfg), Fleet::new(vec![in_process(&here), slow.clone()]))],
        EngineOptions {
            clock: clock(),
            ..Default::default()
        },
    );
    start_run(&en).await;
    until(&en, "the first step", |s| s.canary_weight == 10).await;
    assert_eq!((store_weight(&here), store_weight(&there)), (10, 10));
    slow.held.store(true, Ordering::SeqCst);
    let waiting = until(&en, "the wait named", |s| {
        s.events.iter().any(|e| e.reason == "WaitingForReplicas")
    })
    .await;
    assert_eq!(waiting.waiting_for_replicas, vec!["http://replica-2:9901"]);
    let since = waiting.waiting_since_ms.expect("since");
    let named = waiting
        .events
        .iter()
        .find(|e| e.reason == "WaitingForReplicas")
        .unwrap();
    assert!(
        named.message.contains("replica http://replica-2:9901")
            && named.message.contains("the step to canary weight 20"),
        "{}",
        named.message
    );
    assert!(
        !waiting.events.iter().any(|e| e.reason == "ReplicaLagging"),
        "not lagging before the ack timeout"
    );
    assert_eq!(store_weight(&here), 20, "the answering plane has the step");
    assert_eq!(store_weight(&there), 10);
    let lagging = until(&en, "reported lagging", |s| {
        s.events.iter().any(|e| e.reason == "ReplicaLagging")
    })
    .await;
    let e = lagging
        .events
        .iter()
        .find(|e| e.reason == "ReplicaLagging")
        .unwrap();
    assert!(
        e.time_ms >= since + crate::config::cluster::DEFAULT_ACK_TIMEOUT.as_millis() as u64,
        "{} then {}",
        since,
        e.time_ms
    );
    // However long it waits, nothing more is stepped.
    tokio::time::sleep(INTERVAL * 3).await;
    let held = en.status("app").unwrap();
    assert_eq!(held.canary_weight, 20);
    assert_eq!(
        held.ticks, lagging.ticks,
        "no tick while a plane owes an answer"
    );
    assert_eq!(
        held.events
            .iter()
            .filter(|e| e.reason == "WaitingForReplicas")
            .count(),
        1,
        "named once for one wait"
    );
    slow.held.store(false, Ordering::SeqCst);
    slow.release.notify_waiters();
    let s = until(&en, "acknowledged", |s| {
        s.events.iter().any(|e| e.reason == "ReplicasAcknowledged")
    })
    .await;
    assert!(s.waiting_for_replicas.is_empty() && s.waiting_since_ms.is_none());
    // The wait ended: the next tick (long due) steps on at once.
    until(&en, "the next step", |s| s.canary_weight == 30).await;
    assert_eq!((store_weight(&here), store_weight(&there)), (30, 30));
    en.shutdown().await;
}
