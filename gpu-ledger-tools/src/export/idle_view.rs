//! The summary's section on why the GPU was idle, as Markdown: the idle time by cause per
//! device, the scopes behind `host_launch`, the copy-overlap figures, the gap across `step()`,
//! and the host calls of the steady state; and the comparison's change of idle time by cause.
//! The HTML report's section is `html/idle.rs`.

use std::fmt::Write as _;

use super::summary::{IdleSummary, InventoryLine};
use super::text::{fmt_count, fmt_ns, fmt_pct, md_cell};
use crate::analysis::compare::IdleCauseChange;
use crate::analysis::idle::CauseStats;

/// A cause's cells, unescaped, in its table's column order: GPU, cause, median and p90 per
/// iteration, share of idle, gaps. The Markdown and HTML tables both render these.
pub(crate) fn cause_cells(c: &CauseStats) -> [String; 6] {
    [
        c.device_id.to_string(),
        cause_label(&c.cause, c.detail.as_deref()),
        fmt_ns(c.per_iteration_ns.median),
        fmt_ns(c.per_iteration_ns.p90),
        c.share_of_idle.map_or("n/a".into(), fmt_pct),
        c.gaps.to_string(),
    ]
}

/// A host-call line's cells, unescaped, per iteration of `n`, in its table's column order:
/// kind, scope, function, GPU, calls, bytes, how many blocked, host time.
pub(crate) fn inventory_cells(l: &InventoryLine, n: f64) -> [String; 8] {
    [
        l.kind.clone(),
        l.scope.clone(),
        l.function.clone().unwrap_or_default(),
        l.device_id.map_or(String::new(), |d| d.to_string()),
        fmt_count(l.count as f64 / n),
        l.bytes.map_or(String::new(), |b| fmt_bytes(b as f64 / n)),
        l.synchronous
            .map_or(String::new(), |s| format!("{s} of {}", l.count)),
        fmt_ns(l.host_ns as f64 / n),
    ]
}

/// A Markdown table row of `cells`, each escaped.
fn md_row(o: &mut String, cells: &[String]) {
    let cells: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
    let _ = writeln!(o, "| {} |", cells.join(" | "));
}

/// Scopes behind `host_launch` listed per device.
pub(crate) const TOP_SCOPES: usize = 5;

/// `cause` or `cause (detail)`.
pub(crate) fn cause_label(cause: &str, detail: Option<&str>) -> String {
    match detail {
        Some(d) => format!("{cause} ({d})"),
        None => cause.to_string(),
    }
}

/// Bytes as `4 B`, `12.0 KiB`, `8.0 MiB`.
pub(crate) fn fmt_bytes(b: f64) -> String {
    const KIB: f64 = 1024.0;
    if b < KIB {
        format!("{b:.0} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    }
}

/// The section `### Idle time by cause`.
pub(crate) fn markdown_section(i: &IdleSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### Idle time by cause\n");
    for d in &i.devices {
        let floor = d.floor.as_ref().map_or(String::new(), |(ns, src)| {
            format!("; dispatch floor {} ({src})", fmt_ns(*ns as f64))
        });
        let _ = writeln!(
            o,
            "GPU {}: {} iterations split idle time; idle median {} per iteration, {} of their \
             host wall time{floor}.\n",
            d.device_id,
            d.iterations,
            fmt_ns(d.idle_ns.median),
            d.idle_share_of_wall.map_or("n/a".into(), fmt_pct),
        );
    }
    let _ = writeln!(
        o,
        "| GPU | cause | median / iteration | p90 / iteration | share of idle | gaps |"
    );
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|");
    for c in &i.causes {
        md_row(&mut o, &cause_cells(c));
    }
    let _ = writeln!(
        o,
        "\nIdle = gaps inside the device's activity window; the causes add up to it in every \
         iteration (docs/idle.md says how each is found).\n"
    );
    scopes_line(&mut o, i);
    copies_and_lead_in(&mut o, i);
    inventory_table(&mut o, i);
    o
}

/// The scopes the launching thread was in while the host was late, per device.
fn scopes_line(o: &mut String, i: &IdleSummary) {
    for d in &i.devices {
        let scopes: Vec<String> = (i.host_launch_scopes.iter())
            .filter(|s| s.device_id == d.device_id)
            .take(TOP_SCOPES)
            .map(|s| {
                format!(
                    "{} {} ({})",
                    s.scope,
                    fmt_ns(s.total_ns as f64 / d.iterations.max(1) as f64),
                    s.share_of_idle.map_or("n/a".into(), fmt_pct)
                )
            })
            .collect();
        if !scopes.is_empty() {
            let _ = writeln!(
                o,
                "**GPU {}, host_launch by scope** (mean per iteration, share of idle): {}\n",
                d.device_id,
                md_cell(&scopes.join(", "))
            );
        }
    }
}

/// The copy figures (copies are busy time, so outside the causes) and the gap across `step()`.
fn copies_and_lead_in(o: &mut String, i: &IdleSummary) {
    for d in &i.devices {
        let _ = writeln!(
            o,
            "**GPU {}, copies** (median per iteration): copy-only {} (copies running, no kernel \
             or memset), overlapped with compute {}; no kernel or memset running {} (idle plus \
             copy-only).\n",
            d.device_id,
            fmt_ns(d.copy_only_ns.median),
            fmt_ns(d.copy_overlapped_ns.median),
            fmt_ns(d.compute_idle_ns.median)
        );
        if let Some(l) = &d.lead_in_ns {
            let _ = writeln!(
                o,
                "**GPU {}, gap across step()** (lead-in, outside idle): median {} over {} \
                 iterations{}.\n",
                d.device_id,
                fmt_ns(l.median),
                l.n,
                d.lead_in_cause
                    .as_ref()
                    .map_or(String::new(), |c| format!(", mostly {}", md_cell(c)))
            );
        }
    }
}

/// The host calls the funnel asks about: synchronizations, synchronous copies, small
/// device-to-host reads, allocations and frees, by scope.
fn inventory_table(o: &mut String, i: &IdleSummary) {
    let _ = writeln!(o, "#### Host calls in the iterations used\n");
    if i.inventory.is_empty() {
        let _ = writeln!(
            o,
            "None of the {} iterations that split idle time made a synchronization, a \
             synchronous copy, a small device-to-host read, an allocation or a free.\n",
            i.inventory_iterations
        );
        return;
    }
    let _ = writeln!(
        o,
        "| kind | scope | function | GPU | calls / iteration | bytes / iteration | synchronous | \
         host time / iteration |"
    );
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|---:|");
    let n = i.inventory_iterations.max(1) as f64;
    for l in &i.inventory {
        md_row(o, &inventory_cells(l, n));
    }
    if i.inventory_left_out > 0 {
        let _ = writeln!(o, "\n{} more lines not shown.", i.inventory_left_out);
    }
    let _ = writeln!(
        o,
        "\nOver the {} iterations that split idle time; `small_dtoh` are `.item()`-like reads, \
         `synchronous` how many of all those calls blocked the host.\n",
        i.inventory_iterations
    );
}

/// The comparison's section: each device's causes, A against B.
pub(crate) fn comparison_section(changes: &[IdleCauseChange]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### Idle time by cause (median per iteration)\n");
    let _ = writeln!(
        o,
        "| GPU | cause | A | B | B − A | share of idle A | share of idle B |"
    );
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|");
    let ns = |x: Option<f64>| x.map_or("not measured".into(), fmt_ns);
    let pct = |x: Option<f64>| x.map_or("n/a".into(), fmt_pct);
    for c in changes {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.device_id,
            md_cell(&cause_label(&c.cause, c.detail.as_deref())),
            ns(c.a_median_ns),
            ns(c.b_median_ns),
            c.delta_median_ns.map_or("n/a".into(), |d| {
                if d > 0.0 {
                    format!("+{}", fmt_ns(d))
                } else if d < 0.0 {
                    format!("−{}", fmt_ns(-d))
                } else {
                    "0".into()
                }
            }),
            pct(c.a_share),
            pct(c.b_share)
        );
    }
    let _ = writeln!(
        o,
        "\nMedians over each side's kept iterations that split idle time by cause (not measured \
         where a side has none); the difference has no interval: the verdict above is the \
         compared metric's.\n"
    );
    o
}
