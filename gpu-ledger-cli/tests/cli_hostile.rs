//! The `gpu-ledger` binary against hostile inputs and outputs, as a tester without a GPU would
//! try it: special files as outputs, inputs that can be read only once, lines without end,
//! values that cannot be true, rows out of order, and errors that must name their field.
//! Every command that reads a ledger is run on every such input.

use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod cli_common;
use cli_common::{bin, data, run, stderr, stdout};

/// Runs `args`, killing the command after `limit`: `None` when it had to be killed (it hung).
fn run_within(args: &[&str], limit: Duration) -> Option<Output> {
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpu-ledger runs");
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn assert_no_panic(o: &Output) {
    let e = stderr(o);
    assert!(!e.contains("panicked"), "panic: {e}");
    assert_ne!(o.status.code(), Some(101), "panic exit: {e}");
}

/// Every command that reads a ledger, with `""` where the ledger's path goes.
const READING_COMMANDS: [&[&str]; 9] = [
    &["summary", ""],
    &["check", ""],
    &["csv", "", "-o", "-"],
    &["csv", "", "--long", "-o", "-"],
    &["metrics", ""],
    &["report", "", "-o", "-"],
    &["trace", "", "-o", "-"],
    &["merge", ""],
    &["compare", "", ""],
];

fn with_path<'a>(cmd: &[&'a str], path: &'a str) -> Vec<&'a str> {
    cmd.iter()
        .map(|a| if a.is_empty() { path } else { a })
        .collect()
}

/// Runs every [`READING_COMMANDS`] on `path`: each fails with status 1, without a panic, and
/// says every one of `messages` on stderr.
fn assert_every_command_fails(path: &str, messages: &[&str]) {
    for cmd in READING_COMMANDS {
        let args = with_path(cmd, path);
        let o = run(&args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        for m in messages {
            assert!(
                stderr(&o).contains(m),
                "{args:?}: want {m:?} in: {}",
                stderr(&o)
            );
        }
    }
}

/// The lines of a golden ledger as JSON values.
fn golden(name: &str) -> Vec<Value> {
    std::fs::read_to_string(data(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Writes `lines` as a ledger in `dir` and returns its path.
fn write_ledger(dir: &Path, name: &str, lines: &[Value]) -> String {
    let path = dir.join(name);
    let mut text = String::new();
    for l in lines {
        text.push_str(&l.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn output_to_a_fifo_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            std::fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        })
    };
    let f = fifo.to_str().unwrap();
    let o = run(&[
        "csv",
        data("v1-graph-kernels.jsonl").to_str().unwrap(),
        "-o",
        f,
    ]);
    assert_no_panic(&o);
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced: {kind:?}");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = reader.join().unwrap();
    assert_eq!(text.lines().count(), 1 + 8, "{text}");
}

#[test]
fn output_through_a_symlink_keeps_the_link_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.csv");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = run(&[
        "csv",
        data("v1-graph-kernels.jsonl").to_str().unwrap(),
        "-o",
        link.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    let text = std::fs::read_to_string(&target).unwrap();
    assert_eq!(text.lines().count(), 1 + 8, "{text}");
    assert!(
        stderr(&o).contains(&format!("{} (the target of the symlink", target.display())),
        "{}",
        stderr(&o)
    );
    // Nothing else was left in the directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn csv_reads_its_input_once() {
    // A FIFO can be read once: a second pass would wait for a writer that never comes.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let text = std::fs::read(data("v1-graph-kernels.jsonl")).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(fifo)
                .and_then(|mut f| f.write_all(&text));
        })
    };
    let o = run_within(
        &["csv", fifo.to_str().unwrap(), "-o", "-"],
        Duration::from_secs(20),
    );
    writer.join().unwrap();
    let o = o.expect("csv of a FIFO hung: it read its input twice");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1 + 8);
    // A process substitution too (a pipe of the shell's).
    let cmd = format!(
        "{} csv <(cat {}) -o -",
        env!("CARGO_BIN_EXE_gpu-ledger"),
        data("v1-graph-kernels.jsonl").display()
    );
    let o = Command::new("bash").args(["-c", &cmd]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1 + 8);
}

#[test]
fn parquet_reads_its_input_once() {
    // parquet read each ledger's header to plan the dataset, then the ledger again to convert
    // it: a FIFO hung on the second open.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("in.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let text = std::fs::read(data("v1-rank0.jsonl")).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(fifo)
                .and_then(|mut f| f.write_all(&text));
        })
    };
    let out = dir.path().join("ds");
    let o = run_within(
        &[
            "parquet",
            fifo.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    writer.join().unwrap();
    let o = o.expect("parquet of a FIFO hung: it read its input twice");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("1 ledger (10 rows)"), "{}", stdout(&o));
    // A process substitution too, beside a regular file.
    let out2 = dir.path().join("ds2");
    let cmd = format!(
        "{} parquet <(cat {}) {} -o {}",
        env!("CARGO_BIN_EXE_gpu-ledger"),
        data("v1-rank0.jsonl").display(),
        data("v1-rank1.jsonl").display(),
        out2.display()
    );
    let o = Command::new("bash").args(["-c", &cmd]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("2 ledgers"), "{}", stdout(&o));
}

#[test]
fn a_failed_parquet_conversion_leaves_no_dataset_behind() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus");
    let out = dir.path().join("ds");
    let bad = corpus.join("bad-index-backwards.jsonl");
    let o = run(&[
        "parquet",
        bad.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!out.exists(), "a failed conversion left {}", out.display());
}

#[test]
fn a_line_without_end_is_an_error_at_its_line_in_bounded_memory() {
    // /dev/zero is one endless line: under a 1 GiB address-space limit the reader must stop at
    // its line-length bound with an error naming the line, not grow until allocation fails.
    for cmd in ["check", "summary", "csv"] {
        let script = format!(
            "ulimit -v 1048576; exec {} {cmd} /dev/zero {}",
            env!("CARGO_BIN_EXE_gpu-ledger"),
            if cmd == "csv" { "-o -" } else { "" }
        );
        let o = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("/dev/zero:1: line 1 is longer than 64 MiB"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    // The same bound in a row's line, after a valid header.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    let header = std::fs::read_to_string(data("v1-missing-nvml.jsonl")).unwrap();
    let header = header.lines().next().unwrap();
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "{header}").unwrap();
    f.write_all(&vec![b' '; 65 << 20]).unwrap();
    writeln!(f, "{{}}").unwrap();
    drop(f);
    let p = path.display().to_string();
    assert_every_command_fails(&p, &[&format!("{p}:2: line 2 is longer than 64 MiB")]);
}

#[test]
fn one_long_name_cannot_blow_up_a_report() {
    // A kernel name of 4 MiB (a valid line): the report and the summary show a bounded prefix of
    // it, not the name once per table and chart.
    let dir = tempfile::tempdir().unwrap();
    let mut lines = golden("v1-missing-nvml.jsonl");
    let name = "k".repeat(4 << 20);
    lines[1]["kernels"][0]["name"] = Value::from(name.clone());
    lines[1]["warnings"] = Value::from(vec![name.clone()]);
    let p = write_ledger(dir.path(), "long-name.jsonl", &lines);
    for cmd in [
        &["report", "", "-o", "-"][..],
        &["summary", ""],
        &["compare", "", ""],
    ] {
        let args = with_path(cmd, &p);
        let o = run(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(
            o.stdout.len() < 1 << 20,
            "{args:?}: {} bytes from a 4 MiB name",
            o.stdout.len()
        );
        assert!(stdout(&o).contains("bytes not shown"), "{args:?}");
    }
}

/// Sets one field of a row to a value no run can produce.
type Breaker = fn(&mut Value);

#[test]
fn values_that_cannot_be_true_are_errors_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Breaker); 4] = [
        ("host_wall_ns", |r| {
            r["host_wall_ns"] = Value::from(u64::MAX)
        }),
        ("kernels[0].total_ns", |r| {
            r["kernels"][0]["total_ns"] = Value::from(u64::MAX)
        }),
        ("devices[0].busy_ns", |r| {
            r["devices"][0]["busy_ns"] = Value::from(u64::MAX / 2)
        }),
        ("scopes[0].calls", |r| {
            r["scopes"][0]["calls"] = Value::from(u64::MAX)
        }),
    ];
    for (field, break_it) in cases {
        let mut lines = golden("v1-missing-nvml.jsonl");
        // The first row: warm-up detection must not be what hides it.
        break_it(&mut lines[1]);
        let p = write_ledger(dir.path(), "impossible.jsonl", &lines);
        assert_every_command_fails(&p, &[&format!("{p}:2: {field} = "), "cannot be true"]);
    }
}

#[test]
fn repeated_or_out_of_order_indices_are_errors_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    for (name, index) in [("repeated.jsonl", 0u64), ("backwards.jsonl", 7)] {
        let mut lines = golden("v1-missing-nvml.jsonl");
        lines[2]["index"] = Value::from(index);
        if index == 7 {
            lines[3]["index"] = Value::from(3);
        }
        let line = if index == 7 { 4 } else { 3 };
        let p = write_ledger(dir.path(), name, &lines);
        assert_every_command_fails(
            &p,
            &[&format!("{p}:{line}: iteration index "), "does not follow"],
        );
    }
}

#[test]
fn errors_name_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    // A string where a number belongs: the field, and no tail about the line's type.
    let mut lines = golden("v1-missing-nvml.jsonl");
    lines[2]["host_wall_ns"] = Value::from("2000000");
    let p = write_ledger(dir.path(), "string.jsonl", &lines);
    assert_every_command_fails(
        &p,
        &[&format!("{p}:3: invalid iteration row: host_wall_ns: ")],
    );
    let o = run(&["check", &p]);
    assert!(
        !stderr(&o).contains("expected a JSON object with"),
        "{}",
        stderr(&o)
    );
    // A nested field.
    let mut lines = golden("v1-missing-nvml.jsonl");
    lines[1]["devices"][0]["busy_ns"] = Value::from(-1);
    let p = write_ledger(dir.path(), "nested.jsonl", &lines);
    assert_every_command_fails(
        &p,
        &[&format!(
            "{p}:2: invalid iteration row: devices[0].busy_ns: "
        )],
    );
    // A line of an unknown type, and one with no type.
    let mut lines = golden("v1-missing-nvml.jsonl");
    lines[1]["type"] = Value::from("row");
    let p = write_ledger(dir.path(), "type.jsonl", &lines);
    assert_every_command_fails(&p, &[&format!("{p}:2: unknown line type \"row\"")]);
    // The schema version as a string.
    let mut lines = golden("v1-missing-nvml.jsonl");
    lines[0]["schema_version"] = Value::from("1");
    let p = write_ledger(dir.path(), "version.jsonl", &lines);
    assert_every_command_fails(
        &p,
        &[&format!(
            "{p}:1: schema_version must be a number, not \"1\""
        )],
    );
    // A missing file names no line 0.
    let o = run(&["summary", "/nonexistent/run.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/run.jsonl: cannot open: "),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains(":0:"), "{}", stderr(&o));
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bom.jsonl");
    let mut text = "\u{feff}".as_bytes().to_vec();
    text.extend(std::fs::read(data("v1-missing-nvml.jsonl")).unwrap());
    std::fs::write(&path, text).unwrap();
    let p = path.display().to_string();
    for cmd in READING_COMMANDS {
        let args = with_path(cmd, &p);
        let o = run(&args);
        assert_no_panic(&o);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn the_corpus_of_hostile_ledgers_gives_errors_not_panics() {
    // tests/corpus/: every file is read by every command; `bad-*` must fail with a line-numbered
    // error, `ok-*` must succeed.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus");
    let mut seen = 0;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let p = file.display().to_string();
        for cmd in READING_COMMANDS {
            let args = with_path(cmd, &p);
            let o = run_within(&args, Duration::from_secs(60)).expect("a command hung");
            assert_no_panic(&o);
            if name.starts_with("bad-") {
                assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
                assert!(
                    stderr(&o).contains(&format!("{p}:")),
                    "{args:?}: {}",
                    stderr(&o)
                );
            } else if cmd[0] == "compare" && name == "ok-header-only.jsonl" {
                // Valid, but with nothing to compare: refused, naming why.
                assert_eq!(o.status.code(), Some(1), "{args:?}");
                assert!(stderr(&o).contains("no usable iteration"), "{}", stderr(&o));
            } else {
                assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            }
        }
        seen += 1;
    }
    assert!(seen >= 10, "the corpus has {seen} files");
}

#[test]
fn a_directory_as_output_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "csv",
        data("v1-graph-kernels.jsonl").to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    assert!(dir.path().is_dir());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_largest_plausible_values_sum_without_overflow() {
    // Every row at the reader's bound (2^62): five of them overflow a u64 sum, which must
    // saturate in every command rather than panic (debug) or wrap into wrong figures (release).
    let dir = tempfile::tempdir().unwrap();
    let big = Value::from(1u64 << 62);
    let mut lines = golden("v1-missing-nvml.jsonl");
    for row in lines.iter_mut().filter(|l| l["type"] == "iteration") {
        row["host_wall_ns"] = big.clone();
        row["kernels"][0]["total_ns"] = big.clone();
        row["kernels"][0]["max_ns"] = big.clone();
        row["kernels"][0]["count"] = big.clone();
        row["scopes"][0]["host_ns"] = big.clone();
        row["scopes"][0]["calls"] = big.clone();
        row["devices"][0]["first_start_ns"] = Value::from(0);
        row["devices"][0]["last_end_ns"] = big.clone();
        row["devices"][0]["busy_ns"] = big.clone();
        // Busy over the whole window: no idle time, no gap.
        row["devices"][0]["idle_ns"] = Value::from(0);
        row["devices"][0]["largest_gap_ns"] = Value::from(0);
        row["dropped_records"] = big.clone();
    }
    let p = write_ledger(dir.path(), "big.jsonl", &lines);
    for cmd in READING_COMMANDS {
        let args = with_path(cmd, &p);
        let o = run(&args);
        assert_no_panic(&o);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["summary", &p, "--warmup", "none"]);
    let out = stdout(&o);
    // Busy time never exceeds the wall time it is a share of.
    assert!(!out.contains("100.1 %") && !out.contains("105."), "{out}");
}
