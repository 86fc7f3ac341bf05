//! `gpu-ledger sql` (feature `sql`) on a generated job gives the answers `gpu-ledger merge` gives
//! on its JSONL (slowest rank and spread per iteration, exactly; the spread's median, p90 and
//! max), and the answers of docs/sql.md's definitions computed here from the ledgers (per-scope
//! p50 / p99 across ranks; the lag start), which find the rank the generator slowed down.

#![cfg(feature = "sql")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_ledger_format::read_ledger;
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_tools::analysis::stats::percentile_sorted;
use gpu_ledger_tools::export::{merge_ranks, RankSeries};

#[path = "../../examples/common/job.rs"]
mod job;

const RANKS: u32 = 6;
const ITERATIONS: u64 = 120;
const STRAGGLER: job::Straggler = job::Straggler {
    rank: 4,
    from: 70,
    percent: 20,
};

fn run(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-ledger"))
        .args(args)
        .output()
        .expect("gpu-ledger runs");
    o
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// CSV lines split into fields, header first.
fn csv(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

struct Job {
    _tmp: tempfile::TempDir,
    paths: Vec<PathBuf>,
    ledgers: Vec<Ledger>,
    dataset: String,
}

fn job() -> Job {
    let tmp = tempfile::tempdir().unwrap();
    let paths = job::write_job(
        &tmp.path().join("ledgers"),
        RANKS,
        ITERATIONS,
        Some(STRAGGLER),
    )
    .unwrap();
    let dataset = tmp.path().join("ds").display().to_string();
    ok(&[
        "parquet",
        &tmp.path().join("ledgers").display().to_string(),
        "-o",
        &dataset,
    ]);
    let ledgers = paths.iter().map(|p| read_ledger(p).unwrap()).collect();
    Job {
        _tmp: tmp,
        paths,
        ledgers,
        dataset,
    }
}

fn sql(j: &Job, query: &str) -> Vec<Vec<String>> {
    csv(&ok(&[
        "sql", &j.dataset, "--query", query, "--format", "csv",
    ]))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Whether `got` is the `q`-quantile of `sorted` within the error DataFusion states for its
/// `percentile_cont`: the interpolation weight is truncated to 6 decimals, so the value may fall
/// short of the exact one by up to 10⁻⁶ of the gap between the two values it interpolates.
fn quantile_close(got: f64, sorted: &[f64], q: f64) -> bool {
    let exact = percentile_sorted(sorted, q).expect("values");
    let h = q * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let gap = sorted[(lo + 1).min(sorted.len() - 1)] - sorted[lo];
    got <= exact + 1e-9 * exact.abs() && got >= exact - 1e-6 * gap - 1e-9 * exact.abs()
}

#[test]
fn straggler_and_spread_are_the_merges() {
    let j = job();
    let mut args = vec!["merge".to_string(), "--format".into(), "csv".into()];
    args.extend(j.paths.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let merged = csv(&ok(&args));
    let head = &merged[0];
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let (mi, ms, mspread) = (col("index"), col("slowest_rank"), col("spread_ns"));
    let s = sql(&j, "straggler");
    assert_eq!(
        s[0],
        [
            "run",
            "iteration",
            "slowest_rank",
            "slowest_ns",
            "fastest_ns",
            "spread_ns",
            "ranks"
        ]
    );
    assert_eq!(s.len(), merged.len());
    assert_eq!(s.len() as u64, ITERATIONS + 1);
    for (m, q) in merged[1..].iter().zip(&s[1..]) {
        assert_eq!(m[mi], q[1], "iteration");
        assert_eq!(m[ms], q[2], "slowest rank of iteration {}", q[1]);
        assert_eq!(m[mspread], q[5], "spread of iteration {}", q[1]);
        assert_eq!(q[6], RANKS.to_string());
    }
    // The straggler is the slowest in every iteration from its start: the data says so.
    assert!(s[1 + STRAGGLER.from as usize..]
        .iter()
        .all(|q| q[2] == STRAGGLER.rank.to_string()));

    let series = j
        .ledgers
        .iter()
        .zip(&j.paths)
        .map(|(l, p)| RankSeries::from_rows(&l.header, &p.display().to_string(), &l.iterations))
        .collect();
    let view = merge_ranks(series).unwrap();
    let d = view.spread.expect("a spread");
    let mut spreads: Vec<f64> = view
        .iterations
        .iter()
        .filter(|i| i.wall_ns.iter().all(Option::is_some))
        .filter_map(|i| i.spread_ns.map(|s| s as f64))
        .collect();
    spreads.sort_by(f64::total_cmp);
    let spread = sql(&j, "spread");
    assert_eq!(spread.len(), 2);
    let v: Vec<f64> = spread[1][1..].iter().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v[0] as usize, d.n);
    assert!(
        quantile_close(v[1], &spreads, 0.5),
        "median {} vs {}",
        v[1],
        d.median
    );
    assert!(
        quantile_close(v[2], &spreads, 0.9),
        "p90 {} vs {}",
        v[2],
        d.p90
    );
    // merge's figures are the exact ones of the same definition.
    assert!(close(percentile_sorted(&spreads, 0.5).unwrap(), d.median));
    assert!(close(percentile_sorted(&spreads, 0.9).unwrap(), d.p90));
    assert!(close(v[3], d.max), "max {} vs {}", v[3], d.max);
}

#[test]
fn scope_percentiles_follow_the_documented_definition() {
    let j = job();
    let mut by_path: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for l in &j.ledgers {
        for s in l.iterations.iter().flat_map(|r| &r.scopes) {
            let e = by_path.entry(&s.path).or_default();
            e.0.push(s.host_ns as f64);
            e.1.push(s.device_ns_inclusive as f64);
        }
    }
    let got = sql(&j, "scope-percentiles");
    assert_eq!(got.len(), by_path.len() + 1);
    for (row, (path, (host, dev))) in got[1..].iter().zip(by_path.iter_mut()) {
        assert_eq!(row[1], *path);
        assert_eq!(row[2], RANKS.to_string());
        assert_eq!(row[3], host.len().to_string());
        host.sort_by(f64::total_cmp);
        dev.sort_by(f64::total_cmp);
        let want = [(&*host, 0.5), (&*host, 0.99), (&*dev, 0.5), (&*dev, 0.99)];
        for (k, (values, q)) in want.iter().enumerate() {
            let g: f64 = row[4 + k].parse().unwrap();
            let exact = percentile_sorted(values, *q);
            assert!(
                quantile_close(g, values, *q),
                "{path} column {}: {g} vs {exact:?} of {} values",
                4 + k,
                values.len()
            );
        }
    }
}

/// docs/sql.md's lag start, computed from the ledgers: per rank, the first iteration in which it
/// is over 5 % above the iteration's median and from which it is so in at least 90 % of at least
/// 10 remaining iterations.
fn lag_starts(ledgers: &[Ledger]) -> BTreeMap<u32, u64> {
    let mut walls: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for l in ledgers {
        for r in &l.iterations {
            walls
                .entry(r.index)
                .or_default()
                .push(r.host_wall_ns as f64);
        }
    }
    let medians: BTreeMap<u64, f64> = walls
        .into_iter()
        .map(|(i, mut v)| {
            v.sort_by(f64::total_cmp);
            (i, percentile_sorted(&v, 0.5).unwrap())
        })
        .collect();
    let mut out = BTreeMap::new();
    for l in ledgers {
        let rank = l.header.rank.as_ref().unwrap().rank;
        let lagging: Vec<(u64, bool)> = l
            .iterations
            .iter()
            .map(|r| (r.index, r.host_wall_ns as f64 > 1.05 * medians[&r.index]))
            .collect();
        for k in 0..lagging.len() {
            let rest = &lagging[k..];
            let n = rest.len();
            let lag = rest.iter().filter(|x| x.1).count();
            if lagging[k].1 && n >= 10 && lag as f64 >= 0.9 * n as f64 {
                out.insert(rank, lagging[k].0);
                break;
            }
        }
    }
    out
}

#[test]
fn the_lag_start_is_the_documented_one_and_finds_the_slowed_rank() {
    let j = job();
    let want = lag_starts(&j.ledgers);
    assert_eq!(want, BTreeMap::from([(STRAGGLER.rank, STRAGGLER.from)]));
    let got = sql(&j, "lag");
    let starts: BTreeMap<u32, u64> = got[1..]
        .iter()
        .map(|r| (r[1].parse().unwrap(), r[2].parse().unwrap()))
        .collect();
    assert_eq!(starts, want);
    assert_eq!(got[1][3], (ITERATIONS - STRAGGLER.from).to_string());
}

#[test]
fn bad_queries_and_datasets_say_what_to_do() {
    let j = job();
    let o = run(&["sql", &j.dataset, "--query", "stragler"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("the named queries are straggler, spread, scope-percentiles, lag"),
        "{e}"
    );
    let o = run(&["sql", &j.dataset, "--query", "SELECT nope FROM iterations"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("the query does not run") && e.contains("the tables are iterations"),
        "{e}"
    );
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let o = run(&["sql", &here.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a gpu-ledger dataset"));
    let file = Path::new(&j.dataset).join("q.sql");
    std::fs::write(&file, "SELECT COUNT(*) AS n FROM scopes").unwrap();
    let n = csv(&ok(&[
        "sql",
        &j.dataset,
        "--query",
        &file.display().to_string(),
        "--format",
        "csv",
    ]));
    assert_eq!(n[1][0], (u64::from(RANKS) * ITERATIONS * 4).to_string());
}

#[test]
fn ties_and_lone_iterations_name_no_straggler_in_sql_or_merge() {
    // Ranks 0 and 1 tie in most iterations; only rank 0 has iteration 9.
    let tmp = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let ledgers: Vec<String> = ["v1-rank0.jsonl", "v1-rank1.jsonl"]
        .iter()
        .map(|n| data.join(n).display().to_string())
        .collect();
    let dataset = tmp.path().join("ds").display().to_string();
    ok(&["parquet", &ledgers[0], &ledgers[1], "-o", &dataset]);
    let q = csv(&ok(&[
        "sql",
        &dataset,
        "--query",
        "straggler",
        "--format",
        "csv",
    ]));
    let m = csv(&ok(&["merge", "--format", "csv", &ledgers[0], &ledgers[1]]));
    let col = |name: &str| m[0].iter().position(|h| h == name).unwrap();
    let (mi, ms, mspread) = (col("index"), col("slowest_rank"), col("spread_ns"));
    let from_sql: Vec<[&str; 3]> = q[1..]
        .iter()
        .map(|r| [r[1].as_str(), r[2].as_str(), r[5].as_str()])
        .collect();
    let from_merge: Vec<[&str; 3]> = m[1..]
        .iter()
        .map(|r| [r[mi].as_str(), r[ms].as_str(), r[mspread].as_str()])
        .collect();
    assert_eq!(from_sql, from_merge);
    let slowest: Vec<&str> = from_sql.iter().map(|r| r[1]).collect();
    assert_eq!(slowest, ["", "", "", "1", "", "0", "", "1", "", ""]);
    assert_eq!(from_sql[0][2], "0", "a tie has a spread of 0");
    assert_eq!(from_sql[9][2], "", "one rank has no spread");
}

#[test]
fn only_queries_run_and_each_refusal_names_its_statement() {
    let j = job();
    let tmp = tempfile::tempdir().unwrap();
    let copied = tmp.path().join("copied.csv");
    let cases = [
        (
            format!("COPY (SELECT 1) TO '{}'", copied.display()),
            "COPY is refused",
        ),
        (
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/hostname'".to_string(),
            "CREATE EXTERNAL TABLE is refused",
        ),
        ("DROP TABLE iterations".to_string(), "DROP TABLE is refused"),
        (
            "\n-- a view\nCREATE VIEW v AS SELECT 1".to_string(),
            "CREATE VIEW is refused",
        ),
        (
            "INSERT INTO iterations SELECT * FROM iterations".to_string(),
            "INSERT INTO is refused",
        ),
        (
            "SET datafusion.execution.batch_size = 1".to_string(),
            "SET is refused",
        ),
    ];
    for (stmt, want) in cases {
        let o = run(&["sql", &j.dataset, "--query", &stmt]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{stmt}: {e}");
        assert!(e.contains(want), "{stmt}: {e}");
    }
    assert!(!copied.exists(), "COPY wrote a file");
    // A query still runs.
    ok(&[
        "sql",
        &j.dataset,
        "--query",
        "SELECT COUNT(*) FROM iterations",
    ]);
}

#[test]
fn sql_csv_guards_text_against_formulas_and_keeps_numbers() {
    let j = job();
    let out = ok(&[
        "sql",
        &j.dataset,
        "--format",
        "csv",
        "--query",
        "SELECT '=HYPERLINK(1)' AS name, -5 AS n, '@x' AS other",
    ]);
    assert_eq!(out, "name,n,other\n'=HYPERLINK(1),-5,'@x\n");
}

#[test]
fn the_lag_query_runs_over_a_million_rows() {
    // Two ranks of 500 000 iterations each, written as the dataset's iterations table: grouped
    // by iteration, DataFusion's percentile_cont panicked past about 200 000 groups. Rank 1 is
    // 20 % slower from iteration 450 000 on: a lag start there, 100 µs over the median.
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join(gpu_ledger_tools::export::parquet::MARKER), "{}\n").unwrap();
    let n = 500_000i64;
    for rank in 0..2 {
        let part = ds.join(format!("iterations/run=big/rank={rank}"));
        std::fs::create_dir_all(&part).unwrap();
        let iteration: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n));
        let wall: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n).map(|i| {
            if rank == 1 && i >= 450_000 {
                1_200_000
            } else {
                1_000_000
            }
        })));
        let batch =
            RecordBatch::try_from_iter([("iteration", iteration), ("host_wall_ns", wall)]).unwrap();
        let file = std::fs::File::create(part.join("part-0.parquet")).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let out = ok(&[
        "sql",
        &ds.display().to_string(),
        "--query",
        "lag",
        "--format",
        "csv",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(row[..5], ["big", "1", "450000", "50000", "50000"], "{out}");
    let mean_lag: f64 = row[5].parse().unwrap();
    assert!((mean_lag - 100_000.0).abs() < 1e-6, "{out}");
}
