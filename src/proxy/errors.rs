//! Errors the proxy answers itself. The source of an error decides its
//! status: the client (400/404/408/431/499), the upstream (502/504), or no capacity
//! (503). Bodies are short plain text; `x-weir-error` names the cause for
//! scripts and logs.

use super::body::ProxyBody;
use http::{header, Response, StatusCode};

/// Why the proxy answered instead of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyError {
    /// No Host header or authority, or an unusable request (400).
    BadRequest,
    /// No route for host + path (404, documented choice over 503).
    NoRoute,
    /// The chosen backend has no usable endpoint (503).
    NoEndpoint,
    /// Connect refused/reset or the upstream broke the exchange (502).
    Upstream,
    /// No response headers within the route timeout (504).
    Timeout,
    /// A method the proxy does not forward (405).
    MethodNotAllowed,
    /// The request target is longer than `proxy.maxUriBytes` (414).
    UriTooLong,
    /// More header fields than `proxy.maxHeaders` (431; HTTP/1 heads over
    /// the limits are answered by hyper itself).
    HeadersTooLarge,
    /// The client stopped sending its request body for `proxy.bodyIdleTimeout`,
    /// or did not finish it within `proxy.requestBodyTimeout` (408).
    RequestTimeout,
    /// The client went away before the response (499, nginx's code; only
    /// logs and metrics see it).
    ClientClosed,
    /// The backend's circuit breaker is full (503, `overflow`).
    Overflow,
    /// The route's rate limit has no token for the request (429, with `Retry-After`).
    RateLimited,
    /// The request body is larger than the route's `maxRequestBodyBytes` (413).
    BodyTooLarge,
}

impl ProxyError {
    /// HTTP status for the client.
    pub fn status(self) -> StatusCode {
        match self {
            ProxyError::BadRequest => StatusCode::BAD_REQUEST,
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::NoEndpoint => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Upstream => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::UriTooLong => StatusCode::URI_TOO_LONG,
            ProxyError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            // 499 is in range, so this never falls back.
            ProxyError::ClientClosed => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            ProxyError::Overflow => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// Stable token for `x-weir-error` and logs.
    pub fn code(self) -> &'static str {
        match self {
            ProxyError::BadRequest => "bad-request",
            ProxyError::NoRoute => "no-route",
            ProxyError::NoEndpoint => "no-healthy-endpoint",
            ProxyError::Upstream => "upstream-failed",
            ProxyError::Timeout => "upstream-timeout",
            ProxyError::MethodNotAllowed => "method-not-allowed",
            ProxyError::UriTooLong => "uri-too-long",
            ProxyError::HeadersTooLarge => "request-headers-too-large",
            ProxyError::RequestTimeout => "request-timeout",
            ProxyError::ClientClosed => "client-closed",
            ProxyError::Overflow => "overflow",
            ProxyError::RateLimited => "rate-limited",
            ProxyError::BodyTooLarge => "request-body-too-large",
        }
    }

    /// The plain-text body of the response: the code, then the detail.
    pub fn body(self, detail: &str) -> String {
        format!("{}: {}\n", self.code(), detail)
    }

    /// The response sent to the client.
    pub fn response(self, detail: &str) -> Response<ProxyBody> {
        let mut r = Response::new(ProxyBody::full(self.body(detail)));
        *r.status_mut() = self.status();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert(
            "x-weir-error",
            header::HeaderValue::from_static(self.code()),
        );
        r
    }
}

impl crate::dataplane::metrics::AnsweredError for ProxyError {
    fn status_code(self) -> u16 {
        self.status().as_u16()
    }

    fn upstream_failure(self) -> Option<crate::dataplane::metrics::UpstreamFailure> {
        use crate::dataplane::metrics::UpstreamFailure;
        match self {
            ProxyError::NoEndpoint => Some(UpstreamFailure::NoEndpoint),
            ProxyError::Timeout => Some(UpstreamFailure::Timeout),
            ProxyError::Upstream => Some(UpstreamFailure::Upstream),
            _ => None,
        }
    }
}
