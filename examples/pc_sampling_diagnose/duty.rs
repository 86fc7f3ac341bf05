//! `--duty`: the training loop's step (`examples/common/training_model.rs`) under the timeline,
//! without PC sampling and with duty-cycled sampling, in paired rounds (the order alternated),
//! each run's loop timed whole; then one run with a continuous window of iterations sampled, and
//! the top kernels' dominant stall reasons of the duty-cycled run against it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gpu_ledger::kernels::suite::experiment::open_device;
use gpu_ledger::ledger::stalls::{reason_shares, RunStalls};
use gpu_ledger::pcsampling::{total_variation, DutyCycle, PcSamplingSetup, PcSamplingWindow};
use gpu_ledger::{read_ledger, Level, Profiler};

#[path = "../common/training_model.rs"]
#[allow(dead_code)]
mod training_model;
use training_model::Model;

use crate::{median, Args, Res};

/// How one run samples.
#[derive(Clone, Copy, PartialEq)]
enum Sampling {
    Off,
    Duty,
    Window,
}

/// One run: the loop's wall time (s), the time to start the profiler (s), and the trailer's
/// profile.
struct RunResult {
    loop_s: f64,
    start_s: f64,
    stalls: Option<RunStalls>,
    warnings: Vec<String>,
}

fn setup(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    args: &Args,
    how: Sampling,
) -> Option<PcSamplingSetup> {
    let mut s = PcSamplingSetup::new(ctx);
    // The model's kernels were compiled and loaded before the profiler starts.
    s.cubins.extend(
        gpu_ledger::kernels::compiled_cubins()
            .into_iter()
            .map(|c| c.1),
    );
    s.texts.extend(gpu_ledger::kernels::source_files());
    match how {
        Sampling::Off => None,
        Sampling::Duty => Some(s.duty_cycle(DutyCycle {
            budget: args.budget,
            expected_iterations: Some(args.iters),
            ..DutyCycle::default()
        })),
        Sampling::Window => {
            s.window = PcSamplingWindow {
                skip: 5,
                iterations: args.window,
            };
            Some(s)
        }
    }
}

fn one_run(model: &mut Model, args: &Args, how: Sampling, path: &Path) -> Res<RunResult> {
    let ctx = model.stream.context().clone();
    let mut builder = Profiler::builder().level(Level::Timeline).ledger_path(path);
    if let Some(s) = setup(&ctx, args, how) {
        builder = builder.pc_sampling(s);
    }
    let t0 = Instant::now();
    let profiler = builder.start()?;
    let start_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    for _ in 0..args.iters {
        model.step(false, true)?;
        {
            let _s = Profiler::scope("log");
            model.read_loss()?;
        }
        profiler.step();
    }
    let loop_s = t0.elapsed().as_secs_f64();
    profiler.finish()?;
    let ledger = read_ledger(path)?;
    let trailer = ledger.trailer.unwrap_or_default();
    Ok(RunResult {
        loop_s,
        start_s,
        stalls: trailer.stalls,
        warnings: trailer.warnings,
    })
}

fn dominant(counts: &BTreeMap<String, u64>) -> (String, f64) {
    reason_shares(counts)
        .into_iter()
        .next()
        .unwrap_or_else(|| ("none".into(), 0.0))
}

fn as_f64(c: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    c.iter().map(|(k, v)| (k.clone(), *v as f64)).collect()
}

/// The top kernels of the continuous run, each dominant reason beside the duty-cycled run's.
fn compare(window: &RunStalls, duty: &RunStalls) {
    println!(
        "top kernels of the continuous window ({} windows, {} samples) against the duty-cycled \
         run ({} windows, {} samples):",
        window.windows, window.samples, duty.windows, duty.samples
    );
    let (mut same, mut top) = (0, 0);
    for k in window.kernels.iter().filter(|k| k.top) {
        top += 1;
        let (wr, ws) = dominant(&k.by_reason);
        let d = duty.kernels.iter().find(|d| d.name == k.name);
        let (dr, dshare, dn, dw) = d.map_or(("none".into(), 0.0, 0, 0), |d| {
            let (r, s) = dominant(&d.by_reason);
            (r, s, d.samples, d.windows)
        });
        let tv = d.map_or(1.0, |d| {
            total_variation(&as_f64(&k.by_reason), &as_f64(&d.by_reason))
        });
        same += usize::from(wr == dr);
        println!(
            "  {:<48} {:5.1} % of device time | continuous: {wr} {:.1} % of {} | duty: {dr} {:.1} \
             % of {dn} in {dw} windows | TV {tv:.3} | {}",
            gpu_ledger::analysis::families::display_name(&k.name)
                .chars()
                .take(48)
                .collect::<String>(),
            k.device_share * 100.0,
            ws * 100.0,
            k.samples,
            dshare * 100.0,
            if wr == dr { "same" } else { "DIFFERENT" }
        );
    }
    println!("{same} of {top} top kernels have the same dominant stall reason");
}

pub(crate) fn run(args: &Args) -> Res<()> {
    let dev = open_device(0)?;
    let mut model = Model::new(&dev.ctx, dev.gpu.sm_count, dev.stream.clone())?;
    model.step(false, true)?;
    model.read_loss()?;
    let dir = PathBuf::from(args.keep.as_deref().unwrap_or("pc-duty-ledgers"));
    std::fs::create_dir_all(&dir)?;
    let (mut ratios, mut off_s, mut duty_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_duty = None;
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [Sampling::Off, Sampling::Duty]
        } else {
            [Sampling::Duty, Sampling::Off]
        };
        let mut got = [0.0f64; 2];
        for how in order {
            let name = if how == Sampling::Duty {
                "duty.jsonl"
            } else {
                "off.jsonl"
            };
            let r = one_run(&mut model, args, how, &dir.join(name))?;
            let i = usize::from(how == Sampling::Duty);
            got[i] = r.loop_s;
            println!(
                "round {round}: {} loop {:.3} s (profiler start {:.3} s){}",
                if i == 1 { "duty-cycled" } else { "off        " },
                r.loop_s,
                r.start_s,
                r.stalls
                    .as_ref()
                    .and_then(|s| s.duty_cycle.as_ref())
                    .map(|d| format!(
                        ", {} windows, measured cost {:.3} % of the run, covered {}",
                        d.windows_opened,
                        d.cost_fraction() * 100.0,
                        d.covered
                    ))
                    .unwrap_or_default()
            );
            for w in &r.warnings {
                println!("    trailer warning: {w}");
            }
            if i == 1 {
                last_duty = r.stalls;
            }
        }
        off_s.push(got[0]);
        duty_s.push(got[1]);
        ratios.push(got[1] / got[0] - 1.0);
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!(
        "duty cycle (budget {:.2} %, {} iterations a run): loop {:.3} s against {:.3} s without \
         PC sampling (medians of {} paired rounds): cost {:+.3} % (rounds {:+.3} .. {:+.3} %)",
        args.budget * 100.0,
        args.iters,
        median(&mut duty_s),
        median(&mut off_s),
        args.rounds,
        median(&mut ratios) * 100.0,
        lo * 100.0,
        hi * 100.0
    );
    let w = one_run(
        &mut model,
        args,
        Sampling::Window,
        &dir.join("window.jsonl"),
    )?;
    println!(
        "continuous window: iterations 5..{} sampled, loop {:.3} s",
        5 + args.window,
        w.loop_s
    );
    match (w.stalls, last_duty) {
        (Some(window), Some(duty)) => compare(&window, &duty),
        (a, b) => println!(
            "no comparison: the continuous run's profile {}, the duty-cycled run's {}",
            if a.is_some() {
                "is there"
            } else {
                "is missing"
            },
            if b.is_some() {
                "is there"
            } else {
                "is missing"
            }
        ),
    }
    if args.keep.is_none() {
        for name in ["off.jsonl", "duty.jsonl", "window.jsonl"] {
            let _ = std::fs::remove_file(dir.join(name));
        }
        let _ = std::fs::remove_dir(&dir);
    } else {
        println!("ledgers left in {} (off, duty, window)", dir.display());
    }
    Ok(())
}
