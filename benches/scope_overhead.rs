//! What a `Profiler::scope` guard costs on the calling thread, on any machine.
//!
//! - `scope/disabled`: enter + drop with no profiler running (target: at most 5 ns).
//! - `scope/scopes_top_level`: at `Level::Scopes` (host time only, no NVML), a scope with no
//!   parent, so that every exit empties the thread's scope stack;
//! - `scope/scopes_nested`: the same inside an open outer scope, the common case in a training
//!   step (`step/forward`);
//! - `scope/scopes_nested_owned_name`: nested, with a `String` name built per call
//!   (`Profiler::scope(format!(..))`-style callers; the `String` is part of the cost);
//! - `scope/scopes_nested_no_nvtx`: nested, with the scope's NVTX range off
//!   (`ProfilerBuilder::nvtx_emit(false)`); the summary prints the difference, alternated runs,
//!   against the 20 ns allowed for NVTX emission with no NVTX tool attached;
//! - `step/scopes_level`: `profiler.step()` at `Level::Scopes`, the per-iteration cost on the
//!   stepping thread (no target; in a GPU-bound step with a synchronize it sits on the critical
//!   path between the synchronize and the next launch).
//!
//! Target for the Scopes-level scopes: at most 100 ns. `profiler.step()` runs between timed chunks
//! of 4 000 scopes, outside the timed region, so that iterations stay small as in a real job,
//! followed by an untimed pause that leaves the collector thread time to keep up (see
//! [`COLLECTOR_ROOM_PER_SCOPE`]); the run stops with a panic if resident memory passes 4 GiB
//! (the collector is not keeping up).
//!
//! `cargo bench --bench scope_overhead` (add `-- --quick` for a short run). After criterion's
//! report a summary prints the measured ns next to each target, from a timing loop of its own
//! (median of `common::SAMPLES` runs of about 0.3 s): wall time, and the calling thread's CPU time, which a
//! loaded machine does not inflate.

use std::borrow::Cow;
use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{verdict, wall_and_cpu_medians, SAMPLES};
use criterion::{criterion_group, Criterion};
use gpu_ledger::analysis::stats::Distribution;
use gpu_ledger::{Level, Profiler};

mod common;

/// Scopes timed between two `step()` calls: no more than a thread's scope ring holds, so that
/// none spills into the ring's overflow vector before the collector drains it.
const CHUNK: u64 = 4_000;

/// Untimed pause after each chunk, per scope in it: the collector thread spends CPU on every
/// scope record (measured: `collector_cpu_ns` in the trailer), and its inbox is
/// unbounded, so a loop of nothing but scopes would outrun it and grow memory without bound. A
/// real application's scope rate is far below the collector's; the pause keeps the benchmark in
/// that regime (the collector mostly idle, as it is there).
const COLLECTOR_ROOM_PER_SCOPE: Duration = Duration::from_nanos(300);

/// The shortest pause: longer than the collector's tick (2 ms), the longest it sleeps before
/// draining the scope rings.
const MIN_PAUSE: Duration = Duration::from_millis(3);

/// Where a benchmark scope sits.
#[derive(Clone, Copy)]
enum Shape {
    /// No parent: every exit hands the batch over.
    TopLevel,
    /// Inside an open outer scope, with a `&'static str` name.
    Nested,
    /// Inside an open outer scope, with a `String` name made per call.
    NestedOwned,
}

/// Resident memory beyond which the benchmark stops: the collector has fallen behind for good.
const RSS_LIMIT_KIB: u64 = 4 << 20;

/// Stops the benchmark when the process has grown past [`RSS_LIMIT_KIB`]: closed scopes are piling
/// up faster than the collector takes them, and the run would otherwise exhaust the machine's
/// memory rather than measure anything.
fn check_memory() {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        });
    if let Some(kib) = rss.filter(|&kib| kib > RSS_LIMIT_KIB) {
        panic!(
            "resident memory reached {} MiB: the collector is not keeping up with the scope \
             records (see docs/overhead.md, \"benches/scope_overhead.rs\")",
            kib / 1024
        );
    }
}

/// A Scopes-level profiler writing to a temporary ledger, with nothing else running (no NVML).
fn scopes_profiler(dir: &tempfile::TempDir) -> Profiler {
    scopes_profiler_nvtx(dir, true)
}

/// [`scopes_profiler`] with its scopes' NVTX ranges on or off.
fn scopes_profiler_nvtx(dir: &tempfile::TempDir, nvtx: bool) -> Profiler {
    Profiler::builder()
        .level(Level::Scopes)
        .nvml(false)
        .nvtx_emit(nvtx)
        .settle(Duration::from_millis(200))
        .ledger_path(dir.path().join("bench.jsonl"))
        .start()
        .expect("the scopes level needs no GPU")
}

/// One enter + drop with no profiler running.
#[inline(always)]
fn disabled_once() {
    let guard = Profiler::scope(black_box("x"));
    drop(black_box(guard));
}

/// The owned name of the `NestedOwned` scopes, built per call; [`timed_string_names`] builds the
/// same alone, and the summary's "scope's share" subtracts one from the other.
#[inline(always)]
fn owned_name() -> Cow<'static, str> {
    Cow::Owned(black_box("forward").to_string())
}

/// Times `iters` scopes of `shape`, calling `step()` between chunks of [`CHUNK`] (untimed).
fn timed_scopes(profiler: &Profiler, shape: Shape, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    let mut chunks = 0u64;
    while left > 0 {
        let n = left.min(CHUNK);
        let outer = match shape {
            Shape::TopLevel => None,
            Shape::Nested | Shape::NestedOwned => Some(Profiler::scope("step")),
        };
        let t0 = Instant::now();
        match shape {
            Shape::TopLevel | Shape::Nested => {
                for _ in 0..n {
                    let guard = Profiler::scope(black_box("forward"));
                    drop(black_box(guard));
                }
            }
            Shape::NestedOwned => {
                for _ in 0..n {
                    let guard = Profiler::scope(owned_name());
                    drop(black_box(guard));
                }
            }
        }
        total += t0.elapsed();
        drop(outer);
        profiler.step();
        std::thread::sleep((COLLECTOR_ROOM_PER_SCOPE * n as u32).max(MIN_PAUSE));
        left -= n;
        chunks += 1;
        if chunks % 64 == 0 {
            check_memory();
        }
    }
    total
}

/// Times `iters` `String` names built and dropped as the owned-name loop builds them, without a
/// scope: the caller's share of that case (an allocation and a free).
fn timed_string_names(iters: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..iters {
        drop(black_box(owned_name()));
    }
    t0.elapsed()
}

/// Times `iters` reads of the host clock as a scope reads it.
fn timed_clock_reads(iters: u64) -> Duration {
    let t0 = Instant::now();
    for _ in 0..iters {
        black_box(Instant::now());
    }
    t0.elapsed()
}

/// Times `iters` calls of `profiler.step()`, in chunks of 1000 followed by an untimed pause so
/// that the collector writes the (empty) rows as fast as they come.
fn timed_steps(profiler: &Profiler, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(1000);
        let t0 = Instant::now();
        for _ in 0..n {
            profiler.step();
        }
        total += t0.elapsed();
        std::thread::sleep(Duration::from_micros(10) * n as u32);
        left -= n;
    }
    total
}

/// `profiler.step()` as a training loop calls it: once per `gap` of work (a busy wait here), with
/// the collector thread idle in between. Median and p90 ns of single calls over `calls`. This is
/// where waking a sleeping collector would show, which the back-to-back loop of [`timed_steps`]
/// never sees.
fn sparse_step_ns(profiler: &Profiler, gap: Duration, calls: usize) -> (f64, f64) {
    let mut ns: Vec<f64> = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        while t.elapsed() < gap {
            std::hint::spin_loop();
        }
        let t0 = Instant::now();
        profiler.step();
        ns.push(t0.elapsed().as_nanos() as f64);
    }
    Distribution::from_samples(&ns).map_or((f64::NAN, f64::NAN), |d| (d.median, d.p90))
}

fn bench_scopes(c: &mut Criterion) {
    let mut group = c.benchmark_group("scope");
    group.bench_function("disabled", |b| b.iter(disabled_once));

    let dir = tempfile::tempdir().expect("a temporary directory");
    let profiler = scopes_profiler(&dir);
    for (name, shape) in [
        ("scopes_top_level", Shape::TopLevel),
        ("scopes_nested", Shape::Nested),
        ("scopes_nested_owned_name", Shape::NestedOwned),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| timed_scopes(&profiler, shape, iters))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("step");
    group.bench_function("scopes_level", |b| {
        b.iter_custom(|iters| timed_steps(&profiler, iters))
    });
    group.finish();
    profiler.finish().expect("the scopes profiler finishes");
    let mut group = c.benchmark_group("scope");
    let profiler = scopes_profiler_nvtx(&dir, false);
    group.bench_function("scopes_nested_no_nvtx", |b| {
        b.iter_custom(|iters| timed_scopes(&profiler, Shape::Nested, iters))
    });
    group.finish();
    profiler.finish().expect("the scopes profiler finishes");
}

criterion_group!(benches, bench_scopes);

/// Nested scopes' (wall, CPU) medians per scope with their NVTX ranges on and off: NVTX
/// emission with no NVTX tool attached, in alternated runs, each on a profiler of its own.
struct NvtxRuns {
    on: Vec<(f64, Option<f64>)>,
    off: Vec<(f64, Option<f64>)>,
}

/// Most scopes in one run of the NVTX comparison: each chunk of scopes is followed by a pause
/// for the collector, so a shorter run keeps six profilers' runs to about a minute.
const NVTX_SCOPES_RUN: u64 = 600_000;

fn nvtx_runs(dir: &tempfile::TempDir) -> NvtxRuns {
    let mut runs = NvtxRuns {
        on: Vec::new(),
        off: Vec::new(),
    };
    for round in 0..6 {
        let on = round % 2 == 0;
        let p = scopes_profiler_nvtx(dir, on);
        let m = medians(NVTX_SCOPES_RUN, |n| timed_scopes(&p, Shape::Nested, n));
        p.finish().expect("the scopes profiler finishes");
        if on {
            runs.on.push(m);
        } else {
            runs.off.push(m);
        }
    }
    runs
}

/// The smaller of a case's wall and CPU medians, as the summary judges it.
fn judged((wall, cpu): (f64, Option<f64>)) -> f64 {
    cpu.map_or(wall, |c| c.min(wall))
}

/// The NVTX lines of the summary: each run's figure, and the difference of the medians over
/// runs against the 20 ns allowed.
fn print_nvtx(runs: &NvtxRuns) {
    let med = |v: &[(f64, Option<f64>)]| {
        let mut x: Vec<f64> = v.iter().map(|m| judged(*m)).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    for (label, v) in [
        ("  NVTX ranges on", &runs.on),
        ("  NVTX ranges off", &runs.off),
    ] {
        let figures: Vec<String> = v.iter().map(|m| format!("{:.1}", judged(*m))).collect();
        println!(
            "{label:<44} {} ns (nested scope, alternated runs)",
            figures.join(" / ")
        );
    }
    let cost = med(&runs.on) - med(&runs.off);
    println!(
        "{:<44} {:>7.1} ns {:>12} {:>5.0} ns {:>8}",
        "  NVTX emission per scope (median on - off)",
        cost,
        "",
        20.0,
        verdict(cost <= 20.0)
    );
}

/// Wall time of one summary run: the thread CPU clock advances in scheduler ticks (1 to 4 ms), so
/// a run must be long for it to be read to about 1 % (see [`common::thread_cpu_ns`]).
const RUN: Duration = Duration::from_millis(300);

/// Most scopes in one Scopes-level summary run (bounds the pauses and the collector's backlog).
const MAX_SCOPES_RUN: u64 = 3_000_000;

/// Median wall ns and median thread-CPU ns per scope over [`common::SAMPLES`] runs, each sized
/// to last about [`RUN`] and at most `max_run` scopes; `run(n)` does `n` scopes and returns the
/// wall time of its timed part.
fn medians(max_run: u64, mut run: impl FnMut(u64) -> Duration) -> (f64, Option<f64>) {
    let probe = 20_000;
    let t = run(probe).max(Duration::from_micros(1));
    let per_run = ((probe as f64 * RUN.as_secs_f64() / t.as_secs_f64()) as u64).max(probe);
    let per_run = per_run.min(max_run);
    wall_and_cpu_medians(|| run(per_run), |ns| ns / per_run as f64)
}

/// Measured ns next to the targets, from a timing loop independent of criterion's analysis.
/// Both figures are upper bounds: wall time counts the time the thread waited for a core on a
/// loaded machine; the thread's CPU time does not, but includes the untimed `step()` and pause
/// after each chunk. The verdict uses the smaller.
fn summary() {
    // `nvtx-only` (as the benchmark filter): only the NVTX comparison, for a short run.
    if std::env::args().any(|a| a == "nvtx-only") {
        let dir = tempfile::tempdir().expect("a temporary directory");
        print_nvtx(&nvtx_runs(&dir));
        return;
    }
    let disabled = medians(u64::MAX, |n| {
        let t0 = Instant::now();
        for _ in 0..n {
            disabled_once();
        }
        t0.elapsed()
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let profiler = scopes_profiler(&dir);
    let scopes = |shape| medians(MAX_SCOPES_RUN, |n| timed_scopes(&profiler, shape, n));
    let top = scopes(Shape::TopLevel);
    let nested = scopes(Shape::Nested);
    let owned = scopes(Shape::NestedOwned);
    let string_alone = medians(u64::MAX, timed_string_names);
    let clock = medians(u64::MAX, timed_clock_reads);
    let step = medians(30_000, |n| timed_steps(&profiler, n));
    let sparse_step = sparse_step_ns(&profiler, Duration::from_millis(1), 500);
    let trailer = profiler.finish().ok().map(|s| s.trailer);
    let nvtx = nvtx_runs(&dir);
    println!();
    println!(
        "scope overhead summary (median of {SAMPLES} runs; enter + drop on the calling thread)"
    );
    println!(
        "{:<44} {:>10} {:>12} {:>8} {:>8}",
        "case", "wall", "thread CPU", "target", ""
    );
    let rows = [
        ("disabled (no profiler running)", disabled, Some(5.0)),
        (
            "Level::Scopes, host time, top-level scope",
            top,
            Some(100.0),
        ),
        (
            "Level::Scopes, host time, nested scope",
            nested,
            Some(100.0),
        ),
        ("Level::Scopes, nested, owned String name", owned, None),
        ("  the String built and dropped alone", string_alone, None),
        ("a host clock read (Instant::now), alone", clock, None),
    ];
    for (case, measured, target) in rows {
        println!(
            "{case:<44} {:>7.1} ns {:>9} ns {:>8} {:>8}",
            measured.0,
            measured.1.map_or("-".into(), |c| format!("{c:.1}")),
            target.map_or("-".into(), |t| format!("{t:.0} ns")),
            target.map_or("", |t| verdict(judged(measured) <= t))
        );
    }
    // The caller builds the name and the scope frees it: the scope's own share is the
    // difference, measured side by side in this run.
    let owned_share = judged(owned) - judged(string_alone);
    println!(
        "{:<44} {:>7.1} ns {:>12} {:>5.0} ns {:>8}",
        "  the scope's share (owned minus String)",
        owned_share,
        "",
        100.0,
        verdict(owned_share <= 100.0)
    );
    print_nvtx(&nvtx);
    println!(
        "{:<44} {:>7.1} ns {:>9} ns {:>8} {:>8}",
        "profiler.step() at Level::Scopes",
        step.0,
        step.1.map_or("-".into(), |c| format!("{c:.1}")),
        "-",
        ""
    );
    println!(
        "{:<44} {:>7.1} ns {:>12} {:>8} {:>8}   (p90 {:.1} ns)",
        "profiler.step() once per ms, collector idle", sparse_step.0, "", "-", "", sparse_step.1
    );
    if let Some(t) = &trailer {
        // Scopes read the TSC where the kernel keeps time with it, else the clock read above.
        println!(
            "scopes read the {} clock (kernel clock source: {})",
            t.overhead.scope_clock,
            std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource"
            )
            .map_or_else(|e| format!("unknown ({e})"), |s| s.trim().to_string())
        );
        println!(
            "collector thread CPU over the Scopes-level runs: {:.1} ms; writer {:.1} ms; {} rows",
            t.overhead.collector_cpu_ns as f64 / 1e6,
            t.overhead.writer_cpu_ns as f64 / 1e6,
            t.iterations
        );
    }
}

fn main() {
    common::run(benches, summary);
}
