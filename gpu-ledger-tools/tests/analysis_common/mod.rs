//! Builders of ledger rows and headers shared by the `analysis_*` tests.
#![allow(dead_code)]

use gpu_ledger_format::schema::{
    ConfigRecord, CopyGroup, DeviceIteration, Header, IterationRow, KernelGroup, LaunchShape,
    ScopeRow,
};
use gpu_ledger_format::{ClockStats, NvmlIterationSummary, PowerKind, PowerStats};
use gpu_ledger_format::{Environment, GpuRecord};

/// A complete, unperturbed row with one device whose busy time is `busy_ns`.
pub fn row(index: u64, host_wall_ns: u64) -> IterationRow {
    IterationRow {
        index,
        host_start_ns: index * 1_000_000_000,
        host_wall_ns,
        complete: true,
        devices: vec![DeviceIteration {
            device_id: 0,
            first_start_ns: 0,
            last_end_ns: host_wall_ns,
            busy_ns: host_wall_ns,
            idle_ns: 0,
            largest_gap_ns: 0,
            kernel_count: 0,
            peak_memory_bytes: None,
            idle: None,
        }],
        ..IterationRow::default()
    }
}

/// `count` launches of `name` with grid `grid`, block `block`, `regs` registers, taking
/// `each_ns` each.
pub fn kernel(
    name: &str,
    grid: u32,
    block: u32,
    regs: u32,
    count: u64,
    each_ns: u64,
) -> KernelGroup {
    KernelGroup {
        name: name.to_string(),
        device_id: 0,
        shape: LaunchShape {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            cluster: [0, 0, 0],
            registers_per_thread: regs,
            static_shared_bytes: 0,
            dynamic_shared_bytes: 0,
            local_bytes_per_thread: 0,
        },
        local_bytes_total: 0,
        count,
        total_ns: count * each_ns,
        min_ns: each_ns,
        max_ns: each_ns,
        graph_launches: 0,
    }
}

/// A scope row with one call.
pub fn scope(path: &str, host_ns: u64, device_ns: u64, launches: u64) -> ScopeRow {
    ScopeRow {
        path: path.to_string(),
        calls: 1,
        host_ns,
        launches,
        kernels: launches,
        device_ns,
        device_ns_inclusive: device_ns,
        event_device_ns: None,
    }
}

/// `count` host-to-device copies.
pub fn copies(count: u64) -> CopyGroup {
    CopyGroup {
        device_id: 0,
        kind: "HtoD".into(),
        count,
        bytes: count * 1024,
        total_ns: count * 1000,
    }
}

/// A header for one H200 with the given driver.
pub fn header(driver: &str) -> Header {
    Header {
        schema_version: 1,
        gpu_ledger_version: "0.1.0".into(),
        start_unix_ns: 0,
        start_cupti_ns: None,
        config: ConfigRecord {
            level: "timeline".into(),
            buffer_count: 8,
            buffer_bytes: 1 << 20,
            settle_ms: 100,
            nvml_period_ms: None,
            nvml_energy_period_ms: None,
            counter_iterations: None,
            record_activities: false,
            follow: None,
            level_source: None,
            nvtx: None,
            timeline_sampling: None,
            tracing_calibration: None,
            pc_sampling: None,
            metrics: None,
            idle_causes: None,
        },
        environment: Environment {
            gpus: vec![GpuRecord {
                ordinal: 0,
                name: "NVIDIA H200".into(),
                compute_capability: [9, 0],
                sm_count: 132,
                total_memory_bytes: 141 << 30,
                ..GpuRecord::default()
            }],
            driver_version: Some(driver.into()),
            cuda_driver_version: Some(13000),
            cupti_api_version: Some(130000),
            cupti_path: Some("/usr/lib/libcupti.so".into()),
            cupti_release: Some("13.0".into()),
            cupti_features: Vec::new(),
            hostname: Some("gpu-host".into()),
            command_line: vec!["train".into()],
            missing: Vec::new(),
            ..Environment::default()
        },
        rank: None,
        warnings: Vec::new(),
        counters: None,
        tracing_calibration: None,
    }
}

/// Deterministic noise source for tests (SplitMix64), uniform in `[-1, 1)`.
pub struct Noise(pub u64);

impl Noise {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// Approximately normal (sum of 12 uniforms on [0,1) minus 6), standard deviation 1.
    pub fn normal(&mut self) -> f64 {
        (0..12).map(|_| (self.uniform() + 1.0) / 2.0).sum::<f64>() - 6.0
    }
}

/// An NVML summary of device 0 with the given mean SM clock, mean power and throttle reasons.
pub fn nvml(sm_mhz: f64, power_w: f64, throttle: &[&str]) -> NvmlIterationSummary {
    NvmlIterationSummary {
        device_id: 0,
        window_ns: 100_000_000,
        samples: 5,
        sm_clock: Some(ClockStats {
            min_mhz: sm_mhz as u32,
            mean_mhz: sm_mhz,
            max_mhz: sm_mhz as u32,
            samples: 5,
        }),
        mem_clock: Some(ClockStats {
            min_mhz: 3201,
            mean_mhz: 3201.0,
            max_mhz: 3201,
            samples: 5,
        }),
        power: Some(PowerStats {
            mean_w: power_w,
            max_w: power_w * 1.1,
            samples: 5,
            kind: PowerKind::Instant,
        }),
        temperature_max_c: Some(60),
        temperature_samples: 5,
        throttle_reasons: throttle.iter().map(|s| s.to_string()).collect(),
        throttle_samples: 5,
        ..NvmlIterationSummary::default()
    }
}
