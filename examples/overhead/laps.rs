//! `--step-laps`: where in workload (c)'s loop each configuration's cost falls, step by step.

use std::io::Write;
use std::path::Path;

use super::table::Paired;
use super::{Config, Result};

/// One run of workload (c): each step's host time, its `profiler.step()` included.
pub(super) struct Laps {
    /// The iteration the first step belonged to (0 without a profiler).
    pub(super) first_iteration: u64,
    /// Each step's host time, ns.
    pub(super) ns: Vec<u64>,
}

/// Steps printed one by one: those whose mean difference against `none` is largest.
const SHOWN: usize = 6;

/// Mean and the half-width of its normal 95 % interval.
fn mean_interval(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 1.96 * (var / n).sqrt())
}

/// For each configuration against `none`, paired by round: the steps whose mean added time is
/// largest, one by one with the iteration each ended, then the other steps' mean, and the sum
/// over all steps (the loop's whole difference, split by where it falls). Means, not medians,
/// so that the parts add up to the whole.
pub(super) fn print_laps(configs: &[Config], laps: &[Vec<Laps>]) {
    let Some(none) = configs.iter().position(|c| *c == Config::None) else {
        return;
    };
    for (ci, config) in configs.iter().enumerate() {
        if ci == none {
            continue;
        }
        let pairs = paired_runs(&laps[ci], &laps[none], 0);
        let Some(&(first, _)) = pairs.first() else {
            continue;
        };
        let steps = first.ns.len();
        if pairs
            .iter()
            .any(|(a, _)| a.first_iteration != first.first_iteration)
        {
            println!(
                "step laps, {}: the loop began at different iterations in different rounds; \
                 not compared step by step",
                config.label()
            );
            continue;
        }
        // Per step, the per-round differences, µs.
        let per_step: Vec<Vec<f64>> = (0..steps)
            .map(|i| {
                pairs
                    .iter()
                    .map(|(a, b)| (a.ns[i] as f64 - b.ns[i] as f64) / 1e3)
                    .collect()
            })
            .collect();
        let stats: Vec<(f64, f64)> = per_step.iter().map(|d| mean_interval(d)).collect();
        let base: f64 = (0..steps)
            .map(|i| pairs.iter().map(|(_, b)| b.ns[i] as f64).sum::<f64>() / 1e3)
            .sum::<f64>()
            / pairs.len() as f64;
        let total: f64 = stats.iter().map(|s| s.0).sum();
        println!(
            "step laps, {} − none, paired over {} rounds (µs a step, mean ± 95 % half-width; \
             step i ends iteration {} + i):",
            config.label(),
            pairs.len(),
            first.first_iteration
        );
        let mut order: Vec<usize> = (0..steps).collect();
        order.sort_by(|&a, &b| stats[b].0.total_cmp(&stats[a].0));
        let shown = &order[..SHOWN.min(steps)];
        for &i in shown {
            println!(
                "  step {i:>4} (iteration {:>4}): {:+9.2} ± {:.2}",
                first.first_iteration + i as u64,
                stats[i].0,
                stats[i].1
            );
        }
        let rest: Vec<usize> = order[shown.len()..].to_vec();
        if !rest.is_empty() {
            // Per round, the rest's mean a step, so that its interval is over rounds.
            let rest_means: Vec<f64> = (0..pairs.len())
                .map(|r| rest.iter().map(|&i| per_step[i][r]).sum::<f64>() / rest.len() as f64)
                .collect();
            let (m, h) = mean_interval(&rest_means);
            println!(
                "  the other {} steps: {m:+.3} ± {h:.3} a step ({:+.1} in all)",
                rest.len(),
                m * rest.len() as f64
            );
        }
        println!(
            "  all {steps} steps: {total:+.1} µs over a loop of {base:.0} µs ({:+.3} %); the {} \
             steps above: {:+.1} µs",
            100.0 * total / base,
            shown.len(),
            shown.iter().map(|&i| stats[i].0).sum::<f64>()
        );
        // The first step pays what the profiler's start left behind (its calibration's kernels
        // ran just before the warm-up), once a run, not once every K iterations.
        if steps > 1 {
            let base_rest: f64 = (1..steps)
                .map(|i| pairs.iter().map(|(_, b)| b.ns[i] as f64).sum::<f64>() / 1e3)
                .sum::<f64>()
                / pairs.len() as f64;
            let rest_total = total - stats[0].0;
            println!(
                "  steps 1 to {}: {rest_total:+.1} µs over {base_rest:.0} µs ({:+.3} %), the first \
                 step left out",
                steps - 1,
                100.0 * rest_total / base_rest
            );
        }
    }
}

/// Every step of every round, one line each: `config,round,first_iteration,step,ns`.
pub(super) fn write_csv(path: &Path, configs: &[Config], laps: &[Vec<Laps>]) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "config,round,first_iteration,step,ns")?;
    for (config, runs) in configs.iter().zip(laps) {
        for (round, run) in runs.iter().enumerate() {
            for (step, ns) in run.ns.iter().enumerate() {
                writeln!(
                    out,
                    "{},{round},{},{step},{ns}",
                    config.label(),
                    run.first_iteration
                )?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// The sampled timeline against `none` on workload (c), paired by round, split where a job and
/// this benchmark differ: each round is a whole run of `--train-steps` steps, so the profiler's
/// start, paid once a run, weighs on it as it would on a job that short. The steady state (each
/// run's steps from `from` on) carries the target; the start is printed in µs a run, with its
/// share of these runs and of a run of 10 000 steps.
pub(super) fn print_sampled_steady(configs: &[Config], laps: &[Vec<Laps>], from: usize) {
    let (Some(s), Some(n)) = (
        configs.iter().position(|c| *c == Config::TimelineSampled),
        configs.iter().position(|c| *c == Config::None),
    ) else {
        return;
    };
    let pairs = paired_runs(&laps[s], &laps[n], from);
    let Some(&(first, _)) = pairs.first() else {
        println!(
            "  tl-sampled, steady state: no run of (c) longer than --steady-from {from} steps; \
             not judged"
        );
        return;
    };
    let steps = first.ns.len();
    let (steady, start_us) = split_at_steady(&pairs, from);
    if let Some(p) = Paired::of(&steady) {
        println!(
            "  tl-sampled (1 in {}), (c) training step, paired by round, steady state (steps {from} \
             to {} of each run): slowdown {}; target ≤ 0.1 %: {}",
            super::SAMPLE_EVERY,
            steps - 1,
            p.describe(1.0, 3, " %"),
            p.verdict(0.1)
        );
    }
    let (m, h) = mean_interval(&start_us);
    let step_us =
        pairs.iter().map(|(_, b)| ns_sum(&b.ns)).sum::<f64>() / 1e3 / (pairs.len() * steps) as f64;
    println!(
        "  tl-sampled, the profiler's start (steps 0 to {} of each run): {m:+.1} ± {h:.1} µs a \
         run (paired mean, 95 %), once a run: {:.3} % of these {steps}-step runs, {:.5} % of a \
         run of 10 000 steps",
        from - 1,
        100.0 * m / (step_us * steps as f64),
        100.0 * m / (step_us * 10_000.0)
    );
}

/// A configuration's runs beside `none`'s of the same round, where both timed the same number
/// of steps and more than `min_steps`.
fn paired_runs<'a>(
    runs: &'a [Laps],
    none: &'a [Laps],
    min_steps: usize,
) -> Vec<(&'a Laps, &'a Laps)> {
    runs.iter()
        .zip(none)
        .filter(|(a, b)| a.ns.len() == b.ns.len() && a.ns.len() > min_steps)
        .collect()
}

fn ns_sum(v: &[u64]) -> f64 {
    v.iter().map(|&x| x as f64).sum()
}

/// Per round (configuration, `none`): the steady state's slowdown, %, over steps `from..`, and
/// what steps `..from` added, µs.
fn split_at_steady(pairs: &[(&Laps, &Laps)], from: usize) -> (Vec<f64>, Vec<f64>) {
    pairs
        .iter()
        .map(|(a, b)| {
            (
                100.0 * (ns_sum(&a.ns[from..]) / ns_sum(&b.ns[from..]) - 1.0),
                (ns_sum(&a.ns[..from]) - ns_sum(&b.ns[..from])) / 1e3,
            )
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_state_leaves_the_start_out_and_the_start_is_counted_apart() {
        let none = Laps {
            first_iteration: 2,
            ns: vec![1_000_000; 10],
        };
        // The first two steps pay 50 µs each; the other eight 1 µs each (0.1 %).
        let mut ns = vec![1_001_000; 10];
        ns[0] = 1_050_000;
        ns[1] = 1_050_000;
        let sampled = Laps {
            first_iteration: 2,
            ns,
        };
        let (steady, start) = split_at_steady(&[(&sampled, &none)], 2);
        assert!((steady[0] - 0.1).abs() < 1e-9, "{steady:?}");
        assert!((start[0] - 100.0).abs() < 1e-9, "{start:?}");
        // From the first step on, the start's cost is in the steady state's figure.
        let (steady, start) = split_at_steady(&[(&sampled, &none)], 0);
        assert!((steady[0] - 1.08).abs() < 1e-9, "{steady:?}");
        assert_eq!(start[0], 0.0);
    }
}
