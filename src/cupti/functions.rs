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

/// What a traced call does on the host, finer than [`ApiClass`]: which calls block the thread
/// (for the idle causes) and which the funnel's inventory lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum CallKind {
    /// A kernel launch.
    Launch,
    /// A graph launch.
    GraphLaunch,
    /// An asynchronous copy (`*Async*`).
    CopyAsync,
    /// A synchronous copy (`cudaMemcpy`, `cuMemcpyDtoH`, ...).
    CopySync,
    /// An asynchronous memset.
    MemsetAsync,
    /// A synchronous memset.
    MemsetSync,
    /// An allocation: device, host, managed, pitched, array.
    Alloc,
    /// A stream-ordered allocation (`cudaMallocAsync`, `cuMemAllocFromPoolAsync`).
    AllocAsync,
    /// A release.
    Free,
    /// A stream-ordered release (`cudaFreeAsync`).
    FreeAsync,
    /// `cuStreamSynchronize`.
    StreamSync,
    /// `cuEventSynchronize`.
    EventSync,
    /// `cuCtxSynchronize`, `cudaDeviceSynchronize`.
    DeviceSync,
    /// `cuStreamWaitEvent`: the stream waits, the host does not.
    StreamWaitEvent,
    /// `cuLaunchHostFunc`: a host function enqueued on a stream.
    HostFunc,
}

/// The [`CallKind`] of a traced driver or runtime function, by name; `None` for functions not
/// traced ([`classify_api`]). "Async" anywhere in the name means asynchronous.
pub(crate) fn classify_kind(name: &str) -> Option<CallKind> {
    let class = classify_api(name)?;
    let n = name.strip_prefix("cu").unwrap_or(name);
    let n = n.strip_prefix("da").unwrap_or(n);
    let is_async = n.contains("Async");
    Some(match class {
        ApiClass::KernelLaunch => CallKind::Launch,
        ApiClass::GraphLaunch => CallKind::GraphLaunch,
        ApiClass::Memcpy if is_async => CallKind::CopyAsync,
        ApiClass::Memcpy => CallKind::CopySync,
        ApiClass::Memset if is_async => CallKind::MemsetAsync,
        ApiClass::Memset => CallKind::MemsetSync,
        ApiClass::Other if n.starts_with("LaunchHostFunc") => CallKind::HostFunc,
        ApiClass::Other if n.starts_with("StreamWaitEvent") => CallKind::StreamWaitEvent,
        ApiClass::Other if n.starts_with("StreamSynchronize") => CallKind::StreamSync,
        ApiClass::Other if n.starts_with("EventSynchronize") => CallKind::EventSync,
        ApiClass::Other
            if n.starts_with("CtxSynchronize") || n.starts_with("DeviceSynchronize") =>
        {
            CallKind::DeviceSync
        }
        ApiClass::Other if n.starts_with("MemFree") || n.starts_with("Free") => {
            if is_async {
                CallKind::FreeAsync
            } else {
                CallKind::Free
            }
        }
        ApiClass::Other if is_async => CallKind::AllocAsync,
        ApiClass::Other => CallKind::Alloc,
    })
}

/// The class of every driver and runtime function ([`classify_api`]), by callback id: the
/// callback's "is it counted" and the collector's "is it awaited" read the same table.
pub(crate) struct ApiClasses {
    driver: Box<[Option<ApiClass>]>,
    runtime: Box<[Option<ApiClass>]>,
    /// The same functions' [`CallKind`]s and names, for the collector (the callback reads only
    /// the classes).
    kinds: CallKinds,
}

/// Callback id -> kind and name, per API.
struct CallKinds {
    driver: Box<[Option<(CallKind, &'static str)>]>,
    runtime: Box<[Option<(CallKind, &'static str)>]>,
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

/// Callback id -> kind and name, for one API's `(id, name)` table.
fn kind_table(cbids: &'static [(u32, &'static str)]) -> Box<[Option<(CallKind, &'static str)>]> {
    let max = cbids.iter().map(|(id, _)| *id).max().unwrap_or(0) as usize;
    let mut out = vec![None; max + 1];
    for (id, name) in cbids {
        out[*id as usize] = classify_kind(name).map(|k| (k, *name));
    }
    out.into_boxed_slice()
}

impl ApiClasses {
    /// The classes of one release's functions, by its own names for its callback ids.
    pub(crate) fn for_release(cbids: &sys::ReleaseCbids) -> Self {
        ApiClasses {
            driver: class_table(cbids.driver),
            runtime: class_table(cbids.runtime),
            kinds: CallKinds {
                driver: kind_table(cbids.driver),
                runtime: kind_table(cbids.runtime),
            },
        }
    }

    /// The kind and name of function `cbid` of the runtime (`runtime`) or driver API; `None`
    /// for functions not traced and unknown ids.
    pub(crate) fn kind(&self, runtime: bool, cbid: u32) -> Option<(CallKind, &'static str)> {
        let table = if runtime {
            &self.kinds.runtime
        } else {
            &self.kinds.driver
        };
        table.get(cbid as usize).copied().flatten()
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
    fn calls_are_kinded_by_what_they_do_to_the_host() {
        let cases = [
            ("cuLaunchKernel", CallKind::Launch),
            ("cudaLaunchKernel_v7000", CallKind::Launch),
            ("cuGraphLaunch", CallKind::GraphLaunch),
            ("cuMemcpyDtoH_v2", CallKind::CopySync),
            ("cudaMemcpy_v3020", CallKind::CopySync),
            ("cuMemcpyDtoHAsync_v2", CallKind::CopyAsync),
            ("cudaMemcpyAsync_ptsz_v7000", CallKind::CopyAsync),
            ("cuMemsetD32_v2", CallKind::MemsetSync),
            ("cudaMemsetAsync_v3020", CallKind::MemsetAsync),
            ("cuMemAlloc_v2", CallKind::Alloc),
            ("cudaMallocHost_v3020", CallKind::Alloc),
            ("cudaMallocAsync_v11020", CallKind::AllocAsync),
            ("cuMemFree_v2", CallKind::Free),
            ("cudaFreeAsync_v11020", CallKind::FreeAsync),
            ("cuStreamSynchronize", CallKind::StreamSync),
            ("cudaEventSynchronize_v3020", CallKind::EventSync),
            ("cuCtxSynchronize", CallKind::DeviceSync),
            ("cudaDeviceSynchronize_v3020", CallKind::DeviceSync),
            ("cuStreamWaitEvent", CallKind::StreamWaitEvent),
            ("cuLaunchHostFunc", CallKind::HostFunc),
        ];
        for (name, kind) in cases {
            assert_eq!(classify_kind(name), Some(kind), "{name}");
        }
        assert_eq!(classify_kind("cuCtxGetCurrent"), None);
        // Every traced function of the bound release has a kind, found by callback id with its
        // name.
        let classes = ApiClasses::default();
        for (runtime, id, name, _) in traced_functions(sys::bound_cbids()) {
            assert_eq!(classes.kind(runtime, id).map(|(_, n)| n), Some(name));
        }
    }

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
                    // The collector kinds calls by the bound release's names.
                    assert_eq!(
                        classify_kind(name),
                        classify_kind(newer),
                        "{} id {id}: {name} against {newer}",
                        r.release
                    );
                }
            }
        }
    }
}
