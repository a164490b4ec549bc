//! The driver's tick and the request path's passive observation.

use super::*;

use crate::dataplane::backend::Endpoint;
use crate::dataplane::endpoints::health::ProbeResult;
use crate::dataplane::endpoints::outlier::Outcome;
use crate::dataplane::endpoints::rolling::{self, Action, Phase};
use arc_swap::ArcSwap;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl EndpointControl {
    /// One tick: probe results in, one rolling step, rotation swapped if it changed,
    /// drains finished (`in_flight == 0`, or `drain_timeout_ms` passed), expired
    /// ejections cleared. `results` may name endpoints the update no longer knows
    /// (the list changed while probing): those are ignored.
    pub fn tick(
        &self,
        rotation: &ArcSwap<Vec<Arc<Endpoint>>>,
        results: &[(String, ProbeResult)],
        now: u64,
        drain_timeout_ms: u64,
    ) {
        let mut guard = lock(&self.state);
        let m = &mut *guard;
        let generation = m.generation;

        // Health: count the probes; the balancer's flag follows a change below.
        let mut changed: Vec<String> = Vec::new();
        if let Some(cfg) = &m.settings.health {
            for (ep, result) in results {
                let Some(h) = m.health.get_mut(ep) else {
                    continue;
                };
                if !h.observe(*result, cfg) {
                    continue;
                }
                let ready = h.ready;
                changed.push(ep.clone());
                let (kind, msg) = if ready {
                    ("ready", "health check passes")
                } else {
                    ("notReady", "health check fails")
                };
                if ready {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint ready");
                } else {
                    tracing::warn!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint not ready");
                }
                self.push_event(kind, Some(ep), generation, msg.to_string(), now);
            }
        }

        // The balancer's flag follows health and gate together, and only when one
        // of them changed: nothing else is overwritten.
        if std::mem::take(&mut m.gate_changed) {
            changed = m.objects.keys().cloned().collect();
        }
        for ep in &changed {
            if let Some(obj) = m.objects.get(ep) {
                obj.ready.store(m.ready(ep), Ordering::Relaxed);
            }
        }

        // One step of the rolling update.
        let (mut next, actions) = {
            let readiness = |ep: &str| m.ready(ep);
            rolling::step(&m.update, &readiness, now)
        };
        for action in &actions {
            match action {
                Action::Add(ep) => {
                    let ready = m.ready(ep);
                    let obj = match m.objects.get(ep) {
                        Some(obj) => Some(obj.clone()),
                        None => Endpoint::new(ep),
                    };
                    let Some(obj) = obj else {
                        tracing::error!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "endpoint is not host:port; not added");
                        continue;
                    };
                    obj.ready.store(ready, Ordering::Relaxed);
                    obj.draining.store(false, Ordering::Relaxed);
                    obj.consecutive_failures.store(0, Ordering::Relaxed);
                    m.objects.insert(ep.clone(), obj);
                    m.draining_since.remove(ep);
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, generation, "endpoint joins the rotation");
                    self.push_event(
                        "added",
                        Some(ep),
                        generation,
                        "joins the rotation".into(),
                        now,
                    );
                }
                Action::Remove(ep) => {
                    if let Some(obj) = m.objects.get(ep) {
                        obj.draining.store(true, Ordering::Relaxed);
                    }
                    m.draining_since.insert(ep.clone(), now);
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, generation, "endpoint leaves the rotation; draining");
                    self.push_event(
                        "removed",
                        Some(ep),
                        generation,
                        "leaves the rotation, draining".into(),
                        now,
                    );
                }
            }
        }
        if !actions.is_empty() {
            let rot: Vec<Arc<Endpoint>> = next
                .rotation()
                .filter_map(|x| m.objects.get(&x.endpoint).cloned())
                .collect();
            rotation.store(Arc::new(rot));
            lock(&self.detector).set_endpoints(&rotation_addresses(&next));
        }

        // Drains: done when nothing is in flight any more, or the timeout passed.
        let mut finished: Vec<(String, bool)> = m
            .draining_since
            .iter()
            .filter_map(|(ep, since)| {
                let idle = m
                    .objects
                    .get(ep)
                    .is_none_or(|o| o.in_flight.load(Ordering::Relaxed) == 0);
                let expired = now.saturating_sub(*since) >= drain_timeout_ms;
                (idle || expired).then(|| (ep.clone(), idle))
            })
            .collect();
        finished.sort();
        for (ep, idle) in finished {
            next.drained(&ep);
            m.draining_since.remove(&ep);
            m.objects.remove(&ep);
            let msg = if idle {
                "drained".to_string()
            } else {
                format!("drain timeout ({drain_timeout_ms} ms) passed with requests in flight")
            };
            tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep, "{msg}");
            self.push_event("drained", Some(&ep), generation, msg, now);
        }

        if next.phase_changed {
            let status = next.status();
            match next.phase {
                Phase::Stalled => {
                    tracing::warn!(target: "weir::endpoints", backend = %self.backend, generation, desired = status.desired, ready = status.ready, updated = status.updated, old = status.old, deadline_ms = next.config.progress_deadline_ms, "rolling update stalled: no progress within the progress deadline");
                    self.push_event(
                        "stalled",
                        None,
                        generation,
                        format!(
                            "no progress for {} ms: {} of {} desired endpoints in rotation, {} ready, {} old",
                            next.config.progress_deadline_ms,
                            status.updated,
                            status.desired,
                            status.ready,
                            status.old
                        ),
                        now,
                    );
                }
                Phase::Complete => {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, generation, "rolling update complete");
                    self.push_event(
                        "complete",
                        None,
                        generation,
                        "rotation is the desired list, all ready".into(),
                        now,
                    );
                }
                Phase::Progressing => {
                    tracing::info!(target: "weir::endpoints", backend = %self.backend, generation, "rolling update progressing again");
                    self.push_event(
                        "resumed",
                        None,
                        generation,
                        "progress after a stall".into(),
                        now,
                    );
                }
            }
        }

        let known: HashSet<&str> = next
            .members
            .iter()
            .map(|x| x.endpoint.as_str())
            .chain(next.desired.iter().map(String::as_str))
            .collect();
        m.health.retain(|ep, _| known.contains(ep.as_str()));
        let changed = next != m.update;
        m.update = next;
        if changed {
            self.publish(m);
        }

        // Re-admission: the ejection ran out; clearing the stamp keeps `pick` off the
        // clock.
        for ep in rotation.load().iter() {
            let until = ep.ejected_until_ms.load(Ordering::Relaxed);
            if until != 0
                && until <= now
                && ep
                    .ejected_until_ms
                    .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, "ejection over; endpoint re-admitted");
                self.push_event(
                    "readmitted",
                    Some(&ep.address),
                    generation,
                    "ejection over".into(),
                    now,
                );
            }
        }
    }

    /// The request path reports one upstream result of `ep`: `failed` is a 5xx answer,
    /// a connect error, a broken exchange or a timeout. Cheap: see the module doc.
    pub fn observe(&self, ep: &Endpoint, failed: bool) {
        let threshold = self.outlier_threshold.load(Ordering::Relaxed);
        if threshold == 0 {
            return;
        }
        if !failed {
            if ep.consecutive_failures.load(Ordering::Relaxed) != 0 {
                ep.consecutive_failures.store(0, Ordering::Relaxed);
            }
            return;
        }
        let n = ep.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < threshold {
            return;
        }
        ep.consecutive_failures.store(0, Ordering::Relaxed);
        let now = now_ms();
        let outcome = lock(&self.detector).on_threshold_reached(&ep.address, now);
        match outcome {
            Outcome::Ejected { until_ms } => {
                ep.ejected_until_ms.store(until_ms, Ordering::Relaxed);
                let ms = until_ms.saturating_sub(now);
                tracing::warn!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, failures = threshold, ejected_ms = ms, "endpoint ejected");
                self.push_event(
                    "ejected",
                    Some(&ep.address),
                    self.status.borrow().generation,
                    format!("{threshold} consecutive failures; ejected for {ms} ms"),
                    now,
                );
            }
            Outcome::EjectionSkipped => {
                tracing::info!(target: "weir::endpoints", backend = %self.backend, endpoint = %ep.address, "ejection skipped: maxEjectionPercent reached or last endpoint");
                self.push_event(
                    "ejectionSkipped",
                    Some(&ep.address),
                    self.status.borrow().generation,
                    format!("{threshold} consecutive failures, but maxEjectionPercent is reached or it is the last endpoint"),
                    now,
                );
            }
            Outcome::Recorded | Outcome::Ignored => {}
        }
    }
}
