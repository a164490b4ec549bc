//! TLS to etcd: the rustls client config, and a failed handshake told apart by whose
//! side is at fault (etcd's certificate, weir's client certificate, or neither).
//!
//! With TLS 1.3 the server checks the client certificate after the client finished
//! its handshake, so a refused client certificate shows as an alert on the first read
//! of the answer, not on connect; [`tls_problem`] finds the rustls error in either.

use std::error::Error as StdError;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};

/// Why TLS with an etcd endpoint failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsProblem {
    /// etcd's certificate did not verify; `kind` is rustls's reason (`UnknownIssuer`,
    /// `NotValidForName`, `Expired`, ...).
    ServerCertificate {
        /// The reason's name.
        kind: String,
        /// rustls's full message.
        detail: String,
    },
    /// etcd refused weir's client certificate, or its absence; the alert it sent
    /// (`CertificateRequired`, `BadCertificate`, `UnknownCA`, ...).
    ClientCertificate(String),
    /// Any other failure (the port does not speak TLS, no common version, ...).
    Handshake(String),
}

impl std::fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsProblem::ServerCertificate { detail, .. } => {
                write!(f, "etcd's certificate was refused: {detail}")
            }
            TlsProblem::ClientCertificate(alert) => {
                write!(f, "etcd refused the client certificate (alert {alert})")
            }
            TlsProblem::Handshake(e) => write!(f, "TLS failed: {e}"),
        }
    }
}

/// The client config for etcd: trust `ca` (the Mozilla roots when `None`), offer
/// `client` when etcd asks for a certificate, ALPN `http/1.1` (the gateway's JSON
/// protocol), TLS 1.2 and 1.3 on the process's crypto provider.
pub fn client_config(
    ca: Option<Vec<CertificateDer<'static>>>,
    client: Option<Arc<CertifiedKey>>,
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(certs) => {
            roots.add_parsable_certificates(certs);
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = ClientConfig::builder_with_provider(crate::config::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots);
    // `with_client_auth_cert` with the pair already parsed and checked (so that a bad
    // file is reported as certFile or keyFile).
    let mut cfg = match client {
        Some(key) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key))),
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The rustls error somewhere in `err`'s chain of sources (an I/O error wrapping it
/// included), classified.
pub(super) fn tls_problem(err: &(dyn StdError + 'static)) -> Option<TlsProblem> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(classify(r));
        }
        // `io::Error::source` skips the error it wraps: look inside.
        if let Some(r) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(classify(r));
        }
        cur = e.source();
    }
    None
}

/// Whose side a rustls error puts the fault on.
pub(super) fn classify(e: &rustls::Error) -> TlsProblem {
    match e {
        rustls::Error::InvalidCertificate(c) => TlsProblem::ServerCertificate {
            kind: certificate_error_kind(c),
            detail: e.to_string(),
        },
        rustls::Error::AlertReceived(
            a @ (AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::NoCertificate
            | AlertDescription::AccessDenied),
        ) => TlsProblem::ClientCertificate(format!("{a:?}")),
        other => TlsProblem::Handshake(other.to_string()),
    }
}

/// The name of a certificate error without its context (`NotValidForName` for
/// `NotValidForNameContext { .. }`).
fn certificate_error_kind(c: &CertificateError) -> String {
    let debug = format!("{c:?}");
    let name: String = debug
        .chars()
        .take_while(|ch| ch.is_ascii_alphanumeric())
        .collect();
    name.strip_suffix("Context").unwrap_or(&name).to_string()
}
