//! Upstream side: the one pooled HTTP client shared by every route. The
//! backend and endpoint state it serves lives in the data-plane state layer
//! (`dataplane::backend`), re-exported here.

use crate::config::ProxySettings;
pub use crate::dataplane::backend::{Backend, BackendRegistry, Endpoint, InFlight};

/// The pooled upstream clients (one per protocol and TLS setting, see
/// `proxy::client`).
pub type UpstreamClient = super::client::UpstreamClients;

/// Builds the shared clients: keep-alive pools with idle timeout (needs the
/// timer, or idle connections are never reaped), per-host idle cap,
/// TCP_NODELAY and a connect timeout. Names are resolved at connect time, so
/// a `host:port` endpoint follows DNS changes on its next new connection.
pub fn build_client(settings: &ProxySettings) -> UpstreamClient {
    super::client::UpstreamClients::new(settings)
}
