//! `deploy`: write a backend's endpoint list (a rolling update) and wait for it, as
//! `kubectl rollout status` does for a Deployment.
//!
//! One `PUT /api/v1/backends/{name}/endpoints`, then `GET /api/v1/backends/{name}`
//! every [`POLL`] until the update of that generation is `Complete` with every desired
//! endpoint ready (exit 0), is `Stalled` (its `progressDeadline` passed without
//! progress: exit 1 with the endpoints that are not ready), or `--timeout` passes (exit
//! 1). A progress line is printed whenever the counts change. The update itself goes on
//! in the server whatever the command does: stopping it only stops the waiting.

use super::*;
use crate::wire::rolling::{EndpointsAccepted, EndpointsRequest, RollingSummary};
use crate::wire::table::BackendStatus;

/// Time between two status reads.
const POLL: Duration = Duration::from_millis(250);

/// Sends the new list, then waits for its update to finish.
pub(super) async fn deploy(
    api: &ApiClient,
    opts: &CtlOptions,
    backend: &str,
    endpoints: &[String],
    timeout: Duration,
    out: &mut (dyn Write + Send),
) -> Result<(), CtlError> {
    let path = format!("/api/v1/backends/{}", encode_segment(backend));
    let body = serde_json::to_value(EndpointsRequest {
        endpoints: endpoints.to_vec(),
    })
    .map_err(|e| CtlError::Usage(format!("endpoints: {e}")))?;
    let accepted: EndpointsAccepted = api
        .ok(Method::PUT, &format!("{path}/endpoints"), Some(&body), None)
        .await?
        .parse()?;
    let generation = accepted.rollout.generation;
    if !opts.json {
        writeln!(
            out,
            "{backend}: rolling to {} (table version {}, update {generation})",
            accepted.rollout.desired.join(", "),
            accepted.version
        )?;
        out.flush()?;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_line = String::new();
    loop {
        let status: BackendStatus = api.ok(Method::GET, &path, None, None).await?.parse()?;
        let rolling: RollingSummary = match status.rolling_update {
            Some(v) => serde_json::from_value(v).map_err(|e| {
                CtlError::Transport(format!("unexpected rollingUpdate document: {e}"))
            })?,
            None => {
                return Err(CtlError::Transport(format!(
                    "backend {backend} has no rollingUpdate status"
                )))
            }
        };
        // A status of an older generation is the previous update's (another writer
        // may also have moved past ours: then ours is superseded, and the newer one
        // is what serves).
        let ours = rolling.generation >= generation;
        if ours {
            let line = progress_line(backend, &rolling);
            if line != last_line {
                if opts.json {
                    let v = serde_json::to_value(&rolling).unwrap_or(Value::Null);
                    writeln!(out, "{v}")?;
                } else {
                    writeln!(out, "{line}")?;
                }
                out.flush()?;
                last_line = line;
            }
            match rolling.phase.as_str() {
                "Complete" if rolling.ready >= rolling.desired => {
                    if !opts.json {
                        writeln!(
                            out,
                            "{backend}: rolled out: {}/{} ready",
                            rolling.ready, rolling.desired
                        )?;
                    }
                    return Ok(());
                }
                "Stalled" => return Err(CtlError::Failed(stalled_reason(backend, &rolling))),
                _ => {}
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CtlError::Failed(format!(
                "{backend}: not rolled out within {} ({}); the update goes on in the server",
                humantime::format_duration(timeout),
                if ours {
                    not_ready(&rolling)
                } else {
                    "the update has not started".to_string()
                }
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `app-green: Progressing  ready 1/2  updated 1  old 1  total 2  draining 0  (surge ≤1, unavailable ≤0)`.
pub(super) fn progress_line(backend: &str, r: &RollingSummary) -> String {
    format!(
        "{backend}: {}  ready {}/{}  updated {}  old {}  total {}  draining {}  (surge ≤{}, unavailable ≤{})",
        r.phase,
        r.ready,
        r.desired,
        r.updated,
        r.old,
        r.total,
        r.draining,
        r.resolved.max_surge,
        r.resolved.max_unavailable
    )
}

/// The desired endpoints that are not (yet) ready, with their failed probes.
fn not_ready(r: &RollingSummary) -> String {
    let waiting: Vec<String> = r
        .endpoints
        .iter()
        .filter(|e| e.desired && !(e.ready && e.in_rotation))
        .map(|e| {
            if e.failed_probes > 0 {
                format!(
                    "{} not ready ({} failed probes)",
                    e.address, e.failed_probes
                )
            } else {
                format!("{} not ready", e.address)
            }
        })
        .collect();
    if waiting.is_empty() {
        format!("{} old endpoint(s) still in rotation", r.old)
    } else {
        waiting.join(", ")
    }
}

pub(super) fn stalled_reason(backend: &str, r: &RollingSummary) -> String {
    let last = r
        .events
        .iter()
        .rev()
        .find(|e| e.generation == r.generation && e.kind == "stalled")
        .map(|e| format!(": {}", e.message))
        .unwrap_or_default();
    format!(
        "{backend}: the rolling update stalled (no progress for {}){last}; {}; the old endpoints keep serving",
        humantime::format_duration(Duration::from_millis(r.progress_deadline_ms)),
        not_ready(r)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(phase: &str) -> RollingSummary {
        serde_json::from_value(serde_json::json!({
            "generation": 2, "desired": 1, "ready": 1, "updated": 0, "old": 1, "total": 1,
            "draining": 0, "phase": phase, "desiredEndpoints": ["127.0.0.1:2"],
            "maxSurge": 1, "maxUnavailable": 0,
            "resolved": {"maxSurge": 1, "maxUnavailable": 0},
            "progressDeadlineMs": 2000, "msSinceStart": 3000, "msSinceProgress": 2500,
            "endpoints": [
                {"address": "127.0.0.1:1", "desired": false, "inRotation": true, "ready": true,
                 "ejected": false, "ejectedForMs": null, "draining": false, "inFlight": 0, "failedProbes": 0},
                {"address": "127.0.0.1:2", "desired": true, "inRotation": false, "ready": false,
                 "ejected": false, "ejectedForMs": null, "draining": false, "inFlight": 0, "failedProbes": 4}
            ],
            "events": [{"seq": 3, "backend": "b", "kind": "stalled", "endpoint": null, "generation": 2,
                        "message": "no progress for 2s", "atMs": 1}]
        }))
        .expect("the documented rollingUpdate shape")
    }

    #[test]
    fn lines_name_the_counts_and_a_stall_names_the_endpoint() {
        let r = summary("Stalled");
        assert_eq!(
            progress_line("b", &r),
            "b: Stalled  ready 1/1  updated 0  old 1  total 1  draining 0  (surge ≤1, unavailable ≤0)"
        );
        let why = stalled_reason("b", &r);
        assert!(why.contains("no progress for 2s"), "{why}");
        assert!(
            why.contains("127.0.0.1:2 not ready (4 failed probes)"),
            "{why}"
        );
    }
}
