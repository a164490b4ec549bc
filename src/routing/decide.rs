//! `decide()`: the pure per-request choice of side, mirror and cookies.

use super::{RequestView, Route};
use crate::affinity::{self, CookieActions, Pin};
use std::cell::OnceCell;

/// Which backend slot serves the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Primary,
    Canary,
}

/// Why the side was chosen (logged, and asserted by tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The route has no canary slot.
    NoCanary,
    /// An A/B `match` item held.
    Match,
    /// The current run's canary cookie.
    AffinityCanary,
    /// The current step's primary cookie.
    AffinityPrimary,
    /// The weighted draw.
    Weight,
}

/// Two independent uniform draws in 0..100, taken from one random word so
/// the proxy calls its RNG once per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// Compared with `canaryWeight`.
    pub weight: u8,
    /// Compared with the mirror weight.
    pub mirror: u8,
}

impl Draw {
    /// Maps a uniform `u64` to two uniform draws in 0..100 (Lemire's
    /// multiply-shift on each 32-bit half; bias < 100/2^32, negligible).
    pub fn from_u64(r: u64) -> Self {
        let lo = r & 0xffff_ffff;
        let hi = r >> 32;
        Draw {
            weight: ((lo * 100) >> 32) as u8,
            mirror: ((hi * 100) >> 32) as u8,
        }
    }
}

/// The whole routing decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub side: Side,
    pub reason: Reason,
    /// Also send a shadow copy to the canary (only for primary-bound requests).
    pub mirror: bool,
    /// Set-Cookie work for the response.
    pub cookies: CookieActions,
}

/// Decides the side of `req` on `route`: A/B match first, then affinity
/// cookies, then the weighted draw; mirroring for what goes to the primary.
pub fn decide(req: &RequestView<'_>, route: &Route, draw: Draw) -> Decision {
    if route.canary.is_none() {
        // A removed canary slot ends the run like weight 0 does: a canary cookie
        // still presented is deleted.
        let expire_canary = match &route.affinity {
            Some(cfg)
                if !(route.cookie_probe.binds_affinity() && route.cookie_probe.quiet(req)) =>
            {
                match affinity::pin(cfg, &route.affinity_state, req, false) {
                    Pin::Unpinned { stale } => stale,
                    Pin::Canary | Pin::Primary => None,
                }
            }
            _ => None,
        };
        return Decision {
            side: Side::Primary,
            reason: Reason::NoCanary,
            mirror: false,
            cookies: CookieActions {
                expire_canary,
                ..CookieActions::default()
            },
        };
    }
    let running = route.canary_weight > 0;
    let weighted = if draw.weight < route.canary_weight {
        Side::Canary
    } else {
        Side::Primary
    };
    // Whether the Cookie header holds none of the literals the route's
    // cookie conditions need: asked at most once, and only if a bound
    // condition is reached.
    let probe = &route.cookie_probe;
    let quiet = OnceCell::new();
    let quiet = || *quiet.get_or_init(|| probe.quiet(req));
    // Any item of the list may match (Flagger semantics); an empty list
    // never does: no rules means no A/B routing.
    let matched = route
        .matches
        .iter()
        .enumerate()
        .any(|(i, rule)| !(probe.binds_rule(i) && quiet()) && rule.matches(req));
    let (side, reason, cookies) = if matched {
        (Side::Canary, Reason::Match, CookieActions::default())
    } else if let Some(cfg) = &route.affinity {
        let pin = if probe.binds_affinity() && quiet() {
            Pin::Unpinned { stale: None }
        } else {
            affinity::pin(cfg, &route.affinity_state, req, running)
        };
        match pin {
            Pin::Canary => (
                Side::Canary,
                Reason::AffinityCanary,
                CookieActions::default(),
            ),
            Pin::Primary => (
                Side::Primary,
                Reason::AffinityPrimary,
                CookieActions::default(),
            ),
            Pin::Unpinned { stale } => {
                let cookies = CookieActions {
                    set_canary: running && weighted == Side::Canary,
                    set_primary: running
                        && weighted == Side::Primary
                        && cfg.primary_cookie_name.is_some(),
                    // Setting the canary cookie overwrites a stale one anyway.
                    expire_canary: if running && weighted == Side::Canary {
                        None
                    } else {
                        stale
                    },
                };
                (weighted, Reason::Weight, cookies)
            }
        }
    } else {
        (weighted, Reason::Weight, CookieActions::default())
    };
    let mirror = side == Side::Primary
        && route
            .mirror
            .as_ref()
            .is_some_and(|m| draw.mirror < m.weight);
    Decision {
        side,
        reason,
        mirror,
        cookies,
    }
}
