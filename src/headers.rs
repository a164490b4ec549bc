//! PURE: HTTP header facts that config validation and both transports share,
//! kept below them all so the table exists once.

use http::header::HeaderName;

/// The fixed hop-by-hop header names (RFC 9110 §7.6.1), lower case: they
/// describe one connection, not the message. hyper strips them only on
/// HTTP/2, so the proxy removes them both ways.
pub const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "keep-alive",
    "proxy-connection",
];

/// Whether `name` (any case) is in [`HOP_BY_HOP`]. A switch on the length
/// first, so most names are dismissed without a byte compare; the arms
/// list exactly the table's names (a unit test holds them together).
#[inline]
pub fn is_hop_by_hop_name(name: &[u8]) -> bool {
    let eq = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    match name.len() {
        2 => eq("te"),
        7 => eq("trailer") || eq("upgrade"),
        10 => eq("connection") || eq("keep-alive"),
        16 => eq("proxy-connection"),
        17 => eq("transfer-encoding"),
        _ => false,
    }
}

/// [`is_hop_by_hop_name`] for a parsed header name.
#[inline]
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_hop_by_hop_name(name.as_str().as_bytes())
}
