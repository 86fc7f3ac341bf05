//! The rules that tie a row's fields to one another, all in one place: a window or a span does
//! not end before it starts, busy time fits in its window and idle time is the rest of it, a
//! kernel group's shortest launch is not longer than its longest, and NVML's figures are
//! unknown (`null`) or within what a device can show. Each error names the fields and their
//! values; the caller adds the line and the fix.

use crate::nvml::NvmlIterationSummary;
use crate::schema::IterationRow;

/// The highest clock a figure may show, MHz (today's GPUs run below 4 000).
const MAX_CLOCK_MHZ: f64 = 100_000.0;

/// The highest board power a figure may show, W (today's boards draw below 2 000).
const MAX_POWER_W: f64 = 100_000.0;

/// The highest PCIe rate a figure may show, bytes/s (PCIe 7 x16 moves about 2.5e11).
const MAX_PCIE_BYTES_PER_S: f64 = 1e13;

/// The most energy one window may show, J: `MAX_POWER_W` for 146 years.
const MAX_ENERGY_J: f64 = MAX_POWER_W * 4.6e9;

/// Checks every cross-field rule of `row`; the first broken one is the error.
pub(super) fn check(row: &IterationRow) -> Result<(), String> {
    devices(row)?;
    for (i, k) in row.kernels.iter().enumerate() {
        if k.count > 0 && k.min_ns > k.max_ns {
            return Err(format!(
                "kernels[{i}].min_ns = {} is more than kernels[{i}].max_ns = {}: a group's \
                 shortest launch cannot be longer than its longest",
                k.min_ns, k.max_ns
            ));
        }
    }
    for (i, a) in row.activities.iter().flatten().enumerate() {
        ordered(&format!("activities[{i}]"), a.start_ns, a.end_ns)?;
    }
    for (i, s) in row.scope_spans.iter().flatten().enumerate() {
        ordered(&format!("scope_spans[{i}]"), s.start_ns, s.end_ns)?;
    }
    for (i, n) in row.nvml.iter().enumerate() {
        nvml(&format!("nvml[{i}]"), n)?;
    }
    Ok(())
}

/// A start and an end of the record at `at`: the end may not come first.
fn ordered(at: &str, start: u64, end: u64) -> Result<(), String> {
    if end < start {
        return Err(format!(
            "{at}.end_ns = {end} is before {at}.start_ns = {start}: it cannot end before it \
             starts"
        ));
    }
    Ok(())
}

/// Each device's window, its busy, idle and largest gap inside it, and its idle causes adding
/// up to its idle time.
fn devices(row: &IterationRow) -> Result<(), String> {
    for (i, d) in row.devices.iter().enumerate() {
        let f = |name: &str| format!("devices[{i}].{name}");
        if d.last_end_ns < d.first_start_ns {
            return Err(format!(
                "{} = {} is before {} = {}: the device's window cannot end before it starts",
                f("last_end_ns"),
                d.last_end_ns,
                f("first_start_ns"),
                d.first_start_ns
            ));
        }
        let window = d.last_end_ns - d.first_start_ns;
        if d.busy_ns > window {
            return Err(format!(
                "{} = {} is more than the window {}..{} ({window} ns): the device cannot be \
                 busy longer than its window",
                f("busy_ns"),
                d.busy_ns,
                d.first_start_ns,
                d.last_end_ns
            ));
        }
        if d.idle_ns != window - d.busy_ns {
            return Err(format!(
                "{} = {} is not the window ({window} ns) less {} = {}: idle time is the rest \
                 of the window",
                f("idle_ns"),
                d.idle_ns,
                f("busy_ns"),
                d.busy_ns
            ));
        }
        if d.largest_gap_ns > d.idle_ns {
            return Err(format!(
                "{} = {} is more than {} = {}: one gap cannot be longer than all of them",
                f("largest_gap_ns"),
                d.largest_gap_ns,
                f("idle_ns"),
                d.idle_ns
            ));
        }
        if let Some(idle) = &d.idle {
            crate::idle::check(idle, d.idle_ns, &f("idle"))?;
        }
    }
    Ok(())
}

/// A figure of NVML's: unknown (`null`, read as NaN) or in `0..=max`.
fn figure(at: &str, value: f64, max: f64, unit: &str) -> Result<(), String> {
    if value.is_nan() || (0.0..=max).contains(&value) {
        return Ok(());
    }
    // A figure far out of range is shown as 1e300, not as its 301 digits.
    let shown = if value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        format!("{value}")
    };
    Err(format!(
        "{at} = {shown} is not a figure a device shows (0 to {max:e} {unit})"
    ))
}

/// One device's NVML figures over the iteration.
fn nvml(at: &str, n: &NvmlIterationSummary) -> Result<(), String> {
    for (name, c) in [("sm_clock", &n.sm_clock), ("mem_clock", &n.mem_clock)] {
        let Some(c) = c else { continue };
        let at = format!("{at}.{name}");
        figure(&format!("{at}.mean_mhz"), c.mean_mhz, MAX_CLOCK_MHZ, "MHz")?;
        figure(
            &format!("{at}.max_mhz"),
            f64::from(c.max_mhz),
            MAX_CLOCK_MHZ,
            "MHz",
        )?;
        if c.min_mhz > c.max_mhz {
            return Err(format!(
                "{at}.min_mhz = {} is more than {at}.max_mhz = {}",
                c.min_mhz, c.max_mhz
            ));
        }
    }
    if let Some(p) = &n.power {
        figure(&format!("{at}.power.mean_w"), p.mean_w, MAX_POWER_W, "W")?;
        figure(&format!("{at}.power.max_w"), p.max_w, MAX_POWER_W, "W")?;
    }
    if let Some(e) = &n.energy {
        figure(&format!("{at}.energy.joules"), e.joules, MAX_ENERGY_J, "J")?;
        if let Some(j) = e.integrated_joules {
            figure(
                &format!("{at}.energy.integrated_joules"),
                j,
                MAX_ENERGY_J,
                "J",
            )?;
        }
    }
    for (name, rate) in [
        ("pcie_tx_bytes_per_s", n.pcie_tx_bytes_per_s),
        ("pcie_rx_bytes_per_s", n.pcie_rx_bytes_per_s),
    ] {
        if let Some(r) = rate {
            figure(&format!("{at}.{name}"), r, MAX_PCIE_BYTES_PER_S, "bytes/s")?;
        }
    }
    Ok(())
}
