//! `weir check` on realistic mistakes, with the real binary: the exact report
//! (every error at once, `file:line:col`, excerpt, caret, help, cargo's summary)
//! and the exit code; `weir serve` refuses the same file with the same report.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const GOOD: &str = r#"listeners:
  - name: http
    address: 127.0.0.1:0
backends:
  app-blue:
    endpoints: ["127.0.0.1:9001"]
  app-green:
    endpoints: ["127.0.0.1:9101"]
routes:
  - name: app
    primary: app-blue
    canary: app-green
    timeout: 15s
canaries:
  - name: app
    route: app
    analysis:
      interval: 1m
      threshold: 5
      maxWeight: 50
      stepWeight: 10
"#;

/// A directory of its own per test, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("weir-check-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn write(&self, yaml: &str) {
        std::fs::write(self.0.join("weir.yaml"), yaml).unwrap();
    }

    fn weir(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.current_dir(&self.0).args(args).env("NO_COLOR", "1");
        c
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `weir check -c weir.yaml` on `yaml`: exit code, stdout, stderr.
fn check(name: &str, yaml: &str) -> (i32, String, String) {
    let d = Dir::new(name);
    d.write(yaml);
    let out: Output = d.weir(&["check", "-c", "weir.yaml"]).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The file is refused: exit 1, nothing on stdout, exactly `want` on stderr.
fn refused(name: &str, yaml: &str, want: &str) {
    let (code, stdout, stderr) = check(name, yaml);
    assert_eq!(
        stderr, want,
        "\n--- got ---\n{stderr}\n--- want ---\n{want}"
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
}

#[test]
fn a_good_file_is_ok_with_nothing_on_stderr() {
    let (code, stdout, stderr) = check("good", GOOD);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        "weir.yaml: ok (1 listeners, 2 backends, 1 routes, 1 canaries)\n"
    );
}

#[test]
fn a_misspelt_field_is_named_with_the_field_meant() {
    refused(
        "typo",
        &GOOD.replace("stepWeight: 10", "stepWieght: 10"),
        r#"error: canaries[0].analysis: unknown field `stepWieght`
  --> weir.yaml:21:7
   |
21 |       stepWieght: 10
   |       ^^^^^^^^^^
   |
   = help: did you mean `stepWeight`?

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn a_word_where_a_number_goes_is_a_type_error_at_the_value() {
    refused(
        "number",
        &GOOD.replace("threshold: 5", "threshold: five"),
        r#"error: canaries[0].analysis.threshold: expected an integer, found `five`
  --> weir.yaml:19:18
   |
19 |       threshold: five
   |                  ^^^^

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn a_duration_with_a_space_says_how_to_write_it() {
    refused(
        "duration",
        &GOOD.replace("timeout: 15s", "timeout: 10 s"),
        r#"error: routes[0].timeout: unknown unit " s" in duration "10 s"; a duration is decimal numbers, each with an optional fraction and a unit (ns, us or µs, ms, s, m, h), e.g. 300ms, 1.5h, 1m30s, or 0
  --> weir.yaml:13:14
   |
13 |     timeout: 10 s
   |              ^^^^
   |
   = help: write it without spaces: `10s`

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn a_route_naming_an_unknown_backend_gets_the_closest_name() {
    refused(
        "reference",
        &GOOD.replace("canary: app-green", "canary: app-gren"),
        r#"error: routes[0].canary: unknown backend "app-gren"
  --> weir.yaml:12:13
   |
12 |     canary: app-gren
   |             ^^^^^^^^
   |
   = help: did you mean `app-green`?

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn an_indentation_error_points_at_the_line_and_says_why() {
    refused(
        "indent",
        &GOOD.replace("    canary: app-green", "     canary: app-green"),
        r#"error: invalid YAML: mapping values are not allowed in this context
  --> weir.yaml:12:12
   |
12 |      canary: app-green
   |            ^
   |
   = help: this line is indented by 5 spaces and the line above by 4: the keys of one mapping must line up

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn a_field_indented_too_little_is_recognised() {
    refused(
        "dedent",
        &GOOD.replace(
            "    endpoints: [\"127.0.0.1:9101\"]\n",
            "    endpoints: [\"127.0.0.1:9101\"]\n  revisionPath: /version\n",
        ),
        r#"error: backends.revisionPath: expected a mapping, found `/version`
 --> weir.yaml:9:17
  |
9 |   revisionPath: /version
  |                 ^^^^^^^^
  |
  = help: if `revisionPath` is a field of `app-green` above, indent it as far as `endpoints`

error: could not validate `weir.yaml` due to 1 previous error
"#,
    );
}

#[test]
fn parse_and_validation_errors_of_one_file_come_at_once() {
    // A type error (parse), a missing port (validation) and an unknown field in a
    // flow mapping (parse), reported in file order.
    let yaml = GOOD
        .replace("maxWeight: 50", "maxWeight: \"50%\"")
        .replace("[\"127.0.0.1:9101\"]", "[\"127.0.0.1\"]")
        .replace(
            "    timeout: 15s\n",
            "    timeout: 15s\n    headers: { request: { set: { x-env: prod } }, respnse: {} }\n",
        );
    refused(
        "two",
        &yaml,
        r#"error: backends.app-green.endpoints[0]: expected host:port (got "127.0.0.1"): the port is missing
 --> weir.yaml:8:17
  |
8 |     endpoints: ["127.0.0.1"]
  |                 ^^^^^^^^^^^

error: routes[0].headers: unknown field `respnse`
  --> weir.yaml:14:51
   |
14 |     headers: { request: { set: { x-env: prod } }, respnse: {} }
   |                                                   ^^^^^^^
   |
   = help: did you mean `response`?

error: canaries[0].analysis.maxWeight: expected an integer, found the string "50%"
  --> weir.yaml:21:18
   |
21 |       maxWeight: "50%"
   |                  ^^^^^

error: could not validate `weir.yaml` due to 3 previous errors
"#,
    );
}

#[test]
fn fields_that_change_nothing_are_warnings_and_the_file_passes() {
    let yaml = r##"listeners:
  - name: http
    address: 127.0.0.1:0
backends:
  app-blue:
    endpoints: ["127.0.0.1:9001"]
  app-green:
    endpoints: ["127.0.0.1:9101"]
routes:
  - name: app
    primary: app-blue
    canary: app-green
  - name: admin
    hosts: [admin.example.com]
    primary: app-blue
    sessionAffinity: { cookieName: pinned }
canaries:
  - name: app
    route: app
    progressDeadline: 5m
    analysis:
      stepWeights: [5, 25, 50]
      maxWeight: 50
      stepWeightPromotion: 25
      primaryReadyThreshold: 100
      canaryReadyThreshold: 100
      mirrorWeight: 20
      metrics:
        - name: error-rate
          query: sum(rate(errors[1m]))
          prometheusUrl: http://127.0.0.1:9090
          minRequests: 50
          thresholdRange: { max: 1 }
      webhooks:
        - name: load-test
          url: http://127.0.0.1:8090/run
          muteAlert: true
alertProviders:
  on-call: { type: generic, address: "http://127.0.0.1:9/alerts", channel: "#deploys" }
"##;
    let (code, stdout, stderr) = check("warnings", yaml);
    let want = r##"warning: routes[1].sessionAffinity: ignored: the route has no canary backend, so there is nothing to pin clients to
  --> weir.yaml:16:5
   |
16 |     sessionAffinity: { cookieName: pinned }
   |     ^^^^^^^^^^^^^^^

warning: canaries[0].progressDeadline: ignored with `promotion: swap`: only a webhook promotion waits for the primary
  --> weir.yaml:20:23
   |
20 |     progressDeadline: 5m
   |                       ^^

warning: canaries[0].analysis.maxWeight: ignored with stepWeights: the last step weight is the maximum
  --> weir.yaml:23:18
   |
23 |       maxWeight: 50
   |                  ^^

warning: canaries[0].analysis.stepWeightPromotion: ignored with `promotion: swap`: the swap moves all traffic in one step (it applies to `promotion: webhook`)
  --> weir.yaml:24:28
   |
24 |       stepWeightPromotion: 25
   |                            ^^

warning: canaries[0].analysis.primaryReadyThreshold: ignored: accepted for Flagger compatibility; weir sends traffic only to endpoints whose health checks pass
  --> weir.yaml:25:30
   |
25 |       primaryReadyThreshold: 100
   |                              ^^^

warning: canaries[0].analysis.canaryReadyThreshold: ignored: accepted for Flagger compatibility; weir sends traffic only to endpoints whose health checks pass
  --> weir.yaml:26:29
   |
26 |       canaryReadyThreshold: 100
   |                             ^^^

warning: canaries[0].analysis.mirrorWeight: ignored without `mirror: true`
  --> weir.yaml:27:21
   |
27 |       mirrorWeight: 20
   |                     ^^

warning: canaries[0].analysis.metrics[0].minRequests: ignored for a Prometheus query: it counts the proxy's own requests of the built-in metrics
  --> weir.yaml:32:24
   |
32 |           minRequests: 50
   |                        ^^

warning: canaries[0].analysis.webhooks[0].muteAlert: ignored: the canary has no `analysis.alerts`, so no alert is sent to mute
  --> weir.yaml:37:22
   |
37 |           muteAlert: true
   |                      ^^^^

warning: alertProviders.on-call.channel: ignored: a generic message has no channel (only slack and rocket use it)
  --> weir.yaml:39:76
   |
39 |   on-call: { type: generic, address: "http://127.0.0.1:9/alerts", channel: "#deploys" }
   |                                                                            ^^^^^^^^^^

warning: `weir.yaml` generated 10 warnings
"##;
    assert_eq!(stderr, want, "\n--- got ---\n{stderr}");
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        "weir.yaml: ok (1 listeners, 2 backends, 2 routes, 1 canaries)\n"
    );
}

#[test]
fn serve_refuses_a_bad_file_with_the_same_report_and_never_starts() {
    let d = Dir::new("serve");
    let yaml = GOOD
        .replace("stepWeight: 10", "stepWieght: 10")
        .replace("canary: app-green", "canary: app-gren");
    d.write(&yaml);
    let checked = d.weir(&["check", "-c", "weir.yaml"]).output().unwrap();
    let mut child = d
        .weir(&["serve", "-c", "weir.yaml"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It exits by itself: a process that started would run until signalled.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("weir serve started with an invalid config");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = child.wait_with_output().unwrap();
    assert_eq!(served.status.code(), Some(1));
    let report = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(String::from_utf8_lossy(&served.stderr), report);
    assert!(report.contains("due to 2 previous errors"), "{report}");
}
