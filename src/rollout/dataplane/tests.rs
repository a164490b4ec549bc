use super::*;

#[test]
fn remote_documents_parse() {
    let stats = br#"{"route":"app","canaryWeight":10,"primary":"app-blue","canary":"app-green",
        "windowSecs":5,
        "roles":{
          "primary":{"requests":10,"failures":1,"clientErrors":0,"rps":2.0,"successRate":90.0,
                     "p50Ms":null,"p90Ms":null,"p99Ms":null},
          "canary":{"requests":3,"failures":0,"clientErrors":0,"rps":0.6,"successRate":100.0,
                    "p50Ms":null,"p90Ms":null,"p99Ms":null},
          "mirror":{"requests":0,"failures":0,"clientErrors":0,"rps":0.0,"successRate":null,
                    "p50Ms":null,"p90Ms":null,"p99Ms":null}},
        "snapshots":{"primary":{"requests":10,"failures":1,"windowSecs":5,"histogram":[]},
                     "canary":{"requests":3,"failures":0,"windowSecs":5,"histogram":[]},
                     "mirror":{"requests":0,"failures":0,"windowSecs":5,"histogram":[]}}}"#;
    let s = parse_stats(stats).expect("parses");
    assert_eq!((s.primary.requests, s.primary.failures), (10, 1));
    assert_eq!(s.canary.requests, 3);
    assert_eq!(s.mirror, WindowSnapshot::empty(5));
    let mut sum = s.clone();
    sum.merge(&s);
    assert_eq!(sum.primary.requests, 20);

    let backend = br#"{"name":"app-green","loadBalancer":"round-robin",
        "configured":["127.0.0.1:1","127.0.0.1:2"],
        "endpoints":[{"address":"127.0.0.1:1","ready":true,"draining":false,"ejected":false,"inFlight":0}],
        "routes":[],"revisionPath":"/version","health":null,"rollingUpdate":null}"#;
    let b = parse_backend(backend).expect("parses");
    assert_eq!(b.endpoints, vec!["127.0.0.1:1", "127.0.0.1:2"]);
    assert_eq!(b.rotation, vec!["127.0.0.1:1"]);
    assert!(
        !b.settled(),
        "one configured endpoint is not in rotation yet"
    );
    assert_eq!(b.revision_path.as_deref(), Some("/version"));
    assert!(b.ready);

    let mut h = http::HeaderMap::new();
    h.insert(http::header::ETAG, http::HeaderValue::from_static("\"42\""));
    assert_eq!(etag_version(&h), Some(42));
    assert_eq!(encode("a b/c"), "a+b%2Fc");
}

/// A document whose endpoints lack `ready` (an older or renamed field) must not
/// read as a ready backend: a promotion waits on this answer.
#[test]
fn a_backend_without_readiness_fields_is_an_error_not_ready() {
    for body in [
        &br#"{"name":"b","configured":["a:1"],"endpoints":[{"address":"a:1","draining":false}]}"#[..],
        br#"{"name":"b","configured":["a:1"],"endpoints":[{"address":"a:1","healthy":false,"draining":false}]}"#,
        br#"{"name":"b","configured":["a:1"],"endpoints":[{"address":"a:1","ready":true}]}"#,
        br#"{"name":"b","configured":["a:1"],"endpoints":[{"ready":true,"draining":false}]}"#,
        br#"{"name":"b","configured":["a:1"]}"#,
    ] {
        let got = parse_backend(body);
        assert!(
            got.is_err(),
            "{}: {got:?}",
            String::from_utf8_lossy(body)
        );
    }
}

/// A stats document without one of the roles (another version, a renamed
/// role) must not read as a role with no traffic: the engine would judge an
/// analysis on it.
#[test]
fn a_stats_document_without_a_role_is_an_error_not_idle() {
    let body = br#"{"route":"app","canaryWeight":10,"primary":"a","canary":"b","windowSecs":5,
        "roles":{"primary":{"requests":10,"failures":1,"rps":2.0,"successRate":90.0,
                            "p50Ms":null,"p90Ms":null,"p99Ms":null},
                 "canary":{"requests":3,"failures":0,"rps":0.6,"successRate":100.0,
                           "p50Ms":null,"p90Ms":null,"p99Ms":null}},
        "snapshots":{"primary":{"requests":10,"failures":1,"windowSecs":5,"histogram":[]},
                     "canary":{"requests":3,"failures":0,"windowSecs":5,"histogram":[]}}}"#;
    let got = parse_stats(body);
    assert!(got.is_err(), "{got:?}");
}

/// A remote plane's backend document says where the slot's rolling update
/// stands; a run waits on it (or rolls back on a stall) as on a local one.
#[test]
fn a_remote_backend_reports_its_rolling_update_to_the_run() {
    let doc = |update: &str| {
        format!(
            r#"{{"name":"app-green","loadBalancer":"round-robin","configured":["127.0.0.1:2"],
            "endpoints":[{{"address":"127.0.0.1:1","ready":true,"draining":false,"ejected":false,"inFlight":0}}],
            "routes":[],"revisionPath":null,"health":null,"rollingUpdate":{update}}}"#
        )
    };
    let rolling = r#"{"generation":2,"desired":1,"ready":1,"updated":0,"old":1,"total":1,
        "draining":0,"phase":"Progressing","endpoints":[],"events":[]}"#;
    let b = parse_backend(doc(rolling).as_bytes()).expect("parses");
    assert_eq!(
        b.deploy(),
        SlotDeploy::Rolling(
            "rolling update of backend app-green: 0 of 1 new endpoints in rotation, 1 ready, 1 old"
                .into()
        )
    );
    let stalled = rolling.replace("Progressing", "Stalled");
    let b = parse_backend(doc(&stalled).as_bytes()).expect("parses");
    assert!(matches!(b.deploy(), SlotDeploy::Stalled(_)), "{b:?}");
    let complete = rolling.replace("Progressing", "Complete");
    let b = parse_backend(doc(&complete).as_bytes()).expect("parses");
    assert_eq!(b.deploy(), SlotDeploy::Ready);
    // An older weir's document without the update: nothing to wait for.
    for update in ["null", r#"{"phase":"Sideways"}"#, r#"{"phase":"Stalled"}"#] {
        let b = parse_backend(doc(update).as_bytes()).expect("parses");
        assert_eq!(b.deploy(), SlotDeploy::Ready, "{update}");
    }
}
