//! PURE: containers and their labels → each backend's endpoint list.
//!
//! A container with `weir.backend=NAME` belongs to backend NAME. Its endpoint is
//! `IP:PORT`: the IP it has in the configured network (or in its only network),
//! the port from `weir.port`. A running (or restarting) container with an
//! address is *listed*: its endpoint is in the backend's list, which is a
//! rolling update (DESIGN §7). It is *ready* only while it is running and, when
//! it has a HEALTHCHECK, healthy (Docker's `starting` and `unhealthy` are not
//! ready): the rolling update lets it join only then, and a broken release
//! therefore stalls instead of vanishing. Its revision is `weir.revision`, or
//! else its image ID, so an image rebuilt under the same tag is still a new
//! revision. Weights are not labels: they belong to the route.

use crate::wire::providers::{ContainerStatus, ProvidedBackend};
use std::collections::BTreeMap;

/// The backend a container serves.
pub const LABEL_BACKEND: &str = "weir.backend";
/// The port it listens on (in the container's network).
pub const LABEL_PORT: &str = "weir.port";
/// Its revision (default: the image ID).
pub const LABEL_REVISION: &str = "weir.revision";
/// Compose's project label: a Compose network `net` is named `<project>_net`.
const LABEL_COMPOSE_PROJECT: &str = "com.docker.compose.project";

/// What the provider knows of one container (from `GET /containers/{id}/json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// Full ID.
    pub id: String,
    /// Name without the leading `/`.
    pub name: String,
    /// Every label.
    pub labels: BTreeMap<String, String>,
    /// `created`, `running`, `paused`, `restarting`, `removing`, `exited`, `dead`.
    pub state: String,
    /// HEALTHCHECK status (`starting`, `healthy`, `unhealthy`); `None`: no check.
    pub health: Option<String>,
    /// `sha256:…` of the image.
    pub image_id: String,
    /// Network name → the container's IP in it (empty while it has none).
    pub networks: BTreeMap<String, String>,
}

fn short(id: &str) -> String {
    id.chars().take(12).collect()
}

/// The network a container's endpoint address is taken from: `network` by its
/// name or by its Compose name (`<project>_<network>`), else the only one.
fn pick_ip<'a>(c: &'a Container, network: Option<&str>) -> Result<&'a str, String> {
    let with_ip: Vec<(&String, &String)> =
        c.networks.iter().filter(|(_, ip)| !ip.is_empty()).collect();
    match network {
        Some(want) => {
            let compose = c
                .labels
                .get(LABEL_COMPOSE_PROJECT)
                .map(|p| format!("{p}_{want}"));
            c.networks
                .iter()
                .find(|(n, _)| n.as_str() == want || Some(n.as_str()) == compose.as_deref())
                .map(|(_, ip)| ip.as_str())
                .filter(|ip| !ip.is_empty())
                .ok_or_else(|| {
                    let on: Vec<&str> = c.networks.keys().map(String::as_str).collect();
                    format!("no IP in network {want:?} (networks: {})", on.join(", "))
                })
        }
        None => match with_ip.as_slice() {
            [(_, ip)] => Ok(ip.as_str()),
            [] => Err("no network with an IP (host network mode?)".into()),
            many => {
                let names: Vec<&str> = many.iter().map(|(n, _)| n.as_str()).collect();
                Err(format!(
                    "on {} networks ({}): set providers.docker.network",
                    many.len(),
                    names.join(", ")
                ))
            }
        },
    }
}

/// Judges one container; `None` when it has no `weir.backend` label.
pub fn judge(c: &Container, network: Option<&str>) -> Option<ContainerStatus> {
    let backend = c.labels.get(LABEL_BACKEND)?.trim().to_string();
    let revision = c
        .labels
        .get(LABEL_REVISION)
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| c.image_id.clone());
    let port = match c.labels.get(LABEL_PORT).map(|p| p.trim()) {
        None => Err("no weir.port label".to_string()),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("weir.port {p:?} is not a port (1..65535)")),
        },
    };
    let address = port.and_then(|port| {
        pick_ip(c, network).map(|ip| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        })
    });
    let not_ready = if backend.is_empty() {
        Some("empty weir.backend label".to_string())
    } else if c.state != "running" {
        Some(format!("not running ({})", c.state))
    } else if let Some(h) = c.health.as_deref().filter(|h| *h != "healthy") {
        Some(format!("health check: {h}"))
    } else {
        address.as_ref().err().cloned()
    };
    Some(ContainerStatus {
        id: short(&c.id),
        name: c.name.clone(),
        backend,
        address: address.ok(),
        revision,
        state: c.state.clone(),
        health: c.health.clone(),
        ready: not_ready.is_none(),
        reason: not_ready,
    })
}

/// Whether a container's endpoint is in its backend's list: it runs (or Docker
/// is restarting it) and has an address. Created, paused, exited, dead and
/// removing containers serve nothing and are left out.
fn listed(s: &ContainerStatus) -> bool {
    !s.backend.is_empty()
        && s.address.is_some()
        && matches!(s.state.as_str(), "running" | "restarting")
}

/// Every labelled container judged (sorted by backend, then name), and each
/// backend's listed endpoints with their revisions and, for those not ready,
/// the reason. A backend none of whose containers is listed has an empty list
/// here; keeping the previous list then is the driver's decision.
pub fn desired(
    containers: &[Container],
    network: Option<&str>,
) -> (BTreeMap<String, ProvidedBackend>, Vec<ContainerStatus>) {
    let mut statuses: Vec<ContainerStatus> = containers
        .iter()
        .filter_map(|c| judge(c, network))
        .collect();
    statuses.sort_by(|a, b| (&a.backend, &a.name).cmp(&(&b.backend, &b.name)));
    let mut backends: BTreeMap<String, ProvidedBackend> = BTreeMap::new();
    for s in &statuses {
        if s.backend.is_empty() {
            continue;
        }
        let b = backends.entry(s.backend.clone()).or_default();
        let Some(addr) = s.address.as_ref().filter(|_| listed(s)) else {
            continue;
        };
        if b.endpoints.contains(addr) {
            continue;
        }
        b.endpoints.push(addr.clone());
        b.revisions.insert(addr.clone(), s.revision.clone());
        if !s.ready {
            let why = s.reason.clone().unwrap_or_else(|| "not ready".into());
            b.not_ready.insert(addr.clone(), why);
        }
    }
    for b in backends.values_mut() {
        b.endpoints.sort();
    }
    (backends, statuses)
}

#[cfg(test)]
#[path = "labels_tests.rs"]
mod tests;
