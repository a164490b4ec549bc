//! Warnings for fields weir accepts but that change nothing where they are
//! written. Each one says why it is ignored; each is true of what the engine
//! and the proxy do today (the rule is next to the code it describes in the
//! comments below), so a user who sees no warning knows every field counts.

use super::*;

/// Pushes a warning for every accepted field that has no effect.
pub(super) fn warn_ignored(raw: &RawConfig, errs: &mut Errors) {
    for (i, r) in raw.routes.iter().enumerate() {
        let p = format!("routes[{i}]");
        // decide() pins a client only to a canary; without one there is nothing to pin to.
        if r.canary.is_none() && r.session_affinity.is_some() {
            errs.warn(
                format!("{p}.sessionAffinity"),
                "ignored: the route has no canary backend, so there is nothing to pin clients to",
            );
        }
    }
    for (i, c) in raw.canaries.iter().enumerate() {
        warn_canary(&format!("canaries[{i}]"), c, errs);
    }
    for (name, a) in &raw.alert_providers {
        let p = join_key("alertProviders", name);
        // rollout/alerts/payload.rs: only Slack and Rocket.Chat carry a channel;
        // Slack, Discord and Rocket.Chat a sender name.
        let kind = a.kind.as_str();
        if a.channel.is_some() && !matches!(kind, "slack" | "rocket") {
            errs.warn(
                format!("{p}.channel"),
                format!("ignored: a {kind} message has no channel (only slack and rocket use it)"),
            );
        }
        if a.username.is_some() && !matches!(kind, "slack" | "discord" | "rocket") {
            errs.warn(
                format!("{p}.username"),
                format!("ignored: a {kind} message has no sender name (only slack, discord and rocket use it)"),
            );
        }
    }
}

fn warn_canary(p: &str, c: &RawCanary, errs: &mut Errors) {
    let ap = format!("{p}.analysis");
    let a = &c.analysis;
    let webhook = c.promotion.as_deref() == Some("webhook");
    // The machine's swap is one table change; only the webhook promotion walks
    // the weight back by stepWeightPromotion and waits within progressDeadline.
    if !webhook {
        if a.step_weight_promotion.is_some() {
            errs.warn(
                format!("{ap}.stepWeightPromotion"),
                "ignored with `promotion: swap`: the swap moves all traffic in one step (it applies to `promotion: webhook`)",
            );
        }
        if c.progress_deadline.is_some() {
            errs.warn(
                format!("{p}.progressDeadline"),
                "ignored with `promotion: swap`: only a webhook promotion waits for the primary",
            );
        }
    }
    // Accepted so that Flagger's analysis blocks paste unchanged; weir gates on
    // its own health checks (DESIGN §7), never on a ready percentage.
    for (field, v) in [
        ("primaryReadyThreshold", a.primary_ready_threshold),
        ("canaryReadyThreshold", a.canary_ready_threshold),
    ] {
        if v.is_some() {
            errs.warn(
                format!("{ap}.{field}"),
                "ignored: accepted for Flagger compatibility; weir sends traffic only to endpoints whose health checks pass",
            );
        }
    }
    // muteAlert only filters this canary's alerts; with none there is nothing to mute.
    if a.alerts.is_empty() {
        for (j, w) in a.webhooks.iter().enumerate() {
            if w.mute_alert == Some(true) {
                errs.warn(
                    format!("{ap}.webhooks[{j}].muteAlert"),
                    "ignored: the canary has no `analysis.alerts`, so no alert is sent to mute",
                );
            }
        }
    }
    // The machine reads mirrorWeight only while it mirrors.
    if a.mirror_weight.is_some() && a.mirror != Some(true) {
        errs.warn(
            format!("{ap}.mirrorWeight"),
            "ignored without `mirror: true`",
        );
    }
    // spec.max_weight(): the last of stepWeights is the top; the A/B and
    // blue/green strategies never read a weight.
    if a.max_weight.is_some() {
        if !a.step_weights.is_empty() {
            errs.warn(
                format!("{ap}.maxWeight"),
                "ignored with stepWeights: the last step weight is the maximum",
            );
        } else if a.iterations.is_some_and(|n| n > 0) && a.step_weight.is_none() {
            errs.warn(
                format!("{ap}.maxWeight"),
                "ignored with iterations: A/B testing and blue/green move no weight",
            );
        }
    }
    // rollout/metrics.rs: minRequests gates the proxy's own windows; a Prometheus
    // query is judged on what it returns.
    for (j, m) in a.metrics.iter().enumerate() {
        if m.query.is_some() && m.min_requests.is_some() {
            errs.warn(
                format!("{ap}.metrics[{j}].minRequests"),
                "ignored for a Prometheus query: it counts the proxy's own requests of the built-in metrics",
            );
        }
    }
    if c.data_planes.is_empty() {
        for (field, set) in [
            ("dataPlaneTokenFile", c.data_plane_token_file.is_some()),
            ("dataPlaneCaFile", c.data_plane_ca_file.is_some()),
        ] {
            if set {
                errs.warn(
                    format!("{p}.{field}"),
                    "ignored: no `dataPlanes` are listed, the canary drives this process",
                );
            }
        }
    }
    if let Some(sa) = &a.session_affinity {
        if sa.primary_max_age.is_some() && sa.primary_cookie_name.is_none() {
            errs.warn(
                format!("{ap}.sessionAffinity.primaryMaxAge"),
                "ignored without `primaryCookieName`: no primary cookie is set",
            );
        }
    }
}
