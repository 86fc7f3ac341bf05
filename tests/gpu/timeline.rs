//! Timeline level on the GPU: record counts, durations against CUDA events, attribution,
//! copies, and the ledger's rows.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::ledger::LedgerLine;
use gpu_ledger::{read_ledger, Profiler};

use crate::{finish_without_event_warnings, gpu, kernel_launches, timeline, vectors, SERIAL};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn n_launches_give_exactly_n_kernel_records_and_none_dropped() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 16;
    let (a, b, mut c) = vectors(&g.stream, n);
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.jsonl");
    let profiler = timeline(&path);
    const LAUNCHES: u64 = 5000;
    for _ in 0..LAUNCHES {
        g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
    }
    g.stream.synchronize().unwrap();
    profiler.step();
    let summary = profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 1);
    let row = &ledger.iterations[0];
    assert_eq!(kernel_launches(row), LAUNCHES, "kernel records in the row");
    assert_eq!(
        summary.trailer.kernel_records, LAUNCHES,
        "kernel records decoded"
    );
    assert_eq!(row.dropped_records, 0);
    assert_eq!(summary.trailer.dropped_records, 0);
    assert_eq!(row.missing_records, 0);
    // One captured call per launch plus the synchronize: the functions attribution does not
    // need (cudarc's context binding, event records) are not traced.
    let api = summary.trailer.api_records;
    println!("API calls captured for {LAUNCHES} launches: {api}");
    assert!(
        (LAUNCHES..=LAUNCHES + 10).contains(&api),
        "API calls captured: {api}"
    );
    assert!(row.complete, "{:?}", row.warnings);
    let k = &row.kernels[0];
    assert_eq!(k.name, "vector_add");
    assert_eq!(k.shape.grid, [g.vadd.grid(n as u64), 1, 1]);
    assert_eq!(k.shape.block, [g.vadd.block, 1, 1]);
    assert!(k.shape.registers_per_thread > 0);
    assert_eq!(
        row.scopes
            .iter()
            .find(|s| s.path == "(unscoped)")
            .map(|s| s.launches),
        Some(LAUNCHES)
    );
    println!(
        "kernel records {LAUNCHES}: min {} ns max {} ns busy {} ns",
        k.min_ns, k.max_ns, row.devices[0].busy_ns
    );
}

/// One launch shape of vector add for the events comparison.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// One thread per element: 2^29 elements make 2 097 152 blocks.
    PerElement,
    /// Grid-stride loop over a fixed grid of 8 blocks per SM (1 056 on an H200).
    GridStride,
}

/// Events − CUPTI per launch for a sweep of sizes, without and with the profiler.
struct Sweep {
    sizes: Vec<u64>,
    cupti: Vec<i64>,
    events: Vec<i64>,
    plain: Vec<i64>,
}

const REPS: usize = 11;

fn sweep(g: &crate::Gpu, shape: Shape) -> Sweep {
    use gpu_ledger::kernels::suite::vadd::{VaddKernels, VaddVariant, VectorAddSpec};
    let max_n: usize = 1 << 29; // 2 GiB per array: the largest launch runs well over 1 ms
    let a = g.stream.alloc_zeros::<f32>(max_n).unwrap();
    let b = g.stream.alloc_zeros::<f32>(max_n).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(max_n).unwrap();
    let kernels = VaddKernels::load(&g.ctx).unwrap();
    let sms = g
        .ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .unwrap() as u32;
    let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = g.ctx.new_event(flags).unwrap();
    let end = g.ctx.new_event(flags).unwrap();
    let sizes: Vec<u64> = (10..=29).map(|p| 1u64 << p).collect();
    let mut timed = |n: u64| -> i64 {
        start.record(&g.stream).unwrap();
        match shape {
            Shape::PerElement => g.vadd.launch(&g.stream, &a, &b, &mut c, n).unwrap(),
            Shape::GridStride => {
                let spec = VectorAddSpec::new(n, VaddVariant::Scalar).grid_stride(8 * sms);
                kernels.launch(&g.stream, &spec, &a, &b, &mut c).unwrap()
            }
        }
        end.record(&g.stream).unwrap();
        g.stream.synchronize().unwrap();
        (f64::from(start.elapsed_ms(&end).unwrap()) * 1e6) as i64
    };
    // Warm up (module load, first touch, clocks), then the same spans without the profiler, to
    // tell what the events themselves add from what profiling adds.
    for _ in 0..50 {
        timed(max_n as u64);
    }
    let runs: Vec<u64> = sizes
        .iter()
        .flat_map(|&n| std::iter::repeat_n(n, REPS))
        .collect();
    let plain: Vec<i64> = runs.iter().map(|&n| timed(n)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let profiler = timeline(&path);
    // The first launches under CUPTI pay its one-time instrumentation: warm up under the profiler
    // and leave that iteration out.
    for _ in 0..50 {
        timed(1 << 10);
    }
    profiler.step();
    let mut events = Vec::new();
    for &n in &runs {
        events.push(timed(n));
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), sizes.len() * REPS + 1);
    let cupti = ledger.iterations[1..]
        .iter()
        .map(|row| {
            assert_eq!(kernel_launches(row), 1, "iteration {}", row.index);
            row.kernels[0].total_ns as i64
        })
        .collect();
    Sweep {
        sizes,
        cupti,
        events,
        plain,
    }
}

/// Checks one sweep: never shorter than CUPTI by more than 1 µs; within 2 % from 1 ms; and, for
/// kernels under 300 µs, a least excess under 10 µs: the launch latency. The least of a size's
/// launches, not their median: host delays between the two event records add to the events'
/// time, only ever positively (one 0.86 µs kernel's excess ran from 8.9 to 25.9 µs over 11
/// launches, and the median broke the 10 µs rule at one size or another: docs/measurements.md).
/// From a few hundred µs the excess also grows with the kernel's length, with and without the
/// profiler alike (docs/measurements.md): it is printed, not bounded by the latency rule.
fn check_sweep(name: &str, s: &Sweep) -> Vec<String> {
    println!(
        "{name}: {:>10} {:>10} {:>10} {:>8} {:>10} {:>9}",
        "n", "cupti ns", "events ns", "diff", "no-prof", "nop-cupti"
    );
    let mut failures = Vec::new();
    for (k, &n) in s.sizes.iter().enumerate() {
        let mut diffs = Vec::new();
        for r in 0..REPS {
            let i = k * REPS + r;
            let (cupti, events, plain) = (s.cupti[i], s.events[i], s.plain[i]);
            let diff = events - cupti;
            println!(
                "{name}: {n:>10} {cupti:>10} {events:>10} {diff:>8} {plain:>10} {:>9}",
                plain - cupti
            );
            // Every launch: the events enclose the kernel, so they are never shorter than it.
            if diff < -1_000 {
                failures.push(format!("{name} n={n}: events {events} ns shorter than CUPTI {cupti} ns by more than 1 µs"));
            }
            if cupti >= 1_000_000 && (diff.abs() as f64) > 0.02 * cupti as f64 {
                failures.push(format!(
                    "{name} n={n}: {cupti} vs {events} ns differ by more than 2%"
                ));
            }
            diffs.push(diff);
        }
        diffs.sort();
        let (least, median) = (diffs[0], diffs[REPS / 2]);
        let cupti_median = {
            let mut c: Vec<i64> = s.cupti[k * REPS..(k + 1) * REPS].to_vec();
            c.sort();
            c[REPS / 2]
        };
        println!(
            "{name}: n={n}: events - CUPTI least {least} ns, median {median} ns (kernel {cupti_median} ns)"
        );
        if cupti_median < 300_000 && least > 10_000 {
            failures.push(format!(
                "{name} n={n}: events exceed CUPTI by at least {least} ns, more than 10 µs"
            ));
        }
    }
    failures
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cupti_kernel_durations_agree_with_cuda_events() {
    let _g = SERIAL.lock();
    let g = gpu();
    // Two launch shapes: one thread per element (2 097 152 blocks at the largest size, where
    // CUPTI's kernel instrumentation lengthens the kernel itself) and a grid-stride loop over
    // 8 blocks per SM (which CUPTI does not lengthen); both under the same rules.
    let grid_stride = sweep(&g, Shape::GridStride);
    let per_element = sweep(&g, Shape::PerElement);
    let mut failures = check_sweep("grid-stride", &grid_stride);
    failures.extend(check_sweep("per-element", &per_element));
    // CUPTI's instrumentation cost, as the events see it: the largest per-element launch without
    // and with the profiler (printed; docs/measurements.md).
    let last = per_element.sizes.len() * REPS - 1;
    println!(
        "per-element 2^29 under the profiler: events {} ns vs {} ns without ({:+.1} %)",
        per_element.events[last],
        per_element.plain[last],
        100.0 * (per_element.events[last] as f64 / per_element.plain[last] as f64 - 1.0)
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let longest = *per_element.cupti.last().unwrap();
    assert!(
        longest >= 1_000_000,
        "the largest launch should run over 1 ms, ran {longest} ns"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn scopes_from_two_threads_attribute_kernels_exactly() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 12;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attr.jsonl");
    let profiler = timeline(&path);
    let work = |stream: Arc<CudaStream>,
                plan: &'static [(&'static str, Option<&'static str>, usize)]| {
        let vadd = VectorAdd::new(stream.context()).unwrap();
        let (a, b, mut c) = vectors(&stream, n);
        for &(outer, inner, count) in plan {
            let _o = Profiler::scope(outer);
            let _i = inner.map(Profiler::scope);
            for _ in 0..count {
                vadd.launch(&stream, &a, &b, &mut c, n as u64).unwrap();
            }
        }
        stream.synchronize().unwrap();
    };
    for _ in 0..3 {
        std::thread::scope(|s| {
            let s1 = g.ctx.new_stream().unwrap();
            let s2 = g.ctx.new_stream().unwrap();
            s.spawn(move || work(s1, &[("a", None, 3), ("a", Some("c"), 2)]));
            s.spawn(move || work(s2, &[("b", None, 4)]));
        });
        // Unscoped launches from the stepping thread.
        let (a, b, mut c) = vectors(&g.stream, n);
        for _ in 0..5 {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        g.stream.synchronize().unwrap();
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    for row in &ledger.iterations {
        println!(
            "iteration {}: {} launches, scopes {:?} warnings {:?}",
            row.index,
            kernel_launches(row),
            row.scopes,
            row.warnings
        );
    }
    assert_eq!(ledger.iterations.len(), 3);
    for row in &ledger.iterations {
        println!(
            "iteration {}: scopes {:?} warnings {:?}",
            row.index, row.scopes, row.warnings
        );
    }
    for row in &ledger.iterations {
        let kernels = |p: &str| row.scopes.iter().find(|s| s.path == p).map(|s| s.kernels);
        assert_eq!(kernels("a"), Some(3), "{:?}", row.scopes);
        assert_eq!(kernels("a/c"), Some(2), "{:?}", row.scopes);
        assert_eq!(kernels("b"), Some(4), "{:?}", row.scopes);
        assert_eq!(kernels("(unscoped)"), Some(5), "{:?}", row.scopes);
        // The nine allocations (cudarc zero-fills each with a memset) were made outside scopes.
        let unscoped = row.scopes.iter().find(|s| s.path == "(unscoped)").unwrap();
        assert_eq!(unscoped.launches - unscoped.kernels, 9, "{:?}", row.memset);
        assert_eq!(kernel_launches(row), 14);
        let a = row.scopes.iter().find(|s| s.path == "a").unwrap();
        assert!(
            a.device_ns_inclusive >= a.device_ns,
            "inclusive time covers a/c too"
        );
        assert!(row.complete, "{:?}", row.warnings);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn memcpy_bytes_by_direction_are_exact() {
    let _g = SERIAL.lock();
    let g = gpu();
    let up: Vec<f32> = vec![1.5; 3_000_001];
    let mut down = vec![0f32; 1_234_567];
    let mut dev = g.stream.alloc_zeros::<f32>(up.len()).unwrap();
    let dev_small = g.stream.alloc_zeros::<f32>(down.len()).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.jsonl");
    let profiler = timeline(&path);
    {
        let _s = Profiler::scope("copies");
        g.stream.memcpy_htod(&up, &mut dev).unwrap();
        g.stream.memcpy_dtoh(&dev_small, &mut down).unwrap();
        g.stream.memcpy_htod(&up[..1000], &mut dev).unwrap();
        g.stream.synchronize().unwrap();
    }
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    let group = |k: &str| row.memcpy.iter().find(|m| m.kind == k).cloned();
    let htod = group("HtoD").expect("an HtoD group");
    let dtoh = group("DtoH").expect("a DtoH group");
    assert_eq!(htod.bytes, (up.len() as u64 + 1000) * 4);
    assert_eq!(htod.count, 2);
    assert_eq!(dtoh.bytes, down.len() as u64 * 4);
    assert_eq!(dtoh.count, 1);
    let copies = row.scopes.iter().find(|s| s.path == "copies").unwrap();
    assert_eq!(copies.launches, 3);
    println!(
        "HtoD {} B in {} ns, DtoH {} B in {} ns",
        htod.bytes, htod.total_ns, dtoh.bytes, dtoh.total_ns
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn chained_scopes_on_a_stream_share_their_boundary_event() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 22;
    let (a, b, mut c) = vectors(&g.stream, n);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chained.jsonl");
    let profiler = timeline(&path);
    const ITERS: u64 = 20;
    for _ in 0..ITERS {
        let s = Profiler::scope_on("first", &g.stream);
        g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        let s = s.next("second");
        for _ in 0..2 {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        drop(s);
        profiler.step();
    }
    g.stream.synchronize().unwrap();
    let (_, ledger) = finish_without_event_warnings(profiler, &path);
    assert_eq!(ledger.iterations.len() as u64, ITERS);
    for row in &ledger.iterations {
        assert!(row.warnings.is_empty(), "{:?}", row.warnings);
        for (path, kernels) in [("first", 1), ("second", 2)] {
            let s = row.scopes.iter().find(|s| s.path == path).unwrap();
            assert_eq!(s.kernels, kernels, "{path}");
            let ev = s.event_device_ns.expect("both scopes have event time");
            assert!(
                ev >= s.device_ns,
                "{path}: events span {ev} ns, its kernels {} ns",
                s.device_ns
            );
            println!(
                "row {} {path}: events {ev} ns, kernels {} ns",
                row.index, s.device_ns
            );
        }
    }
}

/// Scope events are recycled (the pool gives a read event to the next scope that needs one), and
/// a boundary event shared by two chained scopes must not be recorded again before both are
/// read: over many iterations, every scope's event time still covers its own kernels and nothing
/// else's.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn recycled_scope_events_time_each_scope_right_over_many_iterations() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 22;
    let (a, b, mut c) = vectors(&g.stream, n);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recycled.jsonl");
    let profiler = timeline(&path);
    const ITERS: u64 = 300;
    for _ in 0..ITERS {
        let s = Profiler::scope_on("chain_a", &g.stream);
        g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        let s = s.next("chain_b");
        for _ in 0..3 {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        drop(s);
        let s = Profiler::scope_on("alone", &g.stream);
        for _ in 0..2 {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        drop(s);
        profiler.step();
    }
    g.stream.synchronize().unwrap();
    let (summary, ledger) = finish_without_event_warnings(profiler, &path);
    assert_eq!(ledger.iterations.len() as u64, ITERS);
    let mut worst = 0.0f64;
    for row in &ledger.iterations {
        assert!(row.warnings.is_empty(), "{:?}", row.warnings);
        for (path, kernels) in [("chain_a", 1), ("chain_b", 3), ("alone", 2)] {
            let s = row.scopes.iter().find(|s| s.path == path).unwrap();
            assert_eq!(s.kernels, kernels, "row {} {path}", row.index);
            let ev = s.event_device_ns.expect("every scope has event time");
            // The events bracket the scope's kernels on one stream: never less than their busy
            // time. An event recorded again by a later scope before this one was read would
            // stretch the span over that scope's work too (or make it negative, read as 0).
            assert!(
                ev >= s.device_ns,
                "row {} {path}: events span {ev} ns, its kernels {} ns",
                row.index,
                s.device_ns
            );
            // The events are enqueued as the scope opens and closes on the host, so the span
            // is at most the kernels with their launch gaps plus the host time in the scope (a
            // first launch that CUPTI instruments takes 0.4-0.5 ms with some releases); a
            // recycled event read after it was recorded again stretches it by at least the
            // collector's 2 ms pass.
            assert!(
                ev < 10 * s.device_ns + s.host_ns + 200_000,
                "row {} {path}: events span {ev} ns, over ten times its kernels' {} ns + the \
                 host time in the scope {} ns + 200 µs",
                row.index,
                s.device_ns,
                s.host_ns
            );
            worst = worst.max(ev as f64 / s.device_ns as f64);
        }
    }
    // Five events an iteration; reused once read, so far fewer are made.
    let made = summary.trailer.overhead.scope_events_made;
    assert!(
        made > 0 && made <= ITERS * 5 / 2,
        "{made} events made for {} recorded",
        ITERS * 5
    );
    println!(
        "{ITERS} iterations, largest event span / kernel time {worst:.3}, {made} events made for {} recorded",
        ITERS * 5
    );
}

/// A scope's event is recorded without binding the stream's context first, and bound only when
/// the driver refuses: a thread with no context current (which has never made a CUDA call) must
/// still get its scope timed.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_scope_on_a_thread_with_no_current_context_is_timed_by_its_events() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 22;
    let (a, b, mut c) = vectors(&g.stream, n);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh-thread.jsonl");
    let profiler = timeline(&path);
    std::thread::scope(|t| {
        t.spawn(|| {
            assert_eq!(
                cudarc::driver::result::ctx::get_current().unwrap(),
                None,
                "a new thread starts with no current context"
            );
            let s = Profiler::scope_on("fresh", &g.stream);
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
            drop(s);
        });
    });
    profiler.step();
    g.stream.synchronize().unwrap();
    let (_, ledger) = finish_without_event_warnings(profiler, &path);
    let row = &ledger.iterations[0];
    let s = row.scopes.iter().find(|s| s.path == "fresh").unwrap();
    assert_eq!(s.kernels, 1);
    let ev = s.event_device_ns.expect("the scope has event time");
    // At most the kernel, the host time between the scope's events and a launch gap (the
    // recycled-events test says why).
    assert!(
        ev >= s.device_ns && ev < 10 * s.device_ns + s.host_ns + 200_000,
        "events span {ev} ns, its kernel {} ns (host time in the scope {} ns)",
        s.device_ns,
        s.host_ns
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn one_row_per_iteration_and_the_reader_round_trips_the_file() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n = 1 << 20;
    let (a, b, mut c) = vectors(&g.stream, n);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.jsonl");
    let profiler = Profiler::builder()
        .level(gpu_ledger::Level::Timeline)
        .ledger_path(&path)
        .settle(std::time::Duration::from_secs(5))
        .record_activities(true)
        .start()
        .unwrap();
    const ITERS: u64 = 50;
    for i in 0..ITERS {
        let _s = Profiler::scope_on("step", &g.stream);
        for _ in 0..=(i % 3) {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        drop(_s);
        profiler.step();
    }
    g.stream.synchronize().unwrap();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len() as u64, ITERS);
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(row.index, i as u64);
        assert_eq!(kernel_launches(row), i as u64 % 3 + 1, "iteration {i}");
        let step = row.scopes.iter().find(|s| s.path == "step").unwrap();
        let ev = step
            .event_device_ns
            .expect("event-timed scope has device time");
        assert!(
            ev >= step.device_ns,
            "events span {ev} ns covers the kernels' {} ns",
            step.device_ns
        );
        assert!(row.devices[0].busy_ns > 0);
        let acts = row.activities.as_ref().expect("activities recorded");
        assert_eq!(
            acts.iter().filter(|a| a.kind == "kernel").count() as u64,
            i as u64 % 3 + 1
        );
        assert!(acts
            .iter()
            .all(|a| a.scope == "step" && a.end_ns >= a.start_ns));
        let spans = row.scope_spans.as_ref().expect("scope spans recorded");
        assert_eq!(spans.len(), 1);
        assert!(spans[0].end_ns > spans[0].start_ns);
    }
    let env = &ledger.header.environment;
    assert!(!env.gpus.is_empty());
    assert!(
        env.gpus[0]
            .uuid
            .as_deref()
            .is_some_and(|u| u.starts_with("GPU-")),
        "{:?}",
        env.gpus[0]
    );
    // The header names the CUPTI this process loaded, whichever release it is.
    let lib = gpu_ledger::internals::cupti().unwrap();
    let env = &ledger.header.environment;
    assert_eq!(env.cupti_api_version, Some(lib.api_version));
    assert_eq!(env.cupti_release.as_deref(), Some(lib.release.name));
    assert_eq!(
        env.cupti_path.as_deref(),
        Some(lib.path.to_string_lossy().as_ref())
    );
    // Round trip: every line re-serializes to the same JSON value.
    let text = std::fs::read_to_string(&path).unwrap();
    for (i, line) in text.lines().enumerate() {
        let parsed: LedgerLine = serde_json::from_str(line).unwrap();
        let again = serde_json::to_value(&parsed).unwrap();
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(again, original, "line {}", i + 1);
    }
}

unsafe extern "C" fn no_op(
    _: *mut std::os::raw::c_void,
    _: cupti_sys::CUpti_CallbackDomain::Type,
    _: cupti_sys::CUpti_CallbackId,
    _: *const std::os::raw::c_void,
) {
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_second_cupti_subscriber_is_a_clear_error_and_fail_open_runs_unprofiled() {
    let _g = SERIAL.lock();
    let _gpu = gpu();
    let lib = gpu_ledger::internals::cupti().unwrap();
    // Another tool holds CUPTI's subscriber slot.
    // SAFETY: no_op never unwinds and takes no userdata.
    let other =
        unsafe { gpu_ledger::internals::subscribe(lib, no_op, std::ptr::null_mut()) }.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = Profiler::builder()
        .ledger_path(dir.path().join("busy.jsonl"))
        .start()
        .expect_err("start must fail");
    println!("{err}");
    assert!(matches!(err, gpu_ledger::Error::CuptiBusy(_)), "{err:?}");
    assert!(err.to_string().contains("one CUPTI subscriber"));
    // fail_open: the application runs, unprofiled, and the ledger says why.
    let path = dir.path().join("open.jsonl");
    let p = Profiler::builder()
        .ledger_path(&path)
        .fail_open(true)
        .start()
        .unwrap();
    assert!(p.disabled_reason().is_some_and(|r| r.contains("CUPTI")));
    {
        let _s = Profiler::scope("ignored");
    }
    p.step();
    p.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert!(ledger.iterations.is_empty());
    assert!(
        ledger
            .header
            .warnings
            .iter()
            .any(|w| w.contains("fail_open")),
        "{:?}",
        ledger.header.warnings
    );
    gpu_ledger::internals::unsubscribe(lib, other).unwrap();
    // With the slot free again, a profiler starts.
    let p = crate::timeline(&dir.path().join("after.jsonl"));
    p.finish().unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cublas_launches_made_through_the_runtime_complete_their_rows() {
    use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
    let _g = SERIAL.lock();
    let g = gpu();
    let blas = CudaBlas::new(g.stream.clone()).unwrap();
    let n = 512usize;
    let a = g.stream.alloc_zeros::<f32>(n * n).unwrap();
    let b = g.stream.alloc_zeros::<f32>(n * n).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n * n).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cublas.jsonl");
    let profiler = timeline(&path);
    let cfg = GemmConfig {
        transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: n as i32,
        k: n as i32,
        alpha: 1.0f32,
        lda: n as i32,
        ldb: n as i32,
        beta: 0.0f32,
        ldc: n as i32,
    };
    for _ in 0..5 {
        {
            let _s = Profiler::scope("gemm");
            for _ in 0..3 {
                // SAFETY: every matrix is n x n in column-major order, as the config says.
                unsafe { blas.gemm(cfg, &a, &b, &mut c) }.unwrap();
            }
        }
        g.stream.synchronize().unwrap();
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 5);
    for row in &ledger.iterations {
        // cuBLAS launches through the runtime, which calls the driver inside: only the outermost
        // call is awaited, and a kernel carrying either call's id stands for it (otherwise rows
        // wait for the settle time and come out incomplete).
        assert_eq!(
            row.missing_records, 0,
            "iteration {}: {:?}",
            row.index, row.warnings
        );
        assert!(row.complete, "iteration {}: {:?}", row.index, row.warnings);
        let gemm = row
            .scopes
            .iter()
            .find(|s| s.path == "gemm")
            .expect("gemm scope");
        assert!(
            gemm.kernels >= 3,
            "cuBLAS kernels attributed to the scope: {gemm:?}"
        );
    }
}
