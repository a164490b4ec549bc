//! The header rules both transports apply, written once: which headers are
//! hop-by-hop (the table is `crate::headers`, below config too, viewed as
//! bytes by the fast path and as `HeaderName`s by the hyper path), which ones `Connection` can never
//! remove, weir's own `x-weir-*` namespace, and the X-Forwarded-* rule.

use http::header::{HeaderMap, HeaderName, CONNECTION};

pub use crate::headers::{is_hop_by_hop, is_hop_by_hop_name, HOP_BY_HOP};

/// Whether a header the proxy depends on is named: one that `Connection`
/// can never make hop-by-hop (the class of CVE-2022-31813). Host routes the
/// request and names the origin; Content-Length frames a message (a listed
/// Transfer-Encoding is stripped anyway and the body re-framed); weir sets
/// the X-Forwarded-* headers itself. Case-insensitive, as names arrive from
/// `Connection` values and from `httparse` in any case.
pub fn is_protected(name: &str) -> bool {
    let n = name.as_bytes();
    let eq = |s: &str| n.eq_ignore_ascii_case(s.as_bytes());
    match n.len() {
        4 => eq("host"),
        14 => eq("content-length"),
        _ => is_forwarded_header(name),
    }
}

/// Whether `name` is one of weir's own headers (`x-weir-` prefix, any
/// case), which only weir may set on a request it forwards.
pub fn is_weir_header(name: &str) -> bool {
    name.len() >= 7 && name.as_bytes()[..7].eq_ignore_ascii_case(b"x-weir-")
}

/// Removes every `x-weir-*` header a client sent. One pass over the names
/// first (a prefix compare each); most requests carry none.
pub fn strip_weir_headers(headers: &mut HeaderMap) {
    if !headers.keys().any(|n| is_weir_header(n.as_str())) {
        return;
    }
    let forged: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_weir_header(n.as_str()))
        .cloned()
        .collect();
    for n in forged {
        headers.remove(n);
    }
}

/// Removes the hop-by-hop headers and every header named in `Connection`
/// except the protected ones ([`is_protected`]). One pass over the names
/// first: most messages carry none, and then nothing is hashed or removed.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(CONNECTION) {
        let listed: Vec<HeaderName> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|n| !is_protected(n))
            .filter_map(|n| HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).ok())
            .collect();
        for n in listed {
            headers.remove(n);
        }
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
}

/// The X-Forwarded-* headers weir writes itself: a client's values of
/// these are replaced (X-Forwarded-For is extended when the peer is a trusted
/// proxy, see [`forwarded_for_prefix`]).
pub fn is_forwarded_header(name: &str) -> bool {
    let n = name.as_bytes();
    let eq = |s: &str| n.eq_ignore_ascii_case(s.as_bytes());
    match n.len() {
        15 => eq("x-forwarded-for"),
        16 => eq("x-forwarded-host"),
        17 => eq("x-forwarded-proto"),
        _ => false,
    }
}

/// The client-address headers other than X-Forwarded-For: `Forwarded`
/// (RFC 7239), `X-Real-IP` (nginx) and `True-Client-IP` (Akamai, Cloudflare).
/// From a peer that is not one of the listener's `trustedProxies`, each is
/// replaced by the peer's address, never passed on: a client must not pick the
/// address a backend believes.
pub const CLIENT_ADDRESS_HEADERS: [&str; 3] = ["forwarded", "x-real-ip", "true-client-ip"];

/// The index of `name` in [`CLIENT_ADDRESS_HEADERS`] (any case).
#[inline]
pub fn client_address_header(name: &str) -> Option<usize> {
    match name.len() {
        9 | 14 => CLIENT_ADDRESS_HEADERS
            .iter()
            .position(|h| name.eq_ignore_ascii_case(h)),
        _ => None,
    }
}

/// The value header `i` of [`CLIENT_ADDRESS_HEADERS`] gets for peer `ip`: the
/// address, or `Forwarded`'s `for=` element (an IPv6 address quoted in brackets).
pub fn client_address_value(i: usize, ip: &str) -> String {
    match (i, ip.contains(':')) {
        (0, true) => format!("for=\"[{ip}]\""),
        (0, false) => format!("for={ip}"),
        _ => ip.to_string(),
    }
}

/// The part of the client's first X-Forwarded-For value that the peer's
/// address is appended to (as `prev, peer`, nginx's
/// `$proxy_add_x_forwarded_for`); `None` when there is none, or it is
/// blank, and the peer's address stands alone.
#[inline]
pub fn forwarded_for_prefix(first: Option<&str>) -> Option<&str> {
    first.filter(|prev| !prev.trim().is_empty())
}

/// The X-Forwarded-Proto value for a client connection.
#[inline]
pub fn forwarded_proto(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_switch_holds_exactly_the_table() {
        for n in HOP_BY_HOP {
            assert!(is_hop_by_hop_name(n.as_bytes()), "{n}");
            assert!(is_hop_by_hop_name(n.to_ascii_uppercase().as_bytes()), "{n}");
        }
        for n in [
            "host",
            "tee",
            "trailers",
            "connections",
            "x-upgrade",
            "content-length",
        ] {
            assert!(!is_hop_by_hop_name(n.as_bytes()), "{n}");
        }
        assert!(is_hop_by_hop(&HeaderName::from_static("proxy-connection")));
        assert!(is_forwarded_header("X-Forwarded-Host") && !is_forwarded_header("x-forwarded"));
        assert_eq!(forwarded_for_prefix(Some(" ")), None);
        assert_eq!(forwarded_for_prefix(Some("1.2.3.4")), Some("1.2.3.4"));
    }

    #[test]
    fn strips_fixed_and_listed_headers() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, X-Secret".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("te", "gzip".parse().unwrap());
        h.insert("upgrade", "h2c".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
        // Listing a header the proxy depends on does not remove it.
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            "close, Host, content-length, X-Forwarded-For, x-forwarded-proto, x-forwarded-host"
                .parse()
                .unwrap(),
        );
        for n in [
            "host",
            "content-length",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-host",
        ] {
            h.insert(HeaderName::from_static(n), "1".parse().unwrap());
        }
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 5, "{h:?}");
        // Each fixed name alone is found by the first pass.
        for n in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ] {
            let mut h = HeaderMap::new();
            h.insert(HeaderName::from_static(n), "x".parse().unwrap());
            h.insert("x-keep", "1".parse().unwrap());
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{n} not stripped");
        }
    }

    #[test]
    fn strips_weir_headers_in_any_case_and_nothing_else() {
        let mut h = HeaderMap::new();
        h.insert("x-weir-mirror", "1".parse().unwrap());
        h.insert("x-weir-attempt", "2".parse().unwrap());
        h.insert("x-weirdo", "kept".parse().unwrap());
        h.insert("x-weir", "kept".parse().unwrap());
        strip_weir_headers(&mut h);
        let mut left: Vec<&str> = h.keys().map(|n| n.as_str()).collect();
        left.sort();
        assert_eq!(left, ["x-weir", "x-weirdo"]);
        assert!(is_weir_header("X-Weir-Mirror"));
        assert!(is_weir_header("x-weir-"));
        assert!(!is_weir_header("x-wei"));
    }
}
