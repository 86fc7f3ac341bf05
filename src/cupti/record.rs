//! Owned, serde-ready copies of the CUPTI activity records gpu-ledger uses, and their decoding
//! from raw CUPTI buffers.

use std::collections::HashMap;

use cupti_sys as sys;
use serde::Serialize;

use super::layouts::Layouts;
use crate::ledger::schema::LaunchShape;

/// A kernel execution (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`, `CUpti_ActivityKernel9` to `13`
/// by release).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelRecord {
    /// Kernel name as CUPTI reports it (mangled for C++ kernels), the process's one copy of it
    /// ([`intern_name`]).
    pub name: &'static str,
    /// GPU start, CUPTI ns.
    pub start: u64,
    /// GPU end, CUPTI ns.
    pub end: u64,
    /// Device ordinal.
    pub device_id: u32,
    /// CUPTI context id.
    pub context_id: u32,
    /// CUPTI stream id.
    pub stream_id: u32,
    /// Correlation id of the launching API call.
    pub correlation_id: u32,
    /// Grid, block and cluster dimensions, registers, shared and local memory per thread.
    pub shape: LaunchShape,
    /// Shared memory the SM was configured with for this launch, bytes.
    pub shared_executed_bytes: u32,
    /// Local memory reserved for the whole launch, bytes.
    pub local_bytes_total: u64,
    /// CUDA graph id (0 when not launched from a graph).
    pub graph_id: u32,
    /// CUDA graph node id (0 when not launched from a graph).
    pub graph_node_id: u64,
    /// Launched from the device (device-side graph launch).
    pub device_launched: bool,
}

/// A memory copy (`CUpti_ActivityMemcpy5` to `7` by release, or `CUpti_ActivityMemcpyPtoP4` for
/// peer copies), or a memset (`CUpti_ActivityMemset4` or `5`): bytes moved or set on a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopyRecord {
    /// Direction: `HtoD`, `DtoH`, `DtoD`, `HtoH`, `PtoP`, array kinds, or `unknown`; `memset`
    /// for a memset.
    pub direction: &'static str,
    /// Bytes copied or set.
    pub bytes: u64,
    /// GPU start, CUPTI ns.
    pub start: u64,
    /// GPU end, CUPTI ns.
    pub end: u64,
    /// Device ordinal.
    pub device_id: u32,
    /// CUPTI context id.
    pub context_id: u32,
    /// CUPTI stream id.
    pub stream_id: u32,
    /// Correlation id of the API call.
    pub correlation_id: u32,
    /// CUDA graph id (0 when not from a graph).
    pub graph_id: u32,
    /// CUDA graph node id.
    pub graph_node_id: u64,
    /// CUPTI flagged it asynchronous (`CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC`, `..._MEMSET_ASYNC`).
    pub is_async: bool,
    /// Its host memory is pageable (source or destination of a copy, the memory of a memset):
    /// an "asynchronous" copy to or from pageable memory still holds the calling thread.
    pub pageable: bool,
}

/// A host-side wait (`CUpti_ActivitySynchronization2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncRecord {
    /// `event`, `stream_wait_event`, `stream`, `context` or `unknown`.
    pub kind: &'static str,
    /// Host start, CUPTI ns.
    pub start: u64,
    /// Host end, CUPTI ns.
    pub end: u64,
    /// Correlation id of the API call.
    pub correlation_id: u32,
    /// CUPTI context id.
    pub context_id: u32,
    /// CUPTI stream id (`u32::MAX` when not a stream wait).
    pub stream_id: u32,
}

/// A device-memory allocation or release (`CUpti_ActivityMemory4`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryRecord {
    /// True for an allocation, false for a release.
    pub allocation: bool,
    /// Device address.
    pub address: u64,
    /// Bytes.
    pub bytes: u64,
    /// Time of the operation, CUPTI ns.
    pub timestamp: u64,
    /// Device ordinal.
    pub device_id: u32,
    /// Correlation id of the API call.
    pub correlation_id: u32,
    /// `CUpti_ActivityMemoryKind` (device = 3).
    pub memory_kind: u32,
}

/// One decoded activity record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A kernel.
    Kernel(KernelRecord),
    /// A copy.
    Memcpy(CopyRecord),
    /// A memset.
    Memset(CopyRecord),
    /// A synchronization wait.
    Sync(SyncRecord),
    /// A device-memory allocation or release.
    Memory(MemoryRecord),
    /// Time CUPTI spent on its own work.
    Overhead {
        /// `CUpti_ActivityOverheadKind`.
        overhead_kind: u32,
        /// Start, CUPTI ns.
        start: u64,
        /// End, CUPTI ns.
        end: u64,
    },
    /// A record of a kind gpu-ledger does not decode (counted, not lost silently).
    Other {
        /// `CUpti_ActivityKind`.
        activity_kind: u32,
    },
}

/// Every kernel name text this process has seen, each stored once and never freed.
///
/// Records carry kernel names as `&'static str`, so that decoding, grouping and dropping a kernel
/// record touch no shared reference count: the four atomic read-modify-writes per kernel record
/// of `Arc<str>` clones and drops were a tenth of the collector's attribution time. The cost is memory
/// that is never returned: one copy of each distinct name text for the life of the process,
/// whatever the number of runs, launches or modules (a few hundred bytes per kernel name; a JIT
/// that compiles 10 000 differently named kernels keeps about 3 MB).
static NAMES: parking_lot::Mutex<Option<rustc_hash::FxHashSet<&'static str>>> =
    parking_lot::Mutex::new(None);

/// The process's one copy of `text`, stored once and never freed (see `NAMES`).
pub(crate) fn intern_name(text: &str) -> &'static str {
    let mut names = NAMES.lock();
    let names = names.get_or_insert_with(Default::default);
    if let Some(name) = names.get(text) {
        return name;
    }
    let name: &'static str = Box::leak(text.into());
    names.insert(name);
    name
}

/// Interns kernel names: CUPTI hands out the same pointer for every launch of one function, so
/// the name is looked up by its address, with the text checked, and only a new address reaches
/// the process-wide table (`intern_name`).
pub struct NameCache {
    /// The names seen last, direct-mapped by address ([`NameCache::slot`]): an index and a
    /// compare where the hash map below took a probe sequence per kernel record.
    recent: Box<[(usize, &'static str); RECENT_NAMES]>,
    // FxHash: the keys are CUPTI's name addresses, not an attacker's; SipHash was a third of
    // the time to decode a kernel record.
    by_ptr: HashMap<usize, &'static str, rustc_hash::FxBuildHasher>,
}

/// Slots of [`NameCache::recent`]: a workload's distinct kernels, a few hundred at most, mostly
/// find their own slot.
const RECENT_NAMES: usize = 256;

impl Default for NameCache {
    fn default() -> Self {
        NameCache {
            recent: Box::new([(0, ""); RECENT_NAMES]),
            by_ptr: HashMap::default(),
        }
    }
}

impl NameCache {
    fn slot(ptr: usize) -> usize {
        // Names are at least 8-byte apart; the higher bits spread those of one module.
        ((ptr >> 3) ^ (ptr >> 11)) % RECENT_NAMES
    }

    /// The interned name at `ptr`.
    ///
    /// # Safety
    /// `ptr` is null or a NUL-terminated string that stays valid during the call.
    pub unsafe fn intern(&mut self, ptr: *const std::os::raw::c_char) -> &'static str {
        if ptr.is_null() {
            return "(unnamed)";
        }
        // SAFETY: the caller guarantees a NUL-terminated string.
        let bytes = unsafe { std::ffi::CStr::from_ptr(ptr) }.to_bytes();
        let address = ptr as usize;
        let slot = Self::slot(address);
        // A pointer can be reused after a module unload: the text is checked too.
        let (seen, name) = self.recent[slot];
        if seen == address && name.as_bytes() == bytes {
            return name;
        }
        let name = match self.by_ptr.get(&address) {
            Some(name) if name.as_bytes() == bytes => name,
            _ => {
                let name = intern_name(&String::from_utf8_lossy(bytes));
                self.by_ptr.insert(address, name);
                name
            }
        };
        self.recent[slot] = (address, name);
        name
    }
}

fn copy_direction(kind: u8) -> &'static str {
    match kind {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

fn sync_kind(kind: u32) -> &'static str {
    match kind {
        1 => "event",
        2 => "stream_wait_event",
        3 => "stream",
        4 => "context",
        _ => "unknown",
    }
}

fn dims(x: i32, y: i32, z: i32) -> [u32; 3] {
    [x.max(0) as u32, y.max(0) as u32, z.max(0) as u32]
}

/// A kernel record of any struct version: the fields gpu-ledger reads have the same names and
/// meaning in every version; `isDeviceLaunched` came with version 10.
macro_rules! kernel_record {
    (@launched $r:ident) => {
        false
    };
    (@launched $r:ident, $field:ident) => {
        $r.$field != 0
    };
    // `$rec` cast to `$t`; `isDeviceLaunched` read when named.
    ($rec:expr, $names:expr, $t:ty $(, $launched:ident)?) => {{
        let r = unsafe { &*($rec as *const $t) };
        Record::Kernel(KernelRecord {
            name: unsafe { $names.intern(r.name) },
            start: r.start,
            end: r.end,
            device_id: r.deviceId,
            context_id: r.contextId,
            stream_id: r.streamId,
            correlation_id: r.correlationId,
            shape: LaunchShape {
                grid: dims(r.gridX, r.gridY, r.gridZ),
                block: dims(r.blockX, r.blockY, r.blockZ),
                cluster: [r.clusterX, r.clusterY, r.clusterZ],
                registers_per_thread: u32::from(r.registersPerThread),
                static_shared_bytes: r.staticSharedMemory.max(0) as u32,
                dynamic_shared_bytes: r.dynamicSharedMemory.max(0) as u32,
                local_bytes_per_thread: r.localMemoryPerThread,
            },
            shared_executed_bytes: r.sharedMemoryExecuted,
            local_bytes_total: r.localMemoryTotal_v2,
            graph_id: r.graphId,
            graph_node_id: r.graphNodeId,
            device_launched: kernel_record!(@launched r $(, $launched)?),
        })
    }};
}

/// `CUpti_ActivityMemoryKind` of pageable host memory.
const PAGEABLE: u32 = sys::CUpti_ActivityMemoryKind::CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;

/// A copy or memset record of any struct version, as [`CopyRecord`]: a copy's asynchrony and
/// pageable memory from its flags and its source and destination kinds, a memset's from its
/// flags and its memory kind.
macro_rules! copy_record {
    (@copy $r:expr, $direction:expr) => {{
        let r = $r;
        let mut c = copy_record!(r, $direction);
        c.is_async =
            u32::from(r.flags) & sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC != 0;
        c.pageable = u32::from(r.srcKind) == PAGEABLE || u32::from(r.dstKind) == PAGEABLE;
        c
    }};
    (@memset $r:expr) => {{
        let r = $r;
        let mut c = copy_record!(r, "memset");
        c.is_async =
            u32::from(r.flags) & sys::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC != 0;
        c.pageable = u32::from(r.memoryKind) == PAGEABLE;
        c
    }};
    ($r:expr, $direction:expr) => {{
        let r = $r;
        CopyRecord {
            direction: $direction,
            bytes: r.bytes,
            start: r.start,
            end: r.end,
            device_id: r.deviceId,
            context_id: r.contextId,
            stream_id: r.streamId,
            correlation_id: r.correlationId,
            graph_id: r.graphId,
            graph_node_id: r.graphNodeId,
            is_async: false,
            pageable: false,
        }
    }};
}

/// A synchronization record of either struct version.
macro_rules! sync_record {
    ($r:expr) => {{
        let r = $r;
        Record::Sync(SyncRecord {
            kind: sync_kind(r.type_),
            start: r.start,
            end: r.end,
            correlation_id: r.correlationId,
            context_id: r.contextId,
            stream_id: r.streamId,
        })
    }};
}

/// Decodes one record written by a CUPTI whose record versions are `layouts`.
///
/// # Safety
/// `rec` points to a complete activity record handed out by `cuptiActivityGetNextRecord` for a
/// buffer produced by a CUPTI release that emits `layouts`
/// (the release its API version names).
pub unsafe fn decode(
    rec: *const sys::CUpti_Activity,
    names: &mut NameCache,
    layouts: &Layouts,
) -> Record {
    use super::layouts::{
        KernelLayout as K, MemcpyLayout as C, MemsetLayout as S, SyncLayout as Y,
    };
    use sys::CUpti_ActivityKind as k;
    // SAFETY (whole function): every record starts with its kind, and the release writes the
    // struct version `layouts` names for each kind, which is the one cast to below.
    let kind = unsafe { (*rec).kind };
    match kind {
        k::CUPTI_ACTIVITY_KIND_KERNEL | k::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL => {
            match layouts.kernel {
                K::V9 => kernel_record!(rec, names, sys::CUpti_ActivityKernel9),
                K::V10 => {
                    kernel_record!(rec, names, sys::CUpti_ActivityKernel10, isDeviceLaunched)
                }
                K::V11 => {
                    kernel_record!(
                        rec,
                        names,
                        sys::r13_5::CUpti_ActivityKernel11,
                        isDeviceLaunched
                    )
                }
                K::V12 => {
                    kernel_record!(
                        rec,
                        names,
                        sys::r13_5::CUpti_ActivityKernel12,
                        isDeviceLaunched
                    )
                }
                K::V13 => {
                    kernel_record!(
                        rec,
                        names,
                        sys::r13_5::CUpti_ActivityKernel13,
                        isDeviceLaunched
                    )
                }
            }
        }
        k::CUPTI_ACTIVITY_KIND_MEMCPY => Record::Memcpy(match layouts.memcpy {
            C::V5 => {
                let r = unsafe { &*(rec as *const sys::CUpti_ActivityMemcpy5) };
                copy_record!(@copy r, copy_direction(r.copyKind))
            }
            C::V6 => {
                let r = unsafe { &*(rec as *const sys::CUpti_ActivityMemcpy6) };
                copy_record!(@copy r, copy_direction(r.copyKind))
            }
            C::V7 => {
                let r = unsafe { &*(rec as *const sys::r13_5::CUpti_ActivityMemcpy7) };
                copy_record!(@copy r, copy_direction(r.copyKind))
            }
        }),
        k::CUPTI_ACTIVITY_KIND_MEMCPY2 => Record::Memcpy(copy_record!(
            @copy unsafe { &*(rec as *const sys::CUpti_ActivityMemcpyPtoP4) },
            "PtoP"
        )),
        k::CUPTI_ACTIVITY_KIND_MEMSET => Record::Memset(match layouts.memset {
            S::V4 => {
                copy_record!(@memset unsafe { &*(rec as *const sys::CUpti_ActivityMemset4) })
            }
            S::V5 => copy_record!(
                @memset unsafe { &*(rec as *const sys::r13_5::CUpti_ActivityMemset5) }
            ),
        }),
        k::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION => match layouts.sync {
            Y::V1 => sync_record!(unsafe { &*(rec as *const sys::CUpti_ActivitySynchronization) }),
            Y::V2 => {
                sync_record!(unsafe { &*(rec as *const sys::CUpti_ActivitySynchronization2) })
            }
        },
        k::CUPTI_ACTIVITY_KIND_MEMORY2 => {
            let r = unsafe { &*(rec as *const sys::CUpti_ActivityMemory4) };
            Record::Memory(MemoryRecord {
                allocation: r.memoryOperationType
                    == sys::CUpti_ActivityMemoryOperationType::CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
                address: r.address,
                bytes: r.bytes,
                timestamp: r.timestamp,
                device_id: r.deviceId,
                correlation_id: r.correlationId,
                memory_kind: r.memoryKind,
            })
        }
        k::CUPTI_ACTIVITY_KIND_OVERHEAD => {
            let r = unsafe { &*(rec as *const sys::CUpti_ActivityOverhead3) };
            Record::Overhead {
                overhead_kind: r.overheadKind,
                start: r.start,
                end: r.end,
            }
        }
        other => Record::Other {
            activity_kind: other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn a_name_address_reused_for_another_text_gives_the_new_text() {
        let mut names = NameCache::default();
        let mut buf = *b"kernel_a\0";
        let ptr = buf.as_ptr().cast();
        // SAFETY: `buf` is NUL-terminated and alive.
        let a = unsafe { names.intern(ptr) };
        assert_eq!(a, "kernel_a");
        // SAFETY: as above.
        assert!(std::ptr::eq(a, unsafe { names.intern(ptr) }), "cached");
        buf[7] = b'b'; // the module was unloaded and another one's name landed here
                       // SAFETY: as above.
        assert_eq!(unsafe { names.intern(buf.as_ptr().cast()) }, "kernel_b");
        buf[7] = b'a';
        // SAFETY: as above.
        assert!(std::ptr::eq(a, unsafe {
            names.intern(buf.as_ptr().cast())
        }));
    }

    #[test]
    fn names_whose_addresses_share_a_slot_are_all_kept() {
        let mut names = NameCache::default();
        // One block of names 8 bytes apart: 2 048 of them cover every slot several times.
        let block: Vec<u8> = (0..2048u32)
            .flat_map(|i| {
                let mut n = format!("k{i:05}").into_bytes();
                n.resize(8, 0);
                n
            })
            .collect();
        let intern = |names: &mut NameCache, i: usize| {
            // SAFETY: each 8-byte entry holds a NUL-terminated name; `block` is alive.
            unsafe { names.intern(block[i * 8..].as_ptr().cast()) }
        };
        for round in 0..2 {
            for i in 0..2048 {
                assert_eq!(intern(&mut names, i), format!("k{i:05}"), "round {round}");
            }
        }
    }

    // Records laid out exactly as CUPTI 13.0 writes them (run under valgrind by
    // scripts/memcheck.sh).

    #[test]
    fn a_kernel_record_decodes_every_field_and_names_are_interned() {
        let name = CString::new("vector_add").unwrap();
        let mut k = sys::CUpti_ActivityKernel10 {
            kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            start: 1_000,
            end: 3_500,
            deviceId: 0,
            contextId: 1,
            streamId: 7,
            gridX: 4096,
            gridY: 1,
            gridZ: 1,
            blockX: 256,
            blockY: 1,
            blockZ: 1,
            registersPerThread: 16,
            staticSharedMemory: 0,
            dynamicSharedMemory: 1024,
            localMemoryPerThread: 8,
            localMemoryTotal_v2: 1 << 20,
            correlationId: 42,
            name: name.as_ptr(),
            graphId: 3,
            graphNodeId: 9,
            ..Default::default()
        };
        let mut names = NameCache::default();
        // SAFETY: `k` is a complete, correctly laid out kernel record whose name outlives the call.
        let rec = unsafe {
            decode(
                (&mut k as *mut sys::CUpti_ActivityKernel10).cast(),
                &mut names,
                &Layouts::BOUND,
            )
        };
        let Record::Kernel(r) = rec else {
            panic!("not a kernel: {rec:?}")
        };
        assert_eq!(r.name, "vector_add");
        assert_eq!(
            (r.start, r.end, r.stream_id, r.correlation_id),
            (1_000, 3_500, 7, 42)
        );
        assert_eq!(r.shape.grid, [4096, 1, 1]);
        assert_eq!(r.shape.block, [256, 1, 1]);
        assert_eq!(
            (
                r.shape.registers_per_thread,
                r.shape.dynamic_shared_bytes,
                r.shape.local_bytes_per_thread
            ),
            (16, 1024, 8)
        );
        assert_eq!(
            (r.graph_id, r.graph_node_id, r.local_bytes_total),
            (3, 9, 1 << 20)
        );
        // The same pointer again: the interned name is shared, not copied.
        // SAFETY: as above.
        let again = unsafe {
            decode(
                (&mut k as *mut sys::CUpti_ActivityKernel10).cast(),
                &mut names,
                &Layouts::BOUND,
            )
        };
        let Record::Kernel(r2) = again else { panic!() };
        assert!(std::ptr::eq(r.name, r2.name));
    }

    #[test]
    fn copies_memsets_api_and_correlation_records_decode() {
        let mut names = NameCache::default();
        let mut m = sys::CUpti_ActivityMemcpy6 {
            kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
            copyKind: 2,
            bytes: 4096,
            start: 10,
            end: 20,
            correlationId: 5,
            ..Default::default()
        };
        // SAFETY: complete memcpy record.
        match unsafe {
            decode(
                (&mut m as *mut sys::CUpti_ActivityMemcpy6).cast(),
                &mut names,
                &Layouts::BOUND,
            )
        } {
            Record::Memcpy(c) => {
                assert_eq!((c.direction, c.bytes, c.correlation_id), ("DtoH", 4096, 5));
                assert!(!c.is_async && !c.pageable);
            }
            other => panic!("{other:?}"),
        }
        // An asynchronous copy into pageable memory (what `.item()` does).
        m.flags = 1;
        m.dstKind = 1;
        m.srcKind = 3;
        // SAFETY: complete memcpy record.
        match unsafe {
            decode(
                (&mut m as *mut sys::CUpti_ActivityMemcpy6).cast(),
                &mut names,
                &Layouts::BOUND,
            )
        } {
            Record::Memcpy(c) => assert!(c.is_async && c.pageable, "{c:?}"),
            other => panic!("{other:?}"),
        }
        let mut s = sys::CUpti_ActivityMemset4 {
            kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
            bytes: 64,
            correlationId: 6,
            ..Default::default()
        };
        // SAFETY: complete memset record.
        assert!(
            matches!(unsafe { decode((&mut s as *mut sys::CUpti_ActivityMemset4).cast(), &mut names, &Layouts::BOUND) }, Record::Memset(r) if r.bytes == 64)
        );
        // The timeline enables no API or external-correlation records (its callback captures the
        // calls); one that comes anyway is kept as a kind not decoded, never misread.
        let mut a = sys::CUpti_ActivityAPI {
            kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
            cbid: 307,
            start: 1,
            end: 2,
            correlationId: 6,
            ..Default::default()
        };
        // SAFETY: complete API record.
        assert_eq!(
            unsafe {
                decode(
                    (&mut a as *mut sys::CUpti_ActivityAPI).cast(),
                    &mut names,
                    &Layouts::BOUND,
                )
            },
            Record::Other {
                activity_kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER
            }
        );
        let mut other = sys::CUpti_ActivityAPI {
            kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_NVLINK,
            ..Default::default()
        };
        // SAFETY: only the kind is read for kinds gpu-ledger does not decode.
        assert!(matches!(
            unsafe {
                decode(
                    (&mut other as *mut sys::CUpti_ActivityAPI).cast(),
                    &mut names,
                    &Layouts::BOUND,
                )
            },
            Record::Other { .. }
        ));
    }

    use super::super::layouts::{KernelLayout, MemcpyLayout, MemsetLayout, SyncLayout};
    use proptest::prelude::*;

    /// The layouts with `kernel`, `memcpy`, `memset` and `sync` versions.
    fn layouts(
        kernel: KernelLayout,
        memcpy: MemcpyLayout,
        memset: MemsetLayout,
        sync: SyncLayout,
    ) -> Layouts {
        Layouts {
            kernel,
            memcpy,
            memset,
            sync,
        }
    }

    /// Decodes `record` (a struct of one version, as CUPTI writes it) with `layouts`.
    fn decode_as<T>(record: &mut T, layouts: &Layouts, names: &mut NameCache) -> Record {
        // SAFETY: `record` is a complete record of the version `layouts` names for its kind,
        // alive for the call; a kernel's name points to a live C string.
        unsafe { decode((record as *mut T).cast(), names, layouts) }
    }

    /// A kernel record of every struct version decodes to the same fields.
    macro_rules! kernel_case {
        ($ty:ty, $layout:expr, $launched:expr, $start:expr, $len:expr, $corr:expr, $grid:expr, $stream:expr, $name:expr) => {{
            let mut k: $ty = Default::default();
            k.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            k.start = $start;
            k.end = $start + $len;
            k.correlationId = $corr;
            k.streamId = $stream;
            k.gridX = $grid;
            k.gridY = 2;
            k.gridZ = 1;
            k.blockX = 128;
            k.blockY = 1;
            k.blockZ = 1;
            k.clusterX = 2;
            k.registersPerThread = 40;
            k.localMemoryTotal_v2 = u64::from($corr) << 8;
            k.graphId = $corr ^ 5;
            k.graphNodeId = u64::from($stream) + 3;
            k.name = $name.as_ptr();
            let launched = $launched(&mut k);
            let mut names = NameCache::default();
            let l = layouts($layout, MemcpyLayout::V6, MemsetLayout::V4, SyncLayout::V2);
            let Record::Kernel(r) = decode_as(&mut k, &l, &mut names) else {
                panic!("{}: not a kernel", stringify!($ty));
            };
            prop_assert_eq!(r.name, $name.to_str().unwrap());
            prop_assert_eq!(
                (r.start, r.end, r.correlation_id, r.stream_id),
                ($start, $start + $len, $corr, $stream)
            );
            prop_assert_eq!(r.shape.grid, [$grid.max(0) as u32, 2, 1]);
            prop_assert_eq!(r.shape.block, [128, 1, 1]);
            prop_assert_eq!(r.shape.cluster, [2, 0, 0]);
            prop_assert_eq!(r.shape.registers_per_thread, 40);
            prop_assert_eq!(r.local_bytes_total, u64::from($corr) << 8);
            prop_assert_eq!(
                (r.graph_id, r.graph_node_id),
                ($corr ^ 5, u64::from($stream) + 3)
            );
            prop_assert_eq!(r.device_launched, launched, "{}", stringify!($ty));
        }};
    }

    proptest! {
        #[test]
        fn kernel_records_of_every_release_decode_with_their_own_layout(
            start in 0u64..(1 << 62), len in 0u64..(1 << 30), corr in any::<u32>(),
            grid in 1i32..(1 << 20), stream in any::<u32>(), launched in any::<bool>(),
        ) {
            let name = CString::new("gemm_kernel").unwrap();
            let flag = u8::from(launched);
            kernel_case!(sys::CUpti_ActivityKernel9, KernelLayout::V9, |_: &mut sys::CUpti_ActivityKernel9| false, start, len, corr, grid, stream, name);
            kernel_case!(sys::CUpti_ActivityKernel10, KernelLayout::V10, |k: &mut sys::CUpti_ActivityKernel10| { k.isDeviceLaunched = flag; launched }, start, len, corr, grid, stream, name);
            kernel_case!(sys::r13_5::CUpti_ActivityKernel11, KernelLayout::V11, |k: &mut sys::r13_5::CUpti_ActivityKernel11| { k.isDeviceLaunched = flag; launched }, start, len, corr, grid, stream, name);
            kernel_case!(sys::r13_5::CUpti_ActivityKernel12, KernelLayout::V12, |k: &mut sys::r13_5::CUpti_ActivityKernel12| { k.isDeviceLaunched = flag; launched }, start, len, corr, grid, stream, name);
            kernel_case!(sys::r13_5::CUpti_ActivityKernel13, KernelLayout::V13, |k: &mut sys::r13_5::CUpti_ActivityKernel13| { k.isDeviceLaunched = flag; launched }, start, len, corr, grid, stream, name);
        }

        #[test]
        fn copy_memset_and_sync_records_of_every_release_decode_with_their_own_layout(
            bytes in any::<u64>(), start in 0u64..(1 << 62), corr in any::<u32>(), stream in any::<u32>(),
        ) {
            let mut names = NameCache::default();
            macro_rules! copy_case {
                ($ty:ty, $l:expr, $kind:expr, $direction:expr) => {{
                    let mut c: $ty = Default::default();
                    c.kind = $kind;
                    c.bytes = bytes;
                    c.start = start;
                    c.end = start + 10;
                    c.correlationId = corr;
                    c.streamId = stream;
                    c.graphId = 7;
                    let r = match decode_as(&mut c, &$l, &mut names) {
                        Record::Memcpy(r) | Record::Memset(r) => r,
                        other => panic!("{}: {other:?}", stringify!($ty)),
                    };
                    prop_assert_eq!((r.bytes, r.start, r.end, r.correlation_id, r.stream_id, r.graph_id), (bytes, start, start + 10, corr, stream, 7), "{}", stringify!($ty));
                    prop_assert_eq!(r.direction, $direction);
                }};
            }
            use KernelLayout::V10 as K;
            use sys::CUpti_ActivityKind as k;
            let memcpy = |v| layouts(K, v, MemsetLayout::V4, SyncLayout::V2);
            let memset = |v| layouts(K, MemcpyLayout::V6, v, SyncLayout::V2);
            copy_case!(sys::CUpti_ActivityMemcpy5, memcpy(MemcpyLayout::V5), k::CUPTI_ACTIVITY_KIND_MEMCPY, "unknown");
            copy_case!(sys::CUpti_ActivityMemcpy6, memcpy(MemcpyLayout::V6), k::CUPTI_ACTIVITY_KIND_MEMCPY, "unknown");
            copy_case!(sys::r13_5::CUpti_ActivityMemcpy7, memcpy(MemcpyLayout::V7), k::CUPTI_ACTIVITY_KIND_MEMCPY, "unknown");
            copy_case!(sys::CUpti_ActivityMemset4, memset(MemsetLayout::V4), k::CUPTI_ACTIVITY_KIND_MEMSET, "memset");
            copy_case!(sys::r13_5::CUpti_ActivityMemset5, memset(MemsetLayout::V5), k::CUPTI_ACTIVITY_KIND_MEMSET, "memset");
            macro_rules! sync_case {
                ($ty:ty, $v:expr) => {{
                    let mut y: $ty = Default::default();
                    y.kind = k::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
                    y.type_ = 3;
                    y.start = start;
                    y.end = start + 1;
                    y.correlationId = corr;
                    y.streamId = stream;
                    let l = layouts(K, MemcpyLayout::V6, MemsetLayout::V4, $v);
                    let Record::Sync(r) = decode_as(&mut y, &l, &mut names) else {
                        panic!("{}: not a sync", stringify!($ty));
                    };
                    prop_assert_eq!((r.kind, r.start, r.correlation_id, r.stream_id), ("stream", start, corr, stream));
                }};
            }
            sync_case!(sys::CUpti_ActivitySynchronization, SyncLayout::V1);
            sync_case!(sys::CUpti_ActivitySynchronization2, SyncLayout::V2);
        }
    }

    #[test]
    fn record_versions_grow_and_keep_the_fields_gpu_ledger_reads_at_their_offsets() {
        // A later version appends fields: what gpu-ledger reads sits where it sat in the first
        // version it decodes, so a record of the wrong version would misread only the tail.
        use std::mem::{offset_of, size_of};
        macro_rules! same_offsets {
            ($a:ty, $b:ty, [$($f:ident),*]) => {
                $(assert_eq!(offset_of!($a, $f), offset_of!($b, $f), "{} in {} and {}", stringify!($f), stringify!($a), stringify!($b));)*
                assert!(size_of::<$a>() <= size_of::<$b>());
            };
        }
        same_offsets!(
            sys::CUpti_ActivityKernel9,
            sys::r13_5::CUpti_ActivityKernel13,
            [
                start,
                end,
                correlationId,
                name,
                gridX,
                graphId,
                graphNodeId,
                clusterX,
                localMemoryTotal_v2
            ]
        );
        same_offsets!(
            sys::CUpti_ActivityKernel10,
            sys::r13_5::CUpti_ActivityKernel11,
            [isDeviceLaunched]
        );
        same_offsets!(
            sys::CUpti_ActivityMemcpy5,
            sys::r13_5::CUpti_ActivityMemcpy7,
            [bytes, start, end, correlationId, graphId, graphNodeId]
        );
        same_offsets!(
            sys::CUpti_ActivityMemset4,
            sys::r13_5::CUpti_ActivityMemset5,
            [bytes, start, end, correlationId, graphId, graphNodeId]
        );
    }
}
