//! What PC sampling costs a training step: the step's wall time with no sampler, with sampling
//! enabled but outside its window (not started), and inside the window (every step sampled,
//! synchronized, stopped and read), alternated in paired rounds in one process, with the
//! samples dropped. `pc_sampling_overhead [ROUNDS] [STEPS] [--period N]`.

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
    Inside,
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
        ..PcSamplingConfig::default()
    };
    let (mut off, mut outside, mut inside) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratio_out, mut ratio_in) = (Vec::new(), Vec::new());
    let (mut dropped, mut samples) = (0u64, 0u64);
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Mode::Off, Mode::Outside, Mode::Inside]
        } else {
            [Mode::Inside, Mode::Outside, Mode::Off]
        };
        let mut per = [0.0f64; 3];
        for mode in order {
            let mut sampler = match mode {
                Mode::Off => None,
                _ => Some(PcSampler::new(&ctx, config)?),
            };
            let t0 = Instant::now();
            for _ in 0..steps {
                match (&mut sampler, mode) {
                    (Some(s), Mode::Inside) => {
                        let p = s.collect(|| {
                            for c in STEP {
                                cases.run(c, 1).map_err(|e| {
                                    gpu_ledger::Error::Config(format!("launch failed: {e}"))
                                })?;
                            }
                            Ok(())
                        })?;
                        dropped += p.dropped_samples;
                        samples += p.total_samples;
                    }
                    _ => {
                        step(&mut cases)?;
                        ctx.synchronize()?;
                    }
                }
            }
            let per_step_ms = t0.elapsed().as_secs_f64() * 1e3 / f64::from(steps);
            let slot = match mode {
                Mode::Off => 0,
                Mode::Outside => 1,
                Mode::Inside => 2,
            };
            per[slot] = per_step_ms;
            drop(sampler.take());
        }
        off.push(per[0]);
        outside.push(per[1]);
        inside.push(per[2]);
        ratio_out.push(per[1] / per[0]);
        ratio_in.push(per[2] / per[0]);
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (ol, oh) = spread(&ratio_out);
    let (il, ih) = spread(&ratio_in);
    println!(
        "step (median of {rounds} rounds x {steps} steps): no sampler {:.3} ms, outside the \
         window {:.3} ms, inside {:.3} ms",
        median(&mut off),
        median(&mut outside),
        median(&mut inside)
    );
    println!(
        "slowdown outside the window: median {:+.2} % (rounds {:+.2} .. {:+.2} %)",
        (median(&mut ratio_out) - 1.0) * 100.0,
        (ol - 1.0) * 100.0,
        (oh - 1.0) * 100.0
    );
    println!(
        "slowdown inside the window: median {:+.2} % (rounds {:+.2} .. {:+.2} %), period {}",
        (median(&mut ratio_in) - 1.0) * 100.0,
        (il - 1.0) * 100.0,
        (ih - 1.0) * 100.0,
        period.map_or("CUPTI's default".to_string(), |p| format!("2^{p} cycles"))
    );
    println!("samples inside the window: {samples}, dropped: {dropped}");
    Ok(())
}
