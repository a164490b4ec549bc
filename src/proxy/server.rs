//! Listeners: accept TCP connections and serve HTTP/1.1 and h2c (prior
//! knowledge) on each, with graceful shutdown.

use super::service::{handle, ConnInfo, ProxyShared};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The connection builder with the proxy's protocol settings.
pub fn conn_builder(shared: &ProxyShared) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.settings.header_read_timeout)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(Some(250))
        .max_pending_accept_reset_streams(Some(100))
        .max_local_error_reset_streams(Some(1024));
    b
}

/// Serves `listener` until `shutdown` turns true, then stops accepting and
/// waits up to `drain` for open connections to finish their requests
/// (HTTP/1 gets `Connection: close`, HTTP/2 a GOAWAY).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<ProxyShared>,
    tls: bool,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let builder = Arc::new(conn_builder(&shared));
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let info = ConnInfo { peer, tls };
                let shared = shared.clone();
                let svc = service_fn(move |req| handle(shared.clone(), info, req));
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(target: "weir::conn", %peer, error = %e, "connection ended with error");
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "drain timeout reached; closing remaining connections"
        );
    }
}
