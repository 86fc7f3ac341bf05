//! The summary's figures of why the GPU was idle, over the used rows that split idle time by
//! cause (docs/idle.md): the causes per device ([`crate::analysis::idle`]), the copy-overlap
//! figures, the gap across `step()`, the host calls the funnel asks about, and the longest gaps.
//! Rows without a split (untraced, written with idle causes off, older ledgers) add nothing, so
//! what was not measured is never shown as zero; a ledger with no split has no [`IdleSummary`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::idle::{CauseSeries, CauseStats, ScopeIdle};
use crate::analysis::series::{Budget, Series};
use crate::analysis::stats::Distribution;
use gpu_ledger_format::idle::IdleGap;
use gpu_ledger_format::schema::IterationRow;

/// Longest gaps the summary keeps over the rows.
pub const LARGEST_GAPS_KEPT: usize = 20;

/// Host-call lines the summary keeps, most host time first.
pub const INVENTORY_KEPT: usize = 20;

/// One device's idle figures over the rows that split its idle time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleDevice {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Rows that split its idle time.
    pub iterations: usize,
    /// Idle time inside the window per iteration, ns.
    pub idle_ns: Distribution,
    /// Its summed idle time over the summed host wall time of those rows.
    pub idle_share_of_wall: Option<f64>,
    /// Time with no kernel or memset running per iteration, ns (idle plus copy-only).
    pub compute_idle_ns: Distribution,
    /// Copy time with no kernel or memset running per iteration, ns.
    pub copy_only_ns: Distribution,
    /// Copy time overlapped with a kernel or memset per iteration, ns.
    pub copy_overlapped_ns: Distribution,
    /// The gap before the window (across `step()`, outside `idle_ns`) per iteration that has
    /// one, ns.
    pub lead_in_ns: Option<Distribution>,
    /// The lead-in's cause holding most of its time, over the rows.
    pub lead_in_cause: Option<String>,
    /// The dispatch floor of the last row, ns, and where it came from.
    pub floor: Option<(u64, String)>,
}

/// Host calls of one kind, scope, function and device over the rows that carry an inventory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InventoryLine {
    /// `device_sync`, `stream_sync`, `event_sync`, `sync_copy`, `sync_memset`, `small_dtoh`,
    /// `alloc` or `free`.
    pub kind: String,
    /// The scope the calls were made in.
    pub scope: String,
    /// The CUDA function.
    pub function: Option<String>,
    /// The device, where records said it.
    pub device_id: Option<u32>,
    /// Calls, summed.
    pub count: u64,
    /// Bytes, summed, where records said them.
    pub bytes: Option<u64>,
    /// Synchronous copies among them (`small_dtoh`).
    pub synchronous: Option<u64>,
    /// Host time inside them, summed, ns.
    pub host_ns: u64,
}

/// One of the longest gaps, with where it was.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapAt {
    /// Iteration index.
    pub iteration: u64,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// Its start after the device window's start, ns.
    pub offset_ns: u64,
    /// The gap as the ledger has it.
    pub gap: IdleGap,
}

/// Why the GPU was idle over the used rows (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleSummary {
    /// Per device.
    pub devices: Vec<IdleDevice>,
    /// Per device, each cause (and `host_launch`'s detail), most idle time first.
    pub causes: Vec<CauseStats>,
    /// Per device, the scopes `host_launch` time was spent in, most first.
    pub host_launch_scopes: Vec<ScopeIdle>,
    /// Rows whose host calls were inventoried (those that split idle time).
    pub inventory_iterations: u64,
    /// The host calls, most host time first ([`INVENTORY_KEPT`] at most).
    pub inventory: Vec<InventoryLine>,
    /// Lines of the inventory not kept.
    pub inventory_left_out: usize,
    /// The longest gaps of the rows, longest first ([`LARGEST_GAPS_KEPT`] at most).
    pub largest_gaps: Vec<GapAt>,
    /// Whether a percentile comes from a quantile sketch.
    pub sketched: bool,
}

#[derive(Debug)]
struct DeviceAcc {
    idle: Series,
    wall: u64,
    idle_total: u64,
    compute_idle: Series,
    copy_only: Series,
    copy_overlapped: Series,
    lead_in: Series,
    lead_in_causes: BTreeMap<String, u64>,
    floor: Option<(u64, String)>,
}

type InventoryKey = (String, String, Option<String>, Option<u32>);

/// The idle figures of the used rows, one row at a time.
#[derive(Debug)]
pub(super) struct IdleFigures {
    budget: Budget,
    causes: CauseSeries,
    devices: BTreeMap<u32, DeviceAcc>,
    inventory_rows: u64,
    inventory: BTreeMap<InventoryKey, InventoryLine>,
    gaps: Vec<GapAt>,
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0).saturating_add(y.unwrap_or(0))),
    }
}

impl IdleFigures {
    pub(super) fn new(budget: Budget) -> Self {
        Self {
            causes: CauseSeries::new(budget.clone()),
            budget,
            devices: BTreeMap::new(),
            inventory_rows: 0,
            inventory: BTreeMap::new(),
            gaps: Vec::new(),
        }
    }

    /// Takes a used row.
    pub(super) fn push(&mut self, r: &IterationRow) {
        if !r.devices.iter().any(|d| d.idle.is_some()) {
            return;
        }
        self.causes.push(r);
        for d in &r.devices {
            let Some(b) = &d.idle else { continue };
            let budget = &self.budget;
            let a = self
                .devices
                .entry(d.device_id)
                .or_insert_with(|| DeviceAcc {
                    idle: budget.series(),
                    wall: 0,
                    idle_total: 0,
                    compute_idle: budget.series(),
                    copy_only: budget.series(),
                    copy_overlapped: budget.series(),
                    lead_in: budget.series(),
                    lead_in_causes: BTreeMap::new(),
                    floor: None,
                });
            a.idle.push_u64(d.idle_ns);
            a.wall = a.wall.saturating_add(r.host_wall_ns);
            a.idle_total = a.idle_total.saturating_add(d.idle_ns);
            a.compute_idle.push_u64(b.compute_idle_ns);
            a.copy_only.push_u64(b.copy_only_ns);
            a.copy_overlapped.push_u64(b.copy_overlapped_ns);
            a.floor = Some((b.floor_ns, b.floor_source.clone()));
            if let Some(g) = &b.lead_in {
                a.lead_in.push_u64(g.ns);
                for p in &g.parts {
                    let e = a.lead_in_causes.entry(p.cause.clone()).or_default();
                    *e = e.saturating_add(p.ns);
                }
            }
            for g in &b.largest_gaps {
                self.keep_gap(GapAt {
                    iteration: r.index,
                    device_id: d.device_id,
                    offset_ns: g.start_ns.saturating_sub(d.first_start_ns),
                    gap: g.clone(),
                });
            }
        }
        self.push_inventory(r);
    }

    fn push_inventory(&mut self, r: &IterationRow) {
        self.inventory_rows += 1;
        for e in &r.host_inventory {
            let key = (
                e.kind.clone(),
                e.scope.clone(),
                e.function.clone(),
                e.device_id,
            );
            let l = self.inventory.entry(key).or_insert_with(|| InventoryLine {
                kind: e.kind.clone(),
                scope: e.scope.clone(),
                function: e.function.clone(),
                device_id: e.device_id,
                count: 0,
                bytes: None,
                synchronous: None,
                host_ns: 0,
            });
            l.count = l.count.saturating_add(e.count);
            l.bytes = add_opt(l.bytes, e.bytes);
            l.synchronous = add_opt(l.synchronous, e.synchronous);
            l.host_ns = l.host_ns.saturating_add(e.host_ns);
        }
    }

    /// Keeps `g` when it is among the [`LARGEST_GAPS_KEPT`] longest so far; ties keep the
    /// earlier row's.
    fn keep_gap(&mut self, g: GapAt) {
        if self.gaps.len() == LARGEST_GAPS_KEPT {
            match self.gaps.iter().enumerate().min_by_key(|(_, x)| x.gap.ns) {
                Some((i, x)) if x.gap.ns < g.gap.ns => {
                    self.gaps.swap_remove(i);
                }
                _ => return,
            }
        }
        self.gaps.push(g);
    }

    /// The figures; `None` when no used row split idle time.
    pub(super) fn finish(self) -> Option<IdleSummary> {
        if self.devices.is_empty() {
            return None;
        }
        let mut sketched = false;
        let devices = self
            .devices
            .into_iter()
            .filter_map(|(device_id, a)| {
                sketched |= [&a.idle, &a.compute_idle, &a.copy_only, &a.copy_overlapped]
                    .iter()
                    .any(|s| s.is_sketched())
                    || a.lead_in.is_sketched();
                let lead_in_cause = a
                    .lead_in_causes
                    .iter()
                    .max_by_key(|(c, ns)| (**ns, std::cmp::Reverse(c.as_str())))
                    .map(|(c, _)| c.clone());
                Some(IdleDevice {
                    device_id,
                    iterations: a.idle.len() as usize,
                    idle_ns: a.idle.distribution()?,
                    idle_share_of_wall: (a.wall > 0).then(|| a.idle_total as f64 / a.wall as f64),
                    compute_idle_ns: a.compute_idle.distribution()?,
                    copy_only_ns: a.copy_only.distribution()?,
                    copy_overlapped_ns: a.copy_overlapped.distribution()?,
                    lead_in_ns: a.lead_in.distribution(),
                    lead_in_cause,
                    floor: a.floor,
                })
            })
            .collect();
        let causes = self.causes.finish();
        sketched |= causes.causes.iter().any(|c| c.per_iteration_ns.sketched);
        let mut inventory: Vec<InventoryLine> = self.inventory.into_values().collect();
        inventory.sort_by(|a, b| b.host_ns.cmp(&a.host_ns).then(b.count.cmp(&a.count)));
        let inventory_left_out = inventory.len().saturating_sub(INVENTORY_KEPT);
        inventory.truncate(INVENTORY_KEPT);
        let mut largest_gaps = self.gaps;
        largest_gaps.sort_by(|a, b| {
            (b.gap.ns.cmp(&a.gap.ns))
                .then(a.iteration.cmp(&b.iteration))
                .then(a.device_id.cmp(&b.device_id))
                .then(a.gap.start_ns.cmp(&b.gap.start_ns))
        });
        Some(IdleSummary {
            devices,
            causes: causes.causes,
            host_launch_scopes: causes.host_launch_scopes,
            inventory_iterations: self.inventory_rows,
            inventory,
            inventory_left_out,
            largest_gaps,
            sketched,
        })
    }
}
