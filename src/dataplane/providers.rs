//! State that endpoint providers (`providers.docker`) share with the layers
//! that read it, kept here so neither the rollout engine nor the admin API
//! imports a provider:
//!
//! - [`EndpointRevisions`]: the revision each provided endpoint runs, as its
//!   labels say. The rollout engine reads a slot's revision from it instead of
//!   polling `revisionPath` (a new `weir.revision` on the canary slot starts a run).
//! - [`ProviderBoard`]: each provider's connection state, counters and the
//!   backends it fills, for `/readyz`, `GET /api/v1/providers` and `/metrics`.

use crate::wire::providers::ProviderStatus;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Backend name → endpoint address → revision, as the providers know them.
#[derive(Debug, Default)]
pub struct EndpointRevisions {
    by_backend: Mutex<HashMap<String, BTreeMap<String, String>>>,
}

impl EndpointRevisions {
    /// Replaces what is known of `backend`'s endpoints.
    pub fn set(&self, backend: &str, revisions: BTreeMap<String, String>) {
        let mut m = self.by_backend.lock().unwrap_or_else(|p| p.into_inner());
        if revisions.is_empty() {
            m.remove(backend);
        } else {
            m.insert(backend.to_string(), revisions);
        }
    }

    /// The one revision every endpoint of `endpoints` runs, when a provider
    /// knows all of them and they agree; `None` for a mixed or unknown list.
    pub fn common(&self, backend: &str, endpoints: &[String]) -> Option<String> {
        let m = self.by_backend.lock().unwrap_or_else(|p| p.into_inner());
        let known = m.get(backend)?;
        let mut revs = endpoints.iter().map(|e| known.get(e));
        let first = revs.next()??;
        revs.all(|r| r == Some(first)).then(|| first.clone())
    }

    /// Everything known of `backend`.
    pub fn of(&self, backend: &str) -> BTreeMap<String, String> {
        let m = self.by_backend.lock().unwrap_or_else(|p| p.into_inner());
        m.get(backend).cloned().unwrap_or_default()
    }
}

/// The status documents of the running providers, by provider name.
#[derive(Debug, Default)]
pub struct ProviderBoard {
    providers: Mutex<BTreeMap<String, ProviderStatus>>,
}

impl ProviderBoard {
    /// An empty board.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Changes provider `name`'s document (created with `provider: name` if absent).
    pub fn update(&self, name: &str, f: impl FnOnce(&mut ProviderStatus)) {
        let mut m = self.providers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = m.entry(name.to_string()).or_insert_with(|| ProviderStatus {
            provider: name.to_string(),
            ..ProviderStatus::default()
        });
        f(entry);
    }

    /// Every provider's document, by name.
    pub fn list(&self) -> Vec<ProviderStatus> {
        let m = self.providers.lock().unwrap_or_else(|p| p.into_inner());
        m.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn common_revision_needs_every_endpoint_known_and_equal() {
        let r = EndpointRevisions::default();
        let eps = vec!["10.0.0.2:80".to_string(), "10.0.0.3:80".to_string()];
        assert_eq!(r.common("b", &eps), None);
        r.set("b", revs(&[("10.0.0.2:80", "v1"), ("10.0.0.3:80", "v1")]));
        assert_eq!(r.common("b", &eps).as_deref(), Some("v1"));
        r.set("b", revs(&[("10.0.0.2:80", "v1"), ("10.0.0.3:80", "v2")]));
        assert_eq!(
            r.common("b", &eps),
            None,
            "a half-deployed slot has no revision"
        );
        r.set("b", revs(&[("10.0.0.2:80", "v1")]));
        assert_eq!(r.common("b", &eps), None, "an endpoint of unknown revision");
        assert_eq!(r.common("b", &[]), None);
        r.set("b", BTreeMap::new());
        assert!(r.of("b").is_empty());
    }
}
