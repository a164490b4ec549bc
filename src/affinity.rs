//! Sticky canary and primary cookies (DESIGN §5): Flagger's session affinity
//! with its known bugs fixed.
//!
//! PURE: the cookie values are part of the routing table (written by the
//! engine or filled in by the table store), so every replica of a fleet pins
//! a client the same way. No IO, no clock; the one rule that makes new values
//! ([`advance_values`]) takes its RNG from the caller.
//! Cookies are read parsed (through [`RequestCookies`], which the routing
//! layer's request view implements), never with a loose regex, and a client's
//! cookie can never select a canary that is not running.
//!
//! Layering: this module sits at the bottom beside `stats`; `routing` and
//! `config` import it, it imports neither.

use cookie::{Cookie, SameSite};
use http::HeaderValue;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The route's `sessionAffinity` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityConfig {
    /// Cookie that pins a client to the canary for the run.
    pub cookie_name: String,
    /// Max-Age of the canary cookie, seconds.
    pub max_age: i64,
    /// Cookie that pins a client to the primary for one step (optional, as in Flagger).
    pub primary_cookie_name: Option<String>,
    /// Max-Age of the primary cookie: the analysis interval in seconds, so it
    /// lapses when the step (and its value) changes.
    pub primary_max_age: i64,
    /// `Domain` attribute (also on the deleting cookie, unlike Flagger).
    pub domain: Option<String>,
    /// `Path` attribute (also on the deleting cookie, unlike Flagger).
    pub path: Option<String>,
    /// `HttpOnly` attribute.
    pub http_only: bool,
    /// `Secure` attribute.
    pub secure: bool,
    /// `SameSite` attribute.
    pub same_site: Option<SameSite>,
    /// `Partitioned` attribute (CHIPS).
    pub partitioned: bool,
}

/// Cookie values of the current and last run. Part of the routing table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AffinityState {
    /// Value that pins to the canary during the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_value: Option<String>,
    /// Value that pins to the primary during the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_value: Option<String>,
    /// The previous run's canary value: presented after its run, it is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_canary_value: Option<String>,
}

/// Minimum length of generated cookie values (DESIGN §5).
pub const MIN_VALUE_LEN: usize = 10;

/// The cookies of a request, read parsed. Implemented by the routing layer's
/// request view; a trait so that this module need not know it (the calls are
/// static, `pin` costs what it did).
pub trait RequestCookies {
    /// Offers every value of cookie `name` to `f` until it returns true;
    /// whether one did.
    fn any_cookie(&self, name: &str, f: impl FnMut(Cow<'_, str>) -> bool) -> bool;

    /// Whether cookie `name` is present with exactly `value`.
    fn has_cookie(&self, name: &str, value: &str) -> bool {
        self.any_cookie(name, |v| v == value)
    }
}

/// A random cookie value: 16 ASCII letters and digits (≥ MIN_VALUE_LEN).
pub fn new_value(rng: &mut impl Rng) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let len = MIN_VALUE_LEN.max(16);
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The cookie values after the weight moves from `old_weight` to
/// `new_weight` (DESIGN §5): a run starts (0 → >0) with new canary and
/// primary values and forgets the last run's; a step (a change between two
/// non-zero weights) gets a new primary value; the run ends (>0 → 0)
/// keeping its canary value as `previous_canary`, expired on sight.
/// The one rule shared by the table store and the rollout engine.
pub fn advance_values(
    canary: &mut Option<String>,
    primary: &mut Option<String>,
    previous_canary: &mut Option<String>,
    old_weight: i64,
    new_weight: i64,
    rng: &mut impl Rng,
) {
    if old_weight == 0 && new_weight > 0 {
        *canary = Some(new_value(rng));
        *primary = Some(new_value(rng));
        *previous_canary = None;
    } else if old_weight > 0 && new_weight > 0 && old_weight != new_weight {
        *primary = Some(new_value(rng));
        if canary.is_none() {
            *canary = Some(new_value(rng));
        }
    } else if old_weight > 0 && new_weight == 0 {
        if let Some(v) = canary.take() {
            *previous_canary = Some(v);
        }
        *primary = None;
    }
}

/// What the cookies of a request say, before the weighted draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// Carries the current run's canary value.
    Canary,
    /// Carries the current step's primary value.
    Primary,
    /// No valid pin; the draw decides. `stale` is a canary-cookie value from
    /// another run that the response should delete.
    Unpinned { stale: Option<String> },
}

/// Reads the pins of `req`. `running` is `canaryWeight > 0`: outside a run
/// nothing pins to the canary, whatever the client sends.
pub fn pin(
    cfg: &AffinityConfig,
    state: &AffinityState,
    req: &impl RequestCookies,
    running: bool,
) -> Pin {
    let mut stale = None;
    let pinned = req.any_cookie(&cfg.cookie_name, |v| {
        if running && state.canary_value.as_deref() == Some(&*v) {
            return true;
        }
        stale.get_or_insert_with(|| v.into_owned());
        false
    });
    if pinned {
        return Pin::Canary;
    }
    if running {
        if let (Some(name), Some(value)) = (&cfg.primary_cookie_name, &state.primary_value) {
            if req.has_cookie(name, value) {
                // The primary pin wins over a stale canary cookie, which no
                // longer pins anything; it is left alone.
                return Pin::Primary;
            }
        }
    }
    Pin::Unpinned { stale }
}

/// Cookies a response must set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CookieActions {
    /// Set `cookieName=<run value>; Max-Age=maxAge`.
    pub set_canary: bool,
    /// Set `primaryCookieName=<step value>; Max-Age=primaryMaxAge`.
    pub set_primary: bool,
    /// Delete the canary cookie that carried this value (`Max-Age=-1`).
    pub expire_canary: Option<String>,
}

impl CookieActions {
    /// Nothing to add to the response.
    pub fn is_empty(&self) -> bool {
        !self.set_canary && !self.set_primary && self.expire_canary.is_none()
    }

    /// The `Set-Cookie` values: the pins from `pins` (rendered with the
    /// route), a deletion rendered here (it carries the client's value). A
    /// value that cannot be a header (impossible for validated config) is
    /// skipped rather than sent broken.
    pub fn render(&self, cfg: &AffinityConfig, pins: &PinCookies) -> Vec<HeaderValue> {
        let mut out = Vec::with_capacity(2);
        if self.set_canary {
            out.extend(pins.canary.clone());
        }
        if self.set_primary {
            out.extend(pins.primary.clone());
        }
        if let Some(old) = &self.expire_canary {
            out.extend(render_cookie(cfg, &cfg.cookie_name, old, -1));
        }
        out
    }
}

/// The `Set-Cookie` values that depend only on the route: the current run's
/// canary pin and the current step's primary pin, rendered when the route is
/// compiled. Rendering one per answer cost ~3,300 instructions and five
/// allocations, paid on every weighted answer to a client that keeps no
/// cookies (most API clients, and every load generator).
#[derive(Debug, Clone, Default)]
pub struct PinCookies {
    /// `cookieName=<canaryValue>; …; Max-Age=maxAge`, if there is a run value.
    canary: Option<HeaderValue>,
    /// `primaryCookieName=<primaryValue>; …; Max-Age=primaryMaxAge`, if both are set.
    primary: Option<HeaderValue>,
}

impl PinCookies {
    /// The pins of `cfg` with the values of `state`; the default (no pins)
    /// is right for a route without affinity.
    pub fn new(cfg: &AffinityConfig, state: &AffinityState) -> Self {
        PinCookies {
            canary: state
                .canary_value
                .as_ref()
                .and_then(|v| render_cookie(cfg, &cfg.cookie_name, v, cfg.max_age)),
            primary: match (&cfg.primary_cookie_name, &state.primary_value) {
                (Some(name), Some(v)) => render_cookie(cfg, name, v, cfg.primary_max_age),
                _ => None,
            },
        }
    }
}

/// One `Set-Cookie` value with every configured attribute, in RFC 6265 form.
/// `Max-Age=-1` is written literally (the cookie crate would clamp it), so
/// that the deletion carries the same Domain and Path as the original.
pub fn render_cookie(
    cfg: &AffinityConfig,
    name: &str,
    value: &str,
    max_age: i64,
) -> Option<HeaderValue> {
    let mut c = Cookie::new(name.to_string(), value.to_string());
    if let Some(d) = &cfg.domain {
        c.set_domain(d.clone());
    }
    if let Some(p) = &cfg.path {
        c.set_path(p.clone());
    }
    if cfg.http_only {
        c.set_http_only(true);
    }
    if cfg.secure {
        c.set_secure(true);
    }
    if let Some(s) = cfg.same_site {
        c.set_same_site(s);
    }
    if cfg.partitioned {
        c.set_partitioned(true);
    }
    let mut s = c.encoded().to_string();
    s.push_str("; Max-Age=");
    s.push_str(&max_age.to_string());
    HeaderValue::from_str(&s).ok()
}

#[cfg(test)]
mod tests;
