//! A [`MemoryRecorder`]'s series as Prometheus' text exposition format (version 0.0.4) or as
//! OpenMetrics 1.0 text: what a scrape after the last row would read, families and series in
//! a stable order.

use std::fmt::Write;

use crate::catalogue::Kind;
use crate::memory::{MemoryRecorder, Series, Value};

/// A text exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// Prometheus' text format (`text/plain; version=0.0.4`), what `promtool check metrics`
    /// reads.
    Prometheus,
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`): counter families named
    /// without `_total`, `# UNIT` lines, and `# EOF` at the end.
    OpenMetrics,
}

/// Units a family's name may end with, as OpenMetrics' `# UNIT` line names them.
const UNITS: [&str; 6] = ["seconds", "joules", "bytes", "hertz", "watts", "celsius"];

impl MemoryRecorder {
    /// Every series in `format`, grouped by family with its help text.
    pub fn render(&self, format: TextFormat) -> String {
        let descriptions = self.descriptions();
        let series = self.series();
        let mut out = String::new();
        let mut start = 0;
        while start < series.len() {
            let name = &series[start].name;
            let end = start
                + series[start..]
                    .iter()
                    .take_while(|s| &s.name == name)
                    .count();
            let help = descriptions.get(name).map_or("", |d| d.help.as_str());
            family(&mut out, format, help, &series[start..end]);
            start = end;
        }
        if format == TextFormat::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

/// One family: its metadata lines and its samples.
fn family(out: &mut String, format: TextFormat, help: &str, series: &[Series]) {
    let name = series[0].name.as_str();
    let kind = series[0].value.kind();
    let family = match (format, kind) {
        (TextFormat::OpenMetrics, Kind::Counter) => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let help = escape_help(help, format);
    let _ = writeln!(out, "# HELP {family} {help}");
    let _ = writeln!(out, "# TYPE {family} {}", kind.name());
    if format == TextFormat::OpenMetrics {
        if let Some(unit) = UNITS.iter().find(|u| family.ends_with(&format!("_{u}"))) {
            let _ = writeln!(out, "# UNIT {family} {unit}");
        }
    }
    for s in series {
        match &s.value {
            Value::Counter(n) => sample(out, name, &s.labels, None, &n.to_string()),
            Value::Gauge(v) => sample(out, name, &s.labels, None, &number(*v)),
            Value::Histogram {
                count,
                sum,
                buckets,
            } => {
                let bucket = format!("{name}_bucket");
                for (le, n) in buckets {
                    sample(out, &bucket, &s.labels, Some(&number(*le)), &n.to_string());
                }
                sample(out, &bucket, &s.labels, Some("+Inf"), &count.to_string());
                sample(out, &format!("{name}_sum"), &s.labels, None, &number(*sum));
                sample(
                    out,
                    &format!("{name}_count"),
                    &s.labels,
                    None,
                    &count.to_string(),
                );
            }
        }
    }
}

/// One sample line: `name{labels,le="…"} value`.
fn sample(
    out: &mut String,
    name: &str,
    labels: &[(String, String)],
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    let le = le.map(|v| ("le", v));
    let all = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(le);
    let mut first = true;
    for (k, v) in all {
        out.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A float as both formats write it: shortest round-trip digits, whole numbers with `.0`
/// (OpenMetrics' canonical form), and `NaN`, `+Inf`, `-Inf`.
pub(crate) fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v:?}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(v: &str, format: TextFormat) -> String {
    let v = v.replace('\\', "\\\\").replace('\n', "\\n");
    match format {
        TextFormat::Prometheus => v,
        TextFormat::OpenMetrics => v.replace('"', "\\\""),
    }
}
