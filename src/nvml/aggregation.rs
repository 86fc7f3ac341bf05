//! NVML figures of one device over one window, as a pure function of its samples and energy
//! reads ([`summarize_samples`]); see the module docs of `nvml` for the methods.

use std::borrow::Cow;

use super::samples::{throttle_reason_names, EnergyRead, NvmlReading, NvmlSample};
use crate::ledger::{
    ClockStats, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind, PowerStats,
};

/// Parameters of [`summarize_samples`], in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SummaryParams {
    /// NVML's refresh period: shorter windows are coarse.
    pub(crate) update_period_ns: u64,
    /// Shortest window whose energy comes from the energy counter.
    pub(crate) energy_counter_min_window_ns: u64,
    /// How far from a coarse window's midpoint its covering sample may be; also how far outside
    /// the window a sample may be to be used for interpolation at the window's edges.
    pub(crate) covering_max_ns: u64,
}

fn clock_stats(values: impl Iterator<Item = u32>) -> Option<ClockStats> {
    let mut n = 0u32;
    let mut sum = 0f64;
    let mut min = u32::MAX;
    let mut max = 0u32;
    for v in values {
        n += 1;
        sum += f64::from(v);
        min = min.min(v);
        max = max.max(v);
    }
    (n > 0).then(|| ClockStats {
        min_mhz: min,
        mean_mhz: sum / f64::from(n),
        max_mhz: max,
        samples: n,
    })
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// Integral of the piecewise-linear function through `points` (time ns, watts) over `[a, b]`,
/// joules. Before the first and after the last point the nearest value is held. `points` must be
/// sorted by time. `None` without points.
pub(crate) fn integrate_power_j(points: &[(u64, f64)], a: u64, b: u64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if b <= a {
        return Some(0.0);
    }
    let value_at = |t: u64| -> f64 {
        let i = points.partition_point(|p| p.0 <= t);
        if i == 0 {
            first.1
        } else if i == points.len() {
            last.1
        } else {
            let (t0, p0) = points[i - 1];
            let (t1, p1) = points[i];
            if t1 == t0 {
                p1
            } else {
                p0 + (p1 - p0) * (t - t0) as f64 / (t1 - t0) as f64
            }
        }
    };
    let mut prev_t = a;
    let mut prev_p = value_at(a);
    let mut joules = 0.0;
    for &(t, p) in points.iter().filter(|(t, _)| *t > a && *t < b) {
        joules += (prev_p + p) / 2.0 * ns_to_s(t - prev_t);
        prev_t = t;
        prev_p = p;
    }
    joules += (prev_p + value_at(b)) / 2.0 * ns_to_s(b - prev_t);
    Some(joules)
}

/// Index of the sample nearest to the window's midpoint, if within `max_ns` of it.
fn covering_sample(
    samples: &[NvmlSample],
    start_ns: u64,
    end_ns: u64,
    max_ns: u64,
) -> Option<usize> {
    let mid = start_ns + (end_ns - start_ns) / 2;
    let i = samples.partition_point(|s| s.host_ns < mid);
    let candidates = [i.checked_sub(1), (i < samples.len()).then_some(i)];
    candidates
        .into_iter()
        .flatten()
        .map(|j| (j, samples[j].host_ns.abs_diff(mid)))
        .filter(|(_, d)| *d <= max_ns)
        .min_by_key(|(_, d)| *d)
        .map(|(j, _)| j)
}

/// Rate of a byte counter over the window: the sum of its positive steps between the reads inside
/// the window and the nearest read on each side (within `reach_ns`), per second between the
/// first and last of those reads. `None` with fewer than two reads.
fn counter_rate(
    samples: &[NvmlSample],
    start_ns: u64,
    end_ns: u64,
    reach_ns: u64,
    get: impl Fn(&NvmlReading) -> Option<u64>,
) -> Option<f64> {
    let all: Vec<(u64, u64)> = samples
        .iter()
        .filter_map(|s| get(&s.reading).map(|v| (s.host_ns, v)))
        .collect();
    let lo = all.partition_point(|p| p.0 < start_ns).saturating_sub(1);
    let hi = (all.partition_point(|p| p.0 <= end_ns) + 1).min(all.len());
    let points: Vec<(u64, u64)> = all[lo..hi]
        .iter()
        .copied()
        .filter(|p| {
            p.0.saturating_add(reach_ns) >= start_ns && p.0 <= end_ns.saturating_add(reach_ns)
        })
        .collect();
    let (first, last) = (points.first()?, points.last()?);
    if points.len() < 2 || last.0 <= first.0 {
        return None;
    }
    let bytes: u64 = points
        .windows(2)
        .map(|w| w[1].1.saturating_sub(w[0].1))
        .sum();
    Some(bytes as f64 / ns_to_s(last.0 - first.0))
}

/// Summarizes one device's samples and energy reads over `[start_ns, end_ns]`.
///
/// `samples` should cover the window and include the sample just before and just after it (they
/// are used to interpolate power at the edges, when within `params.covering_max_ns`); samples
/// and reads far outside the window are ignored. Unsorted input is sorted first. See the module
/// docs of `nvml` for the methods and the coarse rule.
pub(crate) fn summarize_samples(
    device_id: u32,
    samples: &[NvmlSample],
    energy_reads: &[EnergyRead],
    start_ns: u64,
    end_ns: u64,
    params: &SummaryParams,
) -> NvmlIterationSummary {
    let mut out = NvmlIterationSummary {
        device_id,
        window_ns: end_ns.saturating_sub(start_ns),
        ..NvmlIterationSummary::default()
    };
    if end_ns < start_ns {
        out.notes.push(format!(
            "window ends ({end_ns} ns) before it starts ({start_ns} ns)"
        ));
        return out;
    }
    let samples = by_time(samples, |s| s.host_ns);
    let energy_reads = by_time(energy_reads, |e| e.host_ns);
    let Some(used) = samples_used(&mut out, &samples, start_ns, end_ns, params) else {
        return out;
    };
    sample_figures(&mut out, used);
    if !out.coarse {
        let reach = params.covering_max_ns;
        out.pcie_tx_bytes_per_s =
            counter_rate(&samples, start_ns, end_ns, reach, |r| r.pcie_tx_bytes);
        out.pcie_rx_bytes_per_s =
            counter_rate(&samples, start_ns, end_ns, reach, |r| r.pcie_rx_bytes);
    }

    out.energy = if out.coarse {
        used[0].reading.power_mw.map(|mw| EnergyEstimate {
            joules: f64::from(mw) / 1000.0 * ns_to_s(out.window_ns),
            method: EnergyMethod::CoveringSample,
            counter_reads: 0,
            counter_span_ns: None,
            power_samples: 1,
            integrated_joules: None,
        })
    } else {
        window_energy(
            &samples,
            &energy_reads,
            start_ns,
            end_ns,
            params,
            &mut out.notes,
        )
    };
    out
}

/// `items` sorted by `at`: borrowed when they already are, so sorted input is not copied.
fn by_time<T: Clone>(items: &[T], at: impl Fn(&T) -> u64) -> Cow<'_, [T]> {
    if items.is_sorted_by_key(&at) {
        Cow::Borrowed(items)
    } else {
        let mut v = items.to_vec();
        v.sort_by_key(at);
        Cow::Owned(v)
    }
}

/// The samples the window's figures come from: those inside it, or, for a window shorter than
/// NVML's update period or without a sample inside, the one sample covering it (the summary is
/// then coarse); `None`, with a note, when no sample is near enough.
fn samples_used<'s>(
    out: &mut NvmlIterationSummary,
    samples: &'s [NvmlSample],
    start_ns: u64,
    end_ns: u64,
    params: &SummaryParams,
) -> Option<&'s [NvmlSample]> {
    let lo = samples.partition_point(|s| s.host_ns < start_ns);
    let hi = samples.partition_point(|s| s.host_ns <= end_ns);
    let inside = &samples[lo..hi];
    let short = out.window_ns < params.update_period_ns;
    if !(short || inside.is_empty()) {
        return Some(inside);
    }
    out.coarse = true;
    if short {
        out.notes.push(format!(
            "window of {:.1} ms is shorter than NVML's {:.0} ms update period: figures come \
             from the one sample covering it",
            out.window_ns as f64 / 1e6,
            params.update_period_ns as f64 / 1e6
        ));
    } else {
        out.notes.push(
            "no sample inside the window: figures come from the one sample covering it".to_owned(),
        );
    }
    match covering_sample(samples, start_ns, end_ns, params.covering_max_ns) {
        Some(i) => Some(&samples[i..=i]),
        None => {
            out.notes.push(format!(
                "no sample within {:.0} ms of the window's midpoint: no NVML figures",
                params.covering_max_ns as f64 / 1e6
            ));
            None
        }
    }
}

/// The figures read from the samples used: their count, clocks, power, temperature, throttle
/// reasons and memory used.
fn sample_figures(out: &mut NvmlIterationSummary, used: &[NvmlSample]) {
    out.samples = u32::try_from(used.len()).unwrap_or(u32::MAX);

    out.sm_clock = clock_stats(used.iter().filter_map(|s| s.reading.sm_clock_mhz));
    out.mem_clock = clock_stats(used.iter().filter_map(|s| s.reading.mem_clock_mhz));

    out.power = power_stats(used, &mut out.notes);

    let temps: Vec<u32> = used
        .iter()
        .filter_map(|s| s.reading.temperature_c)
        .collect();
    out.temperature_max_c = temps.iter().copied().max();
    out.temperature_samples = u32::try_from(temps.len()).unwrap_or(u32::MAX);

    let mut throttle_bits = 0u64;
    for bits in used.iter().filter_map(|s| s.reading.throttle_reasons) {
        throttle_bits |= bits;
        out.throttle_samples += 1;
    }
    let mut names = throttle_reason_names(throttle_bits);
    names.sort();
    out.throttle_reasons = names;

    let mem: Vec<u64> = used
        .iter()
        .filter_map(|s| s.reading.memory_used_bytes)
        .collect();
    out.memory_used_max_bytes = mem.iter().copied().max();
    out.memory_used_samples = u32::try_from(mem.len()).unwrap_or(u32::MAX);
}

/// Mean and peak power of the samples used, of the kind the first one with a kind reports (a
/// note when kinds are mixed); `None` without power samples.
fn power_stats(used: &[NvmlSample], notes: &mut Vec<String>) -> Option<PowerStats> {
    let powers: Vec<(f64, Option<PowerKind>)> = used
        .iter()
        .filter_map(|s| {
            s.reading
                .power_mw
                .map(|mw| (f64::from(mw) / 1000.0, s.reading.power_kind))
        })
        .collect();
    if powers.is_empty() {
        return None;
    }
    let n = powers.len();
    let kind = powers
        .iter()
        .find_map(|(_, k)| *k)
        .unwrap_or(PowerKind::Average);
    if powers.iter().any(|(_, k)| k.is_some_and(|k| k != kind)) {
        notes.push("power samples of mixed kinds (instant and average)".to_owned());
    }
    Some(PowerStats {
        mean_w: powers.iter().map(|(w, _)| w).sum::<f64>() / n as f64,
        max_w: powers.iter().map(|(w, _)| *w).fold(f64::MIN, f64::max),
        samples: u32::try_from(n).unwrap_or(u32::MAX),
        kind,
    })
}

/// The energy of a window that is not coarse: from the energy counter when the window is long
/// enough and its reads are usable, else from integrated power (with a note saying why).
fn window_energy(
    samples: &[NvmlSample],
    energy_reads: &[EnergyRead],
    start_ns: u64,
    end_ns: u64,
    params: &SummaryParams,
    notes: &mut Vec<String>,
) -> Option<EnergyEstimate> {
    let points = power_points(samples, start_ns, end_ns, params.covering_max_ns);
    let power_samples = u32::try_from(points.len()).unwrap_or(u32::MAX);
    let integrated = integrate_power_j(&points, start_ns, end_ns);

    let window = end_ns - start_ns;
    if window >= params.energy_counter_min_window_ns {
        let reads: Vec<EnergyRead> = energy_reads
            .iter()
            .copied()
            .filter(|e| e.host_ns >= start_ns && e.host_ns <= end_ns)
            .collect();
        if let Some((joules, span)) = counter_energy(&reads, &points, start_ns, end_ns, notes) {
            return Some(EnergyEstimate {
                joules,
                method: EnergyMethod::EnergyCounter,
                counter_reads: u32::try_from(reads.len()).unwrap_or(u32::MAX),
                counter_span_ns: Some(span),
                power_samples,
                integrated_joules: integrated,
            });
        }
    }
    integrated.map(|joules| EnergyEstimate {
        joules,
        method: EnergyMethod::IntegratedPower,
        counter_reads: 0,
        counter_span_ns: None,
        power_samples,
        integrated_joules: Some(joules),
    })
}

/// Power points inside the window plus the nearest one on each side, if within `reach_ns`:
/// (time ns, watts).
fn power_points(
    samples: &[NvmlSample],
    start_ns: u64,
    end_ns: u64,
    reach_ns: u64,
) -> Vec<(u64, f64)> {
    let reach_lo = start_ns.saturating_sub(reach_ns);
    let reach_hi = end_ns.saturating_add(reach_ns);
    let with_power: Vec<(u64, f64)> = samples
        .iter()
        .filter_map(|s| {
            s.reading
                .power_mw
                .map(|mw| (s.host_ns, f64::from(mw) / 1000.0))
        })
        .collect();
    let lo = with_power
        .partition_point(|p| p.0 < start_ns)
        .saturating_sub(1);
    let hi = (with_power.partition_point(|p| p.0 <= end_ns) + 1).min(with_power.len());
    with_power[lo..hi]
        .iter()
        .copied()
        .filter(|p| p.0 >= reach_lo && p.0 <= reach_hi)
        .collect()
}

/// The window's energy from the energy counter's `reads` inside it, and the span of those
/// reads: their difference, plus the window's edges outside them from `points` (or, without
/// power samples, at the counter's mean power). `None`, with a note why, when there are fewer
/// than two reads, the counter went backwards, or the reads span less than half the window.
fn counter_energy(
    reads: &[EnergyRead],
    points: &[(u64, f64)],
    start_ns: u64,
    end_ns: u64,
    notes: &mut Vec<String>,
) -> Option<(f64, u64)> {
    let window = end_ns - start_ns;
    let (Some(first), Some(last), true) = (reads.first(), reads.last(), reads.len() >= 2) else {
        notes.push(format!(
            "{} energy-counter read(s) inside the window: integrated power used",
            reads.len()
        ));
        return None;
    };
    let span = last.host_ns - first.host_ns;
    let monotone = reads.windows(2).all(|w| w[1].energy_mj >= w[0].energy_mj);
    if !monotone {
        notes.push(
            "energy counter went backwards inside the window (driver reloaded?): \
             integrated power used"
                .to_owned(),
        );
        return None;
    }
    if span < window / 2 {
        notes.push(format!(
            "energy-counter reads span only {:.0} ms of the {:.0} ms window: \
             integrated power used",
            span as f64 / 1e6,
            window as f64 / 1e6
        ));
        return None;
    }
    let counter_j = (last.energy_mj - first.energy_mj) as f64 / 1000.0;
    let edges = match (
        integrate_power_j(points, start_ns, first.host_ns),
        integrate_power_j(points, last.host_ns, end_ns),
    ) {
        (Some(a), Some(b)) => a + b,
        _ => {
            notes.push(
                "no power samples: the window's edges outside the counter reads \
                 assume the counter's mean power"
                    .to_owned(),
            );
            let mean_w = if span > 0 {
                counter_j / ns_to_s(span)
            } else {
                0.0
            };
            mean_w * ns_to_s(window - span)
        }
    };
    Some((counter_j + edges, span))
}

#[cfg(test)]
mod tests;
