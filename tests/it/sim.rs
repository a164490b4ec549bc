//! `weir sim judge` through the binary: the scenario file, the table, `--json`, and the
//! same output for the same seed. The statistics themselves are tested on the library
//! (`src/sim/tests.rs`), where a thousand runs cost seconds, not a process each.

use std::path::PathBuf;
use std::process::{Command, Output};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .output()
        .unwrap()
}

fn scenario_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_scenario_file_gives_the_same_json_for_the_same_seed() {
    let path = scenario_file(
        "two.yaml",
        "scenarios:\n  - {rps: 50}\n  - {rps: 500, errorDeltaPp: 5, maxChecks: 10}\n",
    );
    let path = path.to_str().unwrap();
    let args = [
        "sim",
        "judge",
        "--runs",
        "40",
        "--seed",
        "2",
        "--scenarios",
        path,
        "--json",
    ];
    let first = weir(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(first.stdout, weir(&args).stdout, "same seed, same report");
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(report["runs"], 40);
    assert_eq!(report["seed"], 2);
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    assert_eq!(scenarios[0]["scenario"]["name"], "A/A");
    assert_eq!(scenarios[1]["canaryIsWorse"], true);
    for s in scenarios {
        let judges = s["judges"].as_array().unwrap();
        let names: Vec<&str> = judges
            .iter()
            .map(|j| j["judge"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["threshold", "comparison", "sequential"]);
        for j in judges {
            let sum: u64 = ["promoted", "rolledBack", "undecided"]
                .iter()
                .map(|k| j[k].as_u64().unwrap())
                .sum();
            assert_eq!(sum, 40, "{j}");
        }
    }
    // +5 pp at 500 rps: every judge rolls every run back.
    for j in scenarios[1]["judges"].as_array().unwrap() {
        assert_eq!(j["rolledBack"], 40, "{j}");
        assert_eq!(j["falsePromotionRate"], 0.0, "{j}");
    }
}

#[test]
fn the_table_has_a_line_per_scenario_and_judge() {
    let path = scenario_file("one.yaml", "scenarios:\n  - {rps: 5, maxChecks: 6}\n");
    let out = weir(&[
        "sim",
        "judge",
        "--runs",
        "10",
        "--scenarios",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("10 runs per scenario, seed 1"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("A/A ")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[2].contains("sequential"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("simulated 10 runs in"));
}

#[test]
fn bad_arguments_and_files_exit_2_naming_the_field() {
    let path = scenario_file("bad.yaml", "scenarios:\n  - {rps: -1, sigma: 9}\n");
    let out = weir(&["sim", "judge", "--scenarios", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scenarios[0].rps: must be"), "{err}");
    assert!(err.contains("scenarios[0].sigma: must be"), "{err}");
    let out = weir(&["sim", "judge", "--runs", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = weir(&["sim", "judge", "--scenarios", "/nonexistent/weir-sim.yaml"]);
    assert_eq!(out.status.code(), Some(2));
}
