//! What the loaded CUPTI release can collect, checked before a collection is set up, so that a
//! release that would return no ranges or zeros is refused with the reason instead.

use super::{CounterConfig, RangeMode};
use crate::cupti::layouts::{Lack, Tracing};
use crate::cupti::{self};
use crate::error::{Error, Result};

/// Refuses what the loaded release cannot collect right: auto ranges it returns none of on this
/// driver, and SASS-instrumented metrics it evaluates as 0 given `tracing` (whether and since
/// when the timeline traces). `metrics` are the names to collect (presets expanded, or as
/// requested).
///
/// # Errors
/// [`Error::CuptiLacks`] naming the release, the feature and the fix; a CUPTI loading error.
pub(crate) fn check_release(
    config: &CounterConfig,
    metrics: &[String],
    tracing: Tracing,
) -> Result<()> {
    let lib = cupti::api()?;
    let lacks = |feature: String, l: Lack| Error::CuptiLacks {
        release: lib.release.name.to_string(),
        path: lib.path.clone(),
        feature,
        what: l.what,
        fix: l.fix,
    };
    if config.range_mode == RangeMode::Auto {
        let driver_major = crate::driver::device::driver_version()? / 1000;
        lib.release
            .auto_ranges(driver_major)
            .map_err(|l| lacks("auto ranges".into(), l))?;
    }
    let sass: Vec<&str> = metrics
        .iter()
        .map(String::as_str)
        .filter(|m| m.starts_with("smsp__sass_"))
        .collect();
    if !sass.is_empty() {
        lib.release
            .sass_metrics(tracing)
            .map_err(|l| lacks(sass.join(", "), l))?;
    }
    Ok(())
}

/// The warning for the header when the loaded release does not refuse a collection while
/// another process holds the counters; `None` when it does (or the driver cannot say).
pub(crate) fn busy_warning() -> Option<String> {
    let lib = cupti::api().ok()?;
    let driver_major = crate::driver::device::driver_version().ok()? / 1000;
    let l = lib.release.busy_detection(driver_major).err()?;
    Some(format!(
        "counters: CUPTI {} {}; {}",
        lib.release.name, l.what, l.fix
    ))
}
