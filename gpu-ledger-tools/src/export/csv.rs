//! The per-iteration table as CSV: one line per iteration row, in ledger order.
//!
//! # Columns
//! | column | meaning |
//! |---|---|
//! | `index` | iteration index |
//! | `host_start_ns` | start of the iteration, ns since the profiler started |
//! | `host_wall_ns` | host wall time of the iteration, ns |
//! | `complete` | `true` unless the row was written before its GPU records all arrived or at shutdown |
//! | `perturbed` | `true` when hardware counters replayed kernels in it (keep it out of timing statistics) |
//! | `untraced` | `true` when a sampled timeline left the iteration out: no GPU figures in it |
//! | `tracing_added_ns` | device time the timeline's tracing is estimated to have added, ns (empty without a calibration) |
//! | `dropped_records` | activity records CUPTI dropped while the iteration was open |
//! | `missing_records` | launches whose GPU record did not arrive in time |
//! | `kernel_launches` | kernel launches, all devices |
//! | `dev{d}_busy_ns` | device `d`: union of kernel, copy and memset intervals, ns |
//! | `dev{d}_idle_ns` | device `d`: gaps inside its activity window, ns |
//! | `dev{d}_largest_gap_ns` | device `d`: largest single gap, ns |
//! | `dev{d}_idle_share` | device `d`: idle time over its activity window (0..1) |
//! | `dev{d}_sm_clock_mhz` | device `d`: mean SM clock over the iteration (NVML), MHz |
//! | `dev{d}_power_w` | device `d`: mean board power over the iteration (NVML), W |
//! | `dev{d}_energy_j` | device `d`: energy over the iteration (NVML), J |
//! | `scope:{path}:device_ns_inclusive` | union device time of the scope and its children, ns |
//! | `scope:{path}:host_ns` | host wall time inside the scope (children included), ns |
//!
//! Devices come in ascending order, scopes in path order. A cell is empty when the figure does not
//! exist in that row: a device with no activity in the iteration, NVML not sampled, a scope that
//! did not run. Fields are quoted per RFC 4180 when needed (scope paths may hold commas).
//!
//! The columns depend on every row (a scope may first appear late), so a large ledger is written
//! in two passes: [`CsvLayout::observe`] every row, then [`CsvLayout::write_header`] and
//! [`CsvLayout::write_row`] for each. A row's cells ([`CsvCells`]: what the table shows of it,
//! and nothing else) can be kept between the passes instead of the row.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::text::csv_text;
use crate::analysis::names::{NameFold, MAX_NAMES, OTHER_NAMES};
use crate::analysis::stats::idle_share;
use gpu_ledger_format::saturating_sum;
use gpu_ledger_format::schema::IterationRow;

/// Scope paths that get columns of their own; the paths met after them share the
/// `scope:(other N names):…` columns, their sums per row. One row per iteration and scope
/// (`gpu-ledger csv --long`) has every path.
pub const MAX_SCOPE_COLUMNS: usize = MAX_NAMES;

/// The columns of a CSV export: the devices and scope paths seen in the rows.
#[derive(Debug, Clone, Default)]
pub struct CsvLayout {
    devices: BTreeSet<u32>,
    scopes: BTreeSet<String>,
    names: NameFold,
}

impl PartialEq for CsvLayout {
    fn eq(&self, o: &Self) -> bool {
        self.devices == o.devices
            && self.scopes == o.scopes
            && self.names.folded() == o.names.folded()
    }
}

impl Eq for CsvLayout {}

const FIXED: [&str; 10] = [
    "index",
    "host_start_ns",
    "host_wall_ns",
    "complete",
    "perturbed",
    "untraced",
    "tracing_added_ns",
    "dropped_records",
    "missing_records",
    "kernel_launches",
];

const PER_DEVICE: [&str; 7] = [
    "busy_ns",
    "idle_ns",
    "largest_gap_ns",
    "idle_share",
    "sm_clock_mhz",
    "power_w",
    "energy_j",
];

/// What the table shows of one row: its fixed cells, each device's cells and each scope's
/// figures, summed over the scope's entries. Made by [`CsvCells::of`], written by
/// [`CsvLayout::write_cells`]; much smaller than the row it comes from (no kernel, copy or
/// activity), so that it is what a two-pass export keeps between its passes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvCells {
    fixed: Vec<String>,
    devices: Vec<(u32, Vec<String>)>,
    scopes: Vec<(String, u64, u64)>,
}

impl CsvCells {
    /// The cells of `row`.
    pub fn of(row: &IterationRow) -> Self {
        let fixed = vec![
            row.index.to_string(),
            row.host_start_ns.to_string(),
            row.host_wall_ns.to_string(),
            row.complete.to_string(),
            row.perturbed.to_string(),
            row.untraced.to_string(),
            row.tracing_added_ns
                .map(|n| n.to_string())
                .unwrap_or_default(),
            row.dropped_records.to_string(),
            row.missing_records.to_string(),
            saturating_sum(row.kernels.iter().map(|k| k.count)).to_string(),
        ];
        let mut ids: BTreeSet<u32> = row.devices.iter().map(|d| d.device_id).collect();
        ids.extend(row.nvml.iter().map(|n| n.device_id));
        let devices = ids.into_iter().map(|d| (d, device_cells(row, d))).collect();
        let mut scopes: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for s in &row.scopes {
            let e = scopes.entry(s.path.as_str()).or_default();
            e.0 = e.0.saturating_add(s.device_ns_inclusive);
            e.1 = e.1.saturating_add(s.host_ns);
        }
        Self {
            fixed,
            devices,
            scopes: scopes
                .into_iter()
                .map(|(p, (dev, host))| (p.to_string(), dev, host))
                .collect(),
        }
    }
}

/// A figure NVML may have left unknown (`null` in the ledger, read as NaN): an empty cell, as
/// for a figure that was not sampled.
fn figure(x: Option<f64>, decimals: usize) -> String {
    x.filter(|v| v.is_finite())
        .map(|v| format!("{v:.decimals$}"))
        .unwrap_or_default()
}

/// The [`PER_DEVICE`] cells of device `d` in `row`.
fn device_cells(row: &IterationRow, d: u32) -> Vec<String> {
    let mut cells = Vec::with_capacity(PER_DEVICE.len());
    match row.devices.iter().find(|x| x.device_id == d) {
        Some(x) => {
            cells.push(x.busy_ns.to_string());
            cells.push(x.idle_ns.to_string());
            cells.push(x.largest_gap_ns.to_string());
            cells.push(figure(idle_share(x), 6));
        }
        None => cells.extend(std::iter::repeat_n(String::new(), 4)),
    }
    let n = row.nvml.iter().find(|x| x.device_id == d);
    cells.push(figure(
        n.and_then(|n| n.sm_clock.as_ref()).map(|c| c.mean_mhz),
        1,
    ));
    cells.push(figure(
        n.and_then(|n| n.power.as_ref()).map(|p| p.mean_w),
        2,
    ));
    cells.push(figure(
        n.and_then(|n| n.energy.as_ref()).map(|e| e.joules),
        6,
    ));
    cells
}

impl CsvLayout {
    /// An empty layout (fixed columns only).
    pub fn new() -> Self {
        Self::default()
    }

    /// The layout of `rows`.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a IterationRow>) -> Self {
        let mut l = Self::new();
        for r in rows {
            l.observe(r);
        }
        l
    }

    /// Adds the devices and scopes of `row`.
    pub fn observe(&mut self, row: &IterationRow) {
        self.devices.extend(row.devices.iter().map(|d| d.device_id));
        self.devices.extend(row.nvml.iter().map(|n| n.device_id));
        for s in &row.scopes {
            self.observe_scope(&s.path, s.device_ns_inclusive);
        }
    }

    fn observe_scope(&mut self, path: &str, device_ns: u64) {
        let key = self.names.key(path, device_ns);
        if !self.scopes.contains(key) {
            self.scopes.insert(key.to_string());
        }
    }

    /// The scope paths that share the `(other N names)` columns, when some did.
    pub fn folded(&self) -> Option<&NameFold> {
        Some(&self.names).filter(|n| n.folded() > 0)
    }

    /// Adds the devices and scopes of a row's cells.
    pub fn observe_cells(&mut self, cells: &CsvCells) {
        self.devices.extend(cells.devices.iter().map(|d| d.0));
        for (path, dev, _) in &cells.scopes {
            self.observe_scope(path, *dev);
        }
    }

    /// Column names in order.
    pub fn columns(&self) -> Vec<String> {
        let mut c: Vec<String> = FIXED.iter().map(|s| s.to_string()).collect();
        for d in &self.devices {
            c.extend(PER_DEVICE.iter().map(|f| format!("dev{d}_{f}")));
        }
        for s in &self.scopes {
            let s = if s == OTHER_NAMES {
                self.names.label()
            } else {
                s.clone()
            };
            c.push(format!("scope:{s}:device_ns_inclusive"));
            c.push(format!("scope:{s}:host_ns"));
        }
        c
    }

    /// Writes the header line.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn write_header(&self, out: &mut impl Write) -> io::Result<()> {
        let cols: Vec<String> = self.columns().iter().map(|c| csv_text(c)).collect();
        writeln!(out, "{}", cols.join(","))
    }

    /// Writes one row's line. Devices or scopes of `row` not in the layout are left out.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn write_row(&self, out: &mut impl Write, row: &IterationRow) -> io::Result<()> {
        self.write_cells(out, &CsvCells::of(row))
    }

    /// Writes the line of a row's cells. Devices or scopes not in the layout are left out.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn write_cells(&self, out: &mut impl Write, row: &CsvCells) -> io::Result<()> {
        let mut cells: Vec<&str> = row.fixed.iter().map(String::as_str).collect();
        let mut devices = row.devices.iter().peekable();
        for &d in &self.devices {
            while devices.next_if(|x| x.0 < d).is_some() {}
            match devices.next_if(|x| x.0 == d) {
                Some((_, c)) => cells.extend(c.iter().map(String::as_str)),
                None => cells.extend(std::iter::repeat_n("", PER_DEVICE.len())),
            }
        }
        // The row's paths without columns of their own are summed into the folded columns.
        let mut other: Option<(u64, u64)> = None;
        let mut own: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (path, dev, host) in &row.scopes {
            if self.scopes.contains(path) && path != OTHER_NAMES {
                own.insert(path, (*dev, *host));
            } else {
                let o = other.get_or_insert((0, 0));
                *o = (o.0.saturating_add(*dev), o.1.saturating_add(*host));
            }
        }
        let numbers: Vec<String> = self
            .scopes
            .iter()
            .flat_map(|s| {
                let v = if s == OTHER_NAMES {
                    other
                } else {
                    own.get(s.as_str()).copied()
                };
                match v {
                    Some((dev, host)) => [dev.to_string(), host.to_string()],
                    None => [String::new(), String::new()],
                }
            })
            .collect();
        cells.extend(numbers.iter().map(String::as_str));
        writeln!(out, "{}", cells.join(","))
    }
}

/// Writes the CSV of `rows` (header and one line per row). Returns the number of rows written.
///
/// # Errors
/// Any error of `out`.
pub fn write_csv(rows: &[IterationRow], mut out: impl Write) -> io::Result<usize> {
    let layout = CsvLayout::from_rows(rows);
    layout.write_header(&mut out)?;
    for r in rows {
        layout.write_row(&mut out, r)?;
    }
    out.flush()?;
    Ok(rows.len())
}
