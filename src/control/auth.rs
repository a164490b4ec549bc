//! Bearer-token authentication of the control API.
//!
//! When `admin.tokenFile` is configured every endpoint except `/healthz`,
//! `/readyz` and the console's static files needs `Authorization: Bearer
//! <token>`. `admin.readOnlyTokenFile` adds a second token that is granted
//! [`Access::Read`]: GET and HEAD only; the dispatcher answers 403 to any
//! other method presented with it. The comparison takes the same time
//! whatever the first differing byte is (a timing side channel would let a
//! client guess the token byte by byte); only the length of the expected
//! token could be inferred, which the config already makes at least 16
//! characters. Both tokens are compared on every request, so the time taken
//! does not tell which one matched either. Tokens are never logged or echoed.
//!
//! In a fleet, `cluster.peerTokenFile` adds the token replicas present to each
//! other, granted [`Access::Peer`]: the dispatcher takes it only on the endpoints
//! an engine calls on a data plane and on forwarded canary commands.

use http::header::AUTHORIZATION;
use http::HeaderMap;
use std::path::PathBuf;

pub use crate::wire::access::Access;

/// The outcome of checking one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthResult {
    /// No token configured, or a configured one presented, with its access.
    Allowed(Access),
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is not a configured one.
    Wrong,
}

/// Compares `a` and `b` in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len().max(b.len());
    // Fold the length difference in, then visit every position of the longer
    // input so the loop does not stop at the first difference.
    let mut diff = (a.len() ^ b.len()) as u64;
    for i in 0..len {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// Checks the request's bearer token against the token that writes
/// (`None`: no authentication) and the one that only reads.
pub fn check(write: Option<&str>, read_only: Option<&str>, headers: &HeaderMap) -> AuthResult {
    check_with_peer(write, read_only, None, headers)
}

/// [`check`], also taking the fleet's peer token (granted [`Access::Peer`]).
pub fn check_with_peer(
    write: Option<&str>,
    read_only: Option<&str>,
    peer: Option<&str>,
    headers: &HeaderMap,
) -> AuthResult {
    let Some(expected) = write else {
        return AuthResult::Allowed(Access::Write);
    };
    let Some(value) = headers.get(AUTHORIZATION) else {
        return AuthResult::Missing;
    };
    let value = value.as_bytes();
    // RFC 6750: `Bearer` is case-insensitive, then one or more spaces.
    if value.len() < 7 || !value[..7].eq_ignore_ascii_case(b"bearer ") {
        return AuthResult::Missing;
    }
    let presented = value[7..].trim_ascii();
    let is_write = constant_time_eq(presented, expected.as_bytes());
    let is_read = read_only.is_some_and(|r| constant_time_eq(presented, r.as_bytes()));
    let is_peer = peer.is_some_and(|p| constant_time_eq(presented, p.as_bytes()));
    if is_write {
        AuthResult::Allowed(Access::Write)
    } else if is_read {
        AuthResult::Allowed(Access::Read)
    } else if is_peer {
        AuthResult::Allowed(Access::Peer)
    } else {
        AuthResult::Wrong
    }
}

/// Whether a file of unix permission bits `mode` may be read by users other
/// than its owner (its group or everyone).
pub fn readable_by_others(mode: u32) -> bool {
    mode & 0o044 != 0
}

/// Logs a warning for each token file (by config field) that other users may
/// read: whoever reads it may call the API with it. Called once at start.
pub fn warn_readable_token_files(files: &[(&'static str, PathBuf)]) {
    #[cfg(unix)]
    for (field, path) in files {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o7777;
        if readable_by_others(mode) {
            tracing::warn!(
                target: "weir::admin",
                field,
                file = %path.display(),
                mode = %format!("{mode:04o}"),
                "token file {} ({field}) has mode {mode:04o}: other users may read the token; \
                 make it readable by weir's user only (chmod 600)",
                path.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = files;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, v.parse().unwrap());
        h
    }

    #[test]
    fn group_or_world_read_bits_are_loose() {
        assert!(!readable_by_others(0o600));
        assert!(!readable_by_others(0o400));
        assert!(!readable_by_others(0o700));
        assert!(readable_by_others(0o640));
        assert!(readable_by_others(0o604));
        assert!(readable_by_others(0o644));
    }

    #[test]
    fn compares_whole_values() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abcdef", b"abcde"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn bearer_parsing() {
        let write = AuthResult::Allowed(Access::Write);
        let check = |h: &HeaderMap| check(Some("0123456789abcdef"), None, h);
        assert_eq!(super::check(None, None, &HeaderMap::new()), write);
        assert_eq!(check(&HeaderMap::new()), AuthResult::Missing);
        assert_eq!(check(&headers("Basic abc")), AuthResult::Missing);
        assert_eq!(check(&headers("Bearer 0123456789abcdef")), write);
        assert_eq!(check(&headers("bearer   0123456789abcdef ")), write);
        assert_eq!(
            check(&headers("Bearer 0123456789abcdeX")),
            AuthResult::Wrong
        );
    }

    #[test]
    fn the_read_only_token_reads() {
        let both = |h: &HeaderMap| check(Some("0123456789abcdef"), Some("fedcba9876543210"), h);
        assert_eq!(
            both(&headers("Bearer 0123456789abcdef")),
            AuthResult::Allowed(Access::Write)
        );
        assert_eq!(
            both(&headers("Bearer fedcba9876543210")),
            AuthResult::Allowed(Access::Read)
        );
        assert_eq!(both(&headers("Bearer fedcba987654321")), AuthResult::Wrong);
        // Without a read-only token configured, no other token reads.
        assert_eq!(
            check(
                Some("0123456789abcdef"),
                None,
                &headers("Bearer fedcba9876543210")
            ),
            AuthResult::Wrong
        );
    }

    #[test]
    fn the_peer_token_is_its_own_access() {
        let all = |h: &HeaderMap| {
            check_with_peer(
                Some("0123456789abcdef"),
                Some("fedcba9876543210"),
                Some("peerpeerpeerpeer"),
                h,
            )
        };
        assert_eq!(
            all(&headers("Bearer peerpeerpeerpeer")),
            AuthResult::Allowed(Access::Peer)
        );
        assert_eq!(
            all(&headers("Bearer 0123456789abcdef")),
            AuthResult::Allowed(Access::Write)
        );
        assert_eq!(all(&headers("Bearer peerpeerpeerpee")), AuthResult::Wrong);
        // Without a peer token configured, it opens nothing.
        assert_eq!(
            check(
                Some("0123456789abcdef"),
                None,
                &headers("Bearer peerpeerpeerpeer")
            ),
            AuthResult::Wrong
        );
    }
}
