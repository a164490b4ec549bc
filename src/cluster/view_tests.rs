use super::*;

fn kv(key: &str, value: &str, lease: i64, rev: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.as_bytes().to_vec(),
        create_revision: rev,
        mod_revision: rev,
        version: 1,
        lease,
    }
}

/// A view of members `(name, lease)` and shards `(n, lease)`.
fn view(members: &[(&str, i64)], shards: &[(u32, i64)]) -> View {
    let keys = Keys::new("/w");
    let m: Vec<KeyValue> = members
        .iter()
        .map(|(n, l)| kv(&keys.member(n), &format!(r#"{{"name":"{n}"}}"#), *l, 1))
        .collect();
    let s: Vec<KeyValue> = shards
        .iter()
        .map(|(n, l)| {
            let holder = members.iter().find(|(_, ml)| ml == l).map_or("x", |m| m.0);
            kv(
                &keys.shard(*n),
                &format!(r#"{{"shard":{n},"replica":"{holder}"}}"#),
                *l,
                2,
            )
        })
        .collect();
    View::parse(&keys, 10, &m, &s, &[])
}

#[test]
fn parse_keeps_unreadable_records_and_skips_foreign_keys() {
    let keys = Keys::new("/w/");
    let v = View::parse(
        &keys,
        7,
        &[kv("/w/members/a", "not json", 1, 3)],
        &[kv("/w/shards/0", "{}", 1, 4), kv("/w/shards/x", "{}", 1, 5)],
        &[kv(
            "/w/owners/app",
            r#"{"canary":"app","replica":"a","shard":0}"#,
            1,
            6,
        )],
    );
    assert_eq!(v.revision, 7);
    assert!(v.members["a"].record.is_none());
    assert_eq!(v.shards.len(), 1, "a non-numeric shard key is ignored");
    assert_eq!(v.owners["app"].create_revision, 6);
    assert_eq!(v.owners["app"].record.as_ref().map(|r| r.shard), Some(0));
    assert_eq!(v.shards_of(1), BTreeSet::from([0]));
    assert_eq!(keys.state("app"), "/w/state/app");
    assert_eq!(keys.all(), "/w/");
}

#[test]
fn a_member_record_without_a_lease_is_no_member() {
    let keys = Keys::new("/w");
    let forged = r#"{"name":"evil","apiUrl":"http://attacker.example:9901"}"#;
    let v = View::parse(
        &keys,
        3,
        &[
            kv(
                &keys.member("a"),
                r#"{"name":"a","apiUrl":"http://127.0.0.1:1"}"#,
                5,
                1,
            ),
            kv(&keys.member("evil"), forged, 0, 2),
        ],
        &[],
        &[],
    );
    assert_eq!(v.members.keys().collect::<Vec<_>>(), vec!["a"]);
    let refused = &v.unleased["evil"];
    assert_eq!(
        refused.as_ref().map(|r| r.api_url.as_str()),
        Some("http://attacker.example:9901")
    );
    // It holds no shard and is counted by nobody's plan.
    assert_eq!(
        plan_shards(&v, 5, "a", Replicas::Auto),
        ShardAction::Claim(0)
    );
}

#[test]
fn shard_plans() {
    use ShardAction::*;
    struct Case {
        what: &'static str,
        members: &'static [(&'static str, i64)],
        shards: &'static [(u32, i64)],
        me: (&'static str, i64),
        replicas: Replicas,
        want: ShardAction,
    }
    let cases = [
        Case {
            what: "fresh fleet: lowest free shard",
            members: &[("a", 1), ("b", 2)],
            shards: &[],
            me: ("b", 2),
            replicas: Replicas::Fixed(3),
            want: Claim(0),
        },
        Case {
            what: "holes are filled lowest first",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (2, 2)],
            me: ("c", 3),
            replicas: Replicas::Fixed(3),
            want: Claim(1),
        },
        Case {
            what: "every shard held: standby",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (1, 2)],
            me: ("c", 3),
            replicas: Replicas::Fixed(2),
            want: Keep,
        },
        Case {
            what: "holding one with a shardless member waiting: nothing to do",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (1, 2)],
            me: ("a", 1),
            replicas: Replicas::Fixed(2),
            want: Keep,
        },
        Case {
            what: "dead holder's shard adopted by a least-loaded member",
            members: &[("a", 1), ("b", 2)],
            shards: &[(0, 1), (1, 2)],
            me: ("a", 1),
            replicas: Replicas::Fixed(3),
            want: Claim(2),
        },
        Case {
            what: "more loaded members do not adopt",
            members: &[("a", 1), ("b", 2)],
            shards: &[(0, 1), (1, 2), (2, 1)],
            me: ("a", 1),
            replicas: Replicas::Fixed(4),
            want: Keep,
        },
        Case {
            what: "no adoption while a member waits for a shard",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (1, 2)],
            me: ("a", 1),
            replicas: Replicas::Fixed(3),
            want: Keep,
        },
        Case {
            what: "a returning replica gets a shard back from the most loaded",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (1, 2), (2, 1)],
            me: ("a", 1),
            replicas: Replicas::Fixed(3),
            want: Release(2),
        },
        Case {
            what: "ties on load: only the greatest name releases",
            members: &[("a", 1), ("b", 2), ("c", 3), ("d", 4)],
            shards: &[(0, 1), (1, 2), (2, 1), (3, 2)],
            me: ("a", 1),
            replicas: Replicas::Fixed(4),
            want: Keep,
        },
        Case {
            what: "ties on load: the greatest name releases its highest",
            members: &[("a", 1), ("b", 2), ("c", 3), ("d", 4)],
            shards: &[(0, 1), (1, 2), (2, 1), (3, 2)],
            me: ("b", 2),
            replicas: Replicas::Fixed(4),
            want: Release(3),
        },
        Case {
            what: "a shard beyond a lowered count is given back",
            members: &[("a", 1)],
            shards: &[(0, 1), (5, 1)],
            me: ("a", 1),
            replicas: Replicas::Fixed(2),
            want: Release(5),
        },
        Case {
            what: "auto: first free number, whatever the member count",
            members: &[("a", 1), ("b", 2), ("c", 3)],
            shards: &[(0, 1), (2, 2)],
            me: ("c", 3),
            replicas: Replicas::Auto,
            want: Claim(1),
        },
        Case {
            what: "auto: one shard is enough",
            members: &[("a", 1)],
            shards: &[(1, 1)],
            me: ("a", 1),
            replicas: Replicas::Auto,
            want: Keep,
        },
        Case {
            what: "auto: never two",
            members: &[("a", 1)],
            shards: &[(0, 1), (1, 1)],
            me: ("a", 1),
            replicas: Replicas::Auto,
            want: Release(1),
        },
    ];
    for c in &cases {
        let v = view(c.members, c.shards);
        assert_eq!(
            plan_shards(&v, c.me.1, c.me.0, c.replicas),
            c.want,
            "{}",
            c.what
        );
    }
}

#[test]
fn desired_follows_the_shard_set() {
    let canaries = ["a", "b", "c", "d", "e", "f"];
    // Fixed: an unheld shard still has its canaries (nobody drives them).
    let v = view(&[("r0", 1), ("r1", 2)], &[(0, 1), (1, 2)]);
    let d0 = desired(
        &v,
        &canaries,
        &BTreeSet::from([0]),
        Replicas::Fixed(3),
        Algorithm::RoundRobin,
    );
    assert_eq!(d0.keys().collect::<Vec<_>>(), vec!["a", "d"]);
    // Auto: only held shards count.
    let d0 = desired(
        &v,
        &canaries,
        &BTreeSet::from([0]),
        Replicas::Auto,
        Algorithm::RoundRobin,
    );
    assert_eq!(d0.keys().collect::<Vec<_>>(), vec!["a", "c", "e"]);
    assert_eq!(v.holder(1).as_deref(), Some("r1"));
    assert_eq!(v.holder(2), None);
}

/// Simulates replicas applying [`plan_shards`] in turn (each claim or release
/// applied at once, as a transaction would) and checks they converge to one shard
/// each, with every shard of `0..N` held when there are enough replicas.
#[test]
fn fixed_count_converges() {
    for (n, replicas) in [(3u32, 3i64), (3, 2), (3, 5), (1, 3), (4, 4)] {
        let members: Vec<(String, i64)> = (1..=replicas).map(|l| (format!("r{l}"), l)).collect();
        let mut shards: BTreeMap<u32, i64> = BTreeMap::new();
        // A dead replica's extra shards first: r1 holds everything.
        for s in 0..n {
            shards.insert(s, 1);
        }
        for _round in 0..20 {
            for (name, lease) in &members {
                let keys = Keys::new("/w");
                let m: Vec<KeyValue> = members
                    .iter()
                    .map(|(nm, l)| kv(&keys.member(nm), "{}", *l, 1))
                    .collect();
                let s: Vec<KeyValue> = shards
                    .iter()
                    .map(|(sh, l)| {
                        let holder = &members[(*l - 1) as usize].0;
                        kv(
                            &keys.shard(*sh),
                            &format!(r#"{{"replica":"{holder}"}}"#),
                            *l,
                            2,
                        )
                    })
                    .collect();
                let v = View::parse(&keys, 1, &m, &s, &[]);
                match plan_shards(&v, *lease, name, Replicas::Fixed(n)) {
                    ShardAction::Claim(sh) => {
                        shards.entry(sh).or_insert(*lease);
                    }
                    ShardAction::Release(sh) => {
                        shards.remove(&sh);
                    }
                    ShardAction::Keep => {}
                }
            }
        }
        let held: BTreeSet<u32> = shards.keys().copied().collect();
        assert_eq!(
            held,
            (0..n).collect(),
            "N={n}, {replicas} replicas: every shard held"
        );
        let mut per: BTreeMap<i64, usize> = BTreeMap::new();
        for l in shards.values() {
            *per.entry(*l).or_default() += 1;
        }
        let max = per.values().max().copied().unwrap_or(0);
        let min_needed = (n as usize).div_ceil(replicas as usize);
        assert!(max <= min_needed, "N={n}, {replicas} replicas: {per:?}");
    }
}
