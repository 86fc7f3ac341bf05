//! `--perturbation`: what tracing does to the GPU's own time. Batches of back-to-back kernels of
//! one shape each (grid size, kernel length), queued behind a spin so that the GPU runs them
//! without waiting for the host, timed by events under `none`, `raw-cupti` and `timeline`,
//! alternated over rounds; then a GPU-bound pipeline of short kernels, timed per step. It prints,
//! per shape, what each tracer added per kernel, how much of the timeline's is a longer kernel
//! (CUPTI's own duration against the untraced length) and how much a gap between kernels, beside
//! the estimate the timeline's start-up calibration gives; and for the pipeline, the measured
//! slowdown per step against the rows' `tracing_added_ns`. `tl-idle` is a sampled timeline whose
//! traced iteration is the warm-up before the batches: whether kernels run as fast as untraced
//! ones once tracing has been switched off again, which a sampled timeline's untraced iterations
//! rely on.

use std::path::Path;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use gpu_ledger::ledger::schema::TracingCalibration;
use gpu_ledger::{Level, Profiler, TimelineSampling};

use super::raw::RawSession;
use super::table::Paired;
use super::{Args, Gpu, Result, VADD_HUGE, VADD_LARGE, VADD_SMALL, VADD_TINY};
use gpu_ledger::internals::LoadedCupti;

/// Kernels per timed batch.
const BATCH: u32 = 100;
/// The spin each batch queues behind, µs: longer than launching the batch.
const HEAD_US: u32 = 3_000;
/// Pipeline steps per configuration and round.
const PIPELINE_STEPS: usize = 30;
/// The pause after the warm-up iteration: longer than the collector's tick, so that a sampled
/// timeline's collector has switched tracing off before the first batch.
const SWITCH_PAUSE_MS: u64 = 20;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `spin_kernel` on `grid` blocks of 64 threads, each spinning `us` µs.
    Spin { grid: u32, us: u32 },
    /// The bundled vector add over `n` floats.
    Vadd { n: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    label: &'static str,
    kind: Kind,
}

fn shapes(sms: u32) -> Vec<Shape> {
    let spin = |label, grid, us| Shape {
        label,
        kind: Kind::Spin { grid, us },
    };
    vec![
        spin("spin 1 block, 5 µs", 1, 5),
        spin("spin 1 block, 50 µs", 1, 50),
        spin("spin 1/SM, 5 µs", sms, 5),
        spin("spin 1/SM, 50 µs", sms, 50),
        spin("spin 1/SM, 200 µs", sms, 200),
        spin("spin 8/SM, 20 µs", 8 * sms, 20),
        // 64-thread blocks, 32 of which an SM holds at once untraced: 16 and 32 per SM tell
        // whether tracing lowers that number.
        spin("spin 16/SM, 5 µs", 16 * sms, 5),
        spin("spin 32/SM, 5 µs", 32 * sms, 5),
        spin("spin 128/SM, 5 µs", 128 * sms, 5),
        // 1 Mi fits in the L2 and 64 Mi is far beyond it: whether what tracing adds to a
        // vector add goes with its blocks or with the L2 hits of the run before.
        Shape {
            label: "vector add 1 Mi",
            kind: Kind::Vadd { n: VADD_TINY },
        },
        Shape {
            label: "vector add 4 Mi",
            kind: Kind::Vadd { n: VADD_SMALL },
        },
        Shape {
            label: "vector add 16 Mi",
            kind: Kind::Vadd { n: VADD_LARGE },
        },
        Shape {
            label: "vector add 64 Mi",
            kind: Kind::Vadd { n: VADD_HUGE },
        },
    ]
}

impl Shape {
    fn launch(&self, gpu: &mut Gpu) -> Result<()> {
        match self.kind {
            Kind::Spin { grid, us } => {
                gpu.launch_spin_cycles((f64::from(us) * gpu.cycles_per_us) as i64, grid)
            }
            Kind::Vadd { n } => gpu.launch_vadd(n),
        }
    }

    /// Blocks of one launch.
    fn blocks(&self) -> u64 {
        match self.kind {
            Kind::Spin { grid, .. } => u64::from(grid),
            Kind::Vadd { n } => n.div_ceil(256),
        }
    }

    /// The kernel's name in the ledger.
    fn kernel_name(&self) -> &'static str {
        match self.kind {
            Kind::Spin { .. } => "spin_kernel",
            Kind::Vadd { .. } => "vector_add",
        }
    }
}

/// The GPU-bound pipeline's step: short kernels back to back, one synchronize at its end.
fn pipeline_step(gpu: &mut Gpu) -> Result<()> {
    for _ in 0..8 {
        gpu.launch_vadd(VADD_SMALL)?;
        gpu.launch_spin(10)?;
        gpu.launch_spin_cycles((20.0 * gpu.cycles_per_us) as i64, 8 * gpu.sms)?;
        gpu.launch_vadd(VADD_LARGE)?;
    }
    gpu.stream.synchronize()?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tracer {
    None,
    Raw,
    Timeline,
    /// A sampled timeline that traces the warm-up iteration alone.
    Idle,
}

impl Tracer {
    const ALL: [Tracer; 4] = [Tracer::None, Tracer::Raw, Tracer::Timeline, Tracer::Idle];
    fn label(self) -> &'static str {
        match self {
            Tracer::None => "none",
            Tracer::Raw => "raw-cupti",
            Tracer::Timeline => "timeline",
            Tracer::Idle => "tl-idle",
        }
    }
}

/// One configuration's round: ns per kernel of each shape, ns per pipeline step, and from the
/// timeline's ledger CUPTI's mean kernel duration per shape, the pipeline rows' estimate and
/// the calibration.
#[derive(Default)]
struct RoundResult {
    per_kernel_ns: Vec<f64>,
    step_ns: Vec<f64>,
    cupti_ns: Vec<Option<f64>>,
    pipeline_estimate_ns: Vec<f64>,
    calibration: Option<TracingCalibration>,
}

fn run_round(
    gpu: &mut Gpu,
    lib: &'static LoadedCupti,
    tracer: Tracer,
    shapes: &[Shape],
    ledger: &Path,
) -> Result<RoundResult> {
    let raw = (tracer == Tracer::Raw)
        .then(|| RawSession::start(lib))
        .transpose()?;
    let profiler = matches!(tracer, Tracer::Timeline | Tracer::Idle)
        .then(|| {
            let b = Profiler::builder()
                .level(Level::Timeline)
                .ledger_path(ledger);
            if tracer == Tracer::Idle {
                b.sample_timeline(TimelineSampling::window(0..1)).start()
            } else {
                b.start()
            }
        })
        .transpose()?;
    let mut out = RoundResult::default();
    // The warm-up iteration, under every tracer alike: each shape once (traced by `tl-idle`),
    // then a pause in which its collector switches tracing off.
    for shape in shapes {
        shape.launch(gpu)?;
    }
    gpu.stream.synchronize()?;
    if let Some(p) = &profiler {
        p.step();
    }
    std::thread::sleep(std::time::Duration::from_millis(SWITCH_PAUSE_MS));
    for shape in shapes {
        gpu.launch_spin_cycles((f64::from(HEAD_US) * gpu.cycles_per_us) as i64, 1)?;
        let e0 = gpu
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        for _ in 0..BATCH {
            shape.launch(gpu)?;
        }
        let e1 = gpu
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        gpu.stream.synchronize()?;
        out.per_kernel_ns
            .push(f64::from(e0.elapsed_ms(&e1)?) * 1e6 / f64::from(BATCH));
        if let Some(p) = &profiler {
            p.step();
        }
    }
    for _ in 0..PIPELINE_STEPS {
        let t0 = Instant::now();
        pipeline_step(gpu)?;
        out.step_ns.push(t0.elapsed().as_nanos() as f64);
        if let Some(p) = &profiler {
            p.step();
        }
    }
    if let Some(raw) = raw {
        raw.stop()?;
    }
    if let Some(p) = profiler {
        p.finish()?;
        let l = gpu_ledger::read_ledger(ledger)?;
        out.calibration = l.header.tracing_calibration.clone();
        for (i, shape) in shapes.iter().enumerate() {
            // Row 0 is the warm-up iteration.
            let mean = l.iterations.get(i + 1).and_then(|r| {
                r.kernels
                    .iter()
                    .find(|g| {
                        g.name.contains(shape.kernel_name())
                            && g.shape.grid_blocks() == shape.blocks()
                            && g.count >= u64::from(BATCH)
                    })
                    .map(|g| g.total_ns as f64 / g.count as f64)
            });
            out.cupti_ns.push(mean);
        }
        out.pipeline_estimate_ns = l.iterations[shapes.len() + 1..]
            .iter()
            .filter(|r| r.complete && !r.kernels.is_empty())
            .filter_map(|r| r.tracing_added_ns.map(|x| x as f64))
            .collect();
    }
    Ok(out)
}

fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

pub(super) fn perturbation(
    gpu: &mut Gpu,
    lib: &'static LoadedCupti,
    args: &Args,
    dir: &Path,
) -> Result<()> {
    let shapes = shapes(gpu.sms);
    eprintln!(
        "overhead --perturbation: {} ({} SMs); {} rounds of {}; {BATCH} kernels per batch behind a \
         {HEAD_US} µs spin; pipeline of {PIPELINE_STEPS} steps",
        gpu.name,
        gpu.sms,
        args.rounds,
        Tracer::ALL.map(Tracer::label).join(", ")
    );
    // Warm-up: modules, CUPTI's first start.
    for t in Tracer::ALL {
        run_round(gpu, lib, t, &shapes, &dir.join("perturbation-warmup.jsonl"))?;
    }
    let mut results: Vec<Vec<RoundResult>> = Tracer::ALL.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        for k in 0..Tracer::ALL.len() {
            let ti = (k + round) % Tracer::ALL.len();
            let ledger = dir.join(format!("perturbation-{round}.jsonl"));
            let r = run_round(gpu, lib, Tracer::ALL[ti], &shapes, &ledger)?;
            results[ti].push(r);
        }
    }
    let [none, raw, timeline, idle] = [&results[0], &results[1], &results[2], &results[3]];
    // Paired by round: each round ran all three close together in time.
    let added = |traced: &[RoundResult], i: usize| -> Vec<f64> {
        traced
            .iter()
            .zip(none)
            .map(|(t, n)| t.per_kernel_ns[i] - n.per_kernel_ns[i])
            .collect()
    };
    let calibration = timeline.iter().find_map(|r| r.calibration.clone());
    println!("\nper kernel, µs (medians over rounds; added: paired by round, with the range)");
    println!(
        "{:<22} {:>8} {:>10} {:>22} {:>22} {:>10} {:>10} {:>8} {:>10} {:>8} {:>22}",
        "shape",
        "blocks",
        "untraced",
        "raw-cupti added",
        "timeline added",
        "CUPTI dur",
        "longer by",
        "gap",
        "estimate",
        "est÷meas",
        "tl-idle added"
    );
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{:+.2} ({:+.2}..{:+.2})",
            median(v) / 1e3,
            lo / 1e3,
            hi / 1e3
        )
    };
    for (i, s) in shapes.iter().enumerate() {
        let base: Vec<f64> = none.iter().map(|r| r.per_kernel_ns[i]).collect();
        let tl = added(timeline, i);
        let cupti: Vec<f64> = timeline.iter().filter_map(|r| r.cupti_ns[i]).collect();
        let longer = median(&cupti) - median(&base);
        let est = calibration
            .as_ref()
            .map_or(f64::NAN, |c| c.added_ns(1, s.blocks()));
        println!(
            "{:<22} {:>8} {:>10.2} {:>22} {:>22} {:>10.2} {:>10.2} {:>8.2} {:>10.2} {:>8.2} {:>22}",
            s.label,
            s.blocks(),
            median(&base) / 1e3,
            range(&added(raw, i)),
            range(&tl),
            median(&cupti) / 1e3,
            longer / 1e3,
            (median(&tl) - longer) / 1e3,
            est / 1e3,
            est / median(&tl),
            range(&added(idle, i))
        );
    }
    if let Some(c) = &calibration {
        println!(
            "\ncalibration (the timeline's start, median of {} rounds): {:.0} ns per kernel \
             ({:.0} to {:.0}) + {:.4} ns per block ({:.4} to {:.4}; copy {:.4}, add {:.4}); spin \
             check: {:.1} µs kernels on {} blocks gained {:.2} µs each; took {:.1} ms",
            c.rounds,
            c.per_kernel_ns,
            c.per_kernel_range_ns[0],
            c.per_kernel_range_ns[1],
            c.per_block_ns,
            c.per_block_range_ns[0],
            c.per_block_range_ns[1],
            c.per_block_copy_ns.unwrap_or(f64::NAN),
            c.per_block_add_ns.unwrap_or(f64::NAN),
            c.spin_ns / 1e3,
            c.spin_grid,
            c.spin_added_ns / 1e3,
            c.took_ns as f64 / 1e6
        );
    } else {
        println!("\ncalibration: none in the timeline's ledgers (see their header warnings)");
    }
    // The pipeline: per-step medians per round, paired by round.
    let step = |r: &RoundResult| median(&r.step_ns);
    let diffs = |traced: &[RoundResult]| -> Vec<f64> {
        traced
            .iter()
            .zip(none)
            .map(|(t, n)| step(t) - step(n))
            .collect()
    };
    let base: Vec<f64> = none.iter().map(step).collect();
    println!(
        "\nGPU-bound pipeline (32 kernels of 10 to 45 µs per step, one synchronize): untraced \
         {:.1} µs per step",
        median(&base) / 1e3
    );
    for (label, traced) in [
        ("raw-cupti", raw),
        ("timeline", timeline),
        ("tl-idle", idle),
    ] {
        if let Some(p) = Paired::of(&diffs(traced)) {
            println!(
                "  {label} - none, paired by round: {}",
                p.describe(1e-3, 2, " µs per step")
            );
        }
    }
    let measured = median(&diffs(timeline));
    let estimates: Vec<f64> = timeline
        .iter()
        .flat_map(|r| r.pipeline_estimate_ns.iter().copied())
        .collect();
    let estimate = median(&estimates);
    let ratio = estimate / measured;
    println!(
        "  the rows' tracing_added_ns: {:.2} µs per step (median of {} rows) against the measured \
         {:.2} µs: ratio {ratio:.2}; target within 25 %: {}",
        estimate / 1e3,
        estimates.len(),
        measured / 1e3,
        if (ratio - 1.0).abs() <= 0.25 {
            "ok"
        } else {
            "MISSED"
        }
    );
    println!(
        "{} on {}; {} rounds",
        Tracer::ALL.map(Tracer::label).join(", "),
        gpu.name,
        args.rounds
    );
    Ok(())
}
