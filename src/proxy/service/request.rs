//! The request sent upstream on the hyper path, built from the client's:
//! hop-by-hop headers stripped (`headers`), the client's `x-weir-*`
//! removed, X-Forwarded-* set by the one rule of `headers`, Host from the
//! routed authority, route header edits applied.

use super::ConnInfo;
use crate::config::UpstreamProtocol;
use crate::proxy::headers::{
    client_address_value, forwarded_for_prefix, forwarded_proto, CLIENT_ADDRESS_HEADERS,
};
use crate::proxy::{strip_hop_by_hop, strip_weir_headers, upgrade};
use crate::routing::Route;
use http::header::{HeaderValue, HOST, TE};
use http::{Request, Uri, Version};

static X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: http::HeaderName = http::HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: http::HeaderName = http::HeaderName::from_static("x-forwarded-host");

/// Where and how a request goes upstream.
pub(super) struct Target<'a> {
    /// The endpoint.
    pub(super) authority: &'a http::uri::Authority,
    /// TLS to the endpoint (`https` scheme).
    pub(super) tls: bool,
    /// The backend's protocol (HTTP/1.1 for upgrades).
    pub(super) protocol: UpstreamProtocol,
    /// The client's `Upgrade` value, kept for the upstream.
    pub(super) upgrade: Option<HeaderValue>,
}

/// Builds the request sent upstream: absolute URI to the endpoint, version
/// HTTP/1.1 (the client picks the real version per connection: an HTTP/2
/// pool sends it as HTTP/2), hop-by-hop headers stripped (except an
/// upgrade's, and `te: trailers` towards HTTP/2 backends, which gRPC
/// needs), the client's `x-weir-*` headers removed, X-Forwarded-* set, the
/// client's Host kept (replaced by the target's authority when there is one:
/// absolute form, HTTP/2), route header edits applied.
pub(super) fn upstream_request(
    parts: http::request::Parts,
    target: &Target<'_>,
    conn: &ConnInfo,
    x_forwarded_host: Option<HeaderValue>,
    route: &Route,
) -> Request<()> {
    let http::request::Parts {
        method,
        uri,
        mut headers,
        ..
    } = parts;
    let te_trailers = target.protocol != UpstreamProtocol::Http1
        && headers
            .get_all(TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
    strip_hop_by_hop(&mut headers);
    if let Some(u) = &target.upgrade {
        upgrade::restore(&mut headers, u.clone());
    }
    if te_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    strip_weir_headers(&mut headers);
    // The authority the request was routed by is the Host the upstream gets:
    // an absolute-form target's (RFC 9112 §3.2.2) or HTTP/2's `:authority`,
    // which wins over a differing `host` header (RFC 9113 §8.3.1).
    if let Some(a) = uri.authority() {
        if let Ok(v) = HeaderValue::from_str(a.as_str()) {
            headers.insert(HOST, v);
        }
    }
    forwarding_headers(&mut headers, conn.peer.ip(), conn.trusted);
    headers.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(forwarded_proto(conn.tls)),
    );
    if let Some(h) = x_forwarded_host {
        headers.insert(X_FORWARDED_HOST.clone(), h);
    }
    if !route.request_headers.is_empty() {
        route.request_headers.apply(&mut headers);
    }
    let scheme = if target.tls { "https" } else { "http" };
    let mut up = Uri::builder()
        .scheme(scheme)
        .authority(target.authority.clone());
    up = up.path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let mut req = Request::new(());
    *req.method_mut() = method;
    // A Uri built from a valid authority and an existing path cannot fail;
    // fall back to the root rather than panic if it ever does.
    *req.uri_mut() = up.build().unwrap_or_else(|_| Uri::from_static("/"));
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    req
}

/// A copy of a bodiless upstream request (extensions are not copied: the
/// upstream request carries none).
pub(super) fn copy_head(req: &Request<()>) -> Request<()> {
    let mut r = Request::new(());
    *r.method_mut() = req.method().clone();
    *r.uri_mut() = req.uri().clone();
    *r.version_mut() = req.version();
    *r.headers_mut() = req.headers().clone();
    r
}

/// X-Forwarded-For and the other client-address headers: from a trusted proxy
/// the peer is appended to X-Forwarded-For (comma-joined, as nginx's
/// `$proxy_add_x_forwarded_for`) and the others pass; from any other peer
/// X-Forwarded-For is the peer alone and the others it sent are replaced by its
/// address.
pub(super) fn forwarding_headers(
    headers: &mut http::HeaderMap,
    ip: std::net::IpAddr,
    trusted: bool,
) {
    if !trusted {
        let mut text = None;
        for (i, name) in CLIENT_ADDRESS_HEADERS.iter().enumerate() {
            if headers.contains_key(*name) {
                let ip = text.get_or_insert_with(|| ip.to_string());
                if let Ok(v) = HeaderValue::from_str(&client_address_value(i, ip)) {
                    headers.insert(*name, v);
                }
            }
        }
    }
    let first = headers
        .get(&X_FORWARDED_FOR)
        .filter(|_| trusted)
        .and_then(|v| v.to_str().ok());
    let joined = match forwarded_for_prefix(first) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
}
