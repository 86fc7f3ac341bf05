//! The golden ledgers of `tests/data/` (hand-built, see `tests/data/README.md`): every one still
//! reads with this build's reader, the streaming reader agrees with it line for line, the broken
//! one fails at the right line, the one with a cut last line reads up to it and names it, and the
//! figures each file was built to show are there.

use std::path::{Path, PathBuf};

use gpu_ledger_format::reader::{read_ledger, Ledger};
use gpu_ledger_format::schema::SCHEMA_VERSION;
use gpu_ledger_format::stream::{LedgerStream, StreamItem};
use gpu_ledger_tools::analysis::intervals::union_busy;

mod export_common;
use export_common::{data, read};

fn golden_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with('v') && name.ends_with(".jsonl")
        })
        .collect();
    v.sort();
    v
}

/// Golden files that must fail, with the line of the failure.
const BROKEN: [(&str, usize); 1] = [("v1-corrupt.jsonl", 3)];

/// Golden files whose last line was cut while being written: they read, without that line,
/// and name it in `truncated_last_line`.
const CUT_LAST_LINE: [(&str, usize); 1] = [("v1-truncated.jsonl", 5)];

fn stream_all(path: &Path) -> gpu_ledger_format::Result<Ledger> {
    LedgerStream::open(path)?.into_ledger(|_| {})
}

#[test]
fn every_golden_file_reads_or_fails_where_expected() {
    let files = golden_files();
    assert!(files.len() >= 10, "golden files missing: {files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let by_reader = read_ledger(&path);
        let by_stream = stream_all(&path);
        match BROKEN.iter().find(|(n, _)| *n == name) {
            Some((_, line)) => {
                let e = by_reader.expect_err(&name).to_string();
                assert!(e.contains(&format!("{name}:{line}:")), "{e}");
                let s = by_stream.expect_err(&name).to_string();
                assert_eq!(e, s, "the streaming reader disagrees on {name}");
            }
            None => {
                let l = by_reader.unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(l.header.schema_version, SCHEMA_VERSION);
                assert!(!l.iterations.is_empty(), "{name} has no rows");
                let cut = CUT_LAST_LINE.iter().find(|(n, _)| *n == name);
                assert_eq!(l.truncated_last_line, cut.map(|(_, line)| *line), "{name}");
                if cut.is_some() {
                    assert!(l.trailer.is_none(), "{name}");
                }
                assert_eq!(
                    l,
                    by_stream.unwrap(),
                    "the streaming reader disagrees on {name}"
                );
            }
        }
    }
}

#[test]
fn a_cut_last_line_leaves_every_whole_row() {
    // A run killed while writing its 4th row: the header and rows 0..=2 are whole.
    let l = read("v1-truncated.jsonl");
    assert_eq!(l.truncated_last_line, Some(5));
    let indices: Vec<u64> = l.iterations.iter().map(|r| r.index).collect();
    assert_eq!(indices, [0, 1, 2]);
    assert!(l.trailer.is_none());
}

#[test]
fn the_two_readers_agree_wherever_a_ledger_is_cut() {
    let bytes = std::fs::read(data().join("v1-missing-nvml.jsonl")).unwrap();
    let path = Path::new("cut.jsonl");
    // Every third byte, and every byte near a line's end.
    let near_newline =
        |cut: usize| bytes[cut.saturating_sub(2)..(cut + 2).min(bytes.len())].contains(&b'\n');
    for cut in (0..=bytes.len()).filter(|&c| c % 3 == 0 || near_newline(c)) {
        let text = &bytes[..cut];
        let by_reader = gpu_ledger_format::reader::parse_ledger(text, path);
        let by_stream = LedgerStream::new(text, path).and_then(|s| s.into_ledger(|_| {}));
        match (by_reader, by_stream) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "cut at {cut}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "cut at {cut}"),
            (a, b) => panic!("cut at {cut}: the readers disagree: {a:?} / {b:?}"),
        }
    }
}

#[test]
fn one_golden_set_per_schema_version() {
    // When SCHEMA_VERSION is raised, the v{old}-*.jsonl files stay (old ledgers must keep reading
    // or fail with a clear version error) and v{new}-*.jsonl files are added.
    let prefix = format!("v{SCHEMA_VERSION}-");
    assert!(golden_files().iter().any(|p| p
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with(&prefix)));
}

#[test]
fn streaming_reader_reports_line_numbers_and_ends_after_an_error() {
    let path = data().join("v1-corrupt.jsonl");
    let mut s = LedgerStream::open(&path).unwrap();
    assert_eq!(s.header_line(), 1);
    assert!(matches!(s.next_item(), Ok(Some(StreamItem::Row(2, _)))));
    let e = s.next_item().unwrap_err().to_string();
    assert!(
        e.contains(":3: invalid iteration row: host_wall_ns: "),
        "{e}"
    );
    assert!(s.next_item().unwrap().is_none());
}

#[test]
fn streaming_reader_refuses_what_the_reader_refuses() {
    let header = std::fs::read_to_string(data().join("v1-missing-nvml.jsonl")).unwrap();
    let header = header.lines().next().unwrap().to_string();
    let row = std::fs::read_to_string(data().join("v1-missing-nvml.jsonl"))
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    let trailer = r#"{"type":"trailer","iterations":1,"kernel_records":0,"activity_records":0,"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}"#;
    let cases = [
        String::new(),
        "\n\n".to_string(),
        row.clone(),
        format!("{header}\n{header}\n"),
        format!("{header}\n{row}\n{trailer}\n{row}\n"),
        header.replace("\"schema_version\":1", "\"schema_version\":2"),
        header.replace("\"schema_version\":1", "\"schema_version\":0"),
        "not json at all".to_string(),
        format!("\n\n{header}\n{row}\n{{\"type\":\"iteration\""),
        format!("\n\n{header}\n{row}\n{{\"type\":\"iteration\"\n"),
        format!("{header}\n{{\"type\":\"iteration\"\n{row}\n"),
    ];
    for text in cases {
        let p = Path::new("case.jsonl");
        let a = gpu_ledger_format::reader::parse_ledger(text.as_bytes(), p);
        let b = LedgerStream::new(text.as_bytes(), p).and_then(|s| s.into_ledger(|_| {}));
        match (a, b) {
            (Ok(x), Ok(y)) => assert_eq!(x, y),
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "case {text:?}"),
            (x, y) => panic!("readers disagree on {text:?}: {x:?} vs {y:?}"),
        }
    }
}

#[test]
fn overlapping_streams_busy_is_the_union_of_the_recorded_activities() {
    let l = read("v1-overlapping-streams.jsonl");
    assert!(l.header.config.record_activities);
    assert!(l.header.start_cupti_ns.is_some());
    for row in &l.iterations {
        let acts = row.activities.as_ref().expect("activities recorded");
        let spans = row.scope_spans.as_ref().expect("scope spans recorded");
        assert!(spans.iter().any(|s| s.thread == 1));
        let streams: std::collections::BTreeSet<u32> = acts.iter().map(|a| a.stream_id).collect();
        assert_eq!(streams.len(), 2);
        let mut iv: Vec<(u64, u64)> = acts.iter().map(|a| (a.start_ns, a.end_ns)).collect();
        let sum: u64 = iv.iter().map(|(a, b)| b - a).sum();
        let busy = union_busy(&mut iv).unwrap();
        let d = &row.devices[0];
        assert_eq!(
            (busy.busy_ns, busy.idle_ns, busy.largest_gap_ns),
            (d.busy_ns, d.idle_ns, d.largest_gap_ns)
        );
        assert_eq!(d.busy_ns, 7_400_000);
        assert!(sum > d.busy_ns, "streams must overlap");
        assert_eq!(busy.first_start_ns, d.first_start_ns);
    }
    let t = l.trailer.unwrap();
    assert!(t.energy.is_some());
}

#[test]
fn each_golden_file_shows_what_it_was_built_for() {
    let nested = read("v1-nested-scopes.jsonl");
    let paths: Vec<&str> = nested.iterations[1]
        .scopes
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert!(paths.contains(&"step/forward/attention"));
    assert!(paths.contains(&"(unscoped)"));
    assert!(nested.iterations[6].perturbed);
    assert!(!nested.iterations[11].complete);
    assert!(nested.iterations.iter().all(|r| r.activities.is_none()));

    let graphs = read("v1-graph-kernels.jsonl");
    assert!(graphs.iterations[0]
        .kernels
        .iter()
        .all(|k| k.graph_launches > 0 && k.graph_launches == k.count));
    assert_eq!(graphs.iterations[0].devices.len(), 2);

    let no_nvml = read("v1-missing-nvml.jsonl");
    assert!(no_nvml.iterations.iter().all(|r| r.nvml.is_empty()));
    assert!(no_nvml.header.warnings[0].contains("NVML"));
    assert_eq!(no_nvml.header.config.nvml_period_ms, None);
    assert_eq!(no_nvml.iterations[3].dropped_records, 12);

    let r0 = read("v1-rank0.jsonl");
    let r1 = read("v1-rank1.jsonl");
    assert_eq!(r0.header.rank.as_ref().unwrap().rank, 0);
    assert_eq!(r1.header.rank.as_ref().unwrap().rank, 1);
    assert_eq!(r1.header.rank.as_ref().unwrap().world_size, Some(2));
    assert!(r1.trailer.is_none());
    assert_eq!((r0.iterations.len(), r1.iterations.len()), (10, 9));

    let a = read("v1-ab-baseline.jsonl");
    let b = read("v1-ab-change.jsonl");
    assert_eq!((a.iterations.len(), b.iterations.len()), (24, 24));
}

#[test]
fn mangled_golden_names_demangle() {
    use gpu_ledger_tools::analysis::families::{base_name, qualified_name};
    let l = read("v1-nested-scopes.jsonl");
    let names: Vec<&str> = l.iterations[0]
        .kernels
        .iter()
        .map(|k| k.name.as_str())
        .collect();
    let families: Vec<String> = names.iter().map(|n| base_name(n)).collect();
    assert_eq!(
        families,
        [
            "flash_fwd_kernel",
            "ampere_sgemm_128x64_nn",
            "vectorized_elementwise_kernel"
        ]
    );
    assert_eq!(
        qualified_name(names[0]).unwrap(),
        "flash::flash_fwd_kernel<128, true>"
    );
}
