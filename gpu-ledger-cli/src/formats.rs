//! How `summary` and `compare` print: Markdown, Markdown with its tables aligned into columns
//! (the default on a terminal), or JSON for scripts, whose schema docs/json.md documents.

use std::io::IsTerminal;

use clap::ValueEnum;
use serde_json::{json, Value};

use gpu_ledger_tools::analysis::compare::{Comparison, Verdict};
use gpu_ledger_tools::export::aligned::align_tables;
use gpu_ledger_tools::export::summary::LedgerSummary;

/// The version of the JSON documents' schema: raised when a field changes meaning or goes away
/// (new fields may appear without it).
pub(crate) const JSON_SCHEMA_VERSION: u32 = 1;

/// The output format of `summary` and `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TextFormat {
    /// Markdown as it pastes into an issue (the default when stdout is not a terminal).
    #[value(alias = "md")]
    Markdown,
    /// Markdown with every table's columns padded to line up (the default on a terminal).
    Aligned,
    /// One JSON document (docs/json.md).
    Json,
}

impl TextFormat {
    /// The format asked for, else aligned Markdown on a terminal and plain Markdown otherwise
    /// (a pipe or a file gets what it got before, byte for byte).
    pub(crate) fn resolve(asked: Option<Self>, terminal: bool) -> Self {
        asked.unwrap_or(if terminal {
            TextFormat::Aligned
        } else {
            TextFormat::Markdown
        })
    }

    /// [`TextFormat::resolve`] for this process's stdout.
    pub(crate) fn for_stdout(asked: Option<Self>) -> Self {
        Self::resolve(asked, std::io::stdout().is_terminal())
    }

    /// `markdown` as this format prints it (JSON is written by the functions below).
    pub(crate) fn markdown(self, markdown: String) -> String {
        match self {
            TextFormat::Aligned => align_tables(&markdown),
            _ => markdown,
        }
    }
}

/// The JSON document of a summary. Where GPU activity was not traced (the scopes level), a
/// scope's device times were not measured, nor the host time of the launches outside every
/// scope: `null`, never a distribution of zeros.
pub(crate) fn summary_json(s: &LedgerSummary, ledger: &str) -> Value {
    let mut summary = serde_json::to_value(s).unwrap_or(Value::Null);
    let scopes = summary.get_mut("scopes").and_then(Value::as_array_mut);
    for scope in scopes.into_iter().flatten() {
        if scope["path"] == gpu_ledger_format::UNSCOPED && scope["host_ns"]["max"] == 0.0 {
            // Launches outside every scope: no host time was measured for them.
            scope["host_ns"] = Value::Null;
            scope["host_ns_mean_per_iteration"] = Value::Null;
        }
    }
    if !s.device_traced() {
        let scopes = summary.get_mut("scopes").and_then(Value::as_array_mut);
        for scope in scopes.into_iter().flatten() {
            if let Some(o) = scope.as_object_mut() {
                for key in [
                    "device_ns",
                    "device_ns_inclusive",
                    "device_ns_inclusive_mean_per_iteration",
                ] {
                    o.insert(key.into(), Value::Null);
                }
            }
        }
    }
    json!({
        "schema": "gpu-ledger-summary",
        "version": JSON_SCHEMA_VERSION,
        "ledger": ledger,
        "summary": summary,
    })
}

/// The JSON document of a comparison. A pair that is not comparable has no speed-up: the
/// estimate is left out, so that no script reads one.
pub(crate) fn comparison_json(
    c: &Comparison,
    a: &str,
    b: &str,
    hypothesis: Option<&str>,
    change: Option<&str>,
) -> Value {
    let verdict = c.verdict();
    let mut comparison = serde_json::to_value(c).unwrap_or(Value::Null);
    if verdict == Verdict::NotComparable {
        if let Some(o) = comparison.as_object_mut() {
            o.remove("speedup");
            o.remove("delta_t");
            o.remove("delta_median_ns");
        }
    }
    json!({
        "schema": "gpu-ledger-compare",
        "version": JSON_SCHEMA_VERSION,
        "a": a,
        "b": b,
        "hypothesis": hypothesis,
        "change": change,
        "verdict": verdict.as_str(),
        "comparison": comparison,
    })
}

/// `v` as pretty JSON text with a final newline.
pub(crate) fn json_text(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::TextFormat;

    #[test]
    fn a_terminal_gets_aligned_tables_a_pipe_plain_markdown_unless_asked() {
        assert_eq!(TextFormat::resolve(None, true), TextFormat::Aligned);
        assert_eq!(TextFormat::resolve(None, false), TextFormat::Markdown);
        for f in [TextFormat::Markdown, TextFormat::Aligned, TextFormat::Json] {
            assert_eq!(TextFormat::resolve(Some(f), true), f);
            assert_eq!(TextFormat::resolve(Some(f), false), f);
        }
    }
}
