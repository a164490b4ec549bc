//! The raw schema of `metricTemplates:` (DESIGN §13) and of a metric's `templateRef`:
//! Flagger's `MetricTemplate` (a provider and a query), with Argo Rollouts' `web`
//! provider beside Prometheus. Re-exported by `raw`.

use serde::{Deserialize, Serialize};

/// One `metricTemplates:` entry (Flagger's `MetricTemplate.spec`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMetricTemplate {
    /// Where the value comes from.
    pub provider: RawTemplateProvider,
    /// The PromQL template (`type: prometheus`); a `web` template has none, its URL is
    /// the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// `provider:` of a metric template. One struct for every type, so that a field of
/// the wrong type is refused with a reason instead of "unknown field".
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTemplateProvider {
    /// `prometheus` or `web`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Prometheus server URL (`http://` or `https://`), as in Flagger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `web`: the URL to GET (a template), as in Argo Rollouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `web`: where the value is in the JSON answer; Argo's `{$.data.x}` or RFC 9535
    /// `$.data.x` (default `{$}`, the whole document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
    /// `web`: request headers (values are templates), Argo's list of `{key, value}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<RawTemplateHeader>,
    /// `web`: bound on one request in seconds (Argo's field; default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// `web`: the same bound as a duration (`5s`), weir's spelling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// PEM CA certificates trusted for an `https://` provider instead of the Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// A file holding a bearer token, sent as `Authorization: Bearer …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// Flagger's Kubernetes secret: refused with the weir equivalent (`tokenFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<serde_json::Value>,
    /// Flagger's switch to skip TLS verification: refused (use `caFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// Argo's switch to skip TLS verification: refused (use `caFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
}

/// The URL and headers may carry a token: `Debug` shows neither.
impl std::fmt::Debug for RawTemplateProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTemplateProvider")
            .field("kind", &self.kind)
            .field("address", &self.address)
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("json_path", &self.json_path)
            .field("headers", &self.headers.len())
            .field("timeout_seconds", &self.timeout_seconds)
            .field("timeout", &self.timeout)
            .field("ca_file", &self.ca_file)
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

/// One header of a `web` provider.
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTemplateHeader {
    /// Header name.
    pub key: String,
    /// Header value (a template).
    pub value: String,
}

impl std::fmt::Debug for RawTemplateHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTemplateHeader")
            .field("key", &self.key)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// `templateRef: {name, namespace}` of a metric.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawTemplateRef {
    /// Key in `metricTemplates`.
    pub name: String,
    /// Accepted for Flagger compatibility, ignored (weir has no namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
