//! `--sustained SECS`: launches at a fixed rate at `Level::Timeline`, dropped records and memory.

use super::*;

/// Resident memory of this process, KiB (`VmRSS` in /proc/self/status).
fn vm_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Launches at most this many kernels per scope in the sustained mode (when behind schedule).
const MAX_BURST: u64 = 2000;

pub(super) fn sustained(gpu: &Gpu, args: &Args, secs: u64, dir: &Path) -> Result<()> {
    let threads = args.threads.max(1);
    let ledger = dir.join("sustained.jsonl");
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .nvml(args.nvml)
        .ledger_path(&ledger)
        .start()?;
    eprintln!(
        "overhead: sustained {} launches/s for {secs} s at Level::Timeline on {} ({threads} threads)",
        args.rate, gpu.name
    );
    let stop = AtomicBool::new(false);
    let launched = AtomicU64::new(0);
    let per_thread = args.rate as f64 / threads as f64;
    let mut samples: Vec<(u64, u64, u64)> = Vec::new(); // (second, RSS KiB, launches that second)
    let outcome: Result<(), String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (stop, launched, ctx, empty) = (&stop, &launched, &gpu.ctx, &gpu.empty);
                s.spawn(move || -> Result<(), String> {
                    let stream = ctx.new_stream().map_err(|e| e.to_string())?;
                    let t0 = Instant::now();
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let due = (t0.elapsed().as_secs_f64() * per_thread) as u64;
                        if due <= done {
                            std::thread::sleep(Duration::from_micros(200));
                            continue;
                        }
                        let n = (due - done).min(MAX_BURST);
                        let _burst = Profiler::scope("burst");
                        for _ in 0..n {
                            launch_empty_on(&stream, empty).map_err(|e| e.to_string())?;
                        }
                        done += n;
                        launched.fetch_add(n, Ordering::Relaxed);
                    }
                    stream.synchronize().map_err(|e| e.to_string())
                })
            })
            .collect();
        let t0 = Instant::now();
        let mut last = 0u64;
        for tick in 1..=secs * 10 {
            let next = Duration::from_millis(100 * tick);
            if let Some(wait) = next.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            profiler.step();
            if tick % 10 == 0 {
                let now = launched.load(Ordering::Relaxed);
                samples.push((tick / 10, vm_rss_kib().unwrap_or(0), now - last));
                last = now;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err("a launching thread panicked".into()));
            if first.is_ok() {
                first = r;
            }
        }
        first
    });
    outcome?;
    let total = launched.load(Ordering::Relaxed);
    let trailer = profiler.finish()?.trailer;
    println!("\nsecond  VmRSS MiB  launches/s");
    for (sec, rss, n) in &samples {
        println!("{sec:>6} {:>10.1} {n:>11}", *rss as f64 / 1024.0);
    }
    let half = samples.len() / 2;
    let mid = samples.get(half).map_or(0, |s| s.1);
    let max_late = samples[half..].iter().map(|s| s.1).max().unwrap_or(0);
    let growth_mib = max_late.saturating_sub(mid) as f64 / 1024.0;
    let rate = total as f64 / secs.max(1) as f64;
    println!(
        "\nsustained: {total} launches in {secs} s ({rate:.0}/s, target {}); kernel records {}; \
         dropped {} (target 0); late/unplaced {}; buffers used {}, requests refused {}",
        args.rate,
        trailer.kernel_records,
        trailer.dropped_records,
        trailer.late_records + trailer.unplaced_records,
        trailer.overhead.buffers_used,
        trailer.overhead.buffer_requests_refused
    );
    // A burst can grow the buffer pool once (a step of a few buffers); what matters is whether
    // memory keeps growing afterwards, so the verdict is on the last quarter, with the second
    // half printed beside it.
    let quarter = samples.len() * 3 / 4;
    let q_start = samples.get(quarter).map_or(0, |s| s.1);
    let q_max = samples[quarter..].iter().map(|s| s.1).max().unwrap_or(0);
    let q_growth_mib = q_max.saturating_sub(q_start) as f64 / 1024.0;
    println!(
        "VmRSS growth over the second half: {growth_mib:.1} MiB; over the last quarter: \
         {q_growth_mib:.1} MiB ({})",
        if q_growth_mib <= 4.0 {
            "stopped growing: at most one 4 MiB buffer in the last quarter"
        } else {
            "still growing in the last quarter"
        }
    );
    if rate < 0.98 * args.rate as f64 {
        println!(
            "the launching threads fell short of the rate: launch-bound at {threads} threads; try \
             --threads {}",
            threads * 2
        );
    }
    let o = &trailer.overhead;
    println!(
        "self-reported: CUPTI overhead {:.1} ms, buffer callbacks {:.1} ms, collector CPU {:.1} ms, \
         writer CPU {:.1} ms",
        o.cupti_overhead_ns as f64 / 1e6,
        o.buffer_callback_ns as f64 / 1e6,
        o.collector_cpu_ns as f64 / 1e6,
        o.writer_cpu_ns as f64 / 1e6
    );
    for w in &trailer.warnings {
        println!("warning: {w}");
    }
    Ok(())
}
