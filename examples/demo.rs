//! The main job: runs the bundled vector-add kernel in an iteration loop under scopes, with the
//! timeline on every iteration and hardware counters per scope on a window of iterations
//! (`Level::Counters`), writes a ledger, and prints a per-scope table and the counters next to
//! their analytic values. Where counters cannot be read (permission, another tool), the timeline
//! runs alone and the demo says why.
//!
//! `cargo run --release --example demo [-- ITERATIONS [LEDGER_PATH]] [--fail-open]`: with
//! `--fail-open`, a machine where the profiler cannot start (no usable CUPTI) runs the loop
//! unprofiled, and the ledger header says why.

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use gpu_ledger::counters::metrics::names;
use gpu_ledger::counters::{CounterConfig, CounterWindow, CountersSetup, RangeMode, ReplayMode};
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::Profiler;

/// Kernel launches per iteration in the `compute` scope.
const LAUNCHES: u64 = 10;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu-ledger demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let fail_open = all.iter().any(|a| a == "--fail-open");
    let mut args = all.into_iter().filter(|a| a != "--fail-open");
    let iterations: u64 = match args.next() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("ITERATIONS must be a whole number, got {a:?}"))?,
        None => 20,
    };
    let ledger_path = args
        .next()
        .unwrap_or_else(|| "target/gpu-ledger-demo.jsonl".into());

    // Fails with one clear line when there is no driver, GPU or CUPTI: checked before cudarc,
    // which would panic without a driver.
    // With --fail-open only the driver and GPU are required: the profiler's own start then
    // decides, and runs inert with the reason in the ledger.
    if fail_open {
        Profiler::require_gpu()?;
    } else {
        Profiler::preflight(gpu_ledger::Level::Counters)?;
    }

    let n: u64 = 1 << 24; // 64 MiB per array
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let kernel = VectorAdd::new(&ctx)?;
    let a_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let b_host: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    let mut a = stream.alloc_zeros::<f32>(n as usize)?;
    let mut b = stream.alloc_zeros::<f32>(n as usize)?;
    let mut c = stream.alloc_zeros::<f32>(n as usize)?;
    let mut c_host = vec![0f32; n as usize];
    stream.synchronize()?;

    // Counters per scope (two nesting levels: `step`, `step/compute`, ...) on a window after
    // five warm-up iterations; the timeline runs on every iteration.
    let mut counters = CountersSetup::new(
        &ctx,
        CounterConfig {
            metrics: vec![
                names::DRAM_BYTES_READ.into(),
                names::DRAM_BYTES_WRITE.into(),
                names::GPU_TIME.into(),
            ],
            range_mode: RangeMode::User,
            replay_mode: ReplayMode::User,
            nesting_levels: 2,
            ..CounterConfig::default()
        },
    );
    counters.window = CounterWindow {
        skip: 5,
        collections: 1,
    };
    let profiler = Profiler::builder()
        .counters(counters)
        .ledger_path(&ledger_path)
        .fail_open(fail_open)
        .start()?;
    if let Some(why) = profiler.disabled_reason() {
        println!("gpu-ledger demo: running unprofiled: {why}");
    }
    println!(
        "gpu-ledger demo: {}, {iterations} iterations of vector_add over {n} floats",
        ctx.name()?
    );
    if let Some(path) = profiler.ledger_path() {
        println!("ledger: {}", path.display());
    }
    for _ in 0..iterations {
        {
            let _step = Profiler::scope_on("step", &stream);
            {
                let _s = Profiler::scope("upload");
                stream.memcpy_htod(&a_host, &mut a)?;
                stream.memcpy_htod(&b_host, &mut b)?;
            }
            {
                let _s = Profiler::scope("compute");
                for _ in 0..LAUNCHES {
                    kernel.launch(&stream, &a, &b, &mut c, n)?;
                }
            }
            {
                let _s = Profiler::scope("download");
                stream.memcpy_dtoh(&c, &mut c_host)?;
            }
            stream.synchronize()?;
        }
        profiler.step();
    }
    let summary = profiler.finish()?;
    check_result(&a_host, &b_host, &c_host)?;

    let ledger = summary.read_ledger()?;
    print_table(&ledger, ctx.name().unwrap_or_default());
    print_counters(&ledger, n);
    let t = &summary.trailer;
    println!(
        "{} iterations, {} kernel records, {} dropped, {} late; CUPTI overhead {:.3} ms, collector CPU {:.3} ms",
        t.iterations,
        t.kernel_records,
        t.dropped_records,
        t.late_records,
        t.overhead.cupti_overhead_ns as f64 / 1e6,
        t.overhead.collector_cpu_ns as f64 / 1e6
    );
    Ok(())
}

fn check_result(a: &[f32], b: &[f32], c: &[f32]) -> Result<(), String> {
    match (0..a.len()).find(|&i| c[i] != a[i] + b[i]) {
        Some(i) => Err(format!(
            "wrong result at {i}: {} + {} != {}",
            a[i], b[i], c[i]
        )),
        None => Ok(()),
    }
}

fn print_table(ledger: &gpu_ledger::Ledger, gpu: String) {
    use gpu_ledger::analysis::stats::Distribution;
    use std::collections::BTreeMap;
    let mut per_scope: BTreeMap<&str, (Vec<f64>, Vec<f64>, u64)> = BTreeMap::new();
    let rows: Vec<_> = ledger
        .iterations
        .iter()
        .filter(|r| r.complete && !r.perturbed)
        .collect();
    for row in &rows {
        for s in &row.scopes {
            let e = per_scope.entry(&s.path).or_default();
            e.0.push(s.device_ns_inclusive as f64 / 1e3);
            e.1.push(s.host_ns as f64 / 1e3);
            e.2 += s.launches;
        }
    }
    println!("\nper-scope time on {gpu} over {} complete iterations (µs; device = union of its GPU work, children included)", rows.len());
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "scope", "device p50", "device p90", "host p50", "host p90", "launches/it"
    );
    let n = rows.len().max(1) as u64;
    for (path, (dev, host, launches)) in per_scope {
        let (d, h) = (
            Distribution::from_samples(&dev),
            Distribution::from_samples(&host),
        );
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
        println!(
            "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
            path,
            f(d.as_ref().map(|d| d.median)),
            f(d.as_ref().map(|d| d.p90)),
            f(h.as_ref().map(|d| d.median)),
            f(h.as_ref().map(|d| d.p90)),
            launches / n
        );
    }
}

/// The counters of the completed collection, next to the analytic bytes of the `compute` scope.
fn print_counters(ledger: &gpu_ledger::Ledger, n: u64) {
    let Some(header) = &ledger.header.counters else {
        return;
    };
    if !header.collected {
        println!(
            "\nhardware counters not collected: {}",
            header.reason.as_deref().unwrap_or("no reason given")
        );
        return;
    }
    let perturbed: Vec<u64> = ledger
        .iterations
        .iter()
        .filter(|r| r.perturbed)
        .map(|r| r.index)
        .collect();
    let Some((row, c)) = ledger
        .iterations
        .iter()
        .find_map(|r| r.counters.as_ref().filter(|c| c.complete).map(|c| (r, c)))
    else {
        let why = ledger
            .iterations
            .iter()
            .find_map(|r| r.counters.as_ref().and_then(|c| c.error.clone()))
            .unwrap_or_else(|| "the run ended before the window completed".into());
        println!("\nhardware counters: no completed collection ({why})");
        return;
    };
    println!(
        "\nhardware counters ({} pass(es) over iterations {:?}, values in row {}; those rows are \
         perturbed and left out of the table above):",
        header.passes, perturbed, row.index
    );
    println!(
        "{:<16} {:>14} {:>14} {:>12} {:>10}",
        "range", "DRAM read MB", "DRAM write MB", "GPU µs", "GB/s"
    );
    for r in &c.ranges {
        let v = |m: &str| r.values.get(m).copied().unwrap_or(f64::NAN);
        println!(
            "{:<16} {:>14.1} {:>14.1} {:>12.1} {:>10.0}",
            r.name,
            v(names::DRAM_BYTES_READ) / 1e6,
            v(names::DRAM_BYTES_WRITE) / 1e6,
            v(names::GPU_TIME) / 1e3,
            r.derived.dram_bandwidth_bytes_per_s.unwrap_or(f64::NAN) / 1e9
        );
    }
    if let Some(r) = c.ranges.iter().find(|r| r.name == "step/compute") {
        let read = r.values.get(names::DRAM_BYTES_READ).copied().unwrap_or(0.0);
        let analytic = (LAUNCHES * 8 * n) as f64;
        println!(
            "step/compute reads {:.1} MB from DRAM; {LAUNCHES} vector adds read 8N = {:.1} MB \
             ({:+.2} %)",
            read / 1e6,
            analytic / 1e6,
            (read / analytic - 1.0) * 100.0
        );
    }
}
