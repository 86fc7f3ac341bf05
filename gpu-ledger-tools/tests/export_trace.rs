//! The Chrome / Perfetto trace export: valid JSON in the Trace Event Format, the expected tracks
//! and events, slices that nest on every track (Perfetto drops slices that overlap partially),
//! iteration ranges, and the summary form when activities were not recorded.

use std::collections::{BTreeMap, BTreeSet};

use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::ActivityEntry;
use gpu_ledger_tools::export::trace::{
    device_pid, write_trace, IterationRange, TraceOptions, TraceWriter, DEVICE_SUMMARY_TID,
    HOST_PID, ITERATION_TID, LANE_STRIDE,
};
use serde_json::Value;

mod export_common;
use export_common::read;

fn trace(l: &Ledger, opts: &TraceOptions) -> Value {
    let mut out = Vec::new();
    let stats = write_trace(l, &mut out, opts).unwrap();
    let v: Value = serde_json::from_slice(&out).expect("the trace is valid JSON");
    assert_eq!(
        v["traceEvents"].as_array().unwrap().len() as u64,
        stats.events
    );
    v
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().unwrap()
}

fn named(v: &Value, what: &str) -> BTreeMap<(u64, u64), String> {
    events(v)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == what)
        .map(|e| {
            (
                (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap_or(0)),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every complete event has a non-negative duration, and on each track the slices nest.
fn assert_well_formed(v: &Value) {
    let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for e in events(v) {
        for k in ["ph", "pid", "name"] {
            assert!(e.get(k).is_some(), "event without {k}: {e}");
        }
        assert_ne!(e["pid"], 0, "pid 0 is the kernel's idle task in Perfetto");
        match e["ph"].as_str().unwrap() {
            "X" => {
                let ts = e["ts"].as_f64().unwrap();
                let dur = e["dur"].as_f64().unwrap();
                assert!(dur >= 0.0, "negative duration: {e}");
                assert_ne!(e["tid"], 0);
                tracks
                    .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                    .or_default()
                    .push((ts, ts + dur));
            }
            "C" => assert!(e["args"]
                .as_object()
                .unwrap()
                .values()
                .all(|x| x.is_number())),
            "M" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64)> = Vec::new();
        for s in slices {
            while open.last().is_some_and(|p| p.1 <= s.0 + 1e-6) {
                open.pop();
            }
            if let Some(p) = open.last() {
                assert!(
                    s.1 <= p.1 + 1e-6,
                    "slices overlap partially on track {track:?}: {p:?} and {s:?}"
                );
            }
            open.push(s);
        }
    }
}

#[test]
fn activities_become_tracks_per_device_and_stream() {
    let l = read("v1-overlapping-streams.jsonl");
    let v = trace(&l, &TraceOptions::default());
    assert_well_formed(&v);
    let procs = named(&v, "process_name");
    assert_eq!(procs[&(u64::from(HOST_PID), 0)], "host");
    assert_eq!(procs[&(u64::from(device_pid(0)), 0)], "GPU 0");
    let threads = named(&v, "thread_name");
    let gpu = u64::from(device_pid(0));
    assert_eq!(threads[&(gpu, 8)], "stream 7");
    assert_eq!(threads[&(gpu, 14)], "stream 13");
    assert_eq!(
        threads[&(u64::from(HOST_PID), u64::from(ITERATION_TID))],
        "iterations"
    );
    assert_eq!(threads[&(u64::from(HOST_PID), 2)], "thread 0");
    assert_eq!(threads[&(u64::from(HOST_PID), 3)], "thread 1");

    let by_cat = |c: &str| -> Vec<&Value> { events(&v).iter().filter(|e| e["cat"] == c).collect() };
    assert_eq!(by_cat("kernel").len(), 18);
    assert_eq!(by_cat("memcpy").len(), 12);
    assert_eq!(by_cat("memset").len(), 6);
    assert_eq!(by_cat("iteration").len(), 6);
    assert_eq!(by_cat("scope").len(), 30);
    // Times: µs since start; the first copy starts 100 µs into iteration 0.
    let first = by_cat("memcpy")[0];
    assert_eq!(first["name"], "memcpy HtoD");
    assert_eq!(first["ts"].as_f64().unwrap(), 100.0);
    assert_eq!(first["dur"].as_f64().unwrap(), 500.0);
    assert_eq!(first["args"]["bytes"], 8 << 20);
    // Demangled names, mangled kept in args; the two streams overlap in time.
    let softmax = by_cat("kernel")
        .into_iter()
        .find(|e| e["name"] == "softmax_kernel<256>")
        .unwrap();
    assert_eq!(
        softmax["args"]["kernel"],
        "_Z14softmax_kernelILi256EEvPKfPfi"
    );
    assert_eq!(softmax["tid"], 14);
    assert_eq!(softmax["args"]["scope"], "step/forward");
    // Scope spans on host threads, named by their leaf, full path in args.
    let step = by_cat("scope")
        .into_iter()
        .find(|e| e["args"]["path"] == "step/forward")
        .unwrap();
    assert_eq!(step["name"], "forward");
    assert_eq!(step["ts"].as_f64().unwrap(), 660.0);
    // NVML counters, one per iteration.
    let counters: Vec<&Value> = events(&v).iter().filter(|e| e["ph"] == "C").collect();
    let sm: Vec<f64> = counters
        .iter()
        .filter(|e| e["name"] == "SM clock")
        .map(|e| e["args"]["MHz"].as_f64().unwrap())
        .collect();
    assert_eq!(sm, [1755.0, 1980.0, 1980.0, 1980.0, 1980.0, 1980.0]);
    assert_eq!(counters.iter().filter(|e| e["name"] == "power").count(), 6);
    assert!(counters.iter().all(|e| e["pid"] == gpu));
    let meta = &v["otherData"];
    assert_eq!(meta["activities_recorded"], true);
    assert_eq!(meta["iterations_exported"], 6);
    assert!(meta["trace_content"]
        .as_str()
        .unwrap()
        .starts_with("activities"));
    assert_eq!(v["displayTimeUnit"], "ns");
}

#[test]
fn without_activities_the_trace_summarises_and_says_so() {
    let l = read("v1-nested-scopes.jsonl");
    let v = trace(&l, &TraceOptions::default());
    assert_well_formed(&v);
    let meta = &v["otherData"];
    assert_eq!(meta["activities_recorded"], false);
    assert!(meta["trace_content"]
        .as_str()
        .unwrap()
        .starts_with("summary"));
    assert!(events(&v).iter().any(|e| e["name"] == "process_labels"
        && e["args"]["labels"]
            .as_str()
            .unwrap()
            .contains("not recorded")));
    let summary: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["cat"] == "scope summary")
        .collect();
    // 12 iterations; every scope with host time (all but (unscoped)) gets a slice.
    assert_eq!(summary.len(), 12 * 6);
    let attention = summary
        .iter()
        .find(|e| e["args"]["path"] == "step/forward/attention" && e["args"]["iteration"] == 1)
        .unwrap();
    assert_eq!(attention["dur"].as_f64().unwrap(), 3010.0);
    let device: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["cat"] == "device summary")
        .collect();
    assert_eq!(device.len(), 12);
    assert!(device[0]["name"].as_str().unwrap().contains("busy"));
    let iters: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["cat"] == "iteration")
        .collect();
    assert_eq!(iters[6]["name"], "iteration 6 (perturbed)");
    assert_eq!(iters[11]["name"], "iteration 11 (incomplete)");
}

#[test]
fn iteration_range_limits_the_trace() {
    let l = read("v1-overlapping-streams.jsonl");
    let opts = TraceOptions {
        iterations: "2..4".parse::<IterationRange>().unwrap(),
        ..TraceOptions::default()
    };
    let mut out = Vec::new();
    let stats = write_trace(&l, &mut out, &opts).unwrap();
    assert_eq!((stats.iterations, stats.skipped), (2, 4));
    assert_eq!(stats.activities, 12);
    let v: Value = serde_json::from_slice(&out).unwrap();
    let idx: BTreeSet<u64> = events(&v)
        .iter()
        .filter_map(|e| e["args"]["iteration"].as_u64())
        .collect();
    assert_eq!(idx, BTreeSet::from([2, 3]));
    assert_eq!(v["otherData"]["iteration_range"], "2..4");

    let empty = TraceOptions {
        iterations: "100..".parse().unwrap(),
        ..TraceOptions::default()
    };
    let v = trace(&l, &empty);
    assert!(v["otherData"]["trace_content"]
        .as_str()
        .unwrap()
        .starts_with("empty"));
}

#[test]
fn overlapping_activities_on_one_stream_get_their_own_lane() {
    let mut l = read("v1-overlapping-streams.jsonl");
    l.iterations.truncate(1);
    let row = &mut l.iterations[0];
    let acts = row.activities.as_mut().unwrap();
    let base = acts[1].clone(); // the GEMM on stream 7
    acts.push(ActivityEntry {
        start_ns: base.start_ns + 1_000,
        end_ns: base.end_ns + 1_000, // starts inside, ends after: programmatic dependent launch
        correlation_id: 999,
        ..base
    });
    let mut out = Vec::new();
    let stats = write_trace(&l, &mut out, &TraceOptions::default()).unwrap();
    assert_eq!(stats.overlapping_activities, 1);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_well_formed(&v);
    let lane = 8 + LANE_STRIDE;
    assert_eq!(
        named(&v, "thread_name")[&(u64::from(device_pid(0)), lane)],
        "stream 7 (overlap 1)"
    );
}

#[test]
fn a_header_without_cupti_start_shifts_device_times_and_says_so() {
    let mut l = read("v1-overlapping-streams.jsonl");
    l.header.start_cupti_ns = None;
    let v = trace(&l, &TraceOptions::default());
    assert_well_formed(&v);
    assert!(v["otherData"]["time_origin"]
        .as_str()
        .unwrap()
        .contains("not aligned"));
    let first = events(&v).iter().find(|e| e["cat"] == "memcpy").unwrap();
    assert_eq!(first["ts"].as_f64().unwrap(), 0.0);
}

#[test]
fn the_writer_streams_row_by_row_and_escapes_names() {
    let mut l = read("v1-graph-kernels.jsonl");
    l.iterations[0].scopes[0].path = "we\"ird\n<scope>\\".into();
    // The GPU runs 3 ms behind the host: device windows of consecutive iterations overlap.
    for r in &mut l.iterations {
        for d in &mut r.devices {
            d.last_end_ns += 3_000_000;
        }
    }
    let mut out = Vec::new();
    let mut w = TraceWriter::new(&mut out, &l.header, TraceOptions::default()).unwrap();
    for r in &l.iterations {
        assert!(w.write_row(r).unwrap());
    }
    let stats = w.finish(None).unwrap();
    assert_eq!(stats.summary_iterations, 8);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_well_formed(&v);
    assert_eq!(v["otherData"]["run_complete"], false);
    assert!(events(&v)
        .iter()
        .any(|e| e["args"]["path"] == "we\"ird\n<scope>\\"));
    // Two GPUs, two processes.
    let procs = named(&v, "process_name");
    assert_eq!(procs[&(u64::from(device_pid(1)), 0)], "GPU 1");
    let threads = named(&v, "thread_name");
    assert_eq!(
        threads[&(u64::from(device_pid(0)), u64::from(DEVICE_SUMMARY_TID) + 1)],
        "device busy (summary, overlap 1)"
    );
}
