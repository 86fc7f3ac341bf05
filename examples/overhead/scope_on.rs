//! `--scope-on`: the issue's target for a scope timed on a stream, "no more than the timing
//! events it records". In each round, in a rotated order, the same empty launches run three
//! ways: plain; with the application's own pair of timing-enabled events recorded around each
//! launch (two `cuEventRecord`s on two events made beforehand, the reference); and inside a
//! `Profiler::scope_on` per launch at `Level::Scopes`. Differences are paired by round.
//!
//! gpu-ledger does not share a boundary event between adjacent scopes: every `scope_on` records
//! its own two events. The "less where adjacent scopes share one boundary event" is
//! therefore not offered, and this mode measures the unshared case only.

use cudarc::driver::sys::CUevent_flags;

use super::*;

pub(super) fn scope_on(gpu: &Gpu, args: &Args, dir: &Path) -> Result<()> {
    let n = args.launches;
    let rounds = args.rounds.max(6);
    let new_event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let (before, after) = (new_event()?, new_event()?);
    let ways = ["plain", "event pair", "scope_on"];
    let mut per_launch: [Vec<f64>; 3] = Default::default();
    eprintln!(
        "overhead: --scope-on on {}: {rounds} rounds of {n} empty launches, three ways",
        gpu.name
    );
    for round in 0..=rounds {
        for k in 0..ways.len() {
            let way = (k + round) % ways.len();
            let elapsed = match way {
                0 => run_launches::<false>(gpu, n, None, 1)?,
                1 => {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        before.record(&gpu.stream)?;
                        gpu.launch_empty()?;
                        after.record(&gpu.stream)?;
                    }
                    gpu.stream.synchronize()?;
                    t0.elapsed()
                }
                _ => {
                    let profiler = Profiler::builder()
                        .level(Level::Scopes)
                        .nvml(args.nvml)
                        .ledger_path(dir.join(format!("scope-on-{round}.jsonl")))
                        .start()?;
                    let t0 = Instant::now();
                    for i in 0..n {
                        let scope = Profiler::scope_on("launch", &gpu.stream);
                        gpu.launch_empty()?;
                        drop(scope);
                        if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                            profiler.step();
                        }
                    }
                    gpu.stream.synchronize()?;
                    let elapsed = t0.elapsed();
                    let trailer = profiler.finish()?.trailer;
                    for w in &trailer.warnings {
                        eprintln!("overhead: --scope-on round {round}: {w}");
                    }
                    elapsed
                }
            };
            // Round 0 warms up the events, the pool and the profiler's first start.
            if round > 0 {
                per_launch[way].push(elapsed.as_secs_f64() * 1e6 / n as f64);
            }
        }
    }
    let diff = |a: usize, b: usize| -> Option<Paired> {
        let d: Vec<f64> = per_launch[a]
            .iter()
            .zip(&per_launch[b])
            .map(|(x, y)| x - y)
            .collect();
        Paired::of(&d)
    };
    println!("\n--scope-on: {rounds} rounds of {n} empty launches (µs per launch, medians)");
    for (way, v) in ways.iter().zip(&per_launch) {
        println!("  {way:<11} {:.3}", median(v).unwrap_or(f64::NAN));
    }
    if let (Some(events), Some(scope), Some(vs)) = (diff(1, 0), diff(2, 0), diff(2, 1)) {
        println!(
            "  the event pair adds {}",
            events.describe(1.0, 3, " µs/launch")
        );
        println!("  scope_on adds {}", scope.describe(1.0, 3, " µs/launch"));
        println!(
            "  scope_on - event pair {}; target ≤ 0 (no more than the events it records): {}",
            vs.describe(1.0, 3, " µs/launch"),
            vs.verdict(0.0)
        );
    }
    println!(
        "  (adjacent scopes sharing one boundary event: not offered; every scope_on records two \
         events)"
    );
    Ok(())
}
