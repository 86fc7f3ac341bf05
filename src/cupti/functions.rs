//! The driver and runtime functions the timeline traces, by how each relates to the GPU records
//! that follow it: what the API callback counts and the collector awaits.

use cupti_sys as sys;

/// How a traced API call relates to GPU activity, for attribution and completeness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ApiClass {
    /// A kernel launch: exactly one kernel record follows.
    KernelLaunch,
    /// A graph launch: any number of records follow.
    GraphLaunch,
    /// A copy: one memcpy record follows (none for zero bytes).
    Memcpy,
    /// A memset: one memset record follows.
    Memset,
    /// Allocation, release or synchronization: records of their own kinds, not awaited.
    Other,
}

/// Classifies a driver or runtime API function by name; `None` for functions not traced.
pub(crate) fn classify_api(name: &str) -> Option<ApiClass> {
    let n = name.strip_prefix("cu").unwrap_or(name);
    let n = n.strip_prefix("da").unwrap_or(n); // cudaX -> X for runtime names
    if n.starts_with("LaunchHostFunc") {
        return Some(ApiClass::Other);
    }
    if n.starts_with("GraphLaunch") {
        return Some(ApiClass::GraphLaunch);
    }
    if n.starts_with("Launch") {
        return Some(ApiClass::KernelLaunch);
    }
    if n.starts_with("Memcpy") {
        return Some(ApiClass::Memcpy);
    }
    if n.starts_with("Memset") {
        return Some(ApiClass::Memset);
    }
    const OTHER: [&str; 8] = [
        "MemAlloc",
        "MemFree",
        "Malloc",
        "Free",
        "StreamSynchronize",
        "CtxSynchronize",
        "DeviceSynchronize",
        "EventSynchronize",
    ];
    if OTHER.iter().any(|p| n.starts_with(p)) || n.starts_with("StreamWaitEvent") {
        return Some(ApiClass::Other);
    }
    None
}

/// The class of every driver and runtime function ([`classify_api`]), by callback id: the
/// callback's "is it counted" and the collector's "is it awaited" read the same table.
pub(crate) struct ApiClasses {
    driver: Box<[Option<ApiClass>]>,
    runtime: Box<[Option<ApiClass>]>,
}

impl Default for ApiClasses {
    /// The tables of the CUPTI the API bindings were generated from (13.0).
    fn default() -> Self {
        ApiClasses::for_release(sys::bound_cbids())
    }
}

/// The functions of `cbids` that attribution traces, among the ids that release knows (below
/// its `SIZE`): `(runtime API, callback id, name, class)`.
pub(crate) fn traced_functions(
    cbids: &'static sys::ReleaseCbids,
) -> impl Iterator<Item = (bool, u32, &'static str, ApiClass)> {
    [
        (false, cbids.driver, cbids.driver_size),
        (true, cbids.runtime, cbids.runtime_size),
    ]
    .into_iter()
    .flat_map(|(runtime, table, size)| {
        table
            .iter()
            .filter(move |(id, _)| *id < size)
            .filter_map(move |&(id, name)| Some((runtime, id, name, classify_api(name)?)))
    })
}

/// `(runtime, callback id)` of every function the timeline's callback traces in the loaded
/// release, for benchmarks that switch the same callbacks on the raw bindings.
#[cfg(feature = "internals")]
pub fn traced_callbacks(lib: &super::LoadedCupti) -> Vec<(bool, u32)> {
    traced_functions(lib.release.cbids)
        .map(|(runtime, id, _, _)| (runtime, id))
        .collect()
}

/// Callback id -> class, for one API's `(id, name)` table.
fn class_table(cbids: &[(u32, &str)]) -> Box<[Option<ApiClass>]> {
    let max = cbids.iter().map(|(id, _)| *id).max().unwrap_or(0) as usize;
    let mut out = vec![None; max + 1];
    for (id, name) in cbids {
        out[*id as usize] = classify_api(name);
    }
    out.into_boxed_slice()
}

impl ApiClasses {
    /// The classes of one release's functions, by its own names for its callback ids.
    pub(crate) fn for_release(cbids: &sys::ReleaseCbids) -> Self {
        ApiClasses {
            driver: class_table(cbids.driver),
            runtime: class_table(cbids.runtime),
        }
    }

    /// The class of function `cbid` of the runtime (`runtime`) or driver API; `None` for
    /// functions not traced and unknown ids.
    #[inline]
    pub(crate) fn of(&self, runtime: bool, cbid: u32) -> Option<ApiClass> {
        let table = if runtime { &self.runtime } else { &self.driver };
        table.get(cbid as usize).copied().flatten()
    }
}

/// True for the API classes whose calls are counted and awaited.
pub(crate) fn is_counted(class: Option<ApiClass>) -> bool {
    matches!(
        class,
        Some(ApiClass::KernelLaunch | ApiClass::GraphLaunch | ApiClass::Memcpy | ApiClass::Memset)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_ids_are_the_same_functions_in_every_release_where_both_know_them() {
        // Launches, copies and memsets are counted by id: an id must name one of them in every
        // release that has it, or none.
        let newest = sys::RELEASE_CBIDS.last().unwrap();
        for r in sys::RELEASE_CBIDS {
            for (table, newest_table) in [(r.driver, newest.driver), (r.runtime, newest.runtime)] {
                for (id, name) in table {
                    let Some((_, newer)) = newest_table.iter().find(|(i, _)| i == id) else {
                        continue;
                    };
                    if newer.starts_with("cuda") && newer[4..].chars().all(|c| c.is_ascii_digit()) {
                        continue; // removed since (a placeholder name)
                    }
                    assert_eq!(
                        classify_api(name),
                        classify_api(newer),
                        "{} id {id}: {name} against {newer}",
                        r.release
                    );
                }
            }
        }
    }
}
