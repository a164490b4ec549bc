//! TLS with rustls (the `ring` provider): termination on listeners and
//! origination to backends.
//!
//! Listeners: one or more certificates per listener, the one served chosen
//! by the client's SNI (the first certificate whose names cover it, else the
//! first one); ALPN `h2` and `http/1.1`; TLS 1.2 and 1.3 only (rustls has no
//! code for anything older, so a TLS 1.0/1.1 ClientHello fails with a
//! `protocol_version` alert). Certificate files are re-read every
//! [`RELOAD_INTERVAL`]: when their content changed and parses, the new set is
//! swapped in for the next handshakes; connections already open keep the
//! certificate they were set up with. A broken file keeps the previous
//! certificate in service and logs a warning.
//!
//! Backends: a `rustls::ClientConfig` per backend TLS setting (CA file or the
//! `webpki-roots` Mozilla set, SNI name, ALPN by protocol).

pub use crate::config::tls::{load_ca_file, load_pair, parse_pair, provider, PairError};
use crate::config::{CertFiles, ListenerTls, UpstreamProtocol, UpstreamTls};
use arc_swap::ArcSwap;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often certificate files are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// ALPN protocol ids offered by listeners, in preference order.
const SERVER_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// One certificate in service and the file contents it was built from
/// (compared on every reload check, so a file replaced within the same
/// mtime second is still noticed).
struct Loaded {
    files: CertFiles,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    key: Arc<CertifiedKey>,
}

/// The certificates of one listener, swapped whole on reload.
pub struct CertStore {
    /// In SNI preference order; the first is the default.
    current: ArcSwap<Vec<Arc<Loaded>>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("certificates", &self.current.load().len())
            .finish()
    }
}

impl CertStore {
    /// Loads every certificate of `spec`; fails (naming the file) if any
    /// cannot be read or parsed.
    pub fn load(spec: &ListenerTls) -> Result<Arc<Self>, String> {
        if spec.certificates.is_empty() {
            return Err("no certificate configured".into());
        }
        let mut loaded = Vec::with_capacity(spec.certificates.len());
        for files in &spec.certificates {
            loaded.push(Arc::new(load_files(files)?));
        }
        Ok(Arc::new(CertStore {
            current: ArcSwap::from_pointee(loaded),
        }))
    }

    /// Re-reads the files; swaps in a new set when any content changed and
    /// every changed pair parses. Returns whether a new set was installed.
    /// On error the old set stays in service.
    pub fn reload(&self) -> Result<bool, String> {
        let cur = self.current.load_full();
        let mut next = Vec::with_capacity(cur.len());
        let mut changed = false;
        for old in cur.iter() {
            let (c, k) = read_files(&old.files)?;
            if c == old.cert_pem && k == old.key_pem {
                next.push(old.clone());
                continue;
            }
            let key = parse_pair(&c, &k).map_err(|e| describe(&old.files, e))?;
            changed = true;
            next.push(Arc::new(Loaded {
                files: old.files.clone(),
                cert_pem: c,
                key_pem: k,
                key,
            }));
        }
        if changed {
            self.current.store(Arc::new(next));
        }
        Ok(changed)
    }

    /// The certificate for a ClientHello naming `sni`.
    fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let certs = self.current.load();
        if let Some(name) = sni.and_then(|s| ServerName::try_from(s.to_string()).ok()) {
            for c in certs.iter() {
                let Some(leaf) = c.key.cert.first() else {
                    continue;
                };
                let covers = webpki::EndEntityCert::try_from(leaf)
                    .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok());
                if covers {
                    return Some(c.key.clone());
                }
            }
        }
        certs.first().map(|c| c.key.clone())
    }

    /// Checks the files every `every` until `shutdown` turns true or the
    /// store is dropped by its listener.
    pub async fn watch(
        store: std::sync::Weak<CertStore>,
        every: Duration,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let Some(s) = store.upgrade() else { return };
            // File IO is small (a few KiB) but blocking: keep it off the
            // reactor threads.
            let res = tokio::task::spawn_blocking(move || s.reload()).await;
            match res {
                Ok(Ok(true)) => tracing::info!(target: "weir::tls", "certificates reloaded"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(target: "weir::tls", error = %e, "certificate reload failed; still serving the previous certificates")
                }
                Err(e) => {
                    tracing::warn!(target: "weir::tls", error = %e, "certificate reload task failed")
                }
            }
        }
    }
}

fn read_files(f: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), String> {
    let c = std::fs::read(&f.cert_file)
        .map_err(|e| format!("cannot read {}: {e}", f.cert_file.display()))?;
    let k = std::fs::read(&f.key_file)
        .map_err(|e| format!("cannot read {}: {e}", f.key_file.display()))?;
    Ok((c, k))
}

fn describe(f: &CertFiles, e: PairError) -> String {
    match e {
        PairError::Cert(m) => format!("{}: {m}", f.cert_file.display()),
        PairError::Key(m) => format!("{}: {m}", f.key_file.display()),
    }
}

fn load_files(files: &CertFiles) -> Result<Loaded, String> {
    let (cert_pem, key_pem) = read_files(files)?;
    let key = parse_pair(&cert_pem, &key_pem).map_err(|e| describe(files, e))?;
    Ok(Loaded {
        files: files.clone(),
        cert_pem,
        key_pem,
        key,
    })
}

/// rustls hook: picks the certificate by SNI on every handshake.
#[derive(Debug)]
struct SniResolver(Arc<CertStore>);

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.pick(hello.server_name())
    }
}

/// The server-side rustls config of a listener: TLS 1.3 and 1.2, no client
/// certificates, certificates from `store`, ALPN h2 then http/1.1.
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<ServerConfig>, String> {
    let mut cfg = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver(store)));
    cfg.alpn_protocols = SERVER_ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// A listener's TLS side: the acceptor and the certificates it serves.
pub struct Terminator {
    /// Runs the handshake on each accepted connection.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The certificates, reloaded in place (see [`CertStore::watch`]).
    pub store: Arc<CertStore>,
}

impl Terminator {
    /// Loads the listener's certificates and builds its server config.
    pub fn new(spec: &ListenerTls) -> Result<Arc<Self>, String> {
        let store = CertStore::load(spec)?;
        let cfg = server_config(store.clone())?;
        Ok(Arc::new(Terminator {
            acceptor: tokio_rustls::TlsAcceptor::from(cfg),
            store,
        }))
    }
}

/// The client-side rustls config for a backend: trust the CA file when
/// given, else the Mozilla roots; ALPN by protocol (`http1` offers
/// http/1.1, `http2` h2, `auto` both with h2 first).
pub fn client_config(
    tls: &UpstreamTls,
    protocol: UpstreamProtocol,
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            roots.add_parsable_certificates(load_ca_file(path)?);
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let mut cfg = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = match protocol {
        UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
        UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
        UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(
            names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    #[test]
    fn parse_pair_accepts_a_matching_pair_and_names_the_bad_file() {
        let (c, k) = pair(&["a.test"]);
        assert!(parse_pair(c.as_bytes(), k.as_bytes()).is_ok());
        assert!(matches!(
            parse_pair(b"garbage", k.as_bytes()),
            Err(PairError::Cert(_))
        ));
        assert!(matches!(
            parse_pair(c.as_bytes(), b"garbage"),
            Err(PairError::Key(_))
        ));
        let (_, other_key) = pair(&["b.test"]);
        assert!(matches!(
            parse_pair(c.as_bytes(), other_key.as_bytes()),
            Err(PairError::Key(m)) if m.contains("does not belong")
        ));
    }

    #[test]
    fn pick_follows_sni_with_wildcards_and_falls_back_to_the_first() {
        let dir = std::env::temp_dir().join(format!("weir-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut certs = Vec::new();
        for (i, names) in [vec!["a.test"], vec!["*.b.test"]].iter().enumerate() {
            let (c, k) = pair(names);
            let cf = dir.join(format!("{i}.crt"));
            let kf = dir.join(format!("{i}.key"));
            std::fs::write(&cf, c).unwrap();
            std::fs::write(&kf, k).unwrap();
            certs.push(CertFiles {
                cert_file: cf,
                key_file: kf,
            });
        }
        let store = CertStore::load(&ListenerTls {
            certificates: certs,
        })
        .unwrap();
        let leaf = |sni: Option<&str>| store.pick(sni).unwrap().cert[0].clone();
        let first = store.current.load()[0].key.cert[0].clone();
        let second = store.current.load()[1].key.cert[0].clone();
        assert_eq!(leaf(Some("a.test")), first);
        assert_eq!(leaf(Some("x.b.test")), second);
        assert_eq!(leaf(Some("other.test")), first);
        assert_eq!(leaf(None), first);
        assert!(!store.reload().unwrap(), "unchanged files do not reload");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn client_config_offers_alpn_by_protocol_and_names_a_bad_ca_file() {
        let dir = std::env::temp_dir().join(format!("weir-tls-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tls = |ca: Option<&str>| UpstreamTls {
            ca_file: ca.map(|f| dir.join(f)),
            server_name: None,
        };
        let alpn = |protocol| {
            client_config(&tls(None), protocol)
                .unwrap()
                .alpn_protocols
                .clone()
        };
        assert_eq!(alpn(UpstreamProtocol::Http1), [b"http/1.1".to_vec()]);
        assert_eq!(alpn(UpstreamProtocol::Http2), [b"h2".to_vec()]);
        assert_eq!(
            alpn(UpstreamProtocol::Auto),
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );

        let (cert, _) = pair(&["ca.test"]);
        std::fs::write(dir.join("ca.pem"), cert).unwrap();
        std::fs::write(dir.join("garbage.pem"), "not a certificate").unwrap();
        assert!(client_config(&tls(Some("ca.pem")), UpstreamProtocol::Http1).is_ok());
        for (file, why) in [
            ("missing.pem", "cannot read"),
            ("garbage.pem", "no PEM certificate found"),
        ] {
            let err = client_config(&tls(Some(file)), UpstreamProtocol::Http1).unwrap_err();
            assert!(err.contains(why), "{file}: {err}");
            assert!(err.contains(&dir.join(file).display().to_string()), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
