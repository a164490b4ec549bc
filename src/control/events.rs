//! The event stream behind `GET /api/v1/events` (server-sent events).
//!
//! An [`EventBus`] is a broadcast of small JSON events. The table store's
//! change notifications are forwarded to it as `table` events
//! ([`forward_table_changes`]); the rollout engine publishes its own kinds
//! (`rollout`, ...) with [`EventBus::publish`]. A subscriber that falls more
//! than [`BUS_CAPACITY`] events behind is told so with a `lagged` event and
//! should re-read the state it cares about; there is no replay.

use crate::dataplane::store::TableChanged;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::{broadcast, watch};

/// Events kept for slow subscribers before they are told they lagged.
pub const BUS_CAPACITY: usize = 1024;

/// One published event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Monotonic per bus, starting at 1 (the SSE `id:` field).
    pub id: u64,
    /// The SSE `event:` field, e.g. `table` or `rollout`.
    pub kind: String,
    /// One line of JSON (the SSE `data:` field).
    pub data: Arc<str>,
}

impl Event {
    /// The SSE wire form of the event, ending with the blank line.
    pub fn to_sse(&self) -> String {
        // `data` is serde_json output, which never contains a raw newline;
        // split anyway so a future caller cannot break the framing.
        let mut s = format!("id: {}\nevent: {}\n", self.id, self.kind);
        for line in self.data.split('\n') {
            s.push_str("data: ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
        s
    }
}

/// A broadcast of events to every `/api/v1/events` subscriber.
#[derive(Debug)]
pub struct EventBus {
    /// The broadcast channel (bounded; slow receivers lag).
    tx: broadcast::Sender<Event>,
    /// Last id handed out.
    next_id: AtomicU64,
}

impl Default for EventBus {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(BUS_CAPACITY);
        EventBus {
            tx,
            next_id: AtomicU64::new(0),
        }
    }
}

impl EventBus {
    /// An empty bus.
    pub fn new() -> Arc<Self> {
        Arc::new(EventBus::default())
    }

    /// Publishes `data` as an event of `kind` (a short token such as
    /// `rollout`; it becomes the SSE `event:` field). A `time` field (RFC 3339)
    /// is added to object payloads that do not have one. Never blocks;
    /// returns the event id.
    pub fn publish(&self, kind: &str, data: serde_json::Value) -> u64 {
        let mut data = data;
        if let serde_json::Value::Object(map) = &mut data {
            map.entry("time").or_insert_with(|| {
                serde_json::Value::String(
                    humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                )
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let kind = sanitize_kind(kind);
        let _ = self.tx.send(Event {
            id,
            kind,
            data: data.to_string().into(),
        });
        id
    }

    /// A new subscriber, seeing events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }
}

/// Open event streams per client address, capped.
#[derive(Debug)]
pub struct StreamCounts {
    /// Streams one address may hold at once.
    limit: usize,
    /// Open streams by client address (entries at zero are removed).
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open stream; its client's count goes down when it is dropped.
#[derive(Debug)]
pub struct StreamSlot {
    counts: Arc<StreamCounts>,
    client: IpAddr,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.counts.lock();
        if let Some(n) = open.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

impl StreamCounts {
    /// At most `limit` streams per client address.
    pub fn new(limit: usize) -> Arc<StreamCounts> {
        Arc::new(StreamCounts {
            limit,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The per-client limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot for one more stream of `client`, or `None` when it holds `limit`.
    pub fn open(self: &Arc<Self>, client: IpAddr) -> Option<StreamSlot> {
        let mut open = self.lock();
        let n = open.entry(client).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            counts: self.clone(),
            client,
        })
    }
}

/// SSE field values end at a newline; keep kinds to one safe token.
fn sanitize_kind(kind: &str) -> String {
    let k: String = kind
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
        .collect();
    if k.is_empty() {
        "message".into()
    } else {
        k
    }
}

/// The payload of a `table` event.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TableEvent<'a> {
    old_version: u64,
    new_version: u64,
    actor: &'a str,
    what: &'a str,
}

/// Forwards the store's change notifications to `bus` as `table` events
/// until `shutdown` turns true. Call it with `store.subscribe()` taken
/// before any write can happen (before the task is spawned), so that no
/// change is missed.
pub async fn forward_table_changes(
    mut rx: broadcast::Receiver<TableChanged>,
    bus: Arc<EventBus>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Ok(c) => {
                    let ev = TableEvent {
                        old_version: c.old_version,
                        new_version: c.new_version,
                        actor: &c.actor,
                        what: &c.what,
                    };
                    if let Ok(v) = serde_json::to_value(&ev) {
                        bus.publish("table", v);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    bus.publish("lagged", serde_json::json!({ "missed": n, "source": "table" }));
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_per_client_address() {
        let counts = StreamCounts::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let s1 = counts.open(a).unwrap();
        let _s2 = counts.open(a).unwrap();
        assert!(counts.open(a).is_none());
        let _other = counts.open(b).expect("another client has its own cap");
        drop(s1);
        assert!(counts.open(a).is_some(), "a closed stream frees its place");
    }

    #[test]
    fn sse_framing_and_ids() {
        let bus = EventBus::new();
        let mut rx = bus.subscribe();
        assert_eq!(
            bus.publish("rollout", serde_json::json!({"phase": "Progressing"})),
            1
        );
        assert_eq!(bus.publish("bad\nkind", serde_json::json!(5)), 2);
        let a = rx.try_recv().unwrap();
        assert_eq!(a.kind, "rollout");
        let sse = a.to_sse();
        assert!(sse.starts_with("id: 1\nevent: rollout\ndata: {"), "{sse}");
        assert!(sse.contains("\"phase\":\"Progressing\""));
        assert!(sse.contains("\"time\":"));
        assert!(sse.ends_with("}\n\n"));
        let b = rx.try_recv().unwrap();
        assert_eq!(b.kind, "badkind");
        assert_eq!(b.to_sse(), "id: 2\nevent: badkind\ndata: 5\n\n");
    }
}
