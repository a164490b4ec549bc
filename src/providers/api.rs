//! `GET /api/v1/providers` (each provider's connection state, the backends it
//! fills and the containers it sees) and the `weir_provider_*` series of
//! `/metrics`, both read from the app's
//! [`ProviderBoard`](crate::dataplane::providers::ProviderBoard).

use crate::control::api::{json_response, ApiResponse, ApiState, Auth, RouteDef};
use crate::dataplane::metrics::{label_value, ScrapeSection};
use crate::dataplane::providers::ProviderBoard;
use crate::wire::providers::ProvidersDoc;
use http::{Method, StatusCode};
use std::fmt::Write;
use std::sync::Arc;

/// The routes this module adds to the admin router.
pub static ROUTES: &[RouteDef] = &[RouteDef {
    method: Method::GET,
    path: "/api/v1/providers",
    auth: Auth::Token,
    handler: |s, _| Box::pin(async move { Ok(list(&s)) }),
}];

/// `GET /api/v1/providers`: `{"providers": []}` when none is configured.
fn list(s: &ApiState) -> ApiResponse {
    let providers = s
        .ext
        .get::<Arc<ProviderBoard>>()
        .map(|b| b.list())
        .unwrap_or_default();
    json_response(StatusCode::OK, &ProvidersDoc { providers })
}

/// The `weir_provider_*` series, rendered from the board at scrape time.
pub struct ProviderMetrics(pub Arc<ProviderBoard>);

impl ScrapeSection for ProviderMetrics {
    fn render(&self, out: &mut String) {
        let list = self.0.list();
        if list.is_empty() {
            return;
        }
        let series: [(&str, &str, &str); 4] = [
            (
                "weir_provider_connected",
                "gauge",
                "1 while the provider is connected to its source (0: the endpoint lists stay as last written).",
            ),
            (
                "weir_provider_events_total",
                "counter",
                "Events received from the provider's source.",
            ),
            (
                "weir_provider_syncs_total",
                "counter",
                "Full listings of the provider's source.",
            ),
            (
                "weir_provider_disconnects_total",
                "counter",
                "Connections to the provider's source that were lost.",
            ),
        ];
        for (name, kind, help) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in &list {
                let v = match name {
                    "weir_provider_connected" => u64::from(p.connected),
                    "weir_provider_events_total" => p.events,
                    "weir_provider_syncs_total" => p.syncs,
                    _ => p.disconnects,
                };
                let _ = writeln!(
                    out,
                    "{name}{{provider=\"{}\"}} {v}",
                    label_value(&p.provider)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_provider_endpoints Endpoints a provider last wrote for a backend, ready or not.\n# TYPE weir_provider_endpoints gauge"
        );
        for p in &list {
            for (b, pb) in &p.backends {
                let _ = writeln!(
                    out,
                    "weir_provider_endpoints{{provider=\"{}\",backend=\"{}\"}} {}",
                    label_value(&p.provider),
                    label_value(b),
                    pb.endpoints.len()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_provider_containers Labelled containers a provider sees, ready or not.\n# TYPE weir_provider_containers gauge"
        );
        for p in &list {
            let ready = p.containers.iter().filter(|c| c.ready).count();
            let provider = label_value(&p.provider);
            let _ = writeln!(
                out,
                "weir_provider_containers{{provider=\"{provider}\",ready=\"true\"}} {ready}\nweir_provider_containers{{provider=\"{provider}\",ready=\"false\"}} {}",
                p.containers.len() - ready
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::series::family;

    /// `weir check` judges queries against `config::series`; every series rendered
    /// here must be there, with its kind, or a valid query would be refused.
    #[test]
    fn every_series_rendered_here_is_in_configs_list() {
        let board = ProviderBoard::new();
        board.update("docker", |p| {
            p.backends.insert("app".into(), Default::default());
        });
        let mut out = String::new();
        ProviderMetrics(board).render(&mut out);
        let types: Vec<(&str, &str)> = out
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
            .collect();
        assert_eq!(types.len(), 6, "{out}");
        for (name, kind) in types {
            let Some(f) = family(name) else {
                panic!("{name} is rendered but not in config::series");
            };
            assert_eq!(kind, f.kind.type_name(), "{name}");
        }
    }
}
