//! From the `cluster:` settings to an etcd client, and the first contact with etcd.
//!
//! The TLS files and the password file are read here, when the replica joins the fleet;
//! one that cannot be read or parsed is an error naming its field and path.
//!
//! The first contact, before any task starts, checks every endpoint: TLS both ways,
//! the user, and read and write permission under the prefix. A problem of
//! configuration (a certificate refused on either side, a wrong password, a missing
//! permission) ends the start with a message naming the field to fix, instead of a
//! replica that retries for ever. etcd merely out of reach does not: the replica
//! starts, steps nothing and keeps trying, as when it loses etcd later.

use std::sync::Arc;
use std::time::Duration;

use rustls::sign::CertifiedKey;

use super::etcd::{
    client_config, CmpOp, Compare, Credentials, EtcdClient, EtcdError, EtcdOptions, Op, Target,
    TlsProblem,
};
use super::view::Keys;
use crate::config::cluster::{ClusterSettings, EtcdAuth};
use crate::config::tls::{load_ca_file, parse_pair, PairError};
use crate::config::CertFiles;

/// The etcd client of `settings`, every call bounded by `timeout`: TLS for `https://`
/// endpoints (files read now), the user's password read now.
pub fn client(settings: &ClusterSettings, timeout: Duration) -> Result<EtcdClient, String> {
    let opts = options(settings)?;
    EtcdClient::with_options(&settings.etcd, timeout, opts)
        .map_err(|e| format!("cluster.etcd: {e}"))
}

/// TLS and credentials of `settings`, from their files.
pub fn options(settings: &ClusterSettings) -> Result<EtcdOptions, String> {
    let https = settings.etcd.iter().any(|e| e.starts_with("https://"));
    let tls = if https {
        let t = settings.etcd_tls.as_ref();
        let ca = match t.and_then(|t| t.ca_file.as_ref()) {
            Some(p) => Some(load_ca_file(p).map_err(|e| format!("cluster.etcdTls.caFile: {e}"))?),
            None => None,
        };
        let pair = match t.and_then(|t| t.client.as_ref()) {
            Some(files) => Some(client_pair(files)?),
            None => None,
        };
        Some(client_config(ca, pair).map_err(|e| format!("cluster.etcdTls: {e}"))?)
    } else {
        None
    };
    let credentials = match &settings.etcd_auth {
        Some(a) => Some(credentials(a)?),
        None => None,
    };
    Ok(EtcdOptions { tls, credentials })
}

/// The client certificate and its key, checked to belong together.
fn client_pair(files: &CertFiles) -> Result<Arc<CertifiedKey>, String> {
    let read = |field: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            format!(
                "cluster.etcdTls.{field}: cannot read {}: {e}",
                path.display()
            )
        })
    };
    let cert = read("certFile", &files.cert_file)?;
    let key = read("keyFile", &files.key_file)?;
    parse_pair(&cert, &key).map_err(|e| match e {
        PairError::Cert(m) => format!(
            "cluster.etcdTls.certFile: {}: {m}",
            files.cert_file.display()
        ),
        PairError::Key(m) => format!("cluster.etcdTls.keyFile: {}: {m}", files.key_file.display()),
    })
}

/// The user and the password from its file (trailing line breaks are not part of it).
fn credentials(a: &EtcdAuth) -> Result<Credentials, String> {
    let path = &a.password_file;
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cluster.etcdAuth.passwordFile: cannot read {}: {e}",
            path.display()
        )
    })?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(format!(
            "cluster.etcdAuth.passwordFile: {} holds no password",
            path.display()
        ));
    }
    Ok(Credentials::new(a.username.clone(), password))
}

/// What a failure of the first contact means for the start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The configuration is wrong: the start fails with this message (it names the
    /// field to fix).
    Fatal(String),
    /// etcd is out of reach or busy: the replica starts and keeps trying.
    Retry(String),
}

/// The first contact with etcd through `client` (the replica's `keys`): the user logs
/// in, every endpoint is read from, and a write under the prefix is checked without
/// being made. `Err` when the configuration is wrong; else what to log (endpoints out
/// of reach, authentication switched off).
pub async fn first_contact(
    client: &EtcdClient,
    settings: &ClusterSettings,
    keys: &Keys,
    member: &str,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let retry = |notes: &mut Vec<String>, m: String| {
        notes.push(format!(
            "etcd is not usable yet ({m}); the replica starts and keeps trying"
        ));
    };
    if let Some(a) = &settings.etcd_auth {
        match client.login().await {
            Ok(true) => {}
            Ok(false) => notes.push(format!(
                "cluster.etcdAuth: etcd has authentication switched off; weir logs in as {:?} once it is on",
                a.username
            )),
            // The endpoint is known when there is only one.
            Err(e) => match explain(settings, (client.endpoints().len() == 1).then_some(0), &e) {
                Verdict::Fatal(m) => return Err(m),
                Verdict::Retry(m) => {
                    retry(&mut notes, m);
                    return Ok(notes);
                }
            },
        }
    }
    let mut reached = false;
    for (idx, url) in client.endpoints().iter().enumerate() {
        match client.probe(idx, &keys.all()).await {
            Ok(()) => reached = true,
            Err(e) => match explain(settings, Some(idx), &e) {
                Verdict::Fatal(m) => return Err(m),
                Verdict::Retry(m) => {
                    // etcd serving TLS closes a plain request without an answer.
                    if url.starts_with("http://") && speaks_tls(url, client.timeout()).await {
                        return Err(format!(
                            "cluster.etcd[{idx}]: etcd at {url} serves TLS: use https:// (and cluster.etcdTls for its CA and a client certificate)"
                        ));
                    }
                    retry(&mut notes, m)
                }
            },
        }
    }
    if reached {
        // etcd checks the permission of both branches of a transaction whichever runs:
        // a put behind a guard that never holds (`version < 0`) checks writing
        // without writing.
        let key = keys.member(member);
        let never = Compare::new(key.clone(), CmpOp::Less, Target::Version(0));
        let put = Op::Put {
            key,
            value: Vec::new(),
            lease: 0,
        };
        if let Err(e) = client.txn(&[never], &[put], &[]).await {
            match explain(settings, (client.endpoints().len() == 1).then_some(0), &e) {
                Verdict::Fatal(m) => return Err(m),
                Verdict::Retry(m) => retry(&mut notes, m),
            }
        }
    }
    Ok(notes)
}

/// Whether `url` (`http://`) answers a TLS handshake: with any certificate, a refusal
/// of weir's (it has none here) or an answer, TLS is spoken there.
async fn speaks_tls(url: &str, timeout: Duration) -> bool {
    let https = url.replacen("http://", "https://", 1);
    let Ok(tls) = client_config(None, None) else {
        return false;
    };
    let opts = EtcdOptions {
        tls: Some(tls),
        credentials: None,
    };
    let Ok(c) = EtcdClient::with_options(&[https], timeout, opts) else {
        return false;
    };
    matches!(
        c.probe(0, "/").await,
        Ok(())
            | Err(EtcdError::Status { .. })
            | Err(EtcdError::Tls {
                problem: TlsProblem::ServerCertificate { .. } | TlsProblem::ClientCertificate(_),
                ..
            })
    )
}

/// What `err`, met at the first contact (at endpoint `at` when known), says about the
/// configuration.
pub fn explain(settings: &ClusterSettings, at: Option<usize>, err: &EtcdError) -> Verdict {
    let tls = settings.etcd_tls.as_ref();
    let ca = tls.and_then(|t| t.ca_file.as_ref());
    let cert = tls.and_then(|t| t.client.as_ref()).map(|c| &c.cert_file);
    let endpoint_field = |endpoint: &str| {
        let i = settings
            .etcd
            .iter()
            .position(|e| e == endpoint)
            .or(at)
            .unwrap_or(0);
        format!("cluster.etcd[{i}]")
    };
    let at_endpoint = at
        .and_then(|i| settings.etcd.get(i))
        .map_or_else(|| "etcd".to_string(), |e| format!("etcd at {e}"));
    let user = settings.etcd_auth.as_ref().map(|a| a.username.as_str());
    let prefix = Keys::new(&settings.prefix).all();
    Verdict::Fatal(match err {
        EtcdError::Unavailable(m) => return Verdict::Retry(m.clone()),
        EtcdError::Tls { endpoint, problem } => match problem {
            TlsProblem::ServerCertificate { kind, .. }
                if kind == "UnknownIssuer" || kind == "BadSignature" =>
            {
                match ca {
                    Some(ca) => format!(
                        "cluster.etcdTls.caFile: etcd at {endpoint} presented a certificate not signed by {} ({kind})",
                        ca.display()
                    ),
                    None => format!(
                        "cluster.etcdTls.caFile: etcd at {endpoint} presented a certificate not signed by any of the Mozilla roots trusted without a caFile ({kind}): set caFile to the CA of etcd's certificate"
                    ),
                }
            }
            TlsProblem::ServerCertificate { kind, detail } if kind == "NotValidForName" => format!(
                "{}: etcd at {endpoint} presented a certificate for another name ({detail}): use a host name or address its certificate lists",
                endpoint_field(endpoint)
            ),
            TlsProblem::ServerCertificate { kind, detail } => format!(
                "{}: etcd at {endpoint} presented a certificate that cannot be accepted ({kind}: {detail})",
                endpoint_field(endpoint)
            ),
            TlsProblem::ClientCertificate(alert) => match cert {
                None => format!(
                    "cluster.etcdTls.certFile: etcd at {endpoint} requires a client certificate (alert {alert}): set certFile and keyFile"
                ),
                Some(cert) => format!(
                    "cluster.etcdTls.certFile: etcd at {endpoint} refused the client certificate {} (alert {alert}): it must be signed by a CA of etcd's --trusted-ca-file",
                    cert.display()
                ),
            },
            TlsProblem::Handshake(e) => format!(
                "{}: TLS with etcd at {endpoint} failed ({e}): does it serve https:// on this port?",
                endpoint_field(endpoint)
            ),
        },
        EtcdError::AuthFailed { user, message } => {
            format!("cluster.etcdAuth: etcd refused user {user:?}: {message}")
        }
        EtcdError::Status { message, .. } if message.contains("CommonName of client") => format!(
            "cluster.etcdTls.certFile: {at_endpoint} refuses requests to its JSON gateway from a client certificate with a Common Name while its authentication is on: issue {} without a CN (weir logs in with cluster.etcdAuth)",
            cert.map_or_else(|| "the certificate".into(), |c| c.display().to_string())
        ),
        EtcdError::Status { message, .. } if message.contains("user name is empty") => format!(
            "cluster.etcdAuth: {at_endpoint} has authentication switched on and weir logs in as no one ({message}): set cluster.etcdAuth"
        ),
        EtcdError::Status { code, message, .. }
            if *code == 7 || message.contains("permission denied") =>
        {
            match user {
                Some(user) => format!(
                    "cluster.etcdAuth: user {user:?} may not read and write under {prefix} ({message}): grant it a role with readwrite permission on the keys with prefix {prefix}"
                ),
                None => format!(
                    "cluster.etcdAuth: {at_endpoint} refused to let weir read under {prefix} without a user ({message}): set cluster.etcdAuth to a user whose role may read and write the prefix"
                ),
            }
        }
        EtcdError::Status { http: 404, .. } => format!(
            "{}: {at_endpoint} has no etcd v3 JSON gateway (HTTP 404 for /v3/kv/range): weir needs etcd 3.4 or later",
            endpoint_field("")
        ),
        other => return Verdict::Retry(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Algorithm, Replicas};
    use crate::config::cluster::EtcdTls;
    use std::path::PathBuf;

    fn settings(tls: Option<EtcdTls>, auth: bool) -> ClusterSettings {
        ClusterSettings {
            etcd: vec![
                "https://10.0.0.5:2379".into(),
                "https://10.0.0.6:2379".into(),
            ],
            prefix: "/weir".into(),
            replicas: Replicas::Auto,
            heartbeat: Duration::from_secs(1),
            algorithm: Algorithm::RoundRobin,
            name: None,
            api_url: None,
            etcd_tls: tls,
            etcd_auth: auth.then(|| EtcdAuth {
                username: "weir".into(),
                password_file: PathBuf::from("/run/secrets/pw"),
            }),
            peer_token: None,
            peer_allow: crate::config::cluster::default_peer_allow(),
            ack_timeout: crate::config::cluster::DEFAULT_ACK_TIMEOUT,
        }
    }

    fn full_tls() -> Option<EtcdTls> {
        Some(EtcdTls {
            ca_file: Some(PathBuf::from("certs/ca.pem")),
            client: Some(CertFiles {
                cert_file: PathBuf::from("certs/weir.pem"),
                key_file: PathBuf::from("certs/weir-key.pem"),
            }),
        })
    }

    fn tls_err(endpoint: &str, problem: TlsProblem) -> EtcdError {
        EtcdError::Tls {
            endpoint: endpoint.into(),
            problem,
        }
    }

    fn fatal(v: Verdict) -> String {
        match v {
            Verdict::Fatal(m) => m,
            Verdict::Retry(m) => panic!("expected a fatal verdict, got retry: {m}"),
        }
    }

    #[test]
    fn certificate_problems_name_the_field_to_fix() {
        let unknown = tls_err(
            "https://10.0.0.6:2379",
            TlsProblem::ServerCertificate {
                kind: "UnknownIssuer".into(),
                detail: "invalid peer certificate: UnknownIssuer".into(),
            },
        );
        assert_eq!(
            fatal(explain(&settings(full_tls(), false), Some(1), &unknown)),
            "cluster.etcdTls.caFile: etcd at https://10.0.0.6:2379 presented a certificate not signed by certs/ca.pem (UnknownIssuer)"
        );
        let m = fatal(explain(&settings(None, false), Some(1), &unknown));
        assert!(
            m.starts_with("cluster.etcdTls.caFile:") && m.contains("Mozilla roots"),
            "{m}"
        );

        let name = tls_err(
            "https://10.0.0.6:2379",
            TlsProblem::ServerCertificate {
                kind: "NotValidForName".into(),
                detail: "certificate not valid for name".into(),
            },
        );
        let m = fatal(explain(&settings(full_tls(), false), None, &name));
        assert!(
            m.starts_with("cluster.etcd[1]: "),
            "the endpoint's own index: {m}"
        );

        let required = tls_err(
            "https://10.0.0.5:2379",
            TlsProblem::ClientCertificate("CertificateRequired".into()),
        );
        let m = fatal(explain(&settings(None, false), Some(0), &required));
        assert!(
            m.starts_with("cluster.etcdTls.certFile: etcd at https://10.0.0.5:2379 requires a client certificate"),
            "{m}"
        );
        let m = fatal(explain(&settings(full_tls(), false), Some(0), &required));
        assert!(
            m.contains("refused the client certificate certs/weir.pem"),
            "{m}"
        );
        let gateway = EtcdError::Status {
            http: 400,
            code: 0,
            message: "CommonName of client sending a request against gateway will be ignored and not used as expected".into(),
        };
        let m = fatal(explain(&settings(full_tls(), true), Some(0), &gateway));
        assert!(
            m.starts_with("cluster.etcdTls.certFile: etcd at https://10.0.0.5:2379 refuses"),
            "{m}"
        );
        assert!(m.contains("certs/weir.pem without a CN"), "{m}");
    }

    #[test]
    fn user_problems_name_etcd_auth() {
        let refused = EtcdError::AuthFailed {
            user: "weir".into(),
            message: "authentication failed, invalid user ID or password".into(),
        };
        assert_eq!(
            fatal(explain(&settings(None, true), None, &refused)),
            "cluster.etcdAuth: etcd refused user \"weir\": authentication failed, invalid user ID or password"
        );
        let denied = EtcdError::Status {
            http: 403,
            code: 7,
            message: "etcdserver: permission denied".into(),
        };
        let m = fatal(explain(&settings(None, true), Some(0), &denied));
        assert!(
            m.starts_with("cluster.etcdAuth: user \"weir\" may not read and write under /weir/"),
            "{m}"
        );
        let nobody = EtcdError::Status {
            http: 400,
            code: 3,
            message: "etcdserver: user name is empty".into(),
        };
        let m = fatal(explain(&settings(None, false), Some(0), &nobody));
        assert!(
            m.starts_with(
                "cluster.etcdAuth: etcd at https://10.0.0.5:2379 has authentication switched on"
            ),
            "{m}"
        );
    }

    #[test]
    fn etcd_out_of_reach_or_busy_is_not_fatal() {
        let s = settings(full_tls(), true);
        for e in [
            EtcdError::Unavailable("https://10.0.0.5:2379: connection refused".into()),
            EtcdError::Status {
                http: 503,
                code: 14,
                message: "etcdserver: no leader".into(),
            },
        ] {
            assert!(matches!(explain(&s, Some(0), &e), Verdict::Retry(_)), "{e}");
        }
    }

    #[test]
    fn files_are_read_with_their_field_and_path() {
        let dir = std::env::temp_dir().join(format!("weir-etcd-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = settings(
            Some(EtcdTls {
                ca_file: Some(dir.join("missing-ca.pem")),
                client: None,
            }),
            false,
        );
        let e = options(&s).expect_err("no CA file");
        assert!(e.starts_with("cluster.etcdTls.caFile: cannot read "), "{e}");
        assert!(e.contains("missing-ca.pem"), "{e}");

        let ck = rcgen::generate_simple_self_signed(vec!["weir".to_string()]).unwrap();
        std::fs::write(dir.join("c.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.join("k.pem"), "not a key").unwrap();
        s.etcd_tls = Some(EtcdTls {
            ca_file: None,
            client: Some(CertFiles {
                cert_file: dir.join("c.pem"),
                key_file: dir.join("k.pem"),
            }),
        });
        let e = options(&s).expect_err("bad key");
        assert!(e.starts_with("cluster.etcdTls.keyFile: "), "{e}");
        assert!(e.contains("k.pem"), "{e}");
        std::fs::write(dir.join("k.pem"), ck.signing_key.serialize_pem()).unwrap();
        let o = options(&s).expect("a good pair");
        assert!(o.tls.is_some() && o.credentials.is_none());

        s.etcd_auth = Some(EtcdAuth {
            username: "weir".into(),
            password_file: dir.join("pw"),
        });
        std::fs::write(dir.join("pw"), "s3cret pass\r\n\n").unwrap();
        let o = options(&s).expect("password");
        assert_eq!(
            o.credentials,
            Some(Credentials::new("weir", "s3cret pass")),
            "trailing line breaks trimmed, inner spaces kept"
        );
        std::fs::write(dir.join("pw"), "\n").unwrap();
        let e = options(&s).expect_err("empty");
        assert!(
            e.starts_with("cluster.etcdAuth.passwordFile: ") && e.contains("no password"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
