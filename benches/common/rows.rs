//! The realistic training-step row the benchmarks share: 10 scopes, 20 kernel groups with
//! mangled C++ names, copies in two directions, a memset group, a synchronization group, one
//! device and a full NVML summary.

use gpu_ledger::ledger::schema::{
    CopyGroup, DeviceIteration, IterationRow, KernelGroup, LaunchShape, ScopeRow, SyncGroup,
};
use gpu_ledger::ledger::{
    ClockStats, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind, PowerStats,
};

use super::KERNEL_NAMES;

/// The row's scope paths.
pub const SCOPES: [&str; 10] = [
    "(unscoped)",
    "step",
    "step/data",
    "step/forward",
    "step/forward/attention",
    "step/forward/mlp",
    "step/backward",
    "step/backward/attention",
    "step/backward/mlp",
    "step/optimizer",
];

/// A realistic iteration row of iteration `index`.
pub fn row(index: u64) -> IterationRow {
    let start = 1_000_000_000 + index * 25_000_000;
    let scopes = SCOPES
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let i = i as u64;
            ScopeRow {
                path: (*p).to_string(),
                calls: 1 + i % 3,
                host_ns: 1_200_000 + i * 311_017,
                launches: 4 + i * 3,
                kernels: 4 + i * 3,
                device_ns: 900_000 + i * 271_003,
                device_ns_inclusive: 1_100_000 + i * 401_009,
                event_device_ns: (i % 4 == 1).then_some(2_400_000 + i * 17),
            }
        })
        .collect();
    let kernels = KERNEL_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let i = i as u64;
            KernelGroup {
                name: (*name).to_string(),
                device_id: 0,
                shape: LaunchShape {
                    grid: [132 * (1 + i as u32 % 8), 1 + i as u32 % 3, 1],
                    block: [256, 1, 1],
                    cluster: [0, 0, 0],
                    registers_per_thread: 32 + 8 * (i as u32 % 6),
                    static_shared_bytes: if i % 3 == 0 { 16_384 } else { 0 },
                    dynamic_shared_bytes: if i % 5 == 0 { 98_304 } else { 0 },
                    local_bytes_per_thread: 0,
                },
                local_bytes_total: 0,
                count: 1 + i % 12,
                total_ns: 150_000 + i * 97_331,
                min_ns: 10_000 + i * 1_013,
                max_ns: 60_000 + i * 7_919,
                graph_launches: 0,
            }
        })
        .collect();
    let copy = |kind: &str, count: u64, bytes: u64, total_ns: u64| CopyGroup {
        device_id: 0,
        kind: kind.to_string(),
        count,
        bytes,
        total_ns,
    };
    IterationRow {
        index,
        host_start_ns: start,
        host_wall_ns: 24_871_337,
        complete: true,
        devices: vec![DeviceIteration {
            device_id: 0,
            first_start_ns: start + 120_000,
            last_end_ns: start + 24_500_000,
            busy_ns: 23_100_417,
            idle_ns: 1_279_583,
            largest_gap_ns: 310_211,
            kernel_count: 134,
            peak_memory_bytes: Some(61_203_283_968),
            idle: None,
        }],
        scopes,
        kernels,
        memcpy: vec![
            copy("HtoD", 2, 67_108_864, 1_412_331),
            copy("DtoH", 1, 4_096, 3_517),
        ],
        memset: vec![copy("memset", 3, 12_582_912, 21_771)],
        synchronization: vec![SyncGroup {
            kind: "stream".into(),
            count: 1,
            total_ns: 2_417_113,
        }],
        nvml: vec![nvml_summary()],
        ..IterationRow::default()
    }
}

/// The full NVML summary of a row: clocks, power, energy, temperature, memory and PCIe.
fn nvml_summary() -> NvmlIterationSummary {
    let clock = |base: u32| ClockStats {
        min_mhz: base - 45,
        mean_mhz: f64::from(base) - 12.5,
        max_mhz: base,
        samples: 12,
    };
    NvmlIterationSummary {
        device_id: 0,
        window_ns: 24_871_337,
        samples: 12,
        coarse: false,
        sm_clock: Some(clock(1980)),
        mem_clock: Some(clock(2619)),
        power: Some(PowerStats {
            mean_w: 512.37,
            max_w: 611.8,
            samples: 12,
            kind: PowerKind::Instant,
        }),
        energy: Some(EnergyEstimate {
            joules: 12.743_118,
            method: EnergyMethod::EnergyCounter,
            counter_reads: 11,
            counter_span_ns: Some(20_004_117),
            power_samples: 14,
            integrated_joules: Some(12.701_993),
        }),
        temperature_max_c: Some(61),
        temperature_samples: 12,
        throttle_reasons: vec!["sw_power_cap".into()],
        throttle_samples: 12,
        memory_used_max_bytes: Some(71_303_168_000),
        memory_used_samples: 12,
        pcie_tx_bytes_per_s: Some(1.73e9),
        pcie_rx_bytes_per_s: Some(2.9e8),
        notes: Vec::new(),
    }
}
