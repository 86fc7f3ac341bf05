//! Idle time by cause, on records whose answer is known by construction, through the
//! profiler's own collector ([`OfflineCollector`]). Host and CUPTI clocks agree (each
//! `end_iteration(t, t, n)` gives an offset of 0), calls are on thread 0 unless stated, and
//! kernels run on device 0.

use std::time::Duration;

use cupti_sys as sys;

use super::offline::OfflineCollector;
use crate::config::IdleConfig;
use crate::cupti::calls::{Attribution, CapturedCall};
use crate::cupti::record::{
    intern_name, CopyRecord, KernelRecord, MemoryRecord, Record, SyncRecord,
};
use crate::ledger::idle::{IdleBreakdown, IdleCause};
use crate::ledger::schema::{IterationRow, LaunchShape};

/// A collector splitting idle time with a dispatch floor of `floor_ns`.
fn collector(floor_ns: u64) -> OfflineCollector {
    OfflineCollector::with_idle(
        0,
        Some(IdleConfig {
            dispatch_floor: Some(Duration::from_nanos(floor_ns)),
            ..IdleConfig::default()
        }),
    )
}

/// The driver function `name`'s call `corr`, entered at `entry` and left at `exit` (host ns),
/// in iteration `iteration` and scope `path`.
fn call(name: &str, corr: u32, iteration: u64, entry: u64, exit: u64, path: u32) -> CapturedCall {
    let cbid = sys::bound_cbids()
        .driver
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(id, _)| *id)
        .expect("a driver function");
    CapturedCall {
        correlation_id: corr,
        cbid,
        iteration,
        path_id: path,
        return_value: 0,
        runtime: false,
        nested: false,
        outer_correlation_id: corr,
        attribution: if path == 0 {
            Attribution::Unscoped
        } else {
            Attribution::OwnThread
        },
        thread: 0,
        entry,
        exit,
    }
}

fn launch(corr: u32, entry: u64, exit: u64, path: u32) -> CapturedCall {
    call("cuLaunchKernel", corr, 0, entry, exit, path)
}

/// A kernel `name` of call `corr` over `[start, end)` on `stream`.
fn kernel(corr: u32, start: u64, end: u64, stream: u32, name: &str) -> Record {
    Record::Kernel(KernelRecord {
        name: intern_name(name),
        start,
        end,
        device_id: 0,
        context_id: 1,
        stream_id: stream,
        correlation_id: corr,
        shape: LaunchShape::default(),
        shared_executed_bytes: 0,
        local_bytes_total: 0,
        graph_id: 0,
        graph_node_id: 0,
        device_launched: false,
    })
}

fn copy(corr: u32, direction: &'static str, start: u64, end: u64, bytes: u64) -> CopyRecord {
    CopyRecord {
        direction,
        bytes,
        start,
        end,
        device_id: 0,
        context_id: 1,
        stream_id: 7,
        correlation_id: corr,
        graph_id: 0,
        graph_node_id: 0,
        is_async: true,
        pageable: false,
    }
}

fn sync(corr: u32, kind: &'static str, start: u64, end: u64, stream: u32) -> Record {
    Record::Sync(SyncRecord {
        kind,
        start,
        end,
        correlation_id: corr,
        context_id: 1,
        stream_id: stream,
    })
}

/// The one row ready, and device 0's breakdown.
fn row_and_idle(c: &mut OfflineCollector) -> (IterationRow, IdleBreakdown) {
    let mut rows = c.take_rows();
    assert_eq!(rows.len(), 1, "one row ready");
    let row = rows.remove(0);
    assert!(row.complete, "{:?}", row.warnings);
    let idle = row.devices[0]
        .idle
        .clone()
        .expect("the device's idle causes");
    (row, idle)
}

/// `(cause, detail, rule, ns)` of each cause, in the ledger's order.
fn split(causes: &[IdleCause]) -> Vec<(&str, Option<&str>, &str, u64)> {
    causes
        .iter()
        .map(|c| (c.cause.as_str(), c.detail.as_deref(), c.rule.as_str(), c.ns))
        .collect()
}

fn total(causes: &[IdleCause]) -> u64 {
    causes.iter().map(|c| c.ns).sum()
}

#[test]
fn a_host_scope_that_sleeps_between_two_launches_is_host_launch_in_that_scope() {
    let mut c = collector(300);
    let step = c.intern_path("step");
    let data = c.intern_path("step/data");
    c.accept_call(launch(1, 1_000, 1_100, step));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_scope(data, 0, 2_600, 9_000);
    c.accept_call(launch(2, 9_100, 9_200, step));
    c.accept(kernel(2, 9_500, 10_000, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(row.devices[0].idle_ns, 7_000);
    assert_eq!(
        split(&idle.causes),
        vec![
            (
                "host_launch",
                Some("launch_call"),
                "inside_launch_call",
                100
            ),
            ("host_launch", Some("scope:step"), "scope_at_launch", 200),
            ("host_launch", Some("scope:step/data"), "scope_open", 6_400),
            ("launch_latency", None, "submit_after_late_launch", 300),
        ]
    );
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
    assert_eq!((idle.floor_ns, idle.floor_source.as_str()), (300, "config"));
    let g = &idle.largest_gaps[0];
    assert_eq!((g.start_ns, g.ns), (2_500, 7_000));
    assert_eq!(
        (g.cause.as_str(), g.detail.as_deref()),
        ("host_launch", Some("scope:step/data"))
    );
    assert_eq!(g.scope.as_deref(), Some("step/data"));
    assert_eq!(
        (g.before.as_deref(), g.after.as_deref()),
        (Some("k1"), Some("k2"))
    );
    assert_eq!((g.before_stream, g.after_stream), (Some(7), Some(7)));
    assert_eq!(g.parts.iter().map(|p| p.ns).sum::<u64>(), g.ns);
}

#[test]
fn a_synchronize_then_a_launch_is_the_host_blocked_in_the_synchronize() {
    let mut c = collector(200);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(call("cuStreamSynchronize", 3, 0, 1_200, 4_000, 0));
    c.accept(sync(3, "stream", 1_200, 4_000, 7));
    c.accept_call(launch(2, 4_050, 4_100, 0));
    c.accept(kernel(2, 4_300, 4_800, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![
            (
                "host_launch",
                Some("blocked:synchronize"),
                "in_cuda_call",
                1_500
            ),
            ("host_launch", Some("launch_call"), "inside_launch_call", 50),
            ("host_launch", Some("nothing_known"), "no_host_evidence", 50),
            ("launch_latency", None, "submit_after_late_launch", 200),
        ]
    );
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
    let g = &idle.largest_gaps[0];
    assert_eq!(g.function.as_deref(), Some("cuStreamSynchronize"));
    assert_eq!(g.detail.as_deref(), Some("blocked:synchronize"));
    let inventory: Vec<(&str, u64, u64)> = row
        .host_inventory
        .iter()
        .map(|e| (e.kind.as_str(), e.count, e.host_ns))
        .collect();
    assert_eq!(inventory, vec![("stream_sync", 1, 2_800)]);
}

#[test]
fn a_free_without_a_synchronization_record_blocks_by_its_call_times() {
    let mut c = collector(200);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(call("cuMemFree_v2", 3, 0, 2_600, 4_000, 0));
    c.accept_call(launch(2, 4_050, 4_100, 0));
    c.accept(kernel(2, 4_300, 4_800, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![
            ("host_launch", Some("blocked:free"), "in_cuda_call", 1_400),
            ("host_launch", Some("launch_call"), "inside_launch_call", 50),
            (
                "host_launch",
                Some("nothing_known"),
                "no_host_evidence",
                150
            ),
            ("launch_latency", None, "submit_after_late_launch", 200),
        ]
    );
    let g = &idle.largest_gaps[0];
    assert_eq!(
        (g.detail.as_deref(), g.function.as_deref()),
        (Some("blocked:free"), Some("cuMemFree_v2"))
    );
}

#[test]
fn a_kernel_launched_early_that_waits_on_an_event_is_a_dependency() {
    let mut c = collector(1_000);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(call("cuStreamWaitEvent", 3, 0, 1_300, 1_350, 0));
    c.accept(sync(3, "stream_wait_event", 1_300, 1_350, 8));
    c.accept_call(launch(2, 1_400, 1_450, 0));
    c.accept(kernel(2, 6_000, 6_500, 8, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![
            ("dependency", Some("event"), "stream_wait_event", 2_500),
            ("launch_latency", None, "below_floor", 1_000),
        ]
    );
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
    // The same kernel with no wait on its stream: the wait is unexplained.
    let mut c = collector(1_000);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(launch(2, 1_400, 1_450, 0));
    c.accept(kernel(2, 6_000, 6_500, 8, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes)[0],
        (
            "dependency",
            Some("unknown"),
            "launched_before_gap_start",
            2_500
        )
    );
}

#[test]
fn a_late_launch_that_then_waits_on_an_event_waits_past_the_floor_on_the_event() {
    let mut c = collector(300);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(call("cuStreamSynchronize", 2, 0, 1_200, 3_000, 0));
    c.accept(sync(2, "stream", 1_200, 3_000, 7));
    c.accept_call(call("cuStreamWaitEvent", 3, 0, 3_050, 3_060, 0));
    c.accept(sync(3, "stream_wait_event", 3_050, 3_060, 8));
    c.accept_call(launch(4, 3_100, 3_200, 0));
    c.accept(kernel(4, 8_000, 8_500, 8, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![
            ("dependency", Some("event"), "stream_wait_event", 4_500),
            (
                "host_launch",
                Some("blocked:synchronize"),
                "in_cuda_call",
                500
            ),
            ("host_launch", Some("launch_call"), "in_launch_call", 10),
            (
                "host_launch",
                Some("launch_call"),
                "inside_launch_call",
                100
            ),
            ("host_launch", Some("nothing_known"), "no_host_evidence", 90),
            ("launch_latency", None, "submit_after_late_launch", 300),
        ]
    );
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
}

#[test]
fn copies_without_compute_are_copy_only_time_outside_idle_ns() {
    let mut c = collector(1_000);
    for (corr, t) in [(1, 1_000), (2, 1_100), (3, 1_200), (4, 1_300)] {
        let name = if corr % 2 == 0 {
            "cuMemcpyHtoDAsync_v2"
        } else {
            "cuLaunchKernel"
        };
        c.accept_call(call(name, corr, 0, t, t + 50, 0));
    }
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept(Record::Memcpy(copy(2, "HtoD", 2_500, 4_000, 1 << 20)));
    c.accept(kernel(3, 4_000, 4_500, 7, "k2"));
    c.accept(Record::Memcpy(copy(4, "HtoD", 4_100, 4_300, 4096)));
    c.end_iteration(10_000, 10_000, 4);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(row.devices[0].idle_ns, 0);
    assert!(idle.causes.is_empty());
    assert_eq!(
        (
            idle.compute_idle_ns,
            idle.copy_only_ns,
            idle.copy_overlapped_ns
        ),
        (1_500, 1_500, 200)
    );
    assert!(idle.largest_gaps.is_empty());
}

/// Three launches entered 100 ns apart, whose kernels run 100 ns apart.
fn back_to_back(c: &mut OfflineCollector, iteration: u64, base: u64) {
    for i in 0..3u32 {
        let t = base + 100 * u64::from(i);
        let corr = 10 * iteration as u32 + i + 1;
        c.accept_call(call("cuLaunchKernel", corr, iteration, t, t + 50, 0));
        let start = base + 1_000 + 600 * u64::from(i);
        c.accept(kernel(corr, start, start + 500, 7, "empty"));
    }
}

#[test]
fn back_to_back_launches_are_launch_latency_up_to_the_floor() {
    let mut c = collector(1_000);
    back_to_back(&mut c, 0, 1_000);
    c.end_iteration(10_000, 10_000, 3);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![("launch_latency", None, "below_floor", 200)]
    );
    assert_eq!(idle.causes[0].gaps, 2);
    // A floor below the gaps: the rest waited behind the stream's own previous kernel.
    let mut c = collector(50);
    back_to_back(&mut c, 0, 1_000);
    c.end_iteration(10_000, 10_000, 3);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![
            (
                "dependency",
                Some("stream_order"),
                "same_stream_above_floor",
                100
            ),
            ("launch_latency", None, "below_floor", 100),
        ]
    );
}

#[test]
fn the_gap_across_step_is_the_lead_in_outside_idle_ns() {
    let mut c = collector(250);
    back_to_back(&mut c, 0, 1_000);
    c.end_iteration(4_000, 4_000, 3);
    assert!(
        row_and_idle(&mut c).1.lead_in.is_none(),
        "the first row has none"
    );
    c.accept_call(call("cuLaunchKernel", 40, 1, 6_000, 6_050, 0));
    c.accept(kernel(40, 6_300, 6_800, 7, "next"));
    c.end_iteration(10_000, 10_000, 4);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(row.devices[0].idle_ns, 0);
    let lead = idle.lead_in.expect("the gap before the window");
    assert_eq!((lead.start_ns, lead.ns), (3_700, 2_600));
    assert_eq!(
        split(&lead.parts),
        vec![
            (
                "host_launch",
                Some("iteration_boundary"),
                "after_step_before_first_call",
                2_000
            ),
            (
                "host_launch",
                Some("nothing_known"),
                "no_host_evidence",
                300
            ),
            ("launch_latency", None, "submit_after_late_launch", 250),
            ("host_launch", Some("launch_call"), "inside_launch_call", 50),
        ]
    );
    assert_eq!(
        (lead.before.as_deref(), lead.after.as_deref()),
        (Some("empty"), Some("next"))
    );
}

#[test]
fn a_synchronize_of_the_previous_iteration_paints_the_lead_in() {
    // The loop's `.item()`: a synchronize ends iteration 0's work; step(); iteration 1 launches.
    let mut c = collector(300);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 5_000, 7, "k1"));
    c.accept_call(call("cuStreamSynchronize", 2, 0, 1_200, 5_800, 0));
    c.accept(sync(2, "stream", 1_200, 5_800, 7));
    c.end_iteration(6_000, 6_000, 1);
    let _ = row_and_idle(&mut c);
    c.accept_call(call("cuLaunchKernel", 3, 1, 7_000, 7_100, 0));
    c.accept(kernel(3, 7_400, 7_900, 7, "k2"));
    c.end_iteration(9_000, 9_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    let lead = idle.lead_in.expect("lead-in");
    assert_eq!(
        split(&lead.parts),
        vec![
            (
                "host_launch",
                Some("iteration_boundary"),
                "after_step_before_first_call",
                1_000
            ),
            (
                "host_launch",
                Some("blocked:synchronize"),
                "in_cuda_call",
                800
            ),
            ("launch_latency", None, "submit_after_late_launch", 300),
            (
                "host_launch",
                Some("nothing_known"),
                "no_host_evidence",
                200
            ),
            (
                "host_launch",
                Some("launch_call"),
                "inside_launch_call",
                100
            ),
        ]
    );
    assert_eq!(lead.function.as_deref(), Some("cuStreamSynchronize"));
    assert_eq!(lead.parts.iter().map(|p| p.ns).sum::<u64>(), lead.ns);
}

#[test]
fn the_floor_comes_from_the_calibrations_back_to_back_empty_kernels() {
    let mut c = OfflineCollector::with_idle(0, Some(IdleConfig::default()));
    for i in 0..20u64 {
        let t = 1_200 * i;
        c.accept(kernel(0, t, t + 500, 3, "gpu_ledger_calibrate_empty"));
    }
    assert_eq!(c.trailer().calibration_records, 20);
    back_to_back(&mut c, 0, 100_000);
    c.end_iteration(200_000, 200_000, 3);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        (idle.floor_ns, idle.floor_source.as_str()),
        (700, "calibration")
    );
    let (_, trailer) = c.finish(300_000, 300_000);
    assert_eq!(trailer.dispatch_floors.len(), 1);
    let f = &trailer.dispatch_floors[0];
    assert_eq!((f.floor_ns, f.median_ns, f.samples), (700, Some(700), 19));
    assert!(!trailer
        .warnings
        .iter()
        .any(|w| w.contains("dispatch floor")));
}

#[test]
fn an_unmeasured_floor_is_the_default_and_the_trailer_says_so() {
    let mut c = OfflineCollector::with_idle(0, Some(IdleConfig::default()));
    back_to_back(&mut c, 0, 1_000);
    c.end_iteration(10_000, 10_000, 3);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(idle.floor_source, "default");
    let (_, trailer) = c.finish(20_000, 20_000);
    assert!(
        trailer
            .warnings
            .iter()
            .any(|w| w.contains("was not measured") && w.contains("IdleConfig::dispatch_floor")),
        "{:?}",
        trailer.warnings
    );
}

#[test]
fn the_inventory_lists_small_reads_allocations_and_device_synchronizations_by_scope() {
    let mut c = collector(200);
    let log = c.intern_path("step/log");
    let opt = c.intern_path("step/optimizer");
    c.accept_call(launch(1, 1_000, 1_100, log));
    c.accept(kernel(1, 1_500, 2_000, 7, "loss"));
    // `.item()`: a 4-byte asynchronous copy into pageable memory, then a synchronize.
    c.accept_call(call("cuMemcpyDtoHAsync_v2", 2, 0, 1_200, 2_600, log));
    let mut item = copy(2, "DtoH", 2_100, 2_200, 4);
    item.pageable = true;
    c.accept(Record::Memcpy(item));
    c.accept_call(call("cuMemAlloc_v2", 3, 0, 2_700, 3_700, opt));
    c.accept(Record::Memory(MemoryRecord {
        allocation: true,
        address: 0x1000,
        bytes: 1 << 20,
        timestamp: 3_000,
        device_id: 0,
        correlation_id: 3,
        memory_kind: 3,
    }));
    c.accept_call(call("cuCtxSynchronize", 4, 0, 3_800, 3_900, opt));
    c.accept(sync(4, "context", 3_800, 3_850, u32::MAX));
    c.accept_call(launch(5, 4_000, 4_100, opt));
    c.accept(kernel(5, 4_300, 4_800, 7, "adam"));
    c.end_iteration(10_000, 10_000, 3);
    let (row, idle) = row_and_idle(&mut c);
    type Line<'a> = (&'a str, &'a str, Option<&'a str>, u64, Option<u64>, u64);
    let got: Vec<Line<'_>> = row
        .host_inventory
        .iter()
        .map(|e| {
            (
                e.kind.as_str(),
                e.scope.as_str(),
                e.function.as_deref(),
                e.count,
                e.bytes,
                e.host_ns,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "alloc",
                "step/optimizer",
                Some("cuMemAlloc_v2"),
                1,
                Some(1 << 20),
                1_000
            ),
            (
                "device_sync",
                "step/optimizer",
                Some("cuCtxSynchronize"),
                1,
                None,
                50
            ),
            (
                "small_dtoh",
                "step/log",
                Some("cuMemcpyDtoHAsync_v2"),
                1,
                Some(4),
                1_400
            ),
            (
                "sync_copy",
                "step/log",
                Some("cuMemcpyDtoHAsync_v2"),
                1,
                Some(4),
                1_400
            ),
        ]
    );
    let small = &row.host_inventory[2];
    assert_eq!(
        small.synchronous,
        Some(1),
        "pageable memory holds the thread"
    );
    // The pageable read and the allocation block the host: both are named in the gaps.
    let blocked: Vec<&str> = idle
        .causes
        .iter()
        .filter(|c| c.rule == "in_cuda_call")
        .filter_map(|c| c.detail.as_deref())
        .collect();
    assert!(blocked.contains(&"blocked:sync_copy") && blocked.contains(&"blocked:allocation"));
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
}

#[test]
fn a_scope_on_another_thread_does_not_paint_the_launching_threads_gap() {
    let mut c = collector(300);
    let other = c.intern_path("loader");
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_scope_on(1, other, 0, 2_000, 9_000);
    c.accept_call(launch(2, 9_100, 9_200, 0));
    c.accept(kernel(2, 9_500, 10_000, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    assert!(
        idle.causes
            .iter()
            .all(|c| c.detail.as_deref() != Some("scope:loader")),
        "{:?}",
        idle.causes
    );
    let nothing = idle
        .causes
        .iter()
        .find(|c| c.detail.as_deref() == Some("nothing_known"));
    assert_eq!(nothing.map(|c| c.ns), Some(6_600), "{:?}", idle.causes);
    // The same scope on the launching thread does.
    let mut c = collector(300);
    let other = c.intern_path("loader");
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_scope_on(0, other, 0, 2_000, 9_000);
    c.accept_call(launch(2, 9_100, 9_200, 0));
    c.accept(kernel(2, 9_500, 10_000, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    assert!(idle
        .causes
        .iter()
        .any(|c| c.detail.as_deref() == Some("scope:loader")));
}

#[test]
fn host_rules_give_way_to_unknown_when_the_clocks_disagree() {
    // A kernel 300 ns before its launch by step()'s pair: the offset is lowered to fit, and
    // counted.
    let mut c = collector(200);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 700, 1_200, 7, "k1"));
    c.accept_call(launch(2, 1_300, 1_400, 0));
    c.accept(kernel(2, 3_000, 3_500, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!((idle.host_offset_ns, idle.causality_violations), (-300, 1));
    // The next row's pair moved by 100 µs: the host clock stepped.
    c.accept_call(call("cuLaunchKernel", 3, 1, 11_000, 11_100, 0));
    c.accept(kernel(3, 111_500, 112_000, 7, "k3"));
    c.accept_call(call("cuLaunchKernel", 4, 1, 11_200, 11_300, 0));
    c.accept(kernel(4, 113_000, 113_500, 7, "k4"));
    c.end_iteration(20_000, 120_000, 4);
    let (_, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![("unknown", None, "clock_step", 1_000)]
    );
}

#[test]
fn work_with_no_captured_call_is_unknown_and_still_counted() {
    let mut c = collector(200);
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept(kernel(2, 4_000, 4_500, 7, "k2"));
    c.end_iteration(10_000, 10_000, 0);
    let (row, idle) = row_and_idle(&mut c);
    assert_eq!(
        split(&idle.causes),
        vec![("unknown", None, "no_launch_call", 1_500)]
    );
    assert_eq!(total(&idle.causes), row.devices[0].idle_ns);
}

#[test]
fn with_idle_causes_off_rows_carry_none() {
    let mut c = OfflineCollector::with_idle(0, None);
    c.accept_call(launch(1, 1_000, 1_100, 0));
    c.accept(kernel(1, 2_000, 2_500, 7, "k1"));
    c.accept_call(call("cuMemAlloc_v2", 2, 0, 2_600, 3_000, 0));
    c.accept_call(launch(3, 3_100, 3_200, 0));
    c.accept(kernel(3, 4_000, 4_500, 7, "k2"));
    c.end_iteration(10_000, 10_000, 2);
    let row = c.take_rows().remove(0);
    assert!(row.devices[0].idle.is_none());
    assert!(row.host_inventory.is_empty());
    let (_, trailer) = c.finish(20_000, 20_000);
    assert!(trailer.dispatch_floors.is_empty());
}

/// Whatever the records, every row the collector writes has causes that add up, and passes the
/// reader's checks.
mod through_the_collector {
    use super::*;
    use proptest::prelude::*;

    fn launch(corr: u32, iteration: u64, entry: u64, exit: u64, thread: u32) -> CapturedCall {
        CapturedCall {
            correlation_id: corr,
            cbid:
                cupti_sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
            iteration,
            outer_correlation_id: corr,
            thread,
            entry,
            exit,
            ..CapturedCall::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_row_the_collector_writes_has_causes_that_add_up(
            rows in proptest::collection::vec(
                proptest::collection::vec((0u64..8_000, 0u64..1_500, 0u32..2, 0u32..2, 0u64..9_000, any::<bool>()), 1..12),
                1..4,
            ),
            scopes in proptest::collection::vec((0u32..2, 0u64..8_000, 0u64..4_000), 0..4),
            syncs in proptest::collection::vec((0u64..8_000, 0u64..3_000), 0..3),
            offset in 0u64..3_000,
        ) {
            let mut c = OfflineCollector::with_idle(0, Some(IdleConfig::default()));
            let path = c.intern_path("step/phase");
            let mut corr = 0u32;
            let mut written = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                let base = 10_000 * i as u64;
                for &(start, len, device, thread, entry, captured) in row {
                    corr += 1;
                    if captured {
                        c.accept_call(launch(corr, i as u64, base + entry, base + entry + 100, thread));
                    }
                    c.accept(Record::Kernel(KernelRecord {
                        name: intern_name("k"),
                        start: base + offset + start,
                        end: base + offset + start + len,
                        device_id: device,
                        context_id: 1,
                        stream_id: thread,
                        correlation_id: corr,
                        shape: Default::default(),
                        shared_executed_bytes: 0,
                        local_bytes_total: 0,
                        graph_id: 0,
                        graph_node_id: 0,
                        device_launched: false,
                    }));
                }
                for &(thread, start, len) in &scopes {
                    c.accept_scope_on(thread, path, i as u64, base + start, base + start + len);
                }
                for &(start, len) in &syncs {
                    corr += 1;
                    c.accept_call(CapturedCall {
                        cbid: cupti_sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
                        ..launch(corr, i as u64, base + start, base + start + len, 0)
                    });
                    c.accept(Record::Sync(SyncRecord {
                        kind: "stream",
                        start: base + offset + start,
                        end: base + offset + start + len,
                        correlation_id: corr,
                        context_id: 1,
                        stream_id: 0,
                    }));
                }
                let launched = rows[..=i].iter().flatten().filter(|r| r.5).count() as u64;
                let end = base + 10_000;
                c.end_iteration(end, end + offset, launched);
                written.extend(c.take_rows());
            }
            let (rest, _) = c.finish(10_000 * rows.len() as u64 + 5_000, 10_000 * rows.len() as u64 + 5_000 + offset);
            written.extend(rest);
            prop_assert!(!written.is_empty());
            for row in &written {
                for d in &row.devices {
                    let idle = d.idle.as_ref().expect("a traced row's devices have idle causes");
                    prop_assert_eq!(idle.causes.iter().map(|c| c.ns).sum::<u64>(), d.idle_ns);
                    prop_assert_eq!(idle.compute_idle_ns, d.idle_ns + idle.copy_only_ns);
                    for g in idle.largest_gaps.iter().chain(idle.lead_in.iter()) {
                        prop_assert_eq!(g.parts.iter().map(|p| p.ns).sum::<u64>(), g.ns);
                    }
                }
                // What the reader checks, on the row as written.
                let line = serde_json::to_string(&crate::ledger::schema::LedgerLine::Iteration(row.clone())).unwrap();
                use crate::ledger::schema::{Header, LedgerLine, SCHEMA_VERSION};
                let header = serde_json::to_string(&LedgerLine::Header(Header {
                    schema_version: SCHEMA_VERSION,
                    ..Header::default()
                }))
                .unwrap();
                let text = format!("{header}\n{line}\n");
                let parsed = gpu_ledger_format::reader::parse_ledger(text.as_bytes(), std::path::Path::new("p.jsonl"));
                prop_assert!(parsed.is_ok(), "{:?}", parsed.err());
            }
        }
    }
}
