//! Row assembly: one pass over an iteration's placed activities gives its devices' busy time
//! and largest gap, its kernel groups, copies, memsets and waits by kind, its scopes' device
//! time (own and inclusive of children), host time and event-timed device time, and the peak of
//! traced device memory; with `record_activities`, every activity and scope span as well.

// FxHash for the per-row maps: keys are device numbers, path ids and static names, not attacker
// input.
use rustc_hash::FxHashMap as HashMap;

use cupti_sys as sys;

use super::attribution::{Activity, Placed};
use super::idle::{IdleRows, RowInputs};
use super::kernel_groups::KernelGroups;
use super::launch_threads::{KernelAttribution, LaunchTally};
use super::scope_busy::ScopeBusyTable;
use super::window::IterationState;
use crate::counters::launches::AutoRangeLaunches;
use crate::counters::{IterationCounters, Launch};
use crate::cupti::record::{CopyRecord, KernelRecord, MemoryRecord};
use crate::ledger::schema::{
    ActivityEntry, CopyGroup, DeviceIteration, IterationRow, KernelGroup, ScopeRow, ScopeSpan,
    SyncGroup, TracingCalibration,
};
use crate::run::RunState;
use crate::run::{PathTable, ScopeRecord};
use gpu_ledger_format::intervals::BusyAccumulator;

/// Builds rows. Its tables are kept from row to row, with the capacity they grew to, and it
/// carries the device memory live across iterations.
pub(super) struct RowBuilder {
    kernel_groups: KernelGroups,
    launches: LaunchTally,
    device_busy: Vec<DeviceBusy>,
    scope_busy: ScopeBusyTable,
    /// Device memory bookkeeping: bytes live per device, and sizes by address.
    live_bytes: HashMap<u32, i64>,
    alloc_sizes: HashMap<(u32, u64), u64>,
    /// Keep every activity and scope span in the row.
    record_activities: bool,
    /// Counters use auto ranges: name each range from the iteration's kernel records.
    auto_ranges: bool,
    /// What tracing adds per kernel, when it was calibrated at start.
    pub(super) calibration: Option<TracingCalibration>,
    /// PC samples' rows, when PC sampling was set up.
    stall_rows: Option<super::stalls::StallRows>,
    /// The split of idle time by cause, when it is on.
    pub(super) idle: Option<IdleRows>,
}

impl RowBuilder {
    /// The trailer's note on kernels attributed by following a thread, when there were any.
    pub(super) fn follow_note(&self) -> Option<String> {
        self.launches.follow_note()
    }

    pub(super) fn new(
        record_activities: bool,
        auto_ranges: bool,
        calibration: Option<TracingCalibration>,
    ) -> Self {
        RowBuilder {
            kernel_groups: KernelGroups::default(),
            launches: LaunchTally::default(),
            device_busy: Vec::new(),
            scope_busy: ScopeBusyTable::default(),
            live_bytes: HashMap::default(),
            alloc_sizes: HashMap::default(),
            record_activities,
            auto_ranges,
            calibration,
            stall_rows: None,
            idle: None,
        }
    }

    /// Rows split their devices' idle time by cause as `idle` says.
    pub(super) fn with_idle(mut self, idle: Option<crate::config::IdleConfig>) -> Self {
        self.set_idle(idle);
        self
    }

    /// [`with_idle`](Self::with_idle) in place.
    pub(super) fn set_idle(&mut self, idle: Option<crate::config::IdleConfig>) {
        self.idle = idle.map(IdleRows::new);
    }

    /// The dispatch floor each device's rows used last, for the trailer.
    pub(super) fn dispatch_floors(&self) -> Vec<crate::ledger::idle::DispatchFloor> {
        self.idle
            .as_ref()
            .map(IdleRows::dispatch_floors)
            .unwrap_or_default()
    }

    /// A kernel of the start-up calibration, whose back-to-back gaps give the dispatch floor.
    pub(super) fn add_calibration_kernel(&mut self, k: &crate::cupti::record::KernelRecord) {
        if let Some(idle) = &mut self.idle {
            idle.add_calibration_kernel(k);
        }
    }

    /// Hands a written row to PC sampling's planner, when PC sampling was set up.
    pub(super) fn observe_stalls(&self, row: &IterationRow) {
        if let Some(s) = &self.stall_rows {
            s.observe(row);
        }
    }

    /// PC sampling's profile of the run for the trailer, when it read a window or was
    /// duty-cycled, and the warning of top kernels a duty cycle left short of samples;
    /// `run_ns` is the run's wall time.
    pub(super) fn stall_trailer(
        &self,
        run_ns: u64,
    ) -> (Option<crate::ledger::stalls::RunStalls>, Option<String>) {
        self.stall_rows
            .as_ref()
            .map_or((None, None), |s| s.trailer(run_ns))
    }

    /// Rows carry PC samples through `stall_rows`, when PC sampling was set up.
    pub(super) fn with_stalls(mut self, stall_rows: Option<super::stalls::StallRows>) -> Self {
        self.stall_rows = stall_rows;
        self
    }

    /// The row of iteration `it`, written `incomplete` when the run ended before it could wait
    /// for its records; `dropped_now` is CUPTI's count of dropped records so far, and `settle`
    /// how long a row waits for its records (for the warning of a row written without them).
    pub(super) fn build(
        &mut self,
        running: &RunState,
        it: &mut IterationState,
        incomplete: bool,
        dropped_now: u64,
        settle: std::time::Duration,
    ) -> IterationRow {
        let paths = &running.paths;
        if it.counters.is_some() {
            claim_counters_kernels(&mut it.placed, running.counters_path);
        }
        let missing = missing_records(it, settle);
        let Gathered {
            copies,
            memsets,
            syncs,
            memory_events,
        } = self.gather(paths, &it.placed);
        let peaks = self.memory_peaks(memory_events);
        let mut devices = self.devices(&peaks);
        let host_inventory = self.explain_idle(running, it, &mut devices);
        let scopes = self.scopes(it, paths);
        let kernel_groups = self.kernel_groups.finish();
        let tracing_added_ns = self.tracing_added_ns(&kernel_groups, it.traced);
        let mut memcpy: Vec<CopyGroup> = copies.into_values().collect();
        memcpy.sort_by(|a, b| (a.device_id, &a.kind).cmp(&(b.device_id, &b.kind)));
        let mut memset: Vec<CopyGroup> = memsets.into_values().collect();
        memset.sort_by_key(|g| g.device_id);
        let mut synchronization: Vec<SyncGroup> = syncs.into_values().collect();
        synchronization.sort_by(|a, b| a.kind.cmp(&b.kind));
        let host_end = it.host_end_ns().unwrap_or(it.host_start_ns);
        let mut counters = it.counters.take();
        if let Some(c) = counters.as_mut().filter(|c| self.auto_ranges && c.complete) {
            if let Some(w) = name_auto_ranges(c, &it.placed) {
                it.warnings.push(w);
            }
        }
        let stalls = match (it.stalls.take(), self.stall_rows.as_mut()) {
            (Some(s), Some(rows)) => Some(rows.build(s, &it.placed, paths, &mut it.warnings)),
            _ => None,
        };
        let (attribution, mut launch_threads) =
            self.launches
                .finish(running.calls(), !it.scopes.is_empty(), &mut it.warnings);
        if let Some(sched) = &it.sched {
            super::sched::fill(&mut launch_threads, sched, running.calls());
        }
        let (activities, scope_spans) = if self.record_activities {
            (
                Some(activity_entries(&it.placed, paths)),
                Some(scope_spans(&it.scopes, paths)),
            )
        } else {
            (None, None)
        };
        IterationRow {
            index: it.index,
            host_start_ns: it.host_start_ns,
            host_wall_ns: host_end.saturating_sub(it.host_start_ns),
            complete: !incomplete && missing == 0,
            perturbed: counters.is_some() || stalls.is_some(),
            devices,
            scopes,
            kernels: kernel_groups,
            memcpy,
            memset,
            synchronization,
            dropped_records: dropped_now.saturating_sub(it.dropped_at_start),
            missing_records: missing,
            nvml: Vec::new(),
            warnings: std::mem::take(&mut it.warnings),
            activities,
            scope_spans,
            counters,
            attribution: it.traced.then_some(attribution),
            launch_threads,
            untraced: !it.traced,
            tracing_added_ns,
            stalls,
            host_inventory,
        }
    }

    /// Splits each device's idle time by cause, when that is on; the row's host inventory.
    fn explain_idle(
        &mut self,
        running: &RunState,
        it: &IterationState,
        devices: &mut [DeviceIteration],
    ) -> Vec<crate::ledger::idle::InventoryEntry> {
        let Some(idle) = &mut self.idle else {
            return Vec::new();
        };
        let inputs = RowInputs {
            placed: &it.placed,
            host_calls: &it.host_calls,
            scopes: &it.scopes,
            host_start_ns: it.host_start_ns,
            end_pair: it.host_end_ns().zip(it.cupti_end()),
            traced: it.traced,
        };
        idle.explain(&inputs, devices, running.calls(), &running.paths)
    }

    /// One pass over the placed activities: devices' intervals, kernel groups, launch tallies
    /// and scopes' intervals go into the builder's tables (kept across rows, with the capacity
    /// they grew to); copies, memsets, waits and memory events into what it returns.
    fn gather<'p>(&mut self, paths: &PathTable, placed: &'p [Placed]) -> Gathered<'p> {
        let mut per_device = std::mem::take(&mut self.device_busy);
        let mut kernels = std::mem::take(&mut self.kernel_groups);
        let mut g = Gathered {
            copies: HashMap::default(),
            memsets: HashMap::default(),
            syncs: HashMap::default(),
            memory_events: Vec::new(),
        };
        let mut scope_busy = std::mem::take(&mut self.scope_busy);
        let launches = &mut self.launches;
        for p in placed {
            let (device_id, interval, kernel) = match &p.activity {
                Activity::Kernel(k) => {
                    kernels.add(k);
                    let a = KernelAttribution::of(p.by, p.path_id);
                    launches.add_kernel(p.by, a, k.end.saturating_sub(k.start));
                    (k.device_id, (k.start, k.end), true)
                }
                Activity::Memcpy(c) => {
                    launches.add_copy(p.by);
                    add_transfer(&mut g.copies, c)
                }
                Activity::Memset(m) => {
                    launches.add_copy(p.by);
                    add_transfer(&mut g.memsets, m)
                }
                Activity::Sync(s) => {
                    let w = g.syncs.entry(s.kind).or_insert_with(|| SyncGroup {
                        kind: s.kind.into(),
                        count: 0,
                        total_ns: 0,
                    });
                    w.count += 1;
                    w.total_ns += s.end.saturating_sub(s.start);
                    continue;
                }
                Activity::Memory(m) => {
                    g.memory_events.push(m);
                    continue;
                }
            };
            // A handful of devices: a linear search beats hashing.
            let d = match per_device.iter().position(|d| d.device_id == device_id) {
                Some(i) => &mut per_device[i],
                None => {
                    per_device.push(DeviceBusy {
                        device_id,
                        busy: BusyAccumulator::default(),
                        kernels: 0,
                    });
                    per_device.last_mut().expect("just pushed")
                }
            };
            d.busy.push(interval);
            d.kernels += u64::from(kernel);
            scope_busy.add(paths, p.path_id, interval, kernel);
        }
        self.device_busy = per_device;
        self.kernel_groups = kernels;
        self.scope_busy = scope_busy;
        g
    }

    /// Peak device memory per device, in time order, carrying live bytes across iterations.
    fn memory_peaks(&mut self, mut memory_events: Vec<&MemoryRecord>) -> HashMap<u32, u64> {
        memory_events.sort_by_key(|m| m.timestamp);
        let mut peaks: HashMap<u32, u64> = HashMap::default();
        for m in memory_events {
            if m.memory_kind != DEVICE_MEMORY_KIND {
                continue;
            }
            let live = self.live_bytes.entry(m.device_id).or_insert(0);
            if m.allocation {
                *live += m.bytes as i64;
                self.alloc_sizes.insert((m.device_id, m.address), m.bytes);
            } else {
                let bytes = self
                    .alloc_sizes
                    .remove(&(m.device_id, m.address))
                    .unwrap_or(m.bytes);
                *live -= bytes as i64;
            }
            let peak = peaks.entry(m.device_id).or_insert(0);
            *peak = (*peak).max((*live).max(0) as u64);
        }
        peaks
    }

    /// The row's devices, by device number, from the intervals gathered; empties the
    /// per-device table for the next row.
    fn devices(&mut self, peaks: &HashMap<u32, u64>) -> Vec<DeviceIteration> {
        let mut devices: Vec<DeviceIteration> = self
            .device_busy
            .iter_mut()
            .filter_map(|d| {
                let b = d.busy.summary()?;
                let live = self
                    .live_bytes
                    .get(&d.device_id)
                    .map(|v| (*v).max(0) as u64);
                Some(DeviceIteration {
                    device_id: d.device_id,
                    first_start_ns: b.first_start_ns,
                    last_end_ns: b.last_end_ns,
                    busy_ns: b.busy_ns,
                    idle_ns: b.idle_ns,
                    largest_gap_ns: b.largest_gap_ns,
                    kernel_count: d.kernels,
                    peak_memory_bytes: peaks.get(&d.device_id).copied().or(live),
                    idle: None,
                })
            })
            .collect();
        devices.sort_by_key(|d| d.device_id);
        for d in &mut self.device_busy {
            d.busy.clear();
            d.kernels = 0;
        }
        devices
    }

    /// The row's scopes: calls and host time from the scope records, event-timed device time,
    /// and own and inclusive device time from the intervals gathered; by path, then path id
    /// (ids the path table does not know all read `(unscoped)`).
    fn scopes(&mut self, it: &IterationState, paths: &PathTable) -> Vec<ScopeRow> {
        let mut rows: HashMap<u32, ScopeRow> = HashMap::default();
        let new_row = |id: u32| ScopeRow {
            path: paths.path(id),
            calls: 0,
            host_ns: 0,
            launches: 0,
            kernels: 0,
            device_ns: 0,
            device_ns_inclusive: 0,
            event_device_ns: None,
        };
        for s in &it.scopes {
            let r = rows.entry(s.path_id).or_insert_with(|| new_row(s.path_id));
            r.calls += 1;
            r.host_ns += s.end_ns.saturating_sub(s.start_ns);
        }
        for (path_id, ns) in &it.event_ns {
            rows.entry(*path_id)
                .or_insert_with(|| new_row(*path_id))
                .event_device_ns = Some(*ns);
        }
        let busy_rows = self.scope_busy.finish();
        for b in &busy_rows.own {
            let r = rows.entry(b.path_id).or_insert_with(|| new_row(b.path_id));
            r.launches += b.launches;
            r.kernels = b.kernels;
            r.device_ns = b.busy_ns;
        }
        for b in &busy_rows.inclusive {
            rows.entry(b.path_id)
                .or_insert_with(|| new_row(b.path_id))
                .device_ns_inclusive = b.busy_ns;
        }
        let mut scopes: Vec<(u32, ScopeRow)> = rows.into_iter().collect();
        scopes.sort_by(|a, b| a.1.path.cmp(&b.1.path).then(a.0.cmp(&b.0)));
        scopes.into_iter().map(|(_, row)| row).collect()
    }

    /// What tracing added to a traced row's kernels, by the calibration made at start.
    fn tracing_added_ns(&self, kernel_groups: &[KernelGroup], traced: bool) -> Option<u64> {
        self.calibration.as_ref().filter(|_| traced).map(|c| {
            let ns: f64 = kernel_groups
                .iter()
                .map(|g| c.added_ns(g.count, g.shape.grid_blocks()))
                .sum();
            ns.round() as u64
        })
    }
}

/// The count of launch, copy and memset calls of `it` whose record did not come within the
/// settle time, with a warning in the row when there are any.
fn missing_records(it: &mut IterationState, settle: std::time::Duration) -> u64 {
    let missing = it.expected.len() as u64 + it.missing_calls;
    if missing > 0 {
        it.warnings.push(format!(
            "{missing} launch/copy/memset calls made in this iteration had no record within the settle \
             time ({} ms): {} without a GPU record, {} whose call was not captured",
            settle.as_millis(),
            it.expected.len(),
            it.missing_calls
        ));
    }
    missing
}

/// What one pass over a row's activities gathers besides the builder's own tables.
struct Gathered<'p> {
    copies: Transfers,
    memsets: Transfers,
    syncs: HashMap<&'static str, SyncGroup>,
    memory_events: Vec<&'p MemoryRecord>,
}

/// Kernels the CUPTI Range Profiler launches itself while user-replay passes start and stop
/// (seen on CUPTI 13.0). They have no API call, so they would land in `(unscoped)` by
/// time.
const RANGE_PROFILER_KERNELS: [&str; 1] = ["WaitNs"];

/// In an iteration with a counters pass, moves the Range Profiler's own kernels from
/// `(unscoped)`, and the L2 flushes from the scope they were launched in, to the counters
/// scope, so that the application's scopes show only its work.
pub(super) fn claim_counters_kernels(placed: &mut [Placed], counters_path: u32) {
    if counters_path == 0 {
        return;
    }
    for p in placed.iter_mut() {
        if let Activity::Kernel(k) = &p.activity {
            if (p.path_id == 0 && RANGE_PROFILER_KERNELS.contains(&k.name))
                || k.name == crate::driver::flush::KERNEL
            {
                p.path_id = counters_path;
            }
        }
    }
}

/// Names auto ranges from the iteration's kernel records: range `"i"` is the `i`-th kernel in
/// launch order (correlation id, then start time for the kernels of one graph launch). With user
/// replay every iteration of the collection must launch the same kernels; the names come from
/// the iteration that completed it. When CUPTI returned fewer ranges than the kernels launched,
/// none is named (position no longer says which kernel a range is) and the warning says so.
pub(super) fn name_auto_ranges(
    counters: &mut IterationCounters,
    placed: &[Placed],
) -> Option<String> {
    let mut kernels: Vec<&KernelRecord> = placed
        .iter()
        .filter_map(|p| match &p.activity {
            Activity::Kernel(k) => Some(k),
            _ => None,
        })
        .collect();
    kernels.sort_by_key(|k| (k.correlation_id, k.start));
    let launches: Vec<Launch> = kernels
        .iter()
        .map(|k| Launch::Kernel(k.name.to_string()))
        .collect();
    let launches = AutoRangeLaunches::new(&launches);
    let ranges = counters.ranges.len() + counters.dropped_ranges as usize;
    if let Some(kernels) = launches.lost_ranges(ranges) {
        return Some(format!(
            "counters: CUPTI returned {ranges} auto range(s) for {kernels} kernel launches, so \
             ranges are not named by kernel (the i-th range may not be the i-th kernel); collect \
             user ranges (RangeMode::User) or with user replay"
        ));
    }
    for r in counters.ranges.iter_mut().filter(|r| r.kernel.is_none()) {
        if let Some((i, k)) = launches.get(&r.name) {
            r.kernel = Some(k.to_string());
            r.launch_index = Some(i as u64);
        }
    }
    None
}

/// `CUPTI_ACTIVITY_MEMORY_KIND_DEVICE`.
const DEVICE_MEMORY_KIND: u32 = sys::CUpti_ActivityMemoryKind::CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;

/// A row's copies or memsets by device and direction.
type Transfers = HashMap<(u32, &'static str), CopyGroup>;

/// Counts a copy or memset in its group; its device, interval, and `false` (not a kernel).
fn add_transfer(groups: &mut Transfers, c: &CopyRecord) -> (u32, (u64, u64), bool) {
    let g = groups
        .entry((c.device_id, c.direction))
        .or_insert_with(|| CopyGroup {
            device_id: c.device_id,
            kind: c.direction.to_string(),
            count: 0,
            bytes: 0,
            total_ns: 0,
        });
    g.count += 1;
    g.bytes += c.bytes;
    g.total_ns += c.end.saturating_sub(c.start);
    (c.device_id, (c.start, c.end), false)
}

/// A device's GPU intervals in a row.
struct DeviceBusy {
    device_id: u32,
    busy: BusyAccumulator,
    kernels: u64,
}

fn activity_entries(placed: &[Placed], paths: &PathTable) -> Vec<ActivityEntry> {
    let mut out: Vec<ActivityEntry> = placed
        .iter()
        .filter_map(|p| {
            let kind = match &p.activity {
                Activity::Kernel(_) => "kernel",
                Activity::Memcpy(_) => "memcpy",
                Activity::Memset(_) => "memset",
                Activity::Sync(_) | Activity::Memory(_) => return None,
            };
            let (name, device_id, stream_id, start, end, corr, bytes, graph) = match &p.activity {
                Activity::Kernel(k) => (
                    k.name.to_string(),
                    k.device_id,
                    k.stream_id,
                    k.start,
                    k.end,
                    k.correlation_id,
                    None,
                    k.graph_id,
                ),
                Activity::Memcpy(c) | Activity::Memset(c) => (
                    c.direction.to_string(),
                    c.device_id,
                    c.stream_id,
                    c.start,
                    c.end,
                    c.correlation_id,
                    Some(c.bytes),
                    c.graph_id,
                ),
                Activity::Sync(_) | Activity::Memory(_) => return None,
            };
            Some(ActivityEntry {
                kind: kind.into(),
                name,
                device_id,
                stream_id,
                start_ns: start,
                end_ns: end,
                scope: paths.path(p.path_id),
                attribution: Some(KernelAttribution::of(p.by, p.path_id).name().into()),
                correlation_id: corr,
                bytes,
                graph_id: (graph != 0).then_some(graph),
            })
        })
        .collect();
    out.sort_by_key(|a| (a.start_ns, a.correlation_id));
    out
}

fn scope_spans(scopes: &[ScopeRecord], paths: &PathTable) -> Vec<ScopeSpan> {
    let mut out: Vec<ScopeSpan> = scopes
        .iter()
        .map(|s| ScopeSpan {
            path: paths.path(s.path_id),
            thread: s.thread,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
        })
        .collect();
    out.sort_by_key(|s| (s.thread, s.start_ns));
    out
}
