//! What a new user meets first on the command line: compressed ledgers read as they are,
//! shell completions, the message of a build without SQL, the long CSV, JSON for scripts and
//! tables aligned on a terminal.

use std::io::Write;
use std::path::Path;
use std::process::Output;

mod cli_common;
use cli_common::{bin, data, stderr, stdout};

/// Runs `gpu-ledger args` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("gpu-ledger runs")
}

/// Every command that reads ledgers gives the same output, byte for byte, on a ledger and on
/// its gzip and zstd copies of the same name, whole and streamed.
#[test]
fn gzip_and_zstd_ledgers_read_as_the_plain_ones() {
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(data("v1-rank1.jsonl")).unwrap();
    let other = std::fs::read(data("v1-rank0.jsonl")).unwrap();
    for (sub, pack) in [("plain", 0), ("gz", 1), ("zst", 2)] {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        for (name, bytes) in [("run.jsonl", &plain), ("r0.jsonl", &other)] {
            let packed = match pack {
                0 => bytes.clone(),
                1 => {
                    // Two gzip members, as `cat a.gz b.gz` makes: one ledger, as for zcat.
                    let (head, tail) = bytes.split_at(bytes.len() / 2);
                    let mut out = Vec::new();
                    for part in [head, tail] {
                        let mut e = flate2::write::GzEncoder::new(
                            Vec::new(),
                            flate2::Compression::default(),
                        );
                        e.write_all(part).unwrap();
                        out.extend(e.finish().unwrap());
                    }
                    out
                }
                _ => zstd::encode_all(&bytes[..], 3).unwrap(),
            };
            assert_eq!(pack == 0, packed == *bytes);
            std::fs::write(d.join(name), packed).unwrap();
        }
    }
    let commands: [&[&str]; 10] = [
        &["summary", "run.jsonl"],
        &["summary", "run.jsonl", "--hold-bytes", "0"],
        &["check", "run.jsonl"],
        &["csv", "run.jsonl", "-o", "-"],
        &["report", "run.jsonl", "-o", "-"],
        &["trace", "run.jsonl", "-o", "-"],
        &["trace", "r0.jsonl", "run.jsonl", "-o", "-"],
        &["merge", "r0.jsonl", "run.jsonl"],
        &["metrics", "run.jsonl"],
        &["compare", "r0.jsonl", "run.jsonl", "--resamples", "200"],
    ];
    for args in commands {
        let want = run_in(&dir.path().join("plain"), args);
        assert!(want.status.success(), "{args:?}: {}", stderr(&want));
        for sub in ["gz", "zst"] {
            let got = run_in(&dir.path().join(sub), args);
            assert!(got.status.success(), "{sub} {args:?}: {}", stderr(&got));
            assert_eq!(stdout(&got), stdout(&want), "{sub} {args:?}");
        }
    }
}

/// A compressed ledger cut short (the copy was interrupted) is an error naming the file, not a
/// panic and not a silent short read.
#[test]
fn a_cut_compressed_ledger_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("v1-rank1.jsonl")).unwrap();
    let packed = zstd::encode_all(&bytes[..], 3).unwrap();
    let p = dir.path().join("cut.jsonl.zst");
    std::fs::write(&p, &packed[..packed.len() / 2]).unwrap();
    let o = run_in(dir.path(), &["summary", "cut.jsonl.zst"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cut.jsonl.zst"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// Every key of a JSON document, nested objects' keys included (arrays' elements too).
fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::Object(o) => {
            for (k, v) in o {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

/// The keys of `doc` that docs/json.md does not name as `` `key` ``.
fn undocumented(doc: &serde_json::Value) -> Vec<String> {
    let docs = std::fs::read_to_string(data("../../docs/json.md")).unwrap();
    let mut all = std::collections::BTreeSet::new();
    keys(doc, &mut all);
    // Keys that are names from the ledger (scope paths, throttle reasons, families) are values.
    all.into_iter()
        .filter(|k| {
            k.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        })
        .filter(|k| !docs.contains(&format!("`{k}`")))
        .collect()
}

#[test]
fn summary_json_is_one_documented_document() {
    for ledger in [
        "v1-nested-scopes.jsonl",
        "v1-overlapping-streams.jsonl",
        "v1-missing-nvml.jsonl",
        "v1-graph-kernels.jsonl",
        "v1-rank0.jsonl",
    ] {
        let path = data(ledger);
        let o = cli_common::run(&["summary", path.to_str().unwrap(), "--format", "json"]);
        assert!(o.status.success(), "{ledger}: {}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).expect(ledger);
        assert_eq!(doc["schema"], "gpu-ledger-summary");
        assert_eq!(doc["version"], 1);
        assert!(doc["summary"]["rows"].as_u64().unwrap() > 0, "{ledger}");
        assert_eq!(undocumented(&doc), Vec::<String>::new(), "{ledger}");
    }
}

#[test]
fn scopes_level_device_time_is_null_in_json_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("v1-nested-scopes.jsonl")).unwrap();
    let p = dir.path().join("s.jsonl");
    std::fs::write(
        &p,
        text.replacen("\"level\":\"counters\"", "\"level\":\"scopes\"", 1),
    )
    .unwrap();
    let o = cli_common::run(&["summary", p.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["summary"]["level"], "scopes");
    for s in doc["summary"]["scopes"].as_array().unwrap() {
        assert!(s["device_ns_inclusive"].is_null(), "{s}");
        // Launches outside every scope have no host time of their own.
        let unscoped = s["path"] == "(unscoped)";
        assert_eq!(s["host_ns"].is_null(), unscoped, "{s}");
        assert_eq!(s["host_ns"].is_object(), !unscoped, "{s}");
    }
}

#[test]
fn compare_json_has_the_verdict_and_no_speedup_for_an_incomparable_pair() {
    let (a, b) = (data("v1-ab-baseline.jsonl"), data("v1-ab-change.jsonl"));
    let o = cli_common::run(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--seed",
        "7",
        "--resamples",
        "300",
        "--format",
        "json",
        "--hypothesis",
        "h -> k",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["schema"], "gpu-ledger-compare");
    assert_eq!(doc["hypothesis"], "h -> k");
    assert!(doc["change"].is_null());
    assert!(
        ["faster", "slower", "no significant change"].contains(&doc["verdict"].as_str().unwrap())
    );
    assert!(doc["comparison"]["speedup"]["speedup"].as_f64().unwrap() > 0.0);
    assert_eq!(undocumented(&doc), Vec::<String>::new());
    let o = cli_common::run(&[
        "compare",
        data("v1-nested-scopes.jsonl").to_str().unwrap(),
        data("v1-graph-kernels.jsonl").to_str().unwrap(),
        "--resamples",
        "200",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["verdict"], "not comparable");
    assert!(doc["comparison"].get("speedup").is_none(), "{doc}");
    assert_eq!(
        doc["comparison"]["incomparable"].as_array().unwrap().len(),
        2
    );
    assert_eq!(undocumented(&doc), Vec::<String>::new());
}

/// Aligned output is the Markdown with its tables padded: the same cells, every table's lines
/// of one length; a pipe gets plain Markdown unless asked.
#[test]
fn aligned_tables_line_up_and_a_pipe_gets_markdown() {
    let p = data("v1-nested-scopes.jsonl");
    let p = p.to_str().unwrap();
    let plain = stdout(&cli_common::run(&["summary", p]));
    let md = stdout(&cli_common::run(&["summary", p, "--format", "markdown"]));
    assert_eq!(plain, md, "a pipe gets Markdown");
    let aligned = stdout(&cli_common::run(&["summary", p, "--format", "aligned"]));
    assert_ne!(aligned, md);
    let squeeze = |s: &str| -> String {
        s.lines()
            .map(|l| {
                if l.starts_with('|') {
                    l.split_whitespace()
                        .collect::<String>()
                        .replace(['-', ':'], "")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        squeeze(&aligned),
        squeeze(&md),
        "only spaces and dashes added"
    );
    let mut tables = 0;
    let mut width = None;
    for l in aligned.lines() {
        if l.starts_with('|') {
            let w = l.chars().count();
            assert_eq!(*width.get_or_insert(w), w, "{l}\n{aligned}");
        } else if width.take().is_some() {
            tables += 1;
        }
    }
    assert!(tables >= 2, "{aligned}");
    let o = cli_common::run(&["compare", p, p, "--resamples", "100", "--format", "aligned"]);
    assert!(stdout(&o).contains("| rows / used "), "{}", stdout(&o));
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        (
            "bash",
            "complete -F _gpu__ledger -o bashdefault -o default gpu-ledger",
        ),
        ("zsh", "#compdef gpu-ledger"),
        ("fish", "complete -c gpu-ledger"),
    ] {
        let o = cli_common::run(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(marker), "{shell}: {out}");
        for sub in ["summary", "compare", "completions", "format", "long"] {
            assert!(out.contains(sub), "{shell} lacks {sub}");
        }
    }
    // The script bash is given parses (bash is on every machine the tests run on).
    let script = stdout(&cli_common::run(&["completions", "bash"]));
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .expect("bash runs");
    assert!(check.status.success(), "{}", stderr(&check));
    let o = cli_common::run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[cfg(not(feature = "sql"))]
#[test]
fn sql_without_the_feature_names_the_install_command() {
    let o = cli_common::run(&["sql", "ds", "--query", "straggler"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("built without SQL"), "{e}");
    assert!(
        e.contains("`cargo install --path gpu-ledger-cli --features sql`"),
        "{e}"
    );
    assert!(!e.contains("unrecognized subcommand"), "{e}");
}

/// The long CSV: the same columns for every ledger, one line per iteration and scope, empty
/// cells where a figure was not measured; the tables of two ledgers stack.
#[test]
fn long_csv_has_fixed_columns_and_stacks() {
    let mut headers = std::collections::BTreeSet::new();
    let mut widths = std::collections::BTreeSet::new();
    for ledger in [
        "v1-nested-scopes.jsonl",
        "v1-rank0.jsonl",
        "v1-graph-kernels.jsonl",
    ] {
        let p = data(ledger);
        let o = cli_common::run(&["csv", p.to_str().unwrap(), "-o", "-", "--long"]);
        assert!(o.status.success(), "{ledger}: {}", stderr(&o));
        let out = stdout(&o);
        let mut lines = out.lines();
        headers.insert(lines.next().unwrap().to_string());
        let ledger_text = std::fs::read_to_string(&p).unwrap();
        let rows: Vec<serde_json::Value> = ledger_text
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &serde_json::Value| v.get("host_wall_ns").is_some())
            .collect();
        let scope_lines: usize = rows
            .iter()
            .map(|r| r["scopes"].as_array().unwrap().len())
            .sum();
        let body: Vec<&str> = lines.collect();
        assert_eq!(body.len(), rows.len() + scope_lines, "{ledger}");
        for l in &body {
            widths.insert(l.split(',').count());
        }
    }
    assert_eq!(headers.len(), 1, "{headers:?}");
    assert_eq!(widths.len(), 1, "{widths:?}");
    // At the scopes level device times were not measured: empty, not 0.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(data("v1-nested-scopes.jsonl")).unwrap();
    let p = dir.path().join("s.jsonl");
    std::fs::write(
        &p,
        text.replacen("\"level\":\"counters\"", "\"level\":\"scopes\"", 1),
    )
    .unwrap();
    let o = cli_common::run(&["csv", p.to_str().unwrap(), "-o", "-", "--long"]);
    let out = stdout(&o);
    let line = out.lines().find(|l| l.contains(",step/backward,")).unwrap();
    let cells: Vec<&str> = line.split(',').collect();
    assert_eq!((cells[9], cells[10]), ("", ""), "{line}");
    assert_eq!(cells[8], "18000000", "{line}");
}

/// The Parquet writer reads text only: a compressed ledger is refused naming zcat.
#[test]
fn parquet_refuses_a_compressed_ledger_naming_zcat() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(data("v1-rank1.jsonl")).unwrap();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(&bytes).unwrap();
    std::fs::write(dir.path().join("r.jsonl.gz"), e.finish().unwrap()).unwrap();
    let o = run_in(dir.path(), &["parquet", "r.jsonl.gz", "-o", "ds"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`zcat r.jsonl.gz > r.jsonl`"),
        "{}",
        stderr(&o)
    );
}
