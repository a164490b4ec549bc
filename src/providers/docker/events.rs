//! PURE: one Docker event → what it changes in the provider's picture of the
//! containers. Most events are applied directly (a `die` makes a container not
//! running, a `health_status` sets its health, a `destroy` forgets it); those
//! that change what only an inspect can tell (`start`: a new IP) ask the driver
//! to inspect the container. Health-check `exec_*` events, which every HEALTHCHECK
//! run produces, change nothing.

use super::labels::Container;
use std::collections::BTreeMap;

/// One `/events` message, as far as the provider reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// `container`, `network`, ...
    pub kind: String,
    /// `start`, `die`, `health_status: healthy`, ...
    pub action: String,
    /// The container ID.
    pub id: String,
    /// The actor's attributes (labels, `name`, `exitCode`, ...).
    pub attributes: BTreeMap<String, String>,
}

/// What an event means for the containers known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing the endpoints depend on.
    Ignore,
    /// Fetch the container again (its state, networks or health may be new).
    Inspect(String),
    /// It stopped running: `state` is its new state.
    Stopped { id: String, state: String },
    /// Its HEALTHCHECK reported `status`.
    Health { id: String, status: String },
    /// It was removed.
    Removed(String),
}

/// The effect of `e`.
pub fn effect(e: &Event) -> Effect {
    if e.kind != "container" || e.id.is_empty() {
        return Effect::Ignore;
    }
    let id = e.id.clone();
    // `health_status: healthy` (newer daemons) or `health_status` with the
    // status only in the attributes.
    if let Some(rest) = e.action.strip_prefix("health_status") {
        let status = rest.trim_start_matches(':').trim().to_string();
        return if status.is_empty() {
            Effect::Inspect(id)
        } else {
            Effect::Health { id, status }
        };
    }
    match e.action.as_str() {
        "start" | "restart" | "unpause" | "rename" | "update" | "create" => Effect::Inspect(id),
        "die" | "stop" | "oom" => Effect::Stopped {
            id,
            state: "exited".into(),
        },
        "pause" => Effect::Stopped {
            id,
            state: "paused".into(),
        },
        "destroy" => Effect::Removed(id),
        _ => Effect::Ignore,
    }
}

/// Applies `effect` to `known` (container ID → container); `true` when something
/// the endpoints depend on changed. [`Effect::Inspect`] changes nothing here: the
/// driver inspects and stores the answer.
pub fn apply(known: &mut BTreeMap<String, Container>, effect: &Effect) -> bool {
    match effect {
        Effect::Ignore | Effect::Inspect(_) => false,
        Effect::Stopped { id, state } => match known.get_mut(id) {
            Some(c) if c.state != *state => {
                c.state = state.clone();
                true
            }
            _ => false,
        },
        Effect::Health { id, status } => match known.get_mut(id) {
            Some(c) if c.health.as_deref() != Some(status.as_str()) => {
                c.health = Some(status.clone());
                true
            }
            _ => false,
        },
        Effect::Removed(id) => known.remove(id).is_some(),
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
