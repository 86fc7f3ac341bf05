//! Warp stall reasons of an iteration, from PC sampling: per sampled function, per scope, and
//! the source lines where the samples fall.
//!
//! Every 2^n cycles each SM's sampler records one warp's PC and the reason it did not issue
//! (`selected` when it issued). A reason's share of a function's samples is the share of its
//! warps' time in that state, the distribution Nsight Compute's warp state statistics show.
//! Reason keys are Nsight Compute's (`long_scoreboard`, `barrier`, `math_pipe_throttle`, ...).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// PC samples of one iteration, when PC sampling ran in it (the row is then `perturbed`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IterationStalls {
    /// Samples CUPTI counted in the iteration, dropped and non-user ones included.
    pub total_samples: u64,
    /// Samples the hardware dropped (its buffer full, or back-pressure): lost, and counted.
    pub dropped_samples: u64,
    /// Samples in the driver's own kernels, for which CUPTI gives no PC.
    #[serde(default)]
    pub non_user_samples: u64,
    /// Whether the hardware buffer filled during the iteration.
    #[serde(default)]
    pub hardware_buffer_full: bool,
    /// Per sampled function (a kernel, or a device function it calls), most samples first.
    #[serde(default)]
    pub kernels: Vec<KernelStalls>,
    /// Per scope path: the samples of the kernels the scope launched in this iteration.
    #[serde(default)]
    pub scopes: Vec<ScopeStalls>,
    /// Samples of functions no kernel record of the iteration names (device functions that are
    /// not inlined, or kernels launched outside the traced calls): in `kernels`, in no scope.
    #[serde(default)]
    pub unattributed_samples: u64,
    /// Why sampling failed in this iteration, when it did (then the counts are what was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl IterationStalls {
    /// Samples with a PC (the user kernels' samples the reasons and lines are made of).
    pub fn sampled(&self) -> u64 {
        crate::saturating_sum(self.kernels.iter().map(|k| k.samples))
    }
}

/// The samples of one function in an iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelStalls {
    /// The function's name as the module spells it (mangled for C++), as kernel groups name
    /// kernels.
    pub name: String,
    /// Its samples, over every reason.
    pub samples: u64,
    /// Samples by stall reason key; they add up to `samples`.
    pub by_reason: BTreeMap<String, u64>,
    /// Its source lines with the most samples, most first; PCs the cubin has no line for are
    /// summed under an empty file name. Empty when its cubin was not captured.
    #[serde(default)]
    pub lines: Vec<LineStalls>,
    /// Whether the function's cubin was at hand, so that its PCs could be given lines.
    #[serde(default)]
    pub cubin: bool,
}

/// One source line's samples.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineStalls {
    /// The file as the cubin's line table names it (with its directory when it has one).
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// Samples at the line's PCs.
    pub samples: u64,
    /// By stall reason key.
    pub by_reason: BTreeMap<String, u64>,
    /// The line's text, when the file was readable where the run ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The samples of the kernels one scope launched in an iteration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeStalls {
    /// Scope path (`step/backward`), `(unscoped)` included.
    pub scope: String,
    /// Samples of its kernels.
    pub samples: u64,
    /// By stall reason key; they add up to `samples`.
    pub by_reason: BTreeMap<String, u64>,
    /// The sampled functions it launched, most samples first.
    pub kernels: Vec<String>,
    /// True when a kernel of the same name ran in other scopes of the iteration too: samples
    /// carry no launch, so that kernel's samples were shared out in proportion to its GPU time
    /// in each scope (an estimate, where the launches stall alike).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_by_time: bool,
}

/// PC samples summed over a run's sampled iterations (its windows), per kernel and per scope,
/// with how many windows and samples back each profile: the trailer's view of what PC sampling
/// found over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStalls {
    /// Sampled iterations whose samples were read (windows).
    pub windows: u64,
    /// Samples with a PC over those windows.
    pub samples: u64,
    /// Samples the hardware dropped over those windows.
    pub dropped_samples: u64,
    /// Samples of functions no kernel record of their iteration named: in no scope.
    pub unattributed_samples: u64,
    /// The share of all kernels' device time that the kernels flagged `top` hold together: the
    /// top kernels are the fewest, most device time first, that reach it.
    pub coverage: f64,
    /// Per kernel, by function name (a sample names a function, not a launch shape): those with
    /// samples or among the top ones, most device time first.
    pub kernels: Vec<KernelProfile>,
    /// Kernels left out of `kernels` past its bound (the least device time).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kernels_left_out: u64,
    /// Per scope path, most samples first.
    pub scopes: Vec<ScopeProfile>,
    /// Scopes left out of `scopes` past its bound (the fewest samples).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scopes_left_out: u64,
    /// What the windows cost against the budget, when they were duty-cycled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duty_cycle: Option<DutyCycleCost>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One kernel's samples over the run's windows, beside the device time that ranks it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelProfile {
    /// The function's name as the module spells it (mangled for C++).
    pub name: String,
    /// Device time of its launches on the sampled GPU over the rows not perturbed, ns.
    pub device_ns: u64,
    /// Its share of the device time of every kernel over those rows (0..1).
    pub device_share: f64,
    /// Among the kernels that hold `RunStalls::coverage` of the device time together.
    pub top: bool,
    /// Windows it had samples in.
    pub windows: u64,
    /// Its samples over those windows.
    pub samples: u64,
    /// By stall reason key; they add up to `samples`.
    pub by_reason: BTreeMap<String, u64>,
}

/// One scope path's samples over the run's windows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeProfile {
    /// Scope path (`step/backward`), `(unscoped)` included.
    pub scope: String,
    /// Windows it had samples in.
    pub windows: u64,
    /// Samples of its kernels over those windows.
    pub samples: u64,
    /// By stall reason key; they add up to `samples`.
    pub by_reason: BTreeMap<String, u64>,
}

/// A duty-cycled run's windows against the cost it was allowed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DutyCycleCost {
    /// The most of the run's wall time the windows were allowed, as a fraction (0.01: 1 %).
    pub budget: f64,
    /// Samples each top kernel was to reach.
    pub target_samples: u64,
    /// Windows opened.
    pub windows_opened: u64,
    /// Windows whose rows were written, so that their cost was measured.
    pub windows_measured: u64,
    /// Their cost: each window's wall time above the median wall time of the unperturbed
    /// iterations before it, summed, ns.
    pub cost_ns: u64,
    /// The run's wall time, from the profiler's start to the last row's end, ns.
    pub run_ns: u64,
    /// Whether every top kernel reached `target_samples`.
    pub covered: bool,
}

impl DutyCycleCost {
    /// The measured cost as a fraction of the run's wall time.
    pub fn cost_fraction(&self) -> f64 {
        self.cost_ns as f64 / self.run_ns.max(1) as f64
    }
}

/// Each reason's share of a count map, largest first (ties by key).
pub fn reason_shares(counts: &BTreeMap<String, u64>) -> Vec<(String, f64)> {
    let total: u64 = counts.values().sum();
    let mut v: Vec<(String, f64)> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (k.clone(), *n as f64 / total.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// The label Nsight Compute's warp state statistics give a key (`Stall Long Scoreboard`);
/// an unknown key is shown as it is.
pub fn label(key: &str) -> String {
    let known = match key {
        "selected" => "Selected",
        "not_selected" => "Stall Not Selected",
        "long_scoreboard" => "Stall Long Scoreboard",
        "short_scoreboard" => "Stall Short Scoreboard",
        "wait" => "Stall Wait",
        "barrier" => "Stall Barrier",
        "membar" => "Stall Membar",
        "mio_throttle" => "Stall MIO Throttle",
        "lg_throttle" => "Stall LG Throttle",
        "tex_throttle" => "Stall Tex Throttle",
        "math_pipe_throttle" => "Stall Math Pipe Throttle",
        "dispatch_stall" => "Stall Dispatch Stall",
        "drain" => "Stall Drain",
        "imc_miss" => "Stall IMC Miss",
        "branch_resolving" => "Stall Branch Resolving",
        "no_instructions" => "Stall No Instruction",
        "sleeping" => "Stall Sleeping",
        "misc" => "Stall Misc",
        "gmma" => "Stall GMMA",
        _ => return key.to_string(),
    };
    known.to_string()
}

/// Keys that wait on memory through L1TEX (global, local, texture) or its queues.
pub fn is_memory(key: &str) -> bool {
    matches!(
        key,
        "long_scoreboard" | "lg_throttle" | "tex_throttle" | "drain" | "membar"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_row_without_stalls_fields_reads_with_defaults() {
        let s: IterationStalls =
            serde_json::from_str(r#"{"total_samples": 10, "dropped_samples": 2}"#).unwrap();
        assert_eq!(s.dropped_samples, 2);
        assert!(s.kernels.is_empty() && s.error.is_none());
    }

    #[test]
    fn shares_are_largest_first_and_sum_to_one() {
        let c: BTreeMap<String, u64> = [("a".into(), 1), ("b".into(), 3), ("z".into(), 0)].into();
        let s = reason_shares(&c);
        assert_eq!(s[0].0, "b");
        assert_eq!(s.len(), 2);
        assert!((s.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
