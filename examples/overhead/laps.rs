//! `--step-laps`: where in workload (c)'s loop each configuration's cost falls, step by step.

use super::Config;

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
        let pairs: Vec<(&Laps, &Laps)> = laps[ci]
            .iter()
            .zip(&laps[none])
            .filter(|(a, b)| a.ns.len() == b.ns.len() && !a.ns.is_empty())
            .collect();
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
