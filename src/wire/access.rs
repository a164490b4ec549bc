//! What a bearer token may do: `GET /api/v1/whoami` (docs/api.md), read by the
//! console to show or hide its buttons.

use serde::{Deserialize, Serialize};

/// The access a request was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Access {
    /// Every endpoint (the `tokenFile` token, or no token configured).
    Write,
    /// GETs only (the `readOnlyTokenFile` token): a write answers 403.
    Read,
    /// Another replica of the fleet (the `cluster.peerTokenFile` token): only the
    /// calls an engine makes to a data plane and forwarded canary commands.
    Peer,
}

/// `GET /api/v1/whoami`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// What the presented token (or none) may do.
    pub access: Access,
    /// Whether the API asks for a bearer token at all (`admin.tokenFile` set).
    pub token_required: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whoami_round_trips_in_its_documented_shape() {
        let doc = r#"{"access": "read", "tokenRequired": true}"#;
        let w: WhoAmI = serde_json::from_str(doc).unwrap();
        assert_eq!(
            w,
            WhoAmI {
                access: Access::Read,
                token_required: true
            }
        );
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(text, r#"{"access":"read","tokenRequired":true}"#);
        assert_eq!(serde_json::from_str::<WhoAmI>(&text).unwrap(), w);
        assert!(
            serde_json::from_str::<WhoAmI>(r#"{"access":"admin","tokenRequired":true}"#).is_err()
        );
    }
}
