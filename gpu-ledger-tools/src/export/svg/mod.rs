//! Inline SVG charts for the HTML report: horizontal bars, stacked bars, lines and a roofline.
//! Each function returns an HTML `<figure>` holding one chart `<svg>` (with an `id`, a `role="img"`
//! and an `aria-label`), its legend (swatches are tiny SVGs too, since the report's policy allows
//! no `style` attribute) and a caption. Every text is escaped; hover tooltips are SVG
//! `<title>` elements, so no script is needed.

use std::fmt::Write as _;

use super::text::{fmt_count, fmt_ns, html_escape, sig3};

mod roofline;

pub use roofline::{roofline_svg, Roofline, RooflinePoint};

/// Colours of series, in order (Tableau 10).
pub(crate) const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Colour of series `i`.
pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Width of every chart, in SVG units.
pub(crate) const W: f64 = 760.0;
const H: f64 = 300.0;
const ML: f64 = 72.0;
const MR: f64 = 16.0;
const MT: f64 = 14.0;
const MB: f64 = 44.0;

/// How the values of an axis are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AxisFormat {
    /// Nanoseconds, written with a unit (`2.00 ms`).
    Ns,
    /// A fraction written as a percentage.
    Percent,
    /// A plain number.
    Plain,
}

impl AxisFormat {
    fn label(&self, v: f64) -> String {
        match self {
            AxisFormat::Ns => fmt_ns(v),
            AxisFormat::Percent => format!("{:.1}%", v * 100.0),
            AxisFormat::Plain => sig3(v),
        }
    }

    /// The labels of `ticks`, `step` apart: every label of a time axis in one unit, that of
    /// its largest tick (`0 ms` under `2.0 ms`, never `0 ns`), so that they read as one scale.
    fn tick_labels(&self, ticks: &[f64], step: f64) -> Vec<String> {
        if *self != AxisFormat::Ns {
            return ticks.iter().map(|&t| self.tick(t, step)).collect();
        }
        let top = ticks.iter().fold(0.0f64, |m, t| m.max(t.abs()));
        let (div, unit) = if top < 1e3 {
            (1.0, "ns")
        } else if top < 1e6 {
            (1e3, "µs")
        } else if top < 1e9 {
            (1e6, "ms")
        } else {
            (1e9, "s")
        };
        let decimals = if step > 0.0 && step.is_finite() {
            (-(step / div).log10().floor()).clamp(0.0, 6.0) as usize
        } else {
            0
        };
        ticks
            .iter()
            .map(|&t| format!("{:.*} {unit}", decimals, t / div))
            .collect()
    }

    /// A tick label, with as many decimals as ticks `step` apart need.
    fn tick(&self, v: f64, step: f64) -> String {
        let decimals = |unit_step: f64| -> usize {
            if unit_step > 0.0 && unit_step.is_finite() {
                (-unit_step.log10().floor()).clamp(0.0, 6.0) as usize
            } else {
                0
            }
        };
        match self {
            AxisFormat::Percent => format!("{:.*}%", decimals(step * 100.0), v * 100.0),
            AxisFormat::Plain => format!("{:.*}", decimals(step), v),
            AxisFormat::Ns => fmt_ns(v),
        }
    }
}

/// One series of a chart: a name and one value per x position (`None` for a gap).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// Name shown in the legend.
    pub(crate) name: String,
    /// Values, one per x position.
    pub(crate) values: Vec<Option<f64>>,
    /// Its colour, when it must match the same name in another chart (a scope); else the
    /// palette's by position.
    pub(crate) color: Option<&'static str>,
}

impl Series {
    /// The colour series `k` of a chart is drawn in.
    fn color(&self, k: usize) -> &'static str {
        self.color.unwrap_or_else(|| color(k))
    }
}

/// A horizontal bar: a label, a value in `[0, 1]` (a share) and a text after the bar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HBar {
    /// Label left of the bar (shortened when long; the full text is in the tooltip).
    pub(crate) label: String,
    /// Length of the bar as a share.
    pub(crate) value: f64,
    /// Text right of the bar.
    pub(crate) annotation: String,
    /// Tooltip.
    pub(crate) tooltip: String,
}

/// A range of x positions to shade, with its legend label (warm-up, perturbed).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shade {
    /// First x value shaded.
    pub(crate) from: f64,
    /// Last x value shaded.
    pub(crate) to: f64,
    /// What it marks.
    pub(crate) label: String,
}

/// Step of "nice" ticks (1, 2 or 5 times a power of ten) for about `n` ticks over `range`.
fn nice_step(range: f64, n: f64) -> f64 {
    if !(range.is_finite() && range > 0.0) {
        return 1.0;
    }
    let raw = range / n;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let f = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// Ticks between `lo` and `hi`.
fn ticks(lo: f64, hi: f64, n: f64) -> Vec<f64> {
    let step = nice_step(hi - lo, n);
    let first = (lo / step).ceil();
    let mut out = Vec::new();
    for k in 0..50 {
        let t = (first + f64::from(k)) * step;
        if t > hi + step * 1e-9 {
            break;
        }
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
    }
    out
}

/// `s` cut to `max` characters, ending in `…` when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// Opens a chart's `<svg>`, `h` high, with its id, its label and a title.
pub(crate) fn open_svg(o: &mut String, id: &str, label: &str, h: f64) {
    let _ = write!(
        o,
        "<svg id=\"{}\" class=\"chart\" role=\"img\" aria-label=\"{}\" viewBox=\"0 0 {W} {h}\" \
         width=\"{W}\" height=\"{h}\" xmlns=\"http://www.w3.org/2000/svg\" \
         font-family=\"system-ui, sans-serif\" font-size=\"11\">",
        html_escape(id),
        html_escape(label)
    );
    let _ = write!(o, "<title>{}</title>", html_escape(label));
}

/// A chart's `<figure>`: its SVG, a legend of swatches and a caption.
pub(crate) fn figure(id: &str, svg: &str, legend: &[(String, &str)], caption: &str) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<figure class=\"chart-figure\" id=\"fig-{}\">",
        html_escape(id)
    );
    o.push_str(svg);
    if !legend.is_empty() {
        o.push_str("<ul class=\"legend\">");
        for (name, c) in legend {
            let _ = write!(
                o,
                "<li><svg class=\"swatch\" viewBox=\"0 0 1 1\" aria-hidden=\"true\">\
                 <rect width=\"1\" height=\"1\" fill=\"{}\"/></svg>{}</li>",
                html_escape(c),
                html_escape(name)
            );
        }
        o.push_str("</ul>");
    }
    if !caption.is_empty() {
        let _ = write!(o, "<figcaption>{}</figcaption>", html_escape(caption));
    }
    o.push_str("</figure>");
    o
}

/// A figure with a message instead of a chart (the SVG is still there, with the message).
pub(crate) fn placeholder(id: &str, title: &str, message: &str) -> String {
    let mut o = String::new();
    open_svg(&mut o, id, title, 80.0);
    let _ = write!(
        o,
        "<rect x=\"0.5\" y=\"0.5\" width=\"{}\" height=\"79\" fill=\"#f7f7f7\" stroke=\"#ccc\"/>\
         <text class=\"placeholder\" x=\"{}\" y=\"45\" text-anchor=\"middle\" font-size=\"14\" \
         fill=\"#666\">{}</text></svg>",
        W - 1.0,
        W / 2.0,
        html_escape(message)
    );
    figure(id, &o, &[], "")
}

/// Horizontal bars of shares (0..1), one per item, with a text after each bar.
pub(crate) fn hbar_chart(id: &str, title: &str, items: &[HBar], caption: &str) -> String {
    if items.is_empty() {
        return placeholder(id, title, "nothing to show");
    }
    let row = 24.0;
    let label_w = 230.0;
    let text_w = 250.0;
    let h = MT + row * items.len() as f64 + 28.0;
    let bar_w = W - label_w - text_w - MR;
    let mut o = String::new();
    open_svg(&mut o, id, title, h);
    let max = items
        .iter()
        .map(|i| i.value)
        .fold(0.0f64, f64::max)
        .clamp(1e-12, 1.0);
    let scale = |v: f64| (v.clamp(0.0, 1.0) / max) * bar_w;
    for t in ticks(0.0, max, 5.0) {
        let x = label_w + scale(t);
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{MT}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e3e3e3\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
            h - 24.0,
            h - 10.0,
            AxisFormat::Percent.tick(t, nice_step(max, 5.0))
        );
    }
    for (i, it) in items.iter().enumerate() {
        let y = MT + row * i as f64;
        let wbar = scale(it.value);
        let _ = write!(
            o,
            "<g class=\"bar\"><title>{}</title>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#222\">{}</text>\
             <rect x=\"{label_w}\" y=\"{:.1}\" width=\"{wbar:.1}\" height=\"{:.1}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text></g>",
            html_escape(&it.tooltip),
            label_w - 6.0,
            y + row * 0.65,
            html_escape(&shorten(&it.label, 36)),
            y + 4.0,
            row - 8.0,
            color(i),
            label_w + wbar + 6.0,
            y + row * 0.65,
            html_escape(&it.annotation)
        );
    }
    o.push_str("</svg>");
    figure(id, &o, &[], caption)
}

fn y_axis(o: &mut String, lo: f64, hi: f64, fmt: AxisFormat, y_title: &str) -> impl Fn(f64) -> f64 {
    let plot_h = H - MT - MB;
    let span = if hi > lo { hi - lo } else { 1.0 };
    let sy = move |v: f64| MT + plot_h - (v - lo) / span * plot_h;
    let step = nice_step(hi - lo, 5.0);
    let ts = ticks(lo, hi, 5.0);
    for (t, label) in ts.iter().zip(fmt.tick_labels(&ts, step)) {
        let y = sy(*t);
        let _ = write!(
            o,
            "<line x1=\"{ML}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e3e3e3\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
            W - MR,
            ML - 6.0,
            y + 4.0,
            html_escape(&label)
        );
    }
    axes(o, y_title);
    sy
}

/// The two axis lines of a plot and the y axis title, rotated along it.
fn axes(o: &mut String, y_title: &str) {
    let plot_h = H - MT - MB;
    let _ = write!(
        o,
        "<line x1=\"{ML}\" y1=\"{MT}\" x2=\"{ML}\" y2=\"{:.1}\" stroke=\"#888\"/>\
         <line x1=\"{ML}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\
         <text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\" \
         fill=\"#333\">{}</text>",
        H - MB,
        H - MB,
        W - MR,
        H - MB,
        MT + plot_h / 2.0,
        MT + plot_h / 2.0,
        html_escape(y_title)
    );
}

fn x_title(o: &mut String, t: &str) {
    let _ = write!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">{}</text>",
        ML + (W - ML - MR) / 2.0,
        H - 6.0,
        html_escape(t)
    );
}

/// Stacked bars: one bar per x label, one segment per series (missing values count as 0; a bar
/// with no value in any series says it was not measured).
/// `dimmed[i]` draws bar `i` faded (iterations left out of the statistics).
#[allow(clippy::too_many_arguments)]
pub(crate) fn stacked_bar_chart(
    id: &str,
    title: &str,
    x_labels: &[String],
    series: &[Series],
    dimmed: &[bool],
    fmt: AxisFormat,
    y_title: &str,
    caption: &str,
) -> String {
    let n = x_labels.len();
    if n == 0 || series.is_empty() {
        return placeholder(id, title, "nothing to show");
    }
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().flatten().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().fold(0.0f64, f64::max);
    let hi = on_tick(if max > 0.0 { max * 1.05 } else { 1.0 });
    let mut o = String::new();
    open_svg(&mut o, id, title, H);
    let sy = y_axis(&mut o, 0.0, hi, fmt, y_title);
    let plot_w = W - ML - MR;
    let slot = plot_w / n as f64;
    let bw = (slot * 0.8).max(0.5);
    let label_every = (n as f64 / 12.0).ceil().max(1.0) as usize;
    for i in 0..n {
        let x = ML + slot * i as f64 + (slot - bw) / 2.0;
        let faded = dimmed.get(i).copied().unwrap_or(false);
        // A bar with no value at all was not measured: no total of 0 is shown for it.
        let measured = series
            .iter()
            .any(|s| s.values.get(i).copied().flatten().is_some());
        let _ = write!(
            o,
            "<g class=\"stack\"{}><title>{}</title>",
            if faded { " opacity=\"0.35\"" } else { "" },
            html_escape(&format!(
                "{}: {}{}{}",
                x_labels[i],
                if measured {
                    format!("total {}", fmt.label(totals[i]))
                } else {
                    "not measured".to_string()
                },
                series
                    .iter()
                    .filter_map(|s| s.values.get(i).copied().flatten().map(|v| (s, v)))
                    .map(|(s, v)| format!("\n{}: {}", s.name, fmt.label(v)))
                    .collect::<String>(),
                if faded {
                    "\n(left out of statistics)"
                } else {
                    ""
                }
            ))
        );
        let mut acc = 0.0;
        for (k, s) in series.iter().enumerate() {
            let v = s.values.get(i).copied().flatten().unwrap_or(0.0).max(0.0);
            if v <= 0.0 {
                continue;
            }
            let y1 = sy(acc + v);
            let y0 = sy(acc);
            let _ = write!(
                o,
                "<rect x=\"{x:.2}\" y=\"{y1:.2}\" width=\"{bw:.2}\" height=\"{:.2}\" fill=\"{}\"/>",
                (y0 - y1).max(0.0),
                s.color(k)
            );
            acc += v;
        }
        o.push_str("</g>");
        if i % label_every == 0 {
            let _ = write!(
                o,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
                x + bw / 2.0,
                H - MB + 14.0,
                html_escape(&x_labels[i])
            );
        }
    }
    x_title(&mut o, "iteration");
    o.push_str("</svg>");
    let legend: Vec<(String, &str)> = series
        .iter()
        .enumerate()
        .map(|(k, s)| (s.name.clone(), s.color(k)))
        .collect();
    figure(id, &o, &legend, caption)
}

/// `hi` raised to the tick above it, so that the axis' top tick is at or above every value.
fn on_tick(hi: f64) -> f64 {
    let step = nice_step(hi, 5.0);
    (hi / step).ceil() * step
}

/// Lines over numeric x values; `None` values break a line. `zero_based` starts the y axis at
/// 0, otherwise it spans the data with a margin. `shades` mark x ranges (warm-up, perturbed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn line_chart(
    id: &str,
    title: &str,
    x: &[f64],
    series: &[Series],
    shades: &[Shade],
    fmt: AxisFormat,
    y_title: &str,
    x_label: &str,
    zero_based: bool,
    caption: &str,
) -> String {
    let vals: Vec<f64> = series
        .iter()
        .flat_map(|s| s.values.iter().copied().flatten())
        .filter(|v| v.is_finite())
        .collect();
    if x.is_empty() || vals.is_empty() {
        return placeholder(id, title, "nothing to show");
    }
    let (lo, hi) = line_y_range(&vals, zero_based, fmt);
    let (x0, x1) = x
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let xspan = if x1 > x0 { x1 - x0 } else { 1.0 };
    let plot_w = W - ML - MR - 10.0;
    let sx = |v: f64| ML + 5.0 + (v - x0) / xspan * plot_w;
    let mut o = String::new();
    open_svg(&mut o, id, title, H);
    for s in shades {
        let half = if x.len() > 1 {
            xspan / (x.len() - 1) as f64 / 2.0
        } else {
            0.5
        };
        let a = sx((s.from - half).max(x0));
        let b = sx((s.to + half).min(x1));
        let _ = write!(
            o,
            "<rect class=\"shade\" x=\"{a:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" \
             fill=\"#eee\"><title>{}</title></rect>",
            (b - a).max(1.0),
            H - MT - MB,
            html_escape(&s.label)
        );
    }
    let sy = y_axis(&mut o, lo, hi, fmt, y_title);
    line_x_ticks(&mut o, x, (x0, x1), &sx);
    for (k, s) in series.iter().enumerate() {
        line_series(&mut o, k, s, x, fmt, (&sx, &sy));
    }
    x_title(&mut o, x_label);
    o.push_str("</svg>");
    let mut legend: Vec<(String, &str)> = series
        .iter()
        .enumerate()
        .map(|(k, s)| (s.name.clone(), s.color(k)))
        .collect();
    if !shades.is_empty() {
        legend.push(("left out of statistics (shaded)".into(), "#ddd"));
    }
    figure(id, &o, &legend, caption)
}

/// The y range of a line chart: the values' span with a margin (from 0 when `zero_based`), or a
/// small band around a flat line, so that no line sits on the frame.
fn line_y_range(vals: &[f64], zero_based: bool, fmt: AxisFormat) -> (f64, f64) {
    let (mut lo, mut hi) = vals
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    if zero_based {
        lo = lo.min(0.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = (hi.abs() * 0.05).max(1e-9);
        lo -= pad;
        hi += pad;
    } else {
        let pad = (hi - lo) * 0.08;
        hi += pad;
        if !zero_based {
            lo -= pad;
        }
    }
    if fmt == AxisFormat::Percent && zero_based {
        lo = lo.max(0.0);
    }
    // Both ends on ticks: no value sits above the top tick or below the bottom one.
    let step = nice_step(hi - lo, 5.0);
    ((lo / step).floor() * step, (hi / step).ceil() * step)
}

/// The x axis labels of a line chart from `x0` to `x1`: every index of a short run of whole
/// iterations (no fractional ticks), otherwise nice ticks.
fn line_x_ticks(o: &mut String, x: &[f64], (x0, x1): (f64, f64), sx: &dyn Fn(f64) -> f64) {
    let integer_x = x.iter().all(|v| v.fract() == 0.0);
    let x_ticks = if integer_x && x1 - x0 < 10.0 {
        (x0 as i64..=x1 as i64).map(|v| v as f64).collect()
    } else {
        ticks(x0, x1, 10.0)
    };
    for t in x_ticks {
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
            sx(t),
            H - MB + 14.0,
            fmt_count(t)
        );
    }
}

/// Series `k` as one path, lifted at its gaps, and a dot with a tooltip per point when there
/// are few enough points to tell apart (60 at most); `sx`, `sy` place a value.
fn line_series(
    o: &mut String,
    k: usize,
    s: &Series,
    x: &[f64],
    fmt: AxisFormat,
    (sx, sy): (&dyn Fn(f64) -> f64, &dyn Fn(f64) -> f64),
) {
    let mut d = String::new();
    let mut pen_down = false;
    let mut points = 0usize;
    for (i, v) in s.values.iter().enumerate() {
        match (v, x.get(i)) {
            (Some(v), Some(&xv)) if v.is_finite() => {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1} ",
                    if pen_down { "L" } else { "M" },
                    sx(xv),
                    sy(*v)
                );
                pen_down = true;
                points += 1;
            }
            _ => pen_down = false,
        }
    }
    // Later series are drawn thinner and dashed over the earlier ones, so that two GPUs with
    // the same figures show both lines rather than the second hiding the first.
    let (width, dash) = match k {
        0 => ("2.6", String::new()),
        k => (
            "1.6",
            format!(" stroke-dasharray=\"{} 3\"", 3 + 3 * ((k - 1) % 3)),
        ),
    };
    let _ = write!(
        o,
        "<path class=\"line\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{width}\"{dash}><title>{}</title></path>",
        d.trim_end(),
        s.color(k),
        html_escape(&s.name)
    );
    if points > 60 {
        return;
    }
    for (i, v) in s.values.iter().enumerate() {
        if let (Some(v), Some(&xv)) = (v, x.get(i)) {
            if v.is_finite() {
                let _ = write!(
                    o,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"><title>{} {}: {}</title></circle>",
                    sx(xv),
                    sy(*v),
                    s.color(k),
                    html_escape(&s.name),
                    fmt_count(xv),
                    html_escape(&fmt.label(*v))
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks() {
        assert_eq!(ticks(0.0, 10.0, 5.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(0.0, 1.0, 5.0);
        assert_eq!(t.len(), 6);
        assert!((t[3] - 0.6).abs() < 1e-12);
        assert!(ticks(1755.0, 1990.0, 5.0)
            .iter()
            .all(|t| (1755.0..=1990.0).contains(t)));
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }

    #[test]
    fn tick_labels_have_the_decimals_their_step_needs() {
        assert_eq!(AxisFormat::Percent.tick(0.005, 0.005), "0.5%");
        assert_eq!(AxisFormat::Percent.tick(0.2, 0.1), "20%");
        assert_eq!(AxisFormat::Plain.tick(1978.5, 0.5), "1978.5");
        assert_eq!(AxisFormat::Plain.tick(2000.0, 50.0), "2000");
    }

    #[test]
    fn roofline_placeholder_and_points() {
        let empty = roofline_svg(None);
        assert!(empty.contains("no counters in this ledger"));
        assert!(empty.contains("id=\"chart-roofline\""));
        let r = Roofline {
            peak_flops_per_s: Some(67e12),
            peak_bytes_per_s: Some(4.8e12),
            points: vec![RooflinePoint {
                label: "gemm <fp32>".into(),
                arithmetic_intensity: 40.0,
                flops_per_s: 30e12,
            }],
        };
        let s = roofline_svg(Some(&r));
        assert!(s.contains("class=\"roof\""));
        assert!(s.contains("gemm &lt;fp32&gt;"));
        assert!(!s.contains("no counters"));
    }

    #[test]
    fn labels_are_escaped() {
        let s = hbar_chart(
            "x",
            "t",
            &[HBar {
                label: "<script>alert(1)</script>".into(),
                value: 0.5,
                annotation: "a&b".into(),
                tooltip: "\"q\"".into(),
            }],
            "",
        );
        assert!(!s.contains("<script>"));
        assert!(s.contains("a&amp;b"));
    }
}
