//! What the `gpu-ledger` binary does to the files it writes: it never replaces a ledger it reads,
//! keeps a replaced file's permissions, and leaves no temporary file behind when it is stopped.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod cli_common;
use cli_common::{data, run, stderr};

/// A copy of a golden ledger in `dir`.
fn copy_ledger(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    std::fs::copy(data(name), &p).unwrap();
    p.display().to_string()
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_ledger_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = copy_ledger(dir.path(), "v1-missing-nvml.jsonl");
    let before = std::fs::read(&ledger).unwrap();
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&ledger, &link).unwrap();
    let hard = dir.path().join("hard.jsonl");
    std::fs::hard_link(&ledger, &hard).unwrap();
    let rank1 = copy_ledger(dir.path(), "v1-rank1.jsonl");
    let rank0 = copy_ledger(dir.path(), "v1-rank0.jsonl");
    let link = link.display().to_string();
    let hard = hard.display().to_string();
    let cases: [&[&str]; 9] = [
        &["trace", &ledger, "-o", &ledger],
        &["csv", &ledger, "-o", &ledger],
        &["report", &ledger, "-o", &ledger],
        &["metrics", &ledger, "-o", &ledger],
        &["csv", &ledger, "--long", "-o", &hard],
        // The same file through a symlink and a hard link.
        &["csv", &ledger, "-o", &link],
        &["trace", &link, "-o", &hard],
        &["report", &hard, "-o", &ledger],
        // Any input of several.
        &["trace", &rank0, &rank1, "-o", &rank1],
    ];
    for args in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("writing it would replace the ledger"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert_eq!(std::fs::read(&ledger).unwrap(), before);
    assert_eq!(
        std::fs::read(&rank1).unwrap(),
        std::fs::read(data("v1-rank1.jsonl")).unwrap()
    );
}

#[test]
fn a_replaced_output_keeps_its_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("private.csv");
    std::fs::write(&out, "old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ledger = data("v1-graph-kernels.jsonl");
    for cmd in ["csv", "trace", "report", "metrics"] {
        let o = run(&[cmd, ledger.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{cmd}");
    }
    // A new file gets the default permissions, not the temporary file's.
    let fresh = dir.path().join("fresh.csv");
    let o = run(&[
        "csv",
        ledger.to_str().unwrap(),
        "-o",
        fresh.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fresh.is_file());
}

/// A ledger of `rows` copies of a golden row in `dir`: large enough that an export takes a while.
fn long_ledger(dir: &Path, rows: u64) -> String {
    let text = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let mut row: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut out = String::with_capacity(rows as usize * 1200);
    out.push_str(header);
    out.push('\n');
    for i in 0..rows {
        row["index"] = i.into();
        out.push_str(&row.to_string());
        out.push('\n');
    }
    let p = dir.join("long.jsonl");
    std::fs::write(&p, out).unwrap();
    p.display().to_string()
}

/// The hidden temporary files in `dir`.
fn hidden(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn a_killed_export_leaves_no_temporary_file_and_dies_by_its_signal() {
    use std::os::unix::process::ExitStatusExt;
    let input = tempfile::tempdir().unwrap();
    let ledger = long_ledger(input.path(), 100_000);
    for (sig, name) in [(15, "TERM"), (2, "INT")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("big.json");
        let mut child = cli_common::bin()
            .args(["trace", &ledger, "-o", out.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while hidden(dir.path()).is_empty() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the export ended before it could be killed"
            );
            assert!(start.elapsed().as_secs() < 60, "no temporary file appeared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let killed = std::process::Command::new("kill")
            .args([&format!("-{name}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(sig), "{name}: {status:?}");
        assert_eq!(hidden(dir.path()), Vec::<String>::new(), "{name}");
        assert!(!out.exists(), "{name}: a partial output was left");
    }
}

#[test]
fn csv_keeps_only_its_cells_between_its_passes() {
    // Rows of 300 kernel groups each, which the table does not show: under a file size limit of
    // a quarter of the ledger, the temporary file of whole rows could not be written.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    let mut lines = text.lines();
    let mut out = format!("{}\n", lines.next().unwrap());
    let mut row: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let kernel = row["kernels"][0].clone();
    row["kernels"] = (0..300)
        .map(|i| {
            let mut k = kernel.clone();
            k["name"] = format!("kernel_with_a_long_name_{i:04}").into();
            k
        })
        .collect::<Vec<_>>()
        .into();
    for i in 0..200u64 {
        row["index"] = i.into();
        out.push_str(&row.to_string());
        out.push('\n');
    }
    let ledger = dir.path().join("wide.jsonl");
    std::fs::write(&ledger, &out).unwrap();
    let limit_kib = out.len() / 4 / 1024;
    let script = format!(
        "ulimit -f {limit_kib}; TMPDIR={} exec {} csv {} -o -",
        dir.path().display(),
        env!("CARGO_BIN_EXE_gpu-ledger"),
        ledger.display()
    );
    let o = std::process::Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 201);
}

#[test]
fn the_experiment_log_csv_guards_text_against_formulas() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (data("v1-ab-baseline.jsonl"), data("v1-ab-change.jsonl"));
    let o = run(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--hypothesis",
        "=HYPERLINK(\"http://x\",\"y\")",
        "--change",
        "@SUM(1+1)",
        "--experiment-log",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(dir.path().join("experiments.csv")).unwrap();
    let line = csv.lines().nth(1).unwrap();
    assert!(
        line.contains(",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",'@SUM(1+1),"),
        "{line}"
    );
}

#[test]
fn sums_past_u64_saturate_in_every_command() {
    // Five entries of one scope and five devices, each at the reader's bound (2^62): their
    // sums pass u64::MAX, which every command holds there (a debug build panicked on the
    // overflow in trace and parquet; a release build wrapped to a small figure).
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let big = serde_json::Value::from(1u64 << 62);
    let mut scope = lines[1]["scopes"][0].clone();
    scope["host_ns"] = big.clone();
    scope["calls"] = big.clone();
    lines[1]["scopes"] = vec![scope; 5].into();
    let mut device = lines[1]["devices"][0].clone();
    device["kernel_count"] = big.clone();
    lines[1]["devices"] = (0..5u32)
        .map(|d| {
            let mut x = device.clone();
            x["device_id"] = d.into();
            x
        })
        .collect::<Vec<_>>()
        .into();
    let mut text = String::new();
    for l in &lines {
        text.push_str(&l.to_string());
        text.push('\n');
    }
    let p = dir.path().join("sums.jsonl");
    std::fs::write(&p, text).unwrap();
    let p = p.to_str().unwrap();
    let ds = dir.path().join("ds");
    for args in [
        &["trace", p, "-o", "-"][..],
        &["csv", p, "-o", "-"],
        &["summary", p],
        &["report", p, "-o", "-"],
        &["parquet", p, "-o", ds.to_str().unwrap()],
    ] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        if args[0] == "trace" {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let calls: Vec<u64> = v["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["cat"] == "scope summary" && e["args"]["iteration"] == 0)
                .map(|e| e["args"]["calls"].as_u64().unwrap())
                .collect();
            assert_eq!(calls, [u64::MAX], "{calls:?}");
        }
    }
}

/// The lines of golden ledger `name` as JSON values.
fn golden_lines(name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(data(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Writes `lines` as `name` in `dir`.
fn write_lines(dir: &Path, name: &str, lines: &[serde_json::Value]) -> String {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn messages_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    // A schema version that is there but not a whole number is not "missing".
    for (v, shown) in [
        (serde_json::json!(1.0), "1.0"),
        (serde_json::json!(-1), "-1"),
        (serde_json::Value::Null, "null"),
    ] {
        let mut lines = golden_lines("v1-missing-nvml.jsonl");
        lines[0]["schema_version"] = v;
        let p = write_lines(dir.path(), "version.jsonl", &lines);
        let o = run(&["check", &p]);
        assert_eq!(o.status.code(), Some(1));
        assert!(
            stderr(&o).contains(&format!(
                "{p}:1: schema_version must be a whole number, not {shown}: write it as 1"
            )),
            "{}",
            stderr(&o)
        );
    }
    // Non-UTF-8 text: where on its line.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus");
    let bad = corpus.join("bad-invalid-utf8.jsonl");
    let o = run(&["check", bad.to_str().unwrap()]);
    assert!(
        stderr(&o).contains(
            ":2: cannot read: stream did not contain valid UTF-8: byte 1 of the line (0xC3)"
        ),
        "{}",
        stderr(&o)
    );
    // The last index there is, as a range of one.
    let ledger = data("v1-missing-nvml.jsonl");
    let max = u64::MAX.to_string();
    let range = format!("{max}..={max}");
    let o = run(&[
        "trace",
        ledger.to_str().unwrap(),
        "-o",
        "-",
        "--iterations",
        &range,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Resamples past the bound are a usage error, not an allocation that aborts.
    let (a, b) = (data("v1-ab-baseline.jsonl"), data("v1-ab-change.jsonl"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = run(&["compare", a, b, "--resamples", "100000000000000"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not in 1..=10000000"),
        "{}",
        stderr(&o)
    );
    // A confidence just below 1 is not rounded to 100 %.
    let o = run(&[
        "compare",
        a,
        b,
        "--confidence",
        "0.999999999",
        "--resamples",
        "500",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("(99.9999999% CI "),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn an_unknown_nvml_figure_is_an_empty_csv_cell() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = golden_lines("v1-ab-baseline.jsonl");
    lines[1]["nvml"][0]["sm_clock"]["mean_mhz"] = serde_json::Value::Null;
    let p = write_lines(dir.path(), "nan.jsonl", &lines);
    let o = run(&["csv", &p, "-o", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!text.contains("NaN"), "{text}");
    let head: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = head.iter().position(|c| *c == "dev0_sm_clock_mhz").unwrap();
    let first: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(first[col], "");
}

#[test]
fn a_trace_past_its_size_bound_stops_and_says_how_to_get_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = long_ledger(dir.path(), 2_000);
    let o = run(&["trace", &ledger, "-o", "-", "--max-bytes", "50000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout_len(&o) < 60_000, "{} bytes", stdout_len(&o));
    let e = stderr(&o);
    assert!(e.contains("the trace stopped after iteration "), "{e}");
    assert!(e.contains("--iterations .. for the whole trace"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stop = &v["otherData"]["stopped_at_iteration"];
    let at = stop["iteration"].as_u64().unwrap();
    assert_eq!(stop["iterations_left_out"].as_u64().unwrap(), 1_999 - at);
    // Said before writing, from the input's size.
    assert!(e.contains("its trace may pass 50000 bytes of JSON"), "{e}");
    // An explicit range is written whole.
    let o = run(&[
        "trace",
        &ledger,
        "-o",
        "-",
        "--max-bytes",
        "50000",
        "--iterations",
        "..",
    ]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains("stopped"), "{}", stderr(&o));
}

fn stdout_len(o: &std::process::Output) -> usize {
    o.stdout.len()
}

#[test]
fn a_trace_window_passes_over_the_rows_outside_it() {
    // A value that cannot be true outside the window is not read (the rows there are passed
    // over unparsed), but the order of the indices still is.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = golden_lines("v1-missing-nvml.jsonl");
    lines[4]["devices"][0]["busy_ns"] = serde_json::json!(u64::MAX);
    let p = write_lines(dir.path(), "window.jsonl", &lines);
    let o = run(&["trace", &p, "-o", "-", "--iterations", "0..2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("iterations outside 0..2"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["otherData"]["iterations_exported"], 2);
    let mut lines = golden_lines("v1-missing-nvml.jsonl");
    lines[4]["index"] = serde_json::json!(0);
    let p = write_lines(dir.path(), "order.jsonl", &lines);
    let o = run(&["trace", &p, "-o", "-", "--iterations", "0..1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not follow"), "{}", stderr(&o));
}
