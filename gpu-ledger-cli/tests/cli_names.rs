//! Ledgers of many distinct names, generated here rather than committed to tests/corpus/: every
//! command keeps the first 1000 scope paths or kernel families apart and folds the rest into
//! one `(other N names)` entry, so that memory and output stay bounded by the names as they are
//! by the rows. A million names of each kind go through every command here, each weighed against
//! the bound on its peak memory; `examples/names_scale.rs` times them against the row-count case.

use std::io::Write;
use std::path::Path;
use std::process::Command;

mod cli_common;
use cli_common::{run, stderr, stdout};

#[path = "../../examples/common/measure.rs"]
mod measure;

const HEADER: &str = r#"{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1,"start_cupti_ns":5000000000000,"config":{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000},"environment":{"gpus":[],"driver_version":null,"cuda_driver_version":13000,"cupti_api_version":130001,"cupti_path":null,"hostname":"t","command_line":[]},"rank":null,"warnings":[]}"#;

/// A ledger of `rows` rows, each with a `step` scope of 1 ms of device time and `per_row`
/// scopes (or kernels, with `kernels`) of distinct names, 10 µs each.
fn many_names(dir: &Path, rows: u64, per_row: u64, kernels: bool) -> String {
    let path = dir.join(if kernels {
        "kernels.jsonl"
    } else {
        "scopes.jsonl"
    });
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "{HEADER}").unwrap();
    for i in 0..rows {
        let busy = 1_000_000 + per_row * 10_000;
        let dev0 = 5_000_000_000_000 + i * 3_000_000;
        let mut scopes = vec![format!(
            r#"{{"path":"step","calls":1,"host_ns":2000000,"launches":1,"kernels":1,"device_ns":1000000,"device_ns_inclusive":{busy}}}"#
        )];
        let mut ks = vec![format!(
            r#"{{"name":"gemm","device_id":0,"grid":[1,1,1],"block":[1,1,1],"registers_per_thread":1,"static_shared_bytes":0,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":1,"total_ns":1000000,"min_ns":1000000,"max_ns":1000000}}"#
        )];
        for k in 0..per_row {
            let id = i * per_row + k;
            if kernels {
                ks.push(format!(
                    r#"{{"name":"kernel_{id}","device_id":0,"grid":[1,1,1],"block":[1,1,1],"registers_per_thread":1,"static_shared_bytes":0,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":1,"total_ns":10000,"min_ns":10000,"max_ns":10000}}"#
                ));
            } else {
                scopes.push(format!(
                    r#"{{"path":"step/request-{id}","calls":1,"host_ns":10000,"launches":1,"kernels":1,"device_ns":10000,"device_ns_inclusive":10000}}"#
                ));
            }
        }
        writeln!(
            f,
            r#"{{"type":"iteration","index":{i},"host_start_ns":{},"host_wall_ns":2500000,"complete":true,"perturbed":false,"devices":[{{"device_id":0,"first_start_ns":{dev0},"last_end_ns":{},"busy_ns":{busy},"idle_ns":0,"largest_gap_ns":0,"kernel_count":1}}],"scopes":[{}],"kernels":[{}],"memcpy":[],"memset":[],"synchronization":[],"dropped_records":0}}"#,
            i * 3_000_000,
            dev0 + busy,
            scopes.join(","),
            ks.join(",")
        )
        .unwrap();
    }
    drop(f);
    path.display().to_string()
}

#[test]
fn many_scope_paths_are_folded_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    // 3 000 distinct paths besides `step`: the first 999 are kept with it.
    let p = many_names(dir.path(), 30, 100, false);
    let o = run(&["summary", &p, "--warmup", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("(other 2001 names)"),
        "{}",
        &out[..out.len().min(3000)]
    );
    assert!(
        out.contains("2001 scope paths past the first 1000"),
        "no warning"
    );
    assert!(out.lines().count() < 1400, "{} lines", out.lines().count());
    // The heavy scope is exact: 1 ms of its own and 2 ms in every row.
    assert!(out.contains("| step |"), "step is kept");
    let o = run(&["csv", &p, "-o", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let head = stdout(&o).lines().next().unwrap().to_string();
    assert_eq!(head.split(',').count(), 10 + 7 + 2 * 1001, "columns");
    assert!(head.contains("scope:(other 2001 names):device_ns_inclusive"));
    assert!(stderr(&o).contains("2001 scope paths past the first 1000"));
    // Each row's folded scopes sum into the folded columns: rows 10.. have 100 of 10 µs.
    let cols: Vec<&str> = head.split(',').collect();
    let at = cols
        .iter()
        .position(|c| *c == "scope:(other 2001 names):device_ns_inclusive")
        .unwrap();
    let text = stdout(&o);
    let last: Vec<&str> = text.lines().last().unwrap().split(',').collect();
    assert_eq!((last[at], last[at + 1]), ("1000000", "1000000"));
    for args in [
        &["report", &p, "-o", "-"][..],
        &["compare", &p, &p],
        &["trace", &p, "-o", "-"],
        &["check", &p],
        &["merge", &p],
    ] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        if args[0] == "compare" {
            assert!(stdout(&o).contains("(other names)"), "{}", stdout(&o));
        }
        if args[0] == "report" {
            assert!(stdout(&o).contains("(other 2001 names)"), "report");
        }
    }
}

#[test]
fn many_kernel_names_are_folded_into_one_family() {
    let dir = tempfile::tempdir().unwrap();
    let p = many_names(dir.path(), 30, 100, true);
    let o = run(&["summary", &p, "--warmup", "none", "--top", "2000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("(other 2001 names)"),
        "{}",
        &out[..out.len().min(3000)]
    );
    assert!(
        out.contains("2001 kernel families past the first 1000"),
        "no warning"
    );
    assert!(out.lines().count() < 1400, "{} lines", out.lines().count());
    let o = run(&["compare", &p, &p]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_million_names_of_each_kind_stay_under_256_mb() {
    // The hostile corpus's many-name cases, generated here (130 to 180 MB each): 10 000 rows of
    // 100 distinct scope paths, and of 100 distinct kernel names, each weighed in the commands
    // whose memory or output grew with the names (6.7 to 7.8 GB, and a CSV of about 20 GB);
    // compare against a small ledger, which holds the many names on one side as well.
    // examples/names_scale.rs weighs every command, in a release build. The two cases run side
    // by side.
    let dir = tempfile::tempdir().unwrap();
    let small = cli_common::data("v1-missing-nvml.jsonl")
        .display()
        .to_string();
    let cases: Vec<_> = [false, true]
        .into_iter()
        .map(|kernels| {
            let sub = dir.path().join(if kernels { "k" } else { "s" });
            std::fs::create_dir(&sub).unwrap();
            let small = small.clone();
            std::thread::spawn(move || million_names(&sub, kernels, &small))
        })
        .collect();
    for case in cases {
        case.join().unwrap();
    }
}

/// Runs summary, compare, report and csv on a million distinct names of one kind, in `dir`.
fn million_names(dir: &Path, kernels: bool, small: &str) {
    let p = many_names(dir, 10_000, 100, kernels);
    let out = dir.join("out");
    let o = out.display().to_string();
    let commands: [&[&str]; 4] = [
        &["summary", &p],
        &["compare", &p, small],
        &["report", &p, "-o", &o],
        &["csv", &p, "-o", &o],
    ];
    let kind = if kernels { "kernel" } else { "scope" };
    for args in commands {
        let m = measure::measure(Command::new(env!("CARGO_BIN_EXE_gpu-ledger")).args(args))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            m.peak_mb() < 256.0,
            "{args:?} peaked at {:.0} MB on a million {kind} names (in {:.0?})",
            m.peak_mb(),
            m.wall
        );
    }
    // The CSV's columns are capped (1002 scope columns of each kind at most): about 20 GB for
    // the scope names before, about 21 MB now.
    let csv = std::fs::metadata(&out).unwrap().len();
    assert!(
        csv < 64_000_000,
        "the CSV of a million {kind} names is {csv} bytes"
    );
}

#[test]
fn the_long_csv_has_every_path_one_line_each_in_the_same_columns() {
    let dir = tempfile::tempdir().unwrap();
    let p = many_names(dir.path(), 30, 100, false);
    let o = run(&["csv", &p, "--long", "-o", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "ledger,rank,index,complete,perturbed,untraced,scope,calls,host_ns,device_ns,\
         device_ns_inclusive,event_device_ns,launches,kernels"
    );
    // 30 rows, each its own line and one per path (`step` and 100 below it): nothing folded.
    assert_eq!(lines.len(), 1 + 30 * 102);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(",29,true,false,false,step/request-2999,1,10000,")),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(!text.contains("(other"), "no path is folded");
    // Names a spreadsheet would run are escaped, as in every CSV.
    let corpus =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/ok-formula-names.jsonl");
    let o = run(&["csv", corpus.to_str().unwrap(), "--long", "-o", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(",\"'=HYPERLINK(\"\"http://x\"\")\","),
        "{text}"
    );
    assert!(
        text.contains(",'@SUM(A1),") && text.contains(",'+1,") && text.contains(",'-2,"),
        "{text}"
    );
}
