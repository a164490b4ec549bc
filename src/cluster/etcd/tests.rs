use super::*;

#[test]
fn base64_round_trips_and_vectors() {
    let vectors: &[(&[u8], &str)] = &[
        (b"", ""),
        (b"f", "Zg=="),
        (b"fo", "Zm8="),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg=="),
        (b"fooba", "Zm9vYmE="),
        (b"foobar", "Zm9vYmFy"),
        (&[0xff, 0xfe, 0x00], "//4A"),
    ];
    for (raw, enc) in vectors {
        assert_eq!(b64(raw), *enc);
        assert_eq!(unb64(enc).as_deref(), Ok(*raw));
    }
    assert_eq!(unb64("Zm8").as_deref(), Ok(&b"fo"[..]), "unpadded");
    assert_eq!(
        unb64("__4A").as_deref(),
        Ok(&[0xff, 0xfe, 0x00][..]),
        "url-safe"
    );
    assert!(unb64("Zm=9").is_err());
    assert!(unb64("Z!").is_err());
    let all: Vec<u8> = (0..=255).collect();
    assert_eq!(unb64(&b64(&all)), Ok(all));
}

#[test]
fn prefix_ends() {
    assert_eq!(prefix_end(b"/weir/"), b"/weir0".to_vec());
    assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
    assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    assert_eq!(prefix_end(b""), vec![0]);
}

#[test]
fn compare_and_op_json() {
    let c = Compare::new("/k", CmpOp::Equal, Target::Create(0));
    assert_eq!(
        c.to_json(),
        json!({"key": "L2s=", "result": "EQUAL", "target": "CREATE", "create_revision": "0"})
    );
    let c = Compare::new("/k", CmpOp::NotEqual, Target::Lease(42));
    assert_eq!(c.to_json()["lease"], json!("42"));
    assert_eq!(c.to_json()["result"], json!("NOT_EQUAL"));
    let p = Op::Put {
        key: "/k".into(),
        value: b"v".to_vec(),
        lease: 7,
    };
    assert_eq!(
        p.to_json(),
        json!({"request_put": {"key": "L2s=", "value": "dg==", "lease": "7"}})
    );
    let g = Op::Get {
        key: "/a/".into(),
        prefix: true,
    };
    assert_eq!(
        g.to_json(),
        json!({"request_range": {"key": "L2Ev", "range_end": "L2Ew"}})
    );
}

#[test]
fn answers_decode() {
    // Shapes recorded from etcd 3.4.23.
    let r: RangeJson = serde_json::from_str(
        r#"{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},
               "kvs":[{"key":"bGw=","create_revision":"4","mod_revision":"4","version":"1",
                       "value":"YmFy","lease":"2324035702370882316"}],"count":"1"}"#,
    )
    .expect("range");
    let kvs = decode_kvs(r.kvs).expect("kvs");
    assert_eq!(kvs[0].key, "ll");
    assert_eq!(kvs[0].value, b"bar");
    assert_eq!(kvs[0].lease, 2324035702370882316);
    assert_eq!(r.header.revision, 4);

    let t: TxnJson = serde_json::from_str(
        r#"{"header":{"revision":"9"},"responses":[{"response_range":{"header":{"revision":"9"},"kvs":[],"count":"0"}}]}"#,
    )
    .expect("txn");
    assert!(!t.succeeded, "an omitted `succeeded` is false");

    let k: KeepAliveJson =
        serde_json::from_str(r#"{"result":{"header":{"revision":"5"},"ID":"23"}}"#).expect("ka");
    assert_eq!(
        k.result.map(|r| r.ttl),
        Some(0),
        "an expired lease has no TTL"
    );

    let e = decode_answer::<HeaderOnly>(
        StatusCode::BAD_REQUEST,
        br#"{"error":"illegal base64 data at input byte 0","message":"illegal base64 data at input byte 0","code":3}"#,
    )
    .err();
    assert_eq!(
        e,
        Some(EtcdError::Status {
            http: 400,
            code: 3,
            message: "illegal base64 data at input byte 0".into()
        })
    );
}

#[test]
fn watch_stream_splits_messages() {
    let mut buf = BytesMut::from(
        &br#"{"result":{"header":{"revision":"9"},"created":true}}
{"result":{"header":{"revision":"10"},"events":[{"kv":{"key":"d3gx","create_revision":"10","mod_revision":"10","version":"1","value":"YmFy"}},{"type":"DELETE","kv":{"key":"d3gx","mod_revision":"11"}}]}}
{"result":{"hea"#[..],
    );
    let first = parse_one(&mut buf).expect("ok").expect("one");
    assert_eq!(watch_message(first), Ok(vec![]));
    let second = parse_one(&mut buf).expect("ok").expect("two");
    let events = watch_message(second).expect("events");
    assert_eq!(events.len(), 2);
    assert!(!events[0].deleted && events[1].deleted);
    assert_eq!(events[1].kv.key, "wx1");
    assert_eq!(events[1].kv.mod_revision, 11);
    assert_eq!(
        parse_one(&mut buf),
        Ok(None),
        "a partial message waits for more"
    );
    buf.extend_from_slice(br#"der":{},"canceled":true,"compact_revision":"3"}}"#);
    let third = parse_one(&mut buf).expect("ok").expect("three");
    assert!(watch_message(third).is_err());
}

// ------------------------------------------------------------ auth and TLS

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

fn refused() -> EtcdError {
    EtcdError::Status {
        http: 401,
        code: 16,
        message: "etcdserver: invalid auth token".into(),
    }
}

/// An etcd stand-in: tokens `t1`, `t2`, ... from `authenticate`; `valid` is the only
/// token the calls accept.
struct FakeEtcd {
    issued: AtomicU64,
    valid: Mutex<String>,
    calls: Mutex<Vec<Option<String>>>,
}

impl FakeEtcd {
    fn new() -> FakeEtcd {
        FakeEtcd {
            issued: AtomicU64::new(0),
            valid: Mutex::new("t1".into()),
            calls: Mutex::new(Vec::new()),
        }
    }

    async fn authenticate(&self) -> Result<Option<String>, EtcdError> {
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Some(format!("t{n}")))
    }

    async fn call(&self, token: Option<Arc<str>>) -> Result<&'static str, EtcdError> {
        let token = token.map(|t| t.to_string());
        self.calls.lock().unwrap().push(token.clone());
        if token.as_deref() == Some(self.valid.lock().unwrap().as_str()) {
            Ok("answer")
        } else {
            Err(refused())
        }
    }
}

#[tokio::test]
async fn a_token_is_fetched_once_then_reused() {
    let etcd = FakeEtcd::new();
    let tokens = Tokens::default();
    for _ in 0..3 {
        let r = with_token(&tokens, || etcd.authenticate(), |t| etcd.call(t)).await;
        assert_eq!(r, Ok("answer"));
    }
    assert_eq!(etcd.issued.load(Ordering::SeqCst), 1, "one authentication");
    assert_eq!(tokens.renewals(), 0);
}

#[tokio::test]
async fn a_refused_token_is_renewed_and_the_call_made_once_more() {
    let etcd = FakeEtcd::new();
    let tokens = Tokens::default();
    assert_eq!(
        with_token(&tokens, || etcd.authenticate(), |t| etcd.call(t)).await,
        Ok("answer")
    );
    // The token expires: etcd now accepts only the next one.
    *etcd.valid.lock().unwrap() = "t2".into();
    assert_eq!(
        with_token(&tokens, || etcd.authenticate(), |t| etcd.call(t)).await,
        Ok("answer")
    );
    assert_eq!(
        *etcd.calls.lock().unwrap(),
        vec![Some("t1".into()), Some("t1".into()), Some("t2".into())]
    );
    assert_eq!(tokens.renewals(), 1);
}

#[tokio::test]
async fn a_second_refusal_is_returned_not_retried_again() {
    let etcd = FakeEtcd::new();
    *etcd.valid.lock().unwrap() = "never".into();
    let tokens = Tokens::default();
    let r = with_token(&tokens, || etcd.authenticate(), |t| etcd.call(t)).await;
    assert_eq!(r, Err(refused()));
    assert_eq!(
        etcd.calls.lock().unwrap().len(),
        2,
        "the call and one retry"
    );
    assert_eq!(etcd.issued.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn calls_refused_together_renew_the_token_once() {
    let etcd = FakeEtcd::new();
    let tokens = Tokens::default();
    let first = tokens.current(|| etcd.authenticate()).await.expect("token");
    // Two calls saw generation 1 refused; the second renewal finds it already replaced.
    let a = tokens
        .renew(first.generation, || etcd.authenticate())
        .await
        .expect("renewed");
    let b = tokens
        .renew(first.generation, || etcd.authenticate())
        .await
        .expect("same");
    assert_eq!(a, b);
    assert_eq!(a.token.as_deref(), Some("t2"));
    assert_eq!(etcd.issued.load(Ordering::SeqCst), 2);
    assert_eq!(tokens.renewals(), 1);
}

#[tokio::test]
async fn a_failed_authentication_is_the_answer_and_is_tried_again_next_time() {
    let tokens = Tokens::default();
    let attempts = AtomicU64::new(0);
    let deny = || async {
        attempts.fetch_add(1, Ordering::SeqCst);
        Err::<Option<String>, _>(EtcdError::AuthFailed {
            user: "weir".into(),
            message: "authentication failed, invalid user ID or password".into(),
        })
    };
    let never_called = |_t: Option<Arc<str>>| async { Ok::<_, EtcdError>(()) };
    for _ in 0..2 {
        let r = with_token(&tokens, deny, never_called).await;
        assert!(matches!(r, Err(EtcdError::AuthFailed { .. })), "{r:?}");
    }
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "no token is cached");
}

#[tokio::test]
async fn auth_switched_off_sends_no_token_until_etcd_asks_for_a_user() {
    let tokens = Tokens::default();
    let on = std::sync::atomic::AtomicBool::new(false);
    let authenticate =
        || async { Ok::<_, EtcdError>(on.load(Ordering::SeqCst).then(|| "t".to_string())) };
    let on = &on;
    let call = |t: Option<Arc<str>>| async move {
        match t {
            Some(_) => Ok("with token"),
            None if on.load(Ordering::SeqCst) => Err(EtcdError::Status {
                http: 400,
                code: 3,
                message: "etcdserver: user name is empty".into(),
            }),
            None => Ok("without"),
        }
    };
    assert_eq!(with_token(&tokens, authenticate, call).await, Ok("without"));
    on.store(true, Ordering::SeqCst);
    assert_eq!(
        with_token(&tokens, authenticate, call).await,
        Ok("with token")
    );
}

#[tokio::test]
async fn a_permission_denied_with_a_token_is_not_a_token_problem() {
    let tokens = Tokens::default();
    let logins = AtomicU64::new(0);
    let authenticate = || async {
        logins.fetch_add(1, Ordering::SeqCst);
        Ok::<_, EtcdError>(Some("t".to_string()))
    };
    let denied = |_t: Option<Arc<str>>| async {
        Err::<(), _>(EtcdError::Status {
            http: 403,
            code: 7,
            message: "etcdserver: permission denied".into(),
        })
    };
    assert!(with_token(&tokens, authenticate, denied).await.is_err());
    assert_eq!(logins.load(Ordering::SeqCst), 1, "no second login");
}

#[test]
fn which_answers_refuse_a_token() {
    assert!(token_refused(&refused()));
    let status = |code, m: &str| EtcdError::Status {
        http: 400,
        code,
        message: m.into(),
    };
    assert!(token_refused(&status(
        3,
        "etcdserver: revision of auth store is old"
    )));
    assert!(token_refused(&status(
        0,
        "watch cancelled: etcdserver: invalid auth token"
    )));
    assert!(!token_refused(&status(7, "etcdserver: permission denied")));
    assert!(!token_refused(&EtcdError::Unavailable("x".into())));
}

#[test]
fn credentials_debug_hides_the_password() {
    let c = Credentials::new("weir", "hunter2-secret");
    let d = format!("{c:?}");
    assert!(d.contains("weir") && !d.contains("hunter2"), "{d}");
}

#[test]
fn watch_cancel_reasons_carry_their_grpc_code() {
    assert_eq!(
        grpc_status("rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"),
        (16, "etcdserver: invalid auth token".into())
    );
    assert_eq!(
        grpc_status("rpc error: code = PermissionDenied desc = etcdserver: permission denied"),
        (7, "etcdserver: permission denied".into())
    );
    assert_eq!(grpc_status("something else"), (0, "something else".into()));
    // As etcd 3.4 sends a watch refused for its token.
    let msg: Value = serde_json::from_str(
        r#"{"result":{"header":{"revision":"1"},"watch_id":"-1","created":true,"canceled":true,
            "cancel_reason":"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"}}"#,
    )
    .expect("json");
    let e = watch_message(msg).expect_err("cancelled");
    assert!(token_refused(&e), "{e:?}");
}

#[test]
fn tls_failures_name_the_side_at_fault() {
    use rustls::{AlertDescription, CertificateError};
    let server = tls::classify(&rustls::Error::InvalidCertificate(
        CertificateError::UnknownIssuer,
    ));
    assert!(
        matches!(&server, TlsProblem::ServerCertificate { kind, .. } if kind == "UnknownIssuer"),
        "{server:?}"
    );
    let name = tls::classify(&rustls::Error::InvalidCertificate(
        CertificateError::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("10.0.0.5").unwrap(),
            presented: vec![],
        },
    ));
    assert!(
        matches!(&name, TlsProblem::ServerCertificate { kind, .. } if kind == "NotValidForName"),
        "{name:?}"
    );
    assert_eq!(
        tls::classify(&rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired
        )),
        TlsProblem::ClientCertificate("CertificateRequired".into())
    );
    assert!(matches!(
        tls::classify(&rustls::Error::AlertReceived(
            AlertDescription::ProtocolVersion
        )),
        TlsProblem::Handshake(_)
    ));
    // Found through an I/O error, as tokio-rustls and hyper wrap it.
    let io = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        rustls::Error::AlertReceived(AlertDescription::BadCertificate),
    );
    assert_eq!(
        tls::tls_problem(&io),
        Some(TlsProblem::ClientCertificate("BadCertificate".into()))
    );
    let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    assert_eq!(tls::tls_problem(&plain), None);
}
