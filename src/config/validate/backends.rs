//! Backends: endpoints, upstream TLS and protocol, health checks, rolling updates
//! and outlier detection.

use super::*;

pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// `host:port` with a non-empty host and a port in 1..65535.
pub fn validate_endpoint(s: &str) -> Result<(), String> {
    if s.contains("://") || s.contains('/') {
        return Err(format!(
            "expected host:port without scheme or path (got {s:?})"
        ));
    }
    let (host, port) = match s.rsplit_once(':') {
        Some(hp) => hp,
        None => {
            return Err(format!(
                "expected host:port (got {s:?}): the port is missing"
            ))
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace()) {
        return Err(format!("invalid host in {s:?}"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("invalid port in {s:?}: expected 1..65535")),
    }
}

pub(super) fn validate_backend(
    path: &str,
    name: &str,
    b: &RawBackend,
    rules: TableRules,
    errs: &mut Errors,
) -> Option<BackendSpec> {
    let before = errs.0.len();
    if !valid_name(name) {
        errs.push(
            path,
            "backend names use letters, digits, '-', '_' and '.' only",
        );
    }
    let from_docker = match b.provider.as_deref() {
        None => false,
        Some("docker") if rules.docker_provider => true,
        Some("docker") => {
            errs.push(
                format!("{path}.provider"),
                "providers.docker is not configured: nothing fills this backend from container labels",
            );
            false
        }
        Some(other) => {
            errs.push(
                format!("{path}.provider"),
                format!("unknown provider {other:?}; expected docker"),
            );
            false
        }
    };
    if b.endpoints.is_empty() && b.provider.is_none() {
        errs.push(
            format!("{path}.endpoints"),
            "at least one endpoint is required (or `provider: docker` to fill it from container labels)",
        );
    }
    let mut seen = BTreeSet::new();
    for (i, e) in b.endpoints.iter().enumerate() {
        if let Err(reason) = validate_endpoint(e) {
            errs.push(format!("{path}.endpoints[{i}]"), reason);
        } else if !seen.insert(e.as_str()) {
            errs.push(
                format!("{path}.endpoints[{i}]"),
                format!("duplicate endpoint {e:?}"),
            );
        }
    }
    let load_balancer = match b.load_balancer.as_deref() {
        None | Some("round-robin") => LoadBalancer::RoundRobin,
        Some("least-request") => LoadBalancer::LeastRequest,
        Some(other) => {
            errs.push(
                format!("{path}.loadBalancer"),
                format!("unknown load balancer {other:?}; expected round-robin or least-request"),
            );
            LoadBalancer::RoundRobin
        }
    };
    let health_check = b.health_check.as_ref().map(|h| {
        let p = format!("{path}.healthCheck");
        let hpath = h.path.clone().unwrap_or_else(|| "/healthz".into());
        if !hpath.starts_with('/') {
            errs.push(format!("{p}.path"), "must start with '/'");
        }
        let interval = errs.duration(
            &format!("{p}.interval"),
            &h.interval,
            Duration::from_secs(5),
        );
        let timeout = errs.duration(&format!("{p}.timeout"), &h.timeout, Duration::from_secs(1));
        let mut expected = Vec::new();
        for (i, s) in h.expected_status.iter().enumerate() {
            if (100..=599).contains(s) {
                expected.push(*s as u16);
            } else {
                errs.push(
                    format!("{p}.expectedStatus[{i}]"),
                    format!("not an HTTP status (got {s})"),
                );
            }
        }
        HealthSettings {
            path: hpath,
            interval,
            timeout,
            healthy_threshold: errs.int_in(
                &format!("{p}.healthyThreshold"),
                h.healthy_threshold,
                1,
                100,
                1,
            ) as u32,
            unhealthy_threshold: errs.int_in(
                &format!("{p}.unhealthyThreshold"),
                h.unhealthy_threshold,
                1,
                100,
                3,
            ) as u32,
            expected_status: expected,
        }
    });
    let rolling_update = {
        let p = format!("{path}.rollingUpdate");
        let r = b.rolling_update.clone().unwrap_or_default();
        let surge = int_or_percent(&format!("{p}.maxSurge"), &r.max_surge, errs);
        let unavail = int_or_percent(&format!("{p}.maxUnavailable"), &r.max_unavailable, errs);
        let zero = |v: &IntOrPercent| matches!(v, IntOrPercent::Int(0) | IntOrPercent::Percent(0));
        if zero(&surge) && zero(&unavail) {
            errs.push(
                format!("{p}.maxUnavailable"),
                "maxSurge and maxUnavailable cannot both be 0: the update could never make progress",
            );
        }
        RollingSettings {
            max_surge: surge,
            max_unavailable: unavail,
            progress_deadline: errs.duration(
                &format!("{p}.progressDeadline"),
                &r.progress_deadline,
                Duration::from_secs(600),
            ),
        }
    };
    let outlier = b.outlier_detection.as_ref().map(|o| {
        let p = format!("{path}.outlierDetection");
        OutlierSettings {
            consecutive_failures: errs.int_in(
                &format!("{p}.consecutiveFailures"),
                o.consecutive_failures,
                1,
                1000,
                5,
            ) as u32,
            base_ejection_time: errs.duration(
                &format!("{p}.baseEjectionTime"),
                &o.base_ejection_time,
                Duration::from_secs(30),
            ),
            max_ejection_percent: errs.int_in(
                &format!("{p}.maxEjectionPercent"),
                o.max_ejection_percent,
                0,
                100,
                50,
            ) as u8,
        }
    });
    if let Some(rp) = &b.revision_path {
        if !rp.starts_with('/') {
            errs.push(format!("{path}.revisionPath"), "must start with '/'");
        }
    }
    let protocol = match b.protocol.as_deref() {
        None | Some("http1") => UpstreamProtocol::Http1,
        Some("http2") => UpstreamProtocol::Http2,
        Some("auto") => UpstreamProtocol::Auto,
        Some(other) => {
            errs.push(
                format!("{path}.protocol"),
                format!("unknown protocol {other:?}; expected http1, http2 or auto"),
            );
            UpstreamProtocol::Http1
        }
    };
    let tls = b.tls.as_ref().map(|t| {
        let p = format!("{path}.tls");
        let ca_file = t.ca_file.as_ref().map(std::path::PathBuf::from);
        if let Some(f) = &ca_file {
            if let Err(e) = crate::config::tls::load_ca_file(f) {
                errs.push(format!("{p}.caFile"), e);
            }
        }
        if let Some(n) = &t.server_name {
            if rustls::pki_types::ServerName::try_from(n.as_str()).is_err() {
                errs.push(
                    format!("{p}.serverName"),
                    format!("not a DNS name or IP address: {n:?}"),
                );
            }
        }
        UpstreamTls {
            ca_file,
            server_name: t.server_name.clone(),
        }
    });
    if errs.0.len() > before {
        return None;
    }
    Some(BackendSpec {
        name: name.to_string(),
        endpoints: b.endpoints.clone(),
        from_docker,
        load_balancer,
        health_check,
        rolling_update,
        outlier,
        revision_path: b.revision_path.clone(),
        protocol,
        tls,
        circuit_breaker: b
            .circuit_breaker
            .as_ref()
            .map(|c| compile_circuit_breaker(&format!("{path}.circuitBreaker"), c, errs)),
    })
}

pub(super) fn int_or_percent(
    path: &str,
    v: &Option<RawIntOrPercent>,
    errs: &mut Errors,
) -> IntOrPercent {
    match v {
        None => IntOrPercent::Percent(25),
        Some(RawIntOrPercent::Int(n)) if *n >= 0 && *n <= 10_000 => IntOrPercent::Int(*n as u32),
        Some(RawIntOrPercent::Int(n)) => {
            errs.push(path, format!("must be between 0 and 10000 (got {n})"));
            IntOrPercent::Percent(25)
        }
        Some(RawIntOrPercent::Str(s)) => match s.strip_suffix('%').map(|n| n.trim().parse::<u32>())
        {
            Some(Ok(p)) if p <= 100 => IntOrPercent::Percent(p),
            _ => {
                errs.push(
                    path,
                    format!("expected an integer or a percentage such as \"25%\" (got {s:?})"),
                );
                IntOrPercent::Percent(25)
            }
        },
    }
}
