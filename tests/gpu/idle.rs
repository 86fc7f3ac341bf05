//! Idle time by cause on the loop of `examples/common/idle_profile.rs`, whose idle profile per
//! iteration is known by construction: each cause within 5 % of the iteration's idle time (or
//! 5 µs) of what the host measured, the causes adding up to `idle_ns`, and the largest gaps
//! naming the sleeping scope, the synchronize, the 4-byte read, the allocation and the event
//! wait.

use std::time::Duration;

use gpu_ledger::{IdleConfig, Ledger, Level, Profiler};

#[allow(dead_code)]
#[path = "../../examples/common/idle_profile.rs"]
mod idle_profile;
use idle_profile::{compare, named_in_largest_gaps, print, Expected, Workload, ALLOC_BYTES};

/// Iterations before those checked.
const WARMUP: u64 = 2;
/// Iterations checked.
const CHECKED: u64 = 10;

/// A run of the workload with `idle`; the ledger and what each iteration should measure.
fn run(idle: IdleConfig) -> (Ledger, Vec<Expected>) {
    let gpu = super::gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.jsonl");
    let mut workload = Workload::new(&gpu.ctx).expect("the idle workload loads");
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .settle(Duration::from_secs(5))
        .idle(idle)
        .start()
        .unwrap();
    let expected: Vec<Expected> = (0..WARMUP + CHECKED)
        .map(|_| workload.iteration(&profiler).unwrap())
        .collect();
    let (_, ledger) = super::finish_without_event_warnings(profiler, &path);
    (ledger, expected)
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_known_idle_profile_is_split_as_constructed() {
    let _turn = super::SERIAL.lock();
    let (ledger, expected) = run(IdleConfig {
        largest_gaps: idle_profile::LARGEST_GAPS,
        ..IdleConfig::default()
    });
    let trailer = ledger.trailer.as_ref().expect("a trailer");
    let floor = &trailer.dispatch_floors[0];
    assert_eq!(
        (floor.device_id, floor.source.as_str()),
        (0, "calibration"),
        "{floor:?}"
    );
    let median = floor.median_ns.expect("the calibration's median gap");
    println!(
        "dispatch floor {} ns, median gap {median} ns",
        floor.floor_ns
    );
    let rows: Vec<_> = ledger
        .iterations
        .iter()
        .filter(|r| r.index >= WARMUP)
        .collect();
    assert_eq!(rows.len() as u64, CHECKED);
    for row in rows {
        let c = compare(row, &expected[row.index as usize], median).expect("idle causes");
        print(row.index, &c);
        assert!(c.adds_up, "row {}: the causes add up to idle_ns", row.index);
        // The profile holds only if the back-to-back kernels were queued before the device
        // reached them; otherwise their gaps are the host's, and the comparison is not the one
        // the row was built for.
        assert!(
            c.queued_in_time(),
            "row {}: {} launches queued in {} ns, not within the {:?} spin ahead of them",
            row.index,
            idle_profile::BACK_TO_BACK,
            c.queued_ns,
            idle_profile::QUEUE_SPIN
        );
        assert!(c.missed().is_empty(), "row {}: {:?}", row.index, c.missed());
        for (what, named) in named_in_largest_gaps(row) {
            assert!(named, "row {}: the largest gaps name {what}", row.index);
        }
        let inventory = |kind: &str| row.host_inventory.iter().find(|e| e.kind == kind);
        let read = inventory("small_dtoh").expect("the 4-byte read is listed");
        assert_eq!(
            (read.count, read.bytes, read.synchronous),
            (1, Some(4), Some(1))
        );
        assert_eq!(
            inventory("alloc").map(|e| e.bytes),
            Some(Some(ALLOC_BYTES as u64))
        );
        assert!(inventory("free").is_some() && inventory("stream_sync").is_some());
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            let main = &row.launch_threads[0];
            assert!(
                main.run_queue_ns.is_some() && main.on_cpu_ns.is_some(),
                "{main:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn with_idle_causes_off_rows_carry_none() {
    let _turn = super::SERIAL.lock();
    let (ledger, _) = run(IdleConfig {
        enabled: false,
        ..IdleConfig::default()
    });
    assert_eq!(ledger.header.config.idle_causes.as_deref(), Some("off"));
    assert!(!ledger.iterations.is_empty());
    for row in &ledger.iterations {
        assert!(
            row.devices.iter().all(|d| d.idle.is_none()),
            "row {}",
            row.index
        );
        assert!(row.host_inventory.is_empty(), "row {}", row.index);
        assert!(row.launch_threads.iter().all(|t| t.run_queue_ns.is_none()));
    }
    let trailer = ledger.trailer.expect("a trailer");
    assert!(trailer.dispatch_floors.is_empty());
}
