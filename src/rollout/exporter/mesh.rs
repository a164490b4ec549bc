//! With `admin.flaggerMetrics`, the request series of every canary's route again under
//! Istio's names and labels, so the request panels of Flagger's Grafana dashboard
//! (`charts/grafana/dashboards/istio.json` in fluxcd/flagger: request volume, success
//! rate, P50/P90/P99, incoming requests by source and code) work against weir unchanged.
//!
//! They are derived at scrape time from weir's own `weir_requests_total` and
//! `weir_request_duration_seconds` lines already rendered into the scrape, so the request
//! path records nothing twice. A route's primary is the workload `<canary>-primary` and its
//! canary `<canary>` (Flagger's names, as `flagger_canary_weight` has them); a slot swap
//! moves a backend between the two, and the series of the backends that served a role are
//! summed, as a mesh sees one workload whatever its version. Mirrored copies are left out
//! (a mesh reports them on the shadow's own workload, which weir has none of).

use crate::dataplane::metrics::label_value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Namespace of every Istio label (weir has none; Flagger's dashboards need one).
const NAMESPACE: &str = "default";

/// One `name{labels} value` line of the exposition format.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// Parses a sample line; `None` for comments and anything this module does not read.
fn parse(line: &str) -> Option<Sample<'_>> {
    let open = line.find('{')?;
    let name = &line[..open];
    let mut labels = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(r) = rest.strip_prefix('}') {
            rest = r;
            break;
        }
        let eq = rest.find("=\"")?;
        let key = &rest[..eq];
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key, value));
        rest = &rest[eq + 2 + end + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

fn label<'a>(s: &'a Sample<'_>, key: &str) -> Option<&'a str> {
    s.labels
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// The Istio workload of a weir role on a canary's route.
fn workload(canary: &str, role: &str) -> Option<String> {
    match role {
        "primary" => Some(format!("{canary}-primary")),
        "canary" => Some(canary.to_string()),
        _ => None,
    }
}

/// The labels every Istio request series carries here, as one rendered string.
fn istio_labels(route: &str, workload: &str, code: Option<&str>) -> String {
    let mut l = format!(
        "reporter=\"destination\",source_workload=\"weir\",source_workload_namespace=\"{NAMESPACE}\",\
         destination_workload=\"{}\",destination_workload_namespace=\"{NAMESPACE}\",\
         destination_service=\"{}\",connection_security_policy=\"none\"",
        label_value(workload),
        label_value(route)
    );
    if let Some(code) = code {
        let _ = write!(l, ",response_code=\"{}\"", label_value(code));
    }
    l
}

/// A bucket bound in milliseconds, ordered with `+Inf` last.
fn le_ms(le: &str) -> Option<(f64, String)> {
    if le == "+Inf" {
        return Some((f64::INFINITY, "+Inf".to_string()));
    }
    let s: f64 = le.parse().ok()?;
    let ms = s * 1000.0;
    Some((ms, format!("{}", (ms * 1e6).round() / 1e6)))
}

/// Appends `istio_requests_total` and `istio_request_duration_milliseconds` for the routes
/// in `routes` (route → canary), read from the weir series already in `scrape`.
pub fn render(routes: &BTreeMap<String, String>, scrape: &str, out: &mut String) {
    if routes.is_empty() {
        return;
    }
    let mut requests: BTreeMap<String, f64> = BTreeMap::new();
    // labels → (bound in ms → (rendered bound, cumulative count)), sum in ms, count
    type Buckets = BTreeMap<u64, (String, f64)>;
    let mut hist: BTreeMap<String, (Buckets, f64, f64)> = BTreeMap::new();
    for line in scrape.lines() {
        if !line.starts_with("weir_request") {
            continue;
        }
        let Some(s) = parse(line) else { continue };
        let (Some(route), Some(role)) = (label(&s, "route"), label(&s, "role")) else {
            continue;
        };
        let Some(canary) = routes.get(route) else {
            continue;
        };
        let Some(w) = workload(canary, role) else {
            continue;
        };
        match s.name {
            "weir_requests_total" => {
                let key = istio_labels(route, &w, label(&s, "code"));
                *requests.entry(key).or_default() += s.value;
            }
            "weir_request_duration_seconds_bucket" => {
                let Some((ms, text)) = label(&s, "le").and_then(le_ms) else {
                    continue;
                };
                let e = hist.entry(istio_labels(route, &w, None)).or_default();
                // f64 bounds ordered through their bits: all are positive or +Inf.
                let b = e.0.entry(ms.to_bits()).or_insert((text, 0.0));
                b.1 += s.value;
            }
            "weir_request_duration_seconds_sum" => {
                hist.entry(istio_labels(route, &w, None)).or_default().1 += s.value * 1000.0;
            }
            "weir_request_duration_seconds_count" => {
                hist.entry(istio_labels(route, &w, None)).or_default().2 += s.value;
            }
            _ => {}
        }
    }
    if !requests.is_empty() {
        out.push_str("# HELP istio_requests_total Requests of a canary's route under Istio's names (admin.flaggerMetrics).\n");
        out.push_str("# TYPE istio_requests_total counter\n");
        for (labels, v) in &requests {
            let _ = writeln!(out, "istio_requests_total{{{labels}}} {v}");
        }
    }
    if !hist.is_empty() {
        let name = "istio_request_duration_milliseconds";
        let _ = writeln!(out, "# HELP {name} Latency of a canary's route under Istio's names, in ms (admin.flaggerMetrics).");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (labels, (buckets, sum, count)) in &hist {
            for (le, v) in buckets.values() {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {v}");
            }
            let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
            let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# TYPE weir_requests_total counter
weir_requests_total{route="app",role="primary",backend="app-blue",code="200"} 7
weir_requests_total{route="app",role="primary",backend="app-green",code="200"} 3
weir_requests_total{route="app",role="canary",backend="app-green",code="500"} 2
weir_requests_total{route="app",role="mirror",backend="app-green",code="200"} 5
weir_requests_total{route="other",role="primary",backend="x",code="200"} 9
weir_request_duration_seconds_bucket{route="app",role="canary",backend="app-green",le="0.0005"} 1
weir_request_duration_seconds_bucket{route="app",role="canary",backend="app-green",le="0.25"} 2
weir_request_duration_seconds_bucket{route="app",role="canary",backend="app-green",le="+Inf"} 2
weir_request_duration_seconds_sum{route="app",role="canary",backend="app-green"} 0.1005
weir_request_duration_seconds_count{route="app",role="canary",backend="app-green"} 2
"#;

    fn routes() -> BTreeMap<String, String> {
        [("app".to_string(), "podinfo".to_string())].into()
    }

    #[test]
    fn a_canarys_route_is_exported_under_istios_names_summed_over_backends() {
        let mut out = String::new();
        render(&routes(), SCRAPE, &mut out);
        let primary = istio_labels("app", "podinfo-primary", Some("200"));
        assert!(
            out.contains(&format!("istio_requests_total{{{primary}}} 10\n")),
            "{out}"
        );
        let canary = istio_labels("app", "podinfo", Some("500"));
        assert!(
            out.contains(&format!("istio_requests_total{{{canary}}} 2\n")),
            "{out}"
        );
        assert!(!out.contains("route=\"other\"") && !out.contains("destination_service=\"other\""));
        // The mirror's 5 copies are nobody's workload.
        assert_eq!(out.matches("istio_requests_total{").count(), 2, "{out}");
        let h = istio_labels("app", "podinfo", None);
        for want in [
            format!("istio_request_duration_milliseconds_bucket{{{h},le=\"0.5\"}} 1\n"),
            format!("istio_request_duration_milliseconds_bucket{{{h},le=\"250\"}} 2\n"),
            format!("istio_request_duration_milliseconds_bucket{{{h},le=\"+Inf\"}} 2\n"),
            format!("istio_request_duration_milliseconds_sum{{{h}}} 100.5\n"),
            format!("istio_request_duration_milliseconds_count{{{h}}} 2\n"),
        ] {
            assert!(out.contains(&want), "missing {want} in\n{out}");
        }
        // Buckets in ascending order, +Inf last.
        let a = out.find("le=\"0.5\"").unwrap();
        let b = out.find("le=\"250\"").unwrap();
        let c = out.find("le=\"+Inf\"").unwrap();
        assert!(a < b && b < c, "{out}");
    }

    #[test]
    fn nothing_without_canary_routes_and_odd_lines_are_skipped() {
        let mut out = String::new();
        render(&BTreeMap::new(), SCRAPE, &mut out);
        assert!(out.is_empty());
        let odd = "weir_requests_total{route=\"app\",role=\"primary\" 1\nweir_requests_total{route=\"a\\\"pp\",role=\"canary\",code=\"200\"} x\n";
        render(&routes(), odd, &mut out);
        assert!(out.is_empty(), "{out}");
    }

    #[test]
    fn label_values_with_escapes_are_read_back() {
        let s = parse(r#"weir_requests_total{route="a\"b\\c",role="canary"} 4"#).unwrap();
        assert_eq!(label(&s, "route"), Some("a\"b\\c"));
        assert_eq!(s.value, 4.0);
    }
}
