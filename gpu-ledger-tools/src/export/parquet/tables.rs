//! The dataset's tables: their columns, and what each ledger line puts in them. Every table
//! but `environment` has one row per item of a ledger row and starts with its `iteration`; the
//! run and the rank are the Hive partition (`run=…/rank=…`), not columns of the files. The
//! idle-time tables are in `tables/idle.rs`.

use super::columns::{opt, req, Col, Kind::*, Row};
use gpu_ledger_format::saturating_sum;
use gpu_ledger_format::schema::{AttributionCounts, Header, IterationRow, Trailer};

mod idle;

/// The tables, in the order their part files are written.
pub const TABLES: [&str; 13] = [
    "iterations",
    "devices",
    "scopes",
    "kernels",
    "transfers",
    "activities",
    "scope_spans",
    "nvml",
    "counters",
    "launch_threads",
    "environment",
    "idle_gaps",
    "idle_causes",
];

/// Index of each table in [`TABLES`].
pub(super) const ITERATIONS: usize = 0;
pub(super) const ENVIRONMENT: usize = 10;
const IDLE_GAPS: usize = 11;
const IDLE_CAUSES: usize = 12;

const ATTRIBUTION: [Col; 5] = [
    opt("attribution_own_thread", I64),
    opt("attribution_handoff", I64),
    opt("attribution_followed", I64),
    opt("attribution_profiler", I64),
    opt("attribution_unscoped", I64),
];

const ITERATION_COLS: [Col; 24] = [
    req("iteration", I64),
    req("host_start_ns", I64),
    req("host_wall_ns", I64),
    req("complete", Bool),
    req("perturbed", Bool),
    req("devices", I64),
    req("kernel_launches", I64),
    req("scopes", I64),
    req("kernel_groups", I64),
    req("dropped_records", I64),
    req("missing_records", I64),
    req("warnings", StrList),
    opt("counters_collection", I64),
    opt("counters_complete", Bool),
    opt("counters_dropped_ranges", I64),
    opt("counters_error", Str),
    ATTRIBUTION[0],
    ATTRIBUTION[1],
    ATTRIBUTION[2],
    ATTRIBUTION[3],
    ATTRIBUTION[4],
    req("launch_threads", I64),
    req("untraced", Bool),
    opt("tracing_added_ns", I64),
];

const DEVICE_COLS: [Col; 10] = [
    req("iteration", I64),
    req("device_id", I64),
    req("first_start_ns", I64),
    req("last_end_ns", I64),
    req("window_ns", I64),
    req("busy_ns", I64),
    req("idle_ns", I64),
    req("largest_gap_ns", I64),
    req("kernel_count", I64),
    opt("peak_memory_bytes", I64),
];

const SCOPE_COLS: [Col; 9] = [
    req("iteration", I64),
    req("path", Str),
    req("calls", I64),
    req("host_ns", I64),
    req("launches", I64),
    req("kernels", I64),
    req("device_ns", I64),
    req("device_ns_inclusive", I64),
    opt("event_device_ns", I64),
];

const KERNEL_COLS: [Col; 22] = [
    req("iteration", I64),
    req("name", Str),
    req("device_id", I64),
    req("grid_x", I64),
    req("grid_y", I64),
    req("grid_z", I64),
    req("block_x", I64),
    req("block_y", I64),
    req("block_z", I64),
    req("cluster_x", I64),
    req("cluster_y", I64),
    req("cluster_z", I64),
    req("registers_per_thread", I64),
    req("static_shared_bytes", I64),
    req("dynamic_shared_bytes", I64),
    req("local_bytes_per_thread", I64),
    req("local_bytes_total", I64),
    req("count", I64),
    req("total_ns", I64),
    req("min_ns", I64),
    req("max_ns", I64),
    req("graph_launches", I64),
];

const TRANSFER_COLS: [Col; 7] = [
    req("iteration", I64),
    req("op", Str),
    opt("device_id", I64),
    req("kind", Str),
    req("count", I64),
    opt("bytes", I64),
    req("total_ns", I64),
];

const ACTIVITY_COLS: [Col; 12] = [
    req("iteration", I64),
    req("kind", Str),
    req("name", Str),
    req("device_id", I64),
    req("stream_id", I64),
    req("start_ns", I64),
    req("end_ns", I64),
    req("scope", Str),
    opt("attribution", Str),
    req("correlation_id", I64),
    opt("bytes", I64),
    opt("graph_id", I64),
];

const SPAN_COLS: [Col; 5] = [
    req("iteration", I64),
    req("path", Str),
    req("thread", I64),
    req("start_ns", I64),
    req("end_ns", I64),
];

const NVML_COLS: [Col; 21] = [
    req("iteration", I64),
    req("device_id", I64),
    req("window_ns", I64),
    req("samples", I64),
    req("coarse", Bool),
    opt("sm_clock_min_mhz", I64),
    opt("sm_clock_mean_mhz", F64),
    opt("sm_clock_max_mhz", I64),
    opt("mem_clock_min_mhz", I64),
    opt("mem_clock_mean_mhz", F64),
    opt("mem_clock_max_mhz", I64),
    opt("power_mean_w", F64),
    opt("power_max_w", F64),
    opt("energy_j", F64),
    opt("energy_method", Str),
    opt("temperature_max_c", I64),
    req("throttle_reasons", StrList),
    opt("memory_used_max_bytes", I64),
    opt("pcie_tx_bytes_per_s", F64),
    opt("pcie_rx_bytes_per_s", F64),
    req("notes", StrList),
];

const COUNTER_COLS: [Col; 9] = [
    req("iteration", I64),
    req("collection", I64),
    req("pass", I64),
    req("range", Str),
    req("depth", I64),
    opt("kernel", Str),
    opt("launch_index", I64),
    req("metric", Str),
    opt("value", F64),
];

const THREAD_COLS: [Col; 11] = [
    req("iteration", I64),
    opt("name", Str),
    req("tid", I64),
    req("kernels", I64),
    req("kernel_ns", I64),
    req("copies", I64),
    ATTRIBUTION[0],
    ATTRIBUTION[1],
    ATTRIBUTION[2],
    ATTRIBUTION[3],
    ATTRIBUTION[4],
];

const ENVIRONMENT_COLS: [Col; 26] = [
    req("source", Str),
    req("schema_version", I64),
    req("gpu_ledger_version", Str),
    req("start_unix_ns", I64),
    opt("start_cupti_ns", I64),
    req("level", Str),
    req("record_activities", Bool),
    opt("header_rank", I64),
    opt("local_rank", I64),
    opt("world_size", I64),
    opt("hostname", Str),
    req("command_line", StrList),
    req("gpus", StrList),
    opt("driver_version", Str),
    opt("cuda_driver_version", I64),
    opt("cupti_api_version", I64),
    opt("cupti_release", Str),
    req("warnings", StrList),
    req("iterations", I64),
    opt("truncated_last_line", I64),
    opt("trailer_dropped_records", I64),
    opt("trailer_late_records", I64),
    opt("trailer_unplaced_records", I64),
    opt("trailer_lines_not_written", I64),
    req("header_json", Str),
    opt("trailer_json", Str),
];

/// The columns of table `t` (an index into [`TABLES`]).
pub(super) fn columns(t: usize) -> &'static [Col] {
    match t {
        0 => &ITERATION_COLS,
        1 => &DEVICE_COLS,
        2 => &SCOPE_COLS,
        3 => &KERNEL_COLS,
        4 => &TRANSFER_COLS,
        5 => &ACTIVITY_COLS,
        6 => &SPAN_COLS,
        7 => &NVML_COLS,
        8 => &COUNTER_COLS,
        9 => &THREAD_COLS,
        ENVIRONMENT => &ENVIRONMENT_COLS,
        IDLE_GAPS => &idle::GAP_COLS,
        _ => &idle::CAUSE_COLS,
    }
}

fn attribution(r: &mut Row<'_>, a: Option<&AttributionCounts>) {
    r.ou(a.map(|a| a.own_thread))
        .ou(a.map(|a| a.handoff))
        .ou(a.map(|a| a.followed))
        .ou(a.map(|a| a.profiler))
        .ou(a.map(|a| a.unscoped));
}

/// What fills one row of a table.
pub(super) type Fill<'f> = &'f mut dyn FnMut(&mut Row<'_>);

/// Where rows go: `sink(table, fill)` appends one row to `table`.
pub(super) type Sink<'s, E> = dyn FnMut(usize, Fill<'_>) -> Result<(), E> + 's;

/// Where one ledger row's items go, table by table in the order of [`TABLES`].
pub(super) fn iteration_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    iteration_row(row, sink)?;
    device_rows(row, sink)?;
    scope_rows(row, sink)?;
    kernel_rows(row, sink)?;
    transfer_rows(row, sink)?;
    activity_rows(row, sink)?;
    span_rows(row, sink)?;
    nvml_rows(row, sink)?;
    counter_rows(row, sink)?;
    thread_rows(row, sink)?;
    idle::gap_rows(row, sink)?;
    idle::cause_rows(row, sink)
}

/// The `iterations` table's one row: the ledger row's own figures and the counts of its items.
fn iteration_row<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    let c = row.counters.as_ref();
    sink(ITERATIONS, &mut |r| {
        r.u(i)
            .u(row.host_start_ns)
            .u(row.host_wall_ns)
            .bool(Some(row.complete))
            .bool(Some(row.perturbed))
            .u(row.devices.len() as u64)
            .u(saturating_sum(row.devices.iter().map(|d| d.kernel_count)))
            .u(row.scopes.len() as u64)
            .u(row.kernels.len() as u64)
            .u(row.dropped_records)
            .u(row.missing_records)
            .strs(row.warnings.iter().map(String::as_str))
            .ou(c.map(|c| c.collection))
            .bool(c.map(|c| c.complete))
            .ou(c.map(|c| c.dropped_ranges))
            .str(c.and_then(|c| c.error.as_deref()));
        attribution(r, row.attribution.as_ref());
        r.u(row.launch_threads.len() as u64)
            .bool(Some(row.untraced))
            .ou(row.tracing_added_ns);
    })
}

/// The `devices` table: one row per device with activity in the iteration.
fn device_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for d in &row.devices {
        sink(1, &mut |r| {
            r.u(i)
                .u(d.device_id.into())
                .u(d.first_start_ns)
                .u(d.last_end_ns)
                .u(d.last_end_ns.saturating_sub(d.first_start_ns))
                .u(d.busy_ns)
                .u(d.idle_ns)
                .u(d.largest_gap_ns)
                .u(d.kernel_count)
                .ou(d.peak_memory_bytes);
        })?;
    }
    Ok(())
}

/// The `scopes` table: one row per scope that ran in the iteration.
fn scope_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for s in &row.scopes {
        sink(2, &mut |r| {
            r.u(i)
                .str(Some(&s.path))
                .u(s.calls)
                .u(s.host_ns)
                .u(s.launches)
                .u(s.kernels)
                .u(s.device_ns)
                .u(s.device_ns_inclusive)
                .ou(s.event_device_ns);
        })?;
    }
    Ok(())
}

/// The `kernels` table: one row per kernel group, its launch shape spread over columns.
fn kernel_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for k in &row.kernels {
        let s = &k.shape;
        sink(3, &mut |r| {
            r.u(i).str(Some(&k.name)).u(k.device_id.into());
            for v in s.grid.iter().chain(&s.block).chain(&s.cluster) {
                r.u((*v).into());
            }
            r.u(s.registers_per_thread.into())
                .u(s.static_shared_bytes.into())
                .u(s.dynamic_shared_bytes.into())
                .u(s.local_bytes_per_thread.into())
                .u(k.local_bytes_total)
                .u(k.count)
                .u(k.total_ns)
                .u(k.min_ns)
                .u(k.max_ns)
                .u(k.graph_launches);
        })?;
    }
    Ok(())
}

/// The `transfers` table: memcpy and memset groups, then synchronization (no device, no bytes).
fn transfer_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for (op, groups) in [("memcpy", &row.memcpy), ("memset", &row.memset)] {
        for g in groups {
            sink(4, &mut |r| {
                r.u(i)
                    .str(Some(op))
                    .u(g.device_id.into())
                    .str(Some(&g.kind))
                    .u(g.count)
                    .u(g.bytes)
                    .u(g.total_ns);
            })?;
        }
    }
    for g in &row.synchronization {
        sink(4, &mut |r| {
            r.u(i)
                .str(Some("synchronization"))
                .ou(None)
                .str(Some(&g.kind))
                .u(g.count)
                .ou(None)
                .u(g.total_ns);
        })?;
    }
    Ok(())
}

/// The `activities` table: one row per recorded activity, when activities were recorded.
fn activity_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for a in row.activities.iter().flatten() {
        sink(5, &mut |r| {
            r.u(i)
                .str(Some(&a.kind))
                .str(Some(&a.name))
                .u(a.device_id.into())
                .u(a.stream_id.into())
                .u(a.start_ns)
                .u(a.end_ns)
                .str(Some(&a.scope))
                .str(a.attribution.as_deref())
                .u(a.correlation_id.into())
                .ou(a.bytes)
                .ou(a.graph_id.map(u64::from));
        })?;
    }
    Ok(())
}

/// The `scope_spans` table: one row per scope instance, when activities were recorded.
fn span_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for s in row.scope_spans.iter().flatten() {
        sink(6, &mut |r| {
            r.u(i)
                .str(Some(&s.path))
                .u(s.thread.into())
                .u(s.start_ns)
                .u(s.end_ns);
        })?;
    }
    Ok(())
}

/// The `nvml` table: one row per device NVML sampled, clocks as min, mean and max.
fn nvml_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for n in &row.nvml {
        sink(7, &mut |r| {
            r.u(i)
                .u(n.device_id.into())
                .u(n.window_ns)
                .u(n.samples.into())
                .bool(Some(n.coarse));
            for c in [&n.sm_clock, &n.mem_clock] {
                r.ou(c.as_ref().map(|c| c.min_mhz.into()))
                    .f64(c.as_ref().map(|c| c.mean_mhz))
                    .ou(c.as_ref().map(|c| c.max_mhz.into()));
            }
            // The method as the ledger spells it (`energy_counter`, `integrated_power`).
            let method = n.energy.as_ref().and_then(|e| {
                serde_json::to_value(e.method)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
            });
            r.f64(n.power.as_ref().map(|p| p.mean_w))
                .f64(n.power.as_ref().map(|p| p.max_w))
                .f64(n.energy.as_ref().map(|e| e.joules))
                .str(method.as_deref())
                .ou(n.temperature_max_c.map(u64::from))
                .strs(n.throttle_reasons.iter().map(String::as_str))
                .ou(n.memory_used_max_bytes)
                .f64(n.pcie_tx_bytes_per_s)
                .f64(n.pcie_rx_bytes_per_s)
                .strs(n.notes.iter().map(String::as_str));
        })?;
    }
    Ok(())
}

/// The `counters` table: one row per metric of each counter range, when a collection ended in
/// the iteration.
fn counter_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    let Some(c) = row.counters.as_ref() else {
        return Ok(());
    };
    for range in &c.ranges {
        for (metric, value) in &range.values {
            sink(8, &mut |r| {
                r.u(i)
                    .u(c.collection)
                    .u(c.run.into())
                    .str(Some(&range.name))
                    .u(range.depth.into())
                    .str(range.kernel.as_deref())
                    .ou(range.launch_index)
                    .str(Some(metric))
                    // NaN (a metric CUPTI could not evaluate) is stored as null.
                    .f64(Some(*value).filter(|v| v.is_finite()));
            })?;
        }
    }
    Ok(())
}

/// The `launch_threads` table: one row per thread that launched work in the iteration.
fn thread_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for t in &row.launch_threads {
        sink(9, &mut |r| {
            r.u(i)
                .str(t.name.as_deref())
                .u(t.tid.into())
                .u(t.kernels)
                .u(t.kernel_ns)
                .u(t.copies);
            attribution(r, Some(&t.attribution));
        })?;
    }
    Ok(())
}

/// What the environment table's row holds beyond the header and the trailer.
#[derive(Debug)]
pub(super) struct LedgerFacts<'a> {
    pub(super) source: &'a str,
    pub(super) rows: u64,
    pub(super) truncated_last_line: Option<usize>,
}

/// The environment table's one row for a ledger.
pub(super) fn environment_row(
    r: &mut Row<'_>,
    h: &Header,
    t: Option<&Trailer>,
    facts: &LedgerFacts<'_>,
) {
    let e = &h.environment;
    let rank = h.rank.as_ref();
    let header_json = serde_json::to_string(h).unwrap_or_default();
    let trailer_json = t.and_then(|t| serde_json::to_string(t).ok());
    r.str(Some(facts.source))
        .u(h.schema_version.into())
        .str(Some(&h.gpu_ledger_version))
        .u(h.start_unix_ns)
        .ou(h.start_cupti_ns)
        .str(Some(&h.config.level))
        .bool(Some(h.config.record_activities))
        .ou(rank.map(|r| r.rank.into()))
        .ou(rank.and_then(|r| r.local_rank).map(u64::from))
        .ou(rank.and_then(|r| r.world_size).map(u64::from))
        .str(e.hostname.as_deref())
        .strs(e.command_line.iter().map(String::as_str))
        .strs(e.gpus.iter().map(|g| g.name.as_str()))
        .str(e.driver_version.as_deref())
        .ou(e.cuda_driver_version.map(u64::from))
        .ou(e.cupti_api_version.map(u64::from))
        .str(e.cupti_release.as_deref())
        .strs(h.warnings.iter().map(String::as_str))
        .u(facts.rows)
        .ou(facts.truncated_last_line.map(|l| l as u64))
        .ou(t.map(|t| t.dropped_records))
        .ou(t.map(|t| t.late_records))
        .ou(t.map(|t| t.unplaced_records))
        .ou(t.map(|t| t.lines_not_written))
        .str(Some(&header_json))
        .str(trailer_json.as_deref());
}
