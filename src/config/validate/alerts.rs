//! `alertProviders:` and `analysis.alerts`: where notifications go and which events each
//! alert sends (Flagger's `AlertProvider` and `CanaryAlert`). Also the URL and CA-file
//! checks every configured `http(s)://` target shares.

use super::*;
use std::path::PathBuf;

/// Default timeout of one delivery attempt.
pub const DEFAULT_ALERT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default extra attempts after a failed delivery.
pub const DEFAULT_ALERT_RETRIES: u32 = 3;

/// The chat service or receiver a provider posts to; each has its own JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Slack incoming webhook (attachments).
    Slack,
    /// Microsoft Teams through a Workflows webhook (an Adaptive Card).
    Msteams,
    /// Discord webhook (embeds).
    Discord,
    /// Rocket.Chat incoming webhook.
    Rocket,
    /// Google Chat space webhook (cardsV2).
    Gchat,
    /// Flagger's event-webhook JSON plus weir's weights, checks and reason.
    Generic,
}

impl ProviderKind {
    /// Every kind, in the order of the docs.
    pub const ALL: [ProviderKind; 6] = [
        ProviderKind::Slack,
        ProviderKind::Msteams,
        ProviderKind::Discord,
        ProviderKind::Rocket,
        ProviderKind::Gchat,
        ProviderKind::Generic,
    ];

    /// The `type:` of the config.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Slack => "slack",
            ProviderKind::Msteams => "msteams",
            ProviderKind::Discord => "discord",
            ProviderKind::Rocket => "rocket",
            ProviderKind::Gchat => "gchat",
            ProviderKind::Generic => "generic",
        }
    }
}

/// A notification's importance; an alert of severity S sends events of severity ≥ S.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Every notified event.
    #[default]
    Info,
    /// Failures and waiting for approval.
    Warn,
    /// Failures only.
    Error,
}

impl Severity {
    /// The config word.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        }
    }
}

/// A webhook URL or other secret: never printed by `Debug`, never serialised.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One `alertProviders:` entry, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertProvider {
    /// Its key in `alertProviders`.
    pub name: String,
    /// Which JSON it gets.
    pub kind: ProviderKind,
    /// The URL posted to (from `address` or `addressFile`).
    pub address: Secret,
    /// Slack / Rocket.Chat channel (default `general`).
    pub channel: String,
    /// Sender name (default `weir`).
    pub username: String,
    /// CA certificates to trust for `https://`; `None`: the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// Bound on one attempt.
    pub timeout: Duration,
    /// Extra attempts after a failure.
    pub retries: u32,
}

/// One `analysis.alerts` entry, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertRule {
    /// The alert's name.
    pub name: String,
    /// Lowest severity it sends.
    pub severity: Severity,
    /// Key in `alertProviders` (checked to exist).
    pub provider: String,
}

/// Checks an `http://` or `https://` URL with a host.
pub(super) fn check_url(path: &str, url: &str, errs: &mut Errors) -> bool {
    let ok = url
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !ok {
        errs.push(
            path,
            format!("expected an http:// or https:// URL (got {url:?})"),
        );
    }
    ok
}

/// [`check_url`] for a URL that may hold a secret (a webhook's): the message shows
/// it as `scheme://host/…` only.
pub(super) fn check_secret_url(path: &str, url: &str, errs: &mut Errors) -> bool {
    let ok = url
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !ok {
        errs.push(
            path,
            format!(
                "expected an http:// or https:// URL (got {})",
                crate::text::redact_url(url)
            ),
        );
    }
    ok
}

/// Resolves a `caFile` against the config's directory and checks it holds CA certificates.
pub(super) fn check_ca_file(
    path: &str,
    file: &Option<String>,
    base: &Path,
    errs: &mut Errors,
) -> Option<PathBuf> {
    let f = base.join(file.as_ref()?);
    if let Err(e) = crate::config::tls::load_ca_file(&f) {
        errs.push(path, e);
    }
    Some(f)
}

pub(super) fn validate_alert_providers(
    raw: &BTreeMap<String, RawAlertProvider>,
    base: &Path,
    errs: &mut Errors,
) -> BTreeMap<String, AlertProvider> {
    let mut out = BTreeMap::new();
    for (name, r) in raw {
        let p = join_key("alertProviders", name);
        let before = errs.0.len();
        if !valid_name(name) {
            errs.push(
                &p,
                "provider names use letters, digits, '-', '_' and '.' only",
            );
        }
        let kind = ProviderKind::ALL.into_iter().find(|k| k.name() == r.kind);
        if kind.is_none() {
            let names: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.name()).collect();
            errs.push(
                format!("{p}.type"),
                format!("expected one of {} (got {:?})", names.join(", "), r.kind),
            );
        }
        // The address itself is never put in a message: it is a secret.
        let address = match (&r.address, &r.address_file) {
            (Some(_), Some(_)) => {
                errs.push(
                    format!("{p}.address"),
                    "set address or addressFile, not both",
                );
                None
            }
            (None, None) => {
                errs.push(format!("{p}.address"), "required (or addressFile)");
                None
            }
            (Some(a), None) => Some((format!("{p}.address"), a.trim().to_string())),
            (None, Some(f)) => {
                let file = base.join(f);
                match std::fs::read_to_string(&file) {
                    Ok(s) if s.trim().is_empty() => {
                        errs.push(format!("{p}.addressFile"), format!("{f} is empty"));
                        None
                    }
                    Ok(s) => Some((format!("{p}.addressFile"), s.trim().to_string())),
                    Err(e) => {
                        errs.push(format!("{p}.addressFile"), format!("cannot read {f}: {e}"));
                        None
                    }
                }
            }
        };
        if let Some((ap, a)) = &address {
            let ok = a.parse::<http::Uri>().ok().is_some_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            });
            if !ok {
                errs.push(
                    ap,
                    "expected an http:// or https:// URL (the value is not shown: it is a secret)",
                );
            }
        }
        let ca_file = check_ca_file(&format!("{p}.caFile"), &r.ca_file, base, errs);
        let timeout = errs.duration(&format!("{p}.timeout"), &r.timeout, DEFAULT_ALERT_TIMEOUT);
        let retries = errs.int_in(
            &format!("{p}.retries"),
            r.retries,
            0,
            10,
            i64::from(DEFAULT_ALERT_RETRIES),
        );
        if let (Some(kind), Some((_, address)), true) = (kind, address, errs.0.len() == before) {
            out.insert(
                name.clone(),
                AlertProvider {
                    name: name.clone(),
                    kind,
                    address: Secret(address),
                    channel: r.channel.clone().unwrap_or_else(|| "general".into()),
                    username: r.username.clone().unwrap_or_else(|| "weir".into()),
                    ca_file,
                    timeout,
                    retries: u32::try_from(retries).unwrap_or(DEFAULT_ALERT_RETRIES),
                },
            );
        }
    }
    out
}

pub(super) fn validate_alerts(
    ap: &str,
    raw: &[RawAlert],
    providers: &BTreeMap<String, RawAlertProvider>,
    errs: &mut Errors,
) -> Vec<AlertRule> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    for (k, a) in raw.iter().enumerate() {
        let p = format!("{ap}.alerts[{k}]");
        if a.name.is_empty() {
            errs.push(format!("{p}.name"), "required");
        } else if !names.insert(a.name.clone()) {
            errs.push(format!("{p}.name"), format!("duplicate alert {:?}", a.name));
        }
        let severity = match a.severity.as_deref() {
            None => Some(Severity::Info),
            Some(s) => {
                let v = [Severity::Info, Severity::Warn, Severity::Error]
                    .into_iter()
                    .find(|v| v.name() == s);
                if v.is_none() {
                    errs.push(
                        format!("{p}.severity"),
                        format!("expected info, warn or error (got {s:?})"),
                    );
                }
                v
            }
        };
        let known = providers.contains_key(&a.provider_ref.name);
        if !known {
            errs.push(
                format!("{p}.providerRef.name"),
                format!("no alertProviders entry named {:?}", a.provider_ref.name),
            );
        }
        if let (Some(severity), true) = (severity, known) {
            out.push(AlertRule {
                name: a.name.clone(),
                severity,
                provider: a.provider_ref.name.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::{parse_yaml, ProviderKind, Severity};
    use std::path::Path;

    const BASE: &str = r#"
backends:
  a: { endpoints: ["127.0.0.1:9001"] }
  b: { endpoints: ["127.0.0.1:9002"] }
routes:
  - { name: app, primary: a, canary: b }
"#;

    fn with(extra: &str) -> String {
        format!("{BASE}{extra}")
    }

    fn canary(alerts: &str) -> String {
        format!(
            "canaries:\n  - name: c\n    route: app\n    analysis:\n      stepWeight: 10\n      alerts: {alerts}\n"
        )
    }

    fn paths(yaml: &str) -> Vec<(String, String)> {
        match parse_yaml(yaml, "t.yaml", Path::new(".")) {
            Ok(_) => panic!("unexpectedly valid:\n{yaml}"),
            Err(e) => e.errors.into_iter().map(|e| (e.path, e.reason)).collect(),
        }
    }

    #[test]
    fn providers_and_alerts_compile() {
        let dir = std::env::temp_dir().join(format!("weir-alert-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("url"),
            "https://hooks.slack.com/services/T/B/secret\n",
        )
        .unwrap();
        let yaml = with(&format!(
            "alertProviders:\n  team-slack: {{ type: slack, addressFile: url, channel: '#deploys' }}\n  oncall: {{ type: generic, address: 'http://127.0.0.1:1/x', timeout: 2s, retries: 0 }}\n{}",
            canary("[{ name: on-call, severity: error, providerRef: { name: oncall } }, { name: all, providerRef: { name: team-slack, namespace: flagger } }]")
        ));
        let c = parse_yaml(&yaml, "t.yaml", &dir).unwrap();
        let slack = &c.alert_providers["team-slack"];
        assert_eq!(slack.kind, ProviderKind::Slack);
        assert_eq!(
            slack.address.0,
            "https://hooks.slack.com/services/T/B/secret"
        );
        assert_eq!(
            (slack.channel.as_str(), slack.username.as_str()),
            ("#deploys", "weir")
        );
        assert_eq!(slack.retries, 3);
        let dbg = format!("{slack:?} {:?}", c.alert_providers["oncall"]);
        assert!(
            !dbg.contains("secret") && !dbg.contains("127.0.0.1:1"),
            "{dbg}"
        );
        let a = &c.canaries[0].alerts;
        assert_eq!(a[0].severity, Severity::Error);
        assert_eq!(a[1].severity, Severity::Info);
        assert_eq!(a[1].provider, "team-slack");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn every_mistake_names_its_field_and_never_the_address() {
        let cases: &[(&str, &str)] = &[
            ("alertProviders:\n  x: { type: teams, address: 'https://h/' }\n", "alertProviders.x.type"),
            ("alertProviders:\n  x: { type: slack }\n", "alertProviders.x.address"),
            ("alertProviders:\n  x: { type: slack, address: 'ftp://secret-host/' }\n", "alertProviders.x.address"),
            ("alertProviders:\n  x: { type: slack, address: 'https://h/', addressFile: f }\n", "alertProviders.x.address"),
            ("alertProviders:\n  x: { type: slack, addressFile: /nonexistent/weir-url }\n", "alertProviders.x.addressFile"),
            ("alertProviders:\n  x: { type: slack, address: 'https://h/', caFile: /nonexistent/ca.pem }\n", "alertProviders.x.caFile"),
            ("alertProviders:\n  x: { type: slack, address: 'https://h/', timeout: soon }\n", "alertProviders.x.timeout"),
            ("alertProviders:\n  x: { type: slack, address: 'https://h/', retries: 99 }\n", "alertProviders.x.retries"),
        ];
        for (extra, path) in cases {
            let got = paths(&with(extra));
            assert!(got.iter().any(|(p, _)| p == path), "{path} not in {got:?}");
            assert!(
                got.iter().all(|(_, r)| !r.contains("secret-host")),
                "{got:?}"
            );
        }
        let got = paths(&with(&canary("[{ name: a, providerRef: { name: nope } }]")));
        assert!(
            got.iter()
                .any(|(p, _)| p == "canaries[0].analysis.alerts[0].providerRef.name"),
            "{got:?}"
        );
        let got = paths(&with(&format!(
            "alertProviders:\n  x: {{ type: slack, address: 'https://h/' }}\n{}",
            canary("[{ name: a, severity: critical, providerRef: { name: x } }, { name: a, providerRef: { name: x } }]")
        )));
        assert!(
            got.iter()
                .any(|(p, _)| p == "canaries[0].analysis.alerts[0].severity"),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|(p, _)| p == "canaries[0].analysis.alerts[1].name"),
            "{got:?}"
        );
    }

    #[test]
    fn https_targets_are_accepted_and_other_schemes_named() {
        let hooks = |url: &str| {
            with(&format!(
                "canaries:\n  - name: c\n    route: app\n    analysis:\n      stepWeight: 10\n      webhooks: [{{ name: w, url: '{url}' }}]\n      metrics: [{{ name: q, query: up, prometheusUrl: '{url}', thresholdRange: {{ min: 1 }} }}]\n"
            ))
        };
        assert!(parse_yaml(
            &hooks("https://hooks.example.com/x"),
            "t.yaml",
            Path::new(".")
        )
        .is_ok());
        let got = paths(&hooks("ftp://h/x"));
        assert!(
            got.iter()
                .any(|(p, _)| p == "canaries[0].analysis.webhooks[0].url"),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|(p, _)| p == "canaries[0].analysis.metrics[0].prometheusUrl"),
            "{got:?}"
        );
        // A webhook's URL may hold a secret: the message names its scheme and host only.
        let got = paths(&hooks("ftp://hooks.example/services/SECRET1234"));
        let (_, reason) = got
            .iter()
            .find(|(p, _)| p == "canaries[0].analysis.webhooks[0].url")
            .unwrap();
        assert_eq!(
            reason,
            "expected an http:// or https:// URL (got ftp://hooks.example/…)"
        );
    }
}
