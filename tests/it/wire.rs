//! The admin API's documents as the real server sends them parse into the
//! wire types, and serialise back to exactly the same JSON: the types are the
//! contract the server and its clients share (real sockets on 127.0.0.1, the
//! whole app, in-process echo backends).

use crate::support;

use bytes::Bytes;
use http::Method;
use http_body_util::Full;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use support::*;
use weir::wire::probe::Readiness;
use weir::wire::table::{BackendStatus, Route, RouteStats, StatsDoc, Table, WriteResult};

/// Parses what the server sent as `T` and checks that serialising the parse
/// gives the server's JSON back, field for field.
fn parse_exactly<T: Serialize + DeserializeOwned + Debug>(resp: &Resp) -> T {
    let doc: T =
        serde_json::from_slice(&resp.body).unwrap_or_else(|e| panic!("{e}: {}", resp.text()));
    assert_eq!(
        serde_json::to_value(&doc).unwrap(),
        resp.json(),
        "the wire type does not carry the server's document as it is"
    );
    doc
}

fn with_body(method: Method, url: String, body: String) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

#[tokio::test]
async fn the_server_documents_parse_into_the_wire_types() {
    for fast_path in [true, false] {
        let blue = echo("v1").await;
        let green = echo("v2").await;
        let yaml = format!(
            "proxy:\n  http1FastPath: {fast_path}\n{}",
            two_slot_config(blue.addr, green.addr, "    canaryWeight: 50\n")
        );
        let app = proxy(&yaml).await;
        let admin = app.admin_addr;
        let c = client();
        // Traffic on both sides, so the stats carry counts and histograms.
        for _ in 0..20 {
            let r = send(&c, get(app.proxy_addr(), "/", &[])).await;
            assert_eq!(r.status, 200);
        }

        let r = send(&c, get(admin, "/readyz", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let ready: Readiness = parse_exactly(&r);
        assert_eq!(ready.status, "ready");

        let r = send(&c, get(admin, "/api/v1/table", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let table: Table = parse_exactly(&r);
        assert_eq!(table.routes[0].name, "app");

        let r = send(&c, get(admin, "/api/v1/routes/app", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let route: Route = parse_exactly(&r);
        assert_eq!(route, table.routes[0]);

        let r = send(
            &c,
            with_body(
                Method::PATCH,
                format!("http://{admin}/api/v1/routes/app"),
                r#"{"canaryWeight": 40}"#.into(),
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let patched: Route = parse_exactly(&r);
        assert_eq!(patched.canary_weight, Some(40));

        let r = send(
            &c,
            with_body(
                Method::PUT,
                format!("http://{admin}/api/v1/table"),
                serde_json::to_string(&table).unwrap(),
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let written: WriteResult = parse_exactly(&r);
        assert!(written.version > 1, "{written:?}");

        let r = send(&c, get(admin, "/api/v1/backends/app-blue", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let backend: BackendStatus = parse_exactly(&r);
        assert_eq!(backend.configured, vec![blue.addr.to_string()]);
        assert_eq!(backend.endpoints[0].address, blue.addr.to_string());
        assert_eq!(backend.routes[0].role, "primary");

        let r = send(&c, get(admin, "/api/v1/stats?route=app&window=60s", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let one: RouteStats = parse_exactly(&r);
        let served = one.roles.primary.requests + one.roles.canary.requests;
        assert_eq!(served, 20, "{one:?}");
        assert_eq!(one.snapshots.primary.requests, one.roles.primary.requests);

        let r = send(&c, get(admin, "/api/v1/stats", &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let all: StatsDoc = parse_exactly(&r);
        assert_eq!(all.window_secs, 60);
        assert_eq!(all.routes.len(), 1);
        assert_eq!(all.routes[0].route, "app");
    }
}

/// The rolling-update documents `weir ctl deploy` reads: the write's answer and the
/// backend's `rollingUpdate` parse as the server sends them (their typed members only;
/// a missing one is an error naming it), and the request bodies round-trip.
#[tokio::test]
async fn the_rolling_update_and_start_documents_parse_and_round_trip() {
    use weir::wire::canary::StartRequest;
    use weir::wire::rolling::{EndpointsAccepted, EndpointsRequest, RollingSummary};
    let blue = echo("v1").await;
    let green = echo("v2").await;
    let next = echo("v2").await;
    let app = proxy(&two_slot_config(blue.addr, green.addr, "")).await;
    let admin = app.admin_addr;
    let c = client();
    let body = EndpointsRequest {
        endpoints: vec![next.addr.to_string()],
    };
    let r = send(
        &c,
        with_body(
            Method::PUT,
            format!("http://{admin}/api/v1/backends/app-green/endpoints"),
            serde_json::to_string(&body).unwrap(),
        ),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());
    let accepted: EndpointsAccepted = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(accepted.rollout.desired, body.endpoints);
    assert_eq!(accepted.rollout.generation, 2);
    let r = send(&c, get(admin, "/api/v1/backends/app-green", &[])).await;
    let backend: BackendStatus = parse_exactly(&r);
    let rolling_json = backend.rolling_update.expect("rollingUpdate");
    let rolling: RollingSummary = serde_json::from_value(rolling_json.clone()).unwrap();
    assert_eq!((rolling.generation, rolling.desired), (2, 1));
    assert!(
        rolling
            .endpoints
            .iter()
            .any(|e| e.address == next.addr.to_string() && e.desired),
        "{rolling:?}"
    );
    let back: RollingSummary =
        serde_json::from_value(serde_json::to_value(&rolling).unwrap()).unwrap();
    assert_eq!(back, rolling);
    for field in ["phase", "ready", "resolved"] {
        let mut v = rolling_json.clone();
        v.as_object_mut().unwrap().remove(field);
        let e = serde_json::from_value::<RollingSummary>(v).unwrap_err();
        assert!(e.to_string().contains(field), "{field}: {e}");
    }

    let plain = StartRequest {
        revision: "v2".into(),
        force: false,
    };
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        r#"{"revision":"v2"}"#
    );
    let forced: StartRequest = serde_json::from_str(r#"{"revision":"v2","force":true}"#).unwrap();
    assert!(forced.force);
    assert_eq!(
        serde_json::from_str::<StartRequest>(&serde_json::to_string(&forced).unwrap()).unwrap(),
        forced
    );
    let e = serde_json::from_str::<StartRequest>(r#"{"revision":"v2","forced":true}"#).unwrap_err();
    assert!(e.to_string().contains("forced"), "{e}");
}
