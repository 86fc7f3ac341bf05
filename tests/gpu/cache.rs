//! GPU tests: the L2's state at the start of a counted range. A vector add whose operands fit in
//! the L2 leaves its output dirty there; the next run's range writes those lines back when it
//! starts as the previous run left the L2, and writes nothing when it starts flushed.

use gpu_ledger::counters::metrics::names;
use gpu_ledger::counters::{
    CacheState, CounterConfig, CounterWindow, RangeMode, RangeProfiler, ReplayMode,
};
use gpu_ledger::{read_ledger, Profiler};

use crate::counters::{app_launches, counters_profiler, counters_scope_launches, value};
use crate::{gpu, report, vectors, SERIAL};

/// 2^20 floats per operand: 12 MiB in all, a fifth of the H200's L2.
const N: u64 = 1 << 20;

fn config(cache: CacheState) -> CounterConfig {
    CounterConfig {
        metrics: vec![
            names::DRAM_BYTES_READ.into(),
            names::DRAM_BYTES_WRITE.into(),
        ],
        range_mode: RangeMode::User,
        replay_mode: ReplayMode::User,
        cache,
        ..CounterConfig::default()
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_flushed_range_starts_with_no_dirty_line_where_an_as_left_one_writes_back_the_last_runs() {
    let _g = SERIAL.lock();
    let g = gpu();
    let (a, b, mut c) = vectors(&g.stream, N as usize);
    let l2 = g
        .ctx
        .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        .unwrap() as u64;
    assert!(
        12 * N < l2,
        "the operands ({} B) must fit in the L2 ({l2} B)",
        12 * N
    );
    let mut read = |cache| {
        // Each collection starts after a run that left c's 4 MiB dirty in the L2.
        g.vadd.launch(&g.stream, &a, &b, &mut c, N).unwrap();
        g.stream.synchronize().unwrap();
        let mut rp = RangeProfiler::new(&g.ctx, config(cache)).expect("Range Profiler set up");
        let got = rp
            .collect(|rp| {
                rp.push_range("vector_add")?;
                g.vadd.launch(&g.stream, &a, &b, &mut c, N)?;
                g.stream.synchronize()?;
                rp.pop_range()
            })
            .unwrap();
        rp.finish().unwrap();
        (
            value(&got, "vector_add", names::DRAM_BYTES_READ),
            value(&got, "vector_add", names::DRAM_BYTES_WRITE),
        )
    };
    // Alternated, so that neither state always follows the other.
    let mut as_left = Vec::new();
    let mut flushed = Vec::new();
    for _ in 0..2 {
        as_left.push(read(CacheState::AsLeft));
        flushed.push(read(CacheState::Flushed));
    }
    println!("vector_add, N = 2^20, L2 {l2} B: (DRAM read, DRAM written) per collection");
    println!("  as left: {as_left:?}");
    println!("  flushed: {flushed:?}");
    let (read_all, write_all) = (8.0 * N as f64, 4.0 * N as f64);
    for &(r, w) in &flushed {
        let rel = report("flushed: DRAM bytes read vs 8N (within 3 %)", r, read_all);
        // The flush itself reads 4 × the L2 before the range opens: inside it, this would be
        // ~30 times 8N.
        assert!(rel.abs() <= 0.03, "flushed: {r} B read, 8N = {read_all}");
        report(
            "flushed: DRAM bytes written vs 4N (at most 1 %)",
            w,
            write_all,
        );
        // Nothing is dirty at the start, and c's own lines stay in the L2 at the end.
        assert!(w <= 0.01 * write_all, "flushed: {w} B written back");
    }
    for &(r, w) in &as_left {
        // Measured on the H200: the operands come from DRAM again, as flushed.
        report("as left: DRAM bytes read vs 8N", r, read_all);
        report(
            "as left: DRAM bytes written vs 4N (at least half)",
            w,
            write_all,
        );
        assert!(
            w >= 0.5 * write_all,
            "as left: {w} B written; the previous run's dirty lines of c are written back in the \
             range"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_profiler_with_a_flushed_l2_records_it_and_charges_the_flushes_to_the_counters_scope() {
    let _g = SERIAL.lock();
    let g = gpu();
    let (a, b, mut c) = vectors(&g.stream, N as usize);
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flushed.jsonl");
    let window = CounterWindow {
        skip: 2,
        collections: 1,
    };
    let profiler = counters_profiler(&g, &path, config(CacheState::Flushed), window);
    const ITERATIONS: u64 = 8;
    for _ in 0..ITERATIONS {
        {
            let _add = Profiler::scope("vector_add");
            g.vadd.launch(&g.stream, &a, &b, &mut c, N).unwrap();
            g.stream.synchronize().unwrap();
        }
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let header = ledger.header.counters.as_ref().expect("header counters");
    assert!(header.collected, "{:?}", header.reason);
    assert_eq!(header.cache, CacheState::Flushed);
    let runs = u64::from(header.iterations_per_collection);
    let flushes = |row: &gpu_ledger::ledger::IterationRow| {
        row.kernels
            .iter()
            .filter(|k| k.name == "gpu_ledger_l2_flush")
            .map(|k| k.count)
            .sum::<u64>()
    };
    for row in &ledger.iterations {
        let in_window = (2..2 + runs).contains(&row.index);
        println!(
            "row {}: perturbed {} flushes {} counters-scope kernels {} app kernels {}",
            row.index,
            row.perturbed,
            flushes(row),
            counters_scope_launches(row),
            app_launches(row)
        );
        assert_eq!(
            app_launches(row),
            1,
            "row {}: the flush is not the app's",
            row.index
        );
        assert_eq!(flushes(row), u64::from(in_window), "row {}", row.index);
        assert!(
            counters_scope_launches(row) >= flushes(row),
            "row {}",
            row.index
        );
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
        // The counters level traces every iteration, so every row carries the estimate.
        assert!(row.tracing_added_ns.is_some(), "row {}", row.index);
    }
    assert!(
        ledger.header.tracing_calibration.is_some(),
        "the counters level calibrates its timeline: {:?}",
        ledger.header.config.tracing_calibration
    );
    let last = &ledger.iterations[(1 + runs) as usize];
    let counters = last.counters.as_ref().unwrap();
    assert!(
        counters.complete && counters.error.is_none(),
        "{counters:?}"
    );
    let range = counters
        .ranges
        .iter()
        .find(|r| r.name == "vector_add")
        .expect("a range for the scope");
    let read = range.values[names::DRAM_BYTES_READ];
    let rel = report(
        "flushed scope: DRAM bytes read vs 8N (within 3 %)",
        read,
        8.0 * N as f64,
    );
    assert!(rel.abs() <= 0.03, "{read} B read, 8N = {}", 8 * N);
}
