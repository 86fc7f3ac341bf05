//! The host calls the funnel asks to find in the steady state, per row: synchronizations,
//! synchronous copies and memsets, small device-to-host reads, allocations and frees, by kind,
//! scope, function and device.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use super::super::attribution::{Activity, HostCall, Placed};
use super::model::Launch;
use crate::cupti::functions::CallKind;
use crate::ledger::idle::InventoryEntry;
use crate::run::PathTable;

/// What a row's placed records say of a call, by the call's correlation id.
#[derive(Default, Clone, Copy)]
pub(crate) struct CallRecords {
    /// Bytes of its copy, memset or allocation.
    pub(crate) bytes: Option<u64>,
    pub(crate) device: Option<u32>,
    /// Its copy touched pageable host memory.
    pub(crate) pageable: bool,
    /// The host wait CUPTI's synchronization record gives it, `(start, end)`.
    pub(crate) wait: Option<(u64, u64)>,
}

/// The records of `placed` by their call, into `out` (emptied first).
pub(crate) fn records_by_call(placed: &[Placed], out: &mut HashMap<u32, CallRecords>) {
    out.clear();
    for p in placed {
        // Kernels say nothing the inventory or the painter needs of their call.
        if matches!(p.activity, Activity::Kernel(_)) {
            continue;
        }
        let r = out.entry(p.call_id).or_default();
        match &p.activity {
            Activity::Memcpy(c) | Activity::Memset(c) => {
                r.bytes = Some(r.bytes.unwrap_or(0) + c.bytes);
                r.device = Some(c.device_id);
                r.pageable |= c.pageable;
            }
            Activity::Memory(m) => {
                r.bytes = Some(r.bytes.unwrap_or(0) + m.bytes);
                r.device = Some(m.device_id);
            }
            Activity::Sync(s) => r.wait = Some((s.start, s.end)),
            Activity::Kernel(_) => {}
        }
    }
}

/// The inventory kind of a call, when it is one the funnel lists.
pub(crate) fn inventory_kind(kind: CallKind, pageable: bool) -> Option<&'static str> {
    Some(match kind {
        CallKind::DeviceSync => "device_sync",
        CallKind::StreamSync => "stream_sync",
        CallKind::EventSync => "event_sync",
        CallKind::CopySync => "sync_copy",
        CallKind::CopyAsync if pageable => "sync_copy",
        CallKind::MemsetSync => "sync_memset",
        CallKind::Alloc | CallKind::AllocAsync => "alloc",
        CallKind::Free | CallKind::FreeAsync => "free",
        _ => return None,
    })
}

/// Totals of one inventory line.
#[derive(Default)]
struct Tally {
    count: u64,
    host_ns: u64,
    bytes: Option<u64>,
    synchronous: Option<u64>,
}

/// A row's inventory: its calls of the kinds the funnel lists, and its device-to-host copies of
/// at most `small_read_bytes`.
pub(crate) fn inventory(
    calls: &[HostCall],
    placed: &[Placed],
    records: &HashMap<u32, CallRecords>,
    launches: &HashMap<u32, Launch>,
    small_read_bytes: u64,
    paths: &PathTable,
) -> Vec<InventoryEntry> {
    type Key = (&'static str, u32, Option<&'static str>, Option<u32>);
    let mut lines: BTreeMap<Key, Tally> = BTreeMap::new();
    for c in calls {
        let r = records.get(&c.correlation_id).copied().unwrap_or_default();
        let Some(kind) = inventory_kind(c.kind, r.pageable) else {
            continue;
        };
        let t = lines
            .entry((kind, c.path_id, Some(c.function), r.device))
            .or_default();
        t.count += 1;
        t.host_ns += r
            .wait
            .map_or(c.exit_ns.saturating_sub(c.entry_ns), |(s, e)| {
                e.saturating_sub(s)
            });
        if let Some(b) = r.bytes {
            t.bytes = Some(t.bytes.unwrap_or(0) + b);
        }
    }
    for p in placed {
        let Activity::Memcpy(c) = &p.activity else {
            continue;
        };
        if c.direction != "DtoH" || c.bytes > small_read_bytes {
            continue;
        }
        let call = launches
            .get(&p.call_id)
            .and_then(|l| calls.get(l.index as usize));
        let t = lines
            .entry((
                "small_dtoh",
                p.path_id,
                call.map(|c| c.function),
                Some(c.device_id),
            ))
            .or_default();
        t.count += 1;
        t.bytes = Some(t.bytes.unwrap_or(0) + c.bytes);
        let synchronous = c.pageable || call.is_some_and(|c| c.kind == CallKind::CopySync);
        *t.synchronous.get_or_insert(0) += u64::from(synchronous);
        t.host_ns += call.map_or(0, |c| c.exit_ns.saturating_sub(c.entry_ns));
    }
    let mut out: Vec<InventoryEntry> = lines
        .into_iter()
        .map(|((kind, path, function, device_id), t)| InventoryEntry {
            kind: kind.into(),
            scope: paths.path(path),
            function: function.map(Into::into),
            device_id,
            count: t.count,
            host_ns: t.host_ns,
            bytes: t.bytes,
            synchronous: t.synchronous,
        })
        .collect();
    out.sort_by(|a, b| {
        (&a.kind, &a.scope, &a.function, a.device_id).cmp(&(
            &b.kind,
            &b.scope,
            &b.function,
            b.device_id,
        ))
    });
    out
}
