//! The web console (DESIGN §14, docs/console.md): `GET /ui/` on the admin
//! listener, a page whose files are compiled into the binary, so it works
//! with no network and no CDN.
//!
//! The files are public, like the probes: a browser's navigation cannot
//! carry a bearer header, and the files hold no data. Everything the page
//! shows it reads from the API with the bearer token in the `Authorization`
//! header (asked for once, kept in `sessionStorage`, never in a URL), so
//! the API's authentication, the read-only token and its 403 apply to the
//! page as to any client. No cookie is set or read: a cross-site form or
//! script cannot ride on the browser's credentials to write.
//!
//! Every answer carries a strict Content-Security-Policy ([`CSP`]): scripts,
//! styles and connections only from this origin, no inline script, no
//! framing. The chart library is Chart.js 3.9.1 as Debian ships it
//! (`libjs-chart.js`, MIT, `assets/chart.js.LICENSE`): one self-contained
//! minified file with no runtime dependencies, canvas charts that keep up
//! with a live run, and in Debian, so its provenance is a signed package.
//!
//! This module knows no feature: the page's data shaping runs in the browser
//! from the documented API (`/api/v1/canaries`, `/stats`, `/events`,
//! `/whoami`), and `app` adds [`ROUTES`] to the admin route table.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use http::{Method, Response, StatusCode};

use crate::control::api::{full, ApiError, ApiRequest, ApiResponse, Auth, RouteDef};

/// The Content-Security-Policy of every console answer.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

/// One compiled-in file.
pub struct Asset {
    /// Its name under `/ui/`.
    pub name: &'static str,
    /// Its media type.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// The console's files; `index.html` is also served at `/ui/`.
pub static ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("assets/index.html"),
    },
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/console.js"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/console.css"),
    },
    Asset {
        name: "chart.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/chart.min.js"),
    },
    Asset {
        name: "chart.js.LICENSE",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("assets/chart.js.LICENSE"),
    },
];

/// The console's routes on the admin listener (public: see the module doc).
pub static ROUTES: &[RouteDef] = &[
    RouteDef {
        method: Method::GET,
        path: "/ui/",
        auth: Auth::Public,
        handler: |_, _| Box::pin(async { Ok(serve("index.html")) }),
    },
    RouteDef {
        method: Method::GET,
        path: "/ui/{file}",
        auth: Auth::Public,
        handler: |_, r| Box::pin(async move { file(&r) }),
    },
];

fn file(r: &ApiRequest) -> Result<ApiResponse, ApiError> {
    let name = r.param("file");
    if find(name).is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not-found",
            Some("file"),
            format!("the console has no file {name:?}"),
        ));
    }
    Ok(serve(name))
}

/// The asset called `name`.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

fn serve(name: &str) -> ApiResponse {
    let Some(a) = find(name) else {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    };
    let mut r = Response::new(full(Bytes::from_static(a.body)));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The files change with the binary; a browser revalidates rather than
    // keeping a page of another version.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_no_inline_script_or_remote_origin() {
        let html = std::str::from_utf8(find("index.html").unwrap().body).unwrap();
        for tag in html.split("<script").skip(1) {
            let head = &tag[..tag.find('>').unwrap()];
            assert!(
                head.contains("src=\"/ui/"),
                "an inline or remote script: {head}"
            );
            let after = &tag[tag.find('>').unwrap() + 1..];
            assert!(
                after.trim_start().starts_with("</script>"),
                "inline code: {tag}"
            );
        }
        assert!(
            !html.contains("style=\""),
            "inline styles are refused by the CSP"
        );
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "a remote origin"
        );
        let lower = html.to_ascii_lowercase();
        for attr in [" onclick=", " onload=", " onsubmit=", " onerror="] {
            assert!(!lower.contains(attr), "an inline handler {attr}");
        }
        // Every file the page links is served.
        for part in html.split("/ui/").skip(1) {
            let name: String = part.chars().take_while(|c| *c != '"').collect();
            assert!(
                find(&name).is_some(),
                "the page links /ui/{name}, not compiled in"
            );
        }
    }

    #[test]
    fn the_policy_allows_only_this_origin() {
        assert!(CSP.starts_with("default-src 'self'"));
        assert!(!CSP.contains("unsafe"));
        assert!(CSP.contains("frame-ancestors 'none'"));
    }
}
