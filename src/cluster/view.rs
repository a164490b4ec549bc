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
    /// The routing-table version the replica had applied at its last heartbeat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
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
    /// Live members by name: member keys bound to a lease.
    pub members: BTreeMap<String, Entry<MemberRecord>>,
    /// Member keys bound to no lease, by name: a replica always writes its record
    /// under its lease, so such a record was written by something else and is no
    /// member (it would outlive any replica).
    pub unleased: BTreeMap<String, Option<MemberRecord>>,
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
                if kv.lease == 0 {
                    v.unleased.insert(name.to_string(), rec);
                } else {
                    v.members.insert(name.to_string(), Entry::from_kv(kv, rec));
                }
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
#[path = "view_tests.rs"]
mod tests;
