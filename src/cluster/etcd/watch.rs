//! The watch: `/v3/watch`, a stream of change batches over one long answer, confirmed
//! before it is handed out, and asked for again once with a new token when etcd
//! refuses the one it was created with.

use super::*;

impl EtcdClient {
    /// Watches every key under `prefix` from `start_revision` (0 = from now). Returns
    /// once etcd confirmed the watch's creation; a watch refused for its token is
    /// asked for again once with a new token.
    pub async fn watch(&self, prefix: &str, start_revision: i64) -> Result<Watch, EtcdError> {
        match &self.auth {
            None => self.watch_once(prefix, start_revision, None).await,
            Some(a) => {
                with_token(
                    &a.tokens,
                    || self.authenticate(a),
                    |t| async move { self.watch_once(prefix, start_revision, t.as_deref()).await },
                )
                .await
            }
        }
    }

    async fn watch_once(
        &self,
        prefix: &str,
        start_revision: i64,
        token: Option<&str>,
    ) -> Result<Watch, EtcdError> {
        let mut create = range_json(prefix, true);
        if start_revision > 0 {
            create["start_revision"] = json!(start_revision.to_string());
        }
        let body = json!({ "create_request": create });
        let n = self.endpoints.len();
        let idx = self.current.load(Ordering::Relaxed) % n;
        let base = &self.endpoints[idx];
        let req = self.request(base, "/v3/watch", &body, token)?;
        let resp = match tokio::time::timeout(self.timeout, self.http.request(req)).await {
            Err(_) => {
                self.current.store((idx + 1) % n, Ordering::Relaxed);
                return Err(EtcdError::Unavailable(format!("{base}: watch: no answer")));
            }
            Ok(Err(e)) => {
                self.current.store((idx + 1) % n, Ordering::Relaxed);
                return Err(transport_error(base, &e));
            }
            Ok(Ok(r)) => r,
        };
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(decode_answer::<Value>(status, &bytes)
                .err()
                .unwrap_or_else(|| EtcdError::Decode(format!("watch answered HTTP {status}"))));
        }
        let mut watch = Watch {
            endpoint: base.clone(),
            body: resp.into_body(),
            buf: BytesMut::new(),
            first: None,
        };
        // The creation notice: a watch etcd refuses (permission, token) is cancelled
        // in it, with the reason.
        match tokio::time::timeout(self.timeout, watch.next()).await {
            Err(_) => Err(EtcdError::Unavailable(format!(
                "{base}: watch: not confirmed within {:?}",
                self.timeout
            ))),
            Ok(None) => Err(EtcdError::Unavailable(format!(
                "{base}: watch: the stream ended before the watch was created"
            ))),
            Ok(Some(Err(e))) => Err(e),
            Ok(Some(Ok(events))) => {
                watch.first = (!events.is_empty()).then_some(events);
                Ok(watch)
            }
        }
    }
}

/// A running watch: a stream of change batches. Dropping it closes the stream.
pub struct Watch {
    /// The endpoint it streams from (for messages).
    endpoint: String,
    body: Incoming,
    buf: BytesMut,
    /// Changes that came with the creation notice, returned first.
    first: Option<Vec<WatchEvent>>,
}

impl Watch {
    /// The next batch of changes (an empty batch is a progress notice).
    /// `None` when the stream ended; `Some(Err)` when it failed or was cancelled.
    pub async fn next(&mut self) -> Option<Result<Vec<WatchEvent>, EtcdError>> {
        if let Some(first) = self.first.take() {
            return Some(Ok(first));
        }
        loop {
            match parse_one(&mut self.buf) {
                Ok(Some(msg)) => return Some(watch_message(msg)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            if self.buf.len() > MAX_WATCH_MESSAGE {
                return Some(Err(EtcdError::Decode("watch message too large".into())));
            }
            match self.body.frame().await {
                None => return None,
                Some(Err(e)) => return Some(Err(transport_error(&self.endpoint, &e))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}
