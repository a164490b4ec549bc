//! The request bodies of the canary commands (`POST /api/v1/canaries/{name}/start`).
//! The answers (`CanaryStatus`, `CommandAnswer`) are the rollout engine's own types.

use serde::{Deserialize, Serialize};

/// Body of `POST /api/v1/canaries/{name}/start`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Revision label of the run (what a webhook promotion waits for on the primary).
    pub revision: String,
    /// Start even when the canary slot reports another revision (a canary with
    /// `watchRevision`); without it such a start is refused with 409.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}
