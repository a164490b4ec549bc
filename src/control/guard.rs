//! The checks a request passes before anything else looks at it: the name it
//! calls the API by, and whether a write could have been sent by a page of
//! another site.
//!
//! - **Host** ([`check_host`]): the request's `Host` (or the authority of an
//!   absolute-form target) must be on `admin.allowedHosts`, else 421. A page
//!   whose name an attacker re-points at this listener (DNS rebinding) is
//!   same-origin with it in the browser's eyes, but still sends its own name.
//! - **Writes** ([`check_write`]): every method but GET and HEAD needs
//!   `Content-Type: application/json` (`application/merge-patch+json` on PATCH)
//!   or `X-Weir-Request: 1`. A browser sends neither across sites without a CORS
//!   preflight, which this API never grants, so a cross-site form or `fetch`
//!   (`no-cors`, `text/plain`) is refused with 403 whether or not a token is
//!   configured. A write is also refused when the browser says it comes from
//!   another site (`Sec-Fetch-Site: cross-site`) or from another origin
//!   (`Origin` naming another host or port than `Host`).
//!
//! Both are pure functions over the request head.

use super::api::ApiError;
use crate::config::admin_hosts::{split_authority, AllowedHosts};
use http::header::{CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, Method, StatusCode, Uri};

/// The header weir's own clients send on every call; with it a write needs no
/// JSON content type (a command without a body).
pub const WEIR_REQUEST_HEADER: &str = "x-weir-request";

/// The authority the request names: an absolute-form target's, else `Host`.
pub fn request_authority<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    if let Some(a) = uri.authority() {
        return Some(a.as_str());
    }
    headers.get(HOST).and_then(|v| v.to_str().ok())
}

/// Whether the request's Host is one the API answers.
pub fn host_allowed(allowed: &AllowedHosts, uri: &Uri, headers: &HeaderMap) -> bool {
    if allowed.any {
        return true;
    }
    request_authority(uri, headers)
        .and_then(split_authority)
        .is_some_and(|(host, port)| allowed.allows(&host, port))
}

/// 421 unless the request's Host is on `allowed`.
pub fn check_host(allowed: &AllowedHosts, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    if host_allowed(allowed, uri, headers) {
        return Ok(());
    }
    let named = match (uri.authority(), headers.get(HOST)) {
        (Some(a), _) => format!("Host {:?} is not", printable(a.as_str())),
        (None, Some(h)) => format!(
            "Host {:?} is not",
            printable(&String::from_utf8_lossy(h.as_bytes()))
        ),
        (None, None) => "a request without Host is not".to_string(),
    };
    Err(ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected-request",
        Some("Host"),
        format!(
            "{named} answered here: admin.allowedHosts is {}; add the name clients use \
             to admin.allowedHosts",
            allowed.describe()
        ),
    ))
}

/// The refusals of a write that a page of another site could have sent (403).
pub fn check_write(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let forbid = |error: &'static str, field: &str, reason: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            error,
            Some(field),
            reason,
        ))
    };
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if site.is_some_and(|s| s.eq_ignore_ascii_case("cross-site")) {
        return forbid(
            "cross-site",
            "Sec-Fetch-Site",
            format!(
                "a {method} from a page of another site is refused (Sec-Fetch-Site: cross-site)"
            ),
        );
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = headers.get(HOST).and_then(|v| v.to_str().ok());
        if !same_origin(origin, host) {
            return forbid(
                "cross-site",
                "Origin",
                format!(
                    "a {method} from origin {:?} is refused: only a page served by this \
                     listener ({}) may write from a browser",
                    printable(origin),
                    host.map(printable).unwrap_or_else(|| "no Host".into())
                ),
            );
        }
    }
    let marked = headers
        .get(WEIR_REQUEST_HEADER)
        .is_some_and(|v| v.as_bytes().trim_ascii() == b"1");
    if marked {
        return Ok(());
    }
    let media = headers.get(CONTENT_TYPE).map(|v| {
        v.to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    if media.as_deref().is_some_and(|m| is_json(method, m)) {
        return Ok(());
    }
    forbid(
        "write-header-missing",
        "Content-Type",
        format!(
            "a {method} needs Content-Type: application/json or the header X-Weir-Request: 1 \
             (got {}); a browser cannot send either from another site",
            match &media {
                Some(m) => format!("Content-Type {}", printable(m)),
                None => "neither".into(),
            }
        ),
    )
}

/// The JSON media types a write takes.
pub fn is_json(method: &Method, media: &str) -> bool {
    media == "application/json"
        || (*method == Method::PATCH && media == "application/merge-patch+json")
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as
/// the `Host` header. `null` and anything unparsable are another origin. A
/// `Host` without a port is taken on the origin scheme's default port (a TLS
/// terminator in front keeps `https://name` same-origin with `Host: name`).
pub fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some((scheme, rest)) = origin.trim().split_once("://") else {
        return false;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    if rest.contains(['/', '?', '#', '@']) {
        return false;
    }
    let (Some((oh, op)), Some((hh, hp))) = (split_authority(rest), host.and_then(split_authority))
    else {
        return false;
    };
    oh == hh && op.unwrap_or(default) == hp.unwrap_or(default)
}

/// A header value as it may be quoted back: at most 100 characters, control
/// characters replaced.
fn printable(s: &str) -> String {
    s.chars()
        .take(100)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn host_is_read_from_the_target_or_the_header() {
        let allowed = AllowedHosts::defaults("127.0.0.1:9901".parse().unwrap());
        let origin_form: Uri = "/api/v1/table".parse().unwrap();
        let ok = |uri: &Uri, hs: &[(&str, &str)]| host_allowed(&allowed, uri, &h(hs));
        assert!(ok(&origin_form, &[("host", "127.0.0.1:9901")]));
        assert!(ok(&origin_form, &[("host", "LOCALHOST:9901")]));
        assert!(ok(&origin_form, &[("host", "[::1]:9901")]));
        assert!(!ok(
            &origin_form,
            &[("host", "rebind.attacker.example:9901")]
        ));
        assert!(!ok(&origin_form, &[]), "no Host");
        assert!(!ok(&origin_form, &[("host", "127.0.0.1:9901 x")]));
        let absolute: Uri = "http://rebind.attacker.example:9901/api/v1/table"
            .parse()
            .unwrap();
        assert!(
            !ok(&absolute, &[("host", "127.0.0.1:9901")]),
            "the absolute target wins"
        );
        let mut odd = HeaderMap::new();
        odd.insert(HOST, http::HeaderValue::from_bytes(b"evil\xff:1").unwrap());
        let e = check_host(&allowed, &origin_form, &odd).unwrap_err();
        assert_eq!(e.status, StatusCode::MISDIRECTED_REQUEST);
        assert!(e.reason.contains("admin.allowedHosts"), "{}", e.reason);
        assert!(e.reason.starts_with("Host \"evil"), "{}", e.reason);
        let any = AllowedHosts {
            any: true,
            entries: vec![],
        };
        assert!(host_allowed(&any, &origin_form, &HeaderMap::new()));
    }

    #[test]
    fn writes_need_json_or_the_weir_header() {
        let post = Method::POST;
        assert!(check_write(&post, &h(&[("x-weir-request", "1")])).is_ok());
        assert!(check_write(
            &post,
            &h(&[("content-type", "application/json; charset=utf-8")])
        )
        .is_ok());
        assert!(check_write(
            &Method::PATCH,
            &h(&[("content-type", "application/merge-patch+json")])
        )
        .is_ok());
        for hs in [
            vec![],
            vec![("content-type", "text/plain")],
            vec![("content-type", "application/x-www-form-urlencoded")],
            vec![("content-type", "application/merge-patch+json")],
            vec![("x-weir-request", "0")],
        ] {
            let e = check_write(&post, &h(&hs)).unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{hs:?}");
            assert_eq!(e.error, "write-header-missing");
            assert!(e.reason.contains("X-Weir-Request: 1"), "{}", e.reason);
        }
    }

    #[test]
    fn writes_from_another_site_or_origin_are_refused() {
        let json = ("content-type", "application/json");
        let post = Method::POST;
        let e = check_write(&post, &h(&[json, ("sec-fetch-site", "cross-site")])).unwrap_err();
        assert_eq!((e.status, e.error), (StatusCode::FORBIDDEN, "cross-site"));
        assert!(check_write(&post, &h(&[json, ("sec-fetch-site", "same-origin")])).is_ok());
        let host = ("host", "127.0.0.1:9901");
        assert!(check_write(
            &post,
            &h(&[json, host, ("origin", "http://127.0.0.1:9901")])
        )
        .is_ok());
        for origin in [
            "http://localhost:9901",
            "http://127.0.0.1:8080",
            "http://127.0.0.2:9901",
            "null",
            "http://127.0.0.1:9901/x",
        ] {
            let e = check_write(&post, &h(&[json, host, ("origin", origin)])).unwrap_err();
            assert_eq!(e.error, "cross-site", "{origin}");
        }
    }

    #[test]
    fn origins_compare_on_default_ports() {
        assert!(same_origin("http://weir.example", Some("weir.example")));
        assert!(same_origin("https://weir.example", Some("weir.example")));
        assert!(same_origin(
            "https://weir.example:443",
            Some("weir.example")
        ));
        assert!(same_origin("http://[::1]:9901", Some("[::1]:9901")));
        assert!(!same_origin(
            "http://weir.example:8080",
            Some("weir.example")
        ));
        assert!(!same_origin("http://weir.example", None));
        assert!(!same_origin("ftp://weir.example", Some("weir.example")));
        assert!(!same_origin(
            "http://user@weir.example",
            Some("weir.example")
        ));
    }
}
