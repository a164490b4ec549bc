//! The names a client may call the admin API by (`admin.allowedHosts`).
//!
//! A browser page whose own name an attacker re-points at a loopback or private
//! address (DNS rebinding) reaches the admin API as a same-origin page, but its
//! requests still carry the attacker's name in `Host`. The admin listener answers
//! only requests whose `Host` is on this list, so such a page reads and writes
//! nothing. The list is config (parsed and checked here); the listener reads a
//! request's `Host` with [`split_authority`] and asks [`AllowedHosts::allows`].

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// One allowed name: a host name or an address, with or without a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// Lower case, without a trailing dot; an address in its canonical form
    /// (IPv6 without brackets).
    pub host: String,
    /// `None`: any port.
    pub port: Option<u16>,
}

impl fmt::Display for HostEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = self.host.contains(':');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (_, None) => f.write_str(&self.host),
        }
    }
}

/// The `Host` values the admin API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `*` was listed: every name is allowed (the check is off).
    pub any: bool,
    /// The allowed names, in the order given (duplicates dropped).
    pub entries: Vec<HostEntry>,
}

/// The loopback names every weir answers by default.
pub const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

impl AllowedHosts {
    /// The default list: the loopback names and `listen`'s address (unless it is
    /// the unspecified address, which no client can name).
    pub fn defaults(listen: SocketAddr) -> AllowedHosts {
        let mut a = AllowedHosts {
            any: false,
            entries: LOOPBACK_NAMES
                .iter()
                .map(|h| HostEntry {
                    host: (*h).to_string(),
                    port: None,
                })
                .collect(),
        };
        if !listen.ip().is_unspecified() {
            a.add(HostEntry {
                host: listen.ip().to_string(),
                port: None,
            });
        }
        a
    }

    /// Adds `e` unless it is already there.
    pub fn add(&mut self, e: HostEntry) {
        if !self.entries.contains(&e) {
            self.entries.push(e);
        }
    }

    /// Adds the host and port of an `http://` or `https://` URL (a replica's
    /// `cluster.apiUrl`: what the other replicas put in `Host`). The port is the
    /// URL's, or its scheme's default. Anything else is ignored.
    pub fn add_url(&mut self, url: &str) {
        let Ok(uri) = url.parse::<http::Uri>() else {
            return;
        };
        let default = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return,
        };
        let Some(auth) = uri.authority() else { return };
        if let Some((host, port)) = split_authority(auth.as_str()) {
            self.add(HostEntry {
                host,
                port: Some(port.unwrap_or(default)),
            });
        }
    }

    /// Whether a request naming `host` (as [`split_authority`] returns it) and
    /// `port` (`None`: none written, i.e. 80) may be answered.
    pub fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.any
            || self.entries.iter().any(|e| {
                e.host == host
                    && match e.port {
                        None => true,
                        Some(p) => p == port.unwrap_or(80),
                    }
            })
    }

    /// The list as written in an error message: `localhost, 127.0.0.1, ::1`.
    pub fn describe(&self) -> String {
        if self.any {
            return "*".into();
        }
        self.entries
            .iter()
            .map(HostEntry::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Parses one `admin.allowedHosts` entry: `*`, a name, an IPv4 or IPv6 address
/// (bare or in brackets), each optionally with `:port`.
pub fn parse_entry(s: &str) -> Result<Option<HostEntry>, String> {
    let t = s.trim();
    if t == "*" {
        return Ok(None);
    }
    match split_authority(t) {
        Some((host, port)) => Ok(Some(HostEntry { host, port })),
        None => Err(format!(
            "expected a host name or address, optionally with :port, or * (got {s:?})"
        )),
    }
}

/// Splits a `Host` value (or a config entry) into a canonical host and its port:
/// `Example.COM.:80` → (`example.com`, 80), `[::1]:9901` → (`::1`, 9901). A bare
/// IPv6 address (`::1`) is taken whole. `None` when it is not a host name or an
/// address (empty, bad characters, a bad port).
pub fn split_authority(s: &str) -> Option<(String, Option<u16>)> {
    let s = s.trim();
    let port_of = |p: &str| -> Option<Option<u16>> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse::<u16>().ok().map(Some)
    };
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip = inside.parse::<Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => port_of(p.strip_prefix(':')?)?,
        };
        return Some((ip.to_string(), port));
    } else if let Ok(ip) = s.parse::<Ipv6Addr>() {
        return Some((ip.to_string(), None));
    } else {
        match s.split_once(':') {
            None => (s, None),
            Some((h, p)) => (h, port_of(p)?),
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !name_ok {
        return None;
    }
    let host = match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str) -> HostEntry {
        parse_entry(s).unwrap().unwrap()
    }

    #[test]
    fn authorities_are_split_and_canonical() {
        let s = |v: &str| split_authority(v);
        assert_eq!(s("Example.COM.:80"), Some(("example.com".into(), Some(80))));
        assert_eq!(s("localhost"), Some(("localhost".into(), None)));
        assert_eq!(s("[::1]:9901"), Some(("::1".into(), Some(9901))));
        assert_eq!(s("[0:0:0:0:0:0:0:1]"), Some(("::1".into(), None)));
        assert_eq!(s("::1"), Some(("::1".into(), None)));
        assert_eq!(s("127.0.0.1:9901"), Some(("127.0.0.1".into(), Some(9901))));
        for bad in [
            "",
            "a b",
            "host:",
            "host:x",
            "host:99999",
            "[::1",
            "[nope]",
            "a/b",
            "x:1:2",
            "[::1]x",
        ] {
            assert_eq!(s(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn entries_match_with_or_without_a_port() {
        let mut a = AllowedHosts::defaults("127.0.0.1:9901".parse().unwrap());
        assert!(a.allows("localhost", Some(9901)));
        assert!(a.allows("127.0.0.1", Some(1234)));
        assert!(a.allows("::1", None));
        assert!(!a.allows("rebind.attacker.example", Some(9901)));
        a.add(entry("weir.internal:9901"));
        assert!(a.allows("weir.internal", Some(9901)));
        assert!(!a.allows("weir.internal", Some(9902)));
        assert!(!a.allows("weir.internal", None));
        a.add(entry("plain.example:80"));
        assert!(a.allows("plain.example", None), "no port is port 80");
        assert_eq!(parse_entry("*"), Ok(None));
        assert!(parse_entry("bad host").is_err());
    }

    #[test]
    fn defaults_name_the_listen_address_unless_unspecified() {
        let a = AllowedHosts::defaults("10.0.0.7:9901".parse().unwrap());
        assert!(a.allows("10.0.0.7", Some(9901)));
        assert_eq!(a.describe(), "localhost, 127.0.0.1, ::1, 10.0.0.7");
        let a = AllowedHosts::defaults("0.0.0.0:9901".parse().unwrap());
        assert!(!a.allows("0.0.0.0", Some(9901)));
        let a = AllowedHosts::defaults("[::]:9901".parse().unwrap());
        assert_eq!(a.entries.len(), 3);
    }

    #[test]
    fn an_api_url_adds_its_host_and_port() {
        let mut a = AllowedHosts::defaults("0.0.0.0:9901".parse().unwrap());
        a.add_url("http://r1:9901");
        a.add_url("https://weir-2.example/");
        a.add_url("ftp://nope");
        assert!(a.allows("r1", Some(9901)));
        assert!(!a.allows("r1", Some(80)));
        assert!(a.allows("weir-2.example", Some(443)));
        assert!(!a.allows("nope", None));
        assert_eq!(
            a.describe(),
            "localhost, 127.0.0.1, ::1, r1:9901, weir-2.example:443"
        );
    }
}
