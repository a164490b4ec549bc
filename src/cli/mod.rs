//! The command line (clap). Each subcommand validates its arguments and
//! hands over to the library; exit codes: 0 ok, 1 failure, 2 usage.

use crate::config;
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

mod ctl;
mod serve;
use ctl::{ctl_main, CtlCmd};
use serve::serve;

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
    /// Simulations of the rollout engine on synthetic traffic.
    Sim {
        #[command(subcommand)]
        what: SimCmd,
    },
    /// Convert another tool's manifests to a weir config (stdout); what cannot be
    /// mapped is listed at the end of the output.
    Import {
        #[command(subcommand)]
        from: ImportCmd,
    },
    /// A small bounded load generator: GET URL at --rate per second for --duration,
    /// a summary line per second (status classes, p50/p99, versions) and a total.
    Load {
        /// e.g. http://127.0.0.1:8080/
        url: String,
        /// Requests started per second (1..=10000).
        #[arg(long, default_value_t = 20)]
        rate: u32,
        /// How long to send (at most 1h).
        #[arg(long, value_parser = parse_duration_arg, default_value = "30s")]
        duration: std::time::Duration,
        /// Requests in flight at most (1..=1024); one due while all are busy is skipped.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Extra request header, `name: value` (repeatable).
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Cookie header to send, e.g. `canary=always`.
        #[arg(long)]
        cookie: Option<String>,
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
enum ImportCmd {
    /// Flagger's Canary, MetricTemplate and AlertProvider manifests (multi-document
    /// YAML; other kinds are skipped with a note).
    Flagger {
        /// Manifest files; `-` reads stdin.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum SimCmd {
    /// Replay the judges (threshold, comparison, sequential) on seeded synthetic
    /// releases: false rollbacks, false promotions, undecided runs and time to a
    /// decision per scenario.
    Judge {
        /// Runs per scenario.
        #[arg(long, default_value_t = 1000)]
        runs: u32,
        /// Seed of the runs; the same seed gives the same table.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// YAML or JSON file of scenarios (`scenarios: [{rps: 50, errorDeltaPp: 5}, …]`)
        /// instead of the built-in 15.
        #[arg(long)]
        scenarios: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    config::parse_duration(s)
}

fn init_logging(default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Logs go to stderr so that stdout stays the command's own output (the demo's story,
    // `weir check`'s verdict); colour escapes only where a person reads a terminal.
    let colour = stderr_colour();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(colour).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// Colour in what is written to stderr (logs, `weir check`'s report).
fn stderr_colour() -> bool {
    use std::io::IsTerminal;
    ansi_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
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
        Command::Ctl { .. } | Command::Load { .. } | Command::Sim { .. } => {}
        // The demo prints the rollout itself; logs only for problems.
        Command::Demo { .. } => init_logging("warn,weir::rollout=off", cli.log_format),
        _ => init_logging("info", cli.log_format),
    }
    match cli.cmd {
        Command::Check { config } => {
            if config::diagnostics::check_command(&config, stderr_colour()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Serve { config, workers } => {
            // The same report as `weir check`; a file with any error never starts.
            let checked = config::diagnostics::check_file(&config);
            eprint!("{}", checked.report.render(stderr_colour()));
            let Some((raw, cfg)) = checked.loaded else {
                return ExitCode::FAILURE;
            };
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
        Command::Import {
            from: ImportCmd::Flagger { files },
        } => crate::import::main(&files),
        Command::Sim {
            what:
                SimCmd::Judge {
                    runs,
                    seed,
                    scenarios,
                    json,
                },
        } => crate::sim::judge_main(runs, seed, scenarios.as_deref(), json),
        Command::Load {
            url,
            rate,
            duration,
            concurrency,
            headers,
            cookie,
        } => crate::load::main(
            &url,
            rate,
            duration,
            concurrency,
            &headers,
            cookie.as_deref(),
        ),
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
