//! What PC sampling costs a training step: the step's wall time with no sampler, with sampling
//! enabled but outside its window (not started), inside a window sampled as one range (started
//! before its first step, stopped and read after its last), and inside a window of one range per
//! step (each step's samples stopped and read on their own), alternated in paired rounds in one
//! process, with the samples dropped.
//! `pc_sampling_overhead [ROUNDS] [STEPS] [--period N] [--sleep-ms N] [--hardware-mib N]
//! [--scratch-mib N] [--serialized] [--free-running]`; `--per-case`: each case's time per run
//! unsampled and sampled instead;
//! `--sweep`: the step inside a window under several buffer settings, alternated per round;
//! `--profiler`: the step's wall time in a profiled run (`Level::Timeline`) with PC sampling on
//! a window of iterations, inside and outside the window, against the same run without it
//! (`--keep PATH`: the last sampled run's ledger is left there).

use std::process::ExitCode;
use std::time::Instant;

use cudarc::driver::CudaContext;
use gpu_ledger::kernels::suite::stalls::{StallCase, StallCases};
use gpu_ledger::pcsampling::{PcSampler, PcSamplingConfig};

/// A step: a transpose, a reduction, a bucket sum and an FMA chain, then a synchronize.
const STEP: [StallCase; 4] = [
    StallCase::TransposePadded,
    StallCase::ReduceShuffle,
    StallCase::SpillFree,
    StallCase::FmaChain,
];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Off,
    Outside,
    Window,
    PerStep,
}

fn main() -> ExitCode {
    if !gpu_ledger::internals::driver_present() {
        eprintln!(
            "pc_sampling_overhead: no NVIDIA driver or GPU here; run it on a machine with one"
        );
        return ExitCode::FAILURE;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pc_sampling_overhead: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Each case's time per run without a sampler and inside one sampled range, alternated.
fn per_case(
    ctx: &std::sync::Arc<CudaContext>,
    cases: &mut StallCases,
    config: PcSamplingConfig,
    runs: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    for case in StallCase::ALL {
        let mut plain = Vec::new();
        let mut sampled = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            cases.run(case, runs)?;
            ctx.synchronize()?;
            plain.push(t0.elapsed().as_secs_f64() * 1e3 / f64::from(runs));
            let mut s = PcSampler::new(ctx, config)?;
            let t0 = Instant::now();
            s.collect(|| {
                cases
                    .run(case, runs)
                    .map_err(|e| gpu_ledger::Error::Config(format!("launch failed: {e}")))
            })?;
            sampled.push(t0.elapsed().as_secs_f64() * 1e3 / f64::from(runs));
        }
        let (p, q) = (median(&mut plain), median(&mut sampled));
        println!(
            "{:<26} per run: unsampled {p:.3} ms, sampled {q:.3} ms ({:.2}x)",
            case.kernel(),
            q / p
        );
    }
    Ok(())
}

/// The step inside a one-range window under buffer settings side by side, rotated per round,
/// each against the unsampled step of the same round.
fn sweep(
    ctx: &std::sync::Arc<CudaContext>,
    cases: &mut StallCases,
    base: PcSamplingConfig,
    rounds: u32,
    steps: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    const MIB: usize = 1 << 20;
    let hardware = |name: &'static str, bytes: usize| {
        (
            name,
            PcSamplingConfig {
                hardware_buffer_bytes: Some(bytes),
                ..base
            },
        )
    };
    let settings: Vec<(&str, PcSamplingConfig)> = vec![
        ("defaults", base),
        (
            "scratch 16 MiB",
            PcSamplingConfig {
                scratch_buffer_bytes: Some(16 * MIB),
                ..base
            },
        ),
        (
            "serialized",
            PcSamplingConfig {
                serialized: true,
                ..base
            },
        ),
        (
            "free running",
            PcSamplingConfig {
                free_running: true,
                ..base
            },
        ),
        (
            "free running, hardware 16 MiB",
            PcSamplingConfig {
                free_running: true,
                hardware_buffer_bytes: Some(16 * MIB),
                ..base
            },
        ),
        hardware("hardware 16 MiB", 16 * MIB),
        hardware("hardware 2 MiB", 2 * MIB),
        hardware("hardware 128 KiB", MIB / 8),
    ];
    let n = settings.len();
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut per_step: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut dropped = vec![0u64; n];
    let mut off = Vec::new();
    for round in 0..rounds as usize {
        let t0 = Instant::now();
        for _ in 0..steps {
            for c in STEP {
                cases.run(c, 1)?;
            }
            ctx.synchronize()?;
        }
        let plain = t0.elapsed().as_secs_f64() * 1e3 / f64::from(steps);
        off.push(plain);
        for k in 0..n {
            let i = (k + round) % n;
            let mut s = match PcSampler::new(ctx, settings[i].1) {
                Ok(s) => s,
                Err(e) => {
                    if round == 0 {
                        println!("sweep: {} refused: {e}", settings[i].0);
                    }
                    continue;
                }
            };
            let t0 = Instant::now();
            let p = s.collect(|| {
                for _ in 0..steps {
                    for c in STEP {
                        cases
                            .run(c, 1)
                            .map_err(|e| gpu_ledger::Error::Config(format!("launch: {e}")))?;
                    }
                    ctx.synchronize()?;
                }
                Ok(())
            })?;
            let ms = t0.elapsed().as_secs_f64() * 1e3 / f64::from(steps);
            dropped[i] += p.dropped_samples;
            per_step[i].push(ms);
            ratios[i].push(ms / plain);
        }
    }
    println!(
        "sweep: unsampled step median {:.3} ms over {rounds} rounds x {steps} steps",
        median(&mut off)
    );
    for i in 0..n {
        if ratios[i].is_empty() {
            continue;
        }
        let lo = ratios[i].iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios[i].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "sweep: {:<32} step {:.3} ms, {:.2}x unsampled (rounds {lo:.2}x .. {hi:.2}x), \
             dropped {}",
            settings[i].0,
            median(&mut per_step[i]),
            median(&mut ratios[i]),
            dropped[i]
        );
    }
    Ok(())
}

/// Rows' wall times, ms, of a profiled run of `steps` steps, with PC sampling on iterations
/// `steps / 3 .. steps / 3 + steps / 6` when `pc` is set; and the samples it dropped.
fn profiled_run(
    ctx: &std::sync::Arc<CudaContext>,
    cases: &mut StallCases,
    pc: Option<PcSamplingConfig>,
    steps: u32,
    path: &std::path::Path,
) -> Result<(Vec<f64>, u64), Box<dyn std::error::Error>> {
    use gpu_ledger::pcsampling::{PcSamplingSetup, PcSamplingWindow};
    use gpu_ledger::{Level, Profiler};
    let mut builder = Profiler::builder().level(Level::Timeline).ledger_path(path);
    if let Some(config) = pc {
        let mut setup = PcSamplingSetup::new(ctx);
        setup.config = config;
        // The kernels' modules were loaded before the profiler started: their cubins are given.
        setup.cubins.extend(
            gpu_ledger::kernels::compiled_cubins()
                .into_iter()
                .map(|c| c.1),
        );
        setup.texts.extend(gpu_ledger::kernels::source_files());
        setup.window = PcSamplingWindow {
            skip: u64::from(steps / 3),
            iterations: u64::from(steps / 6).max(1),
        };
        builder = builder.pc_sampling(setup);
    }
    let profiler = builder.start()?;
    for _ in 0..steps {
        for c in STEP {
            let _s = Profiler::scope(c.kernel());
            cases.run(c, 1)?;
        }
        ctx.synchronize()?;
        profiler.step();
    }
    profiler.finish()?;
    let ledger = gpu_ledger::read_ledger(path)?;
    let dropped = ledger
        .iterations
        .iter()
        .filter_map(|r| r.stalls.as_ref())
        .map(|s| s.dropped_samples)
        .sum();
    let walls = ledger
        .iterations
        .iter()
        .map(|r| r.host_wall_ns as f64 / 1e6)
        .collect();
    Ok((walls, dropped))
}

/// A profiled run with PC sampling on a window against one without, in rounds: the step inside
/// the window and after it, each against the same iterations of the run without sampling.
fn profiled(
    ctx: &std::sync::Arc<CudaContext>,
    cases: &mut StallCases,
    config: PcSamplingConfig,
    rounds: u32,
    steps: u32,
    keep: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    let steps = steps.max(12);
    let dir = std::env::temp_dir().join(format!("pc-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (first, end) = (steps / 3, steps / 3 + (steps / 6).max(1));
    let (mut inside, mut outside, mut dropped) = (Vec::new(), Vec::new(), 0);
    let (mut plain_in, mut sampled_in, mut plain_out, mut sampled_out) = (0.0, 0.0, 0.0, 0.0);
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut walls: [Vec<f64>; 2] = Default::default();
        for with_pc in order {
            let path = dir.join(format!("{with_pc}.jsonl"));
            let (w, d) = profiled_run(ctx, cases, with_pc.then_some(config), steps, &path)?;
            dropped += d;
            walls[usize::from(with_pc)] = w;
            match keep {
                Some(k) if with_pc => std::fs::rename(&path, k)?,
                _ => std::fs::remove_file(&path)?,
            }
        }
        let range_median = |w: &[f64], r: std::ops::Range<u32>| {
            let mut v: Vec<f64> = w[r.start as usize..r.end as usize].to_vec();
            median(&mut v)
        };
        // After the window, skipping one iteration that may pay for the disable.
        let after = (end + 1).min(steps - 1)..steps;
        let (pi, si) = (
            range_median(&walls[0], first..end),
            range_median(&walls[1], first..end),
        );
        let (po, so) = (
            range_median(&walls[0], after.clone()),
            range_median(&walls[1], after),
        );
        inside.push(si / pi);
        outside.push(so / po);
        plain_in += pi / f64::from(rounds);
        sampled_in += si / f64::from(rounds);
        plain_out += po / f64::from(rounds);
        sampled_out += so / f64::from(rounds);
    }
    let _ = std::fs::remove_dir(&dir);
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
    };
    let ((il, ih), (ol, oh)) = (spread(&inside), spread(&outside));
    println!(
        "profiled step, {rounds} rounds of {steps} iterations, window {first}..{end}: inside \
         {sampled_in:.3} ms against {plain_in:.3} ms without PC sampling, median {:+.1} % \
         (rounds {il:+.1} .. {ih:+.1} %); outside {sampled_out:.3} ms against {plain_out:.3} \
         ms, median {:+.2} % (rounds {ol:+.2} .. {oh:+.2} %); samples dropped: {dropped}",
        (median(&mut inside) - 1.0) * 100.0,
        (median(&mut outside) - 1.0) * 100.0
    );
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let positional: Vec<u32> = args[1..]
        .iter()
        .take_while(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let rounds = positional.first().copied().unwrap_or(10);
    let steps = positional.get(1).copied().unwrap_or(20);
    let period = args
        .iter()
        .position(|a| a == "--period")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse::<u32>())
        .transpose()?;
    let sleep_ms = args
        .iter()
        .position(|a| a == "--sleep-ms")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse::<u32>())
        .transpose()?;
    let ctx = CudaContext::new(0)?;
    let mut cases = StallCases::new(&ctx)?;
    let step = |cases: &mut StallCases| -> Result<(), Box<dyn std::error::Error>> {
        for c in STEP {
            cases.run(c, 1)?;
        }
        Ok(())
    };
    for _ in 0..5 {
        step(&mut cases)?;
    }
    ctx.synchronize()?;
    let config = PcSamplingConfig {
        period_log2: period,
        worker_sleep_ms: sleep_ms,
        hardware_buffer_bytes: args
            .iter()
            .position(|a| a == "--hardware-mib")
            .and_then(|i| args.get(i + 1))
            .map(|s| s.parse::<usize>().map(|m| m << 20))
            .transpose()?,
        scratch_buffer_bytes: args
            .iter()
            .position(|a| a == "--scratch-mib")
            .and_then(|i| args.get(i + 1))
            .map(|s| s.parse::<usize>().map(|m| m << 20))
            .transpose()?,
        serialized: args.iter().any(|a| a == "--serialized"),
        free_running: args.iter().any(|a| a == "--free-running"),
    };
    if args.iter().any(|a| a == "--profiler") {
        let keep = args
            .iter()
            .position(|a| a == "--keep")
            .and_then(|i| args.get(i + 1));
        return profiled(
            &ctx,
            &mut cases,
            config,
            rounds,
            steps,
            keep.map(String::as_str),
        );
    }
    if args.iter().any(|a| a == "--sweep") {
        return sweep(&ctx, &mut cases, config, rounds, steps);
    }
    if args.iter().any(|a| a == "--per-case") {
        return per_case(&ctx, &mut cases, config, steps);
    }
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut ratios: [Vec<f64>; 4] = Default::default();
    let (mut dropped, mut samples) = (0u64, 0u64);
    let launch_step = |cases: &mut StallCases| -> gpu_ledger::Result<()> {
        for c in STEP {
            cases
                .run(c, 1)
                .map_err(|e| gpu_ledger::Error::Config(format!("launch failed: {e}")))?;
        }
        Ok(())
    };
    for round in 0..rounds {
        let mut order = [Mode::Off, Mode::Outside, Mode::Window, Mode::PerStep];
        if round % 2 == 1 {
            order.reverse();
        }
        let mut per = [0.0f64; 4];
        for mode in order {
            let mut sampler = match mode {
                Mode::Off => None,
                _ => Some(PcSampler::new(&ctx, config)?),
            };
            let t0 = Instant::now();
            match (&mut sampler, mode) {
                (Some(s), Mode::Window) => {
                    let p = s.collect(|| {
                        for _ in 0..steps {
                            launch_step(&mut cases)?;
                            ctx.synchronize()?;
                        }
                        Ok(())
                    })?;
                    dropped += p.dropped_samples;
                    samples += p.total_samples;
                }
                (Some(s), Mode::PerStep) => {
                    for _ in 0..steps {
                        let p = s.collect(|| launch_step(&mut cases))?;
                        dropped += p.dropped_samples;
                        samples += p.total_samples;
                    }
                }
                _ => {
                    for _ in 0..steps {
                        step(&mut cases)?;
                        ctx.synchronize()?;
                    }
                }
            }
            per[mode as usize] = t0.elapsed().as_secs_f64() * 1e3 / f64::from(steps);
            drop(sampler.take());
        }
        for m in 0..4 {
            times[m].push(per[m]);
            ratios[m].push(per[m] / per[0]);
        }
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    println!(
        "step (median of {rounds} rounds x {steps} steps): no sampler {:.3} ms, outside the \
         window {:.3} ms, inside as one range {:.3} ms, inside one range per step {:.3} ms",
        median(&mut times[0]),
        median(&mut times[1]),
        median(&mut times[2]),
        median(&mut times[3])
    );
    for (m, what) in [
        (1, "outside the window"),
        (2, "inside, the window one range"),
        (3, "inside, one range per step"),
    ] {
        let (lo, hi) = spread(&ratios[m]);
        println!(
            "slowdown {what}: median {:+.2} % (rounds {:+.2} .. {:+.2} %)",
            (median(&mut ratios[m]) - 1.0) * 100.0,
            (lo - 1.0) * 100.0,
            (hi - 1.0) * 100.0
        );
    }
    println!(
        "period {}, worker sleep {}; samples inside the windows: {samples}, dropped: {dropped}",
        period.map_or("CUPTI's default".to_string(), |p| format!("2^{p} cycles")),
        sleep_ms.map_or("CUPTI's default".to_string(), |ms| format!("{ms} ms"))
    );
    Ok(())
}
