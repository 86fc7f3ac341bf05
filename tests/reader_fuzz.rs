//! Property tests over the ledger reader (issue 8's fuzzing, in proptest form so it runs in
//! CI): any input gives a ledger or an error with a line number, never a panic.

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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Err(e) = parse(&bytes) {
            prop_assert!(line_of(e) >= 1);
        }
    }

    #[test]
    fn a_truncated_ledger_is_valid_up_to_its_cut_or_names_the_cut_line(cut in 0usize..VALID.len()) {
        let text = &VALID.as_bytes()[..cut];
        match parse(text) {
            Ok(l) => prop_assert!(l.iterations.len() <= 1),
            Err(e) => {
                let line = line_of(e);
                let cut_line = text.iter().filter(|&&b| b == b'\n').count() + 1;
                prop_assert!(line == cut_line || line == 1, "error at line {} for a cut in line {}", line, cut_line);
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
