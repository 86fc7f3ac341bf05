//! Property tests over the ledger reader (fuzzing in proptest form, so that it runs in CI): any
//! input gives a ledger or an error with a line number, never a panic; a ledger cut anywhere
//! after its header reads up to the cut, dropping and naming a cut last line.

use std::path::Path;

use gpu_ledger::ledger::reader::parse_ledger;
use proptest::prelude::*;

const VALID: &str = concat!(
    r#"{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1,"start_cupti_ns":2,"config":{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000},"environment":{"gpus":[],"driver_version":null,"cuda_driver_version":null,"cupti_api_version":null,"cupti_path":null,"hostname":null,"command_line":[]},"rank":null,"warnings":[]}"#,
    "\n",
    r#"{"type":"iteration","index":0,"host_start_ns":0,"host_wall_ns":10,"complete":true,"perturbed":false,"devices":[],"scopes":[{"path":"step","calls":1,"host_ns":9,"launches":0,"device_ns":0,"device_ns_inclusive":0}],"kernels":[],"memcpy":[],"memset":[],"synchronization":[],"dropped_records":0}"#,
    "\n",
    r#"{"type":"trailer","iterations":1,"kernel_records":0,"activity_records":0,"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}"#,
    "\n"
);

fn parse(text: &[u8]) -> Result<gpu_ledger::Ledger, gpu_ledger::Error> {
    parse_ledger(std::io::BufReader::new(text), Path::new("fuzz.jsonl"))
}

#[test]
fn the_seed_ledger_is_valid() {
    let l = parse(VALID.as_bytes()).unwrap();
    assert_eq!(l.iterations.len(), 1);
    assert!(l.trailer.is_some());
}

fn line_of(err: gpu_ledger::Error) -> usize {
    match err {
        gpu_ledger::Error::LedgerRead { line, .. } => line,
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
            // The whole iteration row, `more` times.
            let row = &VALID.as_bytes()[ends[0] + 1..=ends[1]];
            for _ in 0..more {
                text.extend_from_slice(row);
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
