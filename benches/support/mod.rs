//! Shared fixtures for the criterion benches: YAML route tables built the
//! way a user writes them and compiled through the real config pipeline
//! (`parse_yaml` → `compile_table`), so the benches measure the data
//! structures the proxy really runs on.
#![allow(dead_code)]

use std::fmt::Write;
use std::path::Path;
use weir::config::raw::RawTable;
use weir::routing::RoutingTable;

/// What each route of a generated table carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Features {
    /// Primary only: the features-off baseline.
    Plain,
    /// Canary at 10 %, no match rules, no affinity.
    Weight,
    /// Canary at 10 % plus A/B rules: header exact, cookie exact, and the
    /// two regexes a Flagger user writes (cookie header, user agent).
    Match,
    /// `Match` plus session affinity with a primary cookie.
    MatchAffinity,
}

impl Features {
    pub fn name(self) -> &'static str {
        match self {
            Features::Plain => "plain",
            Features::Weight => "weight",
            Features::Match => "match",
            Features::MatchAffinity => "match_affinity",
        }
    }
}

/// Host of route `i`.
pub fn host(i: usize) -> String {
    format!("svc{i}.bench.example")
}

/// Path prefix of route `i` (also unique, so a single-host table works).
pub fn prefix(i: usize) -> String {
    format!("/api/v{i}/")
}

/// YAML for `n` routes. `one_host`: every route on the same host, told
/// apart by prefix only (the lookup then scans the prefix list).
pub fn table_yaml(n: usize, features: Features, one_host: bool) -> String {
    let mut y = String::from(
        "backends:\n  blue:\n    endpoints: [\"127.0.0.1:9001\"]\n  green:\n    endpoints: [\"127.0.0.1:9101\"]\nroutes:\n",
    );
    for i in 0..n {
        let h = if one_host { host(0) } else { host(i) };
        let _ = write!(
            y,
            "  - name: r{i}\n    hosts: [\"{h}\"]\n    pathPrefix: {p}\n    primary: blue\n",
            p = prefix(i)
        );
        if features == Features::Plain {
            continue;
        }
        y.push_str("    canary: green\n    canaryWeight: 10\n");
        if matches!(features, Features::Match | Features::MatchAffinity) {
            y.push_str(concat!(
                "    match:\n",
                "      - headers: { x-canary: { exact: insider } }\n",
                "      - headers: { cookie: { regex: \"^(.*?;)?(canary=always)(;.*)?$\" } }\n",
                "      - cookies: { beta: { exact: \"yes\" } }\n",
                "      - headers: { user-agent: { regex: \"(?i)android.*mobile\" } }\n",
            ));
        }
        if features == Features::MatchAffinity {
            y.push_str(concat!(
                "    sessionAffinity: { cookieName: weir-canary, maxAge: 21600, primaryCookieName: weir-primary, path: / }\n",
                "    affinityState: { canaryValue: canaryrun0001, primaryValue: primarystep0001 }\n",
            ));
        }
    }
    y
}

/// The raw table (deserialised, not yet validated or compiled).
/// Parsed through the whole-config loader (a listener is added), so the
/// benches depend only on public API.
pub fn raw_table(yaml: &str) -> RawTable {
    let full = format!("listeners:\n  - name: http\n    address: 127.0.0.1:0\n{yaml}");
    let cfg = weir::config::parse_yaml(&full, "bench.yaml", Path::new("."))
        .unwrap_or_else(|e| panic!("bench config invalid:\n{e}"));
    cfg.table.raw
}

/// The compiled routing table for `n` routes.
pub fn routing_table(n: usize, features: Features, one_host: bool) -> RoutingTable {
    let raw = raw_table(&table_yaml(n, features, one_host));
    weir::config::compile_table(&raw)
        .unwrap_or_else(|e| panic!("bench table invalid: {e:?}"))
        .routing
}
