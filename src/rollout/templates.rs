//! What the template variables of a metric are in weir, and the rendering of a
//! check's query, URL and headers with them (the syntax is `crate::config::template`).
//!
//! - `{{ name }}`: the canary's name.
//! - `{{ namespace }}`: `default` (weir has no namespaces; Flagger's queries expect one).
//! - `{{ target }}`: the canary's **route**. In Flagger it is `spec.targetRef.name`, the
//!   workload whose traffic shifts; in weir the thing whose traffic shifts, and the label
//!   every request series carries (`weir_requests_total{route=…}`, and `destination_service`
//!   of the Istio-named series), is the route. `{{ service }}`, `{{ ingress }}` and
//!   `{{ route }}` are the route as well (Flagger defaults all three to the target).
//! - `{{ interval }}`: the metric's interval as a Prometheus duration (`1m`, `30s`).
//! - `{{ variables.X }}`: the metric's `templateVariables`.
//!
//! All of these are known when the config loads and validation renders every template
//! with them once, so rendering here cannot fail on a loaded config; should it, the
//! check fails with the reason (never a half-rendered query sent, never a pass).

use std::time::Duration;

use super::convert::{CanaryDef, MetricSource, NAMESPACE};
use super::spec::MetricSpec;
use crate::config::template;
pub use crate::config::template::TemplateVars;

/// The values of `metric`'s template variables.
pub fn vars(
    def: &CanaryDef,
    metric: &MetricSpec,
    source: &MetricSource,
    run_start_ms: Option<u64>,
    now_ms: u64,
) -> TemplateVars {
    let start = run_start_ms.unwrap_or(now_ms).min(now_ms);
    let age = Duration::from_millis(now_ms - start).max(Duration::from_secs(1));
    TemplateVars {
        name: def.spec.name.clone(),
        namespace: NAMESPACE.to_string(),
        target: def.route.clone(),
        interval: template::prometheus_duration(Duration::from_millis(metric.interval_ms)),
        variables: source.variables.clone(),
        run_start: (start / 1000).to_string(),
        // Whole seconds: PromQL reads `37s`, not `37250ms`, in every version.
        run_age: template::prometheus_duration(Duration::from_secs(age.as_secs().max(1))),
    }
}

/// Renders `src` for this check; the error names the template (or the query).
pub fn render(src: &str, vars: &TemplateVars, source: &MetricSource) -> Result<String, String> {
    template::render(src, vars).map_err(|e| label(source, &format!("cannot render: {e}")))
}

/// `reason`, prefixed with the template's name when the metric uses one, so a failed
/// check says which template's provider failed.
pub fn label(source: &MetricSource, reason: &str) -> String {
    match &source.template {
        Some(t) => format!("template {t}: {reason}"),
        None => reason.to_string(),
    }
}

/// The request headers of the provider: `Authorization: Bearer` from its `tokenFile`,
/// then its `headers`, rendered.
pub fn provider_headers<'a>(
    source: &'a MetricSource,
    vars: &TemplateVars,
) -> Result<Vec<(&'a str, String)>, String> {
    let mut out: Vec<(&'a str, String)> = source
        .token
        .iter()
        .map(|t| ("authorization", format!("Bearer {}", t.0)))
        .collect();
    for (k, v) in &source.headers {
        out.push((k.as_str(), render(v, vars, source)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MetricKind;
    use std::collections::BTreeMap;

    fn def() -> CanaryDef {
        let cfg = crate::config::parse_yaml(
            "backends:\n  a: {endpoints: [\"127.0.0.1:1\"]}\n  b: {endpoints: [\"127.0.0.1:2\"]}\nroutes:\n  - {name: web, primary: a, canary: b}\ncanaries:\n  - name: app\n    route: web\n    analysis:\n      stepWeight: 10\n      metrics:\n        - {name: request-success-rate, thresholdRange: {min: 99}}\n",
            "t.yaml",
            std::path::Path::new("."),
        )
        .unwrap();
        super::super::canary_def(&cfg.canaries[0])
    }

    fn source(template: Option<&str>) -> MetricSource {
        MetricSource {
            kind: MetricKind::SuccessRate,
            min_requests: 0,
            template: template.map(String::from),
            variables: BTreeMap::from([("code".to_string(), "5..".to_string())]),
            token: Some(crate::config::Secret("t0k".into())),
            headers: Vec::new(),
        }
    }

    #[test]
    fn a_checks_variables_are_its_canary_route_interval_and_template_variables() {
        let m = MetricSpec {
            name: "errors".into(),
            min: None,
            max: Some(1.0),
            interval_ms: 90_000,
            dry_run: false,
            ..Default::default()
        };
        let v = vars(
            &def(),
            &m,
            &source(None),
            Some(1_796_187_600_900),
            1_796_187_637_500,
        );
        assert_eq!(
            render("{{ runStart }} {{ runAge }}", &v, &source(None)),
            Ok("1796187600 36s".to_string())
        );
        // Younger than a second, or no run: a range PromQL accepts.
        let young = vars(&def(), &m, &source(None), Some(5_000), 5_200);
        assert_eq!(young.run_age, "1s");
        assert_eq!(vars(&def(), &m, &source(None), None, 9_000).run_start, "9");
        assert_eq!(
            render(
                "{{ name }}/{{ namespace }}/{{ target }}/{{ service }}/{{ interval }}/{{ variables.code }}",
                &v,
                &source(None)
            ),
            Ok("app/default/web/web/90s/5..".to_string())
        );
        let e = render("{{ variables.nope }}", &v, &source(Some("err-rate"))).unwrap_err();
        assert_eq!(
            e,
            "template err-rate: cannot render: {{ variables.nope }} is not set in templateVariables"
        );
        let mut src = source(None);
        src.headers = vec![(
            "X-Scope-OrgID".into(),
            "{{ name }}-{{ variables.code }}".into(),
        )];
        assert_eq!(
            provider_headers(&src, &v),
            Ok(vec![
                ("authorization", "Bearer t0k".to_string()),
                ("X-Scope-OrgID", "app-5..".to_string())
            ])
        );
    }
}
