//! The roofline: kernels or scopes placed by arithmetic intensity and achieved FLOP/s on a
//! log-log plot under the device's roof, from hardware counters.

use std::fmt::Write as _;

use super::{axes, color, figure, open_svg, placeholder, shorten, x_title, H, MB, ML, MR, MT, W};
use crate::export::text::{html_escape, sig3};

/// A kernel or scope placed on the roofline.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflinePoint {
    /// Name shown next to the point.
    pub label: String,
    /// Arithmetic intensity, FLOP per byte of DRAM traffic.
    pub arithmetic_intensity: f64,
    /// Achieved FLOP/s.
    pub flops_per_s: f64,
}

/// The roof of a device and the points under it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Roofline {
    /// Peak FLOP/s of the device for the precision of the points, when known.
    pub peak_flops_per_s: Option<f64>,
    /// Peak DRAM bandwidth, bytes/s, when known.
    pub peak_bytes_per_s: Option<f64>,
    /// Measured points (from hardware counters).
    pub points: Vec<RooflinePoint>,
}

/// The roofline plot (log-log: arithmetic intensity against FLOP/s) of `roofline`; a figure
/// saying "no counters in this ledger" when there is no point with positive finite values.
pub fn roofline_svg(roofline: Option<&Roofline>) -> String {
    let id = "chart-roofline";
    let title = "Roofline: achieved FLOP/s against arithmetic intensity";
    let points: Vec<&RooflinePoint> = roofline
        .map(|r| {
            r.points
                .iter()
                .filter(|p| {
                    p.arithmetic_intensity.is_finite()
                        && p.arithmetic_intensity > 0.0
                        && p.flops_per_s.is_finite()
                        && p.flops_per_s > 0.0
                })
                .collect()
        })
        .unwrap_or_default();
    if points.is_empty() {
        return placeholder(
            id,
            title,
            "no counters in this ledger: run with Level::Counters to place kernels on the roofline",
        );
    }
    let r = roofline.cloned().unwrap_or_default();
    let peak_f = r.peak_flops_per_s.filter(|v| v.is_finite() && *v > 0.0);
    let peak_b = r.peak_bytes_per_s.filter(|v| v.is_finite() && *v > 0.0);
    let peaks = peak_f.zip(peak_b);
    let frame = LogFrame::around(&points, peaks);
    let mut o = String::new();
    open_svg(&mut o, id, title, H);
    frame.grid(&mut o);
    if let Some((pf, pb)) = peaks {
        frame.roof(&mut o, pf, pb);
    }
    for (i, p) in points.iter().enumerate() {
        let (x, y) = (frame.x(p.arithmetic_intensity), frame.y(p.flops_per_s));
        let _ = write!(
            o,
            "<g class=\"point\"><title>{}: {} FLOP/B, {} FLOP/s</title>\
             <circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text></g>",
            html_escape(&p.label),
            sig3(p.arithmetic_intensity),
            sig3(p.flops_per_s),
            color(i),
            x + 6.0,
            y - 6.0,
            html_escape(&shorten(&p.label, 30))
        );
    }
    axes(&mut o, "FLOP/s");
    x_title(&mut o, "arithmetic intensity (FLOP/byte)");
    o.push_str("</svg>");
    figure(
        id,
        &o,
        &[],
        "Points under the sloped roof are limited by memory bandwidth, under the flat roof by \
         compute: attainable FLOP/s = min(peak FLOP/s, intensity × peak bytes/s).",
    )
}

/// The decades a roofline spans, intensity across (`lx0..=lx1`) and FLOP/s up (`ly0..=ly1`),
/// as powers of ten, and where a value lands in the plot.
struct LogFrame {
    lx0: f64,
    lx1: f64,
    ly0: f64,
    ly1: f64,
}

impl LogFrame {
    /// The decades around `points`, widened to a decade either side of the ridge and up to the
    /// peak FLOP/s when both peaks (FLOP/s, bytes/s) are known, so that the roof shows whole.
    fn around(points: &[&RooflinePoint], peaks: Option<(f64, f64)>) -> Self {
        let mut ai_lo = points
            .iter()
            .map(|p| p.arithmetic_intensity)
            .fold(f64::INFINITY, f64::min);
        let mut ai_hi = points
            .iter()
            .map(|p| p.arithmetic_intensity)
            .fold(0.0, f64::max);
        let f_lo = points
            .iter()
            .map(|p| p.flops_per_s)
            .fold(f64::INFINITY, f64::min);
        let mut f_hi = points.iter().map(|p| p.flops_per_s).fold(0.0, f64::max);
        if let Some((pf, pb)) = peaks {
            let ridge = pf / pb;
            ai_lo = ai_lo.min(ridge / 10.0);
            ai_hi = ai_hi.max(ridge * 10.0);
            f_hi = f_hi.max(pf);
        }
        Self {
            lx0: (ai_lo / 2.0).log10().floor(),
            lx1: (ai_hi * 2.0).log10().ceil(),
            ly0: (f_lo / 2.0).log10().floor(),
            ly1: (f_hi * 2.0).log10().ceil(),
        }
    }

    /// The x of an arithmetic intensity.
    fn x(&self, ai: f64) -> f64 {
        let plot_w = W - ML - MR;
        ML + (ai.log10() - self.lx0) / (self.lx1 - self.lx0).max(1.0) * plot_w
    }

    /// The y of a FLOP/s figure.
    fn y(&self, f: f64) -> f64 {
        let plot_h = H - MT - MB;
        MT + plot_h - (f.log10() - self.ly0) / (self.ly1 - self.ly0).max(1.0) * plot_h
    }

    /// A grid line and a label at every decade of both axes.
    fn grid(&self, o: &mut String) {
        let mut e = self.lx0;
        while e <= self.lx1 {
            let x = self.x(10f64.powf(e));
            let _ = write!(
                o,
                "<line x1=\"{x:.1}\" y1=\"{MT}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e3e3e3\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">1e{e}</text>",
                H - MB,
                H - MB + 14.0
            );
            e += 1.0;
        }
        let mut e = self.ly0;
        while e <= self.ly1 {
            let y = self.y(10f64.powf(e));
            let _ = write!(
                o,
                "<line x1=\"{ML}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e3e3e3\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">1e{e}</text>",
                W - MR,
                ML - 6.0,
                y + 4.0
            );
            e += 1.0;
        }
    }

    /// The roof of peak FLOP/s `pf` and peak bytes/s `pb`: the bandwidth slope up to the ridge,
    /// flat after it.
    fn roof(&self, o: &mut String, pf: f64, pb: f64) {
        let a0 = 10f64.powf(self.lx0);
        let a1 = 10f64.powf(self.lx1);
        let ridge = pf / pb;
        let _ = write!(
            o,
            "<path class=\"roof\" d=\"M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1}\" fill=\"none\" \
             stroke=\"#333\" stroke-width=\"2\"><title>roof: {} FLOP/s, {} B/s, ridge at {} \
             FLOP/B</title></path>",
            self.x(a0),
            self.y((a0 * pb).max(10f64.powf(self.ly0))),
            self.x(ridge),
            self.y(pf),
            self.x(a1),
            self.y(pf),
            sig3(pf),
            sig3(pb),
            sig3(ridge)
        );
    }
}
