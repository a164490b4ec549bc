//! The command line (clap). Each subcommand validates its arguments and
//! hands over to the library; exit codes: 0 ok, 1 failure, 2 usage.

use crate::config;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "Traffic-splitting reverse proxy with a built-in progressive-delivery engine"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the proxy listeners, the control API and the rollout engine.
    Serve {
        /// Configuration file.
        #[arg(short, long, default_value = "config/weir.yaml")]
        config: PathBuf,
        /// Runtime worker threads (default: one per core; 1 = a single-threaded runtime).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Validate a configuration file; print every error; exit 1 on error.
    Check {
        /// Configuration file.
        #[arg(short, long, default_value = "config/weir.yaml")]
        config: PathBuf,
    },
    /// A small backend for demos, tests and benchmarks.
    Echo {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9001")]
        listen: SocketAddr,
        /// Version reported in every answer.
        #[arg(long, default_value = "v1")]
        version: String,
        /// Share of requests (0..1) answered with 500.
        #[arg(long, default_value_t = 0.0)]
        error_rate: f64,
        /// Delay before every answer, e.g. 20ms.
        #[arg(long, value_parser = parse_duration_arg, default_value = "0s")]
        latency: std::time::Duration,
        /// Runtime worker threads (default: one per core).
        #[arg(long)]
        workers: Option<usize>,
    },
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    if s.trim() == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    config::parse_duration(s)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .try_init();
}

fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    match workers {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.cmd {
        Command::Check { config } => match config::load_file(&config) {
            Ok(c) => {
                println!(
                    "{}: ok ({} listeners, {} backends, {} routes, {} canaries)",
                    config.display(),
                    c.listeners.len(),
                    c.table.backends.len(),
                    c.table.routing.routes.len(),
                    c.canaries.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                eprintln!("{} error(s)", e.errors.len());
                ExitCode::FAILURE
            }
        },
        Command::Serve { config, workers } => {
            let cfg = match config::load_file(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let rt = match runtime(workers) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            rt.block_on(serve(cfg))
        }
        Command::Echo {
            listen,
            version,
            error_rate,
            latency,
            workers,
        } => {
            if !(0.0..=1.0).contains(&error_rate) {
                eprintln!("--error-rate must be between 0 and 1 (got {error_rate})");
                return ExitCode::from(2);
            }
            let rt = match runtime(workers) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let opts = crate::echo::EchoOptions {
                version,
                error_rate,
                latency,
            };
            match rt.block_on(crate::echo::run(listen, opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("echo: cannot listen on {listen}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(cfg: config::Config) -> ExitCode {
    let app = match crate::app::start(cfg).await {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down: draining in-flight requests (a second signal exits at once)");
    tokio::select! {
        _ = app.shutdown() => {}
        _ = wait_for_signal() => tracing::warn!("second signal: exiting now"),
    }
    ExitCode::SUCCESS
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
