//! Property tests over the ledger reader (fuzzing in proptest form, so that it runs in CI with a
//! bounded number of cases): any input gives a ledger or an error with a line number, never a
//! panic; a ledger cut anywhere after its header reads up to the cut, dropping and naming a cut
//! last line. Structured mutations (a field set to an extreme number, a string, null, a nested
//! value) go through every command's input path: the whole-ledger reader and the line-by-line
//! stream agree, and whatever they accept, every analysis and export takes without a panic.

use std::path::Path;

use gpu_ledger_format::reader::parse_ledger;
use proptest::prelude::*;

const VALID: &str = concat!(
    r#"{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1,"start_cupti_ns":2,"config":{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000},"environment":{"gpus":[],"driver_version":null,"cuda_driver_version":null,"cupti_api_version":null,"cupti_path":null,"hostname":null,"command_line":[]},"rank":null,"warnings":[]}"#,
    "\n",
    r#"{"type":"iteration","index":0,"host_start_ns":0,"host_wall_ns":10,"complete":true,"perturbed":false,"devices":[],"scopes":[{"path":"step","calls":1,"host_ns":9,"launches":0,"device_ns":0,"device_ns_inclusive":0}],"kernels":[],"memcpy":[],"memset":[],"synchronization":[],"dropped_records":0}"#,
    "\n",
    r#"{"type":"trailer","iterations":1,"kernel_records":0,"activity_records":0,"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}"#,
    "\n"
);

fn parse(text: &[u8]) -> Result<gpu_ledger_format::Ledger, gpu_ledger_format::Error> {
    parse_ledger(std::io::BufReader::new(text), Path::new("fuzz.jsonl"))
}

#[test]
fn the_seed_ledger_is_valid() {
    let l = parse(VALID.as_bytes()).unwrap();
    assert_eq!(l.iterations.len(), 1);
    assert!(l.trailer.is_some());
}

fn line_of(err: gpu_ledger_format::Error) -> usize {
    match err {
        gpu_ledger_format::Error::LedgerRead { line, .. } => line,
        other => panic!("unexpected error kind: {other}"),
    }
}

/// Where each line of [`VALID`] ends (the offset of its newline).
fn line_ends() -> Vec<usize> {
    VALID
        .bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'\n')
        .map(|(i, _)| i)
        .collect()
}

/// The text after the last newline of `text`, and the 1-based number of its line.
fn last_line(text: &[u8]) -> (&[u8], usize) {
    let start = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let newlines = text.iter().filter(|&&b| b == b'\n').count();
    (&text[start..], newlines + 1)
}

/// A partial line that is not JSON: what the writer left when it was killed mid-line.
fn is_cut(partial: &[u8]) -> bool {
    !partial.is_empty() && serde_json::from_slice::<serde_json::Value>(partial).is_err()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Err(e) = parse(&bytes) {
            prop_assert!(line_of(e) >= 1);
        }
    }

    #[test]
    fn a_truncated_ledger_is_valid_up_to_its_cut_or_names_the_cut_line(cut in 0usize..=VALID.len()) {
        let text = &VALID.as_bytes()[..cut];
        let ends = line_ends();
        let (header_end, row_end, trailer_end) = (ends[0], ends[1], ends[2]);
        let result = parse(text);
        if cut < header_end {
            // An empty file or a cut header: an error at line 1.
            let line = line_of(result.expect_err("a cut header is an error"));
            prop_assert_eq!(line, 1);
            return Ok(());
        }
        // A cut anywhere after the header line: the lines that are complete, nothing else.
        let l = match result {
            Ok(l) => l,
            Err(e) => return Err(TestCaseError::fail(format!("cut at {cut}: {e}"))),
        };
        prop_assert_eq!(l.iterations.len(), usize::from(cut >= row_end));
        prop_assert_eq!(l.trailer.is_some(), cut >= trailer_end);
        let (partial, line) = last_line(text);
        prop_assert_eq!(
            l.truncated_last_line,
            is_cut(partial).then_some(line),
            "cut at {} leaves {:?}",
            cut,
            String::from_utf8_lossy(partial)
        );
    }

    #[test]
    fn a_cut_line_followed_by_more_is_an_error_at_its_line(cut in 0usize..VALID.len(), more in 0usize..3) {
        // The cut line ends with a newline, or whole lines follow it: not a cut last line.
        let ends = line_ends();
        let mut text = VALID.as_bytes()[..cut].to_vec();
        let (partial, line) = last_line(&text);
        let cut_line = is_cut(partial);
        text.push(b'\n');
        if more > 0 {
            // The whole iteration row, `more` times, with rising indices.
            let row = &VALID[ends[0] + 1..=ends[1]];
            for k in 1..=more {
                text.extend_from_slice(row.replace("\"index\":0", &format!("\"index\":{k}")).as_bytes());
            }
        }
        // Errors: the cut line (at its line), a cut or missing header, rows after the trailer.
        let rows_after_trailer = more > 0 && cut >= ends[2];
        match parse(&text) {
            Ok(l) => {
                prop_assert!(
                    !cut_line && cut >= ends[0] && !rows_after_trailer,
                    "cut at {}, {} more rows: read as valid", cut, more
                );
                prop_assert_eq!(l.truncated_last_line, None);
                prop_assert_eq!(l.iterations.len(), usize::from(cut >= ends[1]) + more);
            }
            Err(e) => {
                prop_assert!(
                    cut_line || cut < ends[0] || rows_after_trailer,
                    "cut at {}, {} more rows: {}", cut, more, e
                );
                if cut_line {
                    prop_assert_eq!(line_of(e), line);
                }
            }
        }
    }

    #[test]
    fn a_flipped_byte_is_an_error_on_its_line_or_harmless(pos in 0usize..VALID.len(), byte in any::<u8>()) {
        let mut text = VALID.as_bytes().to_vec();
        text[pos] = byte;
        if let Err(e) = parse(&text) {
            let line = line_of(e);
            prop_assert!((1..=3).contains(&line) || byte == b'\n', "line {}", line);
        }
    }
}

/// A value to put in place of a field: extreme and wrong-typed values alike.
fn hostile_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(1u64 << 62)),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        Just(Value::Null),
        Just(Value::Bool(true)),
        Just(serde_json::json!([])),
        Just(serde_json::json!({"x": [1, 2]})),
    ]
}

/// Every path to a scalar inside `v`, as JSON pointers.
fn scalar_paths(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                scalar_paths(x, format!("{at}/{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                scalar_paths(x, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

/// A golden ledger with the scalar at `pick` (modulo their count) of line `line` replaced.
fn mutated(name: &str, line: usize, pick: usize, value: serde_json::Value) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data")
            .join(name),
    )
    .unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = lines.len();
    let target = &mut lines[line % n];
    let mut paths = Vec::new();
    scalar_paths(target, String::new(), &mut paths);
    if let Some(p) = paths.get(pick % paths.len().max(1)) {
        if let Some(slot) = target.pointer_mut(p) {
            *slot = value;
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Every command's work on an accepted ledger: the summary, the report, the CSV, the trace, the
/// merge and the comparison with itself. Nothing may panic; errors are fine.
fn every_command(ledger: &gpu_ledger_format::Ledger) {
    use gpu_ledger_tools::analysis::compare::{compare, CompareOptions, LedgerView};
    use gpu_ledger_tools::export::{
        markdown_comparison, markdown_summary, merge_ranks, write_html_report, CsvLayout,
        LedgerSummary, RankSeries, ReportOptions, SummaryOptions, TraceOptions, TraceWriter,
    };
    let summary = LedgerSummary::compute(ledger, &SummaryOptions::default());
    let _ = markdown_summary(&summary, "fuzz.jsonl");
    let mut html = Vec::new();
    write_html_report(ledger, "fuzz.jsonl", &ReportOptions::default(), &mut html).unwrap();
    let layout = CsvLayout::from_rows(&ledger.iterations);
    let mut csv = Vec::new();
    layout.write_header(&mut csv).unwrap();
    for r in &ledger.iterations {
        layout.write_row(&mut csv, r).unwrap();
    }
    let mut trace = Vec::new();
    let mut w = TraceWriter::new(&mut trace, &ledger.header, TraceOptions::default()).unwrap();
    for r in &ledger.iterations {
        w.write_row(r).unwrap();
    }
    w.finish(ledger.trailer.as_ref()).unwrap();
    let mut series = RankSeries::new(&ledger.header, "fuzz.jsonl");
    for r in &ledger.iterations {
        series.push(r);
    }
    if let Ok(view) = merge_ranks(vec![series]) {
        let _ = (view.to_markdown(), view.to_csv());
    }
    let side = LedgerView {
        header: &ledger.header,
        rows: &ledger.iterations,
    };
    let opts = CompareOptions {
        resamples: 200,
        ..CompareOptions::default()
    };
    if let Ok(c) = compare(side, side, &opts) {
        let _ = markdown_comparison(&c, "a", "b");
    }
}

/// What the line-by-line stream reads: the rows and trailer, or the error's line.
fn stream(text: &str) -> Result<(usize, bool, Option<usize>), usize> {
    use gpu_ledger_tools::export::{LedgerStream, StreamItem};
    let mut s = LedgerStream::new(text.as_bytes(), Path::new("fuzz.jsonl")).map_err(line_of)?;
    let (mut rows, mut trailer) = (0, false);
    while let Some(item) = s.next_item().map_err(line_of)? {
        match item {
            StreamItem::Row(..) => rows += 1,
            StreamItem::Trailer(..) => trailer = true,
        }
    }
    Ok((rows, trailer, s.truncated_last_line()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn a_hostile_field_is_an_error_at_its_line_or_harmless_to_every_command(
        file in prop_oneof![
            Just("v1-nested-scopes.jsonl"),
            Just("v1-graph-kernels.jsonl"),
            Just("v1-overlapping-streams.jsonl"),
            Just("v1-rank0.jsonl"),
        ],
        line in 0usize..16,
        pick in any::<usize>(),
        value in hostile_value(),
    ) {
        let text = mutated(file, line, pick, value);
        let whole = parse(text.as_bytes());
        let streamed = stream(&text);
        match whole {
            Ok(l) => {
                prop_assert_eq!(
                    streamed,
                    Ok((l.iterations.len(), l.trailer.is_some(), l.truncated_last_line))
                );
                every_command(&l);
            }
            Err(e) => prop_assert_eq!(streamed, Err(line_of(e))),
        }
    }
}
