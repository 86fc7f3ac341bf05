//! The main job: runs the bundled vector-add kernel in an iteration loop under scopes at the
//! timeline level, writes a ledger, and prints a per-scope table.
//!
//! `cargo run --release --example demo [-- ITERATIONS [LEDGER_PATH]]`

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::{read_ledger, Level, Profiler};

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
    let mut args = std::env::args().skip(1);
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
    gpu_ledger::device::require_driver()?;
    gpu_ledger::cupti::api()?;

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

    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&ledger_path)
        .start()?;
    println!(
        "gpu-ledger demo: {}, {iterations} iterations of vector_add over {n} floats",
        ctx.name()?
    );
    println!("ledger: {}", profiler.ledger_path().display());
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
                for _ in 0..10 {
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

    let ledger = read_ledger(&summary.ledger_path)?;
    print_table(&ledger, ctx.name().unwrap_or_default());
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
