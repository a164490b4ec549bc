//! A throwaway single-node etcd (Debian `etcd-server`) on free loopback ports, started
//! by a test and killed when dropped: in clear text, or over TLS with client
//! certificates from a test CA ([`Pki`], made with rcgen), with extra flags (an auth
//! token's kind and TTL). Without `etcd` on PATH [`Etcd::start`] prints one skip line
//! and returns `None`; under CI it fails instead (`tool_available`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use weir::cluster::etcd::{b64, client_config, prefix_end, EtcdClient, EtcdError, EtcdOptions};
use weir::proxy::client::Connector;

const POLL: Duration = Duration::from_millis(50);

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn fresh_dir(kind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "weir-{kind}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A test PKI in a directory of its own (removed when dropped), every file PEM:
/// `ca.pem` signed etcd's server certificate (`server.pem`, for 127.0.0.1, usable as
/// a client certificate too because etcd's JSON gateway dials etcd with it) and weir's
/// client certificate (`client.pem`, no Common Name: with authentication on, etcd
/// refuses a gateway request whose certificate has one); `other-ca.pem` signed
/// `other-client.pem`; `cn-client.pem` is signed by `ca.pem` but has a Common Name;
/// `jwt.pem` / `jwt.pub.pem` sign etcd's JWT auth tokens.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new() -> Arc<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
            ExtendedKeyUsagePurpose as Eku, IsCa, KeyPair, KeyUsagePurpose,
        };
        let dir = fresh_dir("etcd-pki");
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, pem: String| std::fs::write(dir.join(name), pem).unwrap();
        let ca = |cn: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
        };
        let leaf = |issuer: &CertifiedIssuer<'static, KeyPair>,
                    name: &str,
                    sans: &[&str],
                    cn: Option<&str>,
                    ekus: Vec<Eku>| {
            let key = KeyPair::generate().unwrap();
            let mut p =
                CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name
                .push(DnType::OrganizationName, "weir tests");
            if let Some(cn) = cn {
                p.distinguished_name.push(DnType::CommonName, cn);
            }
            p.extended_key_usages = ekus;
            let cert = p.signed_by(&key, issuer).unwrap();
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}-key.pem"), key.serialize_pem());
        };
        let main = ca("weir etcd test CA");
        write("ca.pem", main.pem());
        leaf(
            &main,
            "server",
            &["127.0.0.1", "localhost"],
            Some("etcd-test-server"),
            vec![Eku::ServerAuth, Eku::ClientAuth],
        );
        leaf(&main, "client", &[], None, vec![Eku::ClientAuth]);
        leaf(&main, "cn-client", &[], Some("weir"), vec![Eku::ClientAuth]);
        let other = ca("another CA");
        write("other-ca.pem", other.pem());
        leaf(&other, "other-client", &[], None, vec![Eku::ClientAuth]);
        let jwt = KeyPair::generate().unwrap();
        write("jwt.pem", jwt.serialize_pem());
        write("jwt.pub.pem", jwt.public_key_pem());
        Arc::new(Pki { dir })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The TLS options of a client trusting `ca.pem` and presenting `client.pem`.
    pub fn client_options(&self) -> EtcdOptions {
        let ca = weir::config::tls::load_ca_file(&self.path("ca.pem")).unwrap();
        let pair =
            weir::config::tls::load_pair(&self.path("client.pem"), &self.path("client-key.pem"))
                .unwrap();
        EtcdOptions {
            tls: Some(client_config(Some(ca), Some(pair)).unwrap()),
            credentials: None,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A throwaway single-node etcd.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    /// TLS with client certificates required, from this PKI; `None`: clear text.
    pki: Option<Arc<Pki>>,
    /// More flags (`--auth-token ...`).
    extra: Vec<String>,
}

impl Etcd {
    /// Starts etcd in clear text, or returns `None` (after printing why) when it is not
    /// installed.
    pub async fn start(test: &str) -> Option<Etcd> {
        Etcd::start_with(test, None, &[]).await
    }

    /// Starts etcd, over TLS requiring client certificates of `pki`'s CA when given,
    /// with `extra` flags.
    pub async fn start_with(test: &str, pki: Option<Arc<Pki>>, extra: &[&str]) -> Option<Etcd> {
        if !super::tool_available("etcd", test, "apt-get install etcd-server") {
            return None;
        }
        let mut e = Etcd {
            child: None,
            dir: fresh_dir("etcd"),
            client_port: free_port(),
            peer_port: free_port(),
            pki,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        e.spawn().await;
        Some(e)
    }

    pub fn url(&self) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The log etcd writes (for messages).
    pub fn log(&self) -> PathBuf {
        self.dir.with_extension("log")
    }

    /// A client of this etcd as the fixture itself (the PKI's client certificate, no user).
    pub fn client(&self, timeout: Duration) -> EtcdClient {
        let opts = match &self.pki {
            Some(p) => p.client_options(),
            None => EtcdOptions::default(),
        };
        EtcdClient::with_options(&[self.url()], timeout, opts).expect("client")
    }

    /// Runs etcd on the fixture's ports and data dir, and waits until it answers (an
    /// error answer counts: with authentication on, a read without a user is refused).
    pub async fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.log()).expect("etcd log");
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("default")
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            // A short election timeout lowers etcd's minimum lease TTL (1.5 × election
            // timeout) below the 2 s the tests ask for.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"]);
        if let Some(p) = &self.pki {
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(p.path("ca.pem"))
                .arg("--cert-file")
                .arg(p.path("server.pem"))
                .arg("--key-file")
                .arg(p.path("server-key.pem"));
        }
        let child = cmd
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
        let c = self.client(Duration::from_millis(500));
        for _ in 0..200 {
            if matches!(
                c.range("/", true).await,
                Ok(_) | Err(EtcdError::Status { .. })
            ) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("etcd did not start; see {}", self.log().display());
    }

    /// SIGKILL: as abrupt as a crash or a partition.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Switches authentication on, through the gateway as etcd's documentation does it:
    /// a root user, and users `(name, password, prefix, may write)` each with a role of
    /// their own that may read (and write) the keys under `prefix`.
    pub async fn enable_auth(&self, users: &[(&str, &str, &str, bool)]) {
        let prefix_perm = |prefix: &str, write: bool| {
            serde_json::json!({
                "permType": if write { "READWRITE" } else { "READ" },
                "key": b64(prefix.as_bytes()),
                "range_end": b64(&prefix_end(prefix.as_bytes())),
            })
        };
        self.post(
            "/v3/auth/user/add",
            serde_json::json!({"name": "root", "password": "root-password"}),
        )
        .await;
        self.post("/v3/auth/role/add", serde_json::json!({"name": "root"}))
            .await;
        self.post(
            "/v3/auth/user/grant",
            serde_json::json!({"user": "root", "role": "root"}),
        )
        .await;
        for (user, password, prefix, write) in users {
            self.post(
                "/v3/auth/user/add",
                serde_json::json!({"name": user, "password": password}),
            )
            .await;
            self.post("/v3/auth/role/add", serde_json::json!({"name": user}))
                .await;
            self.post(
                "/v3/auth/role/grant",
                serde_json::json!({"name": user, "perm": prefix_perm(prefix, *write)}),
            )
            .await;
            self.post(
                "/v3/auth/user/grant",
                serde_json::json!({"user": user, "role": user}),
            )
            .await;
        }
        self.post("/v3/auth/enable", serde_json::json!({})).await;
    }

    /// One gateway call that must succeed (auth management before auth is on).
    async fn post(&self, path: &str, body: serde_json::Value) {
        let connector = match self.pki.as_ref().and_then(|p| p.client_options().tls) {
            Some(cfg) => Connector::tls(Duration::from_secs(5), cfg, None).unwrap(),
            None => Connector::plain(Duration::from_secs(5)),
        };
        let http: Client<Connector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        let req = http::Request::post(format!("{}{path}", self.url()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), http.request(req))
            .await
            .expect("etcd answers in time")
            .expect("etcd answers");
        let status = resp.status();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(
            status.is_success(),
            "{path}: HTTP {status}: {}",
            String::from_utf8_lossy(&text)
        );
    }

    /// Path of a file of the PKI.
    pub fn pki_path(&self, name: &str) -> PathBuf {
        self.pki.as_ref().expect("a TLS etcd").path(name)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.log());
    }
}
