//! Routes: hosts and prefixes, header edits, Flagger `match` rules and session affinity.

use super::*;

pub(super) fn compile_route(
    path: &str,
    r: &RawRoute,
    table: &RawTable,
    errs: &mut Errors,
) -> Option<Route> {
    let before = errs.0.len();
    if !valid_name(&r.name) {
        errs.push(
            format!("{path}.name"),
            "route names use letters, digits, '-', '_' and '.' only",
        );
    }
    let mut hosts = Vec::new();
    for (i, h) in r.hosts.iter().enumerate() {
        let hp = format!("{path}.hosts[{i}]");
        let lower = h.trim().to_ascii_lowercase();
        if let Some(suffix) = lower.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                errs.push(
                    hp,
                    format!("invalid wildcard host {h:?}; expected *.example.com"),
                );
            } else {
                hosts.push(HostPattern::Suffix(format!(".{suffix}")));
            }
        } else if lower.is_empty() || lower.contains(['*', '/', ' ', ':']) {
            errs.push(
                hp,
                format!("invalid host {h:?}; expected a name such as app.example.com (no port)"),
            );
        } else {
            hosts.push(HostPattern::Exact(lower.trim_end_matches('.').to_string()));
        }
    }
    let path_prefix = r.path_prefix.clone().unwrap_or_else(|| "/".into());
    if !path_prefix.starts_with('/') {
        errs.push(
            format!("{path}.pathPrefix"),
            format!("must start with '/' (got {path_prefix:?})"),
        );
    }
    if !table.backends.contains_key(&r.primary) {
        errs.push(
            format!("{path}.primary"),
            format!("unknown backend {:?}", r.primary),
        );
    }
    if let Some(c) = &r.canary {
        if !table.backends.contains_key(c) {
            errs.push(format!("{path}.canary"), format!("unknown backend {c:?}"));
        } else if *c == r.primary {
            errs.push(format!("{path}.canary"), "must differ from primary");
        }
    }
    let weight = errs.int_in(&format!("{path}.canaryWeight"), r.canary_weight, 0, 100, 0) as u8;
    if r.canary.is_none() {
        if weight > 0 {
            errs.push(
                format!("{path}.canaryWeight"),
                "a weight above 0 needs a canary backend",
            );
        }
        if !r.matches.is_empty() {
            errs.push(format!("{path}.match"), "match rules need a canary backend");
        }
        if r.mirror.as_ref().is_some_and(|m| m.enabled != Some(false)) {
            errs.push(format!("{path}.mirror"), "mirroring needs a canary backend");
        }
    }
    let timeout = errs.duration(
        &format!("{path}.timeout"),
        &r.timeout,
        Duration::from_secs(15),
    );
    let (request_headers, response_headers) = match &r.headers {
        None => (HeaderEdits::default(), HeaderEdits::default()),
        Some(h) => (
            compile_edits(&format!("{path}.headers.request"), h.request.as_ref(), errs),
            compile_edits(
                &format!("{path}.headers.response"),
                h.response.as_ref(),
                errs,
            ),
        ),
    };
    let matches = compile_matches(&format!("{path}.match"), &r.matches, errs);
    let mirror = r.mirror.as_ref().and_then(|m| {
        let p = format!("{path}.mirror");
        let policy = MirrorPolicy {
            weight: errs.int_in(&format!("{p}.weight"), m.weight, 0, 100, 100) as u8,
            max_body_bytes: errs.int_in(
                &format!("{p}.maxBodyBytes"),
                m.max_body_bytes,
                0,
                64 << 20,
                1 << 20,
            ) as usize,
            max_in_flight: errs.int_in(
                &format!("{p}.maxInFlight"),
                m.max_in_flight,
                1,
                100_000,
                256,
            ) as usize,
        };
        (m.enabled != Some(false)).then_some(policy)
    });
    let affinity = r
        .session_affinity
        .as_ref()
        .map(|a| compile_affinity(&format!("{path}.sessionAffinity"), a, errs));
    let affinity_state = match &r.affinity_state {
        None => AffinityState::default(),
        Some(s) => {
            let p = format!("{path}.affinityState");
            for (field, v) in [
                ("canaryValue", &s.canary_value),
                ("primaryValue", &s.primary_value),
                ("previousCanaryValue", &s.previous_canary_value),
            ] {
                if let Some(v) = v {
                    if v.len() < MIN_VALUE_LEN || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
                        errs.push(
                            format!("{p}.{field}"),
                            format!("must be at least {MIN_VALUE_LEN} ASCII letters or digits"),
                        );
                    }
                }
            }
            AffinityState {
                canary_value: s.canary_value.clone(),
                primary_value: s.primary_value.clone(),
                previous_canary_value: s.previous_canary_value.clone(),
            }
        }
    };
    if errs.0.len() > before {
        return None;
    }
    Some(Route {
        name: r.name.clone(),
        hosts,
        path_prefix,
        primary: r.primary.clone(),
        canary: r.canary.clone(),
        canary_weight: weight,
        cookie_probe: CookieProbe::new(&matches, affinity.as_ref()),
        pin_cookies: affinity
            .as_ref()
            .map(|a| PinCookies::new(a, &affinity_state))
            .unwrap_or_default(),
        matches,
        mirror,
        affinity,
        affinity_state,
        timeout,
        request_headers,
        response_headers,
    })
}

pub(super) fn compile_edits(
    path: &str,
    raw: Option<&RawHeaderEdits>,
    errs: &mut Errors,
) -> HeaderEdits {
    let mut out = HeaderEdits::default();
    let Some(raw) = raw else { return out };
    let mut pair = |p: String, k: &str, v: &str| -> Option<(HeaderName, HeaderValue)> {
        let name = match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
            Ok(n) => n,
            Err(_) => {
                errs.push(p, format!("invalid header name {k:?}"));
                return None;
            }
        };
        if crate::headers::is_hop_by_hop(&name) || name == http::header::HOST {
            errs.push(
                p,
                format!("header {k:?} is managed by the proxy and cannot be edited"),
            );
            return None;
        }
        match HeaderValue::from_str(v) {
            Ok(val) => Some((name, val)),
            Err(_) => {
                errs.push(p, format!("invalid header value {v:?}"));
                None
            }
        }
    };
    for (k, v) in &raw.set {
        out.set.extend(pair(format!("{path}.set.{k}"), k, v));
    }
    for (k, v) in &raw.add {
        out.add.extend(pair(format!("{path}.add.{k}"), k, v));
    }
    for (i, k) in raw.remove.iter().enumerate() {
        match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
            Ok(n) => out.remove.push(n),
            Err(_) => errs.push(
                format!("{path}.remove[{i}]"),
                format!("invalid header name {k:?}"),
            ),
        }
    }
    out
}

/// Compiles a Flagger `match` list (also used for canary analysis blocks).
#[allow(dead_code)] // used by the rollout engine (analysis match blocks)
pub fn compile_matches_checked(
    path: &str,
    raw: &[RawMatch],
) -> Result<Vec<MatchRule>, Vec<ConfigError>> {
    let mut errs = Errors::new();
    let m = compile_matches(path, raw, &mut errs);
    if errs.0.is_empty() {
        Ok(m)
    } else {
        Err(errs.0)
    }
}

pub(super) fn compile_matches(path: &str, raw: &[RawMatch], errs: &mut Errors) -> Vec<MatchRule> {
    let mut out = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let mut rule = MatchRule::default();
        let empty = m.headers.is_empty()
            && m.cookies.is_empty()
            && m.query_params.is_empty()
            && m.method.is_none()
            && m.uri.is_none()
            && m.source_ip.is_empty()
            && m.without_headers.is_empty()
            && m.scheme.is_none()
            && m.authority.is_none()
            && m.port.is_none();
        if empty && m.source_labels.is_none() {
            errs.push(&p, "a match item needs at least one condition (an empty item would match every request)");
        }
        for (k, sm) in &m.headers {
            let hp = join_key(&format!("{p}.headers"), k);
            match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
                Ok(name) => {
                    if let Some(c) = string_matcher(&hp, sm, errs) {
                        rule.headers.push((name, c));
                    }
                }
                Err(_) => errs.push(hp, format!("invalid header name {k:?}")),
            }
        }
        for (k, sm) in &m.cookies {
            let cp = join_key(&format!("{p}.cookies"), k);
            if k.is_empty() {
                errs.push(&cp, "cookie name must not be empty");
            } else if let Some(c) = string_matcher(&cp, sm, errs) {
                rule.cookies.push((k.clone(), c));
            }
        }
        for (k, sm) in &m.query_params {
            let qp = join_key(&format!("{p}.queryParams"), k);
            if let Some(c) = string_matcher(&qp, sm, errs) {
                rule.query_params.push((k.clone(), c));
            }
        }
        if let Some(sm) = &m.method {
            rule.method = string_matcher(&format!("{p}.method"), sm, errs);
        }
        if let Some(sm) = &m.uri {
            let up = format!("{p}.uri");
            rule.uri_ignore_case = m.ignore_uri_case == Some(true);
            rule.uri = if rule.uri_ignore_case {
                caseless_matcher(&up, sm, errs)
            } else {
                string_matcher(&up, sm, errs)
            };
        } else if m.ignore_uri_case.is_some() {
            errs.push(
                format!("{p}.ignoreUriCase"),
                "applies to a `uri` condition, and this item has none",
            );
        }
        for (k, sm) in &m.without_headers {
            let hp = join_key(&format!("{p}.withoutHeaders"), k);
            match HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()) {
                Ok(name) => {
                    if let Some(c) = string_matcher(&hp, sm, errs) {
                        rule.without_headers.push((name, c));
                    }
                }
                Err(_) => errs.push(hp, format!("invalid header name {k:?}")),
            }
        }
        if let Some(sm) = &m.scheme {
            rule.scheme = string_matcher(&format!("{p}.scheme"), sm, errs);
        }
        if let Some(sm) = &m.authority {
            rule.authority = string_matcher(&format!("{p}.authority"), sm, errs);
        }
        if let Some(port) = m.port {
            match u16::try_from(port) {
                Ok(n) if n > 0 => rule.port = Some(n),
                _ => errs.push(
                    format!("{p}.port"),
                    format!("expected a listener port in 1..65535 (got {port})"),
                ),
            }
        }
        if m.source_labels.is_some() {
            errs.push(
                format!("{p}.sourceLabels"),
                "weir has no workload labels to select clients by; use `sourceIp` with the \
                 clients' CIDRs (e.g. sourceIp: [\"10.1.0.0/16\"])",
            );
        }
        for (j, cidr) in m.source_ip.iter().enumerate() {
            match crate::config::parse_network(cidr) {
                Ok(n) => rule.source_ip.push(n),
                Err(e) => errs.push(format!("{p}.sourceIp[{j}]"), e),
            }
        }
        out.push(rule);
    }
    out
}

/// The matcher for an `ignoreUriCase` uri: `exact`/`prefix`/`suffix` are
/// compared ignoring case at match time, a regex gets `(?i)` (Istio leaves
/// a regex case-sensitive; the user who asked for case-insensitive matching
/// means it for every kind).
fn caseless_matcher(path: &str, m: &RawStringMatch, errs: &mut Errors) -> Option<StringMatcher> {
    match &m.regex {
        Some(re)
            if m.exact.is_none()
                && m.prefix.is_none()
                && m.suffix.is_none()
                && m.present.is_none() =>
        {
            let ci = RawStringMatch {
                regex: Some(format!("(?i){re}")),
                ..RawStringMatch::default()
            };
            string_matcher(path, &ci, errs)
        }
        _ => string_matcher(path, m, errs),
    }
}

pub(super) fn string_matcher(
    path: &str,
    m: &RawStringMatch,
    errs: &mut Errors,
) -> Option<StringMatcher> {
    let set = [
        m.exact.is_some(),
        m.prefix.is_some(),
        m.suffix.is_some(),
        m.regex.is_some(),
        m.present.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set != 1 {
        errs.push(
            path,
            format!(
                "exactly one of exact, prefix, suffix, regex, present must be set (found {set})"
            ),
        );
        return None;
    }
    if let Some(s) = &m.exact {
        return Some(StringMatcher::Exact(s.clone()));
    }
    if let Some(s) = &m.prefix {
        return Some(StringMatcher::Prefix(s.clone()));
    }
    if let Some(s) = &m.suffix {
        return Some(StringMatcher::Suffix(s.clone()));
    }
    if let Some(p) = m.present {
        return Some(StringMatcher::Present(p));
    }
    let re = m.regex.as_deref().unwrap_or_default();
    let rp = format!("{path}.regex");
    if re.len() > REGEX_MAX_LEN {
        errs.push(
            rp,
            format!(
                "pattern is {} bytes; the limit is {REGEX_MAX_LEN}",
                re.len()
            ),
        );
        return None;
    }
    let budget = errs.2;
    if budget.over {
        // Said once; nothing more is compiled for a table already refused.
        return None;
    }
    let left = budget
        .limit
        .map(|l| l.saturating_sub(budget.used))
        .unwrap_or(usize::MAX);
    // The table's budget bounds the compile itself, not only the sum after it.
    let size_limit = REGEX_SIZE_LIMIT.min(left.max(1));
    let over_budget = |errs: &mut Errors| {
        errs.2.over = true;
        errs.push(
            rp.clone(),
            format!(
                "the table's regexes compile to more than limits.maxTableRegexBytes ({}) together: {} before this one took {}",
                fmt_bytes(budget.limit.unwrap_or_default()),
                budget.count,
                fmt_bytes(budget.used),
            ),
        );
    };
    match crate::routing::RegexMatcher::compile(re, size_limit) {
        Ok(r) => {
            let used = budget.used.saturating_add(r.memory_usage());
            if budget.limit.is_some_and(|l| used > l) {
                over_budget(errs);
                return None;
            }
            errs.2.used = used;
            errs.2.count += 1;
            Some(StringMatcher::Regex(r))
        }
        Err(regex::Error::CompiledTooBig(_)) if size_limit < REGEX_SIZE_LIMIT => {
            over_budget(errs);
            None
        }
        Err(regex::Error::CompiledTooBig(limit)) => {
            errs.push(
                rp,
                format!("pattern compiles to more than {limit} bytes (size limit)"),
            );
            None
        }
        Err(e) => {
            errs.push(
                rp,
                format!(
                    "invalid regex: {}",
                    e.to_string()
                        .lines()
                        .last()
                        .unwrap_or("syntax error")
                        .trim()
                ),
            );
            None
        }
    }
}

/// Compiles a `sessionAffinity` block (route or canary analysis).
pub(super) fn compile_affinity(path: &str, a: &RawAffinity, errs: &mut Errors) -> AffinityConfig {
    let token_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
    };
    if !token_ok(&a.cookie_name) {
        errs.push(
            format!("{path}.cookieName"),
            format!("invalid cookie name {:?}", a.cookie_name),
        );
    }
    if let Some(p) = &a.primary_cookie_name {
        if !token_ok(p) {
            errs.push(
                format!("{path}.primaryCookieName"),
                format!("invalid cookie name {p:?}"),
            );
        } else if *p == a.cookie_name {
            errs.push(
                format!("{path}.primaryCookieName"),
                "must differ from cookieName",
            );
        }
    }
    let same_site = match a.same_site.as_deref() {
        None => None,
        Some(s) if s.eq_ignore_ascii_case("strict") => Some(SameSite::Strict),
        Some(s) if s.eq_ignore_ascii_case("lax") => Some(SameSite::Lax),
        Some(s) if s.eq_ignore_ascii_case("none") => Some(SameSite::None),
        Some(s) => {
            errs.push(
                format!("{path}.sameSite"),
                format!("expected Strict, Lax or None (got {s:?})"),
            );
            None
        }
    };
    let attr_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b';');
    if let Some(d) = &a.domain {
        if !attr_ok(d) {
            errs.push(
                format!("{path}.domain"),
                format!("invalid cookie domain {d:?}"),
            );
        }
    }
    if let Some(p) = &a.path {
        if !attr_ok(p) || !p.starts_with('/') {
            errs.push(
                format!("{path}.path"),
                format!("invalid cookie path {p:?}; must start with '/'"),
            );
        }
    }
    AffinityConfig {
        cookie_name: a.cookie_name.clone(),
        max_age: errs.int_in(&format!("{path}.maxAge"), a.max_age, 1, 400 * 86400, 86400),
        primary_cookie_name: a.primary_cookie_name.clone(),
        primary_max_age: errs.int_in(
            &format!("{path}.primaryMaxAge"),
            a.primary_max_age,
            1,
            400 * 86400,
            60,
        ),
        domain: a.domain.clone(),
        path: a.path.clone(),
        http_only: a.http_only.unwrap_or(false),
        secure: a.secure.unwrap_or(false),
        same_site,
        partitioned: a.partitioned.unwrap_or(false),
    }
}
