//! The report's section on why the GPU was idle, present when some used row split idle time by
//! cause (docs/idle.md): `chart-idle-causes`, idle time per iteration by cause, stacked; the causes'
//! table over the used rows; the scopes behind `host_launch`; the longest gaps with their
//! cause, scope, thread and the work on either side; and the host calls of the steady state.

use std::fmt::Write as _;

use super::charts::Charts;
use crate::export::idle_view::{cause_cells, cause_label, fmt_bytes, inventory_cells, TOP_SCOPES};
use crate::export::summary::{IdleSummary, LedgerSummary};
use crate::export::svg::{stacked_bar_chart, AxisFormat};
use crate::export::text::{fmt_ns, fmt_pct, html_escape};

/// The navigation's link to the section, when there is one.
pub(super) fn nav_link(s: &LedgerSummary) -> &'static str {
    match s.idle {
        Some(_) => "<a href=\"#idle-causes\">Idle causes</a>",
        None => "",
    }
}

/// The section, or nothing when no used row split idle time.
pub(super) fn section(o: &mut String, idle: Option<&IdleSummary>, charts: &Charts) {
    let Some(i) = idle else { return };
    o.push_str("<section id=\"idle-causes\"><h2>Why the GPU was idle</h2>");
    o.push_str(&stacked_bar_chart(
        "chart-idle-causes",
        "Idle time per iteration by cause (all GPUs, stacked)",
        &charts.labels,
        &charts.idle_causes,
        &charts.dimmed,
        AxisFormat::Ns,
        "idle time",
        &format!(
            "Gaps inside each device's activity window, split by cause and summed over devices; \
             the stack is the idle time. Bars of rows that did not split idle time (untraced, or \
             written without idle causes) are empty. Faded bars are left out of the \
             statistics.{}",
            charts.bucket_note
        ),
    ));
    cause_table(o, i);
    scopes(o, i);
    gaps_table(o, i);
    inventory_table(o, i);
    o.push_str("</section>\n");
}

/// Each device's causes over the used rows.
fn cause_table(o: &mut String, i: &IdleSummary) {
    o.push_str(
        "<table id=\"idle-causes-table\"><tr><th>GPU</th><th class=\"l\">cause</th>\
         <th>median / iteration</th><th>p90 / iteration</th><th>share of idle</th><th>gaps</th></tr>",
    );
    for c in &i.causes {
        html_row(o, &cause_cells(c), 1..2);
    }
    o.push_str("</table>");
    for d in &i.devices {
        let _ = write!(
            o,
            "<p>GPU {}: idle {} of the host wall time of the {} iterations that split it; copy-only \
             {} and copies overlapped with compute {} per iteration (medians){}.</p>",
            d.device_id,
            d.idle_share_of_wall.map_or("n/a".into(), fmt_pct),
            d.iterations,
            fmt_ns(d.copy_only_ns.median),
            fmt_ns(d.copy_overlapped_ns.median),
            d.lead_in_ns.as_ref().map_or(String::new(), |l| format!(
                "; the gap across step() (outside idle) {} median",
                fmt_ns(l.median)
            ))
        );
    }
}

/// The scopes the launching thread was in while the host was late.
fn scopes(o: &mut String, i: &IdleSummary) {
    for d in &i.devices {
        let list: Vec<String> = (i.host_launch_scopes.iter())
            .filter(|s| s.device_id == d.device_id)
            .take(TOP_SCOPES)
            .map(|s| {
                format!(
                    "<code>{}</code> {}",
                    html_escape(&s.scope),
                    s.share_of_idle.map_or("n/a".into(), fmt_pct)
                )
            })
            .collect();
        if !list.is_empty() {
            let _ = write!(
                o,
                "<p>GPU {}, host_launch by scope (share of idle): {}.</p>",
                d.device_id,
                list.join(", ")
            );
        }
    }
}

/// The longest gaps of the used rows: where, how long, why, and the work on either side.
fn gaps_table(o: &mut String, i: &IdleSummary) {
    if i.largest_gaps.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "<h3>Longest gaps</h3><table id=\"idle-gaps\"><tr><th>iteration</th><th>GPU</th>\
         <th>start (in window)</th><th>length</th><th class=\"l\">cause</th><th class=\"l\">rule</th>\
         <th class=\"l\">scope</th><th class=\"l\">thread</th><th class=\"l\">call</th>\
         <th class=\"l\">before</th><th class=\"l\">after</th></tr>"
    );
    let opt = |s: Option<&str>| html_escape(s.unwrap_or(""));
    for g in &i.largest_gaps {
        let x = &g.gap;
        let thread = match (&x.thread, x.tid) {
            (Some(n), Some(t)) => format!("{n} (tid {t})"),
            (None, Some(t)) => format!("tid {t}"),
            (Some(n), None) => n.clone(),
            (None, None) => String::new(),
        };
        let call = match (&x.function, x.bytes) {
            (Some(f), Some(b)) => format!("{f} ({})", fmt_bytes(b as f64)),
            (Some(f), None) => f.clone(),
            _ => String::new(),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            g.iteration,
            g.device_id,
            fmt_ns(g.offset_ns as f64),
            fmt_ns(x.ns as f64),
            html_escape(&cause_label(&x.cause, x.detail.as_deref())),
            html_escape(&x.rule),
            opt(x.scope.as_deref()),
            html_escape(&thread),
            html_escape(&call),
            opt(x.before.as_deref()),
            opt(x.after.as_deref())
        );
    }
    let _ = write!(
        o,
        "</table><p>The {} longest gaps of the iterations used (at most {} are kept); each named \
         by its largest piece. <code>gpu-ledger trace</code> marks them on the device tracks.</p>",
        i.largest_gaps.len(),
        crate::export::summary::LARGEST_GAPS_KEPT
    );
}

/// The host calls of the steady state, per iteration.
fn inventory_table(o: &mut String, i: &IdleSummary) {
    o.push_str("<h3>Host calls in the iterations used</h3>");
    if i.inventory.is_empty() {
        o.push_str(
            "<p>None: no synchronization, synchronous copy, small read, allocation or free.</p>",
        );
        return;
    }
    o.push_str(
        "<table id=\"idle-host-calls\"><tr><th class=\"l\">kind</th><th class=\"l\">scope</th>\
         <th class=\"l\">function</th><th>GPU</th><th>calls / iteration</th>\
         <th>bytes / iteration</th><th>synchronous</th><th>host time / iteration</th></tr>",
    );
    let n = i.inventory_iterations.max(1) as f64;
    for l in &i.inventory {
        html_row(o, &inventory_cells(l, n), 0..3);
    }
    o.push_str("</table>");
}

/// A table row of `cells`, each escaped; those in `left` aligned left (text), the rest right.
fn html_row(o: &mut String, cells: &[String], left: std::ops::Range<usize>) {
    o.push_str("<tr>");
    for (j, c) in cells.iter().enumerate() {
        let class = if left.contains(&j) {
            " class=\"l\""
        } else {
            ""
        };
        let _ = write!(o, "<td{class}>{}</td>", html_escape(c));
    }
    o.push_str("</tr>");
}
