//! What PC sampling costs a training step: the step's wall time with no sampler, with sampling
//! enabled but outside its window (not started), inside a window sampled as one range (started
//! before its first step, stopped and read after its last), and inside a window of one range per
//! step (each step's samples stopped and read on their own), alternated in paired rounds in one
//! process, with the samples dropped.
//! `pc_sampling_overhead [ROUNDS] [STEPS] [--period N] [--sleep-ms N] [--hardware-mib N]`;
//! `--per-case`: each case's time per run unsampled and sampled instead.

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
    };
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
