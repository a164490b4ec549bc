//! `weir ctl`'s subcommands (clap) and their dispatch to the client in
//! `crate::ctl`.

use super::{parse_duration_arg, runtime};
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub(super) enum CtlCmd {
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
    /// Set a backend's endpoint list (a rolling update), then wait until it is rolled
    /// out: exit 0 when complete, 1 when stalled or not done within --timeout.
    Deploy {
        /// Backend name (e.g. the idle slot `weir ctl status` shows).
        backend: String,
        /// The new endpoints, `host:port` each.
        #[arg(required = true)]
        endpoints: Vec<String>,
        /// Give up waiting after this long (the update goes on in the server).
        #[arg(long, value_parser = parse_duration_arg, default_value = "5m")]
        timeout: std::time::Duration,
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
    /// release live (phase, step plan, countdown, per-side stats, checks, events) until
    /// the run finishes.
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
        /// Start even if the canary slot reports another revision (watchRevision).
        #[arg(long)]
        force: bool,
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

pub(super) fn ctl_main(
    api: String,
    token_file: Option<PathBuf>,
    json: bool,
    cmd: CtlCmd,
) -> ExitCode {
    use std::io::IsTerminal;
    let token = match token_file.as_deref().map(crate::ctl::read_token_file) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            eprintln!("error: {}", crate::text::for_terminal_block(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    if let CtlCmd::Watch {
        canary: Some(name),
        window,
        interval,
        count,
        ..
    } = &cmd
    {
        let opts = crate::ctl::CtlOptions {
            api,
            token,
            json,
            redraw: std::io::stdout().is_terminal(),
        };
        let live = crate::ctl::live::LiveOptions {
            name: name.clone(),
            count: *count,
            interval: *interval,
            window: window.clone(),
        };
        return crate::ctl::live::main(&opts, &live);
    }
    use crate::ctl::canaries::CanaryCommand;
    let canary_cmd = match &cmd {
        CtlCmd::Canaries { name } => Some(CanaryCommand::Show { name: name.clone() }),
        CtlCmd::Start {
            canary,
            revision,
            force,
        } => Some(CanaryCommand::Start {
            name: canary.clone(),
            revision: revision.clone(),
            force: *force,
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
                eprintln!("error: {}", crate::text::for_terminal_block(&e.to_string()));
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
        CtlCmd::Deploy {
            backend,
            endpoints,
            timeout,
        } => crate::ctl::CtlCommand::Deploy {
            backend,
            endpoints,
            timeout,
        },
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
            eprintln!("error: {}", crate::text::for_terminal_block(&e.to_string()));
            match e {
                crate::ctl::CtlError::Usage(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
