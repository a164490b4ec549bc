//! `weir ctl` as a child process against an app in the test's process.

use std::process::{Command, Stdio};
use std::time::Duration;
use weir::app::RunningApp;

/// Upper bound for one ctl run (a hang guard, not an assertion on speed).
pub const GUARD: Duration = Duration::from_secs(60);

/// What one `weir ctl` run left.
pub struct Out {
    /// The exit code (-1: killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `weir ctl --api <admin> <args>`, stdout and stderr piped (so `watch`
/// prints plain lines), no `WEIR_API` or `WEIR_TOKEN_FILE` from the
/// environment.
pub fn ctl_command(app: &RunningApp, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.arg("ctl")
        .arg("--api")
        .arg(format!("http://{}", app.admin_addr))
        .args(args)
        .env_remove("WEIR_API")
        .env_remove("WEIR_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs [`ctl_command`] and waits for it without blocking the runtime (the
/// app answers from this process).
pub async fn ctl(app: &RunningApp, args: &[&str]) -> Out {
    let mut child = ctl_command(app, args).spawn().expect("spawn weir ctl");
    let deadline = tokio::time::Instant::now() + GUARD;
    while child.try_wait().expect("wait").is_none() {
        if tokio::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("weir ctl {args:?} did not finish");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = child.wait_with_output().expect("output");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
