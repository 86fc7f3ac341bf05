//! Metric names (exactly as Nsight Compute spells them), the presets, and validation of a
//! requested list before anything runs: an unknown name is rejected with the nearest valid names.
//!
//! Validation runs against a [`MetricCatalog`]: on a GPU the chip's own list
//! ([`super::ChipCatalog`], from the Profiler Host API), offline the preset names
//! ([`NameList::presets`]).

use super::error::UNKNOWN_METRIC_PREFIX;
use crate::error::{Error, Result};
use crate::ledger::counters::DroppedMetric;

/// The metric names the presets and the derived figures use.
pub mod names {
    /// Bytes read from DRAM.
    pub const DRAM_BYTES_READ: &str = "dram__bytes_read.sum";
    /// Bytes written to DRAM.
    pub const DRAM_BYTES_WRITE: &str = "dram__bytes_write.sum";
    /// DRAM throughput, % of the sustained peak over the elapsed time.
    pub const DRAM_THROUGHPUT_PCT: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
    /// Kernel (range) GPU duration, ns.
    pub const GPU_TIME: &str = "gpu__time_duration.sum";
    /// SM throughput ("Compute (SM) Throughput" of the speed-of-light section), % of peak.
    pub const SM_THROUGHPUT_PCT: &str = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
    /// Memory throughput ("Memory Throughput" of the speed-of-light section), % of peak.
    pub const MEMORY_THROUGHPUT_PCT: &str =
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
    /// L1TEX sectors for global loads.
    pub const GLOBAL_LD_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum";
    /// L1TEX requests for global loads.
    pub const GLOBAL_LD_REQUESTS: &str = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum";
    /// L1TEX sectors for global stores.
    pub const GLOBAL_ST_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum";
    /// L1TEX requests for global stores.
    pub const GLOBAL_ST_REQUESTS: &str = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum";
    /// Shared-memory load bank conflicts.
    pub const SHARED_LD_BANK_CONFLICTS: &str =
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum";
    /// Shared-memory store bank conflicts.
    pub const SHARED_ST_BANK_CONFLICTS: &str =
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum";
    /// Shared-memory load wavefronts.
    pub const SHARED_LD_WAVEFRONTS: &str = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum";
    /// Shared-memory store wavefronts.
    pub const SHARED_ST_WAVEFRONTS: &str = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum";
    /// L1TEX sectors for local-memory loads (spills).
    pub const LOCAL_LD_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum";
    /// L1TEX sectors for local-memory stores (spills).
    pub const LOCAL_ST_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum";
    /// FP32 add thread instructions (predicated on).
    pub const FADD: &str = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum";
    /// FP32 multiply thread instructions.
    pub const FMUL: &str = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum";
    /// FP32 fused multiply-add thread instructions (2 FLOPs each).
    pub const FFMA: &str = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum";
    /// FP16 add thread instructions.
    pub const HADD: &str = "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum";
    /// FP16 multiply thread instructions.
    pub const HMUL: &str = "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum";
    /// FP16 fused multiply-add thread instructions (2 FLOPs each).
    pub const HFMA: &str = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum";
    /// FP64 add thread instructions.
    pub const DADD: &str = "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum";
    /// FP64 multiply thread instructions.
    pub const DMUL: &str = "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum";
    /// FP64 fused multiply-add thread instructions (2 FLOPs each).
    pub const DFMA: &str = "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum";
}

/// One metric of a preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricSpec {
    /// The name, as ncu spells it.
    pub name: &'static str,
    /// Required metrics must exist on the chip; optional ones (architecture-specific names) are
    /// left out, and reported, where the chip lacks them.
    pub required: bool,
    /// What it measures.
    pub what: &'static str,
}

const fn req(name: &'static str, what: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        required: true,
        what,
    }
}

const fn opt(name: &'static str, what: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        required: false,
        what,
    }
}

/// A named set of metrics, requested by its name in [`super::CounterConfig::metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name to request it by.
    pub name: &'static str,
    /// One line on what it answers.
    pub purpose: &'static str,
    /// Its metrics.
    pub metrics: &'static [MetricSpec],
}

use names::*;

/// Speed of light: compute and memory throughput against peak, duration, DRAM bytes.
pub const SPEED_OF_LIGHT: Preset = Preset {
    name: "speed_of_light",
    purpose: "how close the range runs to the compute and memory peaks (the first pass: memory, compute, both or latency bound)",
    metrics: &[
        req(SM_THROUGHPUT_PCT, "SM (compute) throughput, % of peak"),
        req(MEMORY_THROUGHPUT_PCT, "memory throughput, % of peak"),
        req(GPU_TIME, "GPU duration, ns"),
        req(DRAM_BYTES_READ, "bytes read from DRAM"),
        req(DRAM_BYTES_WRITE, "bytes written to DRAM"),
        req(DRAM_THROUGHPUT_PCT, "DRAM throughput, % of peak"),
    ],
};

/// Memory: L1/L2 sectors and requests (sector efficiency), shared-memory bank conflicts and
/// wavefronts, local-memory (spill) traffic.
pub const MEMORY: Preset = Preset {
    name: "memory",
    purpose: "coalescing, bank conflicts and spills",
    metrics: &[
        req(GLOBAL_LD_SECTORS, "L1 sectors, global loads"),
        req(GLOBAL_LD_REQUESTS, "L1 requests, global loads"),
        req(GLOBAL_ST_SECTORS, "L1 sectors, global stores"),
        req(GLOBAL_ST_REQUESTS, "L1 requests, global stores"),
        opt(
            "lts__t_sectors_srcunit_tex_op_read.sum",
            "L2 sectors read by L1",
        ),
        opt(
            "lts__t_sectors_srcunit_tex_op_write.sum",
            "L2 sectors written by L1",
        ),
        opt("lts__t_sector_hit_rate.pct", "L2 sector hit rate, %"),
        req(
            SHARED_LD_BANK_CONFLICTS,
            "shared-memory load bank conflicts",
        ),
        req(
            SHARED_ST_BANK_CONFLICTS,
            "shared-memory store bank conflicts",
        ),
        req(SHARED_LD_WAVEFRONTS, "shared-memory load wavefronts"),
        req(SHARED_ST_WAVEFRONTS, "shared-memory store wavefronts"),
        req(LOCAL_LD_SECTORS, "L1 sectors, local loads (spills)"),
        req(LOCAL_ST_SECTORS, "L1 sectors, local stores (spills)"),
        req(DRAM_BYTES_READ, "bytes read from DRAM"),
        req(DRAM_BYTES_WRITE, "bytes written to DRAM"),
    ],
};

/// Occupancy and issue: achieved warps, issue-slot use, eligible warps, warp stall reasons.
pub const OCCUPANCY: Preset = Preset {
    name: "occupancy",
    purpose: "achieved occupancy, scheduler issue and stall reasons",
    metrics: &[
        req(
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            "achieved occupancy, % of the warp slots",
        ),
        req(
            "sm__inst_issued.avg.pct_of_peak_sustained_active",
            "issue slots busy, %",
        ),
        opt(
            "smsp__issue_active.avg.pct_of_peak_sustained_active",
            "cycles with an instruction issued, %",
        ),
        opt(
            "smsp__warps_eligible.avg.per_cycle_active",
            "eligible warps per scheduler per cycle",
        ),
        opt(
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
            "stall: long scoreboard (L1TEX: global, local, texture)",
        ),
        opt(
            "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
            "stall: short scoreboard (MIO: shared memory, special functions)",
        ),
        opt(
            "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
            "stall: MIO throttle",
        ),
        opt(
            "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
            "stall: LG (local/global) throttle",
        ),
        opt(
            "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
            "stall: barrier",
        ),
        opt(
            "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
            "stall: math pipe throttle",
        ),
        opt(
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
            "stall: wait (fixed latency)",
        ),
        opt(
            "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
            "stall: not selected (eligible, another warp issued)",
        ),
    ],
};

/// Compute: instructions by pipe (tensor pipes included where the chip has the names) and the
/// FP32/FP16/FP64 operation counts FLOPs are computed from.
pub const COMPUTE: Preset = Preset {
    name: "compute",
    purpose: "instruction mix by pipe and FLOP counts",
    metrics: &[
        req("smsp__inst_executed.sum", "warp instructions executed"),
        req(
            "sm__inst_executed_pipe_fma.sum",
            "warp instructions, FMA pipe",
        ),
        req(
            "sm__inst_executed_pipe_alu.sum",
            "warp instructions, ALU pipe",
        ),
        req(
            "sm__inst_executed_pipe_lsu.sum",
            "warp instructions, LSU pipe",
        ),
        opt(
            "sm__inst_executed_pipe_fp16.sum",
            "warp instructions, FP16 pipe",
        ),
        opt(
            "sm__inst_executed_pipe_fp64.sum",
            "warp instructions, FP64 pipe",
        ),
        opt(
            "sm__inst_executed_pipe_tensor.sum",
            "warp instructions, tensor pipe (pre-Hopper name)",
        ),
        opt(
            "sm__inst_executed_pipe_tensor_op_hmma.sum",
            "warp instructions, tensor pipe HMMA",
        ),
        opt(
            "sm__inst_executed_pipe_tensor_op_gmma.sum",
            "warp instructions, tensor pipe GMMA (Hopper wgmma)",
        ),
        opt(
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
            "tensor pipe active, % of peak",
        ),
        req(FADD, "FP32 adds (1 FLOP)"),
        req(FMUL, "FP32 multiplies (1 FLOP)"),
        req(FFMA, "FP32 FMAs (2 FLOPs)"),
        req(HADD, "FP16 adds"),
        req(HMUL, "FP16 multiplies"),
        req(HFMA, "FP16 FMAs"),
        opt(DADD, "FP64 adds"),
        opt(DMUL, "FP64 multiplies"),
        opt(DFMA, "FP64 FMAs"),
    ],
};

/// Every preset.
pub const PRESETS: [&Preset; 4] = [&SPEED_OF_LIGHT, &MEMORY, &OCCUPANCY, &COMPUTE];

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().copied().find(|p| p.name == name)
}

/// The set of valid metric names metric lists are checked against.
pub trait MetricCatalog {
    /// True when `name` (a full name such as `dram__bytes_read.sum`) can be collected.
    fn contains(&self, name: &str) -> bool;
    /// Up to `n` valid names nearest to `name`, nearest first.
    fn suggest(&self, name: &str, n: usize) -> Vec<String>;
}

/// A catalog that is a plain list of full names (offline validation, tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameList {
    names: Vec<String>,
}

impl NameList {
    /// The given names.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        NameList { names }
    }

    /// Every metric of every preset.
    pub fn presets() -> Self {
        NameList::new(
            PRESETS
                .iter()
                .flat_map(|p| p.metrics.iter().map(|m| m.name)),
        )
    }

    /// The names.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl MetricCatalog for NameList {
    fn contains(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
    }

    fn suggest(&self, name: &str, n: usize) -> Vec<String> {
        nearest_metric(name, self.names.iter().map(String::as_str), n)
    }
}

/// Levenshtein edit distance between two names (bytes: metric names are ASCII).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0usize; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The `n` candidates nearest to `name` by edit distance (ties by name), nearest first.
pub fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> = candidates.map(|c| (edit_distance(name, c), c)).collect();
    scored.sort_unstable();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(n)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// The `n` metric names nearest to `name`, comparing base names first (`dram__bytes_reed.sum`
/// is nearest to `dram__bytes_read.*`, `sm__throughput` to `sm__throughput.*`), then whole
/// names; nearest first.
pub fn nearest_metric<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let (base, _) = split_metric(name);
    let mut scored: Vec<(usize, usize, &str)> = candidates
        .map(|c| {
            let (cb, _) = split_metric(c);
            (edit_distance(base, cb), edit_distance(name, c), c)
        })
        .collect();
    scored.sort_unstable();
    scored.dedup_by(|a, b| a.2 == b.2);
    scored
        .into_iter()
        .take(n)
        .map(|(_, _, c)| c.to_string())
        .collect()
}

/// Splits a full metric name into its base (`dram__bytes_read`) and the rest (`sum`), at the
/// first dot.
pub fn split_metric(name: &str) -> (&str, Option<&str>) {
    match name.split_once('.') {
        Some((base, rest)) => (base, Some(rest)),
        None => (name, None),
    }
}

/// A validated metric list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The metrics to collect, presets expanded, duplicates removed, in request order.
    pub metrics: Vec<String>,
    /// Optional preset metrics the chip lacks.
    pub dropped: Vec<DroppedMetric>,
}

/// Expands presets (an entry equal to a preset name, e.g. `"memory"`) and checks every name
/// against `catalog` before anything runs.
///
/// # Errors
/// [`Error::Config`] starting with [`UNKNOWN_METRIC_PREFIX`] that lists each unknown name with
/// the nearest valid names; also for an empty list.
pub fn resolve(requested: &[String], catalog: &dyn MetricCatalog) -> Result<Resolved> {
    let mut out = Resolved::default();
    let mut unknown: Vec<String> = Vec::new();
    let add = |name: &str, out: &mut Resolved| {
        if !out.metrics.iter().any(|m| m == name) {
            out.metrics.push(name.to_string());
        }
    };
    for entry in requested {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        if let Some(p) = preset(entry) {
            for m in p.metrics {
                if catalog.contains(m.name) {
                    add(m.name, &mut out);
                } else if m.required {
                    unknown.push(describe_unknown(m.name, Some(p.name), catalog));
                } else {
                    out.dropped.push(DroppedMetric {
                        name: m.name.to_string(),
                        preset: p.name.to_string(),
                        reason: "not a metric of this GPU".into(),
                    });
                }
            }
        } else if catalog.contains(entry) {
            add(entry, &mut out);
        } else {
            unknown.push(describe_unknown(entry, None, catalog));
        }
    }
    if !unknown.is_empty() {
        return Err(unknown_metrics_error(&unknown));
    }
    if out.metrics.is_empty() {
        return Err(Error::Config(format!(
            "{UNKNOWN_METRIC_PREFIX} list is empty: name metrics as ncu does or a preset ({})",
            PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(out)
}

/// The error for names the chip refused: each with its nearest valid names.
pub(crate) fn refused_metrics_error(names: &[&str], catalog: &dyn MetricCatalog) -> Error {
    let described: Vec<String> = names
        .iter()
        .map(|n| describe_unknown(n, None, catalog))
        .collect();
    unknown_metrics_error(&described)
}

fn unknown_metrics_error(described: &[String]) -> Error {
    Error::Config(format!(
        "{UNKNOWN_METRIC_PREFIX} name(s), nothing was collected:\n{}\n(presets: {})",
        described.join("\n"),
        PRESETS
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn describe_unknown(name: &str, preset: Option<&str>, catalog: &dyn MetricCatalog) -> String {
    let near = catalog.suggest(name, 3);
    let from = preset.map_or(String::new(), |p| format!(" (from preset {p})"));
    if near.is_empty() {
        format!("  `{name}`{from}: not a metric of this GPU")
    } else {
        format!(
            "  `{name}`{from}: not a metric of this GPU; nearest: {}",
            near.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_basics() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
