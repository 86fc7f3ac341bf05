//! Why two runs may not be comparable.
//!
//! A comparison is only as good as its control: the warnings name what differs between the runs
//! (GPU model and board, driver, CUDA, CUPTI, host; every other setting of the environment record
//! field by field, such as power limits, application clocks, persistence, ECC and MIG modes, CPU
//! governor and CUDA environment variables; profiling level; perturbed, incomplete or warm-up
//! iterations; dropped records; the medians of the per-iteration NVML SM and memory clocks, power
//! and temperature, and the throttle reasons seen) and when a check was impossible (NVML missing on
//! a side). States at start that vary from run to run (memory in use, clocks of an idle GPU) and
//! per-process fields (pid, start time, command line) are not compared.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{CompareOptions, RunSide};
use crate::analysis::series::{Budget, Series};
use crate::analysis::stats::FEW_ITERATIONS;
use gpu_ledger_format::schema::{Header, IterationRow};
use gpu_ledger_format::Environment;

/// `{what} differs: A {a}, B {b}` when the texts differ.
fn differ(what: &str, a: String, b: String, out: &mut Vec<String>) {
    if a != b {
        out.push(format!("{what} differs: A {a}, B {b}"));
    }
}

/// A value of the record as text, or `not recorded`.
fn shown<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "not recorded".into(), ToString::to_string)
}

/// A CUDA version number (`13000`) as CUDA writes it (`13.0`), or `not recorded`.
fn cuda_version(v: Option<u32>) -> String {
    v.map_or_else(
        || "not recorded".into(),
        |v| format!("{}.{}", v / 1000, (v % 1000) / 10),
    )
}

/// The GPUs of a run in one phrase: `2× NVIDIA H200 (sm_90, 132 SMs)`, models apart by `, `.
fn gpus_text(e: &Environment) -> String {
    let mut by: BTreeMap<(&str, [u32; 2], u32), usize> = BTreeMap::new();
    for g in &e.gpus {
        *by.entry((g.name.as_str(), g.compute_capability, g.sm_count))
            .or_default() += 1;
    }
    if by.is_empty() {
        return "no GPU recorded".into();
    }
    by.iter()
        .map(|((name, cc, sms), n)| format!("{n}× {name} (sm_{}{}, {sms} SMs)", cc[0], cc[1]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why two runs cannot be compared at all, each reason a sentence: different GPUs (a model, a
/// count: the work runs on other hardware or is split otherwise), or different profiling levels
/// (each level costs the application its own time, and counters perturb whole iterations), so
/// that a difference in time would be the setup's, not the change's.
pub(super) fn comparability(a: &Header, b: &Header) -> Vec<String> {
    let mut out = Vec::new();
    let (ga, gb) = (gpus_text(&a.environment), gpus_text(&b.environment));
    if ga != gb {
        out.push(format!(
            "A ran on {ga}, B on {gb}: the work runs on different GPUs, or is split over a \
             different number of them"
        ));
    }
    if a.config.level != b.config.level {
        out.push(format!(
            "A was profiled at level {}, B at level {}: each level adds its own cost to the \
             application's time (counters also replay whole iterations), so a difference would \
             be the profiler's; profile both at one level",
            a.config.level, b.config.level
        ));
    }
    out
}

/// Environment paths not compared field by field: compared on their own above, expected to differ
/// between two runs (process, start time, command line), or a state at start that varies from
/// run to run without being a setting (memory in use, clocks and temperature of an idle GPU).
/// `*` stands for any array index.
const ENV_NOT_DIFFED: &[&str] = &[
    "gpus",
    "driver_version",
    "cuda_driver_version",
    "cupti_api_version",
    "hostname",
    "command_line",
    "missing",
    "cupti_path",
    "pid",
    "start_unix_ns",
    "start_utc",
    "gpu_ledger_version",
    "nvml_version",
    "nvml_gpus[*].index",
    "nvml_gpus[*].uuid",
    "nvml_gpus[*].pci_bus_id",
    "nvml_gpus[*].numa_node",
    "nvml_gpus[*].memory_used_bytes",
    "nvml_gpus[*].pstate",
    "nvml_gpus[*].sm_clock_mhz",
    "nvml_gpus[*].mem_clock_mhz",
    "nvml_gpus[*].temperature_c",
    "nvml_gpus[*].power_mw",
    "nvml_gpus[*].throttle_reasons",
    "nvml_gpus[*].pcie_link_gen",
    "nvml_gpus[*].pcie_link_width",
    "host.virtualization_evidence",
];

/// Most environment differences listed one by one; the rest are counted.
const MAX_ENV_DIFFS: usize = 12;

/// Flattens a JSON value into `(path, leaf)` pairs: `host.cpu_model`, `nvml_gpus[0].name`.
fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, x, out);
            }
        }
        Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), v.clone());
        }
    }
}

/// `nvml_gpus[3].power_mw` -> `nvml_gpus[*].power_mw`.
fn generic_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[*");
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

fn env_path_ignored(path: &str) -> bool {
    let g = generic_path(path);
    ENV_NOT_DIFFED
        .iter()
        .any(|ig| g == *ig || g.starts_with(&format!("{ig}.")) || g.starts_with(&format!("{ig}[")))
}

/// What differs between the runs' environments and profiler settings, and what each ledger
/// warned of itself.
pub(super) fn environment_warnings(a: &Header, b: &Header, out: &mut Vec<String>) {
    let (ea, eb) = (&a.environment, &b.environment);
    gpu_warnings(ea, eb, out);
    differ(
        "driver version",
        shown(&ea.driver_version),
        shown(&eb.driver_version),
        out,
    );
    differ(
        "CUDA driver version",
        cuda_version(ea.cuda_driver_version),
        cuda_version(eb.cuda_driver_version),
        out,
    );
    differ(
        "CUPTI API version",
        shown(&ea.cupti_api_version),
        shown(&eb.cupti_api_version),
        out,
    );
    differ("host", shown(&ea.hostname), shown(&eb.hostname), out);
    setting_warnings(ea, eb, out);
    config_warnings(a, b, out);
    for (name, h) in [("A", a), ("B", b)] {
        for w in &h.warnings {
            out.push(format!("ledger {name} warns: {w}"));
        }
    }
}

/// Being the same models (different ones make the runs incomparable, [`comparability`]), the
/// GPUs are different boards (UUID), which can differ in clocks and thermals.
fn gpu_warnings(ea: &Environment, eb: &Environment, out: &mut Vec<String>) {
    if gpus_text(ea) != gpus_text(eb) {
        return;
    }
    let uuids = |e: &Environment| -> Vec<Option<String>> {
        e.gpus.iter().map(|g| g.uuid.clone()).collect()
    };
    let (ua, ub) = (uuids(ea), uuids(eb));
    if ua
        .iter()
        .zip(&ub)
        .any(|(x, y)| x.is_some() && y.is_some() && x != y)
    {
        let text = |u: &[Option<String>]| u.iter().map(shown).collect::<Vec<_>>().join(", ");
        out.push(format!(
            "different GPU boards of the same model (UUID): A {}, B {}",
            text(&ua),
            text(&ub)
        ));
    }
}

/// Every other setting, field by field: GPU settings at start (power limit, application clocks,
/// persistence, ECC, MIG, compute mode), the host (CPU, governor, NUMA, container), CUDA
/// environment variables, and fields the record gains later; the first [`MAX_ENV_DIFFS`] are
/// listed, the rest counted.
fn setting_warnings(ea: &Environment, eb: &Environment, out: &mut Vec<String>) {
    let (Ok(va), Ok(vb)) = (serde_json::to_value(ea), serde_json::to_value(eb)) else {
        return;
    };
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", &va, &mut fa);
    flatten("", &vb, &mut fb);
    let keys: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    // A GPU one run has and the other lacks is one reason not to compare them
    // ([`comparability`]), not a difference in each of its settings.
    let shared_gpus = ea.nvml_gpus.len().min(eb.nvml_gpus.len());
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| !env_path_ignored(k) && !beyond_shared_gpus(k, shared_gpus))
        .filter_map(|k| {
            let (x, y) = (
                fa.get(k).unwrap_or(&Value::Null),
                fb.get(k).unwrap_or(&Value::Null),
            );
            (x != y).then(|| format!("environment {k} differs: A {}, B {}", short(x), short(y)))
        })
        .collect();
    let n = diffs.len();
    out.extend(diffs.into_iter().take(MAX_ENV_DIFFS));
    if n > MAX_ENV_DIFFS {
        out.push(format!(
            "… and {} more environment differences",
            n - MAX_ENV_DIFFS
        ));
    }
}

/// Whether `path` is a setting of an NVML GPU at or past index `shared`, one run's only, or the
/// list of NVML GPUs itself when empty (NVML missing, which the ledger's own warning says).
fn beyond_shared_gpus(path: &str, shared: usize) -> bool {
    if path == "nvml_gpus" {
        return true;
    }
    path.strip_prefix("nvml_gpus[")
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(i, _)| i.parse::<usize>().ok())
        .is_some_and(|i| i >= shared)
}

/// The profiler's settings differ (counter iterations, NVML periods) or its version: each
/// changes what is measured or what it costs. A different level makes the runs incomparable
/// ([`comparability`]).
fn config_warnings(a: &Header, b: &Header, out: &mut Vec<String>) {
    differ(
        "counter iterations",
        shown(&a.config.counter_iterations),
        shown(&b.config.counter_iterations),
        out,
    );
    differ(
        "NVML sampling period (ms)",
        shown(&a.config.nvml_period_ms),
        shown(&b.config.nvml_period_ms),
        out,
    );
    differ(
        "NVML energy counter period (ms)",
        shown(&a.config.nvml_energy_period_ms),
        shown(&b.config.nvml_energy_period_ms),
        out,
    );
    differ(
        "gpu-ledger version",
        a.gpu_ledger_version.clone(),
        b.gpu_ledger_version.clone(),
        out,
    );
}

/// A setting as text: a string without its JSON quotes, `not recorded` for null, anything else
/// as JSON; cut to 80 characters.
fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => "not recorded".into(),
        v => v.to_string(),
    };
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

pub(super) fn selection_warnings(
    a: &RunSide,
    b: &RunSide,
    opts: &CompareOptions,
    out: &mut Vec<String>,
) {
    if a.perturbed.len() != b.perturbed.len() {
        let verb = if opts.filter.include_perturbed {
            "included"
        } else {
            "left out"
        };
        out.push(format!(
            "perturbation differs: A has {} perturbed iterations, B has {} ({verb})",
            a.perturbed.len(),
            b.perturbed.len()
        ));
    }
    for (name, s) in [("A", a), ("B", b)] {
        if opts.filter.include_perturbed && !s.perturbed.is_empty() {
            out.push(format!(
                "{name}: {} perturbed iterations are included in the timing",
                s.perturbed.len()
            ));
        }
        if !s.incomplete.is_empty() {
            out.push(format!(
                "{name}: {} incomplete iterations {}",
                s.incomplete.len(),
                if opts.filter.include_incomplete {
                    "are included"
                } else {
                    "were left out"
                }
            ));
        }
        if s.distribution.n < FEW_ITERATIONS {
            out.push(format!(
                "{name}: only {} iterations kept; the interval is unreliable",
                s.distribution.n
            ));
        }
    }
    if a.warmup.len() != b.warmup.len() {
        out.push(format!(
            "warm-up differs: {} iterations left out of A, {} of B",
            a.warmup.len(),
            b.warmup.len()
        ));
    }
}

/// The activity records the kept iterations of one side dropped or missed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RecordCounts {
    pub(super) dropped: u64,
    pub(super) missing: u64,
}

impl RecordCounts {
    pub(super) fn push(&mut self, r: &IterationRow) {
        self.dropped = self.dropped.saturating_add(r.dropped_records);
        self.missing = self.missing.saturating_add(r.missing_records);
    }
}

pub(super) fn record_warnings(name: &str, c: RecordCounts, out: &mut Vec<String>) {
    let RecordCounts { dropped, missing } = c;
    if dropped > 0 || missing > 0 {
        out.push(format!(
            "{name}: {dropped} dropped and {missing} missing activity records in the kept iterations"
        ));
    }
}

/// Operating point of one device over a run's kept iterations: medians of the per-iteration
/// NVML figures, and every throttle reason seen.
#[derive(Debug)]
struct OperatingPoint {
    figures: BTreeMap<&'static str, Series>,
    throttle: BTreeSet<String>,
    throttle_known: bool,
}

/// The operating point of each device, gathered one kept row at a time.
#[derive(Debug, Default)]
pub(super) struct OperatingPoints(BTreeMap<u32, OperatingPoint>, Budget);

impl OperatingPoints {
    /// Operating points whose figures' exact values count against `budget`.
    pub(super) fn with_budget(budget: Budget) -> Self {
        Self(BTreeMap::new(), budget)
    }

    pub(super) fn push(&mut self, r: &IterationRow) {
        let budget = &self.1;
        for n in &r.nvml {
            let op = self.0.entry(n.device_id).or_insert_with(|| OperatingPoint {
                figures: BTreeMap::new(),
                throttle: BTreeSet::new(),
                throttle_known: false,
            });
            let mut put = |name: &'static str, v: Option<f64>| {
                if let Some(v) = v.filter(|v| v.is_finite()) {
                    op.figures
                        .entry(name)
                        .or_insert_with(|| budget.series())
                        .push(v);
                }
            };
            put(
                "SM clock mean (MHz)",
                n.sm_clock.as_ref().map(|c| c.mean_mhz),
            );
            put(
                "memory clock mean (MHz)",
                n.mem_clock.as_ref().map(|c| c.mean_mhz),
            );
            put("power mean (W)", n.power.as_ref().map(|p| p.mean_w));
            put("temperature max (°C)", n.temperature_max_c.map(f64::from));
            if n.throttle_samples > 0 {
                op.throttle_known = true;
                op.throttle.extend(n.throttle_reasons.iter().cloned());
            }
        }
    }
}

/// Warnings when the NVML operating point (clocks, power, temperature, throttle reasons) of the
/// kept iterations differs, per device, by more than `tolerance` (relative, on medians), or could
/// not be compared.
pub(super) fn nvml_warnings(
    a: &OperatingPoints,
    b: &OperatingPoints,
    tolerance: f64,
    out: &mut Vec<String>,
) {
    let (pa, pb) = (&a.0, &b.0);
    match (pa.is_empty(), pb.is_empty()) {
        (true, true) => {
            out.push(
                "no NVML samples in either ledger: clocks and power could not be compared".into(),
            );
            return;
        }
        (true, false) | (false, true) => {
            let (has, lacks) = if pa.is_empty() {
                ("B", "A")
            } else {
                ("A", "B")
            };
            out.push(format!(
                "NVML was sampled in {has} only: clocks and power of {lacks} are unknown"
            ));
            return;
        }
        _ => {}
    }
    let devices: BTreeSet<u32> = pa.keys().chain(pb.keys()).copied().collect();
    for dev in devices {
        let (Some(x), Some(y)) = (pa.get(&dev), pb.get(&dev)) else {
            out.push(format!(
                "NVML samples of device {dev} are in one ledger only"
            ));
            continue;
        };
        let names: BTreeSet<&&str> = x.figures.keys().chain(y.figures.keys()).collect();
        for name in names {
            let (Some(va), Some(vb)) = (x.figures.get(*name), y.figures.get(*name)) else {
                out.push(format!(
                    "NVML {name} of device {dev} is recorded in one ledger only"
                ));
                continue;
            };
            let (Some(ma), Some(mb)) = (va.median(), vb.median()) else {
                continue;
            };
            let scale = ma.abs().max(mb.abs());
            if scale > 0.0 && (ma - mb).abs() / scale > tolerance {
                let pct = if ma != 0.0 {
                    format!(" ({:+.1}%)", (mb - ma) / ma.abs() * 100.0)
                } else {
                    String::new()
                };
                out.push(format!(
                    "NVML {name} of device {dev} differs: median A {ma:.1}, B {mb:.1}{pct}"
                ));
            }
        }
        if x.throttle_known && y.throttle_known && x.throttle != y.throttle {
            let only_a: Vec<&String> = x.throttle.difference(&y.throttle).collect();
            let only_b: Vec<&String> = y.throttle.difference(&x.throttle).collect();
            let list = |v: &[&String]| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                }
            };
            out.push(format!(
                "throttle reasons of device {dev} differ: only in A {}, only in B {}",
                list(&only_a),
                list(&only_b)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn environment_paths() {
        let mut m = BTreeMap::new();
        flatten(
            "",
            &json!({"a": {"b": 1, "c": [1, 2]}, "g": [{"x": 1}, {"x": 2}]}),
            &mut m,
        );
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a.b", "a.c", "g[0].x", "g[1].x"]);
        assert_eq!(
            generic_path("nvml_gpus[12].power_mw"),
            "nvml_gpus[*].power_mw"
        );
        assert!(env_path_ignored("nvml_gpus[3].power_mw"));
        assert!(env_path_ignored("command_line"));
        assert!(env_path_ignored("host.virtualization_evidence"));
        assert!(!env_path_ignored("nvml_gpus[3].power_limit_mw"));
        assert!(!env_path_ignored("host.cpu_governor"));
        assert!(!env_path_ignored("cuda_env.CUDA_LAUNCH_BLOCKING"));
    }
}
