//! What a Range Profiler session collects and how: the metrics, the ranges, the replay, the L2's
//! state at each range's start, and the rules their combinations follow.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ledger::counters::{CacheState, RangeMode, ReplayMode};

/// What to collect and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterConfig {
    /// Metric names as ncu spells them, and/or preset names (`speed_of_light`, `memory`,
    /// `occupancy`, `compute`).
    pub metrics: Vec<String>,
    /// User ranges (scopes) or auto ranges (kernels).
    pub range_mode: RangeMode,
    /// User replay or kernel replay.
    pub replay_mode: ReplayMode,
    /// Most ranges one pass (and the counter-data image) holds; more are dropped and counted.
    pub max_ranges: usize,
    /// Nesting levels of user ranges to collect (1: top-level ranges only). Each level adds its
    /// own passes under user replay.
    pub nesting_levels: u16,
    /// Auto ranges only: record kernel names with a [`super::LaunchRecorder`] during the collection.
    /// It needs CUPTI's subscriber slot, so it must stay off inside a gpu-ledger `Profiler`,
    /// which names auto ranges from its own kernel records.
    pub record_kernel_names: bool,
    /// The L2's state at the start of each range: as the previous work left it (the default), or
    /// flushed first (user ranges with one nesting level; see [`CacheState`]).
    #[serde(default)]
    pub cache: CacheState,
}

impl Default for CounterConfig {
    fn default() -> Self {
        CounterConfig {
            metrics: vec!["speed_of_light".into()],
            range_mode: RangeMode::User,
            replay_mode: ReplayMode::User,
            max_ranges: 64,
            nesting_levels: 1,
            record_kernel_names: false,
            cache: CacheState::AsLeft,
        }
    }
}

impl CounterConfig {
    /// Checks the combination of settings (pure; metric names are checked against the chip by
    /// [`super::RangeProfiler::new`], or offline with [`super::metrics::resolve`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming the setting and the fix.
    pub fn validate(&self) -> Result<()> {
        if self.max_ranges == 0 {
            return Err(Error::Config(
                "counters: max_ranges must be at least 1".into(),
            ));
        }
        if self.nesting_levels == 0 {
            return Err(Error::Config(
                "counters: nesting_levels must be at least 1".into(),
            ));
        }
        if self.range_mode == RangeMode::Auto && self.nesting_levels != 1 {
            return Err(Error::Config(
                "counters: auto ranges have one nesting level; set nesting_levels to 1".into(),
            ));
        }
        if self.range_mode == RangeMode::User && self.replay_mode == ReplayMode::Kernel {
            return Err(Error::Config(
                "counters: kernel replay works per kernel, so it needs auto ranges; use \
                 ReplayMode::User with user ranges (the application's loop is the replay)"
                    .into(),
            ));
        }
        if self.cache == CacheState::Flushed && self.range_mode != RangeMode::User {
            return Err(Error::Config(
                "counters: CacheState::Flushed flushes the L2 before each user range; auto \
                 ranges start at each kernel, where no flush can run (and kernel replay \
                 restores memory between passes): use RangeMode::User with ReplayMode::User, \
                 one scope per kernel to compare, or CacheState::AsLeft"
                    .into(),
            ));
        }
        if self.cache == CacheState::Flushed && self.nesting_levels != 1 {
            return Err(Error::Config(
                "counters: CacheState::Flushed flushes before top-level ranges only, so a nested \
                 range would not start flushed; set nesting_levels to 1"
                    .into(),
            ));
        }
        if self.record_kernel_names && self.range_mode != RangeMode::Auto {
            return Err(Error::Config(
                "counters: record_kernel_names names auto ranges; user ranges are named by the \
                 caller"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Checks the settings for use inside a [`crate::Profiler`], whose timeline traces while
    /// counters are collected (pure).
    ///
    /// # Errors
    /// [`Error::Config`] for `smsp__sass_*` metrics with user replay: on the H200 with CUPTI
    /// 13.0 they read 0 under user replay while CUPTI activity tracing runs, and the right
    /// values under kernel replay or without tracing (docs/measurements.md).
    pub fn validate_with_timeline(&self) -> Result<()> {
        self.validate()?;
        let sass: Vec<&str> = self
            .metrics
            .iter()
            .flat_map(|m| match super::metrics::preset(m) {
                Some(p) => p.metrics.iter().map(|pm| pm.name).collect::<Vec<_>>(),
                None => vec![m.as_str()],
            })
            .filter(|m| m.starts_with("smsp__sass_"))
            .collect();
        if self.replay_mode == ReplayMode::User && !sass.is_empty() {
            return Err(Error::Config(format!(
                "counters: {} count(s) instructions by SASS instrumentation, which reads 0 under \
                 user replay while the timeline traces (measured on CUPTI 13.0); use \
                 RangeMode::Auto with ReplayMode::Kernel for them, or collect them with a \
                 standalone RangeProfiler outside a Profiler",
                sass.join(", ")
            )));
        }
        if self.record_kernel_names {
            return Err(Error::Config(
                "counters: record_kernel_names needs CUPTI's subscriber slot, which the \
                 profiler's timeline holds; leave it off (the profiler names auto ranges from \
                 its kernel records)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Application runs (passes of the caller's loop) one collection takes, given the number of
    /// config passes the metric set needs: 1 with kernel replay (CUPTI replays each kernel
    /// itself); `passes` for auto ranges with user replay; `passes × nesting_levels` for user
    /// ranges (each nesting level is collected in passes of its own). The pass loop itself
    /// follows CUPTI's `isAllPassSubmitted`.
    pub fn runs_per_collection(&self, passes: usize) -> usize {
        let passes = passes.max(1);
        match (self.range_mode, self.replay_mode) {
            (_, ReplayMode::Kernel) => 1,
            (RangeMode::Auto, ReplayMode::User) => passes,
            (RangeMode::User, ReplayMode::User) => passes * usize::from(self.nesting_levels),
        }
    }
}
