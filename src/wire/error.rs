//! The body of every admin API error (docs/api.md, "Errors").

use serde::{Deserialize, Serialize};

/// `{"error": code, "field": path or null, "reason": text, "errors": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable code (`invalid`, `not-found`, `conflict`, ...).
    pub error: String,
    /// The field at fault; `None` when none, `""` for the body as a whole.
    pub field: Option<String>,
    /// Human-readable explanation.
    pub reason: String,
    /// On `422`: every problem found (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
}

/// One problem of a `422`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// Field path, relative as for [`ErrorBody::field`].
    pub field: String,
    /// Why the value is refused.
    pub reason: String,
}
