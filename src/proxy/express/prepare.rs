//! Deciding one request head, before any IO: the head is parsed and
//! checked (`head::analyze_request`), then the shared phases decide it
//! (route, hand-off, side, endpoint), and the upstream head is written.

use super::head;
use super::{Client, REQUEST_HEADERS};
use crate::proxy::errors::ProxyError;
use crate::proxy::phases::{
    self, choose_side, find_route, pick_endpoint, random_u64, AccessLine, Refusal,
};
use crate::proxy::service::ProxyShared;
use crate::proxy::upstream::Endpoint;
use crate::routing::{decide, normalize_host, Draw, RequestView};
use crate::stats::Role;
use std::sync::Arc;

/// A request the fast path forwards, with everything decided.
pub(super) struct Forward {
    /// The head sent upstream (its buffer is reused for the client's head).
    pub(super) upstream_head: Vec<u8>,
    /// Index of the route in the snapshot.
    pub(super) route: usize,
    /// The side the request counts for.
    pub(super) role: Role,
    /// The side's backend (outlier feedback).
    pub(super) backend: Arc<crate::proxy::upstream::Backend>,
    /// The endpoint drawn.
    pub(super) endpoint: Arc<Endpoint>,
    /// The affinity `Set-Cookie` values the decision asked for.
    pub(super) set_cookies: Vec<http::HeaderValue>,
    /// The method (which methods a retry policy resends).
    pub(super) method: http::Method,
    /// A HEAD request: the response has no body whatever its headers say.
    pub(super) head_request: bool,
    /// May be sent again on a new connection when a pooled one was closed.
    pub(super) idempotent: bool,
    /// The client asked to close after this exchange.
    pub(super) close: bool,
    /// The access line, when the log is on.
    pub(super) log: Option<AccessLine>,
}

/// An answer weir makes itself instead of forwarding.
pub(super) struct Answer {
    pub(super) refusal: Refusal,
    /// The route and side it counts against (none for 404).
    pub(super) counted: Option<(usize, Role)>,
    /// The client asked to close after this exchange.
    pub(super) close: bool,
    /// The access line, when the log is on.
    pub(super) log: Option<AccessLine>,
}

/// Parses and decides one request head (no IO).
pub(super) enum Prepared {
    Forward(Box<Forward>),
    /// weir answers itself (404, 503).
    Answer(Answer),
    Handoff,
}

/// Everything decided about one head before any IO: refusals, hand-off,
/// route, side, endpoint, the upstream head and the cookies.
#[inline]
pub(super) fn prepare(
    head: &[u8],
    shared: &ProxyShared,
    snap: &crate::dataplane::store::Snapshot,
    cx: &Client<'_>,
) -> Prepared {
    // The head as `maxHeaderBytes` counts it: request line through the
    // empty line. hyper would close after its 431, so this closes too.
    if head.len() > shared.settings.max_header_bytes {
        return Prepared::Answer(Answer {
            refusal: Refusal::new(
                ProxyError::HeadersTooLarge,
                crate::proxy::limits::head_too_large(shared.settings.max_header_bytes),
            ),
            counted: None,
            close: true,
            log: None,
        });
    }
    let mut hs = [httparse::EMPTY_HEADER; REQUEST_HEADERS];
    let mut req = httparse::Request::new(&mut hs);
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        _ => return Prepared::Handoff,
    }
    let Some(fast) = head::analyze_request(&req, &shared.settings) else {
        return Prepared::Handoff;
    };
    let host = normalize_host(fast.host);
    let log = AccessLine::new(shared, &fast.method, &host, fast.path);
    let idx = match find_route(snap, &host, fast.path) {
        Ok(idx) => idx,
        Err(refusal) => {
            return Prepared::Answer(Answer {
                refusal,
                counted: None,
                close: fast.close,
                log,
            })
        }
    };
    let route = &snap.spec.routing.routes[idx];
    let rt = &snap.routes[idx];
    if phases::needs_general_path(route) {
        return Prepared::Handoff;
    }
    let r = random_u64();
    let decision = {
        let view = RequestView::raw(
            &host,
            fast.path,
            fast.query,
            &fast.method,
            req.headers,
            cx.peer.ip(),
        )
        // This path serves clear text only.
        .on_listener(fast.host, false, cx.port);
        decide(&view, route, Draw::from_u64(r))
    };
    if phases::decision_needs_general_path(&decision) {
        return Prepared::Handoff;
    }
    let (backend, role) = choose_side(decision.side, rt);
    if phases::backend_needs_general_path(snap.spec.backends.get(&backend.name)) {
        return Prepared::Handoff;
    }
    // The rate limit, once nothing can hand the request off any more (the
    // general path would take a second token).
    if rt.guards.is_some() {
        let now = std::time::Instant::now();
        if let Err(refusal) = phases::rate_limit(
            shared,
            rt,
            crate::routing::Headers::Raw(req.headers),
            cx.peer.ip(),
            now,
        ) {
            return Prepared::Answer(Answer {
                refusal,
                counted: None,
                close: fast.close,
                log,
            });
        }
    }
    let endpoint = match pick_endpoint(backend, r) {
        Ok(ep) => ep,
        Err(refusal) => {
            return Prepared::Answer(Answer {
                refusal,
                counted: Some((idx, role)),
                close: fast.close,
                log,
            })
        }
    };
    let mut upstream_head = Vec::with_capacity(head.len() + 128);
    head::write_upstream_head(
        &mut upstream_head,
        &fast,
        req.headers,
        cx.peer_ip,
        cx.trusted,
    );
    let set_cookies = match &route.affinity {
        Some(cfg) if !decision.cookies.is_empty() => {
            decision.cookies.render(cfg, &route.pin_cookies)
        }
        _ => Vec::new(),
    };
    Prepared::Forward(Box::new(Forward {
        upstream_head,
        route: idx,
        role,
        backend: backend.clone(),
        endpoint,
        set_cookies,
        head_request: fast.method == http::Method::HEAD,
        method: fast.method.clone(),
        idempotent: fast.idempotent(),
        close: fast.close,
        log,
    }))
}

impl Forward {
    /// The answer when the upstream gave none that can be forwarded.
    pub(super) fn failed(&mut self, refusal: Refusal) -> Answer {
        Answer {
            refusal,
            counted: Some((self.route, self.role)),
            close: self.close,
            log: self.log.take(),
        }
    }
}
