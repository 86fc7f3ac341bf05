//! `gpu-ledger parquet` and `gpu_ledger_tools::export::parquet`: every item of every golden ledger lands
//! in its table with its values, the files are zstd with dictionaries and carry the clock anchors
//! in their metadata, the layout is `table/run=…/rank=…/part-0.parquet`, row groups are bounded,
//! and bad outputs and inputs are refused with their cause and fix, touching nothing else.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray};
use gpu_ledger_format::counters::{CounterRange, IterationCounters};
use gpu_ledger_format::read_ledger;
use gpu_ledger_format::schema::{AttributionCounts, LaunchThread, LedgerLine};
use gpu_ledger_tools::export::parquet::{
    part_path, run_key, write_dataset, DatasetOptions, TABLES,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, Encoding};
use parquet::file::metadata::ParquetMetaData;

mod cli_common;
use cli_common::{data, run, stderr};

#[path = "../../examples/common/job.rs"]
mod job;

/// The batches and the metadata of one part file.
fn read(path: &Path) -> (Vec<RecordBatch>, std::sync::Arc<ParquetMetaData>) {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let b = ParquetRecordBatchReaderBuilder::try_new(f).expect("a Parquet file");
    let meta = b.metadata().clone();
    let batches = b
        .build()
        .expect("a reader")
        .map(|b| b.expect("a batch"))
        .collect();
    (batches, meta)
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

fn i64s(batches: &[RecordBatch], col: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b.column_by_name(col).expect("the column");
            let a = a.as_any().downcast_ref::<Int64Array>().expect("i64");
            a.iter().map(|v| v.expect("not null")).collect::<Vec<_>>()
        })
        .collect()
}

fn strs(batches: &[RecordBatch], col: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b.column_by_name(col).expect("the column");
            let a = a.as_any().downcast_ref::<StringArray>().expect("utf8");
            (0..a.len())
                .map(|i| a.value(i).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn kv(meta: &ParquetMetaData, key: &str) -> Option<String> {
    meta.file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|k| k.key == key)?
        .value
        .clone()
}

/// A golden ledger with counters and launch threads added to its rows, which no golden has.
fn with_counters(dir: &Path) -> PathBuf {
    let mut l = read_ledger(&data("v1-nested-scopes.jsonl")).expect("the golden reads");
    for (i, row) in l.iterations.iter_mut().enumerate() {
        row.attribution = Some(AttributionCounts {
            own_thread: 3,
            unscoped: 1,
            ..AttributionCounts::default()
        });
        row.launch_threads = vec![LaunchThread {
            name: Some("main".into()),
            tid: 42,
            kernels: 4,
            kernel_ns: 1000,
            copies: 1,
            attribution: AttributionCounts::default(),
            ..LaunchThread::default()
        }];
        // A sampled timeline with a calibration: every fourth row untraced, the others with
        // their estimate.
        row.untraced = i % 4 == 1;
        row.tracing_added_ns = (!row.untraced).then_some(1000 + i as u64);
        if i % 3 == 0 {
            row.counters = Some(IterationCounters {
                collection: i as u64 / 3,
                first_iteration: i as u64,
                run: 0,
                runs: 1,
                complete: true,
                ranges: vec![CounterRange {
                    name: "step/forward".into(),
                    depth: 2,
                    kernel: None,
                    launch_index: None,
                    values: [
                        ("sm__throughput".to_string(), 55.5),
                        ("dram__bytes".to_string(), f64::NAN),
                    ]
                    .into_iter()
                    .collect(),
                    derived: Default::default(),
                }],
                dropped_ranges: 0,
                error: None,
            });
        }
    }
    let path = dir.join("counters.jsonl");
    let mut text = serde_json::to_string(&LedgerLine::Header(l.header.clone())).unwrap() + "\n";
    for r in &l.iterations {
        text += &(serde_json::to_string(&LedgerLine::Iteration(r.clone())).unwrap() + "\n");
    }
    if let Some(t) = &l.trailer {
        text += &(serde_json::to_string(&LedgerLine::Trailer(t.clone())).unwrap() + "\n");
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Every device's idle split of `rows`.
fn splits(
    rows: &[gpu_ledger_format::schema::IterationRow],
) -> impl Iterator<Item = &gpu_ledger_format::idle::IdleBreakdown> {
    rows.iter()
        .flat_map(|r| &r.devices)
        .filter_map(|d| d.idle.as_ref())
}

#[test]
fn idle_gaps_and_causes_land_in_their_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = data("v1-idle-causes.jsonl");
    let out = tmp.path().join("ds");
    write_dataset(
        std::slice::from_ref(&ledger),
        &out,
        &DatasetOptions::default(),
    )
    .unwrap();
    let l = read_ledger(&ledger).unwrap();
    let run = run_key(&l.header);
    let (gaps, _) = read(&part_path(&out, "idle_gaps", &run, 0));
    assert_eq!(
        rows(&gaps),
        28,
        "3 gaps in each of 8 steady rows, 4 in the warm-up"
    );
    assert_eq!(i64s(&gaps, "position")[..4], [0, 1, 2, 3]);
    assert_eq!(i64s(&gaps, "ns")[4..7], [1_200_000, 300_000, 204_000]);
    assert_eq!(strs(&gaps, "cause")[4], "host_launch");
    assert_eq!(strs(&gaps, "thread")[4], "main");
    assert_eq!(i64s(&gaps, "floor_ns")[4], 4_000);
    let (causes, _) = read(&part_path(&out, "idle_causes", &run, 0));
    // The pieces of each device add up to its idle_ns, as in the ledger.
    let (its, ns) = (i64s(&causes, "iteration"), i64s(&causes, "ns"));
    for r in l.iterations.iter().filter(|r| !r.devices.is_empty()) {
        let sum: i64 = (its.iter().zip(&ns))
            .filter(|(i, _)| **i == r.index as i64)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(sum, r.devices[0].idle_ns as i64, "row {}", r.index);
    }
    assert!(!its.contains(&6), "the untraced row has no split");
    assert!(strs(&causes, "rule").contains(&"stream_wait_event".to_string()));
}

#[test]
fn every_item_of_every_golden_ledger_lands_in_its_table() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ledgers: Vec<PathBuf> = [
        "v1-ab-baseline.jsonl",
        "v1-graph-kernels.jsonl",
        "v1-idle-causes.jsonl",
        "v1-missing-nvml.jsonl",
        "v1-nested-scopes.jsonl",
        "v1-overlapping-streams.jsonl",
        "v1-truncated.jsonl",
    ]
    .iter()
    .map(|n| data(n))
    .collect();
    ledgers.push(with_counters(tmp.path()));
    for (n, ledger) in ledgers.iter().enumerate() {
        let out = tmp.path().join(format!("ds{n}"));
        let o = run(&[
            "parquet",
            &ledger.display().to_string(),
            "-o",
            &out.display().to_string(),
        ]);
        assert!(o.status.success(), "{}: {}", ledger.display(), stderr(&o));
        let l = read_ledger(ledger).unwrap();
        let run = run_key(&l.header);
        let rank = l.header.rank.as_ref().map_or(0, |r| r.rank);
        let it = &l.iterations;
        let expect = [
            it.len(),
            it.iter().map(|r| r.devices.len()).sum(),
            it.iter().map(|r| r.scopes.len()).sum(),
            it.iter().map(|r| r.kernels.len()).sum(),
            it.iter()
                .map(|r| r.memcpy.len() + r.memset.len() + r.synchronization.len())
                .sum(),
            it.iter()
                .map(|r| r.activities.as_ref().map_or(0, Vec::len))
                .sum(),
            it.iter()
                .map(|r| r.scope_spans.as_ref().map_or(0, Vec::len))
                .sum(),
            it.iter().map(|r| r.nvml.len()).sum(),
            it.iter()
                .filter_map(|r| r.counters.as_ref())
                .flat_map(|c| &c.ranges)
                .map(|r| r.values.len())
                .sum(),
            it.iter().map(|r| r.launch_threads.len()).sum(),
            1,
            splits(it).map(|b| b.largest_gaps.len()).sum(),
            splits(it).map(|b| b.causes.len()).sum(),
        ];
        for (t, table) in TABLES.iter().enumerate() {
            let part = part_path(&out, table, &run, rank);
            let (batches, meta) = read(&part);
            assert_eq!(
                rows(&batches),
                expect[t],
                "{}: table {table}",
                ledger.display()
            );
            assert_eq!(kv(&meta, "gpu_ledger.table").as_deref(), Some(*table));
            assert_eq!(kv(&meta, "gpu_ledger.run"), Some(run.clone()));
            assert_eq!(kv(&meta, "gpu_ledger.rank"), Some(rank.to_string()));
            assert_eq!(kv(&meta, "gpu_ledger.schema_version"), Some("1".into()));
            assert_eq!(
                kv(&meta, "gpu_ledger.start_unix_ns"),
                Some(l.header.start_unix_ns.to_string())
            );
            assert_eq!(
                kv(&meta, "gpu_ledger.start_cupti_ns"),
                l.header.start_cupti_ns.map(|c| c.to_string())
            );
            for rg in meta.row_groups() {
                for c in rg.columns() {
                    assert!(
                        matches!(c.compression(), Compression::ZSTD(_)),
                        "{table}: {:?}",
                        c.compression()
                    );
                }
            }
        }
        let (its, _) = read(&part_path(&out, "iterations", &run, rank));
        let walls: Vec<i64> = it.iter().map(|r| r.host_wall_ns as i64).collect();
        assert_eq!(i64s(&its, "host_wall_ns"), walls);
        let untraced: Vec<bool> = its
            .iter()
            .flat_map(|b| {
                let a = b.column_by_name("untraced").expect("the column");
                let a = a.as_any().downcast_ref::<BooleanArray>().expect("bool");
                a.iter().map(|v| v.expect("not null")).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(untraced, it.iter().map(|r| r.untraced).collect::<Vec<_>>());
        let added: Vec<Option<i64>> = its
            .iter()
            .flat_map(|b| {
                let a = b.column_by_name("tracing_added_ns").expect("the column");
                let a = a.as_any().downcast_ref::<Int64Array>().expect("i64");
                a.iter().collect::<Vec<_>>()
            })
            .collect();
        let expect_added: Vec<Option<i64>> = it
            .iter()
            .map(|r| r.tracing_added_ns.map(|n| n as i64))
            .collect();
        assert_eq!(added, expect_added);
        let (scopes, meta) = read(&part_path(&out, "scopes", &run, rank));
        let paths: Vec<String> = it
            .iter()
            .flat_map(|r| &r.scopes)
            .map(|s| s.path.clone())
            .collect();
        assert_eq!(strs(&scopes, "path"), paths);
        let path_col = meta
            .row_group(0)
            .columns()
            .iter()
            .find(|c| c.column_path().string() == "path");
        assert!(
            path_col
                .expect("a path column")
                .encodings()
                .any(|e| e == Encoding::RLE_DICTIONARY),
            "scope paths are dictionary-encoded"
        );
        let (env, _) = read(&part_path(&out, "environment", &run, rank));
        let header: gpu_ledger_format::schema::Header =
            serde_json::from_str(&strs(&env, "header_json")[0]).unwrap();
        assert_eq!(header, l.header, "the whole header is kept");
    }
}

#[test]
fn a_job_is_partitioned_by_run_and_rank_and_row_groups_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = job::write_job(&tmp.path().join("ledgers"), 3, 50, None).unwrap();
    let out = tmp.path().join("ds");
    let opts = DatasetOptions {
        row_group_rows: 16,
        threads: 2,
        ..DatasetOptions::default()
    };
    let stats = write_dataset(&paths, &out, &opts).unwrap();
    assert_eq!(stats.rows, 150);
    let l = read_ledger(&paths[0]).unwrap();
    let key = run_key(&l.header);
    assert!(key.starts_with("python-"), "{key}");
    for rank in 0..3 {
        let (b, meta) = read(&part_path(&out, "iterations", &key, rank));
        assert_eq!(rows(&b), 50);
        // 50 rows in groups of at most 16.
        assert_eq!(meta.num_row_groups(), 4);
        assert!(meta.row_groups().iter().all(|g| g.num_rows() <= 16));
        let (s, _) = read(&part_path(&out, "scopes", &key, rank));
        assert_eq!(rows(&s), 200);
    }
    assert!(out.join("_gpu_ledger_dataset").is_file());
    let mut tables: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_'))
        .collect();
    tables.sort();
    let mut want: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
    want.sort();
    assert_eq!(tables, want);
    // A directory of ledgers converts as its files do, here into a second run.
    let o = run(&[
        "parquet",
        &tmp.path().join("ledgers").display().to_string(),
        "-o",
        &out.display().to_string(),
        "--run",
        "again",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(part_path(&out, "kernels", "again", 2).is_file());
}

#[test]
fn the_run_key_is_shared_by_the_ranks_of_a_job_and_differs_between_jobs() {
    let l = read_ledger(&data("v1-rank0.jsonl")).unwrap();
    let mut a = l.header.clone();
    let mut b = l.header.clone();
    a.environment.command_line = vec![
        "torchrun".into(),
        "train.py".into(),
        "--local_rank=0".into(),
    ];
    b.environment.command_line = vec![
        "torchrun".into(),
        "train.py".into(),
        "--local_rank=1".into(),
    ];
    assert_eq!(run_key(&a), run_key(&b));
    b.environment.command_line = vec![
        "torchrun".into(),
        "train.py".into(),
        "--local-rank".into(),
        "3".into(),
    ];
    assert_eq!(run_key(&a), run_key(&b));
    b.environment.command_line = vec!["torchrun".into(), "eval.py".into()];
    assert_ne!(run_key(&a), run_key(&b));
    let mut c = a.clone();
    c.rank.as_mut().unwrap().world_size = Some(99);
    assert_ne!(run_key(&a), run_key(&c));
}

#[test]
fn outputs_that_are_not_dataset_directories_are_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let ledger = data("v1-rank0.jsonl").display().to_string();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "keep me").unwrap();
    let o = run(&["parquet", &ledger, "-o", &file.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    let o = run(&["parquet", &ledger, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/dev/null exists and is not a directory"),
        "{}",
        stderr(&o)
    );
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let o = run(&["parquet", &ledger, "-o", &other.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is not empty and is not a gpu-ledger dataset"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_dir(&other).unwrap().count(),
        1,
        "nothing was written there"
    );
}

#[test]
fn a_rank_already_converted_is_replaced_only_with_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds").display().to_string();
    let ledger = data("v1-rank0.jsonl").display().to_string();
    assert!(run(&["parquet", &ledger, "-o", &out]).status.success());
    let o = run(&["parquet", &ledger, "-o", &out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("pass --overwrite"), "{}", stderr(&o));
    let o = run(&["parquet", &ledger, "-o", &out, "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_ledger_that_does_not_parse_is_named_with_its_line_and_leaves_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let o = run(&[
        "parquet",
        &data("v1-corrupt.jsonl").display().to_string(),
        "-o",
        &out.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("v1-corrupt.jsonl:3:"), "{}", stderr(&o));
    // No part file, no temporary file, and no dataset directory or marker: nothing converted.
    assert!(
        !out.exists(),
        "a failed first conversion left {}",
        out.display()
    );
}

#[test]
fn two_ledgers_of_one_rank_are_refused_and_ledgers_without_rank_are_numbered() {
    let tmp = tempfile::tempdir().unwrap();
    let r0 = data("v1-rank0.jsonl").display().to_string();
    let out = tmp.path().join("ds").display().to_string();
    let o = run(&["parquet", &r0, &r0, "-o", &out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("both claim rank 0"), "{}", stderr(&o));
    let n = data("v1-nested-scopes.jsonl").display().to_string();
    let m = data("v1-missing-nvml.jsonl").display().to_string();
    let o = run(&["parquet", &n, &m, "-o", &out, "--run", "single"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("numbered in the order given"),
        "{}",
        stderr(&o)
    );
    let (b, _) = read(&part_path(Path::new(&out), "iterations", "single", 1));
    assert_eq!(
        rows(&b),
        read_ledger(Path::new(&m)).unwrap().iterations.len()
    );
    let o = run(&["parquet", &r0, &n, "-o", &out, "--run", "mixed"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("has no rank in its header while other ledgers of run mixed do"),
        "{}",
        stderr(&o)
    );
    let empty = tmp.path().join("no-ledgers");
    std::fs::create_dir(&empty).unwrap();
    let o = run(&["parquet", &empty.display().to_string(), "-o", &out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("holds no ledger (*.jsonl)"),
        "{}",
        stderr(&o)
    );
    // A compressed ledger in a directory is not left out silently: refused, naming the fix,
    // unless its decompressed twin is beside it.
    let packed = tmp.path().join("packed");
    std::fs::create_dir(&packed).unwrap();
    std::fs::copy(&n, packed.join("a.jsonl")).unwrap();
    std::fs::write(packed.join("b.jsonl.gz"), [0x1f, 0x8b, 8, 0]).unwrap();
    let packed_out = tmp.path().join("packed-ds");
    let o = run(&[
        "parquet",
        &packed.display().to_string(),
        "-o",
        &packed_out.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("holds compressed ledgers")
            && err.contains("b.jsonl.gz")
            && err.contains("zcat"),
        "{err}"
    );
    assert!(!packed_out.exists(), "nothing written: {err}");
    std::fs::copy(&n, packed.join("b.jsonl")).unwrap();
    let twin_out = tmp.path().join("twin-ds").display().to_string();
    let o = run(&[
        "parquet",
        &packed.display().to_string(),
        "-o",
        &twin_out,
        "--run",
        "twin",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["parquet", &n, "-o", &out, "--run", "../up"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot be a partition value"),
        "{}",
        stderr(&o)
    );
}
