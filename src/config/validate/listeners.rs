//! Listeners (with TLS termination), the admin listener and the `proxy:` settings.

use super::*;
use crate::config::admin_hosts::{parse_entry, AllowedHosts};

pub(super) fn validate_listeners(
    raw: &[RawListener],
    base: &Path,
    errs: &mut Errors,
) -> Vec<ListenerConfig> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for (i, l) in raw.iter().enumerate() {
        let path = format!("listeners[{i}]");
        if l.name.trim().is_empty() {
            errs.push(format!("{path}.name"), "must not be empty");
        } else if !names.insert(l.name.clone()) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate listener name {:?}", l.name),
            );
        }
        let addr = match l.address.parse::<SocketAddr>() {
            Ok(a) => {
                if a.port() != 0 && !addrs.insert(a) {
                    errs.push(
                        format!("{path}.address"),
                        format!("address {a} is used twice"),
                    );
                }
                Some(a)
            }
            Err(_) => {
                errs.push(
                    format!("{path}.address"),
                    format!(
                        "expected ip:port such as 0.0.0.0:8080 (got {:?})",
                        l.address
                    ),
                );
                None
            }
        };
        let tls = l
            .tls
            .as_ref()
            .map(|t| validate_listener_tls(&format!("{path}.tls"), t, base, errs));
        let mut trusted_proxies = Vec::new();
        for (j, cidr) in l.trusted_proxies.iter().enumerate() {
            match crate::config::parse_network(cidr) {
                Ok(n) => trusted_proxies.push(n),
                Err(e) => errs.push(format!("{path}.trustedProxies[{j}]"), e),
            }
        }
        if let Some(address) = addr {
            out.push(ListenerConfig {
                name: l.name.clone(),
                address,
                tls,
                trusted_proxies,
            });
        }
    }
    out
}

/// Both TLS forms of a listener; every file is read and parsed so that a
/// bad certificate is a config error with its field path, not a start-up
/// failure.
pub(super) fn validate_listener_tls(
    path: &str,
    t: &RawTls,
    base: &Path,
    errs: &mut Errors,
) -> ListenerTls {
    let mut pairs: Vec<(String, Option<&String>, Option<&String>)> = Vec::new();
    if t.cert_file.is_some() || t.key_file.is_some() {
        pairs.push((path.to_string(), t.cert_file.as_ref(), t.key_file.as_ref()));
    }
    for (i, c) in t.certificates.iter().enumerate() {
        pairs.push((
            format!("{path}.certificates[{i}]"),
            Some(&c.cert_file),
            Some(&c.key_file),
        ));
    }
    if pairs.is_empty() {
        errs.push(
            path,
            "set certFile and keyFile, or a certificates list of {certFile, keyFile}",
        );
    }
    let mut certificates = Vec::new();
    for (p, cert, key) in pairs {
        let (Some(cert), Some(key)) = (cert, key) else {
            let missing = if cert.is_none() {
                "certFile"
            } else {
                "keyFile"
            };
            errs.push(format!("{p}.{missing}"), "certFile and keyFile go together");
            continue;
        };
        let files = CertFiles {
            cert_file: base.join(cert),
            key_file: base.join(key),
        };
        match crate::config::tls::load_pair(&files.cert_file, &files.key_file) {
            Ok(_) => {}
            Err(crate::config::tls::PairError::Cert(m)) => errs.push(format!("{p}.certFile"), m),
            Err(crate::config::tls::PairError::Key(m)) => errs.push(format!("{p}.keyFile"), m),
        }
        certificates.push(files);
    }
    ListenerTls { certificates }
}

/// Time a client has to send a request body to the admin API, by default.
pub const DEFAULT_ADMIN_BODY_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn validate_admin(
    raw: Option<&RawAdmin>,
    base: &Path,
    errs: &mut Errors,
) -> AdminConfig {
    let default_address = SocketAddr::from(([127, 0, 0, 1], 9901));
    let default = AdminConfig {
        address: default_address,
        token: None,
        flagger_metrics: false,
        read_only_token: None,
        allowed_hosts: AllowedHosts::defaults(default_address),
        body_timeout: DEFAULT_ADMIN_BODY_TIMEOUT,
        token_files: Vec::new(),
    };
    let Some(a) = raw else { return default };
    let address = match a.address.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => {
            errs.push(
                "admin.address",
                format!(
                    "expected ip:port such as 127.0.0.1:9901 (got {:?})",
                    a.address
                ),
            );
            return default;
        }
    };
    let token = a
        .token_file
        .as_deref()
        .and_then(|f| read_token(base, f, "admin.tokenFile", errs));
    if token.is_none() && a.token_file.is_none() && !address.ip().is_loopback() {
        errs.push(
            "admin.tokenFile",
            format!("required because admin.address {address} is not a loopback address"),
        );
    }
    let read_only_token = a
        .read_only_token_file
        .as_deref()
        .and_then(|f| read_token(base, f, "admin.readOnlyTokenFile", errs));
    if a.read_only_token_file.is_some() && a.token_file.is_none() {
        // Without a writing token every client may already write: a token
        // that only reads would promise a restriction that is not there.
        errs.push(
            "admin.readOnlyTokenFile",
            "needs admin.tokenFile (without it the API takes writes from anyone)",
        );
    }
    if let (Some(w), Some(r)) = (&token, &read_only_token) {
        if w == r {
            errs.push(
                "admin.readOnlyTokenFile",
                "must differ from the admin.tokenFile token",
            );
        }
    }
    let mut token_files = Vec::new();
    if let Some(f) = &a.token_file {
        token_files.push(("admin.tokenFile", base.join(f)));
    }
    if let Some(f) = &a.read_only_token_file {
        token_files.push(("admin.readOnlyTokenFile", base.join(f)));
    }
    AdminConfig {
        address,
        token,
        read_only_token,
        flagger_metrics: a.flagger_metrics.unwrap_or(false),
        allowed_hosts: allowed_hosts(a.allowed_hosts.as_deref(), address, errs),
        body_timeout: errs.duration(
            "admin.bodyTimeout",
            &a.body_timeout,
            DEFAULT_ADMIN_BODY_TIMEOUT,
        ),
        token_files,
    }
}

/// `admin.allowedHosts`: the list given (`*` allows any name), or the loopback
/// names and the listen address. An empty list would lock every client out, the
/// probes aside: an error.
fn allowed_hosts(raw: Option<&[String]>, listen: SocketAddr, errs: &mut Errors) -> AllowedHosts {
    let Some(list) = raw else {
        return AllowedHosts::defaults(listen);
    };
    if list.is_empty() {
        errs.push(
            "admin.allowedHosts",
            "must name at least one host (leave it out for the loopback names and the listen \
             address, or write \"*\" for any)",
        );
    }
    let mut out = AllowedHosts {
        any: false,
        entries: Vec::new(),
    };
    for (i, h) in list.iter().enumerate() {
        match parse_entry(h) {
            Ok(Some(e)) => out.add(e),
            Ok(None) => out.any = true,
            Err(reason) => errs.push(format!("admin.allowedHosts[{i}]"), reason),
        }
    }
    out
}

/// Reads a bearer token file (trimmed, at least 16 characters).
/// `cluster.peerTokenFile`, read: what replicas present to each other's control
/// API. Required when the API takes a token (the admin token is never sent to a
/// peer), and never the admin or read-only token itself.
pub(super) fn peer_token(
    c: &crate::config::raw::RawCluster,
    admin: &AdminConfig,
    base: &Path,
    errs: &mut Errors,
) -> Option<crate::config::cluster::PeerToken> {
    const FIELD: &str = "cluster.peerTokenFile";
    let Some(file) = c.peer_token_file.as_deref() else {
        if admin.token.is_some() {
            errs.push(
                FIELD,
                "required because admin.tokenFile is set: replicas present this token to each \
                 other's control API (the admin token is never sent to a peer)",
            );
        }
        return None;
    };
    let token = read_token(base, file, FIELD, errs)?;
    if admin.token.as_deref() == Some(token.as_str())
        || admin.read_only_token.as_deref() == Some(token.as_str())
    {
        errs.push(
            FIELD,
            "must differ from admin.tokenFile and admin.readOnlyTokenFile (a peer token opens \
             only the calls an engine makes to a data plane)",
        );
        return None;
    }
    Some(crate::config::cluster::PeerToken(token))
}

fn read_token(base: &Path, file: &str, field: &str, errs: &mut Errors) -> Option<String> {
    match std::fs::read_to_string(base.join(file)) {
        Ok(t) if t.trim().len() >= 16 => Some(t.trim().to_string()),
        Ok(_) => {
            errs.push(field, "the token must be at least 16 characters");
            None
        }
        Err(e) => {
            errs.push(field, format!("cannot read {file}: {e}"));
            None
        }
    }
}

pub(super) fn validate_proxy(raw: Option<&RawProxy>, errs: &mut Errors) -> ProxySettings {
    let d = ProxySettings::default();
    let Some(p) = raw else { return d };
    ProxySettings {
        upstream_idle_timeout: errs.duration(
            "proxy.upstreamIdleTimeout",
            &p.upstream_idle_timeout,
            d.upstream_idle_timeout,
        ),
        upstream_max_idle_per_host: errs.int_in(
            "proxy.upstreamMaxIdlePerHost",
            p.upstream_max_idle_per_host,
            0,
            65536,
            256,
        ) as usize,
        connect_timeout: errs.duration(
            "proxy.connectTimeout",
            &p.connect_timeout,
            d.connect_timeout,
        ),
        header_read_timeout: errs.duration(
            "proxy.headerReadTimeout",
            &p.header_read_timeout,
            d.header_read_timeout,
        ),
        drain_timeout: errs.duration("proxy.drainTimeout", &p.drain_timeout, d.drain_timeout),
        access_log: p.access_log.unwrap_or(false),
        http1_fast_path: p.http1_fast_path.unwrap_or(true),
        // hyper refuses a read buffer under 8 KiB.
        max_header_bytes: errs.int_in(
            "proxy.maxHeaderBytes",
            p.max_header_bytes,
            8192,
            1 << 20,
            d.max_header_bytes as i64,
        ) as usize,
        max_headers: errs.int_in(
            "proxy.maxHeaders",
            p.max_headers,
            1,
            10_000,
            d.max_headers as i64,
        ) as usize,
        max_uri_bytes: errs.int_in(
            "proxy.maxUriBytes",
            p.max_uri_bytes,
            64,
            65_534,
            d.max_uri_bytes as i64,
        ) as usize,
        body_idle_timeout: errs.duration(
            "proxy.bodyIdleTimeout",
            &p.body_idle_timeout,
            d.body_idle_timeout,
        ),
        request_body_timeout: p
            .request_body_timeout
            .is_some()
            .then(|| {
                errs.duration(
                    "proxy.requestBodyTimeout",
                    &p.request_body_timeout,
                    Duration::ZERO,
                )
            })
            .filter(|d| !d.is_zero()),
        tunnel_idle_timeout: errs.duration(
            "proxy.tunnelIdleTimeout",
            &p.tunnel_idle_timeout,
            d.tunnel_idle_timeout,
        ),
        max_connections: errs.int_in(
            "proxy.maxConnections",
            p.max_connections,
            1,
            1_000_000,
            d.max_connections as i64,
        ) as usize,
        http2_max_concurrent_streams: errs.int_in(
            "proxy.http2MaxConcurrentStreams",
            p.http2_max_concurrent_streams,
            1,
            1_000_000,
            d.http2_max_concurrent_streams as i64,
        ) as u32,
        http2_max_pending_accept_reset_streams: errs.int_in(
            "proxy.http2MaxPendingAcceptResetStreams",
            p.http2_max_pending_accept_reset_streams,
            1,
            100_000,
            d.http2_max_pending_accept_reset_streams as i64,
        ) as usize,
        http2_max_local_error_reset_streams: errs.int_in(
            "proxy.http2MaxLocalErrorResetStreams",
            p.http2_max_local_error_reset_streams,
            1,
            100_000,
            d.http2_max_local_error_reset_streams as i64,
        ) as usize,
    }
}
