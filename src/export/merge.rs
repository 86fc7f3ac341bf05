//! The ledgers of several ranks (one per process of a multi-GPU job) in one view, aligned by
//! iteration index: for each iteration the slowest rank by host wall time and the spread between
//! the slowest and the fastest. In a synchronous job every rank waits for the slowest at the next
//! collective, so the slowest rank sets the step time and the spread is what the others wait.
//!
//! Only the index, wall time and flags of each row are kept, so that many large ledgers can be
//! merged in little memory.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::text::{csv_field, fmt_ns, fmt_pct, md_cell};
use crate::analysis::stats::{median, Distribution};
use crate::ledger::schema::{Header, IterationRow};

/// One rank's iteration times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSeries {
    /// Global rank; `None` when the header has none.
    pub rank: Option<u32>,
    /// World size claimed by the header.
    pub world_size: Option<u32>,
    /// Where it came from (file name), for messages.
    pub source: String,
    /// `(index, host_wall_ns, flagged)` per row in file order; `flagged` when the row is
    /// perturbed or incomplete.
    pub rows: Vec<(u64, u64, bool)>,
}

impl RankSeries {
    /// An empty series for the ledger with `header`.
    pub fn new(header: &Header, source: &str) -> Self {
        Self {
            rank: header.rank.as_ref().map(|r| r.rank),
            world_size: header.rank.as_ref().and_then(|r| r.world_size),
            source: source.to_string(),
            rows: Vec::new(),
        }
    }

    /// Adds one row.
    pub fn push(&mut self, row: &IterationRow) {
        self.rows
            .push((row.index, row.host_wall_ns, row.perturbed || !row.complete));
    }

    /// A series from a header and its rows.
    pub fn from_rows<'a>(
        header: &Header,
        source: &str,
        rows: impl IntoIterator<Item = &'a IterationRow>,
    ) -> Self {
        let mut s = Self::new(header, source);
        for r in rows {
            s.push(r);
        }
        s
    }
}

/// Why ledgers cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// No ledger given.
    #[error("no ledger to merge")]
    Empty,
    /// Two ledgers claim the same rank.
    #[error("{first} and {second} both claim rank {rank}: pass each rank's ledger once")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// The first ledger claiming it.
        first: String,
        /// The second.
        second: String,
    },
    /// Some ledgers have a rank in their header and others do not.
    #[error(
        "{source_name} has no rank in its header while other ledgers do: it was not launched as a \
         rank (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID unset)"
    )]
    MissingRank {
        /// The ledger without a rank.
        source_name: String,
    },
}

/// One iteration across ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergedIteration {
    /// Iteration index.
    pub index: u64,
    /// Host wall time per rank, in the order of [`MergedView::ranks`]; `None` where that rank
    /// has no row for the iteration.
    pub wall_ns: Vec<Option<u64>>,
    /// The rank with the longest wall time.
    pub slowest_rank: u32,
    /// Its wall time, ns.
    pub slowest_ns: u64,
    /// The shortest wall time among the ranks present, ns.
    pub fastest_ns: u64,
    /// `slowest - fastest`, ns.
    pub spread_ns: u64,
    /// Ranks whose row is perturbed or incomplete.
    pub flagged_ranks: Vec<u32>,
}

/// The merged view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergedView {
    /// Ranks, ascending.
    pub ranks: Vec<u32>,
    /// Source of each rank, same order.
    pub sources: Vec<String>,
    /// Iterations present in at least one rank, ascending by index.
    pub iterations: Vec<MergedIteration>,
    /// How often each rank was the slowest (same order as `ranks`).
    pub slowest_counts: Vec<usize>,
    /// Distribution of the spread over iterations present in every rank, ns.
    pub spread: Option<Distribution>,
    /// Median wall time per rank over its rows, ns (same order as `ranks`).
    pub median_wall_ns: Vec<Option<f64>>,
    /// Things to know: ranks missing from the world size, iterations missing in some ranks,
    /// duplicate indices, ranks numbered by argument order.
    pub notes: Vec<String>,
}

/// Aligns `series` by iteration index.
///
/// When no series has a rank, ranks are numbered in the order given (with a note).
///
/// # Errors
/// [`MergeError::Empty`], [`MergeError::DuplicateRank`] when two series claim one rank,
/// [`MergeError::MissingRank`] when only some series have a rank.
pub fn merge_ranks(mut series: Vec<RankSeries>) -> Result<MergedView, MergeError> {
    if series.is_empty() {
        return Err(MergeError::Empty);
    }
    let mut notes = Vec::new();
    let with_rank = series.iter().filter(|s| s.rank.is_some()).count();
    if with_rank == 0 {
        for (i, s) in series.iter_mut().enumerate() {
            s.rank = Some(i as u32);
        }
        notes.push(
            "no ledger has a rank in its header: ranks are numbered in the order given".into(),
        );
    } else if let Some(s) = series.iter().find(|s| s.rank.is_none()) {
        return Err(MergeError::MissingRank {
            source_name: s.source.clone(),
        });
    }
    let mut by_rank: BTreeMap<u32, RankSeries> = BTreeMap::new();
    for s in series {
        let r = s.rank.unwrap_or_default();
        if let Some(prev) = by_rank.get(&r) {
            return Err(MergeError::DuplicateRank {
                rank: r,
                first: prev.source.clone(),
                second: s.source,
            });
        }
        by_rank.insert(r, s);
    }
    let ranks: Vec<u32> = by_rank.keys().copied().collect();
    let world: BTreeSet<u32> = by_rank.values().filter_map(|s| s.world_size).collect();
    if let Some(&w) = world.iter().max() {
        let missing: Vec<String> = (0..w)
            .filter(|r| !by_rank.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        if !missing.is_empty() {
            notes.push(format!(
                "world size {w} but no ledger for rank {}",
                missing.join(", ")
            ));
        }
    }
    if world.len() > 1 {
        notes.push(format!(
            "the ledgers disagree on the world size: {:?}",
            world.iter().collect::<Vec<_>>()
        ));
    }
    // index -> per-rank (wall, flagged)
    let mut table: BTreeMap<u64, Vec<Option<(u64, bool)>>> = BTreeMap::new();
    let mut medians = Vec::new();
    for (pos, s) in by_rank.values().enumerate() {
        let mut dup = 0usize;
        for &(index, wall, flagged) in &s.rows {
            let cells = table
                .entry(index)
                .or_insert_with(|| vec![None; ranks.len()]);
            if cells[pos].is_some() {
                dup += 1;
            } else {
                cells[pos] = Some((wall, flagged));
            }
        }
        if dup > 0 {
            notes.push(format!(
                "{}: {dup} rows repeat an iteration index; the first of each is used",
                s.source
            ));
        }
        let walls: Vec<f64> = s.rows.iter().map(|r| r.1 as f64).collect();
        medians.push(median(&walls));
    }
    let mut iterations = Vec::new();
    let mut slowest_counts = vec![0usize; ranks.len()];
    let mut spreads = Vec::new();
    let mut partial = Vec::new();
    for (index, cells) in table {
        let present: Vec<(usize, u64)> = cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|(w, _)| (i, w)))
            .collect();
        let Some(&(slow_pos, slowest)) = present.iter().max_by_key(|(i, w)| (*w, usize::MAX - i))
        else {
            continue;
        };
        let fastest = present.iter().map(|p| p.1).min().unwrap_or(slowest);
        slowest_counts[slow_pos] += 1;
        if present.len() == ranks.len() {
            spreads.push(slowest - fastest);
        } else {
            partial.push(index);
        }
        iterations.push(MergedIteration {
            index,
            wall_ns: cells.iter().map(|c| c.map(|x| x.0)).collect(),
            slowest_rank: ranks[slow_pos],
            slowest_ns: slowest,
            fastest_ns: fastest,
            spread_ns: slowest - fastest,
            flagged_ranks: cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_some_and(|x| x.1))
                .map(|(i, _)| ranks[i])
                .collect(),
        });
    }
    if !partial.is_empty() {
        notes.push(format!(
            "iterations {} are missing in some ranks (shown with '–'; left out of the spread \
             statistics)",
            super::text::fmt_indices(&partial)
        ));
    }
    Ok(MergedView {
        sources: by_rank.values().map(|s| s.source.clone()).collect(),
        ranks,
        iterations,
        slowest_counts,
        spread: Distribution::from_u64(&spreads),
        median_wall_ns: medians,
        notes,
    })
}

impl MergedView {
    /// The view as Markdown: one table row per iteration, then per-rank totals and notes.
    pub fn to_markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "## gpu-ledger merge: {} rank{}\n",
            self.ranks.len(),
            if self.ranks.len() == 1 { "" } else { "s" }
        );
        let head: Vec<String> = self.ranks.iter().map(|r| format!("rank {r}")).collect();
        let _ = writeln!(
            o,
            "| iteration | {} | slowest rank | spread (max−min) | spread / slowest | flagged |",
            head.join(" | ")
        );
        let _ = writeln!(
            o,
            "|---:|{}---:|---:|---:|---|",
            "---:|".repeat(self.ranks.len())
        );
        for it in &self.iterations {
            let walls: Vec<String> = it
                .wall_ns
                .iter()
                .map(|w| w.map_or("–".into(), |w| fmt_ns(w as f64)))
                .collect();
            let flagged: Vec<String> = it.flagged_ranks.iter().map(|r| r.to_string()).collect();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} |",
                it.index,
                walls.join(" | "),
                it.slowest_rank,
                fmt_ns(it.spread_ns as f64),
                if it.slowest_ns > 0 {
                    fmt_pct(it.spread_ns as f64 / it.slowest_ns as f64)
                } else {
                    "n/a".into()
                },
                flagged.join(", ")
            );
        }
        let _ = writeln!(o, "\n| rank | ledger | median wall | times slowest |");
        let _ = writeln!(o, "|---:|---|---:|---:|");
        for (i, r) in self.ranks.iter().enumerate() {
            let _ = writeln!(
                o,
                "| {r} | {} | {} | {} |",
                md_cell(&self.sources[i]),
                self.median_wall_ns[i].map_or("n/a".into(), fmt_ns),
                self.slowest_counts[i]
            );
        }
        if let Some(s) = &self.spread {
            let _ = writeln!(
                o,
                "\n**Spread** over {} iterations present in every rank: median {}, p90 {}, max {}.",
                s.n,
                fmt_ns(s.median),
                fmt_ns(s.p90),
                fmt_ns(s.max)
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(o, "\n### Notes\n");
            for n in &self.notes {
                let _ = writeln!(o, "- {}", md_cell(n));
            }
        }
        o
    }

    /// The view as CSV: `index, wall_ns_rank{r}..., slowest_rank, spread_ns, flagged_ranks`.
    pub fn to_csv(&self) -> String {
        let mut o = String::new();
        let cols: Vec<String> = self
            .ranks
            .iter()
            .map(|r| format!("wall_ns_rank{r}"))
            .collect();
        let _ = writeln!(
            o,
            "index,{},slowest_rank,slowest_ns,fastest_ns,spread_ns,flagged_ranks",
            cols.join(",")
        );
        for it in &self.iterations {
            let walls: Vec<String> = it
                .wall_ns
                .iter()
                .map(|w| w.map_or(String::new(), |w| w.to_string()))
                .collect();
            let flagged: Vec<String> = it.flagged_ranks.iter().map(|r| r.to_string()).collect();
            let _ = writeln!(
                o,
                "{},{},{},{},{},{},{}",
                it.index,
                walls.join(","),
                it.slowest_rank,
                it.slowest_ns,
                it.fastest_ns,
                it.spread_ns,
                csv_field(&flagged.join(";"))
            );
        }
        o
    }
}
