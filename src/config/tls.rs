//! PEM certificate, key and CA file loading, and the process's one rustls
//! crypto provider. Below the proxy so that config validation can check the
//! files it names (field paths `certFile`, `keyFile`, `caFile`) without
//! importing the data plane; the proxy's TLS listeners and clients use the
//! same functions.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The one crypto provider of the process (ring), also installed as the
/// rustls process default the first time it is asked for, so that any
/// rustls user in the process agrees on it.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let p = Arc::new(rustls::crypto::ring::default_provider());
            // Fails only if another provider was installed first; ours is
            // passed explicitly to every config anyway.
            let _ = CryptoProvider::install_default((*p).clone());
            p
        })
        .clone()
}

/// Which file of a certificate pair is at fault (for config field paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairError {
    /// The certificate file (`certFile`).
    Cert(String),
    /// The key file (`keyFile`), or a key that does not match the certificate.
    Key(String),
}

impl std::fmt::Display for PairError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PairError::Cert(m) => write!(f, "certFile: {m}"),
            PairError::Key(m) => write!(f, "keyFile: {m}"),
        }
    }
}

/// Parses a PEM certificate chain and its PEM private key, checking that
/// the key is usable and belongs to the leaf certificate.
pub fn parse_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, PairError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| PairError::Cert(format!("not a PEM certificate chain ({e})")))?;
    if chain.is_empty() {
        return Err(PairError::Cert("no PEM certificate found".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| PairError::Key(format!("no PEM private key found ({e})")))?;
    CertifiedKey::from_der(chain, key, &provider())
        .map(Arc::new)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                PairError::Key("the private key does not belong to the certificate".into())
            }
            other => PairError::Key(format!("unusable private key ({other})")),
        })
}

/// Reads and parses a certificate pair from disk.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, PairError> {
    let c = std::fs::read(cert)
        .map_err(|e| PairError::Cert(format!("cannot read {}: {e}", cert.display())))?;
    let k = std::fs::read(key)
        .map_err(|e| PairError::Key(format!("cannot read {}: {e}", key.display())))?;
    parse_pair(&c, &k)
}

/// Reads a PEM file of CA certificates (at least one).
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} is not a PEM certificate file ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate found in {}", path.display()));
    }
    let mut store = RootCertStore::empty();
    let (_, bad) = store.add_parsable_certificates(certs.iter().cloned());
    if bad > 0 {
        return Err(format!(
            "{bad} certificate(s) in {} cannot be used as a trust anchor",
            path.display()
        ));
    }
    Ok(certs)
}
