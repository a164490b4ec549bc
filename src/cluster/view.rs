//! PURE: the fleet as read from etcd in one consistent snapshot, and the decisions
//! taken from it (which shard to claim or give back, which canaries this replica
//! should own).
//!
//! Identity is the **lease**: every key a replica writes (member, shards, owner keys)
//! is bound to its one lease, so "who holds shard 2" is "which lease is shard 2's key
//! bound to", whatever the record's text says. A record that cannot be parsed still
//! occupies its key.
//!
//! No IO, no clock: the caller passes the keys read and `now` where needed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::assign::{assign, Algorithm};
use super::etcd::KeyValue;
use crate::config::cluster::Replicas;

/// `<prefix>/members/<name>`: a live replica (bound to its lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemberRecord {
    /// Replica name.
    pub name: String,
    /// Its control-API URL (the owner of a canary drives this data plane).
    pub api_url: String,
    /// Last heartbeat (ms since the Unix epoch, the replica's clock).
    pub heartbeat_ms: u64,
    /// When the replica joined (ms since the Unix epoch).
    pub started_ms: u64,
}

/// `<prefix>/shards/<n>`: a shard claim (bound to the holder's lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ShardRecord {
    /// Shard number.
    pub shard: u32,
    /// Holder's name.
    pub replica: String,
    /// Holder's control-API URL.
    pub api_url: String,
    /// Last heartbeat (ms since the Unix epoch, the holder's clock).
    pub heartbeat_ms: u64,
}

/// `<prefix>/owners/<canary>`: the one replica allowed to drive a canary (bound to
/// its lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerRecord {
    /// The canary.
    pub canary: String,
    /// Owner's name.
    pub replica: String,
    /// The shard it owns the canary through.
    pub shard: u32,
    /// When it took the key (ms since the Unix epoch).
    pub acquired_ms: u64,
}

/// One key of the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<T> {
    /// The record, if its value parsed.
    pub record: Option<T>,
    /// The lease the key is bound to: the holder's identity.
    pub lease: i64,
    /// The key's creation revision (fencing token of owner keys).
    pub create_revision: i64,
    /// Its last change.
    pub mod_revision: i64,
}

impl<T> Entry<T> {
    fn from_kv(kv: &KeyValue, record: Option<T>) -> Self {
        Entry {
            record,
            lease: kv.lease,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        }
    }
}

/// The key names under a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The prefix, no trailing `/`.
    pub prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }
    /// `<prefix>/members/`
    pub fn members(&self) -> String {
        format!("{}/members/", self.prefix)
    }
    /// `<prefix>/members/<name>`
    pub fn member(&self, name: &str) -> String {
        format!("{}/members/{name}", self.prefix)
    }
    /// `<prefix>/shards/`
    pub fn shards(&self) -> String {
        format!("{}/shards/", self.prefix)
    }
    /// `<prefix>/shards/<n>`
    pub fn shard(&self, n: u32) -> String {
        format!("{}/shards/{n}", self.prefix)
    }
    /// `<prefix>/owners/`
    pub fn owners(&self) -> String {
        format!("{}/owners/", self.prefix)
    }
    /// `<prefix>/owners/<canary>`
    pub fn owner(&self, canary: &str) -> String {
        format!("{}/owners/{canary}", self.prefix)
    }
    /// `<prefix>/state/<canary>`
    pub fn state(&self, canary: &str) -> String {
        format!("{}/state/{canary}", self.prefix)
    }
    /// `<prefix>/`: everything (the watch).
    pub fn all(&self) -> String {
        format!("{}/", self.prefix)
    }
}

/// The fleet at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The store's revision of the snapshot.
    pub revision: i64,
    /// Live members by name.
    pub members: BTreeMap<String, Entry<MemberRecord>>,
    /// Held shards by number.
    pub shards: BTreeMap<u32, Entry<ShardRecord>>,
    /// Owner keys by canary.
    pub owners: BTreeMap<String, Entry<OwnerRecord>>,
}

impl View {
    /// Builds the view from the three prefix reads of one snapshot. Keys that do not
    /// fit the layout (a shard key that is not a number) are ignored.
    pub fn parse(
        keys: &Keys,
        revision: i64,
        members: &[KeyValue],
        shards: &[KeyValue],
        owners: &[KeyValue],
    ) -> View {
        let mut v = View {
            revision,
            ..View::default()
        };
        let mp = keys.members();
        for kv in members {
            if let Some(name) = kv.key.strip_prefix(&mp) {
                let rec = serde_json::from_slice(&kv.value).ok();
                v.members.insert(name.to_string(), Entry::from_kv(kv, rec));
            }
        }
        let sp = keys.shards();
        for kv in shards {
            if let Some(n) = kv.key.strip_prefix(&sp).and_then(|n| n.parse::<u32>().ok()) {
                let rec = serde_json::from_slice(&kv.value).ok();
                v.shards.insert(n, Entry::from_kv(kv, rec));
            }
        }
        let op = keys.owners();
        for kv in owners {
            if let Some(c) = kv.key.strip_prefix(&op) {
                let rec = serde_json::from_slice(&kv.value).ok();
                v.owners.insert(c.to_string(), Entry::from_kv(kv, rec));
            }
        }
        v
    }

    /// The shards canaries are assigned over: `0..N` for a fixed count (held or not:
    /// an unheld shard's canaries wait for its adoption), the held shards for `auto`.
    pub fn shard_set(&self, replicas: Replicas) -> Vec<u32> {
        match replicas {
            Replicas::Fixed(n) => (0..n).collect(),
            Replicas::Auto => self.shards.keys().copied().collect(),
        }
    }

    /// Shards bound to `lease`.
    pub fn shards_of(&self, lease: i64) -> BTreeSet<u32> {
        self.shards
            .iter()
            .filter(|(_, e)| e.lease == lease)
            .map(|(n, _)| *n)
            .collect()
    }

    /// The holder's name of a shard (`?` when its record is unreadable).
    pub fn holder(&self, shard: u32) -> Option<String> {
        self.shards.get(&shard).map(|e| {
            e.record
                .as_ref()
                .map(|r| r.replica.clone())
                .unwrap_or_else(|| "?".into())
        })
    }

    /// Live members' leases with how many shards each holds (members first seen by
    /// lease; a shard bound to a lease with no member key counts too).
    fn load(&self) -> BTreeMap<i64, (String, usize)> {
        let mut out: BTreeMap<i64, (String, usize)> = BTreeMap::new();
        for (name, e) in &self.members {
            out.entry(e.lease).or_insert_with(|| (name.clone(), 0));
        }
        for e in self.shards.values() {
            let name = e
                .record
                .as_ref()
                .map(|r| r.replica.clone())
                .unwrap_or_default();
            out.entry(e.lease).or_insert_with(|| (name, 0)).1 += 1;
        }
        out
    }
}

/// What to do about shards, one change per reconcile pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardAction {
    /// Nothing.
    Keep,
    /// Try to claim this free shard (a transaction decides who gets it).
    Claim(u32),
    /// Give this shard back (its canaries first).
    Release(u32),
}

/// The shard decision of the replica holding lease `me` (named `my_name`).
///
/// - No shard yet: claim the lowest free one (`< N` for a fixed count; any for auto).
/// - Fixed count, more than one shard held while a live member holds none and no shard
///   is free: the member holding the most shards (ties: the greatest name) gives its
///   highest one back, so a returning replica gets a shard without anyone fighting.
/// - Fixed count, a free shard and every member holding one: the members holding the
///   fewest shards adopt it (the transaction lets exactly one win). This is the
///   takeover of a dead replica's shard once its lease expired.
/// - Shards outside `0..N` (a fixed count lowered) or a second shard in auto mode are
///   given back.
pub fn plan_shards(view: &View, me: i64, my_name: &str, replicas: Replicas) -> ShardAction {
    let mine = view.shards_of(me);
    match replicas {
        Replicas::Auto => {
            if mine.len() > 1 {
                if let Some(extra) = mine.iter().next_back() {
                    return ShardAction::Release(*extra);
                }
            }
            if mine.is_empty() {
                let free = (0u32..).find(|n| !view.shards.contains_key(n)).unwrap_or(0);
                return ShardAction::Claim(free);
            }
            ShardAction::Keep
        }
        Replicas::Fixed(n) => {
            if let Some(out) = mine.iter().rev().find(|s| **s >= n) {
                return ShardAction::Release(*out);
            }
            let free: Vec<u32> = (0..n).filter(|s| !view.shards.contains_key(s)).collect();
            if mine.is_empty() {
                return free
                    .first()
                    .map_or(ShardAction::Keep, |s| ShardAction::Claim(*s));
            }
            let mut load = view.load();
            load.entry(me).or_insert_with(|| (my_name.to_string(), 0)).1 = mine.len();
            let shardless = load.values().any(|(_, c)| *c == 0);
            if shardless {
                if free.is_empty() && mine.len() > 1 {
                    let top = load
                        .values()
                        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
                        .map(|(name, c)| (name.clone(), *c));
                    if top == Some((my_name.to_string(), mine.len())) {
                        if let Some(s) = mine.iter().next_back() {
                            return ShardAction::Release(*s);
                        }
                    }
                }
                return ShardAction::Keep;
            }
            let min = load.values().map(|(_, c)| *c).min().unwrap_or(0);
            match free.first() {
                Some(s) if mine.len() == min => ShardAction::Claim(*s),
                _ => ShardAction::Keep,
            }
        }
    }
}

/// The assignment of every canary (over [`View::shard_set`]).
pub fn assignment<S: AsRef<str>>(
    view: &View,
    canaries: &[S],
    replicas: Replicas,
    algorithm: Algorithm,
) -> BTreeMap<String, u32> {
    assign(canaries, &view.shard_set(replicas), algorithm)
}

/// The canaries the holder of `my_shards` should own, with their shard.
pub fn desired<S: AsRef<str>>(
    view: &View,
    canaries: &[S],
    my_shards: &BTreeSet<u32>,
    replicas: Replicas,
    algorithm: Algorithm,
) -> BTreeMap<String, u32> {
    assignment(view, canaries, replicas, algorithm)
        .into_iter()
        .filter(|(_, s)| my_shards.contains(s))
        .collect()
}

#[cfg(test)]
mod tests {
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
            let members: Vec<(String, i64)> =
                (1..=replicas).map(|l| (format!("r{l}"), l)).collect();
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
}
