//! PURE: which shard drives which canary.
//!
//! Every replica computes the same answer from the same inputs (the configured
//! canary names and the set of shards), so no coordination is needed to agree on
//! the assignment; etcd only arbitrates who holds a shard and who holds a canary's
//! owner key (see [`super::membership`]).
//!
//! Two algorithms:
//! - **round-robin**: canary names sorted, the i-th canary goes to the i-th shard
//!   modulo the shard count (shards sorted). Balanced within ±1, but adding or
//!   removing a shard can move most canaries.
//! - **hash**: rendezvous (highest-random-weight) hashing: a canary goes to the shard
//!   with the highest `weight(canary, shard)`. Removing a shard moves exactly the
//!   canaries that were on it; adding one moves only canaries to the new shard
//!   (≈ 1/(N+1) of them). Balance is statistical, not ±1.
//!
//! The hash is FNV-1a folded through SplitMix64's finaliser: fixed, portable and
//! independent of the Rust version (std's `DefaultHasher` is not guaranteed stable),
//! because replicas built at different times must agree.
//!
//! Nothing here does IO, reads a clock or panics.

pub use crate::config::cluster::Algorithm;
use std::collections::{BTreeMap, BTreeSet};

/// Assigns every canary to one of `shards`. Duplicate names and duplicate shard
/// numbers are ignored; with no shard at all the map is empty (nobody drives
/// anything, which is the fail-safe answer).
pub fn assign<S: AsRef<str>>(
    canaries: &[S],
    shards: &[u32],
    algorithm: Algorithm,
) -> BTreeMap<String, u32> {
    let names: BTreeSet<&str> = canaries.iter().map(|c| c.as_ref()).collect();
    let shards: Vec<u32> = shards
        .iter()
        .copied()
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();
    let mut out = BTreeMap::new();
    if shards.is_empty() {
        return out;
    }
    match algorithm {
        Algorithm::RoundRobin => {
            for (i, name) in names.into_iter().enumerate() {
                out.insert(name.to_string(), shards[i % shards.len()]);
            }
        }
        Algorithm::Hash => {
            for name in names {
                if let Some(s) = rendezvous(name, &shards) {
                    out.insert(name.to_string(), s);
                }
            }
        }
    }
    out
}

/// The shard with the highest weight for `canary` (ties: the lower shard number).
pub fn rendezvous(canary: &str, shards: &[u32]) -> Option<u32> {
    let mut best: Option<(u64, u32)> = None;
    for &s in shards {
        let w = weight(canary, s);
        best = match best {
            Some((bw, bs)) if bw > w || (bw == w && bs < s) => Some((bw, bs)),
            _ => Some((w, s)),
        };
    }
    best.map(|(_, s)| s)
}

/// The rendezvous weight of `canary` on `shard`.
pub fn weight(canary: &str, shard: u32) -> u64 {
    mix(fnv1a(canary.as_bytes()) ^ mix(u64::from(shard).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64's finaliser: spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The canaries of each shard (every shard listed, possibly with none), for status
/// pages.
pub fn by_shard(assignment: &BTreeMap<String, u32>, shards: &[u32]) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = shards.iter().map(|s| (*s, Vec::new())).collect();
    for (c, s) in assignment {
        out.entry(*s).or_default().push(c.clone());
    }
    out
}

#[cfg(test)]
#[path = "assign_tests.rs"]
mod tests;
