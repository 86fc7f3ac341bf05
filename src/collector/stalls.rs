//! A sampled iteration's PC samples in its row: per function, with its hottest source lines,
//! and per scope through the iteration's kernel records.
//!
//! A PC sample names a function, not a launch. The samples of a function go to the scope that
//! launched the kernel of that name in the iteration; a kernel launched in several scopes has
//! its samples shared out in proportion to its GPU time in each (the scope says so).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use super::attribution::{Activity, Placed};
use crate::ledger::schema::IterationRow;
use crate::ledger::stalls::{IterationStalls, KernelStalls, LineStalls, RunStalls, ScopeStalls};
use crate::pcsampling::window::{CollectorSide, Planner, SampledIteration};
use crate::pcsampling::{Sources, StallProfile};
use crate::run::PathTable;

/// The sources PCs are mapped through, kept from row to row, and the planner that tallies the
/// written rows (and with a duty cycle opens windows from them).
pub(super) struct StallRows {
    sources: Sources,
    lines_per_kernel: usize,
    planner: Arc<Mutex<Planner>>,
}

impl StallRows {
    pub(super) fn new(side: CollectorSide) -> Self {
        StallRows {
            sources: side.sources,
            lines_per_kernel: side.lines_per_kernel,
            planner: side.planner,
        }
    }

    /// Hands a written row to the planner.
    pub(super) fn observe(&self, row: &IterationRow) {
        self.planner.lock().observe(row);
    }

    /// The run's profile over its windows for the trailer, and a warning when a duty cycle
    /// left top kernels short of samples; `run_ns` is its wall time.
    pub(super) fn trailer(&self, run_ns: u64) -> (Option<RunStalls>, Option<String>) {
        self.planner.lock().trailer(run_ns)
    }

    /// The row's stalls for `sampled`, warnings for what was lost added to `warnings`.
    pub(super) fn build(
        &mut self,
        sampled: SampledIteration,
        placed: &[Placed],
        paths: &PathTable,
        warnings: &mut Vec<String>,
    ) -> IterationStalls {
        let (cubins, skipped) = crate::cupti::pc_sampling::take_loaded_cubins();
        for cubin in cubins {
            // A module CUPTI cannot take a CRC of has no lines: its PCs say so (`cubin: false`).
            let _ = self.sources.add_cubin(cubin);
        }
        if skipped > 0 {
            warnings.push(format!(
                "PC sampling: {skipped} loaded module(s) were not kept for source lines (more \
                 than 512 MiB of cubins loaded between two sampled iterations): their PCs have \
                 no line"
            ));
        }
        let profile = match sampled {
            Ok(raw) => raw.profile(),
            Err(e) => {
                warnings.push(e.clone());
                return IterationStalls {
                    error: Some(e),
                    ..IterationStalls::default()
                };
            }
        };
        if profile.dropped_samples > 0 || profile.hardware_buffer_full {
            warnings.push(format!(
                "PC sampling dropped {} of {} samples in this iteration{}: raise \
                 PcSamplingConfig::hardware_buffer_bytes or the period",
                profile.dropped_samples,
                profile.total_samples,
                if profile.hardware_buffer_full {
                    " (the hardware buffer filled)"
                } else {
                    ""
                }
            ));
        }
        let kernels = self.kernels(&profile);
        let (scopes, unattributed) = scopes_of(&kernels, placed, paths);
        IterationStalls {
            total_samples: profile.total_samples,
            dropped_samples: profile.dropped_samples,
            non_user_samples: profile.non_user_samples,
            hardware_buffer_full: profile.hardware_buffer_full,
            kernels,
            scopes,
            unattributed_samples: unattributed,
            error: None,
        }
    }

    fn kernels(&self, profile: &StallProfile) -> Vec<KernelStalls> {
        let mut kernels: Vec<KernelStalls> = profile
            .functions
            .iter()
            .map(|f| {
                let cubin = f.pcs.iter().any(|pc| self.sources.has_cubin(pc.cubin_crc));
                let lines = if cubin {
                    profile
                        .hottest_lines(&f.function, &self.sources, self.lines_per_kernel)
                        .into_iter()
                        .map(|l| LineStalls {
                            file: l.file,
                            line: l.line,
                            samples: l.samples,
                            by_reason: l.by_reason,
                            text: l.text,
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                KernelStalls {
                    name: f.function.clone(),
                    samples: f.samples(),
                    by_reason: f.by_reason.clone(),
                    lines,
                    cubin,
                }
            })
            .collect();
        kernels.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
        kernels
    }
}

/// Each scope's samples, from the scopes that launched each sampled function in the iteration,
/// and the samples of functions no kernel record names.
pub(super) fn scopes_of(
    kernels: &[KernelStalls],
    placed: &[Placed],
    paths: &PathTable,
) -> (Vec<ScopeStalls>, u64) {
    // GPU time of each kernel name in each scope.
    let mut time: HashMap<&str, BTreeMap<u32, u64>> = HashMap::default();
    for p in placed {
        if let Activity::Kernel(k) = &p.activity {
            *time
                .entry(k.name)
                .or_default()
                .entry(p.path_id)
                .or_default() += k.end.saturating_sub(k.start).max(1);
        }
    }
    let mut scopes: BTreeMap<u32, ScopeStalls> = BTreeMap::new();
    let mut unattributed = 0;
    for k in kernels {
        let Some(by_scope) = time.get(k.name.as_str()) else {
            unattributed += k.samples;
            continue;
        };
        let weights: Vec<u64> = by_scope.values().copied().collect();
        let split = by_scope.len() > 1;
        let mut shares: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); by_scope.len()];
        for (reason, n) in &k.by_reason {
            for (i, part) in apportion(*n, &weights).into_iter().enumerate() {
                if part > 0 {
                    shares[i].insert(reason.clone(), part);
                }
            }
        }
        for ((path_id, _), share) in by_scope.iter().zip(shares) {
            let s = scopes.entry(*path_id).or_insert_with(|| ScopeStalls {
                scope: paths.path(*path_id),
                ..ScopeStalls::default()
            });
            let n: u64 = share.values().sum();
            if n == 0 {
                continue;
            }
            s.samples += n;
            for (reason, v) in share {
                *s.by_reason.entry(reason).or_default() += v;
            }
            s.kernels.push(k.name.clone());
            s.split_by_time |= split;
        }
    }
    let mut out: Vec<ScopeStalls> = scopes.into_values().collect();
    out.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.scope.cmp(&b.scope))
    });
    (out, unattributed)
}

/// `n` split in proportion to `weights`, in whole parts that add up to `n`: each part's floor,
/// then the remainder one by one to the largest fractions (ties to the first).
pub(super) fn apportion(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if weights.is_empty() {
        return Vec::new();
    }
    if total == 0 {
        let mut v = vec![0; weights.len()];
        v[0] = n;
        return v;
    }
    let mut parts: Vec<u64> = Vec::with_capacity(weights.len());
    let mut fractions: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, w) in weights.iter().enumerate() {
        let exact = u128::from(n) * u128::from(*w);
        parts.push((exact / total) as u64);
        fractions.push((exact % total, i));
    }
    let left = n - parts.iter().sum::<u64>();
    fractions.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in fractions.into_iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}
