//! Warp stall reasons over the PC-sampled iterations of a ledger, for the summary and the report:
//! per scope path, the reasons' shares and the hottest source lines, and the samples that were
//! dropped, fell in no scope, or were not read. [`StallAccumulator::add`] takes one row at a time
//! in bounded memory, so that a ledger summarised whole and one streamed show the same section.
//!
//! A scope's lines are the lines of the sampled functions it lists. A function launched in
//! several scopes of an iteration had its samples shared out by GPU time (`split_by_time`), so
//! its lines are shared out in the same proportion: the part of the scope's samples its own
//! functions do not explain.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::analysis::indices::IndexRuns;
use gpu_ledger_format::saturating_sum;
use gpu_ledger_format::schema::IterationRow;
use gpu_ledger_format::stalls::{reason_shares, IterationStalls, KernelStalls, LineStalls};

/// Most scope paths kept; past it the scopes with the fewest samples are left out and counted.
pub const MAX_SCOPES: usize = 64;
/// Most distinct source lines kept per scope; past it the lines with the fewest samples are left
/// out and counted.
pub const MAX_LINES_PER_SCOPE: usize = 200;
/// Hottest source lines shown per scope.
pub const HOT_LINES: usize = 5;
/// Most distinct error texts kept; the iterations of other errors are counted together.
pub const MAX_ERRORS: usize = 8;
/// Most characters of a line's source text kept.
const MAX_TEXT_CHARS: usize = 160;

/// One stall reason's samples and their share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasonCount {
    /// Nsight Compute's key (`long_scoreboard`).
    pub reason: String,
    /// Samples in that state.
    pub samples: u64,
    /// Share of the samples counted (0..1).
    pub share: f64,
}

/// One of a scope's most sampled source lines, summed over the sampled iterations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HotLine {
    /// The file as the cubin's line table names it; empty for PCs without line information.
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// Samples at the line; fractional where a function's samples were shared between scopes.
    pub samples: f64,
    /// Share of the scope's samples (0..1).
    pub share_of_scope: f64,
    /// The reason with the most of the line's samples, and its share of them.
    pub dominant_reason: Option<(String, f64)>,
    /// The line's text, when the file was readable where the run ran (trimmed, cut when long).
    pub text: Option<String>,
}

/// The samples of one scope path over the sampled iterations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeStallSummary {
    /// Scope path (`step/backward`), `(unscoped)` included.
    pub scope: String,
    /// Samples of its kernels.
    pub samples: u64,
    /// Sampled iterations it had samples in.
    pub iterations: u64,
    /// Its reasons, largest first.
    pub reasons: Vec<ReasonCount>,
    /// Whether some of its samples come from a kernel launched in several scopes of an
    /// iteration, shared out by GPU time.
    pub split_by_time: bool,
    /// Its most sampled lines, at most [`HOT_LINES`], most first.
    pub hot_lines: Vec<HotLine>,
    /// Samples on lines left out past the [`MAX_LINES_PER_SCOPE`] most sampled.
    pub line_samples_left_out: f64,
    /// Samples of its functions whose cubin was not captured, so that they have no lines.
    pub samples_without_cubin: f64,
}

/// An error PC sampling reported, with the iterations it was reported in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StallError {
    /// The error's text.
    pub error: String,
    /// The iterations that reported it.
    pub iterations: IndexRuns,
}

/// The stall reasons of a ledger's PC-sampled iterations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StallSummary {
    /// The iterations whose rows carry PC samples.
    pub iterations: IndexRuns,
    /// Samples CUPTI counted, dropped and driver ones included.
    pub total_samples: u64,
    /// Samples with a PC: those the reasons and lines are made of.
    pub samples_with_pc: u64,
    /// Samples the hardware dropped.
    pub dropped_samples: u64,
    /// The iterations that dropped samples.
    pub dropped_in: IndexRuns,
    /// The iterations whose hardware buffer filled.
    pub buffer_full_in: IndexRuns,
    /// Samples in the driver's own kernels, which have no PC.
    pub non_user_samples: u64,
    /// Samples of functions no kernel record of their iteration names: in no scope.
    pub unattributed_samples: u64,
    /// Reasons over every sample with a PC, largest first.
    pub reasons: Vec<ReasonCount>,
    /// Per scope path, most samples first, at most [`MAX_SCOPES`].
    pub scopes: Vec<ScopeStallSummary>,
    /// Samples of the scopes left out past the [`MAX_SCOPES`] most sampled.
    pub scope_samples_left_out: u64,
    /// Whether any scope had samples shared out by GPU time.
    pub split_by_time: bool,
    /// Errors of sampled iterations, at most [`MAX_ERRORS`] distinct ones.
    pub errors: Vec<StallError>,
    /// The iterations of further errors.
    pub other_error_iterations: IndexRuns,
}

#[derive(Debug, Clone, Default)]
struct LineAcc {
    samples: f64,
    by_reason: BTreeMap<String, f64>,
    text: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct ScopeAcc {
    samples: u64,
    by_reason: BTreeMap<String, u64>,
    iterations: u64,
    split_by_time: bool,
    lines: BTreeMap<(String, u32), LineAcc>,
    line_samples_left_out: f64,
    samples_without_cubin: f64,
}

/// The stall section's figures, gathered one row at a time in memory bounded by
/// [`MAX_SCOPES`], [`MAX_LINES_PER_SCOPE`] and [`MAX_ERRORS`] (and the runs of sampled
/// iteration indices).
#[derive(Debug, Clone, Default)]
pub struct StallAccumulator {
    iterations: IndexRuns,
    total_samples: u64,
    samples_with_pc: u64,
    dropped_samples: u64,
    dropped_in: IndexRuns,
    buffer_full_in: IndexRuns,
    non_user_samples: u64,
    unattributed_samples: u64,
    by_reason: BTreeMap<String, u64>,
    scopes: BTreeMap<String, ScopeAcc>,
    scope_samples_left_out: u64,
    errors: BTreeMap<String, IndexRuns>,
    other_error_iterations: IndexRuns,
}

impl StallAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one row, in ledger order; a row without PC samples changes nothing.
    pub fn add(&mut self, row: &IterationRow) {
        let Some(st) = &row.stalls else {
            return;
        };
        self.iterations.push(row.index);
        self.total_samples = self.total_samples.saturating_add(st.total_samples);
        self.samples_with_pc = self.samples_with_pc.saturating_add(st.sampled());
        if st.dropped_samples > 0 {
            self.dropped_samples = self.dropped_samples.saturating_add(st.dropped_samples);
            self.dropped_in.push(row.index);
        }
        if st.hardware_buffer_full {
            self.buffer_full_in.push(row.index);
        }
        self.non_user_samples = self.non_user_samples.saturating_add(st.non_user_samples);
        self.unattributed_samples = self
            .unattributed_samples
            .saturating_add(st.unattributed_samples);
        for k in &st.kernels {
            add_counts(&mut self.by_reason, &k.by_reason);
        }
        if let Some(e) = &st.error {
            self.add_error(e, row.index);
        }
        self.add_scopes(st);
        // Pruned only past twice the bound, so that pruning's sort is paid once per many rows.
        if self.scopes.len() > 2 * MAX_SCOPES {
            self.prune_scopes();
        }
    }

    fn add_error(&mut self, e: &str, index: u64) {
        if let Some(at) = self.errors.get_mut(e) {
            at.push(index);
        } else if self.errors.len() < MAX_ERRORS {
            self.errors
                .insert(e.to_string(), [index].into_iter().collect());
        } else {
            self.other_error_iterations.push(index);
        }
    }

    fn add_scopes(&mut self, st: &IterationStalls) {
        let mut by_name: BTreeMap<&str, Vec<&KernelStalls>> = BTreeMap::new();
        for k in &st.kernels {
            by_name.entry(k.name.as_str()).or_default().push(k);
        }
        // A function listed by several scopes of the iteration had its samples shared out.
        let mut listed: BTreeMap<&str, usize> = BTreeMap::new();
        for sc in &st.scopes {
            let names: BTreeSet<&str> = sc.kernels.iter().map(String::as_str).collect();
            for n in names {
                *listed.entry(n).or_default() += 1;
            }
        }
        let samples_of = |n: &str| -> u64 {
            by_name
                .get(n)
                .map_or(0, |ks| saturating_sum(ks.iter().map(|k| k.samples)))
        };
        for sc in &st.scopes {
            let names: BTreeSet<&str> = sc.kernels.iter().map(String::as_str).collect();
            let is_shared = |n: &str| listed.get(n).is_some_and(|c| *c > 1);
            let own = saturating_sum(
                names
                    .iter()
                    .filter(|n| !is_shared(n))
                    .map(|n| samples_of(n)),
            );
            let shared =
                saturating_sum(names.iter().filter(|n| is_shared(n)).map(|n| samples_of(n)));
            // What the scope's own functions do not explain is its part of the shared ones.
            let shared_part = if shared == 0 {
                0.0
            } else {
                (sc.samples.saturating_sub(own) as f64 / shared as f64).min(1.0)
            };
            let acc = self.scopes.entry(sc.scope.clone()).or_default();
            acc.samples = acc.samples.saturating_add(sc.samples);
            add_counts(&mut acc.by_reason, &sc.by_reason);
            acc.iterations += 1;
            acc.split_by_time |= sc.split_by_time;
            for n in names {
                let part = if is_shared(n) { shared_part } else { 1.0 };
                for k in by_name.get(n).into_iter().flatten() {
                    if !k.cubin {
                        acc.samples_without_cubin += k.samples as f64 * part;
                    }
                    for l in &k.lines {
                        acc.add_line(l, part);
                    }
                }
            }
            if acc.lines.len() > 2 * MAX_LINES_PER_SCOPE {
                acc.prune_lines();
            }
        }
    }

    /// Keeps the [`MAX_SCOPES`] scopes with the most samples.
    fn prune_scopes(&mut self) {
        let mut order: Vec<(u64, String)> = self
            .scopes
            .iter()
            .map(|(k, a)| (a.samples, k.clone()))
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, k) in order.into_iter().skip(MAX_SCOPES) {
            if let Some(a) = self.scopes.remove(&k) {
                self.scope_samples_left_out = self.scope_samples_left_out.saturating_add(a.samples);
            }
        }
    }

    /// The summary; `None` when no row carried PC samples.
    #[must_use]
    pub fn finish(mut self) -> Option<StallSummary> {
        if self.iterations.is_empty() {
            return None;
        }
        self.prune_scopes();
        let mut scopes: Vec<ScopeStallSummary> = self
            .scopes
            .into_iter()
            .map(|(scope, mut a)| {
                a.prune_lines();
                a.summary(scope)
            })
            .collect();
        scopes.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.scope.cmp(&b.scope))
        });
        Some(StallSummary {
            iterations: self.iterations,
            total_samples: self.total_samples,
            samples_with_pc: self.samples_with_pc,
            dropped_samples: self.dropped_samples,
            dropped_in: self.dropped_in,
            buffer_full_in: self.buffer_full_in,
            non_user_samples: self.non_user_samples,
            unattributed_samples: self.unattributed_samples,
            reasons: reason_counts(&self.by_reason),
            split_by_time: scopes.iter().any(|s| s.split_by_time),
            scopes,
            scope_samples_left_out: self.scope_samples_left_out,
            errors: self
                .errors
                .into_iter()
                .map(|(error, iterations)| StallError { error, iterations })
                .collect(),
            other_error_iterations: self.other_error_iterations,
        })
    }
}

impl ScopeAcc {
    fn add_line(&mut self, l: &LineStalls, part: f64) {
        let acc = self.lines.entry((l.file.clone(), l.line)).or_default();
        acc.samples += l.samples as f64 * part;
        for (r, n) in &l.by_reason {
            *acc.by_reason.entry(r.clone()).or_default() += *n as f64 * part;
        }
        if acc.text.is_none() {
            acc.text = l.text.as_deref().map(cut_text).filter(|t| !t.is_empty());
        }
    }

    /// Keeps the [`MAX_LINES_PER_SCOPE`] lines with the most samples.
    fn prune_lines(&mut self) {
        for k in ranked(&self.lines).split_off(MAX_LINES_PER_SCOPE.min(self.lines.len())) {
            if let Some(l) = self.lines.remove(&k) {
                self.line_samples_left_out += l.samples;
            }
        }
    }

    fn summary(self, scope: String) -> ScopeStallSummary {
        let total = self.samples.max(1) as f64;
        let hot_lines = ranked(&self.lines)
            .into_iter()
            .take(HOT_LINES)
            .filter_map(|k| {
                let l = self.lines.get(&k)?;
                let dominant = l
                    .by_reason
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(a.0)))
                    .map(|(r, n)| (r.clone(), n / l.samples.max(f64::MIN_POSITIVE)));
                Some(HotLine {
                    file: k.0,
                    line: k.1,
                    samples: l.samples,
                    share_of_scope: l.samples / total,
                    dominant_reason: dominant,
                    text: l.text.clone(),
                })
            })
            .collect();
        ScopeStallSummary {
            scope,
            samples: self.samples,
            iterations: self.iterations,
            reasons: reason_counts(&self.by_reason),
            split_by_time: self.split_by_time,
            hot_lines,
            line_samples_left_out: self.line_samples_left_out,
            samples_without_cubin: self.samples_without_cubin,
        }
    }
}

/// The keys of `lines`, most samples first (ties by file and line).
fn ranked(lines: &BTreeMap<(String, u32), LineAcc>) -> Vec<(String, u32)> {
    let mut v: Vec<(&(String, u32), f64)> = lines.iter().map(|(k, l)| (k, l.samples)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.into_iter().map(|(k, _)| k.clone()).collect()
}

fn add_counts(to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (r, n) in from {
        let e = to.entry(r.clone()).or_default();
        *e = e.saturating_add(*n);
    }
}

fn reason_counts(counts: &BTreeMap<String, u64>) -> Vec<ReasonCount> {
    reason_shares(counts)
        .into_iter()
        .map(|(reason, share)| ReasonCount {
            samples: counts.get(&reason).copied().unwrap_or(0),
            reason,
            share,
        })
        .collect()
}

/// A source line's text trimmed and cut to [`MAX_TEXT_CHARS`].
fn cut_text(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_ledger_format::stalls::ScopeStalls;

    fn counts(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
        v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    fn line(file: &str, no: u32, n: u64) -> LineStalls {
        LineStalls {
            file: file.into(),
            line: no,
            samples: n,
            by_reason: counts(&[("wait", n)]),
            text: None,
        }
    }

    fn row_with(index: u64, stalls: IterationStalls) -> IterationRow {
        let json = format!(
            r#"{{"index":{index},"host_start_ns":0,"host_wall_ns":1,"complete":true,
            "perturbed":true,"devices":[],"scopes":[],"kernels":[],"memcpy":[],"memset":[],
            "synchronization":[],"dropped_records":0}}"#
        );
        let mut r: IterationRow = serde_json::from_str(&json).unwrap();
        r.stalls = Some(stalls);
        r
    }

    #[test]
    fn a_shared_kernel_s_lines_follow_its_share_of_each_scope() {
        let k = KernelStalls {
            name: "k".into(),
            samples: 100,
            by_reason: counts(&[("wait", 100)]),
            lines: vec![line("a.cu", 1, 100)],
            cubin: true,
        };
        let scope = |name: &str, n: u64| ScopeStalls {
            scope: name.into(),
            samples: n,
            by_reason: counts(&[("wait", n)]),
            kernels: vec!["k".into()],
            split_by_time: true,
        };
        let st = IterationStalls {
            total_samples: 100,
            kernels: vec![k],
            scopes: vec![scope("x", 75), scope("y", 25)],
            ..IterationStalls::default()
        };
        let mut acc = StallAccumulator::new();
        acc.add(&row_with(0, st));
        let s = acc.finish().unwrap();
        assert_eq!(s.scopes[0].scope, "x");
        assert!((s.scopes[0].hot_lines[0].samples - 75.0).abs() < 1e-9);
        assert!((s.scopes[1].hot_lines[0].share_of_scope - 1.0).abs() < 1e-9);
        assert!(s.split_by_time);
    }

    #[test]
    fn lines_and_scopes_past_the_bounds_are_counted() {
        const LAST: u64 = 2 * MAX_SCOPES as u64 + 9;
        let mut acc = StallAccumulator::new();
        for i in 0..3u64 {
            let lines: Vec<LineStalls> = (0..MAX_LINES_PER_SCOPE as u32 + 50)
                .map(|l| line("a.cu", l + 1, u64::from(l) + 1))
                .collect();
            let scopes: Vec<ScopeStalls> = (0..=LAST)
                .map(|s| ScopeStalls {
                    scope: format!("s{s:03}"),
                    samples: s + 1,
                    by_reason: counts(&[("wait", s + 1)]),
                    kernels: if s == LAST {
                        vec!["k".into()]
                    } else {
                        Vec::new()
                    },
                    split_by_time: false,
                })
                .collect();
            let st = IterationStalls {
                kernels: vec![KernelStalls {
                    name: "k".into(),
                    samples: 1,
                    by_reason: counts(&[("wait", 1)]),
                    lines,
                    cubin: true,
                }],
                scopes,
                ..IterationStalls::default()
            };
            acc.add(&row_with(i, st));
        }
        let s = acc.finish().unwrap();
        assert_eq!(s.scopes.len(), MAX_SCOPES);
        assert!(s.scope_samples_left_out > 0);
        let top = &s.scopes[0];
        assert_eq!(top.hot_lines.len(), HOT_LINES);
        assert_eq!(top.hot_lines[0].line, MAX_LINES_PER_SCOPE as u32 + 50);
        // The 50 least sampled lines (1..=50 samples each, three times) are left out.
        assert!((top.line_samples_left_out - 3.0 * 1275.0).abs() < 1e-9);
        assert_eq!(s.iterations.len(), 3);
        assert_eq!(cut_text("  x  "), "x");
        assert_eq!(
            cut_text(&"y".repeat(200)).chars().count(),
            MAX_TEXT_CHARS + 1
        );
    }
}
