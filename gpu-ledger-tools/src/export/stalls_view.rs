//! The warp stall section of the Markdown summary and of the HTML report, from one
//! [`StallSummary`]: the same sentences in both, escaped for each.

use std::fmt::Write as _;

use super::stalls::{HotLine, ReasonCount, ScopeStallSummary, StallSummary, MAX_LINES_PER_SCOPE};
use super::svg::{color, figure, open_svg, placeholder, shorten, PALETTE, W};
use super::text::{html_escape, md_cell};
use gpu_ledger_format::stalls::label;

/// Reasons named in a scope's row of the table.
const TOP_REASONS: usize = 4;
/// Scopes whose hottest lines are shown; the others are counted.
const LINE_SECTIONS: usize = 16;

fn title(s: &StallSummary) -> String {
    let n = s.iterations.len();
    format!(
        "Warp stall reasons (PC sampling, {n} sampled iteration{})",
        if n == 1 { "" } else { "s" }
    )
}

fn pct(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// A count that may be fractional (a line's share of a kernel split between scopes).
fn samples(n: f64) -> String {
    format!("{n:.0}")
}

fn totals(s: &StallSummary) -> String {
    format!(
        "Samples: {} in total (iterations {}): {} with a PC, {} dropped, {} in the driver's own \
         kernels (no PC), {} in functions no kernel record of their iteration names (in no \
         scope).",
        s.total_samples,
        s.iterations,
        s.samples_with_pc,
        s.dropped_samples,
        s.non_user_samples,
        s.unattributed_samples
    )
}

fn dropped_warning(s: &StallSummary) -> Option<String> {
    if s.dropped_samples == 0 && s.buffer_full_in.is_empty() {
        return None;
    }
    let full = if s.buffer_full_in.is_empty() {
        String::new()
    } else {
        format!(
            " (the hardware buffer filled in iterations {})",
            s.buffer_full_in
        )
    };
    Some(format!(
        "PC sampling dropped {} of {} samples ({}) in iterations {}{full}: the shares are of the \
         samples kept; raise PcSamplingConfig::hardware_buffer_bytes or the period",
        s.dropped_samples,
        s.total_samples,
        pct(s.dropped_samples as f64 / s.total_samples.max(1) as f64),
        s.dropped_in
    ))
}

fn top_reasons(reasons: &[ReasonCount]) -> String {
    let mut v: Vec<String> = reasons
        .iter()
        .take(TOP_REASONS)
        .map(|r| format!("{} {}", r.reason, pct(r.share)))
        .collect();
    if reasons.len() > TOP_REASONS {
        let rest: f64 = reasons[TOP_REASONS..].iter().map(|r| r.share).sum();
        v.push(format!("other {}", pct(rest)));
    }
    v.join(", ")
}

const SPLIT_NOTE: &str = "A kernel launched in several scopes of an iteration had its samples \
    shared out between them by its GPU time in each (scopes marked *), and its lines with them: \
    an estimate, true where its launches stall alike.";

fn scopes_left_out(s: &StallSummary) -> Option<String> {
    (s.scope_samples_left_out > 0).then(|| {
        format!(
            "{} samples of scopes past the {} with the most samples are not shown.",
            s.scope_samples_left_out,
            s.scopes.len()
        )
    })
}

fn location(l: &HotLine) -> String {
    match (l.file.is_empty(), l.line) {
        (true, _) => "(no line information)".into(),
        (false, 0) => format!("{} (line unknown)", l.file),
        (false, n) => format!("{}:{n}", l.file),
    }
}

fn dominant(l: &HotLine) -> String {
    l.dominant_reason
        .as_ref()
        .map_or_else(String::new, |(r, share)| format!("{r} {}", pct(*share)))
}

/// What a scope's lines leave out, as sentences.
fn line_notes(sc: &ScopeStallSummary) -> Vec<String> {
    let mut v = Vec::new();
    if sc.samples_without_cubin >= 0.5 {
        v.push(format!(
            "{} samples are in functions whose cubin was not captured: they have no lines.",
            samples(sc.samples_without_cubin)
        ));
    }
    if sc.line_samples_left_out >= 0.5 {
        v.push(format!(
            "{} samples are on lines past the {MAX_LINES_PER_SCOPE} most sampled, not counted \
             here.",
            samples(sc.line_samples_left_out)
        ));
    }
    v
}

fn scope_name(sc: &ScopeStallSummary) -> String {
    if sc.split_by_time {
        format!("{} *", sc.scope)
    } else {
        sc.scope.clone()
    }
}

/// Nsight Compute's labels of the keys used, as one sentence.
fn reason_labels(s: &StallSummary) -> String {
    let v: Vec<String> = s
        .reasons
        .iter()
        .map(|r| (label(&r.reason), &r.reason))
        .filter(|(l, k)| l != *k)
        .map(|(l, k)| format!("{k} = {l}"))
        .collect();
    format!(
        "Reasons are Nsight Compute's warp states, each a share of the samples (of warps' time): \
         {}.",
        v.join(", ")
    )
}

/// The section in Markdown, ending with a blank line.
pub(crate) fn markdown_section(s: &StallSummary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### {}\n", title(s));
    let _ = writeln!(o, "{}\n", totals(s));
    if let Some(w) = dropped_warning(s) {
        let _ = writeln!(o, "**{}.**\n", md_cell(&w));
    }
    if !s.errors.is_empty() || !s.other_error_iterations.is_empty() {
        let _ = writeln!(o, "Errors of sampled iterations:\n");
        for e in &s.errors {
            let _ = writeln!(o, "- iterations {}: {}", e.iterations, md_cell(&e.error));
        }
        if !s.other_error_iterations.is_empty() {
            let _ = writeln!(o, "- iterations {}: other errors", s.other_error_iterations);
        }
        let _ = writeln!(o);
    }
    if s.scopes.is_empty() {
        let _ = writeln!(o, "_No sample fell in a scope._\n");
        return o;
    }
    let _ = writeln!(
        o,
        "| scope | samples | share of samples with a PC | top reasons |"
    );
    let _ = writeln!(o, "|---|---:|---:|---|");
    for sc in &s.scopes {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            md_cell(&scope_name(sc)),
            sc.samples,
            pct(sc.samples as f64 / s.samples_with_pc.max(1) as f64),
            md_cell(&top_reasons(&sc.reasons))
        );
    }
    let _ = writeln!(o);
    if s.split_by_time {
        let _ = writeln!(o, "{SPLIT_NOTE}\n");
    }
    if let Some(n) = scopes_left_out(s) {
        let _ = writeln!(o, "{n}\n");
    }
    for sc in s.scopes.iter().take(LINE_SECTIONS) {
        let _ = writeln!(o, "#### Hottest source lines of {}\n", md_cell(&sc.scope));
        if sc.hot_lines.is_empty() {
            let _ = writeln!(
                o,
                "_No source line: no cubin of its kernels was captured._\n"
            );
        } else {
            let _ = writeln!(
                o,
                "| line | samples | share of scope | dominant reason | source |"
            );
            let _ = writeln!(o, "|---|---:|---:|---|---|");
            for l in &sc.hot_lines {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} |",
                    md_cell(&location(l)),
                    samples(l.samples),
                    pct(l.share_of_scope),
                    md_cell(&dominant(l)),
                    l.text.as_deref().map(md_cell).unwrap_or_default()
                );
            }
            let _ = writeln!(o);
        }
        for n in line_notes(sc) {
            let _ = writeln!(o, "{n}\n");
        }
    }
    if s.scopes.len() > LINE_SECTIONS {
        let _ = writeln!(
            o,
            "Lines of {} more scopes not shown.\n",
            s.scopes.len() - LINE_SECTIONS
        );
    }
    let _ = writeln!(o, "{}\n", md_cell(&reason_labels(s)));
    o
}

/// The legend's entries (label, colour) and each reason's entry: the largest reasons have
/// colours of their own, the rest share the last one.
fn legend(s: &StallSummary) -> (Vec<(String, &'static str)>, Vec<String>) {
    let keys: Vec<&str> = s.reasons.iter().map(|r| r.reason.as_str()).collect();
    let own = if keys.len() <= PALETTE.len() {
        keys.len()
    } else {
        PALETTE.len() - 1
    };
    let mut entries: Vec<(String, &'static str)> = keys[..own]
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let l = label(k);
            let name = if l == *k { l } else { format!("{l} ({k})") };
            (name, color(i))
        })
        .collect();
    if own < keys.len() {
        entries.push(("other reasons".into(), color(own)));
    }
    (entries, keys[..own].iter().map(|k| k.to_string()).collect())
}

fn chart(s: &StallSummary) -> String {
    const ID: &str = "chart-stalls";
    let heading = "Warp stall reasons by scope (share of each scope's samples)";
    if s.scopes.is_empty() {
        return placeholder(ID, heading, "no sample fell in a scope");
    }
    let (entries, keys) = legend(s);
    let (row, label_w, text_w, top) = (22.0, 230.0, 190.0, 10.0);
    let bar_w = W - label_w - text_w - 16.0;
    let h = top + row * s.scopes.len() as f64 + 10.0;
    let mut o = String::new();
    open_svg(&mut o, ID, heading, h);
    for (i, sc) in s.scopes.iter().enumerate() {
        let y = top + row * i as f64;
        // Samples per legend entry, in the legend's order, so that a reason sits in the same
        // place and colour in every bar.
        let mut parts = vec![0u64; entries.len()];
        for r in &sc.reasons {
            let at = keys
                .iter()
                .position(|k| *k == r.reason)
                .unwrap_or(entries.len() - 1);
            parts[at] = parts[at].saturating_add(r.samples);
        }
        let total = sc.samples.max(1) as f64;
        let _ = write!(
            o,
            "<g class=\"stall-bar\"><title>{}\n{} samples\n{}</title>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#222\">{}</text>",
            html_escape(&sc.scope),
            sc.samples,
            html_escape(&top_reasons(&sc.reasons)),
            label_w - 6.0,
            y + row * 0.65,
            html_escape(&shorten(&scope_name(sc), 36))
        );
        let mut x = label_w;
        for (p, (name, c)) in parts.iter().zip(&entries) {
            if *p == 0 {
                continue;
            }
            let w = *p as f64 / total * bar_w;
            let _ = write!(
                o,
                "<rect x=\"{x:.2}\" y=\"{:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{c}\">\
                 <title>{}: {} ({p} samples)</title></rect>",
                y + 4.0,
                row - 8.0,
                html_escape(name),
                pct(*p as f64 / total)
            );
            x += w;
        }
        let first = sc
            .reasons
            .first()
            .map_or_else(String::new, |r| format!(" · {} {}", r.reason, pct(r.share)));
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text></g>",
            label_w + bar_w + 6.0,
            y + row * 0.65,
            html_escape(&format!("{} samples{first}", sc.samples))
        );
    }
    o.push_str("</svg>");
    let mut caption = String::from(
        "Each bar is one scope's PC samples over the sampled iterations, by warp state; hover a \
         segment for its share.",
    );
    if s.split_by_time {
        caption.push(' ');
        caption.push_str(SPLIT_NOTE);
    }
    figure(ID, &o, &entries, &caption)
}

/// The section in HTML: `<section id="stalls">`, its bars, legend and tables.
pub(crate) fn html_section(s: &StallSummary) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<section id=\"stalls\"><h2>{}</h2><p>{}</p>",
        html_escape(&title(s)),
        html_escape(&totals(s))
    );
    if let Some(w) = dropped_warning(s) {
        let _ = write!(o, "<p><strong>{}.</strong></p>", html_escape(&w));
    }
    if !s.errors.is_empty() || !s.other_error_iterations.is_empty() {
        o.push_str("<p>Errors of sampled iterations:</p><ul class=\"warnings\">");
        for e in &s.errors {
            let _ = write!(
                o,
                "<li>iterations {}: {}</li>",
                html_escape(&e.iterations.to_string()),
                html_escape(&e.error)
            );
        }
        if !s.other_error_iterations.is_empty() {
            let _ = write!(
                o,
                "<li>iterations {}: other errors</li>",
                html_escape(&s.other_error_iterations.to_string())
            );
        }
        o.push_str("</ul>");
    }
    o.push_str(&chart(s));
    if let Some(n) = scopes_left_out(s) {
        let _ = write!(o, "<p>{}</p>", html_escape(&n));
    }
    for sc in s.scopes.iter().take(LINE_SECTIONS) {
        let _ = write!(
            o,
            "<h3>Hottest source lines of <code>{}</code></h3>",
            html_escape(&sc.scope)
        );
        if sc.hot_lines.is_empty() {
            o.push_str("<p>No source line: no cubin of its kernels was captured.</p>");
        } else {
            o.push_str(
                "<table><tr><th class=\"l\">line</th><th>samples</th><th>share of scope</th>\
                 <th class=\"l\">dominant reason</th><th class=\"l\">source</th></tr>",
            );
            for l in &sc.hot_lines {
                let _ = write!(
                    o,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td>\
                     <td class=\"l\"><code>{}</code></td></tr>",
                    html_escape(&location(l)),
                    samples(l.samples),
                    pct(l.share_of_scope),
                    html_escape(&dominant(l)),
                    html_escape(l.text.as_deref().unwrap_or(""))
                );
            }
            o.push_str("</table>");
        }
        for n in line_notes(sc) {
            let _ = write!(o, "<p>{}</p>", html_escape(&n));
        }
    }
    if s.scopes.len() > LINE_SECTIONS {
        let _ = write!(
            o,
            "<p>Lines of {} more scopes not shown.</p>",
            s.scopes.len() - LINE_SECTIONS
        );
    }
    let _ = writeln!(o, "<p>{}</p></section>", html_escape(&reason_labels(s)));
    o
}
