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
use gpu_ledger_format::{DispatchFloor, IdleBreakdown, IdleCause, IdleGap, InventoryEntry};
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
                idle: None,
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
            let devices = with_idle(devices, index, warnings.first());
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
                    graph_capture: index % 2,
                    graph_launch: index % 3,
                }),
                launch_threads: vec![gpu_ledger_format::LaunchThread {
                    name: warnings.first().cloned(),
                    tid: 7,
                    kernels: index,
                    kernel_ns: host_wall_ns,
                    copies: 1,
                    attribution: gpu_ledger_format::AttributionCounts::default(),
                    run_queue_ns: (index % 2 == 0).then_some(host_start_ns),
                    on_cpu_ns: (index % 2 == 0).then_some(host_wall_ns),
                    timeslices: (index % 2 == 0).then_some(3),
                }],
                host_inventory: (index % 2 == 1)
                    .then(|| InventoryEntry {
                        kind: "small_dtoh".into(),
                        scope: warnings.first().cloned().unwrap_or_default(),
                        function: Some("cuMemcpyDtoH_v2".into()),
                        device_id: Some(0),
                        count: 2,
                        host_ns: host_wall_ns,
                        bytes: Some(8),
                        synchronous: Some(2),
                    })
                    .into_iter()
                    .collect(),
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
    (
        float(),
        float(),
        proptest::collection::vec(text(), 0..3),
        0..3u64,
    )
        .prop_map(|(j, m, warnings, g)| Trailer {
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
            dispatch_floors: (warnings.len() == 1)
                .then(|| DispatchFloor {
                    device_id: 0,
                    floor_ns: 1_200,
                    median_ns: Some(1_000),
                    p90_ns: Some(1_200),
                    samples: 315,
                    source: "calibration".into(),
                })
                .into_iter()
                .collect(),
            warnings,
            graphs: (g > 0).then(|| gpu_ledger_format::GraphCounts {
                nodes_captured: g,
                nodes_live_peak: 2 * g,
                nodes_live_at_end: g - 1,
                records_by_capture: 7,
                records_unseen: g % 2,
                ..Default::default()
            }),
            ..Trailer::default()
        })
}

/// `devices`, every other row with idle causes that add up (the reader refuses others): the
/// idle time split in two pieces, a lead-in and one largest gap.
fn with_idle(
    mut devices: Vec<DeviceIteration>,
    index: u64,
    text: Option<&String>,
) -> Vec<DeviceIteration> {
    if index % 2 == 1 {
        return devices;
    }
    let part = |cause: &str, detail: Option<String>, ns: u64| IdleCause {
        cause: cause.into(),
        detail,
        rule: "scope_open".into(),
        ns,
        gaps: 1,
    };
    for d in &mut devices {
        // compute_idle_ns below is idle_ns + 5, which must stay plausible too; what idle gives
        // up goes to busy, so that idle stays the rest of the window.
        let excess = d.idle_ns.saturating_sub(MAX_PLAUSIBLE - 5);
        d.idle_ns -= excess;
        d.busy_ns += excess;
        d.largest_gap_ns = d.largest_gap_ns.min(d.idle_ns);
        let half = d.idle_ns / 2;
        let gap = IdleGap {
            start_ns: d.first_start_ns,
            ns: half,
            cause: "host_launch".into(),
            detail: text.cloned(),
            rule: "scope_open".into(),
            parts: vec![part("host_launch", text.cloned(), half)],
            function: text.cloned(),
            bytes: Some(index),
            scope: text.cloned(),
            tid: Some(7),
            thread: text.cloned(),
            before: Some("k".into()),
            before_stream: Some(7),
            after: text.cloned(),
            after_stream: None,
        };
        d.idle = Some(IdleBreakdown {
            floor_ns: 1_000,
            floor_source: "calibration".into(),
            host_offset_ns: -(index as i64),
            causes: vec![
                part("host_launch", text.cloned(), half),
                part("launch_latency", None, d.idle_ns - half),
            ],
            compute_idle_ns: d.idle_ns + 5,
            copy_only_ns: 5,
            copy_overlapped_ns: index,
            lead_in: (index % 4 == 0).then(|| gap.clone()),
            largest_gaps: vec![gap],
            causality_violations: index % 3,
        });
    }
    devices
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

#[test]
fn graph_counts_are_left_out_when_zero_and_read_as_zero_when_absent() {
    use gpu_ledger_format::{AttributionCounts, GraphCounts};
    let none = AttributionCounts {
        own_thread: 3,
        ..AttributionCounts::default()
    };
    let text = serde_json::to_string(&none).unwrap();
    assert!(!text.contains("graph"), "{text}");
    let old: AttributionCounts = serde_json::from_str(
        r#"{"own_thread":3,"handoff":0,"followed":0,"profiler":0,"unscoped":0}"#,
    )
    .unwrap();
    assert_eq!(old, none);
    let graphs = AttributionCounts {
        graph_capture: 4,
        graph_launch: 2,
        ..none
    };
    let text = serde_json::to_string(&graphs).unwrap();
    assert!(text.contains(r#""graph_capture":4"#) && text.contains(r#""graph_launch":2"#));
    assert_eq!(
        serde_json::from_str::<AttributionCounts>(&text).unwrap(),
        graphs
    );
    assert_eq!(graphs.total(), 9, "the graph counts add up with the others");
    let trailer = serde_json::to_string(&Trailer::default()).unwrap();
    assert!(!trailer.contains("graphs"), "{trailer}");
    let with = Trailer {
        graphs: Some(GraphCounts {
            records_unseen: 1,
            ..GraphCounts::default()
        }),
        ..Trailer::default()
    };
    let text = serde_json::to_string(&with).unwrap();
    assert_eq!(serde_json::from_str::<Trailer>(&text).unwrap(), with);
}

/// The golden ledgers' rows and trailers, read and written again, gain none of the graph
/// counts: written only when a run saw graph nodes, they leave every older ledger's lines as they
/// were.
#[test]
fn golden_rows_and_trailers_written_again_gain_no_graph_count() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let mut lines = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Ok(parsed) = serde_json::from_str::<LedgerLine>(line) else {
                continue;
            };
            let again = serde_json::to_string(&parsed).unwrap();
            for key in ["\"graph_capture\"", "\"graph_launch\"", "\"graphs\""] {
                assert!(!again.contains(key), "{}: {key}", path.display());
            }
            lines += 1;
        }
    }
    assert!(lines > 0, "no golden line was checked");
}

/// The golden ledgers written before idle causes (their header has no `idle_causes`) carry
/// none: written again, their lines carry none of the new fields, so an old ledger round-trips
/// as it did before they existed. The one written with them (`v1-idle-causes.jsonl`) keeps them.
#[test]
fn golden_ledgers_read_and_write_again_without_idle_fields() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let mut lines = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("v1-") || !name.ends_with(".jsonl") || name.contains("corrupt") {
            continue;
        }
        let Ok(ledger) = gpu_ledger_format::read_ledger(&path) else {
            panic!("{name} reads");
        };
        if ledger.header.config.idle_causes.is_some() {
            let row = serde_json::to_string(&ledger.iterations[1]).unwrap();
            assert!(
                row.contains("\"idle\"") && row.contains("host_inventory"),
                "{name}"
            );
            continue;
        }
        for row in &ledger.iterations {
            let text = serde_json::to_string(&LedgerLine::Iteration(row.clone())).unwrap();
            for key in [
                "\"idle\"",
                "host_inventory",
                "run_queue_ns",
                "on_cpu_ns",
                "timeslices",
            ] {
                assert!(!text.contains(key), "{name}: {key} in {text}");
            }
            lines += 1;
        }
        if let Some(t) = &ledger.trailer {
            let text = serde_json::to_string(&LedgerLine::Trailer(t.clone())).unwrap();
            assert!(!text.contains("dispatch_floors"), "{name}");
        }
        let header = serde_json::to_string(&LedgerLine::Header(ledger.header.clone())).unwrap();
        assert!(!header.contains("idle_causes"), "{name}");
    }
    assert!(lines > 50, "the golden rows were read ({lines})");
}

/// A compressed ledger is refused on its first line, naming the command that decompresses it,
/// by the whole-file reader and by the stream alike.
#[test]
fn compressed_ledgers_are_refused_naming_the_decompressor() {
    use gpu_ledger_format::stream::LedgerStream;
    let gz = [0x1f, 0x8b, 0x08, 0x00, 0x00];
    let e = parse_ledger(&gz[..], Path::new("runs/a.jsonl.gz"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("gzip-compressed"), "{e}");
    assert!(e.contains("`zcat runs/a.jsonl.gz > runs/a.jsonl`"), "{e}");
    let zst = [0x28, 0xb5, 0x2f, 0xfd, 0x00];
    let e = LedgerStream::new(&zst[..], Path::new("b.zst"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`zstdcat b.zst > b`"), "{e}");
    // Text that merely starts oddly is not taken for a compressed file.
    let e = parse_ledger(&b"\x1fnot json"[..], Path::new("c.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(!e.contains("compressed"), "{e}");
}
