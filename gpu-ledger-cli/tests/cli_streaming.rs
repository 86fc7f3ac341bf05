//! The `gpu-ledger` binary on ledgers longer than it holds whole: summary, report and compare
//! streamed (`--hold-bytes 0` streams every ledger) print what they print for a ledger held
//! whole, merge prints what it printed, and nothing reaches stderr when it is not a terminal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu-ledger"))
        .args(args)
        .output()
        .expect("gpu-ledger runs")
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn golden() -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
    v.sort();
    v
}

/// The same command, held whole and streamed: the same exit status, stdout and stderr.
fn same_streamed(args: &[&str]) {
    let whole = run(args);
    let mut streamed_args = vec!["--hold-bytes", "0"];
    streamed_args.extend_from_slice(args);
    let streamed = run(&streamed_args);
    assert_eq!(whole.status.code(), streamed.status.code(), "{args:?}");
    assert_eq!(
        String::from_utf8_lossy(&whole.stdout),
        String::from_utf8_lossy(&streamed.stdout),
        "{args:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&whole.stderr),
        String::from_utf8_lossy(&streamed.stderr),
        "{args:?}"
    );
}

#[test]
fn summary_and_compare_streamed_print_what_they_print_held_whole() {
    let all = golden();
    assert!(all.len() >= 8);
    for a in &all {
        same_streamed(&["summary", a]);
        same_streamed(&["summary", "--warmup", "none", "--include-perturbed", a]);
        for b in [data("v1-ab-change.jsonl"), data("v1-rank1.jsonl")] {
            same_streamed(&["compare", a, &b, "--resamples", "300"]);
        }
    }
}

#[test]
fn reports_streamed_are_the_reports_held_whole() {
    let dir = tempfile::tempdir().unwrap();
    for (i, a) in golden().iter().enumerate() {
        let whole = dir.path().join(format!("{i}-whole.html"));
        let streamed = dir.path().join(format!("{i}-streamed.html"));
        let w = run(&["report", a, "-o", whole.to_str().unwrap()]);
        let s = run(&[
            "--hold-bytes",
            "0",
            "report",
            a,
            "-o",
            streamed.to_str().unwrap(),
        ]);
        assert_eq!(w.status.code(), s.status.code(), "{a}");
        if w.status.success() {
            assert!(
                std::fs::read(&whole).unwrap() == std::fs::read(&streamed).unwrap(),
                "{a}: the streamed report differs"
            );
        }
    }
}

/// A ledger of `rows` rows made from a golden one.
fn long_ledger(dir: &Path, name: &str, rows: u64) -> PathBuf {
    let text = std::fs::read_to_string(data("v1-rank0.jsonl")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let row: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut out = String::new();
    out.push_str(header);
    out.push('\n');
    for i in 0..rows {
        let mut r = row.clone();
        r["index"] = i.into();
        r["host_start_ns"] = (i * 2_000_000).into();
        r["host_wall_ns"] = (1_000_000 + (i * 7919) % 50_000).into();
        out.push_str(&r.to_string());
        out.push('\n');
    }
    let path = dir.join(name);
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn long_streamed_commands_are_silent_on_stderr_that_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let a = long_ledger(dir.path(), "a.jsonl", 3_000);
    let a = a.to_str().unwrap();
    let html = dir.path().join("r.html");
    for args in [
        vec!["summary", a],
        vec!["compare", a, a, "--resamples", "50"],
        vec!["merge", a],
        vec!["merge", "--format", "csv", a],
    ] {
        let mut streamed = vec!["--hold-bytes", "0"];
        streamed.extend_from_slice(&args);
        let o = run(&streamed);
        assert!(o.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{args:?}");
        assert!(!o.stdout.is_empty());
    }
    let o = run(&[
        "--hold-bytes",
        "0",
        "report",
        a,
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("gpu-ledger: report written to {}\n", html.display())
    );
    // Asked for, progress is a line every 10 000 rows off a terminal, streamed too.
    let b = long_ledger(dir.path(), "b.jsonl", 20_000);
    let o = run(&[
        "--hold-bytes",
        "0",
        "--progress",
        "summary",
        b.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("10000 rows read") && err.contains("20000 rows read"),
        "{err}"
    );
}

#[test]
fn a_merge_of_long_ledgers_lists_every_iteration_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = long_ledger(dir.path(), "a.jsonl", 2_500);
    let o = run(&["merge", "--format", "csv", a.to_str().unwrap()]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let indices: Vec<u64> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(indices, (0..2_500).collect::<Vec<u64>>());
}
