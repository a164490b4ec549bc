//! The local lease deadline on tokio's paused time: no etcd is contacted (no task is
//! started), only the rule "drive only while the last keepalive is younger than
//! TTL − heartbeat" is exercised, on the injected clock.

use std::time::Duration;

use super::*;
use crate::cluster::Replicas;

const HEARTBEAT: Duration = Duration::from_secs(2);

/// An `Inner` whose etcd is `etcd`, a listener the test holds and never answers on
/// (the test starts no task, so nothing connects to it).
fn inner(clock: Clock, etcd: &std::net::TcpListener) -> Inner {
    let etcd = format!("http://{}", etcd.local_addr().unwrap());
    Inner::new(
        ClusterOptions {
            settings: ClusterSettings {
                etcd: vec![etcd],
                prefix: "/weir".into(),
                replicas: Replicas::Auto,
                heartbeat: HEARTBEAT,
                algorithm: crate::cluster::Algorithm::RoundRobin,
                name: Some("r1".into()),
                api_url: Some("http://127.0.0.1:9901".into()),
                peer_token: None,
                peer_allow: crate::config::cluster::default_peer_allow(),
                ack_timeout: crate::config::cluster::DEFAULT_ACK_TIMEOUT,
                etcd_tls: None,
                etcd_auth: None,
            },
            name: "r1".into(),
            api_url: "http://127.0.0.1:9901".into(),
            canaries: vec!["app".into()],
        },
        clock,
    )
    .expect("inner")
}

/// A lease renewed now (keepalive sent now, etcd answered `ttl`), its keys confirmed,
/// owning canary `app`.
fn renewed(inner: &Inner, ttl: Duration) {
    let mut st = lock(&inner.state);
    st.lease = Some(LeaseState {
        id: 1,
        ttl: ttl.as_secs() as i64,
        valid_until: inner.clock.instant() + ttl,
        ok: true,
    });
    st.verified = true;
    st.owned.insert(
        "app".into(),
        Owned {
            create_revision: 5,
            shard: 0,
            releasing: false,
        },
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_without_keepalives_stops_driving_a_heartbeat_before_it_expires() {
    let etcd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inner = inner(Clock::tokio_at(1_700_000_000_000), &etcd);
    let ttl = HEARTBEAT * 3;
    renewed(&inner, ttl);
    assert!(inner.may_drive("app"));
    // No keepalive answers: just before TTL − heartbeat it may still drive ...
    tokio::time::sleep(ttl - HEARTBEAT - Duration::from_millis(1)).await;
    assert!(inner.may_drive("app"), "still inside the local deadline");
    // ... and from then on it may not (etcd would expire the lease a heartbeat later).
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(!inner.may_drive("app"), "the local deadline passed");
    assert!(!inner.status().ready);
    // A renewal restores it.
    renewed(&inner, ttl);
    assert!(inner.may_drive("app"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_keepalive_or_a_release_stops_driving_at_once() {
    let etcd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inner = inner(Clock::tokio_at(1_700_000_000_000), &etcd);
    renewed(&inner, HEARTBEAT * 3);
    lock(&inner.state).lease.as_mut().unwrap().ok = false;
    assert!(!inner.may_drive("app"), "a failed keepalive");
    renewed(&inner, HEARTBEAT * 3);
    lock(&inner.state).owned.get_mut("app").unwrap().releasing = true;
    assert!(!inner.may_drive("app"), "a canary being released");
}

#[tokio::test(start_paused = true)]
async fn events_carry_the_injected_wall_time() {
    let etcd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inner = inner(Clock::tokio_at(1_700_000_000_000), &etcd);
    tokio::time::sleep(Duration::from_secs(90)).await;
    inner.event("test", None, None, 0, "x".into());
    let log = lock(&inner.log);
    assert_eq!(log.back().map(|e| e.time_ms), Some(1_700_000_090_000));
}
