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
use crate::analysis::indices::IndexRuns;
use crate::analysis::series::Series;
use crate::analysis::stats::{median, Distribution};
use gpu_ledger_format::schema::{Header, IterationRow};

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
pub fn merge_ranks(series: Vec<RankSeries>) -> Result<MergedView, MergeError> {
    let (by_rank, mut notes, _) = plan(series)?;
    let ranks: Vec<u32> = by_rank.keys().copied().collect();
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
    let mut partial = IndexRuns::default();
    for (index, cells) in table {
        let Some((it, slow_pos)) = MergedIteration::of_cells(index, &cells, &ranks) else {
            continue;
        };
        slowest_counts[slow_pos] += 1;
        if cells.iter().all(Option::is_some) {
            spreads.push(it.spread_ns);
        } else {
            partial.push(index);
        }
        iterations.push(it);
    }
    notes.extend(partial_note(&partial));
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

/// The series by rank, checked, with the notes their headers give.
/// Also the rank of each series as given.
type Plan = (BTreeMap<u32, RankSeries>, Vec<String>, Vec<u32>);

fn plan(mut series: Vec<RankSeries>) -> Result<Plan, MergeError> {
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
    let given: Vec<u32> = series.iter().map(|s| s.rank.unwrap_or_default()).collect();
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
    Ok((by_rank, notes, given))
}

fn partial_note(partial: &IndexRuns) -> Option<String> {
    (!partial.is_empty()).then(|| {
        format!(
            "iterations {} are missing in some ranks (shown with '–'; left out of the spread \
             statistics)",
            partial
        )
    })
}

impl MergedIteration {
    /// The iteration `index` from its per-rank cells (`(wall, flagged)`, in the order of
    /// `ranks`), with the position of its slowest rank; `None` when no rank has it.
    fn of_cells(index: u64, cells: &[Option<(u64, bool)>], ranks: &[u32]) -> Option<(Self, usize)> {
        let present: Vec<(usize, u64)> = cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|(w, _)| (i, w)))
            .collect();
        let &(slow_pos, slowest) = present.iter().max_by_key(|(i, w)| (*w, usize::MAX - i))?;
        let fastest = present.iter().map(|p| p.1).min().unwrap_or(slowest);
        let it = MergedIteration {
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
        };
        Some((it, slow_pos))
    }
}

/// The Markdown table's head for `ranks`.
fn md_head(ranks: &[u32]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## gpu-ledger merge: {} rank{}\n",
        ranks.len(),
        if ranks.len() == 1 { "" } else { "s" }
    );
    let head: Vec<String> = ranks.iter().map(|r| format!("rank {r}")).collect();
    let _ = writeln!(
        o,
        "| iteration | {} | slowest rank | spread (max−min) | spread / slowest | flagged |",
        head.join(" | ")
    );
    let _ = writeln!(
        o,
        "|---:|{}---:|---:|---:|---|",
        "---:|".repeat(ranks.len())
    );
    o
}

/// The CSV head for `ranks`.
fn csv_head(ranks: &[u32]) -> String {
    let cols: Vec<String> = ranks.iter().map(|r| format!("wall_ns_rank{r}")).collect();
    format!(
        "index,{},slowest_rank,slowest_ns,fastest_ns,spread_ns,flagged_ranks\n",
        cols.join(",")
    )
}

impl MergedIteration {
    /// The iteration as one Markdown table line.
    pub fn to_markdown(&self) -> String {
        let walls: Vec<String> = self
            .wall_ns
            .iter()
            .map(|w| w.map_or("–".into(), |w| fmt_ns(w as f64)))
            .collect();
        let flagged: Vec<String> = self.flagged_ranks.iter().map(|r| r.to_string()).collect();
        format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            self.index,
            walls.join(" | "),
            self.slowest_rank,
            fmt_ns(self.spread_ns as f64),
            if self.slowest_ns > 0 {
                fmt_pct(self.spread_ns as f64 / self.slowest_ns as f64)
            } else {
                "n/a".into()
            },
            flagged.join(", ")
        )
    }

    /// The iteration as one CSV line.
    pub fn to_csv(&self) -> String {
        let walls: Vec<String> = self
            .wall_ns
            .iter()
            .map(|w| w.map_or(String::new(), |w| w.to_string()))
            .collect();
        let flagged: Vec<String> = self.flagged_ranks.iter().map(|r| r.to_string()).collect();
        format!(
            "{},{},{},{},{},{},{}\n",
            self.index,
            walls.join(","),
            self.slowest_rank,
            self.slowest_ns,
            self.fastest_ns,
            self.spread_ns,
            csv_field(&flagged.join(";"))
        )
    }
}

/// What follows the Markdown table: per-rank medians and counts, the spread, the notes.
fn md_totals(
    ranks: &[u32],
    sources: &[String],
    median_wall_ns: &[Option<f64>],
    slowest_counts: &[usize],
    spread: Option<&Distribution>,
    notes: &[String],
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\n| rank | ledger | median wall | times slowest |");
    let _ = writeln!(o, "|---:|---|---:|---:|");
    for (i, r) in ranks.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {r} | {} | {} | {} |",
            md_cell(&sources[i]),
            median_wall_ns[i].map_or("n/a".into(), fmt_ns),
            slowest_counts[i]
        );
    }
    if let Some(s) = spread {
        let _ = writeln!(
            o,
            "\n**Spread** over {} iterations present in every rank: median {}, p90 {}, max {}.",
            s.n,
            fmt_ns(s.median),
            fmt_ns(s.p90),
            fmt_ns(s.max)
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(o, "\n### Notes\n");
        for n in notes {
            let _ = writeln!(o, "- {}", md_cell(n));
        }
    }
    o
}

impl MergedView {
    /// The view as Markdown: one table row per iteration, then per-rank totals and notes.
    pub fn to_markdown(&self) -> String {
        let mut o = md_head(&self.ranks);
        for it in &self.iterations {
            o.push_str(&it.to_markdown());
        }
        o.push_str(&md_totals(
            &self.ranks,
            &self.sources,
            &self.median_wall_ns,
            &self.slowest_counts,
            self.spread.as_ref(),
            &self.notes,
        ));
        o
    }

    /// The view as CSV: `index, wall_ns_rank{r}..., slowest_rank, spread_ns, flagged_ranks`.
    pub fn to_csv(&self) -> String {
        let mut o = csv_head(&self.ranks);
        for it in &self.iterations {
            o.push_str(&it.to_csv());
        }
        o
    }
}

/// [`merge_ranks`] of ledgers read as streams, in memory independent of their rows: the caller
/// reads every ledger in index order and hands over, for each index present in any of them
/// (ascending), the cells of all ranks ([`MergeStream::push`]); each merged iteration is
/// returned to be written at once, and [`MergeStream::finish_markdown`] gives what follows the
/// table. The text is the one [`MergedView::to_markdown`] and [`MergedView::to_csv`] write.
#[derive(Debug)]
pub struct MergeStream {
    ranks: Vec<u32>,
    sources: Vec<String>,
    /// For each series as given, its position in `ranks`.
    positions: Vec<usize>,
    notes: Vec<String>,
    slowest_counts: Vec<usize>,
    spreads: Series,
    walls: Vec<Series>,
    partial: IndexRuns,
}

impl MergeStream {
    /// A merge of the ledgers whose (empty) series are `series`, in the order the caller will
    /// give their cells.
    ///
    /// # Errors
    /// As [`merge_ranks`].
    pub fn new(series: Vec<RankSeries>) -> Result<Self, MergeError> {
        let (by_rank, notes, given) = plan(series)?;
        let ranks: Vec<u32> = by_rank.keys().copied().collect();
        let sources: Vec<String> = by_rank.values().map(|s| s.source.clone()).collect();
        // Every rank is unique (a duplicate was refused), so each series has one position.
        let positions = given
            .iter()
            .map(|r| ranks.binary_search(r).unwrap_or_default())
            .collect();
        Ok(Self {
            slowest_counts: vec![0; ranks.len()],
            walls: vec![Series::new(); ranks.len()],
            ranks,
            sources,
            positions,
            notes,
            spreads: Series::new(),
            partial: IndexRuns::default(),
        })
    }

    /// Ranks, ascending.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The head of the Markdown table, or of the CSV.
    pub fn head(&self, csv: bool) -> String {
        if csv {
            csv_head(&self.ranks)
        } else {
            md_head(&self.ranks)
        }
    }

    /// The iteration `index`: `cells[i]` is `(host_wall_ns, flagged)` of the `i`-th series as
    /// given to [`MergeStream::new`], `None` where that ledger has no row for it.
    pub fn push(&mut self, index: u64, given: &[Option<(u64, bool)>]) -> Option<MergedIteration> {
        let mut cells = vec![None; self.ranks.len()];
        for (i, c) in given.iter().enumerate() {
            if let Some(&pos) = self.positions.get(i) {
                cells[pos] = *c;
            }
        }
        for (pos, c) in cells.iter().enumerate() {
            if let Some((wall, _)) = c {
                self.walls[pos].push_u64(*wall);
            }
        }
        let (it, slow_pos) = MergedIteration::of_cells(index, &cells, &self.ranks)?;
        self.slowest_counts[slow_pos] += 1;
        if cells.iter().all(Option::is_some) {
            self.spreads.push_u64(it.spread_ns);
        } else {
            self.partial.push(index);
        }
        Some(it)
    }

    /// What follows the Markdown table: per-rank totals, the spread and the notes.
    #[must_use]
    pub fn finish_markdown(mut self) -> String {
        self.notes.extend(partial_note(&self.partial));
        let medians: Vec<Option<f64>> = self.walls.iter().map(Series::median).collect();
        md_totals(
            &self.ranks,
            &self.sources,
            &medians,
            &self.slowest_counts,
            self.spreads.distribution().as_ref(),
            &self.notes,
        )
    }
}
