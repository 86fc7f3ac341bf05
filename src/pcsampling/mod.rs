//! Why a kernel is slow: warp stall reasons and source lines from CUPTI's PC Sampling API
//! (`docs/pc-sampling.md`).
//!
//! Every 2^n cycles each SM's sampler picks a warp and records its PC and the reason it is not
//! issuing (or `selected` when it is). Summed over a range of work, the samples of a kernel by
//! reason are the shares of its warps' time in each state, the distribution Nsight Compute's
//! warp state statistics show; summed by PC and mapped through the cubin's line table, they
//! point at the source lines where the time goes.
//!
//! - [`PcSampler`]: sampling enabled on one context, in continuous mode (kernels are not
//!   serialized), collected over ranges of work ([`PcSampler::collect`]).
//! - [`StallProfile`]: what a range sampled, per function and per PC, with the samples CUPTI
//!   dropped; [`StallProfile::hottest_lines`] through [`Sources`].
//! - [`reasons`]: CUPTI's stall reason names and the keys and labels Nsight Compute uses.
//!
//! Only one client can PC-sample a GPU at a time: another profiler sampling it makes
//! [`PcSampler::new`] fail with an error that says so.

mod duty;
pub mod reasons;
mod tally;
pub mod window;

pub use duty::DutyCycle;
pub use window::{PcSamplingSetup, PcSamplingWindow};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cudarc::driver::CudaContext;
use serde::{Deserialize, Serialize};

use crate::cupti::pc_sampling as ffi;
use crate::error::Result;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PcSamplingConfig {
    /// The sampling period is 2^n cycles per SM, n in 5..=31; `None`: CUPTI's default, which
    /// it sets from the SM count.
    pub period_log2: Option<u32>,
    /// Bytes of the device buffer the hardware writes samples into before CUPTI reads them
    /// (`None`: CUPTI's 512 MiB). Each kernel launched while sampling runs costs time that grows
    /// with this buffer, but a kernel whose samples do not fit loses them
    /// (`StallProfile::hardware_buffer_full`): docs/pc-sampling.md has both measured.
    pub hardware_buffer_bytes: Option<usize>,
    /// How often CUPTI's worker threads wake to decode the hardware's samples, ms (CUPTI's
    /// default: 100).
    #[serde(default)]
    pub worker_sleep_ms: Option<u32>,
    /// Bytes of the host buffer CUPTI decodes samples into until they are read (CUPTI's
    /// default: 1 MiB, about 5 500 PCs with every stall reason).
    #[serde(default)]
    pub scratch_buffer_bytes: Option<usize>,
    /// CUPTI's serialized mode: kernels run one at a time while sampling runs (off: continuous
    /// mode, kernels run as they would unsampled).
    #[serde(default)]
    pub serialized: bool,
    /// No start/stop control: everything is sampled from enable on and a range is read without
    /// stopping, so samples still in the hardware buffer at a read come in the next one, and
    /// those left when the sampler is dropped are not read. Refused by the profiler.
    #[serde(default)]
    pub free_running: bool,
}

impl PcSamplingConfig {
    /// The settings as the ledger header states them.
    pub fn describe(&self) -> String {
        let or_default = |v: Option<String>| v.unwrap_or_else(|| "CUPTI's default".into());
        format!(
            "{}{}period {}, hardware buffer {}, scratch buffer {}, worker wake-up {}",
            if self.serialized { "serialized, " } else { "" },
            if self.free_running {
                "free running, "
            } else {
                ""
            },
            or_default(self.period_log2.map(|p| format!("2^{p} cycles"))),
            or_default(self.hardware_buffer_bytes.map(|b| format!("{b} B"))),
            or_default(self.scratch_buffer_bytes.map(|b| format!("{b} B"))),
            or_default(self.worker_sleep_ms.map(|m| format!("{m} ms"))),
        )
    }
}

/// PC sampling on one context. Dropping it disables sampling.
pub struct PcSampler {
    inner: ffi::PcSampler,
    /// `(key, not_issued)` of each CUPTI stall reason index.
    keys: Arc<ReasonKeys>,
}

impl std::fmt::Debug for PcSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcSampler")
            .field("reasons", &self.inner.reasons().len())
            .finish()
    }
}

impl PcSampler {
    /// Enables PC sampling on `ctx` with `config`. Nothing is sampled until
    /// [`collect`](Self::collect).
    ///
    /// # Errors
    /// No CUPTI; an unsupported device; another client sampling this GPU (the error names the
    /// tools that do and the fix); a period outside 5..=31.
    pub fn new(ctx: &Arc<CudaContext>, config: PcSamplingConfig) -> Result<Self> {
        let lib = crate::cupti::api()?;
        let inner = ffi::PcSampler::enable(
            lib,
            ctx,
            ffi::SamplingOptions {
                period_log2: config.period_log2,
                hardware_buffer_bytes: config.hardware_buffer_bytes,
                scratch_buffer_bytes: config.scratch_buffer_bytes,
                worker_sleep_ms: config.worker_sleep_ms,
                serialized: config.serialized,
                free_running: config.free_running,
            },
        )?;
        let keys = inner
            .reasons()
            .iter()
            .map(|(i, name)| (*i, reasons::key(name)))
            .collect();
        Ok(PcSampler {
            inner,
            keys: Arc::new(keys),
        })
    }

    /// The stall reasons this device samples, as CUPTI names them.
    pub fn reason_names(&self) -> Vec<String> {
        self.inner.reasons().iter().map(|r| r.1.clone()).collect()
    }

    /// Samples while `work` runs: starts sampling, runs it, synchronizes the context, stops and
    /// reads every sampled PC.
    ///
    /// # Errors
    /// `work`'s error, or CUPTI's; sampling is stopped either way.
    pub fn collect(&mut self, work: impl FnOnce() -> Result<()>) -> Result<StallProfile> {
        self.inner.start()?;
        let worked = work();
        let range = self.inner.stop_and_read()?;
        worked?;
        Ok(profile_of(range, &self.keys))
    }

    /// Synchronizes, stops and reads the range started last, leaving the profile to be made
    /// off the calling thread.
    pub(crate) fn stop_and_read_raw(&mut self) -> Result<RawRange> {
        Ok(RawRange {
            range: self.inner.stop_and_read()?,
            keys: self.keys.clone(),
        })
    }
}

/// `(key, not_issued)` of each CUPTI stall reason index of a sampler's device.
type ReasonKeys = HashMap<u32, (String, bool)>;

/// A range as CUPTI read it, with its sampler's reason keys: turned into a [`StallProfile`]
/// where that costs the application nothing (the profiler's collector thread).
pub(crate) struct RawRange {
    range: ffi::SampledRange,
    keys: Arc<ReasonKeys>,
}

impl RawRange {
    /// A range as a fake sampler reads it in the tests: per function, its samples by reason
    /// key, all at one PC.
    #[cfg(test)]
    pub(crate) fn fake(functions: &[(String, Vec<(&str, u64)>)]) -> RawRange {
        let mut keys = ReasonKeys::new();
        let mut index_of = |key: &str| -> u32 {
            if let Some((i, _)) = keys.iter().find(|(_, k)| k.0 == key) {
                return *i;
            }
            let i = keys.len() as u32;
            keys.insert(i, (key.to_string(), false));
            i
        };
        let mut range = ffi::SampledRange::default();
        for (function, reasons) in functions {
            let stalls: Vec<(u32, u32)> = reasons
                .iter()
                .map(|(k, n)| (index_of(k), *n as u32))
                .collect();
            range.total_samples += reasons.iter().map(|r| r.1).sum::<u64>();
            range.pcs.push(ffi::SampledPc {
                cubin_crc: 1,
                pc_offset: 0,
                function: function.clone(),
                stalls,
            });
        }
        RawRange {
            range,
            keys: Arc::new(keys),
        }
    }

    /// The profile by function and PC.
    pub(crate) fn profile(self) -> StallProfile {
        profile_of(self.range, &self.keys)
    }
}

/// The profile of a read range: each PC's stall counts under Nsight Compute's reason keys.
fn profile_of(range: ffi::SampledRange, keys: &ReasonKeys) -> StallProfile {
    let mut functions: BTreeMap<String, FunctionStalls> = BTreeMap::new();
    for pc in range.pcs {
        let f = functions
            .entry(pc.function.clone())
            .or_insert_with(|| FunctionStalls {
                function: pc.function.clone(),
                ..FunctionStalls::default()
            });
        let mut sample = PcStalls {
            cubin_crc: pc.cubin_crc,
            pc_offset: pc.pc_offset,
            by_reason: BTreeMap::new(),
            not_issued: 0,
        };
        for (index, n) in pc.stalls {
            let (key, not_issued) = keys
                .get(&index)
                .cloned()
                .unwrap_or_else(|| (format!("reason_{index}"), false));
            if not_issued {
                sample.not_issued += u64::from(n);
            } else {
                *sample.by_reason.entry(key).or_default() += u64::from(n);
            }
        }
        f.add(sample);
    }
    StallProfile {
        functions: functions.into_values().collect(),
        total_samples: range.total_samples,
        dropped_samples: range.dropped_samples,
        non_user_samples: range.non_user_samples,
        hardware_buffer_full: range.hardware_buffer_full,
    }
}

/// Samples at one PC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcStalls {
    /// The cubin's CRC, as [`Sources`] keys cubins.
    pub cubin_crc: u64,
    /// The instruction's offset in its function, bytes.
    pub pc_offset: u64,
    /// Samples by stall reason key (`selected` for samples of an issuing warp).
    pub by_reason: BTreeMap<String, u64>,
    /// Of them, samples whose warp issued nothing (CUPTI's `_not_issued` reasons).
    pub not_issued: u64,
}

impl PcStalls {
    /// All samples at this PC.
    pub fn samples(&self) -> u64 {
        self.by_reason.values().sum()
    }
}

/// Samples of one function (kernel or device function), by reason and by PC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionStalls {
    /// The name as the module spells it (mangled for C++).
    pub function: String,
    /// Samples by stall reason key, over every PC.
    pub by_reason: BTreeMap<String, u64>,
    /// Every sampled PC.
    pub pcs: Vec<PcStalls>,
}

impl FunctionStalls {
    fn add(&mut self, pc: PcStalls) {
        for (k, n) in &pc.by_reason {
            *self.by_reason.entry(k.clone()).or_default() += n;
        }
        self.pcs.push(pc);
    }

    /// All samples of the function.
    pub fn samples(&self) -> u64 {
        self.by_reason.values().sum()
    }

    /// Each reason's share of the samples, largest first.
    pub fn shares(&self) -> Vec<(String, f64)> {
        shares(&self.by_reason)
    }

    /// The reason with the most samples, `selected` (issuing) included.
    pub fn dominant(&self) -> Option<&str> {
        self.by_reason
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(k, _)| k.as_str())
    }

    /// The share of one reason (0 when it has no samples).
    pub fn share(&self, key: &str) -> f64 {
        let total = self.samples();
        if total == 0 {
            return 0.0;
        }
        self.by_reason.get(key).copied().unwrap_or(0) as f64 / total as f64
    }
}

/// Shares of a count map, largest first (ties by key).
pub fn shares(counts: &BTreeMap<String, u64>) -> Vec<(String, f64)> {
    crate::ledger::stalls::reason_shares(counts)
}

/// Total-variation distance between two distributions given as counts or shares: half the sum
/// of the absolute differences of their normalized values, 0 (same) to 1 (disjoint).
pub fn total_variation(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> f64 {
    let (sa, sb) = (a.values().sum::<f64>(), b.values().sum::<f64>());
    if sa <= 0.0 || sb <= 0.0 {
        return 1.0;
    }
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.iter()
        .map(|k| {
            (a.get(*k).copied().unwrap_or(0.0) / sa - b.get(*k).copied().unwrap_or(0.0) / sb).abs()
        })
        .sum::<f64>()
        / 2.0
}

/// What one range sampled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallProfile {
    /// Per function, by name.
    pub functions: Vec<FunctionStalls>,
    /// Samples CUPTI counted, dropped and non-user ones included.
    pub total_samples: u64,
    /// Samples the hardware dropped (its buffer full or back-pressure): lost, and counted.
    pub dropped_samples: u64,
    /// Samples in the driver's own kernels, which CUPTI gives no PCs for.
    pub non_user_samples: u64,
    /// Whether the hardware buffer filled; raise `hardware_buffer_bytes` or the period.
    pub hardware_buffer_full: bool,
}

impl StallProfile {
    /// The samples of the function named `name`.
    pub fn function(&self, name: &str) -> Option<&FunctionStalls> {
        self.functions.iter().find(|f| f.function == name)
    }

    /// The `n` source lines of `function` with the most samples, through the cubins in
    /// `sources`; PCs without line information are summed under an empty file name.
    pub fn hottest_lines(&self, function: &str, sources: &Sources, n: usize) -> Vec<SourceLine> {
        let Some(f) = self.function(function) else {
            return Vec::new();
        };
        let mut lines: HashMap<(String, String, u32), SourceLine> = HashMap::new();
        for pc in &f.pcs {
            let place = sources.place(pc.cubin_crc, function, pc.pc_offset);
            let (dir, file, line) = place.map(|p| (p.dir, p.file, p.line)).unwrap_or_default();
            let e = lines
                .entry((dir.clone(), file.clone(), line))
                .or_insert_with(|| SourceLine {
                    // A file whose text was registered (a bundled kernel) is shown by its
                    // name: NVRTC records the compiling process's directory, not the source's.
                    file: if dir.is_empty()
                        || file.is_empty()
                        || file.starts_with('/')
                        || sources.texts.contains_key(&file)
                    {
                        file.clone()
                    } else {
                        format!("{dir}/{file}")
                    },
                    line,
                    samples: 0,
                    by_reason: BTreeMap::new(),
                    text: sources.text(&dir, &file, line),
                });
            for (k, v) in &pc.by_reason {
                *e.by_reason.entry(k.clone()).or_default() += v;
                e.samples += v;
            }
        }
        let mut v: Vec<SourceLine> = lines.into_values().collect();
        v.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.file.cmp(&b.file))
                .then(a.line.cmp(&b.line))
        });
        v.truncate(n);
        v
    }
}

/// One source line's samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLine {
    /// The file as the line table names it (with its directory when it has one); empty for
    /// PCs the cubin has no line for.
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: u32,
    /// Samples at the line's PCs.
    pub samples: u64,
    /// By stall reason key.
    pub by_reason: BTreeMap<String, u64>,
    /// The line's text, when the file (or a bundled kernel of that name) is at hand.
    pub text: Option<String>,
}

/// Cubins by CRC, to map sampled PCs to source lines, and the sources to show them with.
#[derive(Default)]
pub struct Sources {
    cubins: HashMap<u64, Arc<[u8]>>,
    texts: HashMap<String, &'static str>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("cubins", &self.cubins.len())
            .finish()
    }
}

impl Sources {
    /// No cubins yet.
    pub fn new() -> Self {
        Sources::default()
    }

    /// Adds a cubin (the bytes a module was loaded from, compiled with `-lineinfo` for lines).
    ///
    /// # Errors
    /// No CUPTI, or bytes CUPTI does not take for a cubin.
    pub fn add_cubin(&mut self, cubin: Arc<[u8]>) -> Result<u64> {
        let crc = ffi::cubin_crc(crate::cupti::api()?, &cubin)?;
        self.cubins.insert(crc, cubin);
        Ok(crc)
    }

    /// Source text to show for files of this name (e.g. an embedded kernel file), when the file
    /// is not on disk.
    pub fn add_text(&mut self, file: &str, text: &'static str) {
        self.texts.insert(file.to_string(), text);
    }

    /// Whether the cubin of this CRC is at hand.
    pub fn has_cubin(&self, crc: u64) -> bool {
        self.cubins.contains_key(&crc)
    }

    fn place(&self, crc: u64, function: &str, pc: u64) -> Option<ffi::SourcePlace> {
        let cubin = self.cubins.get(&crc)?;
        ffi::source_place(crate::cupti::api().ok()?, cubin, function, pc)
    }

    fn text(&self, dir: &str, file: &str, line: u32) -> Option<String> {
        if file.is_empty() || line == 0 {
            return None;
        }
        let nth = |s: &str| {
            s.lines()
                .nth(line as usize - 1)
                .map(|l| l.trim().to_string())
        };
        if let Some(t) = self.texts.get(file) {
            return nth(t);
        }
        let path = std::path::Path::new(dir).join(file);
        std::fs::read_to_string(path).ok().and_then(|s| nth(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn shares_and_the_dominant_reason_come_from_the_counts() {
        let mut f = FunctionStalls::default();
        f.add(PcStalls {
            by_reason: counts(&[("long_scoreboard", 30), ("selected", 10)]),
            ..PcStalls::default()
        });
        f.add(PcStalls {
            by_reason: counts(&[("long_scoreboard", 50), ("wait", 10)]),
            ..PcStalls::default()
        });
        assert_eq!(f.samples(), 100);
        assert_eq!(f.dominant(), Some("long_scoreboard"));
        assert!((f.share("long_scoreboard") - 0.8).abs() < 1e-12);
        assert_eq!(f.shares()[0].0, "long_scoreboard");
        assert_eq!(f.share("barrier"), 0.0);
    }

    #[test]
    fn total_variation_is_half_the_l1_distance_of_normalized_shares() {
        let a: BTreeMap<String, f64> = [("x".to_string(), 3.0), ("y".to_string(), 1.0)].into();
        let b: BTreeMap<String, f64> = [("x".to_string(), 0.5), ("z".to_string(), 0.5)].into();
        // a = (0.75, 0.25, 0), b = (0.5, 0, 0.5): (0.25 + 0.25 + 0.5) / 2.
        assert!((total_variation(&a, &b) - 0.5).abs() < 1e-12);
        assert_eq!(total_variation(&a, &a), 0.0);
        assert_eq!(total_variation(&a, &BTreeMap::new()), 1.0);
    }
}
