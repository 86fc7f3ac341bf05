//! The `gpu-ledger` binary, run as a user runs it: every subcommand on the golden ledgers,
//! usage errors (exit 2), corrupt ledgers (exit 1 with `path:line:`, never a panic), a ledger
//! whose last line was cut (a warning naming the line, then the command runs on the whole lines),
//! outputs written whole or not at all, and progress on long inputs.

use std::path::Path;
use std::process::Output;

mod cli_common;
use cli_common::{data, run, stderr, stdout};

fn assert_no_panic(o: &Output) {
    let e = stderr(o);
    assert!(!e.contains("panicked"), "panic: {e}");
    assert_ne!(o.status.code(), Some(101), "panic exit: {e}");
}

fn d(name: &str) -> String {
    data(name).display().to_string()
}

#[test]
fn summary_prints_markdown() {
    let o = run(&["summary", &d("v1-nested-scopes.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("## gpu-ledger summary:"));
    assert!(out.contains("| scope | ran in |"));
    assert!(out.contains("### Top kernel families"));
    assert!(out.contains("warm-up 0; perturbed 6; incomplete 11"));
    // Options change what counts.
    let o = run(&[
        "summary",
        &d("v1-nested-scopes.jsonl"),
        "--warmup",
        "none",
        "--include-perturbed",
        "--family-rule",
        "sgemm=GEMM",
        "--top",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("11 used (left out: warm-up none; perturbed none; incomplete 11)"));
    assert!(out.contains("| 1 | GEMM |"));
    assert!(out.contains("2 more families not shown"));
}

/// Every command that reads a ledger, with `""` where the ledger's path goes.
const READING_COMMANDS: [&[&str]; 7] = [
    &["summary", ""],
    &["check", ""],
    &["csv", "", "-o", "-"],
    &["report", "", "-o", "-"],
    &["trace", "", "-o", "-"],
    &["merge", ""],
    &["metrics", ""],
];

fn with_path<'a>(cmd: &[&'a str], path: &'a str) -> Vec<&'a str> {
    cmd.iter()
        .map(|a| if a.is_empty() { path } else { a })
        .collect()
}

/// Runs every [`READING_COMMANDS`] on `path`: each fails with status 1, without a panic, and
/// says `message` on stderr.
fn assert_every_command_fails(path: &str, message: &str) {
    for cmd in READING_COMMANDS {
        let args = with_path(cmd, path);
        let o = run(&args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn corrupt_ledgers_fail_with_their_line() {
    let (name, line) = ("v1-corrupt.jsonl", 3);
    let path = d(name);
    assert_every_command_fails(&path, &format!("{path}:{line}: "));
}

#[test]
fn a_cut_last_line_is_a_warning_and_the_whole_lines_are_used() {
    // v1-truncated.jsonl: header and 3 whole rows, then line 5 cut without its newline.
    let path = d("v1-truncated.jsonl");
    let warning = format!(
        "{path}: warning: line 5: truncated (the run was killed while writing it); the 4 lines \
         before it are valid"
    );
    for cmd in READING_COMMANDS {
        let args = with_path(cmd, &path);
        let o = run(&args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let (out, err) = (stdout(&o), stderr(&o));
        if cmd[0] == "check" {
            // The check's report (stdout) carries the warning.
            assert!(
                out.contains(&format!(
                    "{path}: valid: schema 1, level timeline, 3 iterations"
                )),
                "{out}"
            );
            assert_eq!(out.matches(&warning).count(), 1, "{out}");
            assert!(!err.contains("truncated"), "{err}");
        } else {
            assert_eq!(
                err.matches(&warning).count(),
                1,
                "{args:?}: the warning is printed once: {err}"
            );
        }
    }
    // The rows are there: 3 CSV lines under the column line.
    let o = run(&["csv", &path, "-o", "-"]);
    assert_eq!(stdout(&o).lines().count(), 4, "{}", stdout(&o));
}

#[test]
fn a_cut_line_that_is_not_the_last_stays_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("v1-truncated.jsonl")).unwrap();
    // The cut line followed by a newline: a truncated line, not a cut last line.
    let ended = dir.path().join("ended.jsonl");
    std::fs::write(&ended, format!("{text}\n")).unwrap();
    // The cut line followed by a whole row.
    let middle = dir.path().join("middle.jsonl");
    let row = text.lines().nth(1).unwrap();
    std::fs::write(&middle, format!("{text}\n{row}\n")).unwrap();
    for file in [&ended, &middle] {
        let path = file.display().to_string();
        assert_every_command_fails(&path, &format!("{path}:5: truncated line"));
    }
}

#[test]
fn unreadable_inputs_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let binary = dir.path().join("binary.jsonl");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x01, b'\n']).unwrap();
    let newer = dir.path().join("newer.jsonl");
    let h = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    std::fs::write(
        &newer,
        h.replace("\"schema_version\":1", "\"schema_version\":9"),
    )
    .unwrap();
    let cases: [(&Path, &str); 4] = [
        (&empty, ":1: empty ledger"),
        (&binary, ":1: "),
        (&newer, ":1: schema version 9 is newer"),
        (
            Path::new("/nonexistent/run.jsonl"),
            "run.jsonl: cannot open",
        ),
    ];
    for (path, msg) in cases {
        let o = run(&["summary", path.to_str().unwrap()]);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains(msg), "{}", stderr(&o));
    }
    let o = run(&["summary", dir.path().to_str().unwrap()]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1), "a directory: {}", stderr(&o));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["summary"],
        vec!["trace", "x.jsonl"],
        vec!["trace", "x.jsonl", "-o", "y.json", "--iterations", "5..2"],
        vec!["trace", "x.jsonl", "-o", "y.json", "--iterations", "a..b"],
        vec!["compare", "a.jsonl"],
        vec!["compare", "a.jsonl", "b.jsonl", "--experiment-log", "dir"],
        vec!["compare", "a.jsonl", "b.jsonl", "--metric", "flops"],
        vec!["summary", "x.jsonl", "--warmup", "many"],
        vec!["summary", "x.jsonl", "--family-rule", "no-equals-sign"],
        vec!["check"],
        vec!["merge", "--format", "xml", "a"],
    ] {
        let o = run(&args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty(), "{args:?}: no message");
    }
    let o = run(&["--help"]);
    assert!(o.status.success());
    for sub in [
        "summary", "compare", "trace", "report", "csv", "check", "merge",
    ] {
        assert!(stdout(&o).contains(sub), "help lacks {sub}");
    }
    let o = run(&["--version"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains(env!("CARGO_PKG_VERSION")));
    let o = run(&["trace", "--help"]);
    assert!(o.status.success() && stdout(&o).contains("--iterations"));
}

#[test]
fn compare_gives_a_verdict_and_appends_to_the_experiment_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("experiments");
    let args = [
        "compare",
        &d("v1-ab-baseline.jsonl"),
        &d("v1-ab-change.jsonl"),
        "--hypothesis",
        "the GEMM is tail-wave limited",
        "--change",
        "tile 128x128 -> 128x64",
        "--experiment-log",
        log.to_str().unwrap(),
        "--resamples",
        "2000",
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("**Hypothesis:** the GEMM is tail-wave limited"));
    assert!(out.contains("**Verdict: B is faster.**"), "{out}");
    assert!(stderr(&o).contains("experiments.md"));
    // Same seed, same interval.
    let again = run(&args);
    let line = |s: &str| {
        s.lines()
            .find(|l| l.contains("Verdict"))
            .unwrap()
            .to_string()
    };
    assert_eq!(line(&out), line(&stdout(&again)));
    let md = std::fs::read_to_string(log.join("experiments.md")).unwrap();
    assert_eq!(md.matches("| date |").count(), 1, "one header");
    assert_eq!(md.matches("| the GEMM is tail-wave limited |").count(), 2);
    let csv = std::fs::read_to_string(log.join("experiments.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
    assert!(csv.lines().nth(1).unwrap().contains(",faster,"));

    let o = run(&[
        "compare",
        &d("v1-ab-baseline.jsonl"),
        &d("v1-ab-baseline.jsonl"),
    ]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("**Verdict: no significant change.**"));

    let o = run(&[
        "compare",
        &d("v1-ab-baseline.jsonl"),
        &d("v1-ab-change.jsonl"),
        "--metric",
        "device-busy:7",
    ]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no usable iteration"), "{}", stderr(&o));
}

#[test]
fn trace_writes_perfetto_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.json");
    let o = run(&[
        "trace",
        &d("v1-overlapping-streams.jsonl"),
        "-o",
        out.to_str().unwrap(),
        "--iterations",
        "1..=2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    assert_eq!(ev.iter().filter(|e| e["cat"] == "iteration").count(), 2);
    assert_eq!(ev.iter().filter(|e| e["cat"] == "kernel").count(), 6);
    assert!(stderr(&o).contains("4 iterations outside 1..3"));

    let o = run(&["trace", &d("v1-nested-scopes.jsonl"), "-o", "-"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["otherData"]["activities_recorded"], false);
    assert!(stderr(&o).contains("activities were not recorded"));
}

#[test]
fn a_failed_export_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["trace", "csv", "report"] {
        let out = dir.path().join(format!("out.{cmd}"));
        let o = run(&[cmd, &d("v1-corrupt.jsonl"), "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(!out.exists(), "{cmd} left a partial output");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "temporary files left"
    );
    let o = run(&[
        "csv",
        &d("v1-nested-scopes.jsonl"),
        "-o",
        "/nonexistent-dir/out.csv",
    ]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot create /nonexistent-dir/out.csv"));
}

#[test]
fn report_and_csv_write_files() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let o = run(&[
        "report",
        &d("v1-graph-kernels.jsonl"),
        "-o",
        html.to_str().unwrap(),
        "--title",
        "graphs <2 GPUs>",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("<title>graphs &lt;2 GPUs&gt;</title>"));
    assert!(text.contains("<svg id=\"chart-families\""));
    assert!(!text.contains("<script"));

    let csv = dir.path().join("r.csv");
    let o = run(&[
        "csv",
        &d("v1-graph-kernels.jsonl"),
        "-o",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 1 + 8);
    assert!(text.lines().next().unwrap().contains("dev1_busy_ns"));
    let o = run(&["csv", &d("v1-missing-nvml.jsonl"), "-o", "-"]);
    assert_eq!(stdout(&o).lines().count(), 1 + 5);
}

#[test]
fn check_validates_and_reports_line_numbers() {
    let o = run(&[
        "check",
        &d("v1-overlapping-streams.jsonl"),
        &d("v1-rank1.jsonl"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("v1-overlapping-streams.jsonl: valid: schema 1, level timeline, 6 iterations (indices 0..=5), trailer present"));
    assert!(out.contains("v1-rank1.jsonl: note: no trailer"));

    let o = run(&[
        "check",
        &d("v1-nested-scopes.jsonl"),
        &d("v1-corrupt.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("v1-nested-scopes.jsonl: valid"));
    let err = stderr(&o);
    let first = err.lines().next().unwrap();
    assert!(
        first.starts_with(&format!(
            "{}:3: invalid iteration row: host_wall_ns: invalid type: string \"fast\"",
            d("v1-corrupt.jsonl")
        )),
        "{err}"
    );
}

#[test]
fn merge_prints_the_slowest_rank_per_iteration() {
    let o = run(&["merge", &d("v1-rank1.jsonl"), &d("v1-rank0.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("## gpu-ledger merge: 2 ranks"));
    assert!(
        out.contains("| 3 | 8.03 ms | 10.0 ms | 1 | 2.00 ms |"),
        "{out}"
    );
    assert!(out.contains("| 9 | 8.09 ms | – | 0 |"), "{out}");
    let o = run(&[
        "merge",
        &d("v1-rank0.jsonl"),
        &d("v1-rank1.jsonl"),
        "--format",
        "csv",
    ]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 11);

    let o = run(&["merge", &d("v1-rank0.jsonl"), &d("v1-rank0.jsonl")]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("both claim rank 0"), "{}", stderr(&o));

    let o = run(&["merge", &d("v1-rank0.jsonl"), &d("v1-nested-scopes.jsonl")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no rank in its header"));
}

#[test]
fn progress_is_reported_on_long_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    let text = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let row: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut out = String::with_capacity(25_000 * 800);
    out.push_str(header);
    out.push('\n');
    for i in 0..25_000u64 {
        let mut r = row.clone();
        r["index"] = i.into();
        r["host_start_ns"] = (i * 2_000_000).into();
        out.push_str(&r.to_string());
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
    let p = path.to_str().unwrap();
    let o = run(&["--progress", "check", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("10000 rows read") && err.contains("20000 rows read"),
        "{err}"
    );
    assert!(stdout(&o).contains("25000 iterations"));
    // Not a terminal and no --progress: quiet.
    let o = run(&["check", p]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // Streaming exports work on it too.
    let o = run(&["csv", p, "-o", "-", "--progress"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 25_001);
}
