//! `weir probe URL`: a tiny blocking HTTP/1.0 client for health checks.
//!
//! The container image is `FROM scratch`: there is no curl or wget in it, so
//! Docker's `HEALTHCHECK` (and Compose's `healthcheck:`) runs `weir probe
//! http://127.0.0.1:9901/readyz` instead. One `GET`, `Connection: close`, the
//! status line read and nothing else: no runtime, no TLS, no extra
//! dependencies. A 2xx status is healthy; anything else (refused, timeout,
//! another status, garbage) is not.
//!
//! Only `http://host[:port][/path]` URLs are accepted. The host may be a name
//! (resolved with the system resolver), an IPv4 address or a bracketed IPv6
//! address.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// True when `GET url` answers a 2xx status within `timeout` (the whole
/// exchange: resolve, connect, write, read the status line).
pub fn probe(url: &str, timeout: Duration) -> bool {
    matches!(status(url, timeout), Ok(200..=299))
}

/// The status code `GET url` answers within `timeout`, or why there is none
/// (for the message a failing health check leaves in `docker inspect`).
pub fn status(url: &str, timeout: Duration) -> Result<u16, String> {
    let deadline = Instant::now() + timeout;
    let target = Target::parse(url)?;
    let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", target.host))?
        .collect();
    let mut stream = connect_any(&addrs, deadline)?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: weir-probe\r\nConnection: close\r\n\r\n",
        target.path, target.authority
    );
    stream
        .set_write_timeout(Some(remaining(deadline)?))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send the request: {e}"))?;
    read_status(&mut stream, deadline)
}

/// A parsed `http://` URL.
#[derive(Debug, PartialEq)]
struct Target {
    /// Host name or address, without IPv6 brackets (what the resolver takes).
    host: String,
    /// Port (80 when the URL has none).
    port: u16,
    /// `host[:port]` as written, for the Host header.
    authority: String,
    /// Path and query, `/` when empty.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("expected an http:// URL (got {url:?})"))?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("expected http://host[:port]/path (got {url:?})"));
        }
        if path
            .chars()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
        {
            return Err(format!(
                "the path must not contain spaces or control characters (got {url:?})"
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("unclosed '[' in {url:?}"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(
                        p.strip_prefix(':')
                            .ok_or_else(|| format!("bad port in {url:?}"))?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("bad port in {url:?}"))?,
        };
        if host.is_empty() {
            return Err(format!("missing host in {url:?}"));
        }
        Ok(Target {
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            path,
        })
    }
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("timed out".to_string())
    } else {
        Ok(left)
    }
}

fn connect_any(addrs: &[SocketAddr], deadline: Instant) -> Result<TcpStream, String> {
    let mut last = String::from("the name resolved to no address");
    for addr in addrs {
        match TcpStream::connect_timeout(addr, remaining(deadline)?) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

/// Reads until the end of the status line (at most 1 KiB) and parses
/// `HTTP/1.x NNN ...`.
fn read_status(stream: &mut TcpStream, deadline: Instant) -> Result<u16, String> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.contains(&b'\n') && buf.len() < 1024 {
        stream
            .set_read_timeout(Some(remaining(deadline)?))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("no answer: {e}")),
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_ascii_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(v), Some(code)) if v.starts_with("HTTP/1.") && (100..=599).contains(&code) => {
            Ok(code)
        }
        _ if buf.is_empty() => Err("the connection closed without an answer".to_string()),
        _ => Err(format!("not an HTTP status line: {:?}", line.trim_end())),
    }
}

// Inline rather than a sibling tests.rs: the module is one small file, and
// its tests need nothing but std sockets on 127.0.0.1.
#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// Serves one connection with `answer` (after reading the request head)
    /// and returns the request it read.
    fn one_shot(answer: &'static [u8]) -> (String, thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/readyz", l.local_addr().unwrap());
        let h = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = Vec::new();
            let mut b = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut b).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&b[..n]);
            }
            s.write_all(answer).unwrap();
            String::from_utf8(req).unwrap()
        });
        (url, h)
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn ok_status_is_healthy_and_request_is_http10() {
        let (url, h) = one_shot(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n");
        assert!(probe(&url, T));
        let req = h.join().unwrap();
        assert!(req.starts_with("GET /readyz HTTP/1.0\r\n"), "{req}");
        assert!(req.contains("\r\nHost: 127.0.0.1:"), "{req}");
    }

    #[test]
    fn non_2xx_is_unhealthy() {
        let (url, h) = one_shot(b"HTTP/1.1 503 Service Unavailable\r\n\r\n");
        assert_eq!(status(&url, T), Ok(503));
        h.join().unwrap();
        let (url, h) = one_shot(b"HTTP/1.0 301 Moved\r\n\r\n");
        assert!(!probe(&url, T));
        h.join().unwrap();
    }

    #[test]
    fn garbage_and_empty_answers_are_errors() {
        let (url, h) = one_shot(b"SSH-2.0-OpenSSH\r\n");
        assert!(status(&url, T)
            .unwrap_err()
            .contains("not an HTTP status line"));
        h.join().unwrap();
        let (url, h) = one_shot(b"");
        assert!(status(&url, T).unwrap_err().contains("without an answer"));
        h.join().unwrap();
    }

    #[test]
    fn refused_connection_is_unhealthy() {
        // Bound but never listening: connects are refused, and the port
        // stays ours for the whole test (a freed number could be taken).
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        let e = status(&format!("http://{addr}/readyz"), T).unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }

    #[test]
    fn silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/readyz", l.local_addr().unwrap());
        let t0 = Instant::now();
        assert!(!probe(&url, Duration::from_millis(200)));
        // Bounded by the timeout, with generous slack for a loaded machine.
        assert!(t0.elapsed() < Duration::from_secs(3));
        drop(l);
    }

    #[test]
    fn parses_urls() {
        let t = Target::parse("http://127.0.0.1:9901/readyz").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 9901, "/readyz")
        );
        let t = Target::parse("http://app-primary").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("app-primary", 80, "/")
        );
        let t = Target::parse("http://[::1]:8080?x=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 8080, "/?x=1")
        );
        assert_eq!(t.authority, "[::1]:8080");
        for bad in [
            "https://x/",
            "127.0.0.1:9901",
            "http:///x",
            "http://h:0/",
            "http://h:99999/",
            "http://h:x/",
            "http://u@h/",
            "http://h/a b",
            "http://[::1/",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
