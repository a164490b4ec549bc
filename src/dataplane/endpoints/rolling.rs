//! Readiness-gated rolling update of one backend's endpoint list (DESIGN §7).
//!
//! Changing a backend's endpoints is not a swap: it is the Kubernetes Deployment rolling
//! update applied to a list of `host:port` strings. The driver (in `endpoints/mod.rs`)
//! health-checks every endpoint it is told to ([`RollingState::probe_targets`]), calls
//! [`step`] once per tick with what the probes said, and applies the returned
//! [`Action`]s to the load balancer. This file decides; it never does IO, never reads a
//! clock (time is the `now_ms` parameter) and never panics.
//!
//! # Semantics
//!
//! * `maxSurge` / `maxUnavailable` are integers or percentages of the desired count,
//!   resolved as Kubernetes' `ResolveFenceposts` does: surge rounds up, unavailable rounds
//!   down, and if both resolve to 0 (possible only with percentages of a small count)
//!   unavailable becomes 1 so the update can always move. Both *configured* as 0 is a
//!   config error ([`validate`]).
//! * A desired endpoint joins the rotation only once its health check passes, and only
//!   while the rotation holds fewer than `desired + maxSurge` endpoints.
//! * An old endpoint (in rotation, not desired) leaves only if the ready endpoints in
//!   rotation stay `>= desired - maxUnavailable` afterwards. Not-ready old endpoints leave
//!   first, and leaving is always allowed for them: they serve nothing, and this is what
//!   lets a broken version be rolled back by re-declaring the previous list.
//! * One tick = at most one add and at most one remove, both decided from the counts
//!   observed at the start of the tick (as the Deployment controller acts on what it
//!   observed and sees its own effect only at the next sync). This is what makes a
//!   larger `maxSurge` faster: with surge 1 a tick that adds cannot also remove.
//!   Exception: while no old endpoint is left in rotation (start-up with an empty
//!   rotation, a pure scale-up, the tail of an update) every ready desired endpoint joins
//!   at once: there is no old capacity to protect and the rotation cannot exceed
//!   `desired`.
//! * A removed endpoint stays in [`RollingState::members`] with `draining = true`: it
//!   gets no new requests, its in-flight ones finish, and the driver calls
//!   [`RollingState::drained`] when it is done. Draining endpoints are outside the
//!   rotation and do not count against `desired + maxSurge` (Kubernetes does not count
//!   terminating pods either). A draining endpoint that is desired again (rollback)
//!   simply rejoins when ready.
//! * Progress = an add, a remove, or more ready endpoints in rotation than at the
//!   previous tick. A *drop* in ready endpoints is not progress (otherwise a flapping
//!   endpoint would hide a stall). With no progress for `progressDeadline` the phase
//!   becomes [`Phase::Stalled`]; the update keeps trying and goes back to
//!   [`Phase::Progressing`] on progress. [`Phase::Complete`] (rotation == desired, all
//!   ready) is final for this update.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[cfg(test)]
#[path = "rolling_tests.rs"]
mod tests;

/// An upstream endpoint, `host:port`, exactly as written in the config or the API; two
/// spellings of one address are two endpoints (no DNS here, this module does no IO).
pub type Endpoint = String;

/// `maxSurge` / `maxUnavailable`: an absolute count or a percentage of the desired count,
/// as Kubernetes' `IntOrString`. In YAML/JSON: `1` or `"25%"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    /// An absolute number of endpoints.
    Int(u32),
    /// A percentage of the desired endpoint count; rounding depends on the field.
    Percent(u32),
}

impl IntOrPercent {
    /// Scales against `total`: an `Int` is taken as is, a percentage is rounded up for
    /// `maxSurge` and down for `maxUnavailable` (Kubernetes' `GetScaledValueFromIntOrPercent`).
    pub fn scaled(self, total: usize, round_up: bool) -> usize {
        match self {
            IntOrPercent::Int(n) => usize::try_from(n).unwrap_or(usize::MAX),
            IntOrPercent::Percent(p) => {
                let product = u128::from(p) * total as u128;
                let value = if round_up {
                    product.div_ceil(100)
                } else {
                    product / 100
                };
                usize::try_from(value).unwrap_or(usize::MAX)
            }
        }
    }

    /// True for `0` and `"0%"`: both mean "never", whatever the desired count (this is
    /// how Kubernetes' validation reads them too).
    pub fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }

    /// Parses the string form; only `"N%"` is accepted as a string, like Kubernetes,
    /// because `"1"` quoted is almost always a mistake for `1`.
    pub fn parse(s: &str) -> Result<IntOrPercent, String> {
        let Some(digits) = s.strip_suffix('%') else {
            return Err(format!(
                "invalid value {s:?}: expected an integer or a percentage like \"25%\""
            ));
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "invalid percentage {s:?}: expected digits followed by %, like \"25%\""
            ));
        }
        digits
            .parse::<u32>()
            .map(IntOrPercent::Percent)
            .map_err(|_| format!("invalid percentage {s:?}: too large"))
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Int(n) => serializer.serialize_u32(*n),
            IntOrPercent::Percent(_) => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntOrPercentVisitor;

        impl Visitor<'_> for IntOrPercentVisitor {
            type Value = IntOrPercent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative integer or a percentage like \"25%\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrPercent, E> {
                u32::try_from(v)
                    .map(IntOrPercent::Int)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrPercent, E> {
                if v < 0 {
                    return Err(E::custom(format!("{v} must not be negative")));
                }
                self.visit_u64(v.unsigned_abs())
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrPercent, E> {
                IntOrPercent::parse(v).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(IntOrPercentVisitor)
    }
}

/// Rejects settings that can never move or make no sense, naming the fields as the
/// config file spells them. Both zero (`0` or `"0%"`) is an error in weir even though
/// Kubernetes would silently turn `maxUnavailable` into 1: a config that says "never
/// surge, never go below" cannot roll, and the user should be told.
pub fn validate(max_surge: IntOrPercent, max_unavailable: IntOrPercent) -> Result<(), String> {
    if max_surge.is_zero() && max_unavailable.is_zero() {
        return Err(
            "maxSurge and maxUnavailable must not both be 0: the rolling update could never \
             add or remove an endpoint"
                .to_string(),
        );
    }
    if let IntOrPercent::Percent(p) = max_unavailable {
        if p > 100 {
            return Err(format!(
                "maxUnavailable must not be greater than 100%, got {p}%"
            ));
        }
    }
    Ok(())
}

/// The two limits of an update as endpoint counts, for one desired count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolved {
    /// How many endpoints the rotation may hold above `desired`.
    pub max_surge: usize,
    /// How many endpoints the ready count may fall below `desired`.
    pub max_unavailable: usize,
}

/// Kubernetes' `ResolveFenceposts`: surge rounds up, unavailable rounds down, and when
/// both come out 0 unavailable becomes 1 so that the update can always make progress.
/// `validate` has already rejected a literal both-zero; this rule only catches
/// percentages of a small count (e.g. surge `0%`, unavailable `10%` of 3).
pub fn resolve(max_surge: IntOrPercent, max_unavailable: IntOrPercent, desired: usize) -> Resolved {
    let surge = max_surge.scaled(desired, true);
    let mut unavailable = max_unavailable.scaled(desired, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Resolved {
        max_surge: surge,
        max_unavailable: unavailable,
    }
}

/// A backend's `rollingUpdate` block, already parsed (durations in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingConfig {
    /// Endpoints allowed above desired during an update; default `25%` (Kubernetes).
    pub max_surge: IntOrPercent,
    /// Ready endpoints allowed below desired during an update; default `25%` (Kubernetes).
    pub max_unavailable: IntOrPercent,
    /// Without progress for this long the update is reported stalled; default 600 s
    /// (Kubernetes' `progressDeadlineSeconds`).
    pub progress_deadline_ms: u64,
}

impl Default for RollingConfig {
    fn default() -> Self {
        RollingConfig {
            max_surge: IntOrPercent::Percent(25),
            max_unavailable: IntOrPercent::Percent(25),
            progress_deadline_ms: 600_000,
        }
    }
}

impl RollingConfig {
    /// See [`validate`].
    pub fn validate(&self) -> Result<(), String> {
        validate(self.max_surge, self.max_unavailable)
    }
}

/// One endpoint the update knows about: in rotation, or leaving it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// The endpoint address.
    pub endpoint: Endpoint,
    /// In the desired list of this update; a member that is not is "old" and will leave.
    pub is_new: bool,
    /// What its health check said at the last tick; decides the floor and the order in
    /// which old endpoints leave.
    pub ready: bool,
    /// Removed from rotation: gets no new requests while its in-flight ones finish.
    pub draining: bool,
}

impl Member {
    /// A member currently in rotation (not draining), e.g. to describe the rotation that
    /// exists when a new update starts.
    pub fn in_rotation(endpoint: impl Into<Endpoint>, ready: bool) -> Member {
        Member {
            endpoint: endpoint.into(),
            is_new: false,
            ready,
            draining: false,
        }
    }

    /// In rotation means it may receive new requests (if ready).
    fn active(&self) -> bool {
        !self.draining
    }
}

/// What the driver must do after a tick. Adds come before removes in the returned list,
/// so applying them in order never dips capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Put this endpoint into rotation (it passed its health check).
    Add(Endpoint),
    /// Stop sending it new requests and drain it; call [`RollingState::drained`] when its
    /// in-flight requests are done.
    Remove(Endpoint),
}

/// Where an update stands, as `weir ctl status` and the API show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Still moving, or waiting for endpoints to become ready within the deadline.
    Progressing,
    /// The rotation is exactly the desired list and every endpoint in it is ready.
    Complete,
    /// No progress for `progressDeadline`; the update keeps trying.
    Stalled,
}

/// The whole state of one backend's rolling update; plain data so that the driver can
/// keep it, show it and (de)serialise it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingState {
    /// The limits this update runs with.
    pub config: RollingConfig,
    /// The endpoint list being rolled to, de-duplicated, in declared order (the order
    /// in which new endpoints join).
    pub desired: Vec<Endpoint>,
    /// Endpoints in rotation or draining, in the order they joined.
    pub members: Vec<Member>,
    /// When this update started, for the status.
    pub started_ms: u64,
    /// Last tick with progress; the stall deadline counts from here.
    pub last_progress_ms: u64,
    /// Current phase.
    pub phase: Phase,
    /// True only in the state returned by the tick whose phase differs from the
    /// previous one, so the driver logs and emits "stalled"/"complete" exactly once.
    pub phase_changed: bool,
}

/// Counts for the API (`GET /api/v1/backends/{name}`) and `weir ctl status`, named as
/// a Deployment's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingStatus {
    /// Endpoints in the desired list.
    pub desired: usize,
    /// Ready endpoints in rotation (new and old).
    pub ready: usize,
    /// Desired endpoints in rotation.
    pub updated: usize,
    /// Old endpoints still in rotation.
    pub old: usize,
    /// All endpoints in rotation.
    pub total: usize,
    /// Endpoints removed from rotation that have not finished draining.
    pub draining: usize,
    /// The update's phase.
    pub phase: Phase,
}

/// Starts an update of the rotation `current_rotation` (members of a previous update,
/// draining ones included, or `&[]` at start-up) towards `new_desired`. Duplicates in
/// `new_desired` and in `current_rotation` are dropped (first one wins). Readiness flags
/// are carried over and refreshed at the first [`step`].
pub fn start(
    current_rotation: &[Member],
    new_desired: &[Endpoint],
    config: RollingConfig,
    now_ms: u64,
) -> RollingState {
    let mut seen = HashSet::new();
    let desired: Vec<Endpoint> = new_desired
        .iter()
        .filter(|ep| seen.insert(ep.as_str()))
        .cloned()
        .collect();
    let desired_set: HashSet<&str> = desired.iter().map(String::as_str).collect();

    let mut seen = HashSet::new();
    let members: Vec<Member> = current_rotation
        .iter()
        .filter(|m| seen.insert(m.endpoint.as_str()))
        .map(|m| Member {
            is_new: desired_set.contains(m.endpoint.as_str()),
            ..m.clone()
        })
        .collect();

    let mut state = RollingState {
        config,
        desired,
        members,
        started_ms: now_ms,
        last_progress_ms: now_ms,
        phase: Phase::Progressing,
        phase_changed: false,
    };
    if state.rotation_is_desired_and_ready() {
        state.phase = Phase::Complete;
    }
    state
}

/// One tick: refreshes readiness from `readiness` (the driver's health-check results,
/// for members and candidates alike), decides at most one add and one remove from the
/// counts observed now, and updates progress and phase. Pure: same inputs, same output.
pub fn step(
    update: &RollingState,
    readiness: &dyn Fn(&str) -> bool,
    now_ms: u64,
) -> (RollingState, Vec<Action>) {
    let mut next = update.clone();
    next.phase_changed = false;
    let desired_set: HashSet<&str> = update.desired.iter().map(String::as_str).collect();

    for m in &mut next.members {
        m.ready = readiness(&m.endpoint);
        m.is_new = desired_set.contains(m.endpoint.as_str());
    }

    let desired = update.desired.len();
    let limits = resolve(
        update.config.max_surge,
        update.config.max_unavailable,
        desired,
    );
    let max_total = desired.saturating_add(limits.max_surge);
    let min_ready = desired.saturating_sub(limits.max_unavailable);

    let total = next.members.iter().filter(|m| m.active()).count();
    let ready = next
        .members
        .iter()
        .filter(|m| m.active() && m.ready)
        .count();
    let old = next
        .members
        .iter()
        .filter(|m| m.active() && !m.is_new)
        .count();

    // Adds: desired endpoints not in rotation that passed their health check.
    let in_rotation: HashSet<&str> = next
        .members
        .iter()
        .filter(|m| m.active())
        .map(|m| m.endpoint.as_str())
        .collect();
    let ready_candidates = update
        .desired
        .iter()
        .filter(|ep| !in_rotation.contains(ep.as_str()) && readiness(ep));
    let adds: Vec<Endpoint> = if old == 0 {
        // Nothing to replace: fill up to desired at once (bounded by max_total too,
        // which is >= desired, so this is only a guard).
        ready_candidates
            .take(max_total.saturating_sub(total))
            .cloned()
            .collect()
    } else if total < max_total {
        ready_candidates.take(1).cloned().collect()
    } else {
        Vec::new()
    };

    // Remove: a not-ready old endpoint first (always allowed), else a ready one if the
    // ready count stays at or above the floor without it.
    let removal = next
        .members
        .iter()
        .position(|m| m.active() && !m.is_new && !m.ready)
        .or_else(|| {
            if ready > min_ready {
                next.members
                    .iter()
                    .position(|m| m.active() && !m.is_new && m.ready)
            } else {
                None
            }
        });

    let mut actions = Vec::with_capacity(adds.len() + 1);
    for ep in adds {
        match next.members.iter_mut().find(|m| m.endpoint == ep) {
            // A draining endpoint that is desired again (rollback) rejoins.
            Some(m) => {
                m.draining = false;
                m.is_new = true;
                m.ready = true;
            }
            None => next.members.push(Member {
                endpoint: ep.clone(),
                is_new: true,
                ready: true,
                draining: false,
            }),
        }
        actions.push(Action::Add(ep));
    }
    if let Some(i) = removal {
        if let Some(m) = next.members.get_mut(i) {
            m.draining = true;
            actions.push(Action::Remove(m.endpoint.clone()));
        }
    }

    let ready_before = update
        .members
        .iter()
        .filter(|m| m.active() && m.ready)
        .count();
    let ready_after = next
        .members
        .iter()
        .filter(|m| m.active() && m.ready)
        .count();
    if !actions.is_empty() || ready_after > ready_before {
        next.last_progress_ms = now_ms;
    }

    let phase = if update.phase == Phase::Complete || next.rotation_is_desired_and_ready() {
        Phase::Complete
    } else if now_ms.saturating_sub(next.last_progress_ms) >= update.config.progress_deadline_ms {
        Phase::Stalled
    } else {
        Phase::Progressing
    };
    next.phase_changed = phase != update.phase;
    next.phase = phase;
    (next, actions)
}

impl RollingState {
    /// Counts for the API and the CLI.
    pub fn status(&self) -> RollingStatus {
        let active = || self.members.iter().filter(|m| m.active());
        RollingStatus {
            desired: self.desired.len(),
            ready: active().filter(|m| m.ready).count(),
            updated: active().filter(|m| m.is_new).count(),
            old: active().filter(|m| !m.is_new).count(),
            total: active().count(),
            draining: self.members.iter().filter(|m| m.draining).count(),
            phase: self.phase,
        }
    }

    /// The members the load balancer may pick from: in rotation (not draining). The
    /// balancer should still skip those that are not ready.
    pub fn rotation(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.active())
    }

    /// Everything the driver must health-check before the next tick: the rotation and
    /// the desired endpoints waiting to join (their readiness gates the join).
    pub fn probe_targets(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.rotation()
            .map(|m| m.endpoint.as_str())
            .chain(self.desired.iter().map(String::as_str))
            .filter(|ep| seen.insert(*ep))
            .collect()
    }

    /// The driver reports that a removed endpoint has finished draining; it is forgotten.
    /// Returns false (and changes nothing) if `endpoint` is not draining.
    pub fn drained(&mut self, endpoint: &str) -> bool {
        let before = self.members.len();
        self.members
            .retain(|m| !(m.draining && m.endpoint == endpoint));
        self.members.len() != before
    }

    /// The completion condition: the rotation holds exactly the desired endpoints, all
    /// ready.
    fn rotation_is_desired_and_ready(&self) -> bool {
        let rotation: HashSet<&str> = self.rotation().map(|m| m.endpoint.as_str()).collect();
        rotation.len() == self.desired.len()
            && self.desired.iter().all(|ep| rotation.contains(ep.as_str()))
            && self.rotation().all(|m| m.ready)
    }
}
