//! `canaries:` entries: Flagger's `Canary` checked against the table it drives.

use super::*;

/// Defaults and names of `canaries:` the engine shares.
pub mod defaults {
    use std::time::Duration;

    /// Name of the built-in success-rate metric (percent of non-5xx answers).
    pub const SUCCESS_RATE: &str = "request-success-rate";
    /// Name of the built-in latency metric (P99 in milliseconds).
    pub const DURATION: &str = "request-duration";
    /// Name of the built-in judge of the canary against the primary (a score 0..100).
    pub const BASELINE_COMPARISON: &str = "baseline-comparison";
    /// Default `minRequests` of a metric: fewer requests in the window fail the check.
    pub const DEFAULT_MIN_REQUESTS: u64 = 10;
    /// Default webhook timeout (Flagger's).
    pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default failed-checks threshold when `threshold` is not set.
    pub const DEFAULT_THRESHOLD: u32 = 5;
    /// Default analysis interval (Flagger's).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
    /// Default progress deadline of a webhook promotion (Flagger's).
    pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);
}
pub use super::canary_types::*;
use defaults::*;

/// A validated weight or count: in range by the time it is converted.
fn small<T: TryFrom<i64>>(n: i64, fallback: T) -> T {
    T::try_from(n).unwrap_or(fallback)
}

pub(super) fn validate_canaries(
    raw: &[RawCanary],
    table: &RawTable,
    providers: &BTreeMap<String, RawAlertProvider>,
    (templates, raw_templates): (
        &BTreeMap<String, MetricTemplate>,
        &BTreeMap<String, RawMetricTemplate>,
    ),
    base: &Path,
    rules: TableRules,
    errs: &mut Errors,
) -> Vec<CanaryConfig> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut routes_taken = BTreeSet::new();
    for (i, c) in raw.iter().enumerate() {
        let p = format!("canaries[{i}]");
        let before = errs.0.len();
        if !valid_name(&c.name) {
            errs.push(
                format!("{p}.name"),
                "canary names use letters, digits, '-', '_' and '.' only",
            );
        } else if !names.insert(c.name.clone()) {
            errs.push(
                format!("{p}.name"),
                format!("duplicate canary name {:?}", c.name),
            );
        }
        match table.routes.iter().find(|r| r.name == c.route) {
            None => errs.push(format!("{p}.route"), format!("unknown route {:?}", c.route)),
            Some(r) => {
                if r.canary.is_none() {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} has no canary backend", c.route),
                    );
                }
                if !routes_taken.insert(c.route.clone()) {
                    errs.push(
                        format!("{p}.route"),
                        format!("route {:?} is already driven by another canary", c.route),
                    );
                }
            }
        }
        let promotion = match c.promotion.as_deref() {
            None => Promotion::Swap,
            Some(name) => Promotion::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .unwrap_or_else(|| {
                    errs.push(
                        format!("{p}.promotion"),
                        format!("expected swap or webhook (got {name:?})"),
                    );
                    Promotion::Swap
                }),
        };
        for (j, u) in c.data_planes.iter().enumerate() {
            if u.parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|_| ()))
                .is_none()
                || !u.starts_with("http")
            {
                errs.push(
                    format!("{p}.dataPlanes[{j}]"),
                    format!("expected a URL such as http://10.0.0.2:9901 (got {u:?})"),
                );
            }
        }
        let data_plane_ca_file = super::alerts::check_ca_file(
            &format!("{p}.dataPlaneCaFile"),
            &c.data_plane_ca_file,
            base,
            errs,
        );
        let a = &c.analysis;
        let ap = format!("{p}.analysis");
        let interval = errs.duration(&format!("{ap}.interval"), &a.interval, DEFAULT_INTERVAL);
        let progress_deadline = errs.duration(
            &format!("{p}.progressDeadline"),
            &c.progress_deadline,
            DEFAULT_PROGRESS_DEADLINE,
        );
        let threshold = errs.int_in(
            &format!("{ap}.threshold"),
            a.threshold,
            1,
            1000,
            i64::from(DEFAULT_THRESHOLD),
        );
        // The machine reads 0 as "not set" for maxWeight and stepWeight.
        let max_weight = a
            .max_weight
            .map(|_| errs.int_in(&format!("{ap}.maxWeight"), a.max_weight, 1, 100, 50));
        let step_weight = a
            .step_weight
            .map(|_| errs.int_in(&format!("{ap}.stepWeight"), a.step_weight, 1, 100, 10));
        let step_weight_promotion = errs.int_in(
            &format!("{ap}.stepWeightPromotion"),
            a.step_weight_promotion,
            0,
            100,
            0,
        );
        let iterations = errs.int_in(&format!("{ap}.iterations"), a.iterations, 0, 100_000, 0);
        let mirror_weight = a
            .mirror_weight
            .map(|_| errs.int_in(&format!("{ap}.mirrorWeight"), a.mirror_weight, 0, 100, 100));
        let mut last = 0;
        for (j, w) in a.step_weights.iter().enumerate() {
            if *w < 1 {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("must be at least 1 (got {w})"),
                );
            } else if *w <= last {
                errs.push(
                    format!("{ap}.stepWeights[{j}]"),
                    "step weights must increase",
                );
            } else if *w > 100 {
                // Flagger accepts it and never routes more than 100 %; so does weir.
                errs.warn(
                    format!("{ap}.stepWeights[{j}]"),
                    format!("{w} is above 100: capped at 100, as Flagger does"),
                );
            }
            last = *w;
        }
        // Flagger's CRD: `analysis` is oneOf required [iterations], [stepWeight],
        // [stepWeights]; any two of them together are refused there.
        if a.step_weight.is_some() && !a.step_weights.is_empty() {
            errs.push(
                format!("{ap}.stepWeights"),
                "cannot be combined with stepWeight (Flagger's Canary allows one of iterations, stepWeight, stepWeights)",
            );
        }
        if a.iterations.is_some() && (a.step_weight.is_some() || !a.step_weights.is_empty()) {
            let other = if a.step_weight.is_some() {
                "stepWeight"
            } else {
                "stepWeights"
            };
            errs.push(
                format!("{ap}.iterations"),
                format!("cannot be combined with {other} (Flagger's Canary allows one of iterations, stepWeight, stepWeights)"),
            );
        }
        if !a.matches.is_empty() && a.iterations.unwrap_or(0) == 0 {
            errs.push(
                format!("{ap}.iterations"),
                "A/B testing (match) needs iterations > 0",
            );
        }
        if a.mirror == Some(true) && !a.matches.is_empty() {
            errs.push(
                format!("{ap}.mirror"),
                "mirroring cannot be combined with match",
            );
        }
        if a.session_affinity.is_some() && a.iterations.unwrap_or(0) > 0 {
            errs.push(
                format!("{ap}.sessionAffinity"),
                "session affinity works with the canary (weight) strategy, not with iterations",
            );
        }
        let match_rules = compile_matches(&format!("{ap}.match"), &a.matches, errs);
        if let Some(sa) = &a.session_affinity {
            compile_affinity(&format!("{ap}.sessionAffinity"), sa, errs);
        }
        let mut metric_names = BTreeSet::new();
        let mut metrics = Vec::new();
        for (j, m) in a.metrics.iter().enumerate() {
            let mp = format!("{ap}.metrics[{j}]");
            if !metric_names.insert(m.name.clone()) {
                errs.push(
                    format!("{mp}.name"),
                    format!("duplicate metric {:?}", m.name),
                );
            }
            let metric_interval = errs.duration(&format!("{mp}.interval"), &m.interval, interval);
            let vars = crate::config::template::TemplateVars {
                name: c.name.clone(),
                namespace: crate::config::template::NAMESPACE.to_string(),
                target: c.route.clone(),
                interval: crate::config::template::prometheus_duration(metric_interval),
                variables: m.template_variables.clone(),
                // Known at each check; any value shows that the template renders.
                run_start: "0".to_string(),
                run_age: crate::config::template::prometheus_duration(metric_interval),
            };
            let resolved = use_template(&mp, m, templates, raw_templates, &vars, errs);
            if m.template_ref.is_none() && m.query.is_none() && !m.template_variables.is_empty() {
                errs.push(
                    format!("{mp}.templateVariables"),
                    "only a metric with a templateRef or a query uses templateVariables",
                );
            }
            let kind = match (&m.query, &m.prometheus_url) {
                _ if m.template_ref.is_some() => resolved.as_ref().map(|r| r.kind.clone()),
                (Some(query), Some(url)) => {
                    check_inline_query(&mp, query, &vars, errs);
                    super::alerts::check_url(&format!("{mp}.prometheusUrl"), url, errs);
                    Some(MetricKind::Prometheus {
                        url: url.trim_end_matches('/').to_string(),
                        query: query.clone(),
                    })
                }
                (Some(query), None) => {
                    check_inline_query(&mp, query, &vars, errs);
                    errs.push(
                        format!("{mp}.prometheusUrl"),
                        "a custom query needs the Prometheus server URL",
                    );
                    None
                }
                (None, _) => {
                    let kind = MetricKind::builtin(&m.name);
                    if kind.is_none() {
                        let names: Vec<&str> =
                            MetricKind::BUILTIN.iter().map(|(n, _)| *n).collect();
                        errs.push(
                            format!("{mp}.query"),
                            format!(
                                "metric {:?} is not built in ({}); a custom metric needs a query",
                                m.name,
                                names.join(", ")
                            ),
                        );
                    }
                    kind
                }
            };
            match &m.threshold_range {
                // A judge compares against the primary when no threshold is given.
                None if m.judge.is_some() => {}
                None => errs.push(format!("{mp}.thresholdRange"), "required (min and/or max)"),
                Some(t) => {
                    if t.min.is_none() && t.max.is_none() {
                        errs.push(format!("{mp}.thresholdRange"), "set min and/or max");
                    }
                    if let (Some(lo), Some(hi)) = (t.min, t.max) {
                        if lo > hi {
                            errs.push(
                                format!("{mp}.thresholdRange"),
                                format!("min {lo} is above max {hi}"),
                            );
                        }
                    }
                }
            }
            let kind = match (kind, &m.compare) {
                (Some(MetricKind::BaselineComparison(_)), compare) => {
                    if m.min_requests.is_some() && m.judge.is_none() {
                        errs.push(
                            format!("{mp}.minRequests"),
                            "baseline-comparison counts requests per side: set compare.minRequests",
                        );
                    }
                    if m.judge.is_none()
                        && m.threshold_range.as_ref().is_some_and(|t| t.min.is_none())
                    {
                        errs.push(
                            format!("{mp}.thresholdRange.min"),
                            "baseline-comparison needs min: the pass score, 0..100",
                        );
                    }
                    let params = match compare {
                        Some(c) if m.judge.is_none() => {
                            compile_compare(&format!("{mp}.compare"), c, errs)
                        }
                        _ => crate::stats::compare::CompareParams::DEFAULT,
                    };
                    Some(MetricKind::BaselineComparison(params))
                }
                (kind, Some(_)) => {
                    errs.push(
                        format!("{mp}.compare"),
                        format!("compare is only for the {BASELINE_COMPARISON:?} metric"),
                    );
                    kind
                }
                (kind, None) => kind,
            };
            let min_requests = errs.int_in(
                &format!("{mp}.minRequests"),
                m.min_requests,
                0,
                1_000_000_000,
                DEFAULT_MIN_REQUESTS as i64,
            );
            let judge = super::judge::compile_judge(
                &mp,
                m,
                small(min_requests, DEFAULT_MIN_REQUESTS),
                errs,
            );
            if let Some(kind) = kind {
                metrics.push(CanaryMetric {
                    judge,
                    name: m.name.clone(),
                    kind,
                    min: m.threshold_range.as_ref().and_then(|t| t.min),
                    max: m.threshold_range.as_ref().and_then(|t| t.max),
                    interval: metric_interval,
                    min_requests: small(min_requests, DEFAULT_MIN_REQUESTS),
                    ca_file: match &resolved {
                        Some(r) => r.ca_file.clone(),
                        None => super::alerts::check_ca_file(
                            &format!("{mp}.caFile"),
                            &m.ca_file,
                            base,
                            errs,
                        ),
                    },
                    dry_run: m.dry_run.unwrap_or(false),
                    template: resolved.as_ref().and_then(|r| r.template.clone()),
                    variables: m.template_variables.clone(),
                    token: resolved.as_ref().and_then(|r| r.token.clone()),
                    headers: resolved
                        .as_ref()
                        .map(|r| r.headers.clone())
                        .unwrap_or_default(),
                });
            }
        }
        let mut hook_names = BTreeSet::new();
        let mut webhooks = Vec::new();
        for (j, w) in a.webhooks.iter().enumerate() {
            let wp = format!("{ap}.webhooks[{j}]");
            if !hook_names.insert(w.name.clone()) {
                errs.push(
                    format!("{wp}.name"),
                    format!("duplicate webhook {:?}", w.name),
                );
            }
            let kind = match w.kind.as_deref() {
                None => Some(HookKind::Rollout),
                Some(name) => {
                    let kind = HookKind::parse(name);
                    if kind.is_none() {
                        let names: Vec<&str> = HookKind::ALL.iter().map(|k| k.name()).collect();
                        errs.push(
                            format!("{wp}.type"),
                            format!(
                                "unknown webhook type {name:?}; expected one of {}",
                                names.join(", ")
                            ),
                        );
                    }
                    kind
                }
            };
            if kind == Some(HookKind::Promote) && promotion != Promotion::Webhook {
                errs.push(
                    format!("{wp}.type"),
                    "a promote hook needs promotion: webhook",
                );
            }
            super::alerts::check_secret_url(&format!("{wp}.url"), &w.url, errs);
            let ca_file =
                super::alerts::check_ca_file(&format!("{wp}.caFile"), &w.ca_file, base, errs);
            let timeout = errs.duration(&format!("{wp}.timeout"), &w.timeout, DEFAULT_HOOK_TIMEOUT);
            let retries = errs.int_in(&format!("{wp}.retries"), w.retries, 0, 10, 0);
            if let Some(kind) = kind {
                webhooks.push(CanaryWebhook {
                    name: w.name.clone(),
                    kind,
                    url: w.url.clone(),
                    timeout,
                    retries: small(retries, 0),
                    metadata: w.metadata.clone(),
                    mute_alert: w.mute_alert.unwrap_or(false),
                    ca_file,
                });
            }
        }
        if promotion == Promotion::Webhook && !webhooks.iter().any(|w| w.kind == HookKind::Promote)
        {
            errs.push(
                format!("{p}.promotion"),
                "promotion: webhook needs a webhook of type promote",
            );
        }
        // The canary strategy moves by stepWeight or stepWeights; without either a run
        // could never leave weight 0 (A/B and blue/green move by iterations).
        if c.skip_analysis != Some(true)
            && a.iterations.unwrap_or(0) == 0
            && a.step_weight.is_none()
            && a.step_weights.is_empty()
        {
            errs.push(
                format!("{ap}.stepWeight"),
                "set stepWeight or stepWeights (canary strategy), or iterations (A/B, blue/green)",
            );
        }
        // Revisions are read from the slots' revisionPath: both slots, since a swap
        // exchanges them. With providers.docker, from the containers' labels.
        if let Some(r) = table.routes.iter().find(|r| r.name == c.route) {
            let needs = |why: &str, slot: &str, errs: &mut Errors| {
                let has = table.backends.get(slot).is_some_and(|b| {
                    b.revision_path.is_some()
                        || (rules.docker_provider && b.provider.as_deref() == Some("docker"))
                });
                if !has && table.backends.contains_key(slot) {
                    errs.push(
                        format!("{p}.{why}"),
                        format!(
                            "backend {slot:?} of route {:?} needs a revisionPath (or `provider: docker`: the revision is then its containers' label)",
                            r.name
                        ),
                    );
                }
            };
            let mut slots = vec![r.primary.clone()];
            slots.extend(r.canary.clone());
            if c.watch_revision == Some(true) {
                for s in &slots {
                    needs("watchRevision", s, errs);
                }
            }
            if promotion == Promotion::Webhook {
                for s in &slots {
                    needs("promotion", s, errs);
                }
            }
        }
        let data_plane_token = match &c.data_plane_token_file {
            None => None,
            Some(f) => match std::fs::read_to_string(base.join(f)) {
                Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
                Ok(_) => {
                    errs.push(format!("{p}.dataPlaneTokenFile"), "the token file is empty");
                    None
                }
                Err(e) => {
                    errs.push(
                        format!("{p}.dataPlaneTokenFile"),
                        format!("cannot read {f}: {e}"),
                    );
                    None
                }
            },
        };
        let alerts = super::alerts::validate_alerts(&ap, &a.alerts, providers, errs);
        if errs.0.len() == before {
            out.push(CanaryConfig {
                raw: c.clone(),
                name: c.name.clone(),
                route: c.route.clone(),
                watch_revision: c.watch_revision.unwrap_or(false),
                skip_analysis: c.skip_analysis.unwrap_or(false),
                promotion,
                interval,
                progress_deadline,
                data_planes: c
                    .data_planes
                    .iter()
                    .map(|u| u.trim_end_matches('/').to_string())
                    .collect(),
                data_plane_token,
                data_plane_ca_file,
                alerts,
                analysis: CanaryAnalysis {
                    threshold: small(threshold, DEFAULT_THRESHOLD),
                    max_weight: max_weight.map_or(0, |w| small(w, 100)),
                    step_weight: step_weight.map_or(0, |w| small(w, 100)),
                    // Above 100 was a warning: capped, as Flagger does.
                    step_weights: a
                        .step_weights
                        .iter()
                        .map(|w| small((*w).clamp(0, 100), 100))
                        .collect(),
                    step_weight_promotion: small(step_weight_promotion, 0),
                    iterations: small(iterations, 0),
                    matches: CanaryMatches {
                        raw: a.matches.clone(),
                        rules: match_rules,
                    },
                    mirror: a.mirror.unwrap_or(false),
                    mirror_weight: mirror_weight.map(|w| small(w, 100)),
                    session_affinity: a.session_affinity.clone(),
                    metrics,
                    webhooks,
                },
            });
        }
    }
    out
}

/// `compare:` of `baseline-comparison`, every field checked (errors with paths).
fn compile_compare(
    path: &str,
    c: &crate::config::raw::RawCompare,
    errs: &mut Errors,
) -> crate::stats::compare::CompareParams {
    let mut params = crate::stats::compare::CompareParams::DEFAULT;
    if let Some(against) = &c.against {
        if against != "primary" {
            errs.push(
                format!("{path}.against"),
                format!("unknown baseline {against:?}; expected primary"),
            );
        }
    }
    if let Some(conf) = c.confidence {
        if conf.is_finite() && conf > 0.5 && conf < 1.0 {
            params.confidence = conf;
        } else {
            errs.push(
                format!("{path}.confidence"),
                format!("{conf} is not a confidence between 0.5 and 1 (exclusive)"),
            );
        }
    }
    let min = errs.int_in(
        &format!("{path}.minRequests"),
        c.min_requests,
        1,
        1_000_000_000,
        params.min_requests as i64,
    );
    params.min_requests = u64::try_from(min).unwrap_or(params.min_requests);
    for (name, side, slot) in [
        ("latency", &c.latency, &mut params.latency_allowed_increase),
        ("errors", &c.errors, &mut params.errors_allowed_increase),
    ] {
        if let Some(v) = side.as_ref().and_then(|s| s.allowed_increase) {
            if v.is_finite() && v >= 1.0 {
                *slot = v;
            } else {
                errs.push(
                    format!("{path}.{name}.allowedIncrease"),
                    format!("{v} is not a ratio of at least 1 (canary ÷ primary)"),
                );
            }
        }
    }
    params
}
