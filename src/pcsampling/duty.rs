//! Duty-cycled PC sampling: short windows spread over a long run, at a cost the user sets.
//!
//! While PC sampling runs, every kernel launch costs about a millisecond and a half more
//! (docs/pc-sampling.md), so a run cannot be sampled throughout. The scheduler opens a window of
//! one iteration now and then, when the windows' measured cost so far plus the next one's
//! estimate stays within `budget` of the run's wall time, and only in an iteration where a kernel
//! that still lacks samples is expected to run: it rotates through the kernels that hold most of
//! the device time (those covering `coverage` of it) until each has `target_samples`, and opens
//! no window after that unless the ranking changes. The figures come from the written rows (the
//! collector feeds them back): a window's cost is its row's wall time above the median of the
//! unperturbed rows before it, and the estimate of the next is the most launches a recent
//! iteration made times the cost per launch measured so far.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::tally::RunTally;
use crate::error::{Error, Result};
use crate::ledger::schema::IterationRow;
use crate::ledger::stalls::{DutyCycleCost, RunStalls};

/// How duty-cycled PC sampling spends its budget (`PcSamplingSetup::duty_cycle`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DutyCycle {
    /// The most of the run's wall time the windows may take, as a fraction (0.01: 1 %).
    pub budget: f64,
    /// Samples each of the top kernels needs; windows stop once every one has them.
    pub target_samples: u64,
    /// The top kernels are the fewest, most device time first, that hold this share of the
    /// device time together (0.9: 90 %).
    pub coverage: f64,
    /// Iterations before the first window may open (warm-up).
    pub skip: u64,
    /// The run's length in iterations, when known: the budget is then a share of the whole
    /// run's expected wall time, so windows may open early; without it, of the time so far.
    pub expected_iterations: Option<u64>,
    /// What a window is taken to cost per kernel launch before one has been measured, ns.
    pub assumed_launch_cost_ns: u64,
}

impl Default for DutyCycle {
    /// 1 % of the run, until the kernels holding 90 % of the device time have 10 000 samples
    /// each, after 5 iterations of warm-up; 2.5 ms per launch until measured.
    fn default() -> Self {
        DutyCycle {
            budget: 0.01,
            target_samples: 10_000,
            coverage: 0.9,
            skip: 5,
            expected_iterations: None,
            assumed_launch_cost_ns: 2_500_000,
        }
    }
}

/// Unperturbed rows the scheduler waits for before the first window: their median is the
/// baseline a window's cost is measured against.
const BASELINE_ROWS: usize = 3;

impl DutyCycle {
    /// Refuses settings that cannot be honoured.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field and its range.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.budget > 0.0 && self.budget <= 1.0) {
            return Err(Error::Config(format!(
                "DutyCycle::budget is {}: it is a fraction of the run's wall time in (0, 1] \
                 (0.01 for 1 %)",
                self.budget
            )));
        }
        if !(self.coverage > 0.0 && self.coverage <= 1.0) {
            return Err(Error::Config(format!(
                "DutyCycle::coverage is {}: it is a share of the device time in (0, 1] (0.9 \
                 for the kernels holding 90 %)",
                self.coverage
            )));
        }
        if self.target_samples == 0 {
            return Err(Error::Config(
                "DutyCycle::target_samples is 0: ask for at least one sample per kernel".into(),
            ));
        }
        Ok(())
    }

    /// How the header states it.
    pub(crate) fn describe(&self) -> String {
        format!(
            "duty-cycled: windows of one iteration from iteration {}, at most {} % of the \
             run's wall time{}, until the kernels holding {} % of the device time have {} \
             samples each",
            self.skip,
            self.budget * 100.0,
            self.expected_iterations
                .map(|n| format!(" (of {n} iterations expected)"))
                .unwrap_or_default(),
            self.coverage * 100.0,
            self.target_samples
        )
    }
}

/// The scheduler's state: what the windows cost so far and which kernel comes next.
#[derive(Debug, Clone)]
pub(crate) struct DutyScheduler {
    cfg: DutyCycle,
    /// Iterations no window may take (the counters window).
    blocked: Option<Range<u64>>,
    /// Windows opened whose rows have not been written yet: their estimated cost.
    pending: BTreeMap<u64, u64>,
    opened: u64,
    measured: u64,
    cost_ns: u64,
    /// Kernel launches in the measured windows.
    window_launches: u64,
    /// The next kernel of the rotation, by name: the one after the last one targeted.
    last_target: Option<String>,
}

impl DutyScheduler {
    pub(crate) fn new(cfg: DutyCycle, blocked: Option<Range<u64>>) -> Self {
        DutyScheduler {
            cfg,
            blocked,
            pending: BTreeMap::new(),
            opened: 0,
            measured: 0,
            cost_ns: 0,
            window_launches: 0,
            last_target: None,
        }
    }

    /// Whether iteration `index` is a window, `elapsed_ns` into the run (host time since the
    /// start); when it is, the window is counted as pending until its row is written. Returns
    /// the kernel the window targets.
    pub(crate) fn decide(
        &mut self,
        index: u64,
        elapsed_ns: u64,
        tally: &RunTally,
    ) -> Option<String> {
        if index < self.cfg.skip
            || self.blocked.as_ref().is_some_and(|b| b.contains(&index))
            || !self.pending.is_empty()
        {
            return None;
        }
        let (wall, launches) = tally.baseline(BASELINE_ROWS)?;
        let estimate = launches.max(1).saturating_mul(self.per_launch_ns());
        let expected_total = self
            .cfg
            .expected_iterations
            .map_or(0, |n| n.saturating_mul(wall));
        let run = elapsed_ns
            .saturating_add(wall)
            .saturating_add(estimate)
            .max(expected_total);
        if (self.cost_ns.saturating_add(estimate)) as f64 > self.cfg.budget * run as f64 {
            return None;
        }
        let target = self.next_target(index, tally)?;
        self.pending.insert(index, estimate);
        self.opened += 1;
        self.last_target = Some(target.clone());
        Some(target)
    }

    /// The cost per launch measured so far, or the assumed one before any window.
    fn per_launch_ns(&self) -> u64 {
        self.cost_ns
            .checked_div(self.window_launches)
            .unwrap_or(self.cfg.assumed_launch_cost_ns)
    }

    /// The top kernel short of samples whose turn it is in the rotation (the one after the
    /// last one targeted, in ranking order), when it is expected to run in iteration `index`;
    /// `None` when every top kernel has its samples, or the one whose turn it is is not expected
    /// now: the window waits for an iteration that runs it, so that a kernel that runs only
    /// every so many iterations gets its windows too. A kernel that no longer runs where it is
    /// expected gets a window without its samples, and the turn passes on.
    fn next_target(&self, index: u64, tally: &RunTally) -> Option<String> {
        let top = tally.top();
        let short = |n: &String| tally.groups[n].samples < self.cfg.target_samples;
        let after = self
            .last_target
            .as_ref()
            .and_then(|t| top.iter().position(|n| n == t))
            .map_or(0, |i| i + 1);
        let n = top.len();
        let turn = (0..n).map(|k| &top[(after + k) % n]).find(|t| short(t))?;
        tally.groups[turn].expected_at(index).then(|| turn.clone())
    }

    /// Takes a written row (before the tally does): a window's row gives its measured cost
    /// against the baseline of the rows before it.
    pub(crate) fn observe(&mut self, row: &IterationRow, tally: &RunTally, device: u32) {
        if self.pending.remove(&row.index).is_none() {
            return;
        }
        let baseline = tally.baseline(1).map_or(0, |b| b.0);
        self.measured += 1;
        self.cost_ns = self
            .cost_ns
            .saturating_add(row.host_wall_ns.saturating_sub(baseline));
        self.window_launches += row
            .kernels
            .iter()
            .filter(|g| g.device_id == device)
            .map(|g| g.count)
            .sum::<u64>();
    }

    /// The windows' cost against the budget, for the trailer; `run_ns` is the run's wall time.
    pub(crate) fn cost(&self, run_ns: u64, tally: &RunTally) -> DutyCycleCost {
        let top = tally.top();
        DutyCycleCost {
            budget: self.cfg.budget,
            target_samples: self.cfg.target_samples,
            windows_opened: self.opened,
            windows_measured: self.measured,
            cost_ns: self.cost_ns,
            run_ns,
            covered: !top.is_empty()
                && top
                    .iter()
                    .all(|n| tally.groups[n].samples >= self.cfg.target_samples),
        }
    }
}

/// What the stepping thread and the collector share of a profiled run's PC sampling: the tally
/// of its rows and, when duty-cycled, the scheduler.
#[derive(Debug)]
pub(crate) struct Planner {
    device: u32,
    pub(crate) tally: RunTally,
    duty: Option<DutyScheduler>,
}

impl Planner {
    /// A planner for PC sampling on `device`: duty-cycled when `duty` is given.
    pub(crate) fn new(device: u32, duty: Option<(DutyCycle, Option<Range<u64>>)>) -> Self {
        let coverage = duty.as_ref().map_or(0.9, |d| d.0.coverage);
        Planner {
            device,
            tally: RunTally::new(device, coverage),
            duty: duty.map(|(cfg, blocked)| DutyScheduler::new(cfg, blocked)),
        }
    }

    /// Whether the windows are duty-cycled.
    pub(crate) fn is_duty_cycled(&self) -> bool {
        self.duty.is_some()
    }

    /// On the stepping thread: whether iteration `index` opens a duty-cycled window.
    pub(crate) fn open_at(&mut self, index: u64, elapsed_ns: u64) -> bool {
        match self.duty.as_mut() {
            Some(d) => d.decide(index, elapsed_ns, &self.tally).is_some(),
            None => false,
        }
    }

    /// On the collector: takes a written row.
    pub(crate) fn observe(&mut self, row: &IterationRow) {
        if let Some(d) = self.duty.as_mut() {
            d.observe(row, &self.tally, self.device);
        }
        self.tally.add(row);
    }

    /// The trailer's profile of the run, with the duty cycle's cost; `None` when no window was
    /// read and the windows were not duty-cycled. With it, the warning of a duty cycle that
    /// ended with top kernels short of their samples.
    pub(crate) fn trailer(&self, run_ns: u64) -> (Option<RunStalls>, Option<String>) {
        let run_ns = run_ns.max(self.tally.last_end_ns);
        let Some(duty) = self.duty.as_ref() else {
            return (self.tally.profile(), None);
        };
        let cost = duty.cost(run_ns, &self.tally);
        // A duty cycle that read no window says so: its budget did not fit one.
        let mut profile = self.tally.profile().unwrap_or_else(|| RunStalls {
            coverage: duty.cfg.coverage,
            ..RunStalls::default()
        });
        let short: Vec<&str> = self
            .tally
            .top()
            .iter()
            .filter(|n| self.tally.groups[*n].samples < duty.cfg.target_samples)
            .map(String::as_str)
            .collect();
        let warning = (!short.is_empty() || self.tally.top().is_empty()).then(|| {
            format!(
                "duty-cycled PC sampling ended with {} of the {} kernels that hold {} % of the \
                 device time short of {} samples{} after {} window(s) costing {:.2} % of the \
                 run: raise DutyCycle::budget, lower DutyCycle::target_samples, or run longer",
                short.len(),
                self.tally.top().len(),
                duty.cfg.coverage * 100.0,
                duty.cfg.target_samples,
                if short.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", short.join(", "))
                },
                cost.windows_opened,
                cost.cost_fraction() * 100.0
            )
        });
        profile.duty_cycle = Some(cost);
        (Some(profile), warning)
    }
}
