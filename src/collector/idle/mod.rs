//! Why each device was idle, per row (docs/idle.md): the host's calls and scopes placed on
//! CUPTI's clock, each gap of the device's busy-time sweep cut into pieces by cause, the largest
//! gaps, the gap before the row's window, and the inventory of blocking and allocating calls.
//!
//! - [`model`]: the work, launches and labelled pieces the split works on;
//! - [`paint`]: what each launching thread was doing (its calls, scopes, the step boundary);
//! - [`split`]: one device's gaps cut into pieces, a pure function;
//! - [`floor`]: the dispatch floor;
//! - [`inventory`]: the calls the funnel lists.
//!
//! Host times are ns of the run's monotonic clock and CUPTI's are its own (`CLOCK_REALTIME`
//! unless a timestamp callback is registered): NTP slews both alike, so their difference is
//! constant but for a wall-clock step. Each row takes it from `step()`'s pair of readings at
//! its end, lowers it where a kernel would otherwise start before its launch was entered, and
//! gives host rules up (`unknown`) when the pair moved by more than [`CLOCK_STEP_NS`] since the
//! row before or the lowering passes [`CLOCK_TOLERANCE_NS`].

mod floor;
mod inventory;
mod model;
mod paint;
mod split;

#[cfg(test)]
mod prop_tests;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use super::attribution::{Activity, HostCall, Placed};
use crate::config::IdleConfig;
use crate::cupti::calls::{ApiCalls, CallingThread};
use crate::cupti::functions::CallKind;
use crate::cupti::record::KernelRecord;
use crate::ledger::idle::{DispatchFloor, IdleBreakdown, IdleCause, IdleGap, InventoryEntry};
use crate::ledger::schema::DeviceIteration;
use crate::run::{PathTable, ScopeRecord};
use floor::Floors;
use inventory::{records_by_call, CallRecords};
use model::{CallNote, Detail, Fixed, Label, Launch, Piece, Rule, Work, WorkKind};
use paint::{Evidence, InCall, RawEvidence};
use split::{split_device, ClockProblem, Context, Gap};

/// A change of the host-to-CUPTI offset between two rows' `step()` readings past which the
/// host clock is taken to have stepped.
const CLOCK_STEP_NS: i64 = 50_000;
/// How far the offset may be lowered to keep every kernel after its launch before host times
/// are given up on.
const CLOCK_TOLERANCE_NS: i64 = 50_000;

/// What an iteration gathered that the split reads.
pub(super) struct RowInputs<'a> {
    pub(super) placed: &'a [Placed],
    pub(super) host_calls: &'a [HostCall],
    pub(super) scopes: &'a [ScopeRecord],
    /// Host time of the `step()` that opened the iteration.
    pub(super) host_start_ns: u64,
    /// `step()`'s (host, CUPTI) readings at its end.
    pub(super) end_pair: Option<(u64, u64)>,
    pub(super) traced: bool,
}

/// The split's state across rows.
pub(super) struct IdleRows {
    config: IdleConfig,
    floors: Floors,
    /// The previous traced row's evidence: it covers this row's lead-in and first gaps.
    carry: RawEvidence,
    /// The previous row's offset from its `step()` pair.
    prev_offset: Option<i64>,
    /// Each device's last work in the previous traced row.
    prev_last: HashMap<u32, Work>,
    /// Launching threads by index, as the call capture named them.
    threads: Vec<Option<CallingThread>>,
    /// Threads have no capture of their own (the offline collector): call thread `i` and scope
    /// thread `i` are one thread, of key `i + 1`.
    synthetic_keys: bool,
    /// A row's tables, kept with their capacity for the next row.
    scratch: Scratch,
}

/// The tables a row's split builds, emptied and reused from row to row (a row of thousands of
/// launches would otherwise grow them again, and fault their pages in, every time).
#[derive(Default)]
struct Scratch {
    records: HashMap<u32, CallRecords>,
    launches: HashMap<u32, Launch>,
    work: HashMap<u32, Vec<Work>>,
    first_call: HashMap<u64, u64>,
    evidence: Evidence,
    /// The evidence of the row before last, emptied for the next row's.
    spare_raw: RawEvidence,
}

impl IdleRows {
    pub(super) fn new(config: IdleConfig) -> Self {
        let floor = config.dispatch_floor.map(|d| d.as_nanos() as u64);
        IdleRows {
            config,
            floors: Floors::new(floor),
            carry: RawEvidence::default(),
            prev_offset: None,
            prev_last: HashMap::default(),
            threads: Vec::new(),
            synthetic_keys: false,
            scratch: Scratch::default(),
        }
    }

    /// Calls and scopes of thread `i` share key `i + 1` (the offline collector).
    #[cfg(any(test, feature = "internals"))]
    pub(super) fn synthetic_thread_keys(&mut self) {
        self.synthetic_keys = true;
    }

    /// A kernel of the start-up calibration (for the dispatch floor).
    pub(super) fn add_calibration_kernel(&mut self, k: &KernelRecord) {
        self.floors.add_calibration(k);
    }

    /// The floor each device's rows used last, for the trailer.
    pub(super) fn dispatch_floors(&self) -> Vec<DispatchFloor> {
        self.floors.used()
    }

    /// Splits each device's idle time in `devices` (built from the same placed work) and
    /// returns the row's inventory. An untraced row gets nothing, and the next row no lead-in.
    pub(super) fn explain(
        &mut self,
        row: &RowInputs<'_>,
        devices: &mut [DeviceIteration],
        calls: &ApiCalls,
        paths: &PathTable,
    ) -> Vec<InventoryEntry> {
        if !row.traced {
            self.carry.clear();
            self.prev_last.clear();
            return Vec::new();
        }
        let mut s = std::mem::take(&mut self.scratch);
        records_by_call(row.placed, &mut s.records);
        self.launches(row, calls, &mut s);
        let (offset, clock, violations) = self.offset(row, &s.launches);
        let to_c =
            |h: u64| (i128::from(h) + i128::from(offset)).clamp(0, i128::from(u64::MAX)) as u64;
        for l in s.launches.values_mut() {
            l.entry = to_c(l.entry);
            l.exit = l.exit.map(to_c);
        }
        let raw = self.evidence(row, &mut s, calls, &to_c);
        let mut evidence = std::mem::take(&mut s.evidence);
        evidence.rebuild(&[&self.carry, &raw]);
        device_work(row.placed, &mut s.work);
        // Other devices' busy time, for the rule that a wait on one device is work on another.
        let busy: Vec<(u32, Vec<(u64, u64)>)> =
            if s.work.values().filter(|w| !w.is_empty()).count() > 1 {
                s.work
                    .iter()
                    .map(|(d, w)| (*d, w.iter().map(|w| (w.start, w.end)).collect()))
                    .collect()
            } else {
                Vec::new()
            };
        for d in devices.iter_mut() {
            let Some(w) = s.work.get_mut(&d.device_id).filter(|w| !w.is_empty()) else {
                continue;
            };
            let others = other_devices(&busy, d.device_id);
            let (floor, floor_source) = self.floors.floor(d.device_id);
            let cx = Context {
                launches: &s.launches,
                evidence: &evidence,
                others: &others,
                floor,
                clock,
                largest: self.config.largest_gaps,
            };
            let lead = self.prev_last.get(&d.device_id).copied();
            let split = split_device(w, lead, &cx);
            self.floors.observe(d.device_id, &split.same_stream_gaps);
            if let Some(last) = w.iter().max_by_key(|w| (w.end, w.start)) {
                self.prev_last.insert(d.device_id, *last);
            }
            let mut b = IdleBreakdown {
                floor_ns: floor,
                floor_source: floor_source.into(),
                host_offset_ns: offset,
                causes: causes(&split.causes, paths),
                compute_idle_ns: split.compute_idle_ns,
                copy_only_ns: split.copy_only_ns,
                copy_overlapped_ns: split.copy_overlapped_ns,
                lead_in: split.lead_in.as_ref().map(|g| self.gap(g, calls, paths)),
                largest_gaps: split
                    .largest
                    .iter()
                    .map(|g| self.gap(g, calls, paths))
                    .collect(),
                causality_violations: violations,
            };
            reconcile(&mut b, d.idle_ns, split.idle_ns);
            d.idle = Some(b);
        }
        // The next row's lead-ins begin at these devices' last ends, or later.
        let mut raw = raw;
        let lead_ins = devices
            .iter()
            .filter_map(|d| self.prev_last.get(&d.device_id).map(|w| w.end))
            .min();
        if let Some(t) = lead_ins {
            raw.keep_after(t);
        }
        s.spare_raw = std::mem::replace(&mut self.carry, raw);
        s.evidence = evidence;
        let inventory = inventory::inventory(
            row.host_calls,
            row.placed,
            &s.records,
            &s.launches,
            self.config.small_read_bytes,
            paths,
        );
        self.scratch = s;
        inventory
    }

    /// The row's calls by correlation id, on the host's clock, into `s.launches`.
    fn launches(&mut self, row: &RowInputs<'_>, calls: &ApiCalls, s: &mut Scratch) {
        s.launches.clear();
        for (i, c) in row.host_calls.iter().enumerate() {
            let pageable = s.records.get(&c.correlation_id).is_some_and(|r| r.pageable);
            let launch = Launch {
                entry: c.entry_ns,
                exit: (c.exit_ns != 0).then_some(c.exit_ns),
                blocking: blocked_detail(c.kind, pageable).is_some(),
                key: self.key(calls, c.thread),
                thread: c.thread,
                index: i as u32,
                path_id: c.path_id,
                attribution: c.attribution,
            };
            s.launches.insert(c.correlation_id, launch);
        }
    }

    /// The row's host-to-CUPTI offset, whether host times can be placed with it, and how many
    /// kernels and copies would have started before their launch with `step()`'s pair alone.
    /// `launches` are on the host's clock.
    fn offset(
        &mut self,
        row: &RowInputs<'_>,
        launches: &HashMap<u32, Launch>,
    ) -> (i64, Option<ClockProblem>, u64) {
        let Some((host, cupti)) = row.end_pair.filter(|&(_, c)| c != u64::MAX) else {
            return (0, Some(ClockProblem::Unreliable), 0);
        };
        let pair = difference(cupti, host);
        let stepped = self
            .prev_offset
            .replace(pair)
            .is_some_and(|prev| (pair - prev).abs() > CLOCK_STEP_NS);
        let (mut offset, mut violations) = (pair, 0u64);
        for p in row.placed {
            let start = match &p.activity {
                Activity::Kernel(k) => k.start,
                Activity::Memcpy(c) | Activity::Memset(c) => c.start,
                _ => continue,
            };
            let Some(l) = launches.get(&p.call_id) else {
                continue;
            };
            let earliest = difference(start, l.entry);
            if earliest < pair {
                violations += 1;
                offset = offset.min(earliest);
            }
        }
        let problem = if stepped {
            Some(ClockProblem::Step)
        } else if pair - offset > CLOCK_TOLERANCE_NS {
            Some(ClockProblem::Unreliable)
        } else {
            None
        };
        (offset, problem, violations)
    }

    /// The row's evidence on CUPTI's clock (`to_c` maps host ns; `s.launches` are mapped).
    fn evidence(
        &mut self,
        row: &RowInputs<'_>,
        s: &mut Scratch,
        calls: &ApiCalls,
        to_c: &impl Fn(u64) -> u64,
    ) -> RawEvidence {
        let mut raw = std::mem::take(&mut s.spare_raw);
        raw.clear();
        s.first_call.clear();
        for c in row.host_calls {
            let Some(l) = s.launches.get(&c.correlation_id) else {
                continue;
            };
            let r = s
                .records
                .get(&c.correlation_id)
                .copied()
                .unwrap_or_default();
            let first = s.first_call.entry(l.key).or_insert(l.entry);
            *first = (*first).min(l.entry);
            if c.kind == CallKind::HostFunc {
                raw.host_funcs.push(l.entry);
            }
            let note = CallNote {
                function: c.function,
                bytes: r.bytes,
                path_id: c.path_id,
            };
            let blocked = blocked_detail(c.kind, r.pageable);
            let (start, end) = match (blocked, r.wait) {
                (Some(_), Some(wait)) if is_sync(c.kind) => wait,
                _ => (l.entry, l.exit.unwrap_or(l.entry)),
            };
            let what = blocked.map_or(InCall::Launching, InCall::Blocked);
            raw.calls.push((l.key, start, end, what, note));
        }
        for p in row.placed {
            let Activity::Sync(sync) = &p.activity else {
                continue;
            };
            if sync.kind == "stream_wait_event" {
                raw.stream_waits
                    .push((sync.context_id, sync.stream_id, sync.start));
                continue;
            }
            // A wait whose call is in an earlier row: its record alone.
            if s.launches.contains_key(&p.call_id) {
                continue;
            }
            if let Some(thread) = p.by.thread {
                let detail = if sync.kind == "context" {
                    Fixed::DeviceSynchronize
                } else {
                    Fixed::Synchronize
                };
                let note = CallNote {
                    function: "(synchronization record)",
                    bytes: None,
                    path_id: p.path_id,
                };
                let key = self.key(calls, thread);
                raw.calls
                    .push((key, sync.start, sync.end, InCall::Blocked(detail), note));
            }
        }
        for sc in row.scopes {
            let key = if self.synthetic_keys {
                u64::from(sc.thread) + 1
            } else {
                sc.thread_key
            };
            raw.scopes
                .push((key, to_c(sc.start_ns), to_c(sc.end_ns), sc.path_id));
        }
        let start = to_c(row.host_start_ns);
        for (&key, &first) in &s.first_call {
            raw.boundaries.push((key, start, first));
        }
        raw
    }

    /// The key of launching thread `index`.
    fn key(&mut self, calls: &ApiCalls, index: u32) -> u64 {
        if self.synthetic_keys {
            return u64::from(index) + 1;
        }
        self.thread(calls, index).map_or(0, |t| t.key)
    }

    /// Launching thread `index`, cached once known.
    fn thread(&mut self, calls: &ApiCalls, index: u32) -> Option<&CallingThread> {
        let i = index as usize;
        if self.threads.len() <= i {
            self.threads.resize(i + 1, None);
        }
        if self.threads[i].is_none() {
            self.threads[i] = calls.thread(index);
        }
        self.threads[i].as_ref()
    }

    /// A gap as the ledger keeps it.
    fn gap(&mut self, g: &Gap, calls: &ApiCalls, paths: &PathTable) -> IdleGap {
        let mut parts: BTreeMap<Label, u64> = BTreeMap::new();
        for p in &g.pieces {
            *parts.entry(p.label).or_insert(0) += p.ns;
        }
        let mut parts: Vec<(Label, u64)> = parts.into_iter().collect();
        parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let main = parts.first().map(|p| p.0);
        let blocked = longest(&g.pieces, |p| p.label.rule == Rule::InCudaCall);
        let scope = longest(&g.pieces, |p| matches!(p.label.detail, Detail::Scope(_)))
            .and_then(|p| match p.label.detail {
                Detail::Scope(path) => Some(path),
                _ => None,
            })
            .or(blocked.and_then(|p| p.call).map(|c| c.path_id))
            .or(g.launch.map(|l| l.path_id))
            .filter(|p| *p != 0);
        let thread = g.launch.and_then(|l| self.thread(calls, l.thread).cloned());
        IdleGap {
            start_ns: g.start,
            ns: g.ns,
            cause: main.map_or("", |l| l.cause.name()).into(),
            detail: main.and_then(|l| detail_text(l.detail, paths)),
            rule: main.map_or("", |l| l.rule.name()).into(),
            parts: parts
                .iter()
                .map(|(l, ns)| cause_of(l, *ns, 1, paths))
                .collect(),
            function: blocked.and_then(|p| p.call).map(|c| c.function.to_string()),
            bytes: blocked.and_then(|p| p.call).and_then(|c| c.bytes),
            scope: scope.map(|p| paths.path(p)),
            tid: thread.as_ref().map(|t| t.tid).filter(|t| *t != 0),
            thread: thread.and_then(|t| t.name),
            before: g.before.map(|w| w.label()),
            before_stream: g.before.map(|w| w.stream),
            after: g.after.map(|w| w.label()),
            after_stream: g.after.map(|w| w.stream),
        }
    }
}

/// The detail of a blocking call, `None` for one that only enqueues work.
fn blocked_detail(kind: CallKind, pageable: bool) -> Option<Fixed> {
    Some(match kind {
        CallKind::StreamSync | CallKind::EventSync => Fixed::Synchronize,
        CallKind::DeviceSync => Fixed::DeviceSynchronize,
        CallKind::Alloc | CallKind::AllocAsync => Fixed::Allocation,
        CallKind::Free | CallKind::FreeAsync => Fixed::Free,
        CallKind::CopySync => Fixed::SyncCopy,
        CallKind::CopyAsync if pageable => Fixed::SyncCopy,
        CallKind::MemsetSync => Fixed::SyncMemset,
        _ => return None,
    })
}

fn is_sync(kind: CallKind) -> bool {
    matches!(
        kind,
        CallKind::StreamSync | CallKind::EventSync | CallKind::DeviceSync
    )
}

/// The longest piece that `keep` selects.
fn longest(pieces: &[Piece], keep: impl Fn(&Piece) -> bool) -> Option<&Piece> {
    pieces.iter().filter(|p| keep(p)).max_by_key(|p| p.ns)
}

/// Each device's kernels, copies and memsets into `out` (emptied first): the intervals its busy
/// time is the union of.
fn device_work(placed: &[Placed], out: &mut HashMap<u32, Vec<Work>>) {
    for v in out.values_mut() {
        v.clear();
    }
    for p in placed {
        let (device, w) = match &p.activity {
            Activity::Kernel(k) => (
                k.device_id,
                Work {
                    start: k.start,
                    end: k.end,
                    kind: WorkKind::Kernel,
                    context: k.context_id,
                    stream: k.stream_id,
                    name: k.name,
                    graph_id: k.graph_id,
                    call: p.call_id,
                },
            ),
            Activity::Memcpy(c) | Activity::Memset(c) => (
                c.device_id,
                Work {
                    start: c.start,
                    end: c.end,
                    kind: if matches!(p.activity, Activity::Memcpy(_)) {
                        WorkKind::Memcpy
                    } else {
                        WorkKind::Memset
                    },
                    context: c.context_id,
                    stream: c.stream_id,
                    name: c.direction,
                    graph_id: c.graph_id,
                    call: p.call_id,
                },
            ),
            Activity::Sync(_) | Activity::Memory(_) => continue,
        };
        out.entry(device).or_default().push(w);
    }
}

/// `a - b` as a signed difference, saturating.
fn difference(a: u64, b: u64) -> i64 {
    (i128::from(a) - i128::from(b)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The union of every device's busy intervals but `device`'s.
fn other_devices(busy: &[(u32, Vec<(u64, u64)>)], device: u32) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = busy
        .iter()
        .filter(|(d, _)| *d != device)
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    gpu_ledger_format::intervals::union_runs(&mut all)
}

fn detail_text(d: Detail, paths: &PathTable) -> Option<String> {
    match d {
        Detail::None => None,
        Detail::Text(t) => Some(t.name().into()),
        Detail::Scope(path) => Some(format!("scope:{}", paths.path(path))),
    }
}

fn cause_of(l: &Label, ns: u64, gaps: u64, paths: &PathTable) -> IdleCause {
    IdleCause {
        cause: l.cause.name().into(),
        detail: detail_text(l.detail, paths),
        rule: l.rule.name().into(),
        ns,
        gaps,
    }
}

/// The split's causes as the ledger keeps them, sorted by cause, detail and rule.
fn causes(by: &[(Label, u64, u64)], paths: &PathTable) -> Vec<IdleCause> {
    let mut v: Vec<IdleCause> = by
        .iter()
        .filter(|(_, ns, _)| *ns > 0)
        .map(|(l, ns, gaps)| cause_of(l, *ns, *gaps, paths))
        .collect();
    v.sort_by(|a, b| (&a.cause, &a.detail, &a.rule).cmp(&(&b.cause, &b.detail, &b.rule)));
    v
}

/// Makes the causes add up to the row's `idle_ns` should the two sweeps ever disagree (they
/// sweep the same intervals): the difference is counted, never dropped.
fn reconcile(b: &mut IdleBreakdown, idle_ns: u64, split_ns: u64) {
    debug_assert_eq!(
        idle_ns, split_ns,
        "the split sweeps the row's own intervals"
    );
    if idle_ns > split_ns {
        b.causes.push(IdleCause {
            cause: crate::ledger::idle::cause::UNKNOWN.into(),
            detail: None,
            rule: "accounting_remainder".into(),
            ns: idle_ns - split_ns,
            gaps: 0,
        });
        b.compute_idle_ns += idle_ns - split_ns;
    }
}
