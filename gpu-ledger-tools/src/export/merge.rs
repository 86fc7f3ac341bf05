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
    /// Whether the ledger ended with its trailer: `Some(false)` when it was read to its end
    /// without one (the run did not finish, so its last iterations may be missing), `None`
    /// when not known.
    pub finished: Option<bool>,
}

impl RankSeries {
    /// An empty series for the ledger with `header`.
    pub fn new(header: &Header, source: &str) -> Self {
        Self {
            rank: header.rank.as_ref().map(|r| r.rank),
            world_size: header.rank.as_ref().and_then(|r| r.world_size),
            source: source.to_string(),
            rows: Vec::new(),
            finished: None,
        }
    }

    /// The series with whether its ledger ended with a trailer.
    #[must_use]
    pub fn with_trailer(mut self, trailer: bool) -> Self {
        self.finished = Some(trailer);
        self
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
    /// The one rank with the longest wall time; `None` when two or more ranks share it (a tie)
    /// or when only one rank has the iteration.
    pub slowest_rank: Option<u32>,
    /// The longest wall time among the ranks present, ns.
    pub slowest_ns: u64,
    /// The shortest wall time among the ranks present, ns.
    pub fastest_ns: u64,
    /// `slowest - fastest`, ns; `None` when only one rank has the iteration.
    pub spread_ns: Option<u64>,
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
    /// How often each rank alone was the slowest (same order as `ranks`).
    pub slowest_counts: Vec<usize>,
    /// Iterations where two or more ranks tie for the longest wall time.
    pub ties: usize,
    /// Iterations only one rank has.
    pub single_rank: usize,
    /// Distribution of the spread over iterations present in every rank, ns.
    pub spread: Option<Distribution>,
    /// Median wall time per rank over its rows, ns (same order as `ranks`).
    pub median_wall_ns: Vec<Option<f64>>,
    /// Things to know: ranks missing from the world size, iterations missing in some ranks,
    /// duplicate indices, ranks numbered by argument order, ledgers without a trailer, what the
    /// flagged column holds.
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
    let mut tally = Tally::new(&ranks);
    let mut iterations = Vec::new();
    for (index, cells) in table {
        if let Some(it) = MergedIteration::of_cells(index, &cells, &ranks) {
            tally.count(&it, &cells);
            iterations.push(it);
        }
    }
    let ends: Vec<Ending> = by_rank.values().map(Ending::of).collect();
    notes.extend(tally.notes(&ends));
    Ok(MergedView {
        sources: by_rank.values().map(|s| s.source.clone()).collect(),
        ranks,
        iterations,
        slowest_counts: tally.slowest_counts,
        ties: tally.ties,
        single_rank: tally.single_rank,
        spread: tally.spreads.distribution(),
        median_wall_ns: medians,
        notes,
    })
}

/// How one rank's ledger ended, for the note on a ledger without a trailer.
#[derive(Debug, Clone)]
struct Ending {
    rank: u32,
    source: String,
    finished: Option<bool>,
    last_index: Option<u64>,
}

impl Ending {
    fn of(s: &RankSeries) -> Self {
        Self {
            rank: s.rank.unwrap_or_default(),
            source: s.source.clone(),
            finished: s.finished,
            last_index: s.rows.iter().map(|r| r.0).max(),
        }
    }
}

/// What the merged iterations add up to, for the totals under the table.
#[derive(Debug)]
struct Tally {
    ranks: Vec<u32>,
    slowest_counts: Vec<usize>,
    ties: usize,
    single_rank: usize,
    spreads: Series,
    partial: IndexRuns,
    flagged: usize,
}

impl Tally {
    fn new(ranks: &[u32]) -> Self {
        Self {
            ranks: ranks.to_vec(),
            slowest_counts: vec![0; ranks.len()],
            ties: 0,
            single_rank: 0,
            spreads: Series::new(),
            partial: IndexRuns::default(),
            flagged: 0,
        }
    }

    /// Counts `it`, merged from `cells` (in the order of the ranks).
    fn count(&mut self, it: &MergedIteration, cells: &[Option<(u64, bool)>]) {
        match (it.slowest_rank, it.spread_ns) {
            (Some(r), _) => {
                if let Ok(pos) = self.ranks.binary_search(&r) {
                    self.slowest_counts[pos] += 1;
                }
            }
            (None, Some(_)) => self.ties += 1,
            (None, None) => self.single_rank += 1,
        }
        if !it.flagged_ranks.is_empty() {
            self.flagged += 1;
        }
        match it.spread_ns {
            Some(spread) if cells.iter().all(Option::is_some) => self.spreads.push_u64(spread),
            _ if cells.iter().all(Option::is_some) => {}
            _ => self.partial.push(it.index),
        }
    }

    /// The notes the tally and the ledgers' ends give: iterations some ranks lack, ledgers
    /// without a trailer, and what the flagged column holds.
    fn notes(&self, ends: &[Ending]) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.partial.is_empty() {
            notes.push(format!(
                "iterations {} are missing in some ranks (shown with '–'; left out of the spread \
                 statistics)",
                self.partial
            ));
        }
        for e in ends.iter().filter(|e| e.finished == Some(false)) {
            notes.push(format!(
                "rank {} ({}) has no trailer: the run did not finish (killed or crashed){}; \
                 iterations it lacks are missing, not slow",
                e.rank,
                e.source,
                e.last_index
                    .map_or(String::new(), |i| format!(" after iteration {i}"))
            ));
        }
        notes.push(if self.flagged == 0 {
            "no row is perturbed (counter replay) or incomplete: the column \"perturbed or \
             incomplete\" is empty"
                .into()
        } else {
            format!(
                "{} iterations have a perturbed (counter replay) or incomplete row, whose ranks \
                 the column \"perturbed or incomplete\" lists; their wall times count as recorded",
                self.flagged
            )
        });
        notes
    }
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
        let sizes: Vec<String> = world.iter().map(u32::to_string).collect();
        notes.push(format!(
            "the ledgers disagree on the world size: {}",
            sizes.join(", ")
        ));
    }
    Ok((by_rank, notes, given))
}

impl MergedIteration {
    /// The iteration `index` from its per-rank cells (`(wall, flagged)`, in the order of
    /// `ranks`); `None` when no rank has it.
    fn of_cells(index: u64, cells: &[Option<(u64, bool)>], ranks: &[u32]) -> Option<Self> {
        let present: Vec<(usize, u64)> = cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.map(|(w, _)| (i, w)))
            .collect();
        let slowest = present.iter().map(|p| p.1).max()?;
        let fastest = present.iter().map(|p| p.1).min().unwrap_or(slowest);
        let mut at_slowest = present.iter().filter(|p| p.1 == slowest).map(|p| p.0);
        // One rank alone among several is a straggler; a tie or a lone rank names none.
        let slowest_pos = match (at_slowest.next(), at_slowest.next()) {
            (Some(pos), None) if present.len() > 1 => Some(pos),
            _ => None,
        };
        Some(MergedIteration {
            index,
            wall_ns: cells.iter().map(|c| c.map(|x| x.0)).collect(),
            slowest_rank: slowest_pos.map(|p| ranks[p]),
            slowest_ns: slowest,
            fastest_ns: fastest,
            spread_ns: (present.len() > 1).then_some(slowest - fastest),
            flagged_ranks: cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_some_and(|x| x.1))
                .map(|(i, _)| ranks[i])
                .collect(),
        })
    }

    /// The slowest rank as a table shows it: the rank, `tie`, or `n/a` (one rank only).
    fn slowest_cell(&self) -> String {
        match (self.slowest_rank, self.spread_ns) {
            (Some(r), _) => r.to_string(),
            (None, Some(_)) => "tie".into(),
            (None, None) => "n/a".into(),
        }
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
        "| iteration | {} | slowest rank | spread (max−min) | spread / slowest | perturbed or \
         incomplete |",
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
        let share = match self.spread_ns {
            Some(s) if self.slowest_ns > 0 => fmt_pct(s as f64 / self.slowest_ns as f64),
            _ => "n/a".into(),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            self.index,
            walls.join(" | "),
            self.slowest_cell(),
            self.spread_ns.map_or("n/a".into(), |s| fmt_ns(s as f64)),
            share,
            flagged.join(", ")
        )
    }

    /// The iteration as one CSV line; `slowest_rank` is empty for a tie or a lone rank, and
    /// `spread_ns` for a lone rank.
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
            self.slowest_rank.map_or(String::new(), |r| r.to_string()),
            self.slowest_ns,
            self.fastest_ns,
            self.spread_ns.map_or(String::new(), |s| s.to_string()),
            csv_field(&flagged.join(";"))
        )
    }
}

/// What follows the Markdown table: per-rank medians and counts, the spread, the notes.
fn md_totals(view: &MergedView) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nslowest rank: the one rank with the longest host wall time; `tie` when ranks share \
         it, `n/a` when only one rank has the iteration."
    );
    let _ = writeln!(o, "\n| rank | ledger | median wall | times slowest |");
    let _ = writeln!(o, "|---:|---|---:|---:|");
    for (i, r) in view.ranks.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {r} | {} | {} | {} |",
            md_cell(&view.sources[i]),
            view.median_wall_ns[i].map_or("n/a".into(), fmt_ns),
            view.slowest_counts[i]
        );
    }
    let _ = writeln!(
        o,
        "\nTimes slowest counts the iterations a rank alone was slowest in; {} iteration{} \
         had no slowest rank ({} tie{}, {} on one rank only).",
        view.ties + view.single_rank,
        if view.ties + view.single_rank == 1 {
            ""
        } else {
            "s"
        },
        view.ties,
        if view.ties == 1 { "" } else { "s" },
        view.single_rank
    );
    if let Some(s) = &view.spread {
        let _ = writeln!(
            o,
            "\n**Spread** over {} iterations present in every rank: median {}, p90 {}, max {}.",
            s.n,
            fmt_ns(s.median),
            fmt_ns(s.p90),
            fmt_ns(s.max)
        );
    }
    if !view.notes.is_empty() {
        let _ = writeln!(o, "\n### Notes\n");
        for n in &view.notes {
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
        o.push_str(&md_totals(self));
        o
    }

    /// The view as CSV: `index, wall_ns_rank{r}..., slowest_rank, slowest_ns, fastest_ns,
    /// spread_ns, flagged_ranks`.
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
    sources: Vec<String>,
    /// For each series as given, its position in the ranks.
    positions: Vec<usize>,
    notes: Vec<String>,
    tally: Tally,
    walls: Vec<Series>,
    ends: Vec<Ending>,
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
            walls: vec![Series::new(); ranks.len()],
            ends: by_rank.values().map(Ending::of).collect(),
            tally: Tally::new(&ranks),
            sources,
            positions,
            notes,
        })
    }

    /// Ranks, ascending.
    pub fn ranks(&self) -> &[u32] {
        &self.tally.ranks
    }

    /// The head of the Markdown table, or of the CSV.
    pub fn head(&self, csv: bool) -> String {
        if csv {
            csv_head(self.ranks())
        } else {
            md_head(self.ranks())
        }
    }

    /// The iteration `index`: `cells[i]` is `(host_wall_ns, flagged)` of the `i`-th series as
    /// given to [`MergeStream::new`], `None` where that ledger has no row for it.
    pub fn push(&mut self, index: u64, given: &[Option<(u64, bool)>]) -> Option<MergedIteration> {
        let mut cells = vec![None; self.ranks().len()];
        for (i, c) in given.iter().enumerate() {
            if let Some(&pos) = self.positions.get(i) {
                cells[pos] = *c;
                if c.is_some() {
                    self.ends[pos].last_index = Some(index);
                }
            }
        }
        for (pos, c) in cells.iter().enumerate() {
            if let Some((wall, _)) = c {
                self.walls[pos].push_u64(*wall);
            }
        }
        let it = MergedIteration::of_cells(index, &cells, self.ranks())?;
        self.tally.count(&it, &cells);
        Some(it)
    }

    /// Says whether the `i`-th series as given ended with its trailer, once it is read whole.
    pub fn ended(&mut self, given: usize, trailer: bool) {
        if let Some(&pos) = self.positions.get(given) {
            self.ends[pos].finished = Some(trailer);
        }
    }

    /// What follows the Markdown table: per-rank totals, the spread and the notes.
    #[must_use]
    pub fn finish_markdown(mut self) -> String {
        self.notes.extend(self.tally.notes(&self.ends));
        let view = MergedView {
            median_wall_ns: self.walls.iter().map(Series::median).collect(),
            spread: self.tally.spreads.distribution(),
            ranks: self.tally.ranks,
            sources: self.sources,
            iterations: Vec::new(),
            slowest_counts: self.tally.slowest_counts,
            ties: self.tally.ties,
            single_rank: self.tally.single_rank,
            notes: self.notes,
        };
        md_totals(&view)
    }
}
