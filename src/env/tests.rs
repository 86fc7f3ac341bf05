//! The environment record: host items on this machine, NVML items through a fake inventory,
//! the "every null has a reason" rule, and serde.

use std::time::{Duration, UNIX_EPOCH};

use super::host::normalize_bus_id;
use super::missing::collect_nulls;
use super::{
    explain_nulls, fill_nvml, host, link_gpus_to_nvml, normalize_uuid, nvml_unavailable,
    sampled_devices,
};
use crate::ledger::{Environment, GpuRecord};
use crate::nvml::{GpuProbe, NvmlInventory, SampledDevice};

/// Paths of every `null` in the record (outside `missing`), in the record's own notation.
fn null_paths(env: &Environment) -> Vec<String> {
    let mut out = Vec::new();
    collect_nulls(
        &serde_json::to_value(env).expect("serialize"),
        String::new(),
        &mut out,
    );
    out
}

fn explained(env: &Environment, path: &str) -> bool {
    env.missing.iter().any(|line| {
        let key = line.split(": ").next().unwrap_or(line);
        path == key
            || path
                .strip_prefix(key)
                .is_some_and(|r| r.starts_with('.') || r.starts_with('['))
    })
}

/// Items the profiler fills from CUDA, CUPTI and NVML, not `collect_host`.
const FILLED_ELSEWHERE: [&str; 6] = [
    "driver_version",
    "cuda_driver_version",
    "cupti_api_version",
    "cupti_path",
    "cupti_release",
    "nvml_version",
];

#[test]
fn host_record_on_this_machine_is_filled_or_explained() {
    let start = UNIX_EPOCH + Duration::from_nanos(1_746_100_800_123_000_000);
    let env = host::collect_host_at(start);
    assert_eq!(env.gpu_ledger_version, env!("CARGO_PKG_VERSION"));
    assert!(!env.command_line.is_empty());
    assert_eq!(env.pid, Some(std::process::id()));
    assert_eq!(env.start_unix_ns, Some(1_746_100_800_123_000_000));
    assert_eq!(
        env.start_utc.as_deref(),
        Some("2025-05-01T12:00:00.123000000Z")
    );
    assert_eq!(env.host.arch, std::env::consts::ARCH);
    assert!(env.host.cpus_available.is_some_and(|n| n > 0));

    // Every null left by collect_host is explained, except the items filled elsewhere.
    for path in null_paths(&env) {
        if FILLED_ELSEWHERE.contains(&path.as_str()) {
            continue;
        }
        assert!(
            explained(&env, &path),
            "{path} is null without a reason: {:#?}",
            env.missing
        );
    }
    for line in &env.missing {
        assert!(line.contains(": "), "missing line without a reason: {line}");
    }
    // What this machine could tell, printed for the record of the test run.
    eprintln!("{}", serde_json::to_string_pretty(&env).expect("serialize"));
}

#[cfg(target_os = "linux")]
#[test]
fn linux_host_items_are_read() {
    let env = host::collect_host();
    let h = &env.host;
    assert_eq!(h.kernel_type.as_deref(), Some("Linux"));
    assert!(h.kernel_release.is_some());
    assert!(h.cpu_logical.is_some_and(|n| n > 0));
    assert!(h.memory_total_bytes.is_some_and(|b| b > 1 << 20));
    assert!(h.cpu_model.is_some() || explained(&env, "host.cpu_model"));
    assert!(h.numa_nodes.is_some() || explained(&env, "host.numa_nodes"));
    assert!(h.container.is_some());
    assert!(h.virtual_machine.is_some() || explained(&env, "host.virtual_machine"));
    assert!(env.hostname.is_some());
    assert!(env.start_unix_ns.is_some());
}

/// Two H200s; device 1 lacks ECC and its handle for pstate fails.
struct FakeInventory {
    fail_count: bool,
}

impl NvmlInventory for FakeInventory {
    fn driver_version(&self) -> Result<String, String> {
        Ok("580.159.04".to_owned())
    }
    fn nvml_version(&self) -> Result<String, String> {
        Err("symbol nvmlSystemGetNVMLVersion not found".to_owned())
    }
    fn device_count(&self) -> Result<u32, String> {
        if self.fail_count {
            Err("GPU is lost".to_owned())
        } else {
            Ok(2)
        }
    }
    fn probe_device(&self, index: u32, p: &mut GpuProbe) {
        p.put("name", Ok("NVIDIA H200".to_owned()), |g| &mut g.name);
        p.put(
            "uuid",
            Ok(format!("GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd")),
            |g| &mut g.uuid,
        );
        p.put(
            "pci_bus_id",
            Ok(format!("00000000:{:02X}:00.0", 0x17 + index)),
            |g| &mut g.pci_bus_id,
        );
        p.put("compute_capability", Ok([9, 0]), |g| {
            &mut g.compute_capability
        });
        p.put("memory_total_bytes", Ok(150_754_820_096), |g| {
            &mut g.memory_total_bytes
        });
        p.put("memory_bus_width_bits", Ok(6144), |g| {
            &mut g.memory_bus_width_bits
        });
        p.put("persistence_mode", Ok(true), |g| &mut g.persistence_mode);
        p.put("mig_enabled", Ok(false), |g| &mut g.mig_enabled);
        p.put("power_limit_mw", Ok(700_000), |g| &mut g.power_limit_mw);
        p.put("pstate", Ok("P0".to_owned()), |g| &mut g.pstate);
        p.put("sm_clock_mhz", Ok(1980), |g| &mut g.sm_clock_mhz);
        p.put("throttle_reasons", Ok(vec!["gpu_idle".to_owned()]), |g| {
            &mut g.throttle_reasons
        });
        if index == 1 {
            p.put(
                "ecc_enabled",
                Err("not supported by this device".to_owned()),
                |g| &mut g.ecc_enabled,
            );
        } else {
            p.put("ecc_enabled", Ok(true), |g| &mut g.ecc_enabled);
        }
    }
}

fn two_cuda_gpus_in_reverse_nvml_order() -> Vec<GpuRecord> {
    // CUDA_DEVICE_ORDER=FASTEST_FIRST style: CUDA ordinal 0 is NVML index 1.
    (0..2u32)
        .map(|ordinal| GpuRecord {
            ordinal,
            name: "NVIDIA H200".to_owned(),
            compute_capability: [9, 0],
            sm_count: 132,
            total_memory_bytes: 150_754_820_096,
            uuid: Some(format!(
                "GPU-0000000{}-AAAA-bbbb-cccc-dddddddddddd",
                1 - ordinal
            )),
            ..GpuRecord::default()
        })
        .collect()
}

#[test]
fn nvml_items_from_a_fake_inventory() {
    let mut env = host::collect_host();
    fill_nvml(&mut env, &FakeInventory { fail_count: false });
    assert_eq!(env.driver_version.as_deref(), Some("580.159.04"));
    assert_eq!(env.nvml_version, None);
    assert!(env
        .missing
        .iter()
        .any(|l| l == "nvml_version: symbol nvmlSystemGetNVMLVersion not found"));
    assert_eq!(env.nvml_gpus.len(), 2);
    let g1 = &env.nvml_gpus[1];
    assert_eq!(g1.index, 1);
    assert_eq!(g1.compute_capability, Some([9, 0]));
    assert_eq!(g1.memory_bus_width_bits, Some(6144));
    assert_eq!(g1.ecc_enabled, None);
    assert!(env
        .missing
        .iter()
        .any(|l| l == "nvml_gpus[1].ecc_enabled: not supported by this device"));
    assert_eq!(env.nvml_gpus[0].ecc_enabled, Some(true));
    // The NUMA node comes from sysfs by PCI bus id: read, or explained.
    assert!(g1.numa_node.is_some() || explained(&env, "nvml_gpus[1].numa_node"));

    // Link CUDA ordinals to NVML indices by UUID (case and prefix insensitive).
    env.gpus = two_cuda_gpus_in_reverse_nvml_order();
    env.gpus.push(GpuRecord {
        ordinal: 2,
        uuid: Some("GPU-ffffffff-aaaa-bbbb-cccc-dddddddddddd".to_owned()),
        ..GpuRecord::default()
    });
    link_gpus_to_nvml(&mut env);
    assert_eq!(env.gpus[0].nvml_index, Some(1));
    assert_eq!(env.gpus[1].nvml_index, Some(0));
    assert_eq!(env.gpus[2].nvml_index, None);
    assert!(env
        .missing
        .iter()
        .any(|l| l.starts_with("gpus[2].nvml_index: ")));
    assert_eq!(
        sampled_devices(&env),
        vec![
            SampledDevice {
                device_id: 0,
                nvml_index: 1
            },
            SampledDevice {
                device_id: 1,
                nvml_index: 0
            },
        ]
    );
    assert_eq!(env.nvml_for(0).map(|n| n.index), Some(1));
    assert!(env.nvml_for(2).is_none());

    // Without UUIDs, the PCI bus id (CUDA's 4-digit domain form) links them.
    let mut by_bus = Environment::default();
    fill_nvml(&mut by_bus, &FakeInventory { fail_count: false });
    by_bus.gpus = vec![GpuRecord {
        ordinal: 0,
        pci_bus_id: Some("0000:18:00.0".to_owned()),
        ..GpuRecord::default()
    }];
    link_gpus_to_nvml(&mut by_bus);
    assert_eq!(by_bus.gpus[0].nvml_index, Some(1));
}

#[test]
fn every_null_is_explained_after_explain_nulls() {
    let mut env = host::collect_host();
    env.gpus = two_cuda_gpus_in_reverse_nvml_order();
    fill_nvml(&mut env, &FakeInventory { fail_count: false });
    link_gpus_to_nvml(&mut env);
    env.cuda_driver_version = Some(13000);
    // cupti_api_version and cupti_path left unfilled on purpose.
    let before = env.missing.len();
    explain_nulls(&mut env);
    assert!(env
        .missing
        .iter()
        .any(|l| l == "cupti_path: not collected (no reason recorded)"));
    // Items already explained are not explained twice.
    assert!(!env.missing[before..]
        .iter()
        .any(|l| l.starts_with("nvml_version:")));
    assert!(!env.missing[before..]
        .iter()
        .any(|l| l.starts_with("nvml_gpus[1].ecc_enabled:")));
    for path in null_paths(&env) {
        assert!(explained(&env, &path), "{path} is null without a reason");
    }
    let again = env.missing.len();
    explain_nulls(&mut env);
    assert_eq!(env.missing.len(), again, "explain_nulls is idempotent");
}

#[test]
fn nvml_unavailable_or_failing_is_recorded() {
    let mut env = host::collect_host();
    nvml_unavailable(
        &mut env,
        "NVML is not available: the NVIDIA kernel driver is not loaded",
    );
    // One line names the three items NVML's absence empties: the reason is said once.
    let lines: Vec<&String> = env
        .missing
        .iter()
        .filter(|l| l.contains("NVML is not available"))
        .collect();
    assert_eq!(
        lines,
        [
            "driver_version, nvml_version, nvml_gpus: NVML is not available: the NVIDIA kernel \
          driver is not loaded"
        ]
    );
    env.gpus = two_cuda_gpus_in_reverse_nvml_order();
    link_gpus_to_nvml(&mut env);
    assert!(sampled_devices(&env).is_empty());
    assert!(env
        .missing
        .iter()
        .any(|l| l == "gpus[0].nvml_index: no NVML device records"));

    let mut env = Environment::default();
    fill_nvml(&mut env, &FakeInventory { fail_count: true });
    assert!(env.nvml_gpus.is_empty());
    assert!(env
        .missing
        .iter()
        .any(|l| l == "nvml_gpus: NVML could not count devices: GPU is lost"));
}

#[test]
fn whole_device_failure_explains_all_its_items() {
    struct Broken;
    impl NvmlInventory for Broken {
        fn driver_version(&self) -> Result<String, String> {
            Ok("580.159.04".to_owned())
        }
        fn nvml_version(&self) -> Result<String, String> {
            Ok("13.580.159.04".to_owned())
        }
        fn device_count(&self) -> Result<u32, String> {
            Ok(1)
        }
        fn probe_device(&self, _index: u32, p: &mut GpuProbe) {
            p.fail("no NVML handle: GPU is lost");
        }
    }
    let mut env = Environment::default();
    fill_nvml(&mut env, &Broken);
    explain_nulls(&mut env);
    assert!(env
        .missing
        .iter()
        .any(|l| l == "nvml_gpus[0]: no NVML handle: GPU is lost"));
    assert!(!env
        .missing
        .iter()
        .any(|l| l.starts_with("nvml_gpus[0].name")));
}

#[test]
fn environment_serde_round_trip_and_old_headers() {
    let mut env = host::collect_host();
    env.gpus = two_cuda_gpus_in_reverse_nvml_order();
    fill_nvml(&mut env, &FakeInventory { fail_count: false });
    link_gpus_to_nvml(&mut env);
    env.cuda_env
        .insert("CUDA_VISIBLE_DEVICES".to_owned(), "1,0".to_owned());
    explain_nulls(&mut env);
    let json = serde_json::to_string(&env).expect("serialize");
    let back: Environment = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, env);

    // A header environment written before the NVML items existed still reads.
    let old = r#"{"gpus":[{"ordinal":0,"name":"NVIDIA H200","compute_capability":[9,0],
        "sm_count":132,"total_memory_bytes":150754820096}],"driver_version":"580.159.04",
        "cuda_driver_version":13000,"cupti_api_version":null,"cupti_path":null,
        "hostname":"h","command_line":["demo"]}"#;
    let old: Environment = serde_json::from_str(old).expect("old environment");
    assert_eq!(old.gpus[0].uuid, None);
    assert!(old.nvml_gpus.is_empty());
    assert!(old.missing.is_empty());
}

#[test]
fn bus_ids_and_uuids_normalize() {
    assert_eq!(
        normalize_bus_id("00000000:17:00.0"),
        normalize_bus_id("0000:17:00.0")
    );
    assert_eq!(normalize_bus_id("0000:1A:00.0"), Some((0, 0x1a, 0, 0)));
    assert_eq!(normalize_bus_id("garbage"), None);
    assert_eq!(
        normalize_uuid("GPU-12345678-ABCD-ef01-2345-6789abcdef01"),
        normalize_uuid("12345678abcdef0123456789abcdef01")
    );
}
