//! What the profiler costs between an application's synchronize and its next launch, with the
//! caches cold, on any machine.
//!
//! In a GPU-bound training step the host waits in a synchronize (the loss read back) while the
//! GPU runs; what the host does after it, until the next launch reaches the GPU, leaves the GPU
//! idle. There the profiler runs a scope's close, `step()` and the next scope's open, each
//! touching lines that the wait and the rest of the step have pushed out of the caches, so a
//! call costs several times what it does back to back (`benches/scope_overhead.rs`). This
//! benchmark reproduces that: before each timed sequence it writes a buffer larger than a
//! core's L2 (`--evict-mib`, default 8) and sleeps 200 µs, then times the close of a top-level
//! scope, `profiler.step()` and the open of the next scope, at `Level::Scopes` without NVML and
//! with no profiler (the same calls on inert guards), in alternated rounds.
//!
//! It prints, per round, each side's median of the whole sequence and the means of its three
//! parts, and the profiler's added median paired by round with the rounds' range.
//!
//! `cargo bench --bench cold_step` (add `-- --evict-mib 16 --iterations 4000 --rounds 6`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use gpu_ledger::{Level, Profiler, ScopeGuard};

/// The pause before each timed sequence: long enough that the thread sleeps, as one waiting in
/// a blocking synchronize does, and short enough that a run stays under a second a side.
const PAUSE: Duration = Duration::from_micros(200);

/// What one side of a round measured, ns.
struct Side {
    median: u64,
    close: u64,
    step: u64,
    open: u64,
}

/// Writes one byte per cache line of `buf`, so that the lines the next sequence touches have
/// been pushed out of the core's caches.
fn evict(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    black_box(buf);
}

/// `iterations` cold sequences (close, `step()`, open), with a profiler when `profiled`.
fn side(profiled: bool, iterations: usize, buf: &mut [u8], dir: &std::path::Path) -> Side {
    let profiler = profiled.then(|| {
        Profiler::builder()
            .level(Level::Scopes)
            .nvml(false)
            .ledger_path(dir.join("cold_step.jsonl"))
            .start()
            .expect("a Level::Scopes profiler starts without a GPU")
    });
    let mut totals = Vec::with_capacity(iterations);
    let (mut close, mut step, mut open) = (0u64, 0u64, 0u64);
    let mut log: Option<ScopeGuard<'static>> = Some(Profiler::scope("log"));
    for _ in 0..iterations {
        evict(buf);
        std::thread::sleep(PAUSE);
        let t0 = Instant::now();
        drop(log.take());
        let t1 = Instant::now();
        if let Some(p) = &profiler {
            p.step();
        }
        let t2 = Instant::now();
        let forward = Profiler::scope("forward");
        let t3 = Instant::now();
        drop(black_box(forward));
        log = Some(Profiler::scope("log"));
        totals.push((t3 - t0).as_nanos() as u64);
        close += (t1 - t0).as_nanos() as u64;
        step += (t2 - t1).as_nanos() as u64;
        open += (t3 - t2).as_nanos() as u64;
    }
    drop(log);
    if let Some(p) = profiler {
        p.finish().expect("the benchmark's ledger is written");
    }
    totals.sort_unstable();
    let n = iterations.max(1) as u64;
    Side {
        median: totals[totals.len() / 2],
        close: close / n,
        step: step / n,
        open: open / n,
    }
}

/// The value after `flag` on the command line, parsed, or `default`.
fn arg(args: &[String], flag: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{flag} takes a whole number, not {v:?}"))
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --benches` runs this without `--bench`: a short pass that only checks it runs.
    let benchmarking = args.iter().any(|a| a == "--bench");
    let evict_mib = arg(&args, "--evict-mib", 8).max(1);
    let iterations = arg(&args, "--iterations", if benchmarking { 3000 } else { 20 }).max(1);
    let rounds = arg(&args, "--rounds", if benchmarking { 4 } else { 1 }).max(1);
    let dir = std::env::temp_dir().join(format!("gpu-ledger-cold-step-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory for the benchmark's ledger");
    let mut buf = vec![1u8; evict_mib << 20];
    let mut added = Vec::with_capacity(rounds);
    println!(
        "cold sequence after a synchronize: close a top-level scope, step(), open a scope; \
         {evict_mib} MiB written and {} µs asleep before each of {iterations} sequences a side",
        PAUSE.as_micros()
    );
    for round in 0..rounds {
        // Alternated: the side that runs first each round changes.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut sides = [None, None];
        for profiled in order {
            sides[usize::from(profiled)] = Some(side(profiled, iterations, &mut buf, &dir));
        }
        let [Some(none), Some(prof)] = sides else {
            unreachable!("both sides ran")
        };
        for (name, s) in [("none", &none), ("scopes", &prof)] {
            println!(
                "round {round} {name:>6}: median {:>5} ns (means: close {:>5}, step() {:>5}, open {:>5})",
                s.median, s.close, s.step, s.open
            );
        }
        added.push(prof.median as i64 - none.median as i64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    added.sort_unstable();
    println!(
        "added by the profiler, paired by round: median {} ns (rounds {} to {})",
        added[added.len() / 2],
        added[0],
        added[added.len() - 1]
    );
}
