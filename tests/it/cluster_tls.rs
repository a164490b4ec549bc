//! Fleet coordination with etcd over TLS and as an etcd user, against a REAL etcd
//! (`support::etcd`: Debian `etcd-server` on free loopback ports, `--client-cert-auth`
//! with a test CA made by rcgen). Without `etcd` on PATH every test prints one skip line
//! and passes (CI fails there instead).
//!
//! - replicas with etcd's CA and a client certificate share the canaries, and ownership
//!   moves when one leaves (the watch over TLS);
//! - a missing or foreign client certificate, an unknown CA, `http://` to a TLS port:
//!   `Cluster::join` fails with the field to fix, before any task starts;
//! - etcd users: the right password works, JWT tokens that expire every 2 s are renewed
//!   without a missed heartbeat, the watch included; a wrong password, a read-only user,
//!   no user, a client certificate with a Common Name: clear errors;
//! - the real binary: `weir check` on the block, `weir serve` refusing to start against
//!   an etcd it cannot trust, and starting (ready) against one it can.
//!
//! Time: a 500 ms heartbeat (lease TTL 2 s). Waits are bounded polls: the protocol's own
//! deadline plus a stated slack for a loaded 2-core CI machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::support::etcd::{free_port, Etcd, Pki};
use weir::cluster::etcd::{Credentials, EtcdClient, EtcdOptions};
use weir::cluster::{Algorithm, Cluster, ClusterOptions, ClusterSettings, Replicas};
use weir::config::cluster::{EtcdAuth, EtcdTls};
use weir::config::CertFiles;

const HEARTBEAT: Duration = Duration::from_millis(500);
/// 3 × heartbeat rounded up to whole seconds.
const TTL: Duration = Duration::from_secs(2);
/// Slack added to protocol deadlines for a loaded CI machine.
const SLACK: Duration = Duration::from_secs(8);
const POLL: Duration = Duration::from_millis(50);
/// Lifetime of etcd's JWT auth tokens in the user tests: several expire during a test.
const TOKEN_TTL: Duration = Duration::from_secs(2);
const PREFIX: &str = "/weir-tls";

// ------------------------------------------------------------------ fixtures

/// etcd's CA and, unless `None`, a client certificate (file stems of the PKI).
fn tls(etcd: &Etcd, ca: Option<&str>, client: Option<&str>) -> EtcdTls {
    EtcdTls {
        ca_file: ca.map(|c| etcd.pki_path(&format!("{c}.pem"))),
        client: client.map(|c| CertFiles {
            cert_file: etcd.pki_path(&format!("{c}.pem")),
            key_file: etcd.pki_path(&format!("{c}-key.pem")),
        }),
    }
}

fn settings(etcd: &Etcd, tls: Option<EtcdTls>, auth: Option<EtcdAuth>) -> ClusterSettings {
    ClusterSettings {
        etcd: vec![etcd.url()],
        prefix: PREFIX.into(),
        replicas: Replicas::Auto,
        heartbeat: HEARTBEAT,
        algorithm: Algorithm::RoundRobin,
        name: None,
        api_url: None,
        etcd_tls: tls,
        etcd_auth: auth,
        peer_token: None,
        peer_allow: weir::config::cluster::default_peer_allow(),
        ack_timeout: weir::config::cluster::DEFAULT_ACK_TIMEOUT,
    }
}

/// A password file (with the trailing newline an editor leaves).
fn password_file(dir: &std::path::Path, name: &str, password: &str) -> PathBuf {
    let p = dir.join(format!("{name}.password"));
    std::fs::write(&p, format!("{password}\n")).unwrap();
    p
}

fn canaries() -> Vec<String> {
    ["api", "app", "auth", "checkout", "search", "web"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

async fn join(s: &ClusterSettings, name: &str) -> Result<Cluster, String> {
    Cluster::join(ClusterOptions {
        settings: s.clone(),
        name: name.into(),
        api_url: format!("http://{name}.invalid:9901"),
        canaries: canaries(),
    })
    .await
}

/// Who may drive each canary now, by replica name.
fn drivers(replicas: &[&Cluster]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> =
        canaries().into_iter().map(|c| (c, Vec::new())).collect();
    for r in replicas {
        for (c, d) in out.iter_mut() {
            if r.may_drive(c) {
                d.push(r.name().to_string());
            }
        }
    }
    out
}

/// Every canary driven by exactly one replica, and `shards` shards held.
fn settled(replicas: &[&Cluster], shards: usize) -> bool {
    drivers(replicas).values().all(|d| d.len() == 1)
        && replicas.iter().all(|r| {
            r.status()
                .shards
                .iter()
                .filter(|s| s.replica.is_some())
                .count()
                == shards
        })
}

/// Polls `cond` every 50 ms for at most `bound`; false if it never held.
async fn eventually(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let polls = (bound.as_millis() / POLL.as_millis()).max(1);
    for _ in 0..polls {
        if cond() {
            return true;
        }
        tokio::time::sleep(POLL).await;
    }
    cond()
}

/// The error of a join that must fail.
async fn refused(s: &ClusterSettings) -> String {
    match join(s, "refused").await {
        Ok(c) => {
            c.halt();
            panic!("the replica joined: {s:?}");
        }
        Err(e) => e,
    }
}

// ------------------------------------------------------------------ TLS

/// Three replicas trusting etcd's CA and presenting a client certificate: every canary
/// is driven by exactly one of them; one leaves and its canaries move (the watch and
/// every call over TLS); etcd's owner keys agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_the_ca_and_a_client_certificate_share_the_canaries() {
    let pki = Pki::new();
    let Some(etcd) = Etcd::start_with(
        "replicas_with_the_ca_and_a_client_certificate_share_the_canaries",
        Some(pki),
        &[],
    )
    .await
    else {
        return;
    };
    let s = settings(&etcd, Some(tls(&etcd, Some("ca"), Some("client"))), None);
    let a = join(&s, "a").await.expect("a joins");
    let b = join(&s, "b").await.expect("b joins");
    let c = join(&s, "c").await.expect("c joins");
    assert!(
        eventually(TTL + SLACK, || settled(&[&a, &b, &c], 3)).await,
        "{:?}",
        drivers(&[&a, &b, &c])
    );
    let admin = etcd.client(Duration::from_secs(2));
    let (owners, _) = admin
        .range(&format!("{PREFIX}/owners/"), true)
        .await
        .expect("owner keys over TLS");
    assert_eq!(owners.len(), 6, "one owner key per canary");

    b.shutdown().await;
    assert!(
        eventually(TTL + SLACK, || settled(&[&a, &c], 2)).await,
        "{:?}",
        drivers(&[&a, &c])
    );
    for r in [&a, &c] {
        assert!(r.has_valid_lease());
        assert_eq!(r.token_renewals(), 0, "no user, no token");
        r.shutdown().await;
    }
}

/// What etcd refuses at the TLS level ends `Cluster::join` with the field to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_foreign_certificate_and_an_unknown_ca_are_clear_errors() {
    let pki = Pki::new();
    let Some(etcd) = Etcd::start_with(
        "a_missing_or_foreign_certificate_and_an_unknown_ca_are_clear_errors",
        Some(pki),
        &[],
    )
    .await
    else {
        return;
    };
    let url = etcd.url();

    let e = refused(&settings(&etcd, Some(tls(&etcd, Some("ca"), None)), None)).await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcdTls.certFile: etcd at {url} requires a client certificate (alert "
        )),
        "{e}"
    );
    assert!(e.ends_with("): set certFile and keyFile"), "{e}");

    let e = refused(&settings(
        &etcd,
        Some(tls(&etcd, Some("ca"), Some("other-client"))),
        None,
    ))
    .await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcdTls.certFile: etcd at {url} refused the client certificate {} (alert ",
            etcd.pki_path("other-client.pem").display()
        )),
        "{e}"
    );

    let e = refused(&settings(
        &etcd,
        Some(tls(&etcd, Some("other-ca"), Some("client"))),
        None,
    ))
    .await;
    assert_eq!(
        e,
        format!(
            "cluster.etcdTls.caFile: etcd at {url} presented a certificate not signed by {} (UnknownIssuer)",
            etcd.pki_path("other-ca.pem").display()
        )
    );

    let e = refused(&settings(&etcd, None, None)).await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcdTls.caFile: etcd at {url} presented a certificate not signed by any of the Mozilla roots"
        )),
        "{e}"
    );

    let mut plain = settings(&etcd, None, None);
    plain.etcd = vec![url.replace("https://", "http://")];
    let e = refused(&plain).await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcd[0]: etcd at {} serves TLS: use https://",
            plain.etcd[0]
        )),
        "{e}"
    );
}

// ------------------------------------------------------------------ users

/// etcd over TLS with client certificates, authentication on, JWT tokens living
/// [`TOKEN_TTL`]: users `weir` (may write under the prefix) and `reader` (may only read).
async fn etcd_with_users(test: &str, pki: Arc<Pki>) -> Option<Etcd> {
    let jwt = format!(
        "jwt,pub-key={},priv-key={},sign-method=ES256,ttl={}s",
        pki.path("jwt.pub.pem").display(),
        pki.path("jwt.pem").display(),
        TOKEN_TTL.as_secs()
    );
    let etcd = Etcd::start_with(test, Some(pki), &["--auth-token", &jwt]).await?;
    etcd.enable_auth(&[
        ("weir", "weir password", &format!("{PREFIX}/"), true),
        ("reader", "reader password", &format!("{PREFIX}/"), false),
    ])
    .await;
    Some(etcd)
}

fn auth(user: &str, password_file: PathBuf) -> Option<EtcdAuth> {
    Some(EtcdAuth {
        username: user.into(),
        password_file,
    })
}

/// The right password works for every call and the watch; tokens expire every
/// [`TOKEN_TTL`] and are renewed without a heartbeat missed (no lease lost, no etcd
/// error event); ownership moves when a replica leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_logs_in_and_renews_expired_tokens_without_missing_a_heartbeat() {
    let pki = Pki::new();
    let Some(etcd) = etcd_with_users(
        "a_user_logs_in_and_renews_expired_tokens_without_missing_a_heartbeat",
        pki.clone(),
    )
    .await
    else {
        return;
    };
    let pw = password_file(&pki.dir, "weir", "weir password");
    let s = settings(
        &etcd,
        Some(tls(&etcd, Some("ca"), Some("client"))),
        auth("weir", pw),
    );
    let a = join(&s, "a").await.expect("a joins");
    let b = join(&s, "b").await.expect("b joins");
    assert!(
        eventually(TTL + SLACK, || settled(&[&a, &b], 2)).await,
        "{:?}",
        drivers(&[&a, &b])
    );
    // Every token lives 2 s whatever its use: within two lifetimes (plus slack) each
    // replica has had one refused and renewed.
    assert!(
        eventually(2 * TOKEN_TTL + SLACK, || a.token_renewals() >= 2
            && b.token_renewals() >= 2)
        .await,
        "renewals: a {} b {}",
        a.token_renewals(),
        b.token_renewals()
    );
    for r in [&a, &b] {
        assert!(r.has_valid_lease(), "{} kept its lease", r.name());
        let trouble: Vec<_> = r
            .event_log()
            .into_iter()
            .filter(|e| matches!(e.kind.as_str(), "EtcdUnavailable" | "LeaseExpired"))
            .collect();
        assert!(trouble.is_empty(), "{}: {trouble:?}", r.name());
    }
    assert!(settled(&[&a, &b], 2), "{:?}", drivers(&[&a, &b]));

    b.shutdown().await;
    assert!(
        eventually(TTL + SLACK, || settled(&[&a], 1)).await,
        "{:?}",
        drivers(&[&a])
    );
    a.shutdown().await;
}

/// The watch as a user: created with a token that expired meanwhile, it is refused,
/// asked for again with a new token, and sees a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_an_expired_token_is_renewed_and_sees_changes() {
    let pki = Pki::new();
    let Some(etcd) = etcd_with_users(
        "a_watch_with_an_expired_token_is_renewed_and_sees_changes",
        pki.clone(),
    )
    .await
    else {
        return;
    };
    let client = EtcdClient::with_options(
        &[etcd.url()],
        Duration::from_secs(2),
        EtcdOptions {
            credentials: Some(Credentials::new("weir", "weir password")),
            ..pki.client_options()
        },
    )
    .expect("client");
    assert_eq!(client.login().await, Ok(true));
    // Setting up the condition under test (a held token past its lifetime), not
    // waiting for an outcome: nothing uses the client meanwhile.
    tokio::time::sleep(TOKEN_TTL + Duration::from_secs(1)).await;
    let mut watch = client
        .watch(&format!("{PREFIX}/"), 0)
        .await
        .expect("the watch is created with a new token");
    assert_eq!(client.token_renewals(), 1);
    client
        .put(&format!("{PREFIX}/k"), b"v", 0)
        .await
        .expect("put");
    let events = tokio::time::timeout(SLACK, watch.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kv.key, format!("{PREFIX}/k"));
    assert_eq!(events[0].kv.value, b"v");
}

/// What etcd refuses about the user ends `Cluster::join` with the field to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_a_read_only_user_no_user_and_a_named_certificate_are_clear_errors() {
    let pki = Pki::new();
    let Some(etcd) = etcd_with_users(
        "a_wrong_password_a_read_only_user_no_user_and_a_named_certificate_are_clear_errors",
        pki.clone(),
    )
    .await
    else {
        return;
    };
    let url = etcd.url();
    let with_tls = |auth| settings(&etcd, Some(tls(&etcd, Some("ca"), Some("client"))), auth);

    let wrong = password_file(&pki.dir, "wrong", "not the password");
    assert_eq!(
        refused(&with_tls(auth("weir", wrong))).await,
        "cluster.etcdAuth: etcd refused user \"weir\": authentication failed, invalid user ID or password"
    );

    let reader = password_file(&pki.dir, "reader", "reader password");
    let e = refused(&with_tls(auth("reader", reader))).await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcdAuth: user \"reader\" may not read and write under {PREFIX}/ (etcdserver: permission denied)"
        )),
        "{e}"
    );

    // Not "permission denied" for the Common Name of the server certificate etcd's
    // gateway dials etcd with (etcd-test-server): weir's requests say they come
    // through the gateway (`Accept`), so etcd ignores that name.
    let e = refused(&with_tls(None)).await;
    assert_eq!(
        e,
        format!(
            "cluster.etcdAuth: etcd at {url} has authentication switched on and weir logs in as no one (etcdserver: user name is empty): set cluster.etcdAuth"
        )
    );

    let right = password_file(&pki.dir, "weir", "weir password");
    let e = refused(&settings(
        &etcd,
        Some(tls(&etcd, Some("ca"), Some("cn-client"))),
        auth("weir", right),
    ))
    .await;
    assert!(
        e.starts_with(&format!(
            "cluster.etcdTls.certFile: etcd at {url} refuses requests to its JSON gateway from a client certificate with a Common Name"
        )),
        "{e}"
    );
}

// ------------------------------------------------------------------ the binary

/// `weir <args>` in `dir`.
fn weir(dir: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    c.current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    c
}

/// A config with a `cluster:` block on this etcd (`tls_block` under `cluster:`, two
/// spaces deep), its admin API on `admin`.
fn fleet_yaml(etcd: &Etcd, admin: u16, tls_block: &str) -> String {
    format!(
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:{admin}\n\
         backends:\n  app:\n    endpoints: [\"127.0.0.1:9\"]\nroutes:\n  - name: app\n    primary: app\n\
         cluster:\n  etcd: [\"{}\"]\n  prefix: {PREFIX}\n  heartbeat: 500ms\n  name: bin\n{tls_block}",
        etcd.url()
    )
}

/// `weir check` takes the block and names a wrong field; `weir serve` exits at once
/// with the field to fix when etcd's certificate is not signed by `caFile`, and starts
/// (ready: it holds a lease) when it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_checks_the_block_and_refuses_to_serve_an_untrusted_etcd() {
    let pki = Pki::new();
    let Some(etcd) = Etcd::start_with(
        "the_binary_checks_the_block_and_refuses_to_serve_an_untrusted_etcd",
        Some(pki.clone()),
        &[],
    )
    .await
    else {
        return;
    };
    let dir = &pki.dir;
    let good_tls =
        "  etcdTls:\n    caFile: ca.pem\n    certFile: client.pem\n    keyFile: client-key.pem\n";
    // An absolute path: the files it names resolve against its directory.
    let config_path = dir.join("weir.yaml");
    let config = config_path.to_str().unwrap();
    let write = |yaml: &str| std::fs::write(&config_path, yaml).unwrap();

    write(&fleet_yaml(&etcd, free_port(), good_tls));
    let out = weir(dir, &["check", "-c", config]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    write(&fleet_yaml(
        &etcd,
        free_port(),
        "  etcdTls:\n    caFile: ca.pem\n    certFile: client.pem\n",
    ));
    let out = weir(dir, &["check", "-c", config]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cluster.etcdTls.keyFile: required with certFile"),
        "{stderr}"
    );

    // An untrusted etcd: the process ends by itself, naming the field.
    write(&fleet_yaml(
        &etcd,
        free_port(),
        &good_tls.replace("ca.pem", "other-ca.pem"),
    ));
    let mut child = weir(dir, &["serve", "-c", config]).spawn().unwrap();
    let mut exited = None;
    for _ in 0..(SLACK.as_millis() * 2 / POLL.as_millis()) {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let Some(status) = exited else {
        let _ = child.kill();
        panic!("weir serve kept running against an untrusted etcd");
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "cluster.etcdTls.caFile: etcd at {} presented a certificate not signed by {} (UnknownIssuer)",
            etcd.url(),
            dir.join("other-ca.pem").display()
        )),
        "{stderr}"
    );

    // A trusted one: it serves, and turns ready once it holds a lease.
    let admin = free_port();
    write(&fleet_yaml(&etcd, admin, good_tls));
    let mut child = weir(dir, &["serve", "-c", config]).spawn().unwrap();
    let readyz = format!("http://127.0.0.1:{admin}/readyz");
    let mut ready = false;
    for _ in 0..((TTL + SLACK).as_millis() / POLL.as_millis()) {
        let url = readyz.clone();
        let status =
            tokio::task::spawn_blocking(move || weir::probe::status(&url, Duration::from_secs(1)))
                .await
                .unwrap();
        if status == Ok(200) {
            ready = true;
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ready,
        "weir serve never turned ready: {}",
        std::io::read_to_string(child.stderr.take().unwrap()).unwrap_or_default()
    );
}
