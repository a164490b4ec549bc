//! The HTTP client of `weir ctl`: one pooled hyper client, bearer token, replies read
//! whole, API errors turned into [`CtlError::Api`].

use super::*;

/// A small client of the admin API.
pub struct ApiClient {
    pub(super) base: String,
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response read whole.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    etag: Option<String>,
    body: Bytes,
}

impl Reply {
    pub(super) fn json(&self) -> Result<Value, CtlError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CtlError::Transport(format!("the API answered something that is not JSON: {e}"))
        })
    }

    /// The body as the API document `T`: a missing or renamed field is an
    /// error naming it, never a default.
    pub(super) fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, CtlError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CtlError::Transport(format!("the API answered an unexpected document: {e}"))
        })
    }

    pub(super) fn version(&self) -> Option<u64> {
        self.etag.as_deref()?.trim_matches('"').parse().ok()
    }
}

impl ApiClient {
    /// A client of the API at `base` (`http://host:port`).
    pub fn new(base: &str, token: Option<String>) -> Result<Self, CtlError> {
        let base = base.trim_end_matches('/').to_string();
        let uri: http::Uri = base
            .parse()
            .map_err(|e| CtlError::Usage(format!("--api {base:?} is not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(CtlError::Usage(format!(
                "--api {base:?}: expected http://host:port"
            )));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Ok(ApiClient {
            base,
            token,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<Reply, CtlError> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        // Marks a call of weir's own client: the API takes a write without a
        // JSON body (a command) only with it.
        b = b.header(crate::control::guard::WEIR_REQUEST_HEADER, "1");
        if let Some(t) = &self.token {
            b = b.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(v) = if_match {
            b = b.header(IF_MATCH, format!("\"{v}\""));
        }
        let body = match body {
            Some(v) => {
                b = b.header(CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = b
            .body(Full::new(body))
            .map_err(|e| CtlError::Usage(format!("bad request: {e}")))?;
        let fut = self.client.request(req);
        let resp = match tokio::time::timeout(Duration::from_secs(30), fut).await {
            Err(_) => {
                return Err(CtlError::Transport(format!(
                    "{}: no answer within 30s",
                    self.base
                )))
            }
            Ok(Err(e)) => {
                return Err(CtlError::Transport(format!(
                    "cannot reach the weir API at {}: {}",
                    self.base,
                    error_chain(&e)
                )))
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let etag = resp
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CtlError::Transport(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Reply { status, etag, body })
    }

    /// Sends a request and turns a non-2xx answer into [`CtlError::Api`].
    pub(super) async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<Reply, CtlError> {
        let r = self.call(method, path, body, if_match).await?;
        if r.status.is_success() {
            return Ok(r);
        }
        Err(api_error(&r))
    }
}

pub(super) fn api_error(r: &Reply) -> CtlError {
    // Not an API error body (a proxy in between, another program on the port):
    // its text is the reason.
    let (reason, field) = match serde_json::from_slice::<crate::wire::error::ErrorBody>(&r.body) {
        Ok(b) => (b.reason, b.field),
        Err(_) => (String::from_utf8_lossy(&r.body).trim().to_string(), None),
    };
    CtlError::Api {
        status: r.status.as_u16(),
        reason,
        field,
    }
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
