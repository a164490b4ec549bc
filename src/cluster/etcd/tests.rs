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
