//! Text helpers shared by the exports: escaping for HTML, CSV and Markdown, and human-readable
//! durations and quantities. Only [`md_cell`] is public, for callers that put their own text
//! next to an export's Markdown (the command line tool's hypothesis and change lines).

/// Most characters of one name, path or warning an export shows: a ledger line may hold a name
/// of many megabytes, which would otherwise be copied into every table and chart that names it.
pub(crate) const MAX_SHOWN_CHARS: usize = 2000;

/// `s` cut to [`MAX_SHOWN_CHARS`], and what the cut left out (`None` when nothing was cut).
fn shown(s: &str) -> (&str, Option<usize>) {
    match s.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((at, _)) => (&s[..at], Some(s.len() - at)),
        None => (s, None),
    }
}

/// The note that ends a cut text.
fn cut_note(bytes: usize) -> String {
    format!("… ({bytes} bytes not shown)")
}

/// Escapes `s` for HTML and SVG text and attribute values (`&`, `<`, `>`, `"`, `'`). Control
/// characters other than tab and newline, which XML forbids, become U+FFFD. Text longer than
/// [`MAX_SHOWN_CHARS`] is cut, saying how much was left out.
pub(crate) fn html_escape(s: &str) -> String {
    let (s, cut) = shown(s);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    if let Some(bytes) = cut {
        out.push_str(&cut_note(bytes));
    }
    out
}

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote, a line break or leading or
/// trailing space; quotes doubled.
pub fn csv_field(s: &str) -> String {
    let needs = s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ');
    if needs {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One CSV field of text that a ledger or a user wrote (a kernel or scope name, a path, a
/// hypothesis): [`csv_field`], after a leading `'` on text that a spreadsheet would run as a
/// formula (starting with `=`, `+`, `-`, `@`, a tab or a carriage return), as OWASP advises.
/// Every CSV the tools write passes such text through this one function; numbers go through
/// [`csv_field`] alone, so that a negative number stays a number.
pub fn csv_text(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        csv_field(&format!("'{s}"))
    } else {
        csv_field(s)
    }
}

/// One Markdown table cell, so that a kernel or scope name cannot break the table or the text
/// around it: `|` and backslashes escaped, line breaks and other control characters as spaces,
/// a `<` that could open an HTML tag, comment or autolink (before a letter, `/`, `!` or `?`)
/// and a leading `>` (a quote) escaped with a backslash, and backticks as `'`, because inside a
/// code span backslash escapes would show literally. Text stays readable as it is written:
/// `a -> b` and `kernel<128, true>` are left alone. Every Markdown export, the experiment log
/// included, escapes with this one function. Text longer than 2000 characters is cut, saying how
/// much was left out.
pub fn md_cell(s: &str) -> String {
    let (s, cut) = shown(s);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '|' => out.push_str("\\|"),
            '\\' => out.push_str("\\\\"),
            '<' if chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?')) =>
            {
                out.push_str("\\<");
            }
            '>' if out.trim().is_empty() => out.push_str("\\>"),
            '`' => out.push('\''),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    if let Some(bytes) = cut {
        out.push_str(&cut_note(bytes));
    }
    out
}

/// Formats `x` with three significant digits (`1.23`, `12.3`, `123`, `1234`).
pub(crate) fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A count or index: an integer as is (`2`, `1500`), anything else with three significant
/// digits (`2.50`).
pub(crate) fn fmt_count(x: f64) -> String {
    if x.is_finite() && (x - x.round()).abs() < 1e-9 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        sig3(x)
    }
}

/// A duration in ns as a human-readable string with a unit: `850 ns`, `12.3 µs`, `4.56 ms`,
/// `1.23 s`.
pub(crate) fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "n/a".into();
    }
    let a = ns.abs();
    if a < 1e3 {
        format!("{} ns", sig3(ns))
    } else if a < 1e6 {
        format!("{} µs", sig3(ns / 1e3))
    } else if a < 1e9 {
        format!("{} ms", sig3(ns / 1e6))
    } else {
        format!("{} s", sig3(ns / 1e9))
    }
}

/// A confidence level as a percentage with the decimals it needs and no more: `95`, `99.9`,
/// `99.9999999` (never `100` for a level below 1, as a fixed number of decimals would round it).
pub(crate) fn fmt_confidence(c: f64) -> String {
    let p = c * 100.0;
    for decimals in 0..=12 {
        let s = format!("{p:.decimals$}");
        if s.parse::<f64>()
            .is_ok_and(|v| (v - p).abs() <= p.abs() * 1e-12)
        {
            return s;
        }
    }
    format!("{p}")
}

/// A fraction as a percentage with one decimal: `0.1234` → `12.3%`.
pub(crate) fn fmt_pct(p: f64) -> String {
    if p.is_finite() {
        format!("{:.1}%", p * 100.0)
    } else {
        "n/a".into()
    }
}

/// Iteration indices as compact ranges: `[0, 1, 2, 5, 7, 8]` → `0–2, 5, 7–8`; `none` when empty.
/// The exports write [`IndexRuns`] instead; this list's formatting stays as what the runs are
/// checked against.
#[cfg(test)]
pub(crate) fn fmt_indices(indices: &[u64]) -> String {
    use std::fmt::Write as _;
    if indices.is_empty() {
        return "none".into();
    }
    let mut v = indices.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        if j == i {
            let _ = write!(out, "{}", v[i]);
        } else {
            let _ = write!(out, "{}–{}", v[i], v[j]);
        }
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::indices::IndexRuns;

    #[test]
    fn index_runs_write_what_fmt_indices_writes() {
        for v in [
            vec![],
            vec![3],
            vec![0, 1, 2, 5, 7, 8],
            vec![4, 4, 5, 9],
            vec![9, 1, 2, 3, 0],
            vec![u64::MAX - 1, u64::MAX],
            vec![10, 12, 11, 14, 3, 13, 2, 4, 0, 9],
        ] {
            let r: IndexRuns = v.iter().copied().collect();
            assert_eq!(r.to_string(), fmt_indices(&v), "{v:?}");
            let mut sorted = v.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(r.len(), sorted.len(), "{v:?}");
            assert_eq!(r.iter().collect::<Vec<_>>(), sorted, "{v:?}");
            assert_eq!(r.is_empty(), v.is_empty());
        }
        let r: IndexRuns = (0..1_000_000).collect();
        assert_eq!(r.runs().len(), 1, "consecutive indices take one run");
    }

    #[test]
    fn escapes() {
        assert_eq!(
            html_escape("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(html_escape("a\u{1}b"), "a\u{FFFD}b");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_text("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        for formula in ["+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx"] {
            assert!(
                csv_text(formula).trim_start_matches('"').starts_with('\''),
                "{formula:?}"
            );
        }
        assert_eq!(csv_text("step/forward"), "step/forward");
        assert_eq!(csv_field("-1.5"), "-1.5");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(md_cell("a|b\nc<d>"), "a\\|b c\\<d>");
        // Arrows and template arguments stay as written; what could open a tag, a comment, an
        // autolink or a quote does not.
        assert_eq!(md_cell("tile 128x128 -> 128x64"), "tile 128x128 -> 128x64");
        assert_eq!(md_cell("k<128, true> < 3"), "k<128, true> < 3");
        assert_eq!(md_cell("<!-- x --> </b> <?"), "\\<!-- x --> \\</b> \\<?");
        assert_eq!(md_cell(" > quoted"), " \\> quoted");
        assert_eq!(md_cell("`a`\\"), "'a'\\\\");
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(12_345.0), "12.3 µs");
        assert_eq!(fmt_ns(4_560_000.0), "4.56 ms");
        assert_eq!(fmt_ns(1.234e9), "1.23 s");
        assert_eq!(fmt_pct(0.1234), "12.3%");
        assert_eq!(fmt_count(2.0), "2");
        assert_eq!(fmt_count(2.5), "2.50");
        assert_eq!(fmt_indices(&[0, 1, 2, 5, 7, 8]), "0–2, 5, 7–8");
        assert_eq!(fmt_indices(&[]), "none");
    }
}
