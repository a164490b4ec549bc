//! Which members this replica trusts as peers, and how far behind each one is.
//!
//! A member record is only text in etcd: anyone who can write the prefix can write
//! one. The owner of a canary sends its peer token to every peer and sums their
//! stats into the verdict, so a record counts only when
//! - it is bound to a lease (a replica always writes its record under its lease; a
//!   key without one would outlive every replica), and
//! - its `apiUrl` resolves into `cluster.peerAllow` (every address of a host name).
//!
//! Anything else is refused: left out of [`Cluster::peers`] and
//! [`Cluster::owner_of`], reported once as a `PeerRefused` event and counted in
//! `weir_cluster_peers_refused_total`. The replica's own record is never vetted.
//!
//! The engine reports, per canary, the members that have not acknowledged its last
//! routing step ([`Cluster::report_waiting`]); the status and the lag gauge read it.

use super::*;
use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::wire::cluster::RefusedPeer;

/// Longest wait for a host name of an `apiUrl` to resolve.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// A member's standing as a peer, for the `apiUrl` it was vetted with.
#[derive(Clone, Debug)]
pub(super) struct PeerCheck {
    pub(super) api_url: String,
    pub(super) verdict: Result<(), String>,
}

/// What the peer vetting keeps between passes.
#[derive(Default)]
pub(super) struct PeerState {
    /// Members (not this replica) by name.
    pub(super) checks: BTreeMap<String, PeerCheck>,
    /// Refused now, by name.
    pub(super) refused: BTreeMap<String, RefusedPeer>,
    /// Refusals already reported: (name, apiUrl, reason).
    reported: BTreeSet<(String, String, String)>,
    /// Refusals reported since start.
    pub(super) refused_total: u64,
    /// Per canary this replica drives: the members that have not acknowledged its
    /// last routing step, with when the wait began (ms since the Unix epoch).
    pub(super) waiting: BTreeMap<String, Vec<(String, u64)>>,
}

/// The host and port of `url`, or why it has none.
fn host_port(url: &str) -> Result<(String, u16), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("apiUrl {url:?} is not a URL"))?;
    let port = match uri.scheme_str() {
        Some("http") => uri.port_u16().unwrap_or(80),
        Some("https") => uri.port_u16().unwrap_or(443),
        _ => return Err(format!("apiUrl {url:?} is not an http:// or https:// URL")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("apiUrl {url:?} has no host"))?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
}

/// The addresses `url` points to: its IP, or every address its host name resolves to.
async fn addresses(url: &str) -> Result<Vec<IpAddr>, String> {
    let (host, port) = host_port(url)?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let lookup = tokio::time::timeout(
        RESOLVE_TIMEOUT,
        tokio::net::lookup_host(format!("{host}:{port}")),
    )
    .await;
    match lookup {
        Err(_) => Err(format!(
            "its host {host:?} did not resolve within {RESOLVE_TIMEOUT:?}"
        )),
        Ok(Err(e)) => Err(format!("its host {host:?} does not resolve: {e}")),
        Ok(Ok(it)) => {
            let ips: Vec<IpAddr> = it.map(|a| a.ip()).collect();
            if ips.is_empty() {
                Err(format!("its host {host:?} resolves to no address"))
            } else {
                Ok(ips)
            }
        }
    }
}

/// The `peerAllow` list as written in messages.
fn allow_list(s: &ClusterSettings) -> String {
    if s.peer_allow.is_empty() {
        return "empty".into();
    }
    s.peer_allow
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `url` may be a peer's control API under `settings`.
pub async fn vet_url(settings: &ClusterSettings, url: &str) -> Result<(), String> {
    let ips = addresses(url).await?;
    match ips.iter().find(|ip| !settings.peer_allowed(**ip)) {
        Some(ip) => Err(format!(
            "apiUrl {url:?} points to {ip}, outside cluster.peerAllow ({})",
            allow_list(settings)
        )),
        None => Ok(()),
    }
}

impl PeerState {
    /// Per member the engine waits for: the longest wait at `now` (ms) and the
    /// canaries waiting. Members waited for by none are absent.
    pub(super) fn lag(&self, now: u64) -> BTreeMap<String, (u64, Vec<String>)> {
        let mut out: BTreeMap<String, (u64, Vec<String>)> = BTreeMap::new();
        for (canary, list) in &self.waiting {
            for (member, since) in list {
                let e = out.entry(member.clone()).or_default();
                e.0 = e.0.max(now.saturating_sub(*since));
                e.1.push(canary.clone());
            }
        }
        out
    }
}

impl Inner {
    /// Vets the members of `view` (new ones, changed `apiUrl`s, and the refused ones
    /// again: a host name may resolve later), and reports new refusals.
    pub(super) async fn vet_peers(&self, view: &View) {
        let me = &self.opts.name;
        let mut todo: Vec<(String, String)> = Vec::new();
        {
            let st = lock(&self.state);
            for (name, e) in &view.members {
                if name == me {
                    continue;
                }
                let url = e
                    .record
                    .as_ref()
                    .map(|r| r.api_url.clone())
                    .unwrap_or_default();
                let settled = st
                    .peers
                    .checks
                    .get(name)
                    .is_some_and(|c| c.api_url == url && c.verdict.is_ok());
                if !settled {
                    todo.push((name.clone(), url));
                }
            }
        }
        let mut vetted = Vec::with_capacity(todo.len());
        for (name, url) in todo {
            let verdict = if url.is_empty() {
                Err("its record names no apiUrl".to_string())
            } else {
                vet_url(&self.opts.settings, &url).await
            };
            vetted.push((
                name,
                PeerCheck {
                    api_url: url,
                    verdict,
                },
            ));
        }
        let mut new = Vec::new();
        {
            let mut st = lock(&self.state);
            let p = &mut st.peers;
            p.checks.retain(|n, _| view.members.contains_key(n));
            p.checks.extend(vetted);
            let mut refused = BTreeMap::new();
            for (name, rec) in &view.unleased {
                refused.insert(
                    name.clone(),
                    RefusedPeer {
                        name: name.clone(),
                        api_url: rec.as_ref().map(|r| r.api_url.clone()).unwrap_or_default(),
                        reason: "its member record is bound to no lease (a replica writes its record under its lease)".into(),
                    },
                );
            }
            for (name, c) in &p.checks {
                if let Err(reason) = &c.verdict {
                    refused.insert(
                        name.clone(),
                        RefusedPeer {
                            name: name.clone(),
                            api_url: c.api_url.clone(),
                            reason: reason.clone(),
                        },
                    );
                }
            }
            for r in refused.values() {
                let key = (r.name.clone(), r.api_url.clone(), r.reason.clone());
                if p.reported.insert(key) {
                    p.refused_total += 1;
                    new.push(r.clone());
                }
            }
            // Forget reports of records that went away, so a record written again is
            // reported again.
            p.reported.retain(|(n, _, _)| refused.contains_key(n));
            p.refused = refused;
        }
        for r in new {
            // Every part came from etcd: quoted, so no control character reaches a
            // terminal or a log line raw.
            self.event(
                "PeerRefused",
                None,
                None,
                view.revision,
                format!(
                    "member record {:?} (apiUrl {:?}) is not trusted as a peer: {}; no request goes to it and its stats are not counted",
                    r.name, r.api_url, r.reason
                ),
            );
        }
    }

    /// True when member `name` with `api_url` passed the vetting.
    pub(super) fn trusted(&self, st: &State, name: &str, api_url: &str) -> bool {
        st.peers
            .checks
            .get(name)
            .is_some_and(|c| c.api_url == api_url && c.verdict.is_ok())
    }
}

impl Cluster {
    /// The engine's report for `canary`: the members that have not acknowledged its
    /// last routing step, each with when the wait began (ms since the Unix epoch).
    /// Empty: every live member has.
    pub fn report_waiting(&self, canary: &str, waiting: &[(String, u64)]) {
        let mut st = lock(&self.inner.state);
        if waiting.is_empty() {
            st.peers.waiting.remove(canary);
        } else {
            st.peers
                .waiting
                .insert(canary.to_string(), waiting.to_vec());
        }
    }

    /// Per live member: how long it has kept a routing step of a canary this replica
    /// drives unacknowledged (ms; 0 when it is up to date), and the canaries waiting.
    pub fn lag(&self) -> BTreeMap<String, (u64, Vec<String>)> {
        let st = lock(&self.inner.state);
        let mut out: BTreeMap<String, (u64, Vec<String>)> = st
            .view
            .as_ref()
            .map(|v| {
                v.members
                    .keys()
                    .map(|n| (n.clone(), (0, Vec::new())))
                    .collect()
            })
            .unwrap_or_default();
        out.extend(st.peers.lag(self.inner.clock.now_ms()));
        out
    }

    /// Refusals reported since start (`weir_cluster_peers_refused_total`).
    pub fn peers_refused_total(&self) -> u64 {
        lock(&self.inner.state).peers.refused_total
    }

    /// Records refused as peers now.
    pub fn refused_peers(&self) -> Vec<RefusedPeer> {
        lock(&self.inner.state)
            .peers
            .refused
            .values()
            .cloned()
            .collect()
    }

    /// Where the member record finds this replica's routing-table version (written
    /// at every heartbeat, shown as each member's applied version).
    pub fn set_table_version(&self, f: Arc<dyn Fn() -> u64 + Send + Sync>) {
        *lock(&self.inner.table_version) = Some(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(allow: &[&str]) -> ClusterSettings {
        let mut s = crate::config::cluster::validate(
            &crate::config::raw::RawCluster {
                etcd: vec!["http://127.0.0.1:2379".into()],
                ..Default::default()
            },
            std::path::Path::new("."),
        )
        .expect("valid");
        s.peer_allow = allow.iter().map(|a| a.parse().unwrap()).collect();
        s
    }

    #[tokio::test]
    async fn vetting_reads_addresses_and_host_names() {
        let s = settings(&["127.0.0.0/8", "::1/128"]);
        assert!(vet_url(&s, "http://127.0.0.1:9901").await.is_ok());
        assert!(vet_url(&s, "http://[::1]:9901").await.is_ok());
        assert!(vet_url(&s, "http://localhost:9901").await.is_ok());
        let e = vet_url(&s, "http://10.9.8.7:9901").await.unwrap_err();
        assert!(
            e.contains("outside cluster.peerAllow (127.0.0.0/8, ::1/128)"),
            "{e}"
        );
        let e = vet_url(&s, "ftp://127.0.0.1").await.unwrap_err();
        assert!(e.contains("not an http"), "{e}");
        let none = settings(&[]);
        let e = vet_url(&none, "http://127.0.0.1:1").await.unwrap_err();
        assert!(e.contains("(empty)"), "{e}");
    }
}
