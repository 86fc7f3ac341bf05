//! `--scope-on`: the issue's target for a scope timed on a stream, "no more than the timing
//! events it records, and less where adjacent scopes share one boundary event". In each round,
//! in a rotated order, the same empty launches run four ways: plain; with the application's own
//! pair of timing-enabled events recorded around each launch (two `cuEventRecord`s on two events
//! made beforehand, the reference); inside a `Profiler::scope_on` per launch at `Level::Scopes`
//! (two events each); and inside a chain of adjacent scopes, one per launch, each begun by
//! `ScopeGuard::next` on the one before (one event per boundary). Differences are paired by
//! round.

use cudarc::driver::sys::CUevent_flags;

use super::*;

pub(super) fn scope_on(gpu: &Gpu, args: &Args, dir: &Path) -> Result<()> {
    let n = args.launches;
    let rounds = args.rounds.max(6);
    let new_event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let (before, after) = (new_event()?, new_event()?);
    let ways = ["plain", "event pair", "scope_on", "chained"];
    let mut per_launch: [Vec<f64>; 4] = Default::default();
    eprintln!(
        "overhead: --scope-on on {}: {rounds} rounds of {n} empty launches, four ways",
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
                chained_or_not => {
                    let chained = chained_or_not == 3;
                    let profiler = Profiler::builder()
                        .level(Level::Scopes)
                        .nvml(args.nvml)
                        .ledger_path(dir.join(format!("scope-on-{round}.jsonl")))
                        .start()?;
                    let t0 = Instant::now();
                    if chained {
                        // Each launch in its own scope, begun by `next` on the one before; the
                        // chain is closed at each iteration's end so that no scope spans a step.
                        let mut scope = Profiler::scope_on("launch", &gpu.stream);
                        for i in 0..n {
                            gpu.launch_empty()?;
                            if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                                drop(scope);
                                profiler.step();
                                scope = Profiler::scope_on("launch", &gpu.stream);
                            } else {
                                scope = scope.next("launch");
                            }
                        }
                        drop(scope);
                    } else {
                        for i in 0..n {
                            let scope = Profiler::scope_on("launch", &gpu.stream);
                            gpu.launch_empty()?;
                            drop(scope);
                            if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                                profiler.step();
                            }
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
    if let (Some(events), Some(scope), Some(vs), Some(chained), Some(chained_vs)) =
        (diff(1, 0), diff(2, 0), diff(2, 1), diff(3, 0), diff(3, 1))
    {
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
        println!(
            "  chained scopes add {}",
            chained.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  chained - event pair {}; target < 0 (less where adjacent scopes share one boundary \
             event): {}",
            chained_vs.describe(1.0, 3, " µs/launch"),
            chained_vs.verdict(0.0)
        );
    }
    Ok(())
}
