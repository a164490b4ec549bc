//! PURE: how a replica talks to etcd safely — `cluster.etcdTls` (the CA that
//! signed etcd's certificate, weir's client certificate) and `cluster.etcdAuth`
//! (an etcd v3 user), validated against the endpoints' schemes.
//!
//! Only shapes are checked here and paths resolved against the config file's
//! directory; the files are read when the replica joins the fleet, so a bad
//! file is reported then, naming its field and path.

use std::path::{Path, PathBuf};

use super::raw::{RawEtcdAuth, RawEtcdTls};
use super::CertFiles;

/// `cluster.etcdTls`, paths resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM CA certificates etcd's server certificate must chain to; `None`: the
    /// Mozilla roots (`webpki-roots`).
    pub ca_file: Option<PathBuf>,
    /// weir's client certificate and its key, for etcd's `--client-cert-auth`;
    /// `None`: no client certificate is offered.
    pub client: Option<CertFiles>,
}

/// `cluster.etcdAuth`: the etcd v3 user weir authenticates as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdAuth {
    /// The user name.
    pub username: String,
    /// The file holding the password, resolved (read at start; a trailing
    /// newline is not part of the password).
    pub password_file: PathBuf,
}

/// The scheme of an endpoint URL (`http`, `https`), if it has one.
fn scheme(url: &str) -> Option<&str> {
    url.split_once("://").map(|(s, _)| s)
}

/// Checks `etcdTls` and `etcdAuth`; every problem is pushed as (path under
/// `cluster.`, reason). `etcd` are the endpoint URLs as written (their own
/// shape is checked by the caller).
pub(super) fn validate_security(
    etcd: &[String],
    tls: Option<&RawEtcdTls>,
    auth: Option<&RawEtcdAuth>,
    base: &Path,
    push: &mut impl FnMut(&str, String),
) -> (Option<EtcdTls>, Option<EtcdAuth>) {
    let https = etcd.iter().filter(|e| scheme(e) == Some("https")).count();
    let http = etcd.iter().filter(|e| scheme(e) == Some("http")).count();
    if https > 0 && http > 0 {
        push(
            "etcd",
            format!(
                "mixes http:// ({http}) and https:// ({https}) endpoints: the members of one etcd cluster serve clients one way, so list them all with the same scheme"
            ),
        );
    }
    let tls = tls.map(|t| {
        if http > 0 && https == 0 {
            push(
                "etcdTls",
                "applies to https:// endpoints only, and cluster.etcd lists only http:// ones: use https:// URLs (etcd started with --cert-file) or remove etcdTls".into(),
            );
        }
        let mut file = |field: &str, v: &Option<String>| -> Option<PathBuf> {
            match v.as_deref() {
                Some(f) if f.trim().is_empty() => {
                    push(&format!("etcdTls.{field}"), "must not be empty".into());
                    None
                }
                Some(f) => Some(base.join(f)),
                None => None,
            }
        };
        let ca_file = file("caFile", &t.ca_file);
        let cert = file("certFile", &t.cert_file);
        let key = file("keyFile", &t.key_file);
        match (&t.cert_file, &t.key_file) {
            (Some(_), None) => push(
                "etcdTls.keyFile",
                "required with certFile: the client certificate's private key".into(),
            ),
            (None, Some(_)) => push(
                "etcdTls.certFile",
                "required with keyFile: the client certificate that goes with the key".into(),
            ),
            _ => {}
        }
        EtcdTls {
            ca_file,
            client: cert
                .zip(key)
                .map(|(cert_file, key_file)| CertFiles { cert_file, key_file }),
        }
    });
    let auth = auth.map(|a| {
        if a.username.trim().is_empty() {
            push(
                "etcdAuth.username",
                "required: the etcd user weir logs in as".into(),
            );
        } else if a.username.chars().any(char::is_control) {
            push(
                "etcdAuth.username",
                "must not contain control characters".into(),
            );
        }
        if a.password_file.trim().is_empty() {
            push(
                "etcdAuth.passwordFile",
                "required: a file holding the user's password (kept out of the config)".into(),
            );
        }
        EtcdAuth {
            username: a.username.clone(),
            password_file: base.join(&a.password_file),
        }
    });
    (tls, auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        etcd: &[&str],
        tls: Option<RawEtcdTls>,
        auth: Option<RawEtcdAuth>,
    ) -> (Option<EtcdTls>, Option<EtcdAuth>, Vec<(String, String)>) {
        let etcd: Vec<String> = etcd.iter().map(|s| s.to_string()).collect();
        let mut errs = Vec::new();
        let (t, a) = validate_security(
            &etcd,
            tls.as_ref(),
            auth.as_ref(),
            Path::new("/etc/weir"),
            &mut |p: &str, r: String| errs.push((p.to_string(), r)),
        );
        (t, a, errs)
    }

    fn tls(ca: Option<&str>, cert: Option<&str>, key: Option<&str>) -> RawEtcdTls {
        RawEtcdTls {
            ca_file: ca.map(str::to_string),
            cert_file: cert.map(str::to_string),
            key_file: key.map(str::to_string),
        }
    }

    #[test]
    fn full_tls_and_auth_resolve_against_the_config_directory() {
        let (t, a, errs) = check(
            &["https://10.0.0.5:2379", "https://10.0.0.6:2379"],
            Some(tls(
                Some("certs/ca.pem"),
                Some("certs/weir.pem"),
                Some("/abs/weir-key.pem"),
            )),
            Some(RawEtcdAuth {
                username: "weir".into(),
                password_file: "secrets/etcd-password".into(),
            }),
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            t,
            Some(EtcdTls {
                ca_file: Some(PathBuf::from("/etc/weir/certs/ca.pem")),
                client: Some(CertFiles {
                    cert_file: PathBuf::from("/etc/weir/certs/weir.pem"),
                    key_file: PathBuf::from("/abs/weir-key.pem"),
                }),
            })
        );
        assert_eq!(
            a,
            Some(EtcdAuth {
                username: "weir".into(),
                password_file: PathBuf::from("/etc/weir/secrets/etcd-password"),
            })
        );
    }

    #[test]
    fn https_alone_needs_no_block_and_a_ca_alone_is_enough() {
        let (t, a, errs) = check(&["https://e:2379"], None, None);
        assert!(errs.is_empty() && t.is_none() && a.is_none());
        let (t, _, errs) = check(
            &["https://e:2379"],
            Some(tls(Some("ca.pem"), None, None)),
            None,
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(t.and_then(|t| t.client), None, "no client certificate");
    }

    #[test]
    fn a_certificate_needs_its_key_and_the_key_its_certificate() {
        let (_, _, errs) = check(
            &["https://e:2379"],
            Some(tls(None, Some("c.pem"), None)),
            None,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "etcdTls.keyFile");
        assert!(errs[0].1.contains("required with certFile"), "{errs:?}");
        let (_, _, errs) = check(
            &["https://e:2379"],
            Some(tls(None, None, Some("k.pem"))),
            None,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "etcdTls.certFile");
        let (_, _, errs) = check(&["https://e:2379"], Some(tls(Some(" "), None, None)), None);
        assert_eq!(
            errs,
            vec![("etcdTls.caFile".into(), "must not be empty".into())]
        );
    }

    #[test]
    fn tls_with_only_http_endpoints_and_mixed_schemes_are_refused() {
        let (_, _, errs) = check(
            &["http://e:2379"],
            Some(tls(Some("ca.pem"), None, None)),
            None,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "etcdTls");
        assert!(errs[0].1.contains("https:// endpoints only"), "{errs:?}");
        let (_, _, errs) = check(&["http://a:2379", "https://b:2379"], None, None);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "etcd");
        assert!(
            errs[0].1.contains("mixes http:// (1) and https:// (1)"),
            "{errs:?}"
        );
        // Mixed with a TLS block: the mix is the one problem (the block is right
        // for the https:// half).
        let (_, _, errs) = check(
            &["http://a:2379", "https://b:2379"],
            Some(tls(None, None, None)),
            None,
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
    }

    /// Through the real loader: the YAML spellings, paths relative to the file's
    /// directory, and an error located at `file:line:col` with its path.
    #[test]
    fn yaml_blocks_through_the_loader() {
        let base = "listeners:\n  - name: http\n    address: 127.0.0.1:0\ncluster:\n";
        let ok = format!(
            "{base}  etcd: [\"https://10.0.0.5:2379\"]\n  etcdTls:\n    caFile: certs/ca.pem\n    certFile: certs/weir.pem\n    keyFile: certs/weir-key.pem\n  etcdAuth: {{ username: weir, passwordFile: secrets/pw }}\n"
        );
        let cfg = crate::config::parse_yaml(&ok, "t.yaml", Path::new("/srv/weir")).expect("valid");
        let c = cfg.cluster.expect("cluster block");
        let tls = c.etcd_tls.expect("etcdTls");
        assert_eq!(tls.ca_file, Some(PathBuf::from("/srv/weir/certs/ca.pem")));
        assert_eq!(
            tls.client.map(|c| c.key_file),
            Some(PathBuf::from("/srv/weir/certs/weir-key.pem"))
        );
        assert_eq!(c.etcd_auth.map(|a| a.username).as_deref(), Some("weir"));

        let bad = format!(
            "{base}  etcd: [\"https://10.0.0.5:2379\"]\n  etcdTls:\n    certFile: certs/weir.pem\n"
        );
        let e = crate::config::parse_yaml(&bad, "t.yaml", Path::new("."))
            .expect_err("invalid")
            .to_string();
        assert!(
            e.contains("cluster.etcdTls.keyFile: required with certFile"),
            "{e}"
        );
        assert!(e.starts_with("t.yaml:"), "{e}");
        let unknown = format!(
            "{base}  etcd: [\"https://e:2379\"]\n  etcdTls: {{ caFile: a.pem, password: x }}\n"
        );
        assert!(crate::config::parse_yaml(&unknown, "t.yaml", Path::new(".")).is_err());
    }

    #[test]
    fn auth_needs_a_user_and_a_password_file_and_works_over_http_too() {
        let (_, a, errs) = check(
            &["http://e:2379"],
            None,
            Some(RawEtcdAuth {
                username: "weir".into(),
                password_file: "pw".into(),
            }),
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            a.map(|a| a.password_file),
            Some(PathBuf::from("/etc/weir/pw"))
        );
        let (_, _, errs) = check(&["https://e:2379"], None, Some(RawEtcdAuth::default()));
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, vec!["etcdAuth.username", "etcdAuth.passwordFile"]);
        let (_, _, errs) = check(
            &["https://e:2379"],
            None,
            Some(RawEtcdAuth {
                username: "we\nir".into(),
                password_file: "pw".into(),
            }),
        );
        assert_eq!(errs[0].0, "etcdAuth.username");
    }
}
