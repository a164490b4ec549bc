//! A browser's cookie store: the affinity scenario's clients, and the tests'.

use std::collections::BTreeMap;

/// A browser's cookie store for one site: enough of RFC 6265 for the affinity cookies
/// (`Max-Age` ≤ 0 deletes).
#[derive(Clone, Debug, Default)]
pub struct CookieJar {
    /// Cookie name → value.
    pub cookies: BTreeMap<String, String>,
}

impl CookieJar {
    /// Takes the `Set-Cookie` headers of a response.
    pub fn absorb(&mut self, headers: &http::HeaderMap) {
        for v in headers.get_all(http::header::SET_COOKIE) {
            let Ok(s) = v.to_str() else { continue };
            let Ok(c) = cookie::Cookie::parse_encoded(s.to_string()) else {
                continue;
            };
            let expired = s
                .split(';')
                .filter_map(|p| p.trim().strip_prefix("Max-Age="))
                .any(|n| n.trim().parse::<i64>().is_ok_and(|n| n <= 0));
            if expired {
                self.cookies.remove(c.name());
            } else {
                self.cookies
                    .insert(c.name().to_string(), c.value().to_string());
            }
        }
    }

    /// The `Cookie` header to send, if any.
    pub fn header(&self) -> Option<String> {
        if self.cookies.is_empty() {
            return None;
        }
        Some(
            self.cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}
