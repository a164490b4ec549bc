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
    /// Log line format on stderr: `text` (human) or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Command,
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// Human-readable lines; coloured only on a terminal without `NO_COLOR`.
    Text,
    /// One JSON object per line (timestamp, level, target, fields), for log shippers.
    Json,
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
    /// Exit 0 when GET URL answers 2xx within the timeout (container health checks).
    Probe {
        /// e.g. http://127.0.0.1:9901/readyz
        url: String,
        /// Timeout of the whole exchange.
        #[arg(long, value_parser = parse_duration_arg, default_value = "2s")]
        timeout: std::time::Duration,
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
    /// A release end to end in one process: backends, proxy, engine, live output;
    /// exit 0 when the outcome is the expected one.
    Demo {
        /// Which release to play.
        #[arg(long, value_enum, default_value = "promote")]
        scenario: crate::demo::Scenario,
        /// After the outcome, keep the demo running (console, proxy, engine) until Ctrl-C.
        #[arg(long)]
        hold: bool,
    },
    /// Client of the control API (readable tables; --json for raw JSON).
    Ctl {
        /// Base URL of the control API.
        #[arg(
            long,
            global = true,
            env = "WEIR_API",
            default_value = "http://127.0.0.1:9901"
        )]
        api: String,
        /// File holding the bearer token (admin.tokenFile of the server).
        #[arg(long, global = true, env = "WEIR_TOKEN_FILE")]
        token_file: Option<PathBuf>,
        /// Print the API's JSON instead of tables.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        cmd: CtlCmd,
    },
}

#[derive(Subcommand, Debug)]
enum CtlCmd {
    /// Readiness, table version, and per route the weight and the idle slot.
    Status,
    /// Fleet coordination (`cluster:`): replicas, shards, heartbeats and which canary
    /// each replica owns.
    Cluster,
    /// The routes of the table.
    Routes,
    /// Windowed stats per route and role.
    Stats {
        /// Only this route.
        #[arg(long)]
        route: Option<String>,
        /// Window (whole seconds, 1s..600s).
        #[arg(long, default_value = "60s")]
        window: String,
    },
    /// Set a route's canary weight (0..100).
    SetWeight {
        /// Route name.
        route: String,
        /// Percent of traffic to the canary.
        #[arg(allow_negative_numbers = true)]
        weight: i64,
    },
    /// Live view of weights and per-role success rate and p99; with a CANARY, its
    /// rollout live: the current state, then one line per event.
    Watch {
        /// Follow this canary's rollout instead of the route stats.
        canary: Option<String>,
        /// Only this route.
        #[arg(long)]
        route: Option<String>,
        /// Stats window (whole seconds, 1s..600s).
        #[arg(long, default_value = "10s")]
        window: String,
        /// Time between refreshes.
        #[arg(long, value_parser = parse_duration_arg, default_value = "1s")]
        interval: std::time::Duration,
        /// Stop after N refreshes, or N events with a CANARY (default: until Ctrl-C).
        #[arg(long)]
        count: Option<u64>,
    },
    /// The canaries: phase, weights, iteration, failed checks, revision, slots; with a
    /// NAME, that canary's last checks and recent events.
    Canaries {
        /// Only this canary, in detail.
        name: Option<String>,
    },
    /// Start a run of a canary for a revision (restarts a run in progress).
    Start {
        /// Canary name.
        canary: String,
        /// Revision label of the run.
        #[arg(long)]
        revision: String,
    },
    /// Skip the remaining analysis and promote.
    Promote {
        /// Canary name.
        canary: String,
    },
    /// Roll back the run in progress.
    Abort {
        /// Canary name.
        canary: String,
    },
    /// Freeze a canary: no tick, no check, no step.
    Pause {
        /// Canary name.
        canary: String,
    },
    /// Continue a paused canary.
    Resume {
        /// Canary name.
        canary: String,
    },
}

fn ctl_main(api: String, token_file: Option<PathBuf>, json: bool, cmd: CtlCmd) -> ExitCode {
    use std::io::IsTerminal;
    let token = match token_file.as_deref().map(crate::ctl::read_token_file) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    use crate::ctl::canaries::CanaryCommand;
    let canary_cmd = match &cmd {
        CtlCmd::Watch {
            canary: Some(name),
            count,
            ..
        } => Some(CanaryCommand::Watch {
            name: Some(name.clone()),
            count: *count,
        }),
        CtlCmd::Canaries { name } => Some(CanaryCommand::Show { name: name.clone() }),
        CtlCmd::Start { canary, revision } => Some(CanaryCommand::Start {
            name: canary.clone(),
            revision: revision.clone(),
        }),
        CtlCmd::Promote { canary } => Some(CanaryCommand::Promote {
            name: canary.clone(),
        }),
        CtlCmd::Abort { canary } => Some(CanaryCommand::Abort {
            name: canary.clone(),
        }),
        CtlCmd::Pause { canary } => Some(CanaryCommand::Pause {
            name: canary.clone(),
        }),
        CtlCmd::Resume { canary } => Some(CanaryCommand::Resume {
            name: canary.clone(),
        }),
        _ => None,
    };
    if let Some(c) = canary_cmd {
        let target = crate::ctl::canaries::Target { api, token, json };
        let rt = match runtime(Some(1)) {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("cannot start runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut out = std::io::stdout();
        return match rt.block_on(crate::ctl::canaries::run(&target, &c, &mut out)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                match e {
                    crate::ctl::CtlError::Usage(_) => ExitCode::from(2),
                    _ => ExitCode::FAILURE,
                }
            }
        };
    }
    let command = match cmd {
        CtlCmd::Status => crate::ctl::CtlCommand::Status,
        CtlCmd::Cluster => crate::ctl::CtlCommand::Cluster,
        CtlCmd::Routes => crate::ctl::CtlCommand::Routes,
        CtlCmd::Stats { route, window } => crate::ctl::CtlCommand::Stats { route, window },
        CtlCmd::SetWeight { route, weight } => crate::ctl::CtlCommand::SetWeight { route, weight },
        CtlCmd::Watch {
            route,
            window,
            interval,
            count,
            ..
        } => crate::ctl::CtlCommand::Watch {
            route,
            window,
            interval,
            count,
        },
        // Handled above.
        CtlCmd::Canaries { .. }
        | CtlCmd::Start { .. }
        | CtlCmd::Promote { .. }
        | CtlCmd::Abort { .. }
        | CtlCmd::Pause { .. }
        | CtlCmd::Resume { .. } => return ExitCode::from(2),
    };
    let opts = crate::ctl::CtlOptions {
        api,
        token,
        json,
        redraw: std::io::stdout().is_terminal(),
    };
    let rt = match runtime(Some(1)) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    match rt.block_on(crate::ctl::run(&opts, &command, &mut out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                crate::ctl::CtlError::Usage(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    config::parse_duration(s)
}

fn init_logging(default: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Logs go to stderr so that stdout stays the command's own output (the demo's story,
    // `weir check`'s verdict); colour escapes only where a person reads a terminal.
    let colour = ansi_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colour).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// ANSI colour in text logs: only on a terminal, and never when `NO_COLOR` is set to a
/// non-empty value (<https://no-color.org>).
fn ansi_wanted(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
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
    // The client prints tables on stdout: no log lines there.
    match cli.cmd {
        Command::Ctl { .. } => {}
        // The demo prints the rollout itself; logs only for problems.
        Command::Demo { .. } => init_logging("warn,weir::rollout=off", cli.log_format),
        _ => init_logging("info", cli.log_format),
    }
    match cli.cmd {
        Command::Check { config } => match config::load_file(&config) {
            Ok(c) => {
                if !c.warnings.is_empty() {
                    let file = config.display().to_string();
                    eprintln!("{}", config::format_warnings(&file, &c.warnings));
                }
                for note in config::provider_notes(&c) {
                    println!("{}: note: {note}", config.display());
                }
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
            let (raw, cfg) = match config::load_file_with_raw(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            if !cfg.warnings.is_empty() {
                let file = config.display().to_string();
                eprintln!("{}", config::format_warnings(&file, &cfg.warnings));
            }
            let rt = match runtime(workers) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let started = crate::reload::Started::new(raw);
            rt.block_on(serve(cfg, config, started))
        }
        Command::Probe { url, timeout } => match crate::probe::status(&url, timeout) {
            Ok(code @ 200..=299) => {
                println!("{url}: {code}");
                ExitCode::SUCCESS
            }
            Ok(code) => {
                eprintln!("{url}: HTTP {code}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("{url}: {e}");
                ExitCode::FAILURE
            }
        },
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
        Command::Ctl {
            api,
            token_file,
            json,
            cmd,
        } => ctl_main(api, token_file, json, cmd),
        Command::Demo { scenario, hold } => crate::demo::main(scenario, hold),
    }
}

async fn serve(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_arguments_follow_go_syntax_and_name_the_argument() {
        for (args, flag) in [
            (&["weir", "echo", "--latency", "1M"][..], "--latency"),
            (&["weir", "echo", "--latency", "1 minute"][..], "--latency"),
            (&["weir", "echo", "--latency=-20ms"][..], "--latency"),
            (
                &["weir", "probe", "http://127.0.0.1:1/", "--timeout", "2"][..],
                "--timeout",
            ),
            (
                &["weir", "ctl", "watch", "--interval", "1sec"][..],
                "--interval",
            ),
        ] {
            let e = Cli::try_parse_from(args).expect_err(&args.join(" "));
            let text = e.to_string();
            assert!(text.contains(flag), "{args:?}: {text}");
            assert!(text.contains("300ms, 1.5h, 1m30s"), "{args:?}: {text}");
        }
        for (value, want) in [("0", 0), ("1.5s", 1500), ("+20ms", 20), ("1m", 60_000)] {
            let cli = Cli::try_parse_from(["weir", "echo", "--latency", value]).expect(value);
            let Command::Echo { latency, .. } = cli.cmd else {
                panic!("{value}: not echo");
            };
            assert_eq!(latency, std::time::Duration::from_millis(want), "{value}");
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(ansi_wanted(true, None));
        assert!(ansi_wanted(true, Some(OsStr::new(""))));
        assert!(!ansi_wanted(true, Some(OsStr::new("1"))));
        assert!(!ansi_wanted(false, None));
    }

    #[test]
    fn log_format_is_a_global_flag_with_two_values() {
        let cli = Cli::try_parse_from(["weir", "check", "--log-format", "json"]).expect("json");
        assert_eq!(cli.log_format, LogFormat::Json);
        let cli = Cli::try_parse_from(["weir", "--log-format=text", "check"]).expect("text");
        assert_eq!(cli.log_format, LogFormat::Text);
        let e = Cli::try_parse_from(["weir", "check", "--log-format", "xml"]).expect_err("xml");
        assert!(e.to_string().contains("--log-format"), "{e}");
    }
}
