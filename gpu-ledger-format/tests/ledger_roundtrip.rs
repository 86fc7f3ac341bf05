//! Every value the library writes reads back through its own reader: rows and trailers with any
//! strings, any floats (NaN and infinities, which JSON writes as `null`), NVML summaries and
//! counter values, serialized as the writer does and parsed as every command does. Reading and
//! writing again gives the same line. Times and counts stay within what a run can produce
//! (`MAX_PLAUSIBLE`), device windows hold their busy and idle time, and NVML's figures are
//! unknown or within what a device shows, which the reader enforces.

use std::collections::BTreeMap;
use std::path::Path;

use gpu_ledger_format::counters::{CounterRange, Derived, IterationCounters};
use gpu_ledger_format::reader::parse_ledger;
use gpu_ledger_format::schema::{
    CopyGroup, DeviceIteration, IterationRow, KernelGroup, LaunchShape, LedgerLine, ScopeRow,
    SyncGroup, Trailer,
};
use gpu_ledger_format::validate::MAX_PLAUSIBLE;
use gpu_ledger_format::{
    ClockStats, DeviceRunEnergy, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind,
    PowerStats, RunEnergy,
};
use proptest::prelude::*;

fn header() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/v1-missing-nvml.jsonl"),
    )
    .unwrap();
    text.lines().next().unwrap().to_string()
}

fn val() -> impl Strategy<Value = u64> {
    prop_oneof![0..1000u64, 0..=MAX_PLAUSIBLE, Just(MAX_PLAUSIBLE)]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MIN_POSITIVE),
        Just(f64::MAX),
    ]
}

/// An NVML figure the reader accepts: unknown (NaN and the infinities, written as `null`) or in
/// the range a device shows.
fn figure() -> impl Strategy<Value = f64> {
    prop_oneof![
        0.0..1e4f64,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MIN_POSITIVE),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z/_]{0,12}",
        Just("\u{feff}\"\\\n\t".to_string())
    ]
}

fn device() -> impl Strategy<Value = DeviceIteration> {
    (any::<u32>(), val(), val(), val(), val(), val(), val()).prop_map(
        |(device_id, a, b, busy, _, gap, kernel_count)| {
            // Busy time within the window, idle the rest of it, one gap at most all of it.
            let window = a.max(b) - a.min(b);
            let busy_ns = busy % (window + 1);
            let idle_ns = window - busy_ns;
            DeviceIteration {
                device_id,
                first_start_ns: a.min(b),
                last_end_ns: a.max(b),
                busy_ns,
                idle_ns,
                largest_gap_ns: gap % (idle_ns + 1),
                kernel_count,
                peak_memory_bytes: Some(a),
            }
        },
    )
}

fn scope() -> impl Strategy<Value = ScopeRow> {
    (
        text(),
        val(),
        val(),
        val(),
        val(),
        proptest::option::of(val()),
    )
        .prop_map(
            |(path, calls, host_ns, launches, device_ns, event_device_ns)| ScopeRow {
                path,
                calls,
                host_ns,
                launches,
                kernels: launches,
                device_ns,
                device_ns_inclusive: device_ns,
                event_device_ns,
            },
        )
}

fn kernel() -> impl Strategy<Value = KernelGroup> {
    (text(), any::<u32>(), any::<[u32; 3]>(), val(), val(), val()).prop_map(
        |(name, device_id, grid, count, total_ns, max_ns)| KernelGroup {
            name,
            device_id,
            shape: LaunchShape {
                grid,
                block: grid,
                ..LaunchShape::default()
            },
            local_bytes_total: count,
            count,
            total_ns,
            min_ns: 0,
            max_ns,
            graph_launches: 0,
        },
    )
}

fn nvml() -> impl Strategy<Value = NvmlIterationSummary> {
    (any::<u32>(), figure(), figure(), figure(), figure(), text()).prop_map(
        |(device_id, mhz, w, max_w, j, note)| NvmlIterationSummary {
            device_id,
            window_ns: 1,
            samples: 1,
            coarse: false,
            sm_clock: Some(ClockStats {
                min_mhz: 1,
                mean_mhz: mhz,
                max_mhz: 2,
                samples: 1,
            }),
            mem_clock: None,
            power: Some(PowerStats {
                mean_w: w,
                max_w,
                samples: 1,
                kind: PowerKind::Instant,
            }),
            energy: Some(EnergyEstimate {
                joules: j,
                method: EnergyMethod::IntegratedPower,
                counter_reads: 0,
                counter_span_ns: None,
                power_samples: 1,
                integrated_joules: Some(j),
            }),
            temperature_max_c: None,
            temperature_samples: 0,
            throttle_reasons: vec![note.clone()],
            throttle_samples: 0,
            memory_used_max_bytes: None,
            memory_used_samples: 0,
            pcie_tx_bytes_per_s: Some(mhz),
            pcie_rx_bytes_per_s: None,
            notes: vec![note],
        },
    )
}

fn counters() -> impl Strategy<Value = IterationCounters> {
    proptest::collection::btree_map(text(), float(), 0..4).prop_map(|values: BTreeMap<_, _>| {
        IterationCounters {
            collection: 0,
            first_iteration: 0,
            run: 1,
            runs: 1,
            complete: true,
            ranges: vec![CounterRange {
                name: "step".into(),
                depth: 1,
                kernel: None,
                launch_index: None,
                values,
                derived: Derived::default(),
            }],
            dropped_ranges: 0,
            error: None,
        }
    })
}

fn row() -> impl Strategy<Value = IterationRow> {
    let groups = (
        proptest::collection::vec(device(), 0..3),
        proptest::collection::vec(scope(), 0..3),
        proptest::collection::vec(kernel(), 0..3),
        proptest::collection::vec(nvml(), 0..2),
        proptest::option::of(counters()),
        proptest::collection::vec(text(), 0..2),
    );
    (val(), val(), val(), any::<bool>(), groups).prop_map(
        |(
            index,
            host_start_ns,
            host_wall_ns,
            flag,
            (devices, scopes, kernels, nvml, c, warnings),
        )| {
            IterationRow {
                index,
                host_start_ns,
                host_wall_ns,
                complete: flag,
                perturbed: c.is_some(),
                devices,
                scopes,
                kernels,
                memcpy: vec![CopyGroup {
                    device_id: 0,
                    kind: "HtoD".into(),
                    count: 1,
                    bytes: host_wall_ns,
                    total_ns: 1,
                }],
                synchronization: vec![SyncGroup {
                    kind: "stream".into(),
                    count: 1,
                    total_ns: host_start_ns,
                }],
                nvml,
                warnings: warnings.clone(),
                counters: c,
                // Written whenever kernels are traced; values from the generated ones.
                attribution: Some(gpu_ledger_format::AttributionCounts {
                    own_thread: index,
                    handoff: host_start_ns,
                    followed: host_wall_ns,
                    profiler: 0,
                    unscoped: 1,
                }),
                launch_threads: vec![gpu_ledger_format::LaunchThread {
                    name: warnings.first().cloned(),
                    tid: 7,
                    kernels: index,
                    kernel_ns: host_wall_ns,
                    copies: 1,
                    attribution: gpu_ledger_format::AttributionCounts::default(),
                }],
                untraced: index % 3 == 0,
                tracing_added_ns: (index % 2 == 0).then_some(host_wall_ns / 7),
                stalls: (index % 4 == 1).then(|| gpu_ledger_format::stalls::IterationStalls {
                    total_samples: host_wall_ns,
                    dropped_samples: index,
                    kernels: vec![gpu_ledger_format::stalls::KernelStalls {
                        name: warnings.first().cloned().unwrap_or_default(),
                        samples: 3,
                        by_reason: [("long_scoreboard".to_string(), 3)].into(),
                        lines: vec![gpu_ledger_format::stalls::LineStalls {
                            file: "k.cu".into(),
                            line: 16,
                            samples: 3,
                            by_reason: [("long_scoreboard".to_string(), 3)].into(),
                            text: warnings.get(1).cloned(),
                        }],
                        cubin: true,
                    }],
                    ..Default::default()
                }),
                ..IterationRow::default()
            }
        },
    )
}

fn trailer() -> impl Strategy<Value = Trailer> {
    (float(), float(), proptest::collection::vec(text(), 0..3)).prop_map(|(j, m, warnings)| {
        Trailer {
            energy: Some(RunEnergy {
                total_j: j,
                mean_j_per_iteration: Some(m),
                per_device: vec![DeviceRunEnergy {
                    device_id: 0,
                    iterations: 1,
                    total_j: m,
                }],
                ..RunEnergy::default()
            }),
            warnings,
            ..Trailer::default()
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_line_the_library_writes_reads_back(row in row(), trailer in trailer()) {
        let row_line = serde_json::to_string(&LedgerLine::Iteration(row)).unwrap();
        let trailer_line = serde_json::to_string(&LedgerLine::Trailer(trailer)).unwrap();
        let text = format!("{}\n{row_line}\n{trailer_line}\n", header());
        let ledger = match parse_ledger(text.as_bytes(), Path::new("roundtrip.jsonl")) {
            Ok(l) => l,
            Err(e) => return Err(TestCaseError::fail(format!("{e}\n{row_line}"))),
        };
        // Written again, each line is the one first written (NaN and infinities both as null).
        let again = serde_json::to_string(&LedgerLine::Iteration(ledger.iterations[0].clone())).unwrap();
        prop_assert_eq!(again, row_line);
        let again = serde_json::to_string(&LedgerLine::Trailer(ledger.trailer.unwrap())).unwrap();
        prop_assert_eq!(again, trailer_line);
    }
}

#[test]
fn a_nan_counter_value_reads_back_as_nan() {
    let mut values = BTreeMap::new();
    values.insert("sm__throughput".to_string(), f64::NAN);
    let mut row: IterationRow = serde_json::from_str(
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/v1-missing-nvml.jsonl"),
        )
        .unwrap()
        .lines()
        .nth(1)
        .unwrap(),
    )
    .unwrap();
    row.perturbed = true;
    row.counters = Some(IterationCounters {
        collection: 0,
        first_iteration: 0,
        run: 1,
        runs: 1,
        complete: true,
        ranges: vec![CounterRange {
            name: "step".into(),
            depth: 1,
            kernel: None,
            launch_index: None,
            values,
            derived: Derived::default(),
        }],
        dropped_ranges: 0,
        error: None,
    });
    let line = serde_json::to_string(&LedgerLine::Iteration(row)).unwrap();
    assert!(line.contains("\"sm__throughput\":null"), "{line}");
    let ledger = parse_ledger(
        format!("{}\n{line}\n", header()).as_bytes(),
        Path::new("nan.jsonl"),
    )
    .unwrap();
    let c = ledger.iterations[0].counters.as_ref().unwrap();
    assert!(c.ranges[0].values["sm__throughput"].is_nan());
}
