//! The `web` metric provider (Argo Rollouts' web metric): GET a URL, read the answer as
//! JSON, take the value at the template's JSONPath.
//!
//! The value must be one number, or a string holding one (Argo's `asFloat` case: many
//! APIs quote their numbers). Anything else is a failed check with the reason, never a
//! pass: the provider unreachable or timing out, a non-2xx answer, a body that is not
//! JSON, no value or several values at the path, a value that is not a number
//! (`true`, `null`, an object), NaN.

use super::convert::MetricSource;
use super::http::HttpClient;
use super::machine::MetricResult;
use super::spec::MetricSpec;
use super::templates;
use crate::config::template::TemplateVars;
use crate::config::WebMetric;

/// The number at `path` in the JSON `body` (pure).
pub fn pick_value(body: &[u8], path: &serde_json_path::JsonPath) -> Result<f64, String> {
    let doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let nodes = path.query(&doc);
    let value = match nodes.len() {
        0 => return Err(format!("no value at jsonPath {path}")),
        1 => nodes.all()[0],
        n => return Err(format!("{n} values at jsonPath {path}, expected one")),
    };
    let number = match value {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let shown = value.to_string();
    let shown: String = shown.chars().take(80).collect();
    match number {
        Some(v) if v.is_nan() => Err(format!("the value at jsonPath {path} is NaN")),
        Some(v) => Ok(v),
        None => Err(format!(
            "the value at jsonPath {path} is not a number: {shown}"
        )),
    }
}

/// Runs one web metric check and judges its value.
pub async fn web_result(
    client: &HttpClient,
    metric: &MetricSpec,
    source: &MetricSource,
    web: &WebMetric,
    vars: &TemplateVars,
) -> MetricResult {
    let value = fetch(client, source, web, vars).await;
    match value {
        Ok(v) => {
            let verdict = metric.evaluate(Some(v));
            MetricResult {
                name: metric.name.clone(),
                value: Some(v),
                passed: verdict.is_ok(),
                reason: verdict.err().unwrap_or_else(|| "web metric ok".to_string()),
                dry_run: metric.dry_run,
                ..MetricResult::default()
            }
        }
        Err(reason) => MetricResult {
            name: metric.name.clone(),
            value: None,
            passed: false,
            reason: templates::label(source, &reason),
            dry_run: metric.dry_run,
            ..MetricResult::default()
        },
    }
}

async fn fetch(
    client: &HttpClient,
    source: &MetricSource,
    web: &WebMetric,
    vars: &TemplateVars,
) -> Result<f64, String> {
    let url = crate::config::template::render(&web.url, vars)?;
    let headers = templates::provider_headers(source, vars)?;
    // The URL may carry a token; an error or an answer quoting it shows `scheme://host/…`.
    let r = client
        .get(&url, &headers, web.timeout)
        .await
        .map_err(|e| crate::text::scrub_url(&format!("web provider unreachable: {e}"), &url))?;
    if !(200..300).contains(&r.status) {
        return Err(crate::text::scrub_url(
            &format!(
                "web provider answered HTTP {}: {}",
                r.status,
                r.snippet(200)
            ),
            &url,
        ));
    }
    pick_value(&r.body, &web.json_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::validate_json_path;

    #[test]
    fn the_value_is_one_number_at_the_path() {
        let p = |s: &str| validate_json_path(s).unwrap();
        let body = br#"{"data":{"p99":"412.5","ok":true,"rate":99.25,"none":null,"list":[1,2],"nan":"NaN"}}"#;
        assert_eq!(pick_value(body, &p("{$.data.rate}")), Ok(99.25));
        assert_eq!(pick_value(body, &p("$.data.p99")), Ok(412.5));
        assert_eq!(pick_value(body, &p("{.data.rate}")), Ok(99.25));
        assert_eq!(pick_value(b"42", &p("{$}")), Ok(42.0));
        let e = |path: &str| pick_value(body, &p(path)).unwrap_err();
        assert!(e("{$.data.missing}").starts_with("no value at jsonPath"));
        assert!(e("{$.data.list[*]}").starts_with("2 values"));
        assert!(e("{$.data.ok}").contains("not a number: true"));
        assert!(e("{$.data.none}").contains("not a number: null"));
        assert!(e("{$.data}").contains("not a number"));
        assert!(e("{$.data.nan}").contains("NaN"));
        assert!(pick_value(b"<html>", &p("{$}"))
            .unwrap_err()
            .starts_with("the answer is not JSON"));
    }
}
