//! `weir serve` once its config is loaded: the app until SIGTERM/SIGINT,
//! with SIGHUP reloading the config file.

use crate::config;
use std::process::ExitCode;

pub(super) async fn serve(
    cfg: config::Config,
    path: std::path::PathBuf,
    started: crate::reload::Started,
) -> ExitCode {
    // Before anything listens: a SIGHUP that arrives while starting must find
    // the handler, or its default action would end the process.
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    #[cfg(not(unix))]
    let hup = ();
    let app = match crate::app::start(cfg).await {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    reload_until_signal(hup, &path, &started, &app).await;
    tracing::info!("shutting down: draining in-flight requests (a second signal exits at once)");
    tokio::select! {
        _ = app.shutdown() => {}
        _ = wait_for_signal() => tracing::warn!("second signal: exiting now"),
    }
    ExitCode::SUCCESS
}

/// Reloads the config file on every SIGHUP until SIGTERM or SIGINT.
async fn reload_until_signal(
    #[cfg(unix)] hup: std::io::Result<tokio::signal::unix::Signal>,
    #[cfg(not(unix))] hup: (),
    path: &std::path::Path,
    started: &crate::reload::Started,
    app: &crate::app::RunningApp,
) {
    #[cfg(unix)]
    {
        let Ok(mut hup) = hup else {
            tracing::warn!("cannot listen for SIGHUP: config reload is off");
            return wait_for_signal().await;
        };
        let stop = wait_for_signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = hup.recv() => match crate::reload::reload(path, started, &app.store) {
                    Ok(r) => {
                        tracing::info!(
                            target: "weir::reload",
                            file = %path.display(),
                            version = r.version,
                            "config reloaded: routing table applied"
                        );
                        for name in &r.kept {
                            tracing::warn!(
                                target: "weir::reload",
                                route = %name,
                                "route is driven by a canary: kept its running definition; the file's applies at the next start"
                            );
                        }
                        if !r.needs_restart.is_empty() {
                            tracing::warn!(
                                target: "weir::reload",
                                sections = %r.needs_restart.join(", "),
                                "changed in the file but applied only at a restart"
                            );
                        }
                    }
                    Err(e) => tracing::error!(
                        target: "weir::reload",
                        "config reload refused, nothing changed:\n{e}"
                    ),
                },
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (hup, path, started, app);
        wait_for_signal().await
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
