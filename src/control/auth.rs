//! Bearer-token authentication of the control API.
//!
//! When `admin.tokenFile` is configured every endpoint except `/healthz` and
//! `/readyz` needs `Authorization: Bearer <token>`. The comparison takes the
//! same time whatever the first differing byte is (a timing side channel
//! would let a client guess the token byte by byte); only the length of the
//! expected token could be inferred, which the config already makes at least
//! 16 characters. The token is never logged or echoed.

use http::header::AUTHORIZATION;
use http::HeaderMap;

/// The outcome of checking one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthResult {
    /// No token configured, or the right one presented.
    Allowed,
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is not the configured one.
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

/// Checks the request's bearer token against `expected` (`None`: no auth).
pub fn check(expected: Option<&str>, headers: &HeaderMap) -> AuthResult {
    let Some(expected) = expected else {
        return AuthResult::Allowed;
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
    if constant_time_eq(presented, expected.as_bytes()) {
        AuthResult::Allowed
    } else {
        AuthResult::Wrong
    }
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
    fn compares_whole_values() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abcdef", b"abcde"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn bearer_parsing() {
        let tok = Some("0123456789abcdef");
        assert_eq!(check(None, &HeaderMap::new()), AuthResult::Allowed);
        assert_eq!(check(tok, &HeaderMap::new()), AuthResult::Missing);
        assert_eq!(check(tok, &headers("Basic abc")), AuthResult::Missing);
        assert_eq!(
            check(tok, &headers("Bearer 0123456789abcdef")),
            AuthResult::Allowed
        );
        assert_eq!(
            check(tok, &headers("bearer   0123456789abcdef ")),
            AuthResult::Allowed
        );
        assert_eq!(
            check(tok, &headers("Bearer 0123456789abcdeX")),
            AuthResult::Wrong
        );
    }
}
