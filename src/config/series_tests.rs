use super::*;

fn series(q: &str) -> Vec<&str> {
    scan(q).series
}

#[test]
fn a_flagger_style_template_reads_its_series_and_labels() {
    let q = "100 - sum(rate(weir_requests_total{route=\"{{ target }}\",role=\"canary\",code!~\"5..\"}[{{ interval }}]))\n    / sum(rate(weir_requests_total{route=\"{{ target }}\"}[{{ interval }}])) * 100";
    let s = scan(q);
    assert_eq!(s.series, ["weir_requests_total"]);
    assert_eq!(s.labels, ["route", "role", "code"]);

    let q = "histogram_quantile(0.99, sum(rate(weir_request_duration_seconds_bucket{route=\"{{ route }}\"}[{{ interval }}])) by (le, role))";
    let s = scan(q);
    assert_eq!(s.series, ["weir_request_duration_seconds_bucket"]);
    assert_eq!(s.labels, ["route", "le", "role"]);
}

#[test]
fn promql_words_are_not_series() {
    let cases: &[(&str, &[&str])] = &[
        ("sum by (le) (rate(x_bucket[5m]))", &["x_bucket"]),
        ("SUM WITHOUT (pod) (a)", &["a"]),
        (
            "a > bool 1 and on(job) group_left(x) b offset 5m",
            &["a", "b"],
        ),
        ("a or b unless c", &["a", "b", "c"]),
        ("max_over_time(a[5m:1m]) * 1e3 + .5 - 0x1f", &["a"]),
        ("topk(3, a) / count(b) + Inf - NaN", &["a", "b"]),
        (
            "job:http_requests:rate5m > 1",
            &["job:http_requests:rate5m"],
        ),
        ("a @ start()", &["a"]),
    ];
    for (q, want) in cases {
        assert_eq!(series(q), *want, "{q}");
    }
}

#[test]
fn strings_comments_and_matcher_values_are_skipped() {
    let q = "label_replace(up{a=\"weir_fake\",b='weir_x',c=`weir_y`}, \"dst\", \"weir_z\", \"src\", \"(.*)\") # weir_comment\n+ on(weir_label) b";
    let s = scan(q);
    assert_eq!(s.series, ["up", "b"]);
    assert_eq!(s.labels, ["a", "b", "c", "weir_label"]);
    assert_eq!(series("a{b=\"x\\\"weir_q\"} + c"), ["a", "c"]);
}

#[test]
fn template_actions_do_not_confuse_it() {
    assert_eq!(series("{{ namespace }}"), Vec::<&str>::new());
    assert_eq!(series("x[{{ interval }}] offset {{ interval }}"), ["x"]);
    assert_eq!(series("rate(x{{ variables.sel }}[1m])"), Vec::<&str>::new());
    // A name built by the template is known only once rendered.
    assert_eq!(series("weir_{{ variables.kind }}_total + y"), ["y"]);
    assert_eq!(series("{{- name -}}_total"), Vec::<&str>::new());
    assert_eq!(
        scan("x{ns=\"{{ namespace }}\",pod=~\"{{ target }}-[0-9a-z]+\"}").labels,
        ["ns", "pod"]
    );
}

#[test]
fn bad_text_never_panics() {
    for q in [
        "",
        "\"unclosed",
        "'a\\",
        "{{ unclosed",
        "sum by (le",
        "a[5m",
        "x{a=\"b\"",
        "}}}} ))) ]]]",
        "sum(ä weir_é \"é",
        "é{{é}}é",
        "by",
        "\\",
    ] {
        let _ = scan(q);
        let _ = unknown_weir_series(q);
    }
    assert_eq!(series("sum(ä weir_x)"), ["weir_x"]);
}

#[test]
fn histograms_are_read_through_their_suffixes() {
    for name in [
        "weir_requests_total",
        "weir_request_duration_seconds_bucket",
        "weir_request_duration_seconds_sum",
        "weir_request_duration_seconds_count",
        "weir_canary_duration_seconds_bucket",
        "istio_request_duration_milliseconds_bucket",
        "flagger_canary_status",
    ] {
        assert!(exported(name).is_some(), "{name}");
        assert_eq!(why_not_exported(name), None, "{name}");
    }
    for name in [
        "weir_request_duration_seconds",
        "weir_requests_total_bucket",
        "weir_canary_status_count",
    ] {
        assert!(exported(name).is_none(), "{name}");
    }
    let why = why_not_exported("weir_request_duration_seconds").unwrap();
    assert!(
        why.contains("is a histogram") && why.contains("weir_request_duration_seconds_bucket"),
        "{why}"
    );
}

#[test]
fn an_unknown_weir_series_is_named_with_the_closest_one() {
    let q = "sum(rate(weir_request_total{route=\"{{ target }}\"}[1m])) / sum(weir_upstream_error_total) + weir_requests_total + istio_nope + weir_latency";
    let got = unknown_weir_series(q);
    let names: Vec<&str> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "weir_request_total",
            "weir_upstream_error_total",
            "weir_latency"
        ]
    );
    assert_eq!(
        got[0].1,
        "weir exports no series \"weir_request_total\": did you mean weir_requests_total?"
    );
    assert!(
        got[1]
            .1
            .ends_with("did you mean weir_upstream_errors_total?"),
        "{}",
        got[1].1
    );
    assert!(
        !got[2].1.contains("did you mean") && got[2].1.contains("docs/metrics.md"),
        "{}",
        got[2].1
    );
    // Istio's old name is as far from weir's as from Istio's new one: Istio's is meant.
    assert_eq!(
        closest("istio_request_duration_seconds_bucket").as_deref(),
        Some("istio_request_duration_milliseconds_bucket")
    );
}

#[test]
fn the_list_is_well_formed() {
    let mut seen = std::collections::BTreeSet::new();
    for f in FAMILIES {
        assert!(seen.insert(f.name), "{} twice", f.name);
        assert_eq!(
            f.name.starts_with("weir_"),
            !f.flagger_metrics,
            "{}",
            f.name
        );
        assert_eq!(
            scan(f.name).series,
            [f.name],
            "{} reads as a series",
            f.name
        );
    }
    assert!(queryable().iter().all(|n| exported(n).is_some()));
}
