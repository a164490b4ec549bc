//! The `weir` binary's `check` command on the shipped and on broken configs.

use std::process::Command;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

#[test]
fn every_shipped_config_passes_check() {
    let mut n = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let out = weir().args(["check", "-c"]).arg(&path).output().unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 1, "no config/*.yaml found");
}

#[test]
fn a_broken_config_prints_every_error_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("weir-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.yaml");
    std::fs::write(
        &path,
        "listeners:\n  - name: http\n    address: nowhere\nbackends:\n  b:\n    endpoints: [\"127.0.0.1\"]\nroutes:\n  - name: r\n    primary: missing\n    canaryWeight: 101\n",
    )
    .unwrap();
    let out = weir().args(["check", "-c"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    // One report per error, cargo-style: the field, then where (at the value).
    for (line, field) in [
        ("3:14", "listeners[0].address"),
        ("6:17", "backends.b.endpoints[0]"),
        ("9:14", "routes[0].primary"),
        ("10:19", "routes[0].canaryWeight"),
    ] {
        let needle = format!("error: {field}: ");
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
        let needle = format!("broken.yaml:{line}\n");
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
    assert!(err.ends_with("` due to 4 previous errors\n"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_config_with_warnings_passes_check_and_prints_them_with_the_field() {
    let dir = std::env::temp_dir().join(format!("weir-cli-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("capped.yaml");
    std::fs::write(
        &path,
        "listeners:\n  - name: http\n    address: 127.0.0.1:0\nbackends:\n  a:\n    endpoints: [\"127.0.0.1:9001\"]\n  b:\n    endpoints: [\"127.0.0.1:9002\"]\nroutes:\n  - name: r\n    primary: a\n    canary: b\ncanaries:\n  - name: c\n    route: r\n    analysis:\n      stepWeights: [1, 2, 10, 200]\n",
    )
    .unwrap();
    let out = weir().args(["check", "-c"]).arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for needle in [
        "warning: canaries[0].analysis.stepWeights[3]: 200 is above 100",
        "capped.yaml:17:31\n",
        "capped.yaml` generated 1 warning\n",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    let _ = std::fs::remove_dir_all(&dir);
}
