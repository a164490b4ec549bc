//! What the API and the engine read: status, snapshots, events, views; and the event log.

use super::*;

use crate::dataplane::backend::Endpoint;
use crate::dataplane::endpoints::rolling;
use crate::dataplane::endpoints::rolling::RollingStatus;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

impl EndpointControl {
    /// Counts and phase of the current update.
    pub fn status(&self) -> RollingStatus {
        lock(&self.state).update.status()
    }

    /// Generation, desired list and status of the current update.
    pub fn snapshot(&self) -> RolloutSnapshot {
        self.status.borrow().clone()
    }

    /// A receiver that sees every new [`RolloutSnapshot`] (for async waiting, e.g.
    /// `rx.wait_for(|s| s.is_complete(generation))`).
    pub fn subscribe(&self) -> watch::Receiver<RolloutSnapshot> {
        self.status.subscribe()
    }

    /// Events with a sequence number above `after`, oldest first.
    pub fn events_since(&self, after: u64) -> Vec<EndpointEvent> {
        lock(&self.events)
            .recent
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect()
    }

    /// Everything the API shows about the endpoints, at `now`.
    pub fn view(&self, now: u64) -> EndpointsView {
        let m = lock(&self.state);
        let u = &m.update;
        let desired: HashSet<&str> = u.desired.iter().map(String::as_str).collect();
        let mut endpoints: Vec<EndpointView> = Vec::new();
        let mut seen = HashSet::new();
        let ready_of = |ep: &str| m.ready(ep);
        let failed_probes = |ep: &str| m.health.get(ep).map_or(0, |h| h.consecutive_failures);
        for member in &u.members {
            seen.insert(member.endpoint.as_str());
            let obj = m.objects.get(&member.endpoint);
            let until = obj.map_or(0, |o| o.ejected_until_ms.load(Ordering::Relaxed));
            let ejected = until > now;
            endpoints.push(EndpointView {
                address: member.endpoint.clone(),
                desired: desired.contains(member.endpoint.as_str()),
                in_rotation: !member.draining,
                ready: obj.map_or(ready_of(&member.endpoint), |o| {
                    o.ready.load(Ordering::Relaxed)
                }),
                ejected,
                ejected_for_ms: ejected.then(|| until - now),
                draining: member.draining,
                in_flight: obj.map_or(0, |o| o.in_flight.load(Ordering::Relaxed)),
                failed_probes: failed_probes(&member.endpoint),
            });
        }
        for ep in &u.desired {
            if !seen.insert(ep.as_str()) {
                continue;
            }
            endpoints.push(EndpointView {
                address: ep.clone(),
                desired: true,
                in_rotation: false,
                ready: ready_of(ep),
                ejected: false,
                ejected_for_ms: None,
                draining: false,
                in_flight: 0,
                failed_probes: failed_probes(ep),
            });
        }
        EndpointsView {
            generation: m.generation,
            status: u.status(),
            desired_endpoints: u.desired.clone(),
            max_surge: u.config.max_surge,
            max_unavailable: u.config.max_unavailable,
            resolved: rolling::resolve(
                u.config.max_surge,
                u.config.max_unavailable,
                u.desired.len(),
            ),
            progress_deadline_ms: u.config.progress_deadline_ms,
            ms_since_start: now.saturating_sub(u.started_ms),
            ms_since_progress: now.saturating_sub(u.last_progress_ms),
            endpoints,
            events: lock(&self.events).recent.iter().cloned().collect(),
        }
    }

    /// The checks in force and the health of the rotation, at `now`.
    pub fn health_view(&self, rotation: &[Arc<Endpoint>], now: u64) -> HealthView {
        let (health_check, outlier_detection) = {
            let m = lock(&self.state);
            (m.settings.health.clone(), m.settings.outlier)
        };
        let mut view = HealthView {
            health_check,
            outlier_detection,
            ready: Vec::new(),
            not_ready: Vec::new(),
            ejected: Vec::new(),
        };
        for ep in rotation {
            if ep.ready.load(Ordering::Relaxed) {
                view.ready.push(ep.address.clone());
            } else {
                view.not_ready.push(ep.address.clone());
            }
            if ep.ejected_until_ms.load(Ordering::Relaxed) > now {
                view.ejected.push(ep.address.clone());
            }
        }
        view
    }

    pub(super) fn publish(&self, m: &Managed) {
        self.status.send_replace(RolloutSnapshot {
            generation: m.generation,
            desired: m.update.desired.clone(),
            status: m.update.status(),
        });
    }

    pub(super) fn push_event(
        &self,
        kind: &'static str,
        endpoint: Option<&str>,
        generation: u64,
        message: String,
        now: u64,
    ) {
        let mut log = lock(&self.events);
        log.last_seq += 1;
        let event = EndpointEvent {
            seq: log.last_seq,
            backend: self.backend.clone(),
            kind,
            endpoint: endpoint.map(str::to_string),
            generation,
            message,
            at_ms: now,
        };
        if log.recent.len() >= EVENT_LOG_CAPACITY {
            log.recent.pop_front();
        }
        log.recent.push_back(event);
    }
}
