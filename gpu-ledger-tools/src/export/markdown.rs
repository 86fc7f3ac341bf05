//! Markdown for pasting into an issue or a pull request: the summary of one ledger and the A/B
//! comparison of two. Every name that comes from the ledger (scopes, kernels, warnings) is escaped
//! so that it cannot break a table.

use std::fmt::Write as _;

use super::summary::{ceiling_text, left_out_text, LedgerSummary};
use super::text::{fmt_confidence, fmt_count, fmt_ns, fmt_pct, md_cell, sig3};
use crate::analysis::compare::Comparison;
use crate::analysis::stats::{Distribution, IterationMetric};

fn dist_cells(d: &Distribution) -> String {
    format!(
        "{} | {} | {}",
        fmt_ns(d.median),
        fmt_ns(d.p90),
        fmt_ns(d.p99)
    )
}

fn metric_name(m: &IterationMetric) -> String {
    match m {
        IterationMetric::HostWall => "host wall time per iteration".into(),
        IterationMetric::DeviceBusy(d) => format!("busy time of GPU {d} per iteration"),
        IterationMetric::DeviceIdle(d) => format!("idle time of GPU {d} per iteration"),
        IterationMetric::DeviceWindow(d) => format!("activity window of GPU {d} per iteration"),
    }
}

fn opt_x(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:.3}×"))
}

/// The Markdown summary of one ledger: environment, iterations used, per-scope distributions,
/// top kernel families with Amdahl ceilings, warp stall reasons when PC sampling ran, device
/// idle time, clocks and power, energy, and warnings. `source` names the ledger in the title.
pub fn markdown_summary(s: &LedgerSummary, source: &str) -> String {
    let mut o = String::new();
    if s.rows == 0 {
        // A run with no row (`fail_open` ran it unprofiled): its reason, once, is all there is
        // to say; empty tables would bury it.
        let _ = writeln!(o, "## gpu-ledger summary: `{}`\n", source.replace('`', "'"));
        let _ = writeln!(o, "**Environment:** {}\n", md_cell(&s.environment));
        let _ = writeln!(o, "**No iteration was profiled.**\n");
        warning_list(&mut o, &s.warnings);
        return o;
    }
    summary_intro(&mut o, s, source);
    scopes_table(&mut o, s);
    families_table(&mut o, s);
    if let Some(st) = &s.stalls {
        o.push_str(&super::stalls_view::markdown_section(st));
    }
    if let Some(p) = &s.run_stalls {
        o.push_str(&super::stall_profile::markdown_section(p));
    }
    devices_table(&mut o, s);
    if let Some(i) = &s.idle {
        o.push_str(&super::idle_view::markdown_section(i));
    }
    nvml_table(&mut o, s);
    energy_line(&mut o, s);
    let _ = writeln!(o, "### Warnings\n");
    if s.warnings.is_empty() {
        let _ = writeln!(o, "None.");
    } else {
        warning_list(&mut o, &s.warnings);
    }
    o
}

/// The title, environment, iterations used and left out, and the host wall time: what the
/// figures below are figures of.
fn summary_intro(o: &mut String, s: &LedgerSummary, source: &str) {
    let _ = writeln!(o, "## gpu-ledger summary: `{}`\n", source.replace('`', "'"));
    let _ = writeln!(o, "**Environment:** {}\n", md_cell(&s.environment));
    let _ = writeln!(
        o,
        "**Iterations:** {} rows, {} used; {}{}\n",
        s.rows,
        s.used.len(),
        s.left_out(),
        if s.run_complete {
            ""
        } else {
            "; **run did not finish** (no trailer)"
        }
    );
    if let Some(d) = &s.host_wall_ns {
        let _ = writeln!(
            o,
            "**Host wall time per iteration:** median {}, p90 {}, p99 {} (min {}, max {}, \
             stddev {})\n",
            fmt_ns(d.median),
            fmt_ns(d.p90),
            fmt_ns(d.p99),
            fmt_ns(d.min),
            fmt_ns(d.max),
            fmt_ns(d.stddev)
        );
    }
}

/// Each scope's host and inclusive device time distributions: time in the program's own
/// structure.
fn scopes_table(o: &mut String, s: &LedgerSummary) {
    let _ = writeln!(o, "### Scopes (per iteration)\n");
    if s.scopes.is_empty() {
        let _ = writeln!(o, "_No scope in the iterations used._\n");
        return;
    }
    let _ = writeln!(
        o,
        "| scope | ran in | host median | host p90 | host p99 | device (incl.) median | \
         device p90 | device p99 | launches (median) |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for sc in &s.scopes {
        let device = match s.scope_device_ns(sc) {
            Some(d) => dist_cells(d),
            None => "not measured | not measured | not measured".into(),
        };
        let host = s.scope_host_ns(sc).map_or_else(
            || "not measured | not measured | not measured".into(),
            dist_cells,
        );
        let _ = writeln!(
            o,
            "| {} | {}/{} | {} | {} | {} |",
            md_cell(&sc.path),
            sc.present_in,
            sc.iterations,
            host,
            device,
            fmt_count(sc.launches.median)
        );
    }
    let _ = writeln!(
        o,
        "\nDistributions are over the iterations where the scope ran; {}\n",
        s.scope_device_note()
    );
}

/// The top kernel families with their shares and Amdahl ceilings: what is worth speeding up.
fn families_table(o: &mut String, s: &LedgerSummary) {
    let _ = writeln!(o, "### Top kernel families\n");
    let fams = &s.families;
    if fams.families.is_empty() {
        let _ = writeln!(o, "_No kernel in the iterations used._\n");
        return;
    }
    let _ = writeln!(
        o,
        "| # | family | launches/iter | time/iter | mean/launch | share of device time | \
         Amdahl ceiling | gain if 2× faster | shapes | graph launches/iter |"
    );
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let iters = fams.iterations.max(1) as f64;
    for f in fams.families.iter().take(s.top_families) {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.rank,
            md_cell(&f.family),
            fmt_count(f.launches_per_iteration),
            fmt_ns(f.total_ns as f64 / iters),
            fmt_ns(f.mean_ns),
            f.share_of_device_time.map_or("n/a".into(), fmt_pct),
            ceiling_text(f),
            opt_x(f.speedup_if_2x),
            f.shapes.len(),
            fmt_count(f.graph_launches as f64 / iters)
        );
    }
    if fams.families.len() > s.top_families {
        let _ = writeln!(
            o,
            "\n{} more families not shown.",
            fams.families.len() - s.top_families
        );
    }
    let _ = writeln!(
        o,
        "\nShare = family kernel time / device busy time (union over streams, summed over \
         devices). Amdahl ceiling = 1/(1-p): the most the whole device time can gain by \
         removing the family; gain if 2× = 1/((1-p)+p/2). Both bound end-to-end time only \
         when the device is the bottleneck (low idle share).\n"
    );
}

/// Each GPU's busy time and idle share: whether the device or the host is the bottleneck.
fn devices_table(o: &mut String, s: &LedgerSummary) {
    let _ = writeln!(o, "### Device busy and idle\n");
    if s.devices.is_empty() {
        let _ = writeln!(o, "_No device activity in the iterations used._\n");
        return;
    }
    let _ = writeln!(
        o,
        "| GPU | busy median | busy / host wall | idle share median | idle share p90 | \
         largest gap |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|");
    for d in &s.devices {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            d.device_id,
            fmt_ns(d.busy_ns.median),
            d.busy_share_of_wall.map_or("n/a".into(), fmt_pct),
            d.idle_share
                .as_ref()
                .map_or("n/a".into(), |x| fmt_pct(x.median)),
            d.idle_share
                .as_ref()
                .map_or("n/a".into(), |x| fmt_pct(x.p90)),
            fmt_ns(d.largest_gap_max_ns as f64)
        );
    }
    let _ = writeln!(
        o,
        "\nIdle share = gaps inside the device's activity window / the window; busy / host \
         wall below 100% means the GPU waits for the host part of the time.\n"
    );
}

/// Each GPU's clocks, power and temperature from NVML, when sampled: the operating point the
/// times were measured at.
fn nvml_table(o: &mut String, s: &LedgerSummary) {
    if s.nvml.is_empty() {
        return;
    }
    let _ = writeln!(o, "### Clocks and power (NVML, per-iteration means)\n");
    let _ = writeln!(
        o,
        "| GPU | SM clock median | SM clock min–max | memory clock median | power median | \
         power max | temperature max |"
    );
    let _ = writeln!(o, "|---:|---:|---:|---:|---:|---:|---:|");
    for n in &s.nvml {
        let mhz = |d: &Option<Distribution>| {
            d.as_ref()
                .map_or("n/a".into(), |d| format!("{:.0} MHz", d.median))
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            n.device_id,
            mhz(&n.sm_clock_mhz),
            n.sm_clock_mhz
                .as_ref()
                .map_or("n/a".into(), |d| format!("{:.0}–{:.0} MHz", d.min, d.max)),
            mhz(&n.mem_clock_mhz),
            n.power_w
                .as_ref()
                .map_or("n/a".into(), |d| format!("{:.1} W", d.median)),
            n.power_w
                .as_ref()
                .map_or("n/a".into(), |d| format!("{:.1} W", d.max)),
            n.temperature_max_c
                .map_or("n/a".into(), |t| format!("{t} °C"))
        );
    }
    let _ = writeln!(o);
}

/// The energy per iteration over all GPUs, or that it was not recorded.
fn energy_line(o: &mut String, s: &LedgerSummary) {
    match &s.energy {
        Some(e) => {
            let _ = writeln!(
                o,
                "**Energy per iteration:** {} J mean (min {} J, max {} J) over {} iterations, all \
                 GPUs; {} J in total.\n",
                e.mean_j_per_iteration.map_or("n/a".into(), sig3),
                e.min_j_per_iteration.map_or("n/a".into(), sig3),
                e.max_j_per_iteration.map_or("n/a".into(), sig3),
                e.iterations_with_energy,
                sig3(e.total_j)
            );
        }
        None => {
            let _ = writeln!(o, "**Energy per iteration:** not recorded.\n");
        }
    }
}

/// The warnings as a list, each escaped so that a name from the ledger cannot break it.
fn warning_list(o: &mut String, warnings: &[String]) {
    for w in warnings {
        let _ = writeln!(o, "- {}", md_cell(w));
    }
}

/// The Markdown of an A/B comparison: verdict, speed-up with its interval, medians, per-scope
/// and per-family changes, launch counts and warnings.
pub fn markdown_comparison(c: &Comparison, a_name: &str, b_name: &str) -> String {
    let mut o = String::new();
    comparison_verdict(&mut o, c, a_name, b_name);
    sides_table(&mut o, c);
    if !c.scopes.is_empty() {
        scope_changes_table(&mut o, c);
    }
    if !c.families.is_empty() {
        family_changes_table(&mut o, c);
    }
    if !c.idle_causes.is_empty() {
        o.push_str(&super::idle_view::comparison_section(&c.idle_causes));
    }
    let _ = writeln!(o, "### Warnings\n");
    if c.warnings.is_empty() {
        let _ = writeln!(o, "None: the runs look comparable.");
    } else {
        warning_list(&mut o, &c.warnings);
    }
    o
}

/// The title and the verdict with the speed-up, its interval and the metric it is of.
fn comparison_verdict(o: &mut String, c: &Comparison, a_name: &str, b_name: &str) {
    let sp = &c.speedup;
    let _ = writeln!(
        o,
        "## gpu-ledger compare: A `{}` vs B `{}`\n",
        a_name.replace('`', "'"),
        b_name.replace('`', "'")
    );
    if !c.incomparable.is_empty() {
        // No speed-up is stated: next to "not comparable" a figure would still be read as one.
        let _ = writeln!(o, "**No verdict: A and B are not comparable.**\n");
        warning_list(o, &c.incomparable);
        let _ = writeln!(
            o,
            "\nThe figures below describe each run; their differences do not measure a change.\n"
        );
        return;
    }
    let verdict = c.verdict();
    let _ = writeln!(
        o,
        "**Verdict: {}.** Speed-up A/B = **{:.3}×** ({}% CI {:.3}–{:.3}, {} bootstrap \
         resamples) of the medians of the {}; Δt = {}.\n",
        verdict.describe(),
        sp.speedup,
        fmt_confidence(sp.confidence),
        sp.ci_low,
        sp.ci_high,
        sp.resamples,
        metric_name(&c.metric),
        fmt_pct(c.delta_t)
    );
}

/// The two sides side by side: rows used, the metric's distribution, the rows left out and the
/// launches per iteration, the figures the verdict rests on.
fn sides_table(o: &mut String, c: &Comparison) {
    let _ = writeln!(o, "| | A | B |");
    let _ = writeln!(o, "|---|---:|---:|");
    let _ = writeln!(
        o,
        "| rows / used | {} / {} | {} / {} |",
        c.a.rows, c.a.used, c.b.rows, c.b.used
    );
    let (da, db) = (&c.a.distribution, &c.b.distribution);
    for (label, a, b) in [
        ("median", da.median, db.median),
        ("p90", da.p90, db.p90),
        ("p99", da.p99, db.p99),
    ] {
        let _ = writeln!(o, "| {label} | {} | {} |", fmt_ns(a), fmt_ns(b));
    }
    let left_out = |s: &crate::analysis::compare::RunSide| {
        md_cell(&left_out_text(&[
            ("warm-up", &s.warmup),
            ("perturbed", &s.perturbed),
            ("incomplete", &s.incomplete),
        ]))
    };
    let _ = writeln!(
        o,
        "| rows left out | {} | {} |",
        left_out(&c.a),
        left_out(&c.b)
    );
    let l = &c.launches;
    let _ = writeln!(
        o,
        "| kernels / memcpy / memset per iteration | {} / {} / {} | {} / {} / {} |\n",
        fmt_count(l.kernels_a),
        fmt_count(l.memcpy_a),
        fmt_count(l.memset_a),
        fmt_count(l.kernels_b),
        fmt_count(l.memcpy_b),
        fmt_count(l.memset_b)
    );
}

/// Each scope's host median on both sides and its change: where in the program time moved.
fn scope_changes_table(o: &mut String, c: &Comparison) {
    let _ = writeln!(o, "### Scopes\n");
    let _ = writeln!(
        o,
        "| scope | host median A | host median B | host A/B | device A/B | Δ host per iteration | Δ launches |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|");
    for s in &c.scopes {
        let med = |x: &Option<crate::analysis::stats::ScopeStats>| match x {
            None => "absent".into(),
            // Launches outside every scope have no host time of their own.
            Some(x) if s.path == gpu_ledger_format::UNSCOPED && x.host_ns.max == 0.0 => {
                "not measured".into()
            }
            Some(x) => fmt_ns(x.host_ns.median),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            md_cell(&s.path),
            med(&s.a),
            med(&s.b),
            opt_x(s.host_speedup),
            opt_x(s.device_speedup),
            fmt_ns(s.host_delta_ns_per_iteration),
            fmt_count(s.launches_delta_per_iteration)
        );
    }
    let _ = writeln!(o);
}

/// The 15 kernel families whose time changed most: which kernels the change sped up or slowed.
fn family_changes_table(o: &mut String, c: &Comparison) {
    let _ = writeln!(o, "### Kernel families (largest change first)\n");
    let _ = writeln!(
        o,
        "| family | time/iter A | time/iter B | A/B | Δ time per iteration | Δ launches |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for f in c.families.iter().take(15) {
        let t = |x: &Option<crate::analysis::stats::FamilyStats>| {
            x.as_ref()
                .map_or("absent".into(), |x| fmt_ns(x.total_ns_mean_per_iteration))
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            md_cell(&f.family),
            t(&f.a),
            t(&f.b),
            opt_x(f.speedup),
            fmt_ns(f.delta_ns_per_iteration),
            fmt_count(f.launches_delta_per_iteration)
        );
    }
    let _ = writeln!(o);
}
