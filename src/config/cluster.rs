//! PURE: the `cluster:` block, validated (the settings the `cluster` module
//! runs with; here, below it, so that `config` imports nothing above itself).
//!
//! ```yaml
//! cluster:
//!   etcd: ["https://10.0.0.5:2379", "https://10.0.0.6:2379"]   # or all http://
//!   prefix: /weir            # every key lives under it
//!   replicas: auto           # or a fixed shard count N
//!   heartbeat: 10s           # lease renewal; the lease TTL is 3 × heartbeat
//!   algorithm: round-robin   # or hash
//!   name: edge-1             # default: <hostname>:<admin port>
//!   apiUrl: http://10.0.0.7:9901   # default: http://<admin address>
//!   peerTokenFile: secrets/peer-token   # what replicas present to each other
//!   peerAllow: ["10.0.0.0/24"]          # where a peer's apiUrl may point (default loopback)
//!   ackTimeout: 5s                      # a replica slower than this is reported lagging
//!   etcdTls: { caFile: ca.pem, certFile: weir.pem, keyFile: weir-key.pem }
//!   etcdAuth: { username: weir, passwordFile: etcd-password }
//! ```
//!
//! Validation never reads the network, the clock or a file; it only checks shapes and
//! ranges, resolves paths against the config file's directory, and reports every
//! problem with its field path (`cluster.heartbeat`, ...). `etcdTls` and `etcdAuth`
//! are checked in `cluster_etcd` (re-exported here).

use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

use super::raw::{RawCluster, RawReplicas};

/// The peer token: never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerToken(pub String);

impl std::fmt::Debug for PeerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}
pub use super::cluster_etcd::{EtcdAuth, EtcdTls};

/// How canaries are spread over shards (`cluster.algorithm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// Sorted canary names dealt to sorted shards in turn.
    #[default]
    RoundRobin,
    /// Rendezvous hashing: minimal moves when a shard comes or goes.
    Hash,
}

impl Algorithm {
    /// The config spelling (`round-robin`, `hash`).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round-robin",
            Algorithm::Hash => "hash",
        }
    }

    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Algorithm> {
        match s {
            "round-robin" => Some(Algorithm::RoundRobin),
            "hash" => Some(Algorithm::Hash),
            _ => None,
        }
    }
}

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "/weir";

/// Default heartbeat (lease renewal period).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// Shortest heartbeat accepted: etcd leases count in whole seconds and the TTL is
/// 3 × heartbeat, so anything shorter only adds load.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

/// Longest heartbeat accepted (a takeover would take over 30 minutes).
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(600);

/// Default `ackTimeout`.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// The default `peerAllow`: loopback only, so that a fleet on one host works as it
/// is and a fleet across hosts names its network.
pub fn default_peer_allow() -> Vec<IpNet> {
    ["127.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Largest fixed shard count.
pub const MAX_REPLICAS: i64 = 1024;

/// How many shards the fleet has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replicas {
    /// Exactly N shards (0..N-1). A shard nobody holds is adopted by a live replica
    /// after its holder's lease expired; extra replicas wait as standbys.
    Fixed(u32),
    /// One shard per live member (`<prefix>/members/`).
    Auto,
}

/// The validated `cluster:` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd client URLs (`http://host:port`, or all `https://host:port`), tried in
    /// order.
    pub etcd: Vec<String>,
    /// Key prefix, starting with `/`, no trailing `/`.
    pub prefix: String,
    /// Shard count.
    pub replicas: Replicas,
    /// Lease renewal period; the lease TTL is 3 × heartbeat.
    pub heartbeat: Duration,
    /// Canary → shard assignment.
    pub algorithm: Algorithm,
    /// This replica's name; `None`: `<hostname>:<admin port>`, decided at start.
    pub name: Option<String>,
    /// This replica's control-API URL as other replicas reach it; `None`:
    /// `http://<admin address>` as bound.
    pub api_url: Option<String>,
    /// The token replicas present to each other (`peerTokenFile`, read at load).
    pub peer_token: Option<PeerToken>,
    /// Networks another replica's control API may be in (`peerAllow`).
    pub peer_allow: Vec<IpNet>,
    /// Wait for a replica's acknowledgement before it is reported lagging.
    pub ack_timeout: Duration,
    /// TLS to `https://` endpoints (CA, client certificate); `None` with `https://`:
    /// the Mozilla roots and no client certificate.
    pub etcd_tls: Option<EtcdTls>,
    /// The etcd v3 user weir authenticates as; `None`: no authentication.
    pub etcd_auth: Option<EtcdAuth>,
}

impl ClusterSettings {
    /// The lease TTL etcd is asked for: 3 × heartbeat rounded up to whole seconds
    /// (etcd's unit), at least 1.
    pub fn lease_ttl_secs(&self) -> i64 {
        let ms = self.heartbeat.as_millis().saturating_mul(3);
        i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX).max(1)
    }
}

/// A replica or canary name usable in a key: `[A-Za-z0-9._:-]`, 1 to 128 bytes.
pub fn valid_key_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
}

/// `http://host:port` with nothing after the authority but an optional `/`.
fn valid_base_url(s: &str, schemes: &[&str]) -> Result<(), String> {
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(format!(
            "expected a URL such as http://127.0.0.1:2379 (got {s:?})"
        ));
    };
    if !schemes.contains(&scheme) {
        return Err(format!(
            "scheme {scheme:?} is not supported here (use {})",
            schemes.join(" or ")
        ));
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "expected scheme://host:port with no path (got {s:?})"
        ));
    }
    match s.parse::<http::Uri>() {
        Ok(u) if u.host().is_some() => Ok(()),
        _ => Err(format!("not a valid URL: {s:?}")),
    }
}

/// Validates the block (files named in it are relative to `base`, the config file's
/// directory); errors are `(field path, reason)`.
pub fn validate(raw: &RawCluster, base: &Path) -> Result<ClusterSettings, Vec<(String, String)>> {
    let mut errs: Vec<(String, String)> = Vec::new();
    let mut push = |p: &str, r: String| errs.push((format!("cluster.{p}"), r));
    if raw.etcd.is_empty() {
        push(
            "etcd",
            "at least one etcd endpoint is required (http://host:port or https://host:port)".into(),
        );
    }
    for (i, e) in raw.etcd.iter().enumerate() {
        if let Err(r) = valid_base_url(e, &["http", "https"]) {
            push(&format!("etcd[{i}]"), r);
        }
    }
    let (etcd_tls, etcd_auth) = super::cluster_etcd::validate_security(
        &raw.etcd,
        raw.etcd_tls.as_ref(),
        raw.etcd_auth.as_ref(),
        base,
        &mut push,
    );
    let prefix = raw.prefix.clone().unwrap_or_else(|| DEFAULT_PREFIX.into());
    if !prefix.starts_with('/')
        || prefix.len() < 2
        || prefix.ends_with('/')
        || prefix.contains("//")
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
    {
        push(
            "prefix",
            format!("expected a key prefix such as /weir: a leading /, no trailing /, letters, digits, . _ - (got {prefix:?})"),
        );
    }
    let replicas = match &raw.replicas {
        None => Replicas::Auto,
        Some(RawReplicas::Word(w)) if w == "auto" => Replicas::Auto,
        Some(RawReplicas::Word(w)) => {
            push(
                "replicas",
                format!("expected a number or \"auto\" (got {w:?})"),
            );
            Replicas::Auto
        }
        Some(RawReplicas::Count(n)) if (1..=MAX_REPLICAS).contains(n) => {
            Replicas::Fixed(u32::try_from(*n).unwrap_or(1))
        }
        Some(RawReplicas::Count(n)) => {
            push(
                "replicas",
                format!("must be between 1 and {MAX_REPLICAS} (got {n})"),
            );
            Replicas::Auto
        }
    };
    let heartbeat = match &raw.heartbeat {
        None => DEFAULT_HEARTBEAT,
        Some(s) => match super::parse_duration(s) {
            Ok(d) if d < MIN_HEARTBEAT || d > MAX_HEARTBEAT => {
                push(
                    "heartbeat",
                    format!("must be between {MIN_HEARTBEAT:?} and {MAX_HEARTBEAT:?} (got {s})"),
                );
                DEFAULT_HEARTBEAT
            }
            Ok(d) => d,
            Err(e) => {
                push("heartbeat", e);
                DEFAULT_HEARTBEAT
            }
        },
    };
    let algorithm = match raw.algorithm.as_deref() {
        None => Algorithm::RoundRobin,
        Some(a) => Algorithm::parse(a).unwrap_or_else(|| {
            push(
                "algorithm",
                format!("expected round-robin or hash (got {a:?})"),
            );
            Algorithm::RoundRobin
        }),
    };
    if let Some(n) = &raw.name {
        if !valid_key_name(n) {
            push(
                "name",
                format!("expected 1 to 128 of A-Z a-z 0-9 . _ - : (got {n:?})"),
            );
        }
    }
    if let Some(u) = &raw.api_url {
        if let Err(r) = valid_base_url(u, &["http", "https"]) {
            push("apiUrl", r);
        }
    }
    let mut peer_allow = Vec::new();
    for (i, cidr) in raw.peer_allow.iter().flatten().enumerate() {
        match super::parse_network(cidr) {
            Ok(n) => peer_allow.push(n),
            Err(e) => push(&format!("peerAllow[{i}]"), e),
        }
    }
    if raw.peer_allow.is_none() {
        peer_allow = default_peer_allow();
    }
    let ack_timeout = match &raw.ack_timeout {
        None => DEFAULT_ACK_TIMEOUT,
        Some(s) => match super::parse_duration(s) {
            Ok(d) if d.is_zero() || d > MAX_HEARTBEAT => {
                push(
                    "ackTimeout",
                    format!("must be above 0 and at most {MAX_HEARTBEAT:?} (got {s})"),
                );
                DEFAULT_ACK_TIMEOUT
            }
            Ok(d) => d,
            Err(e) => {
                push("ackTimeout", e);
                DEFAULT_ACK_TIMEOUT
            }
        },
    };
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(ClusterSettings {
        etcd: raw
            .etcd
            .iter()
            .map(|e| e.trim_end_matches('/').to_string())
            .collect(),
        prefix,
        replicas,
        heartbeat,
        algorithm,
        name: raw.name.clone(),
        api_url: raw
            .api_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_string()),
        // Read by the caller, which knows the config file's directory.
        peer_token: None,
        peer_allow,
        ack_timeout,
        etcd_tls,
        etcd_auth,
    })
}

impl ClusterSettings {
    /// True when `ip` is inside `peerAllow`.
    pub fn peer_allowed(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
            v4 => v4,
        };
        self.peer_allow.iter().any(|n| n.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate_here(raw: &RawCluster) -> Result<ClusterSettings, Vec<(String, String)>> {
        validate(raw, Path::new("."))
    }

    fn raw(etcd: &[&str]) -> RawCluster {
        RawCluster {
            etcd: etcd.iter().map(|s| s.to_string()).collect(),
            ..RawCluster::default()
        }
    }

    #[test]
    fn defaults() {
        let s = validate_here(&raw(&["http://127.0.0.1:2379/"])).expect("valid");
        assert_eq!(s.etcd, vec!["http://127.0.0.1:2379"]);
        assert_eq!(s.prefix, "/weir");
        assert_eq!(s.replicas, Replicas::Auto);
        assert_eq!(s.heartbeat, Duration::from_secs(10));
        assert_eq!(s.algorithm, Algorithm::RoundRobin);
        assert_eq!(s.lease_ttl_secs(), 30);
        assert_eq!(s.ack_timeout, DEFAULT_ACK_TIMEOUT);
        assert!(s.peer_allowed("127.0.0.5".parse().unwrap()));
        assert!(s.peer_allowed("::1".parse().unwrap()));
        assert!(s.peer_allowed("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!s.peer_allowed("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn peer_allow_replaces_the_default() {
        let s = validate_here(&RawCluster {
            peer_allow: Some(vec!["10.1.0.0/16".into(), "192.168.0.7".into()]),
            ack_timeout: Some("1500ms".into()),
            ..raw(&["http://e:2379"])
        })
        .expect("valid");
        assert!(s.peer_allowed("10.1.2.3".parse().unwrap()));
        assert!(s.peer_allowed("192.168.0.7".parse().unwrap()));
        assert!(!s.peer_allowed("192.168.0.8".parse().unwrap()));
        assert!(
            !s.peer_allowed("127.0.0.1".parse().unwrap()),
            "loopback is no longer allowed"
        );
        assert_eq!(s.ack_timeout, Duration::from_millis(1500));
        let none = validate_here(&RawCluster {
            peer_allow: Some(vec![]),
            ..raw(&["http://e:2379"])
        })
        .expect("valid");
        assert!(
            !none.peer_allowed("127.0.0.1".parse().unwrap()),
            "an empty list allows no peer"
        );
    }

    #[test]
    fn ttl_rounds_up_to_seconds() {
        let mut s = validate_here(&raw(&["http://e:2379"])).expect("valid");
        for (hb, ttl) in [
            (100, 1),
            (300, 1),
            (334, 2),
            (700, 3),
            (1000, 3),
            (10_000, 30),
        ] {
            s.heartbeat = Duration::from_millis(hb);
            assert_eq!(s.lease_ttl_secs(), ttl, "heartbeat {hb}ms");
        }
    }

    #[test]
    fn every_error_with_its_path() {
        let r = RawCluster {
            etcd: vec![
                "ftp://e:2379".into(),
                "e:2379".into(),
                "http://e:2379/v3".into(),
            ],
            prefix: Some("weir/".into()),
            replicas: Some(RawReplicas::Count(0)),
            heartbeat: Some("10ms".into()),
            algorithm: Some("consistent".into()),
            name: Some("a b".into()),
            api_url: Some("ftp://x".into()),
            peer_token_file: None,
            peer_allow: Some(vec!["10.0.0.0/8".into(), "ten".into()]),
            ack_timeout: Some("0s".into()),
            etcd_tls: None,
            etcd_auth: None,
        };
        let errs = validate_here(&r).expect_err("invalid");
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "cluster.etcd[0]",
                "cluster.etcd[1]",
                "cluster.etcd[2]",
                "cluster.prefix",
                "cluster.replicas",
                "cluster.heartbeat",
                "cluster.algorithm",
                "cluster.name",
                "cluster.apiUrl",
                "cluster.peerAllow[1]",
                "cluster.ackTimeout"
            ]
        );
        let errs = validate_here(&RawCluster {
            replicas: Some(RawReplicas::Word("many".into())),
            ..RawCluster::default()
        })
        .expect_err("invalid");
        assert_eq!(errs[0].0, "cluster.etcd");
        assert_eq!(errs[1].0, "cluster.replicas");
    }

    /// Through the real loader: YAML spellings (`replicas: 3` / `auto`), unknown
    /// fields refused, and errors located at `file:line:col` with their path.
    #[test]
    fn yaml_block_through_the_loader() {
        let base = "listeners:\n  - name: http\n    address: 127.0.0.1:0\n";
        let ok = format!(
            "{base}cluster:\n  etcd: [\"http://127.0.0.1:2379\"]\n  replicas: 3\n  heartbeat: 2s\n  algorithm: hash\n"
        );
        let cfg =
            crate::config::parse_yaml(&ok, "t.yaml", std::path::Path::new(".")).expect("valid");
        let c = cfg.cluster.expect("cluster block");
        assert_eq!(c.replicas, Replicas::Fixed(3));
        assert_eq!(c.heartbeat, Duration::from_secs(2));
        let auto = format!("{base}cluster:\n  etcd: [\"http://e:2379\"]\n  replicas: auto\n");
        let cfg =
            crate::config::parse_yaml(&auto, "t.yaml", std::path::Path::new(".")).expect("valid");
        assert_eq!(cfg.cluster.map(|c| c.replicas), Some(Replicas::Auto));
        let none =
            crate::config::parse_yaml(base, "t.yaml", std::path::Path::new(".")).expect("valid");
        assert!(none.cluster.is_none(), "no block: single-replica mode");

        let bad = format!("{base}cluster:\n  etcd: [\"http://e:2379\"]\n  heartbeat: 1ms\n");
        let e = crate::config::parse_yaml(&bad, "t.yaml", std::path::Path::new("."))
            .expect_err("invalid")
            .to_string();
        assert!(e.starts_with("t.yaml:6:"), "{e}");
        assert!(e.contains("cluster.heartbeat"), "{e}");
        let unknown = format!("{base}cluster:\n  etcd: [\"http://e:2379\"]\n  shards: 3\n");
        assert!(crate::config::parse_yaml(&unknown, "t.yaml", std::path::Path::new(".")).is_err());
    }

    #[test]
    fn fixed_replicas_and_names() {
        let s = validate_here(&RawCluster {
            replicas: Some(RawReplicas::Count(3)),
            algorithm: Some("hash".into()),
            name: Some("edge-1:9901".into()),
            api_url: Some("http://10.0.0.7:9901/".into()),
            prefix: Some("/prod/weir".into()),
            ..raw(&["http://127.0.0.1:2379"])
        })
        .expect("valid");
        assert_eq!(s.replicas, Replicas::Fixed(3));
        assert_eq!(s.algorithm, Algorithm::Hash);
        assert_eq!(s.api_url.as_deref(), Some("http://10.0.0.7:9901"));
        assert_eq!(s.prefix, "/prod/weir");
        assert!(valid_key_name("app.v2_x-1"));
        assert!(!valid_key_name(""));
        assert!(!valid_key_name("a/b"));
    }
}
