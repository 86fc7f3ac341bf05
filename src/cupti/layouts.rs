//! What each CUPTI release writes and knows, from its API version (`cuptiGetVersion`): the
//! version of each activity record struct it emits, its callback ids, and the features that
//! follow from them.
//!
//! CUPTI emits the newest struct version of each activity kind that its own headers define, and
//! a release adds versions: the kernel record is `CUpti_ActivityKernel9` in 12.6 to 12.9, `10` in
//! 13.0, `11` in 13.1 and 13.2, `12` in 13.3, `13` in 13.4 and 13.5. Each version keeps its
//! layout in every later header (`cupti_activity_deprecated.h`), so one set of bindings holds
//! them all: 13.0's headers up to its own versions, 13.5's for the later ones.

use cupti_sys as sys;

/// The oldest API version supported: CUDA 12.6, the first with the Range Profiler and
/// Profiler Host APIs that the counters level calls.
pub(crate) const OLDEST_API_VERSION: u32 = 24;

/// The newest release line covered, as a 13.x API version's first four digits (xxyy of xxyyzz).
const NEWEST_LINE: u32 = 1305;

/// `CUpti_ActivityKernelN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelLayout {
    V9,
    V10,
    V11,
    V12,
    V13,
}

/// `CUpti_ActivityMemcpyN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemcpyLayout {
    V5,
    V6,
    V7,
}

/// `CUpti_ActivityMemsetN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemsetLayout {
    V4,
    V5,
}

/// `CUpti_ActivitySynchronization` (1) or `CUpti_ActivitySynchronization2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncLayout {
    V1,
    V2,
}

/// The record struct versions one release emits. Peer-to-peer copies
/// (`CUpti_ActivityMemcpyPtoP4`), allocations (`CUpti_ActivityMemory4`) and overhead records
/// (`CUpti_ActivityOverhead3`) have one version in every supported release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layouts {
    pub(crate) kernel: KernelLayout,
    pub(crate) memcpy: MemcpyLayout,
    pub(crate) memset: MemsetLayout,
    pub(crate) sync: SyncLayout,
}

impl Layouts {
    /// The layouts of the CUPTI the API bindings were generated from (13.0), which synthetic
    /// records in tests and benchmarks are laid out as.
    #[cfg(any(test, feature = "internals"))]
    pub const BOUND: Layouts = Layouts {
        kernel: KernelLayout::V10,
        memcpy: MemcpyLayout::V6,
        memset: MemsetLayout::V4,
        sync: SyncLayout::V2,
    };

    /// Each of the record versions, as the ledger header names them.
    pub(crate) fn describe(&self) -> String {
        let kernel = match self.kernel {
            KernelLayout::V9 => 9,
            KernelLayout::V10 => 10,
            KernelLayout::V11 => 11,
            KernelLayout::V12 => 12,
            KernelLayout::V13 => 13,
        };
        let memcpy = match self.memcpy {
            MemcpyLayout::V5 => 5,
            MemcpyLayout::V6 => 6,
            MemcpyLayout::V7 => 7,
        };
        let memset = match self.memset {
            MemsetLayout::V4 => 4,
            MemsetLayout::V5 => 5,
        };
        let sync = match self.sync {
            SyncLayout::V1 => "",
            SyncLayout::V2 => "2",
        };
        format!("Kernel{kernel}, Memcpy{memcpy}, Memset{memset}, Synchronization{sync}")
    }
}

/// A CUPTI release gpu-ledger supports, as found from its API version.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// `12.9`, `13.0`, ...
    pub name: &'static str,
    /// The record versions it emits.
    pub layouts: Layouts,
    /// Its driver and runtime callback ids.
    pub cbids: &'static sys::ReleaseCbids,
}

impl Release {
    /// The CUDA major release it belongs to (12, 13): a driver of an older one cannot serve it.
    pub(crate) fn cuda_major(&self) -> u32 {
        if self.name.starts_with("12.") {
            12
        } else {
            13
        }
    }

    /// Auto ranges (one range per kernel launch) with a driver of CUDA major `driver_major`, or
    /// what this release lacks. CUPTI 12.9 on a CUDA 13.0 driver completes every Range Profiler
    /// call and returns a collection of no ranges, with kernel or with user replay
    /// (docs/measurements.md); a 12.x CUPTI on a 13.x driver is refused for them.
    pub fn auto_ranges(&self, driver_major: u32) -> Result<(), Lack> {
        if self.cuda_major() < driver_major {
            return Err(Lack {
                what: "returns no auto ranges on a driver of a newer CUDA major release",
                fix: "collect user ranges (RangeMode::User: one range per scope), or load a \
                      CUPTI of the driver's CUDA release (GPU_LEDGER_CUPTI_PATH, `pip install \
                      nvidia-cuda-cupti`)",
            });
        }
        Ok(())
    }

    /// Refusing a collection while another process holds the GPU's counters, or what this
    /// release lacks. CUPTI 13.0 and 13.4 refuse it (`CUPTI_ERROR_HARDWARE_BUSY`); CUPTI 12.9 on
    /// a CUDA 13.0 driver collected in a fresh process alongside another process's open
    /// collection (docs/measurements.md), so its values may mix both.
    pub fn busy_detection(&self, driver_major: u32) -> Result<(), Lack> {
        if self.cuda_major() < driver_major {
            return Err(Lack {
                what: "does not refuse a collection while another process holds the GPU's \
                       counters on a driver of a newer CUDA major release, so values may mix \
                       both processes' work",
                fix: "make sure no other profiler (Nsight Compute, another Range Profiler, DCGM \
                      profiling) runs on the GPU, or load a CUPTI of the driver's CUDA release",
            });
        }
        Ok(())
    }

    /// SASS-instrumented metrics (`smsp__sass_*`), or what this release lacks for them, given
    /// whether and since when the activity API traces (docs/measurements.md, on the H200 with
    /// driver 580): every release measured (12.9, 13.0, 13.3, 13.4, 13.5) evaluates them as 0
    /// when the Range Profiler is set up while the timeline already traces; set up first, as the
    /// counters level does, 13.0 evaluates them right and 13.4 as 0; 13.3 evaluates them as 0
    /// even with no tracing.
    pub fn sass_metrics(&self, tracing: Tracing) -> Result<(), Lack> {
        const FIX: &str = "collect them with the standalone RangeProfiler (gpu_ledger::counters) \
                           and no Profiler running, choose metrics that are not smsp__sass_*, or \
                           load CUPTI 13.0 (GPU_LEDGER_CUPTI_PATH)";
        match tracing {
            _ if self.name == "13.3" => Err(Lack {
                what: "evaluates SASS-instrumented metrics (smsp__sass_*) as 0",
                fix: FIX,
            }),
            Tracing::Already => Err(Lack {
                what: "evaluates SASS-instrumented metrics (smsp__sass_*) as 0 when the Range \
                       Profiler is set up while the timeline traces",
                fix: FIX,
            }),
            Tracing::SetUpFirst if self.name == "13.4" => Err(Lack {
                what: "evaluates SASS-instrumented metrics (smsp__sass_*) as 0 while the \
                       timeline traces",
                fix: FIX,
            }),
            _ => Ok(()),
        }
    }

    /// The feature gates that follow from the release on a driver of CUDA major
    /// `driver_major`, each with its reason, as the ledger header records them.
    pub(crate) fn features(&self, driver_major: u32) -> Vec<String> {
        let device_launched = if self.layouts.kernel == KernelLayout::V9 {
            "kernel.device_launched off (CUpti_ActivityKernel9 has no isDeviceLaunched: \
             device-launched kernels count as host-launched)"
        } else {
            "kernel.device_launched on"
        };
        let gate = |name: &str, r: Result<(), Lack>| match r {
            Ok(()) => format!("{name} on"),
            Err(l) => format!("{name} off (CUPTI {} {})", self.name, l.what),
        };
        vec![
            format!("records {}", self.layouts.describe()),
            "counters on (Range Profiler and Profiler Host APIs, CUPTI 12.6 and later)".into(),
            gate("counters.auto_ranges", self.auto_ranges(driver_major)),
            gate("counters.busy_detection", self.busy_detection(driver_major)),
            gate(
                "counters.sass_metrics_while_tracing",
                self.sass_metrics(Tracing::SetUpFirst),
            ),
            device_launched.into(),
        ]
    }
}

/// Whether the activity API traces while counters are collected, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracing {
    /// No timeline runs.
    No,
    /// The Range Profiler was set up before the timeline started (the counters level).
    SetUpFirst,
    /// The timeline already traced when the Range Profiler was set up.
    Already,
}

/// A counters feature a CUPTI release lacks: what it does instead, and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lack {
    /// What the release does (`returns no auto ranges on ...`).
    pub what: &'static str,
    /// The fix.
    pub fix: &'static str,
}

/// Why a CUPTI's API version is not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// Older than CUDA 12.6.
    Older,
    /// A release newer than the bindings: its record layouts are unknown.
    Newer,
}

/// The release of API version `api`, or why it is not supported.
pub(crate) fn release(api: u32) -> Result<Release, Unsupported> {
    use KernelLayout as K;
    use MemcpyLayout as C;
    use MemsetLayout as S;
    use SyncLayout as Y;
    let (name, kernel, memcpy, memset, sync) = match api {
        _ if api < OLDEST_API_VERSION => return Err(Unsupported::Older),
        // API 25 was never released; 12.6's layouts are the ones before 12.8's.
        24..=25 => ("12.6", K::V9, C::V5, S::V4, Y::V1),
        26 => ("12.8", K::V9, C::V6, S::V4, Y::V2),
        27..=28 => ("12.9", K::V9, C::V6, S::V4, Y::V2),
        // 13.x versions read xxyyzz; a 12.x after 12.9 would be new.
        29..=129_999 => return Err(Unsupported::Newer),
        _ => match api / 100 {
            1300 => ("13.0", K::V10, C::V6, S::V4, Y::V2),
            1301 => ("13.1", K::V11, C::V6, S::V4, Y::V2),
            1302 => ("13.2", K::V11, C::V6, S::V4, Y::V2),
            1303 => ("13.3", K::V12, C::V6, S::V4, Y::V2),
            1304 => ("13.4", K::V13, C::V7, S::V5, Y::V2),
            NEWEST_LINE => ("13.5", K::V13, C::V7, S::V5, Y::V2),
            _ => return Err(Unsupported::Newer),
        },
    };
    let cbids = sys::RELEASE_CBIDS
        .iter()
        .find(|r| r.release.starts_with(&format!("{name}.")))
        .ok_or(Unsupported::Newer)?;
    Ok(Release {
        name,
        layouts: Layouts {
            kernel,
            memcpy,
            memset,
            sync,
        },
        cbids,
    })
}

/// The supported range, as errors state it.
pub(crate) fn supported_range() -> String {
    "CUDA 12.6 to 13.5 (API versions 24 to 28 and 130000 to 130599)".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_release_line_maps_to_its_record_versions_and_its_own_callback_ids() {
        let cases = [
            (
                24,
                "12.6",
                KernelLayout::V9,
                MemcpyLayout::V5,
                SyncLayout::V1,
            ),
            (
                26,
                "12.8",
                KernelLayout::V9,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                28,
                "12.9",
                KernelLayout::V9,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                130_001,
                "13.0",
                KernelLayout::V10,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                130_101,
                "13.1",
                KernelLayout::V11,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                130_202,
                "13.2",
                KernelLayout::V11,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                130_301,
                "13.3",
                KernelLayout::V12,
                MemcpyLayout::V6,
                SyncLayout::V2,
            ),
            (
                130_401,
                "13.4",
                KernelLayout::V13,
                MemcpyLayout::V7,
                SyncLayout::V2,
            ),
            (
                130_500,
                "13.5",
                KernelLayout::V13,
                MemcpyLayout::V7,
                SyncLayout::V2,
            ),
        ];
        for (api, name, kernel, memcpy, sync) in cases {
            let r = release(api).unwrap_or_else(|e| panic!("{api}: {e:?}"));
            assert_eq!(
                (r.name, r.layouts.kernel, r.layouts.memcpy, r.layouts.sync),
                (name, kernel, memcpy, sync),
                "API {api}"
            );
            assert!(
                r.cbids.release.starts_with(name),
                "{api}: {}",
                r.cbids.release
            );
        }
        assert_eq!(release(130_001).unwrap().layouts, Layouts::BOUND);
    }

    #[test]
    fn counters_gates_follow_the_release_and_the_driver_and_the_header_states_them() {
        let r = |api| release(api).unwrap();
        // 12.x on a CUDA 13 driver returns no auto ranges; on its own driver it is not refused.
        assert!(r(28).auto_ranges(13).is_err());
        assert!(r(28).auto_ranges(12).is_ok());
        assert!(r(130_001).auto_ranges(13).is_ok());
        assert!(r(130_401).auto_ranges(13).is_ok());
        assert!(r(28).busy_detection(13).is_err());
        assert!(r(28).busy_detection(12).is_ok());
        assert!(r(130_001).busy_detection(13).is_ok());
        // SASS-instrumented metrics: 0 with every release when set up during tracing; 13.4
        // also when set up first; 13.3 always.
        for api in [28, 130_001, 130_302, 130_401, 130_502] {
            assert!(r(api).sass_metrics(Tracing::Already).is_err(), "{api}");
        }
        assert!(r(130_001).sass_metrics(Tracing::SetUpFirst).is_ok());
        assert!(r(130_401).sass_metrics(Tracing::SetUpFirst).is_err());
        assert!(r(130_401).sass_metrics(Tracing::No).is_ok());
        assert!(r(130_302).sass_metrics(Tracing::No).is_err());
        assert!(r(130_502).sass_metrics(Tracing::No).is_ok());
        let f = r(28).features(13);
        assert!(
            f.iter()
                .any(|l| l.starts_with("counters.auto_ranges off (CUPTI 12.9 returns no")),
            "{f:?}"
        );
        assert!(
            f.contains(&"counters.sass_metrics_while_tracing on".to_string()),
            "{f:?}"
        );
        let f = r(130_401).features(13);
        assert!(f.contains(&"counters.auto_ranges on".to_string()), "{f:?}");
        assert!(
            f.iter()
                .any(|l| l.starts_with("counters.sass_metrics_while_tracing off (CUPTI 13.4")),
            "{f:?}"
        );
    }

    #[test]
    fn releases_outside_the_bindings_are_refused_as_older_or_newer() {
        assert_eq!(release(23).unwrap_err(), Unsupported::Older);
        assert_eq!(release(1).unwrap_err(), Unsupported::Older);
        assert_eq!(release(29).unwrap_err(), Unsupported::Newer);
        assert_eq!(release(130_600).unwrap_err(), Unsupported::Newer);
        assert_eq!(release(140_000).unwrap_err(), Unsupported::Newer);
    }
}
