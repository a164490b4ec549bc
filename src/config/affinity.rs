//! The raw `affinityState` of a route follows its weight: the pure rule
//! ([`crate::affinity::advance_values`]) applied to the raw values that the
//! table store and the rollout engine write.

use super::raw::{RawAffinityState, RawTable};
use rand::Rng;

/// The cookie values of `state` after the weight moves from `old_weight` to
/// `new_weight` (see [`crate::affinity::advance_values`]).
pub fn advance_affinity_state(
    state: &mut RawAffinityState,
    old_weight: i64,
    new_weight: i64,
    rng: &mut impl Rng,
) {
    crate::affinity::advance_values(
        &mut state.canary_value,
        &mut state.primary_value,
        &mut state.previous_canary_value,
        old_weight,
        new_weight,
        rng,
    );
}

/// Fills in the cookie values of routes with session affinity when a write
/// moves the weight and carries no values of its own (DESIGN §5):
/// 0 → >0 starts a run (new canary and primary values, the last run's value
/// forgotten); a weight change during the run starts a step (new primary
/// value); >0 → 0 ends the run (canary value kept as `previous` so that its
/// cookie is deleted on sight). A write that sets values itself (the engine
/// driving a fleet) is left as it is.
pub fn fill_affinity_values(old: &RawTable, new: &mut RawTable, rng: &mut impl Rng) {
    for r in &mut new.routes {
        if r.session_affinity.is_none() {
            continue;
        }
        let prev = old.routes.iter().find(|o| o.name == r.name);
        let old_weight = prev.and_then(|o| o.canary_weight).unwrap_or(0);
        let old_state = prev
            .and_then(|o| o.affinity_state.clone())
            .unwrap_or_default();
        let new_weight = r.canary_weight.unwrap_or(0);
        let state = r
            .affinity_state
            .get_or_insert_with(RawAffinityState::default);
        if *state != old_state {
            continue;
        }
        advance_affinity_state(state, old_weight, new_weight, rng);
        if *state == RawAffinityState::default() {
            r.affinity_state = None;
        }
    }
}
