//! [`Remote`]: another weir driven over its control API (the table of calls is
//! in the parent module's doc).

use super::*;

/// Another weir, driven over its control API.
pub struct Remote {
    /// Control API base URL, without a trailing slash.
    base: String,
    /// Bearer token, if the remote requires one.
    token: Option<String>,
    client: HttpClient,
}

impl Remote {
    /// A remote data plane at `base` (e.g. `http://10.0.0.2:9901`).
    pub fn new(base: impl Into<String>, token: Option<String>, client: HttpClient) -> Self {
        Remote {
            base: base.into().trim_end_matches('/').to_string(),
            token,
            client,
        }
    }

    fn err(&self, reason: impl Into<String>) -> DpError {
        DpError {
            plane: self.base.clone(),
            reason: reason.into(),
        }
    }

    fn headers(&self, extra: Option<(&'static str, String)>) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("accept", "application/json".to_string()),
            // Marks a call of weir itself: the API refuses writes without it or
            // a JSON body.
            (crate::control::guard::WEIR_REQUEST_HEADER, "1".to_string()),
        ];
        if let Some(t) = &self.token {
            h.push(("authorization", format!("Bearer {t}")));
        }
        h.extend(extra);
        h
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        extra: Option<(&'static str, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<crate::rollout::http::HttpResponse, DpError> {
        let url = format!("{}{path}", self.base);
        let h = self.headers(extra);
        let refs: Vec<(&str, String)> = h.iter().map(|(k, v)| (*k, v.clone())).collect();
        self.client
            .send(method, &url, &refs, body, REMOTE_TIMEOUT)
            .await
            .map_err(|e| self.err(e))
    }

    /// A GET without extra headers or body.
    async fn get(&self, path: &str) -> Result<crate::rollout::http::HttpResponse, DpError> {
        self.call(Method::GET, path, None, None).await
    }

    fn check(&self, what: &str, r: &crate::rollout::http::HttpResponse) -> Result<(), DpError> {
        if (200..300).contains(&r.status) {
            Ok(())
        } else {
            Err(self.err(format!("{what}: HTTP {} {}", r.status, r.snippet(300))))
        }
    }
}

/// The table version of an `ETag: "7"` header.
pub fn etag_version(h: &http::HeaderMap) -> Option<u64> {
    let v = h.get(http::header::ETAG)?.to_str().ok()?.trim();
    let v = v.strip_prefix("W/").unwrap_or(v);
    v.trim_matches('"').parse().ok()
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Parses a stats document into per-role snapshots. Every role is required: the
/// server always sends all three, so a document without one is an error, never
/// a role that looks idle.
pub fn parse_stats(body: &[u8]) -> Result<RoleStats, String> {
    let doc: RouteStats =
        serde_json::from_slice(body).map_err(|e| format!("unexpected stats document: {e}"))?;
    Ok(RoleStats {
        primary: doc.snapshots.primary,
        canary: doc.snapshots.canary,
        mirror: doc.snapshots.mirror,
    })
}

/// Parses a backend document. Every field the engine reads is required: a
/// document without one (another version, a renamed field) is an error, never a
/// backend that looks ready or empty.
pub fn parse_backend(body: &[u8]) -> Result<BackendView, String> {
    let doc: BackendStatus =
        serde_json::from_slice(body).map_err(|e| format!("unexpected backend document: {e}"))?;
    let serving: Vec<&EndpointStatus> = doc.endpoints.iter().filter(|e| !e.draining).collect();
    let rotation: Vec<String> = serving.iter().map(|e| e.address.clone()).collect();
    let endpoints = if doc.configured.is_empty() {
        rotation.clone()
    } else {
        doc.configured
    };
    Ok(BackendView {
        name: doc.name,
        endpoints,
        rotation,
        revision_path: doc.revision_path,
        ready: !serving.is_empty() && serving.iter().all(|e| e.ready),
        // The backend document carries no revisions: a remote plane's slots are
        // read through `revisionPath`.
        provided_revision: None,
        update: doc.rolling_update.as_ref().and_then(update_read),
    })
}

/// The rolling update's phase and counts from a backend document's
/// `rollingUpdate`; `None` when it does not say (an older weir).
fn update_read(v: &serde_json::Value) -> Option<RollingStatus> {
    let phase = match v.get("phase")?.as_str()? {
        "Progressing" => Phase::Progressing,
        "Complete" => Phase::Complete,
        "Stalled" => Phase::Stalled,
        _ => return None,
    };
    let n = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    };
    Some(RollingStatus {
        phase,
        desired: n("desired")?,
        updated: n("updated")?,
        ready: n("ready")?,
        old: n("old")?,
        total: n("total")?,
        draining: n("draining")?,
    })
}

impl DataPlane for Remote {
    fn id(&self) -> &str {
        &self.base
    }

    fn read_route<'a>(&'a self, route: &'a str) -> BoxFuture<'a, Result<RouteRead, DpError>> {
        Box::pin(async move {
            let r = self
                .get(&format!("/api/v1/routes/{}", encode(route)))
                .await?;
            self.check("reading the route", &r)?;
            let route: RawRoute = serde_json::from_slice(&r.body)
                .map_err(|e| self.err(format!("unexpected route document: {e}")))?;
            let version = etag_version(&r.headers)
                .ok_or_else(|| self.err("the route answer has no ETag version"))?;
            Ok(RouteRead { route, version })
        })
    }

    fn write_route<'a>(
        &'a self,
        route: &'a str,
        change: &'a RouteChange,
        def: &'a CanaryDef,
    ) -> BoxFuture<'a, Result<u64, DpError>> {
        Box::pin(async move {
            // Read, edit, PATCH the difference under If-Match; another writer in
            // between costs a re-read (bounded).
            let mut last = String::new();
            for _ in 0..3 {
                let read = self.read_route(route).await?;
                let mut after = read.route.clone();
                apply_change(&mut after, change, def);
                if after == read.route {
                    return Ok(read.version);
                }
                let before =
                    serde_json::to_value(&read.route).map_err(|e| self.err(e.to_string()))?;
                let a = serde_json::to_value(&after).map_err(|e| self.err(e.to_string()))?;
                let patch = merge_diff(&before, &a);
                let r = self
                    .call(
                        Method::PATCH,
                        &format!("/api/v1/routes/{}", encode(route)),
                        Some(("if-match", format!("\"{}\"", read.version))),
                        Some(patch.to_string().into_bytes()),
                    )
                    .await?;
                if r.status == 409 {
                    last = r.snippet(200);
                    continue;
                }
                self.check("writing the route", &r)?;
                return Ok(etag_version(&r.headers).unwrap_or(read.version + 1));
            }
            Err(self.err(format!("writing the route: version conflicts ({last})")))
        })
    }

    fn stats<'a>(
        &'a self,
        route: &'a str,
        window_secs: u64,
        max_age_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<RoleStats, DpError>> {
        Box::pin(async move {
            let age = max_age_ms.map_or(String::new(), |ms| format!("&maxAge={ms}ms"));
            let r = self
                .get(&format!(
                    "/api/v1/stats?route={}&window={}s{age}",
                    encode(route),
                    window_secs.max(1)
                ))
                .await?;
            if r.status == 404 {
                // The route never served there: no traffic.
                return Ok(RoleStats::empty(window_secs));
            }
            self.check("reading stats", &r)?;
            parse_stats(&r.body).map_err(|e| self.err(e))
        })
    }

    fn backend<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<BackendView, DpError>> {
        Box::pin(async move {
            let r = self
                .get(&format!("/api/v1/backends/{}", encode(name)))
                .await?;
            self.check("reading the backend", &r)?;
            parse_backend(&r.body).map_err(|e| self.err(e))
        })
    }
}
