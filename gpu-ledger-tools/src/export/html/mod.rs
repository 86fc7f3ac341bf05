//! A self-contained HTML report of one ledger: inline CSS and inline SVG, no script, no font, no
//! image or style fetched from anywhere (a Content-Security-Policy of `default-src 'none'` and
//! the stylesheet's own hash makes the browser refuse anything else), so it opens offline and can
//! be attached to an issue.
//!
//! Charts (each an `<svg>` with the `id` below):
//! - `chart-families`: kernel families by share of device time, with their Amdahl ceiling and the
//!   end-to-end gain of a 2× speed-up;
//! - `chart-scopes-host`: per-iteration host time by scope, stacked (each scope's own time,
//!   children's time subtracted, plus the time outside every scope: the stack is the wall time);
//! - `chart-scopes-device`: per-iteration device time by scope (each scope's own launches);
//! - `chart-idle`: idle share of each device's activity window per iteration;
//! - `chart-idle-causes`: when rows split idle time by cause, idle time per iteration by cause,
//!   stacked, with the longest gaps and the steady state's host calls below (`idle.rs`);
//! - `chart-clocks` and `chart-power`: NVML SM clock and board power per iteration;
//! - `chart-roofline`: the roofline when counters are present, otherwise a notice;
//! - `chart-stalls`: when PC sampling ran, each scope's samples by warp stall reason, stacked,
//!   with its hottest source lines below.
//!
//! Long runs are bucketed: at most [`ReportOptions::max_points`] bars or points per chart, each the
//! mean of consecutive iterations. [`ReportBuilder`] builds the report one row at a time;
//! [`write_html_report`] pushes a ledger in memory through it.

use std::fmt::Write as _;
use std::io::{self, Write};

use std::borrow::Borrow;

use super::csp;
use super::summary::{ceiling_text, LedgerSummary, SummaryBuilder, SummaryOptions};
use super::svg::{
    hbar_chart, line_chart, placeholder, roofline_svg, stacked_bar_chart, AxisFormat, HBar,
    Roofline, Shade,
};
use super::text::{fmt_count, fmt_ns, fmt_pct, html_escape, sig3};
use crate::analysis::stats::Distribution;
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::{Header, IterationRow, Trailer};

mod charts;
mod idle;

use charts::{ChartBuckets, Charts};

/// How to build the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Page title; default `gpu-ledger report: <source>`.
    pub title: Option<String>,
    /// What the statistics cover.
    pub summary: SummaryOptions,
    /// Roofline points from counters; `None` (or no point) shows the "no counters" notice.
    pub roofline: Option<Roofline>,
    /// Most bars or points per per-iteration chart. Default 400.
    pub max_points: usize,
    /// Scopes shown separately in the stacked charts; the rest are grouped. Default 8.
    pub max_scopes: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            title: None,
            summary: SummaryOptions::default(),
            roofline: None,
            max_points: 400,
            max_scopes: 8,
        }
    }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
header, main, footer { max-width: 1000px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; }
h1 { font-size: 1.5em; margin: 0.3em 0; }
h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.env { color: #444; font-size: 0.92em; }
nav { font-size: 0.9em; margin: 8px 0 0; }
nav a { margin-right: 12px; color: #2a5db0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .v { font-size: 1.3em; font-weight: 600; }
.card .k { font-size: 0.8em; color: #555; }
figure.chart-figure { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 12px 0; padding: 8px; overflow-x: auto; }
figure.chart-figure > svg { display: block; width: 100%; max-width: 960px; height: auto; }
figcaption { font-size: 0.85em; color: #555; margin-top: 4px; }
ul.legend { list-style: none; padding: 0; margin: 6px 0 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 0.85em; }
ul.legend li { display: flex; align-items: center; }
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 5px; border-radius: 2px; border: 1px solid #0002; }
table { border-collapse: collapse; font-size: 0.85em; background: #fff; margin: 8px 0; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; }
td.l, th.l { text-align: left; max-width: 380px; min-width: 14ch; overflow-wrap: break-word; }
ul.warnings li { margin: 3px 0; }
footer { color: #777; font-size: 0.8em; padding: 24px 20px; }
"#;

fn shades_for(s: &LedgerSummary) -> Vec<Shade> {
    let mut out = Vec::new();
    for (label, idx) in [
        ("warm-up", &s.warmup),
        ("perturbed", &s.perturbed),
        ("incomplete", &s.incomplete),
    ] {
        for &(a, b) in idx.runs() {
            let run = if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            };
            out.push(Shade {
                from: a as f64,
                to: b as f64,
                label: format!("{label}: iterations {run}"),
            });
        }
    }
    out
}

fn card(o: &mut String, value: &str, key: &str) {
    let _ = write!(
        o,
        "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
        html_escape(value),
        html_escape(key)
    );
}

fn dist_cells(d: &Distribution) -> String {
    format!(
        "<td>{}</td><td>{}</td><td>{}</td>",
        html_escape(&fmt_ns(d.median)),
        html_escape(&fmt_ns(d.p90)),
        html_escape(&fmt_ns(d.p99))
    )
}

/// Writes the report of `ledger` (read from `source`) to `out`: its rows pushed through a
/// [`ReportBuilder`] made for their number, so that every figure is exact and the charts split
/// the rows evenly.
///
/// # Errors
/// Any error of `out`.
pub fn write_html_report<W: Write>(
    ledger: &Ledger,
    source: &str,
    opts: &ReportOptions,
    out: W,
) -> io::Result<()> {
    let mut b = ReportBuilder::for_rows(opts, ledger.iterations.len());
    ledger.iterations.iter().for_each(|r| b.push(r));
    b.finish(&ledger.header, ledger.trailer.as_ref(), source, out)
}

/// The report built one row at a time: the summary of a [`SummaryBuilder`] and charts of at most
/// [`ReportOptions::max_points`] bars, each the mean of a stated number of consecutive rows, so
/// that neither memory nor the report's size grows with the rows of a stream. `R` is how a row is
/// handed over: the row itself (read from a stream) or a reference (a ledger in memory).
#[derive(Debug)]
pub struct ReportBuilder<'o, R = IterationRow> {
    opts: &'o ReportOptions,
    summary: SummaryBuilder<'o, R>,
    charts: ChartBuckets,
}

impl<'o> ReportBuilder<'o> {
    /// A builder for `opts` over a stream of rows, in bounded memory; its bars hold a power of
    /// two of rows.
    pub fn new(opts: &'o ReportOptions) -> Self {
        Self {
            opts,
            summary: SummaryBuilder::new(&opts.summary),
            charts: ChartBuckets::new(opts),
        }
    }
}

impl<'o, R: Borrow<IterationRow>> ReportBuilder<'o, R> {
    /// A builder for `opts` over a ledger of `rows` rows (one in memory): every figure exact
    /// ([`Budget::exact`](crate::analysis::series::Budget::exact)) and the rows split evenly between
    /// the bars.
    pub fn for_rows(opts: &'o ReportOptions, rows: usize) -> Self {
        Self {
            opts,
            summary: SummaryBuilder::for_rows(&opts.summary, rows),
            charts: ChartBuckets::for_rows(opts, rows),
        }
    }

    /// Takes the next row, in ledger order.
    pub fn push(&mut self, row: R) {
        self.charts.push(row.borrow(), &self.opts.summary.filter);
        self.summary.push(row);
    }

    /// Rows per bar of the per-iteration charts so far.
    pub fn bucket_width(&self) -> usize {
        self.charts.width()
    }

    /// Bars of the per-iteration charts so far.
    pub fn buckets(&self) -> usize {
        self.charts.len()
    }

    /// Writes the report of the ledger with `header` and `trailer`, read from `source`.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn finish<W: Write>(
        self,
        header: &Header,
        trailer: Option<&Trailer>,
        source: &str,
        out: W,
    ) -> io::Result<()> {
        let s = self.summary.finish(header, trailer);
        let charts = self.charts.finish(&s);
        write_report(header, &s, &charts, source, self.opts, out)
    }
}

/// Writes the report of a ledger whose summary is `s` and whose per-iteration charts are
/// `charts`.
///
/// # Errors
/// Any error of `out`.
fn write_report<W: Write>(
    header: &Header,
    s: &LedgerSummary,
    charts: &Charts,
    source: &str,
    opts: &ReportOptions,
    mut out: W,
) -> io::Result<()> {
    let html = render(header, s, charts, source, opts);
    out.write_all(html.as_bytes())?;
    out.flush()
}

/// The whole page: its head, the sections in the order of the navigation, and the footer.
fn render(
    header: &Header,
    s: &LedgerSummary,
    charts: &Charts,
    source: &str,
    opts: &ReportOptions,
) -> String {
    let title = opts
        .title
        .clone()
        .unwrap_or_else(|| format!("gpu-ledger report: {source}"));
    let mut o = String::with_capacity(64 * 1024);
    page_head(&mut o, &title);
    if s.rows == 0 {
        // A run with no row (`fail_open` ran it unprofiled): its reason, once, at the top, and
        // no empty panels or links to them.
        let _ = write!(
            o,
            "<header><h1>{}</h1><p class=\"env\">{}</p></header><main>\
             <section id=\"overview\"><h2>No iteration was profiled</h2><ul class=\"warnings\">",
            html_escape(&title),
            html_escape(&s.environment)
        );
        for w in &s.warnings {
            let _ = write!(o, "<li>{}</li>", html_escape(w));
        }
        o.push_str("</ul></section>\n</main>");
        page_footer(&mut o, header, source);
        return o;
    }
    page_header(&mut o, &title, s);
    overview_section(&mut o, s);
    families_section(&mut o, s);
    scopes_section(&mut o, s, charts);
    if let Some(st) = &s.stalls {
        o.push_str(&super::stalls_view::html_section(st));
    }
    let shades = shades_for(s);
    idle_section(&mut o, s, charts, &shades);
    idle::section(&mut o, s.idle.as_ref(), charts);
    nvml_section(&mut o, charts, &shades);
    roofline_section(&mut o, opts);
    warnings_section(&mut o, s);
    page_footer(&mut o, header, source);
    o
}

/// The document's `<head>`: the policy that forbids anything fetched, the title and the inline
/// stylesheet the policy's hash allows.
fn page_head(o: &mut String, title: &str) {
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"generator\" content=\"gpu-ledger {}\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        csp::policy(CSS),
        env!("CARGO_PKG_VERSION"),
        html_escape(title)
    );
}

/// The page's title, environment line and links to its sections (warp stalls only when PC
/// sampling ran), so that a reader jumps to the section they came for.
fn page_header(o: &mut String, title: &str, s: &LedgerSummary) {
    let idle_link = idle::nav_link(s);
    let _ = writeln!(
        o,
        "<header><h1>{}</h1><p class=\"env\">{}</p><nav><a href=\"#overview\">Overview</a>\
         <a href=\"#families\">Kernel families</a><a href=\"#scopes\">Scopes</a>\
         {}<a href=\"#idle\">Idle</a>{idle_link}<a href=\"#nvml\">Clocks &amp; power</a>\
         <a href=\"#roofline\">Roofline</a><a href=\"#warnings\">Warnings ({})</a></nav></header><main>",
        html_escape(title),
        html_escape(&s.environment),
        if s.stalls.is_some() {
            "<a href=\"#stalls\">Warp stalls</a>"
        } else {
            ""
        },
        s.warnings.len()
    );
}

/// The overview: the headline figures as cards, and which iterations the statistics leave out,
/// so that the page answers "how long, how busy" before any chart.
fn overview_section(o: &mut String, s: &LedgerSummary) {
    o.push_str("<section id=\"overview\"><h2>Overview</h2><div class=\"cards\">");
    card(
        o,
        &format!("{} / {}", s.used.len(), s.rows),
        "iterations used / rows",
    );
    if let Some(d) = &s.host_wall_ns {
        card(o, &fmt_ns(d.median), "host wall per iteration (median)");
        card(o, &fmt_ns(d.p99), "host wall p99");
    }
    for d in &s.devices {
        if let Some(b) = d.busy_share_of_wall {
            card(
                o,
                &fmt_pct(b),
                &format!("GPU {} busy / host wall", d.device_id),
            );
        }
        if let Some(i) = &d.idle_share {
            card(
                o,
                &fmt_pct(i.median),
                &format!("GPU {} idle share (median)", d.device_id),
            );
        }
    }
    if let Some(e) = s.energy.as_ref().and_then(|e| e.mean_j_per_iteration) {
        card(o, &format!("{} J", sig3(e)), "energy per iteration (mean)");
    }
    o.push_str("</div>");
    let _ = writeln!(
        o,
        "<p>Rows of the statistics: {} of {} used; {}.{}{}</p></section>",
        s.used.len(),
        s.rows,
        html_escape(&s.left_out()),
        if s.run_complete {
            ""
        } else {
            " <strong>The run did not finish (no trailer).</strong>"
        },
        if s.activities_recorded {
            " Activities were recorded: <code>gpu-ledger trace</code> gives the full timeline."
        } else {
            ""
        }
    );
}

/// The kernel families: their shares as bars with Amdahl ceilings, then the table of the top
/// families, the report's answer to "what is worth speeding up".
fn families_section(o: &mut String, s: &LedgerSummary) {
    o.push_str("<section id=\"families\"><h2>Kernel families</h2>");
    let bars = family_bars(s);
    if bars.is_empty() {
        o.push_str(&placeholder(
            "chart-families",
            "Kernel families",
            "no kernel in the iterations used",
        ));
    } else {
        o.push_str(&hbar_chart(
            "chart-families",
            "Kernel families by share of device time, with Amdahl ceilings",
            &bars,
            "Share of device busy time (union over streams). Ceiling 1/(1-p): the most removing the \
             family could gain; 2× → the gain of making it twice as fast. Both bound end-to-end time \
             only when the GPU is the bottleneck.",
        ));
        family_table(o, s);
    }
    o.push_str("</section>\n");
}

/// One bar per top family, with the text and tooltip the chart shows beside it.
fn family_bars(s: &LedgerSummary) -> Vec<HBar> {
    s.families
        .families
        .iter()
        .take(s.top_families)
        .map(|f| HBar {
            label: f.family.clone(),
            value: f.share_of_device_time.unwrap_or(0.0),
            annotation: format!(
                "{} · ceiling {} · 2× → {}",
                f.share_of_device_time.map_or("n/a".into(), fmt_pct),
                ceiling_text(f),
                f.speedup_if_2x.map_or("n/a".into(), |v| format!("{v:.3}×"))
            ),
            tooltip: format!(
                "{}\n{} launches, {} in total, {} per launch\n{}",
                f.family,
                f.launches,
                fmt_ns(f.total_ns as f64),
                fmt_ns(f.mean_ns),
                f.names.join("\n")
            ),
        })
        .collect()
}

/// The table of the top families: the chart's figures per iteration and per launch, with the
/// kernel names each family groups as the row's tooltip.
fn family_table(o: &mut String, s: &LedgerSummary) {
    let fams = &s.families;
    o.push_str(
        "<table><tr><th>#</th><th class=\"l\">family</th><th>launches/iter</th><th>time/iter</th>\
         <th>mean/launch</th><th>share</th><th>ceiling</th><th>2× gain</th><th>shapes</th>\
         <th>graph launches/iter</th></tr>",
    );
    let iters = fams.iterations.max(1) as f64;
    for f in fams.families.iter().take(s.top_families) {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"l\" title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.rank,
            html_escape(&f.names.join("\n")),
            html_escape(&f.family),
            fmt_count(f.launches_per_iteration),
            fmt_ns(f.total_ns as f64 / iters),
            fmt_ns(f.mean_ns),
            f.share_of_device_time.map_or("n/a".into(), fmt_pct),
            ceiling_text(f),
            f.speedup_if_2x.map_or("n/a".into(), |v| format!("{v:.3}×")),
            f.shapes.len(),
            fmt_count(f.graph_launches as f64 / iters)
        );
    }
    o.push_str("</table>");
}

/// The scopes: host and device time per iteration stacked by scope, then the table of their
/// distributions, so that time is placed in the program's own structure.
fn scopes_section(o: &mut String, s: &LedgerSummary, charts: &Charts) {
    o.push_str("<section id=\"scopes\"><h2>Scopes</h2>");
    let Charts {
        labels,
        dimmed,
        bucket_note,
        ..
    } = charts;
    if charts.has_scopes {
        o.push_str(&stacked_bar_chart(
            "chart-scopes-host",
            "Host time per iteration by scope (own time, stacked)",
            labels,
            &charts.host,
            dimmed,
            AxisFormat::Ns,
            "host time",
            &format!(
                "Each scope's own host time (its children's subtracted) plus the time outside \
                 every scope: the stack is the iteration's wall time when scopes run on one \
                 thread. Faded bars are left out of the statistics.{bucket_note}"
            ),
        ));
        o.push_str(&stacked_bar_chart(
            "chart-scopes-device",
            "Device time per iteration by scope (own launches, stacked)",
            labels,
            &charts.device,
            dimmed,
            AxisFormat::Ns,
            "device time",
            &format!(
                "Union of the GPU intervals of each scope's own launches; with overlapping \
                 streams the stack can exceed the device's busy time.{bucket_note}"
            ),
        ));
    } else {
        o.push_str(&placeholder(
            "chart-scopes-host",
            "Host time per iteration by scope",
            "no scope in this ledger",
        ));
    }
    if !s.scopes.is_empty() {
        scope_table(o, s);
    }
    o.push_str("</section>\n");
}

/// The table of each scope's host and inclusive device time distributions and its launches.
fn scope_table(o: &mut String, s: &LedgerSummary) {
    o.push_str(
        "<table><tr><th class=\"l\">scope</th><th>ran in</th><th>host median</th><th>host p90</th>\
         <th>host p99</th><th>device incl. median</th><th>device p90</th><th>device p99</th>\
         <th>launches (median)</th></tr>",
    );
    for sc in &s.scopes {
        let device = match s.scope_device_ns(sc) {
            Some(d) => dist_cells(d),
            None => "<td>not measured</td>".repeat(3),
        };
        let _ = write!(
            o,
            "<tr><td class=\"l\">{}</td><td>{}/{}</td>{}{}<td>{}</td></tr>",
            html_escape(&sc.path),
            sc.present_in,
            sc.iterations,
            s.scope_host_ns(sc)
                .map_or_else(|| "<td>not measured</td>".repeat(3), dist_cells),
            device,
            fmt_count(sc.launches.median)
        );
    }
    o.push_str("</table>");
    if !s.device_traced() {
        let _ = write!(o, "<p>{}</p>", html_escape(s.scope_device_note()));
    }
}

/// Device idle time: the idle share per iteration and GPU, then each GPU's busy and idle
/// figures, which say whether the GPU or the host is the bottleneck.
fn idle_section(o: &mut String, s: &LedgerSummary, charts: &Charts, shades: &[Shade]) {
    o.push_str("<section id=\"idle\"><h2>Device idle time</h2>");
    o.push_str(&line_chart(
        "chart-idle",
        "Idle share of the device's activity window per iteration",
        &charts.xs,
        &charts.idle,
        shades,
        AxisFormat::Percent,
        "idle share",
        "iteration",
        true,
        &format!(
            "Gaps between activities inside the window from the first activity's start to the \
             last one's end, over the window.{}",
            charts.bucket_note
        ),
    ));
    if !s.devices.is_empty() {
        o.push_str(
            "<table><tr><th>GPU</th><th>iterations</th><th>busy median</th><th>busy / host wall</th>\
             <th>idle share median</th><th>idle share p90</th><th>largest gap</th></tr>",
        );
        for d in &s.devices {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                d.device_id,
                d.iterations,
                fmt_ns(d.busy_ns.median),
                d.busy_share_of_wall.map_or("n/a".into(), fmt_pct),
                d.idle_share.as_ref().map_or("n/a".into(), |x| fmt_pct(x.median)),
                d.idle_share.as_ref().map_or("n/a".into(), |x| fmt_pct(x.p90)),
                fmt_ns(d.largest_gap_max_ns as f64)
            );
        }
        o.push_str("</table>");
    }
    o.push_str("</section>\n");
}

/// SM clock and board power per iteration from NVML, or notices saying they were not sampled:
/// a moving clock makes iterations' times incomparable.
fn nvml_section(o: &mut String, charts: &Charts, shades: &[Shade]) {
    o.push_str("<section id=\"nvml\"><h2>Clocks and power</h2>");
    if let Some((clocks, power)) = &charts.nvml {
        o.push_str(&line_chart(
            "chart-clocks",
            "SM clock per iteration (NVML mean)",
            &charts.xs,
            clocks,
            shades,
            AxisFormat::Plain,
            "SM clock (MHz)",
            "iteration",
            true,
            "A clock that moves between iterations makes their times incomparable; the axis \
             starts at 0 MHz, so that a ripple of a few MHz looks as small as it is.",
        ));
        o.push_str(&line_chart(
            "chart-power",
            "Board power per iteration (NVML mean)",
            &charts.xs,
            power,
            shades,
            AxisFormat::Plain,
            "power (W)",
            "iteration",
            false,
            "",
        ));
    } else {
        o.push_str(&placeholder(
            "chart-clocks",
            "SM clock per iteration",
            "no NVML figures in this ledger: clocks and power were not sampled",
        ));
        o.push_str(&placeholder(
            "chart-power",
            "Board power per iteration",
            "no NVML figures in this ledger",
        ));
    }
    o.push_str("</section>\n");
}

/// The roofline from counters, or the notice that there were none.
fn roofline_section(o: &mut String, opts: &ReportOptions) {
    o.push_str("<section id=\"roofline\"><h2>Roofline</h2>");
    o.push_str(&roofline_svg(opts.roofline.as_ref()));
    o.push_str("</section>\n");
}

/// Every warning of the summary, the reasons to doubt the figures above; it closes `<main>`.
fn warnings_section(o: &mut String, s: &LedgerSummary) {
    let _ = write!(o, "<section id=\"warnings\"><h2>Warnings</h2>");
    if s.warnings.is_empty() {
        o.push_str("<p>None.</p>");
    } else {
        o.push_str("<ul class=\"warnings\">");
        for w in &s.warnings {
            let _ = write!(o, "<li>{}</li>", html_escape(w));
        }
        o.push_str("</ul>");
    }
    o.push_str("</section>\n</main>");
}

/// Where the report comes from: gpu-ledger's version, the ledger's path, schema and writer.
fn page_footer(o: &mut String, header: &Header, source: &str) {
    let _ = writeln!(
        o,
        "<footer>Generated by gpu-ledger {} from <code>{}</code> (ledger schema {}, written by \
         gpu-ledger {}). Self-contained: no script, no network.</footer></body></html>",
        env!("CARGO_PKG_VERSION"),
        html_escape(source),
        header.schema_version,
        html_escape(&header.gpu_ledger_version)
    );
}
