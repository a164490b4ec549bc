//! PURE: HTTP header facts that config validation and both transports share,
//! kept below them both so the table exists once.

use http::header::{HeaderName, CONNECTION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};

pub static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
pub static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Whether `name` is a fixed hop-by-hop header: one that describes one
/// connection, not the message (RFC 9110 §7.6.1). hyper strips them only on
/// HTTP/2, so the proxy removes them both ways. Compared as `HeaderName`s
/// (an enum compare for standard names), never as strings.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == CONNECTION
        || *name == TE
        || *name == TRAILER
        || *name == TRANSFER_ENCODING
        || *name == UPGRADE
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
}
