//! The driver against an in-memory Engine, on paused time: reconnect backoff,
//! the last lists kept while disconnected, bursts throttled into one write,
//! revisions handed to the table store.

use super::client::{Engine, EngineFuture, EventStream};
use super::events::Event;
use super::*;
use crate::config::{compile_table_with, DockerEndpoint, TableRules};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// An Engine whose containers the test edits and whose event stream it feeds.
#[derive(Default)]
struct Fake {
    containers: Mutex<BTreeMap<String, Container>>,
    events: Mutex<Option<mpsc::UnboundedReceiver<Result<Event, String>>>>,
    lists: AtomicUsize,
}

struct Rx(mpsc::UnboundedReceiver<Result<Event, String>>);

impl futures_core::Stream for Rx {
    type Item = Result<Event, String>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

impl Engine for Fake {
    fn ping(&self) -> EngineFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
    fn list(&self) -> EngineFuture<'_, Vec<String>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        let ids = self.containers.lock().unwrap().keys().cloned().collect();
        Box::pin(async move { Ok(ids) })
    }
    fn inspect<'a>(&'a self, id: &'a str) -> EngineFuture<'a, Option<Container>> {
        let c = self.containers.lock().unwrap().get(id).cloned();
        Box::pin(async move { Ok(c) })
    }
    fn events(&self) -> EventStream {
        let rx = self
            .events
            .lock()
            .unwrap()
            .take()
            .expect("one stream per connection");
        Box::pin(Rx(rx))
    }
}

fn container(id: &str, backend: &str, ip: &str, revision: &str, health: Option<&str>) -> Container {
    Container {
        id: id.into(),
        name: format!("c-{id}"),
        labels: [
            (labels::LABEL_BACKEND.to_string(), backend.to_string()),
            (labels::LABEL_PORT.to_string(), "9001".to_string()),
            (labels::LABEL_REVISION.to_string(), revision.to_string()),
        ]
        .into(),
        state: "running".into(),
        health: health.map(str::to_string),
        image_id: "sha256:abc".into(),
        networks: [("net".to_string(), ip.to_string())].into(),
    }
}

fn ev(action: &str, id: &str) -> Event {
    Event {
        kind: "container".into(),
        action: action.into(),
        id: id.into(),
        attributes: BTreeMap::new(),
    }
}

fn store() -> Arc<TableStore> {
    let raw: crate::config::raw::RawTable = serde_json::from_value(serde_json::json!({
        "backends": {
            "app-blue": {"provider": "docker"},
            "app-green": {"provider": "docker"},
            "static": {"endpoints": ["127.0.0.1:9001"]},
        },
        "routes": [
            {"name": "app", "primary": "app-blue", "canary": "app-green"},
            {"name": "s", "hosts": ["s.test"], "primary": "static"},
        ],
    }))
    .unwrap();
    let spec = compile_table_with(
        &raw,
        TableRules {
            docker_provider: true,
            ..TableRules::default()
        },
    )
    .unwrap();
    let store = TableStore::new(spec);
    store.enable_providers();
    store
}

fn settings() -> DockerSettings {
    DockerSettings {
        endpoint: DockerEndpoint::Unix("/nonexistent/docker.sock".into()),
        network: None,
        debounce: Duration::from_millis(250),
        resync_interval: Duration::from_secs(30),
        timeout: Duration::from_secs(10),
    }
}

fn endpoints(store: &TableStore, backend: &str) -> Vec<String> {
    store.load().spec.backends[backend].endpoints.clone()
}

/// Lets the driver run until it waits on time again.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn backoff_doubles_to_its_cap_with_equal_jitter() {
    assert_eq!(backoff(0, 0.0), Duration::from_millis(250));
    assert_eq!(backoff(0, 1.0), Duration::from_millis(500));
    assert_eq!(backoff(1, 1.0), Duration::from_secs(1));
    assert_eq!(backoff(3, 0.5), Duration::from_secs(3));
    assert_eq!(backoff(10, 1.0), BACKOFF_MAX);
    assert_eq!(backoff(u32::MAX, 0.0), BACKOFF_MAX / 2);
    for a in 0..20 {
        let d = backoff(a, 0.37);
        assert!(d >= BACKOFF_MIN / 2 && d <= BACKOFF_MAX, "{a}: {d:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn refused_connections_are_retried_with_backoff_and_reported() {
    let store = store();
    let board = ProviderBoard::new();
    let attempts = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let fake = Arc::new(Fake::default());
    fake.containers.lock().unwrap().insert(
        "b1".into(),
        container("b1", "app-blue", "172.20.0.2", "v1", None),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx);
    let connect: Connector = {
        let attempts = attempts.clone();
        let fake = fake.clone();
        Arc::new(move || {
            let mut a = attempts.lock().unwrap();
            a.push(Instant::now());
            if a.len() <= 3 {
                Err("connection refused".into())
            } else {
                Ok(fake.clone() as Arc<dyn Engine>)
            }
        })
    };
    let (stop, shutdown) = watch::channel(false);
    let start = Instant::now();
    let task = spawn(
        settings(),
        store.clone(),
        board.clone(),
        connect,
        Clock::system(),
        7,
        None,
        shutdown,
    );
    settle().await;
    let s = &board.list()[0];
    assert!(!s.connected);
    assert_eq!(s.last_error.as_deref(), Some("connection refused"));
    assert_eq!(s.endpoint, "unix:///nonexistent/docker.sock");
    // The same seed gives the same jitter: the waits are exactly these.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let waits: Vec<Duration> = (0..3).map(|a| backoff(a, rng.random::<f64>())).collect();
    tokio::time::sleep(waits.iter().sum::<Duration>() + Duration::from_millis(1)).await;
    settle().await;
    let at: Vec<Duration> = attempts
        .lock()
        .unwrap()
        .iter()
        .map(|t| *t - start)
        .collect();
    assert_eq!(at.len(), 4, "{at:?}");
    assert_eq!(at[1] - at[0], waits[0]);
    assert_eq!(at[2] - at[1], waits[1]);
    assert_eq!(at[3] - at[2], waits[2]);
    assert!(board.list()[0].connected);
    assert_eq!(endpoints(&store, "app-blue"), ["172.20.0.2:9001"]);
    drop(tx);
    let _ = stop.send(true);
    let _ = task.await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_connection_keeps_the_lists_and_a_reconnect_resyncs() {
    let store = store();
    let board = ProviderBoard::new();
    let fake = Arc::new(Fake::default());
    for (id, b, ip, rev) in [
        ("b1", "app-blue", "172.20.0.2", "v1"),
        ("b2", "app-blue", "172.20.0.3", "v1"),
        ("g1", "app-green", "172.20.0.4", "v2"),
    ] {
        fake.containers
            .lock()
            .unwrap()
            .insert(id.into(), container(id, b, ip, rev, Some("healthy")));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx);
    let connect: Connector = {
        let fake = fake.clone();
        Arc::new(move || Ok(fake.clone() as Arc<dyn Engine>))
    };
    let (stop, shutdown) = watch::channel(false);
    let task = spawn(
        settings(),
        store.clone(),
        board.clone(),
        connect,
        Clock::system(),
        1,
        None,
        shutdown,
    );
    settle().await;
    assert_eq!(
        endpoints(&store, "app-blue"),
        ["172.20.0.2:9001", "172.20.0.3:9001"]
    );
    assert_eq!(endpoints(&store, "app-green"), ["172.20.0.4:9001"]);
    assert_eq!(
        store
            .revisions()
            .common("app-green", &endpoints(&store, "app-green"))
            .as_deref(),
        Some("v2")
    );
    // The daemon goes away, and meanwhile a container dies: nothing changes.
    let version = store.load().version;
    fake.containers.lock().unwrap().remove("b2");
    let _ = tx.send(Err("connection reset by peer".into()));
    settle().await;
    let s = &board.list()[0];
    assert!(!s.connected);
    assert_eq!(s.disconnects, 1);
    assert_eq!(s.last_error.as_deref(), Some("connection reset by peer"));
    assert_eq!(store.load().version, version, "no write while disconnected");
    assert_eq!(
        endpoints(&store, "app-blue"),
        ["172.20.0.2:9001", "172.20.0.3:9001"]
    );
    // It comes back: the next attempt (within the first backoff) re-lists.
    let (tx2, rx2) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx2);
    tokio::time::sleep(BACKOFF_MIN + Duration::from_millis(1)).await;
    settle().await;
    assert!(board.list()[0].connected);
    assert_eq!(endpoints(&store, "app-blue"), ["172.20.0.2:9001"]);
    drop(tx2);
    let _ = stop.send(true);
    let _ = task.await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_events_is_one_write_after_the_debounce() {
    let store = store();
    let board = ProviderBoard::new();
    let fake = Arc::new(Fake::default());
    fake.containers.lock().unwrap().insert(
        "b1".into(),
        container("b1", "app-blue", "172.20.0.2", "v1", None),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx);
    let connect: Connector = {
        let fake = fake.clone();
        Arc::new(move || Ok(fake.clone() as Arc<dyn Engine>))
    };
    let (stop, shutdown) = watch::channel(false);
    let task = spawn(
        settings(),
        store.clone(),
        board.clone(),
        connect,
        Clock::system(),
        1,
        None,
        shutdown,
    );
    settle().await;
    let version = store.load().version;
    // `docker compose up --scale app-blue=3`: two starts in quick succession.
    for (id, ip) in [("b2", "172.20.0.3"), ("b3", "172.20.0.4")] {
        fake.containers
            .lock()
            .unwrap()
            .insert(id.into(), container(id, "app-blue", ip, "v1", None));
        let _ = tx.send(Ok(ev("start", id)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settle().await;
    assert_eq!(store.load().version, version, "still inside the window");
    tokio::time::sleep(Duration::from_millis(200)).await;
    settle().await;
    assert_eq!(store.load().version, version + 1, "one write for the burst");
    assert_eq!(
        endpoints(&store, "app-blue"),
        ["172.20.0.2:9001", "172.20.0.3:9001", "172.20.0.4:9001"]
    );
    // health_status → not ready: still listed (the rolling update keeps it
    // out of the balancer), no table write.
    let _ = tx.send(Ok(ev("health_status: unhealthy", "b1")));
    fake.containers
        .lock()
        .unwrap()
        .get_mut("b1")
        .unwrap()
        .health = Some("unhealthy".into());
    tokio::time::sleep(Duration::from_millis(300)).await;
    settle().await;
    assert_eq!(store.load().version, version + 1, "the list did not change");
    let s = &board.list()[0];
    assert_eq!(
        s.backends["app-blue"].not_ready,
        BTreeMap::from([(
            "172.20.0.2:9001".to_string(),
            "health check: unhealthy".to_string()
        )])
    );
    let blue = store.backend("app-blue").unwrap();
    let last = blue.endpoints_view().events.last().cloned().unwrap();
    assert_eq!(
        (last.kind, last.endpoint.as_deref(), last.message.as_str()),
        (
            "notReady",
            Some("172.20.0.2:9001"),
            "provider: health check: unhealthy"
        )
    );
    // die of the others: out of the list.
    let _ = tx.send(Ok(ev("die", "b2")));
    let _ = tx.send(Ok(ev("die", "b3")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    settle().await;
    assert_eq!(endpoints(&store, "app-blue"), ["172.20.0.2:9001"]);
    // die of the last one: the last list is kept (a backend is never
    // emptied), not ready.
    let _ = tx.send(Ok(ev("die", "b1")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    settle().await;
    assert_eq!(endpoints(&store, "app-blue"), ["172.20.0.2:9001"]);
    let s = &board.list()[0];
    assert_eq!(
        s.backends["app-blue"].note.as_deref(),
        Some("no running container: the last endpoint list is kept, not ready")
    );
    assert_eq!(
        s.backends["app-blue"].not_ready["172.20.0.2:9001"],
        "no running container"
    );
    assert_eq!(s.events, 6);
    assert!(s.containers.iter().all(|c| !c.ready));
    // A periodic re-list happens without events.
    let lists = fake.lists.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(31)).await;
    settle().await;
    assert_eq!(fake.lists.load(Ordering::SeqCst), lists + 1);
    let _ = stop.send(true);
    let _ = task.await;
}

#[tokio::test(start_paused = true)]
async fn a_container_of_an_unknown_backend_is_reported_not_written() {
    let store = store();
    let board = ProviderBoard::new();
    let fake = Arc::new(Fake::default());
    fake.containers.lock().unwrap().insert(
        "x1".into(),
        container("x1", "app-red", "172.20.0.9", "v1", None),
    );
    let (_tx, rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx);
    let connect: Connector = {
        let fake = fake.clone();
        Arc::new(move || Ok(fake.clone() as Arc<dyn Engine>))
    };
    let (stop, shutdown) = watch::channel(false);
    let task = spawn(
        settings(),
        store.clone(),
        board.clone(),
        connect,
        Clock::system(),
        1,
        None,
        shutdown,
    );
    settle().await;
    let s = &board.list()[0];
    assert_eq!(s.containers.len(), 1);
    assert!(!s.containers[0].ready);
    assert_eq!(
        s.containers[0].reason.as_deref(),
        Some("backend \"app-red\" is not in the table")
    );
    assert_eq!(store.load().version, 1);
    let _ = stop.send(true);
    let _ = task.await;
}

/// A label naming a backend that does not say `provider: docker` takes nothing
/// over: the file's endpoints stay, the container is not ready, and
/// `ProviderLabelIgnored` is reported once per container and backend (in the
/// status, on the bus), again for a new container.
#[tokio::test(start_paused = true)]
async fn a_label_naming_a_backend_of_the_file_is_ignored_and_reported_once() {
    let store = store();
    let board = ProviderBoard::new();
    let bus = EventBus::new();
    let mut seen = bus.subscribe();
    let fake = Arc::new(Fake::default());
    for (id, b, ip) in [
        ("evil1", "static", "172.20.0.66"),
        ("b1", "app-blue", "172.20.0.2"),
    ] {
        fake.containers
            .lock()
            .unwrap()
            .insert(id.into(), container(id, b, ip, "v1", None));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    *fake.events.lock().unwrap() = Some(rx);
    let connect: Connector = {
        let fake = fake.clone();
        Arc::new(move || Ok(fake.clone() as Arc<dyn Engine>))
    };
    let (stop, shutdown) = watch::channel(false);
    let task = spawn(
        settings(),
        store.clone(),
        board.clone(),
        connect,
        Clock::system(),
        1,
        Some(bus.clone()),
        shutdown,
    );
    settle().await;
    assert_eq!(endpoints(&store, "static"), ["127.0.0.1:9001"]);
    assert_eq!(endpoints(&store, "app-blue"), ["172.20.0.2:9001"]);
    let s = &board.list()[0];
    assert!(!s.backends.contains_key("static"), "{:?}", s.backends);
    let evil = s.containers.iter().find(|c| c.backend == "static").unwrap();
    assert!(!evil.ready);
    assert!(
        evil.reason
            .as_deref()
            .is_some_and(|r| r.contains("does not say `provider: docker`")),
        "{evil:?}"
    );
    assert_eq!(s.recent_events.len(), 1, "{:?}", s.recent_events);
    let e = &s.recent_events[0];
    assert_eq!(
        (e.reason.as_str(), e.container.as_str(), e.backend.as_str()),
        ("ProviderLabelIgnored", "evil1", "static")
    );
    let published = seen.try_recv().expect("an event on the bus");
    assert_eq!(published.kind, "providers");
    assert!(
        published.data.contains("\"kind\":\"ProviderLabelIgnored\""),
        "{}",
        published.data
    );
    // Events and re-lists of the same container report nothing new.
    let _ = tx.send(Ok(ev("health_status: healthy", "evil1")));
    tokio::time::sleep(Duration::from_secs(31)).await;
    settle().await;
    assert_eq!(board.list()[0].recent_events.len(), 1);
    assert!(seen.try_recv().is_err());
    // A second container naming it: reported too; the list is still the file's.
    fake.containers.lock().unwrap().insert(
        "evil2".into(),
        container("evil2", "static", "172.20.0.67", "v1", None),
    );
    let _ = tx.send(Ok(ev("start", "evil2")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    settle().await;
    let s = &board.list()[0];
    assert_eq!(s.recent_events.len(), 2, "{:?}", s.recent_events);
    assert_eq!(s.recent_events[1].container, "evil2");
    assert_eq!(endpoints(&store, "static"), ["127.0.0.1:9001"]);
    let _ = stop.send(true);
    let _ = task.await;
}
