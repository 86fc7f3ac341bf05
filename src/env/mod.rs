//! Fills the environment record of the ledger header ([`Environment`]): what shifts results
//! without changing the code.
//!
//! Every item that could not be read is `None` **and** has a line in `missing` with the reason;
//! `explain_nulls` adds a line for any `null` that nobody explained, so nothing is ever omitted
//! silently.
//!
//! Filling it, in order:
//! 1. `collect_host_at`: host, build and process items; needs no GPU.
//! 2. The profiler fills `gpus`, `cuda_driver_version`, `cupti_api_version` and `cupti_path`
//!    from the CUDA driver and the CUPTI loader.
//! 3. [`fill_nvml`] with an [`NvmlInventory`] (the NVML library or a fake), or
//!    `nvml_unavailable` when NVML could not be initialized.
//! 4. [`link_gpus_to_nvml`] matches CUDA ordinals to NVML indices by UUID (or PCI
//!    bus id); `sampled_devices` then gives the NVML sampler its device list. The record owns
//!    this link, so the sampler only ever reads the NVML indices it is given.
//! 5. `explain_nulls` just before the header is written.

mod host;
mod missing;
#[cfg(test)]
mod tests;

use host::{normalize_bus_id, pci_numa_node};
pub(crate) use missing::explain_nulls;
use missing::take;

use crate::cupti::LoadedCupti;
use crate::driver::device;
use crate::ledger::Environment;
use crate::nvml::{GpuProbe, NvmlInventory, SampledDevice};

/// The environment record for the ledger header, without NVML items (the profiler adds those
/// when NVML loads). Items that cannot be read are `None` and listed in `missing` with the reason.
pub fn environment(cupti: Option<&LoadedCupti>, start: std::time::SystemTime) -> Environment {
    let mut env = host::collect_host_at(start);
    if let Some(lib) = cupti {
        env.cupti_api_version = Some(lib.api_version);
        env.cupti_path = Some(lib.path.display().to_string());
        env.cupti_release = Some(lib.release.name.to_string());
        // Without a driver version the gates are stated for a driver of the CUPTI's own release.
        let driver_major = device::driver_present()
            .then(|| device::driver_version().ok())
            .flatten()
            .map_or_else(|| lib.release.cuda_major(), |v| v / 1000);
        env.cupti_features = lib.release.features(driver_major);
    } else {
        env.missing.push(
            "cupti_api_version, cupti_path, cupti_release: CUPTI is not loaded at this level"
                .into(),
        );
    }
    if !device::driver_present() {
        env.missing
            .push("gpus, cuda_driver_version: no CUDA driver (libcuda.so.1 not found)".into());
        return env;
    }
    if let Err(e) = cudarc::driver::result::init() {
        env.missing
            .push(format!("gpus, cuda_driver_version: cuInit failed: {e}"));
        return env;
    }
    match device::driver_version() {
        Ok(v) => env.cuda_driver_version = Some(v),
        Err(e) => env.missing.push(format!("cuda_driver_version: {e}")),
    }
    match cudarc::driver::result::device::get_count() {
        Ok(n) => {
            for i in 0..n.max(0) as u32 {
                match device::gpu_record(i) {
                    Ok(g) => env.gpus.push(g),
                    Err(e) => env.missing.push(format!("gpu {i}: {e}")),
                }
            }
        }
        Err(e) => env
            .missing
            .push(format!("gpus: cuDeviceGetCount failed: {e}")),
    }
    env
}

#[cfg(feature = "internals")]
/// The NVML index of CUDA device `ordinal`, linked as the profiler links them (by UUID, else PCI
/// bus id), or why there is none.
pub fn nvml_index(nvml: &dyn NvmlInventory, ordinal: u32) -> std::result::Result<u32, String> {
    let mut env = environment(None, std::time::SystemTime::now());
    fill_nvml(&mut env, nvml);
    link_gpus_to_nvml(&mut env);
    env.nvml_for(ordinal).map(|n| n.index).ok_or_else(|| {
        format!(
            "CUDA device {ordinal} has no NVML device: {}",
            env.missing.join("; ")
        )
    })
}

/// Fills the NVML items: driver and NVML versions and one
/// [`NvmlGpuRecord`](crate::ledger::NvmlGpuRecord) per device, plus each GPU's NUMA node from
/// sysfs. Unreadable items go to `missing`.
pub(crate) fn fill_nvml(env: &mut Environment, nvml: &dyn NvmlInventory) {
    env.driver_version = take(&mut env.missing, "driver_version", nvml.driver_version());
    env.nvml_version = take(&mut env.missing, "nvml_version", nvml.nvml_version());
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(reason) => {
            env.missing
                .push(format!("nvml_gpus: NVML could not count devices: {reason}"));
            return;
        }
    };
    env.nvml_gpus.clear();
    for index in 0..count {
        let mut probe = GpuProbe::new(index);
        nvml.probe_device(index, &mut probe);
        let (mut record, lines) = probe.finish();
        env.missing.extend(lines);
        let numa = match &record.pci_bus_id {
            Some(bus) => pci_numa_node(bus),
            None => Err("no PCI bus id to look it up in sysfs".to_owned()),
        };
        record.numa_node = take(
            &mut env.missing,
            &format!("nvml_gpus[{index}].numa_node"),
            numa,
        );
        env.nvml_gpus.push(record);
    }
}

/// Records that NVML could not be used (`reason` as from `NvmlError::Unavailable`).
pub(crate) fn nvml_unavailable(env: &mut Environment, reason: &str) {
    env.driver_version = None;
    env.nvml_version = None;
    env.nvml_gpus.clear();
    // One reason, said once for the three items it empties.
    env.missing
        .push(format!("driver_version, nvml_version, nvml_gpus: {reason}"));
}

/// Sets `nvml_index` of each GPU by matching its UUID (or, without one, its PCI bus id) with
/// the NVML records; a GPU that matches none gets a `missing` line.
pub(crate) fn link_gpus_to_nvml(env: &mut Environment) {
    for (i, gpu) in env.gpus.iter_mut().enumerate() {
        let by_uuid = gpu.uuid.as_deref().map(normalize_uuid).and_then(|u| {
            env.nvml_gpus
                .iter()
                .find(|n| n.uuid.as_deref().map(normalize_uuid).as_deref() == Some(&u))
        });
        let by_bus = || {
            gpu.pci_bus_id
                .as_deref()
                .and_then(normalize_bus_id)
                .and_then(|b| {
                    env.nvml_gpus.iter().find(|n| {
                        n.pci_bus_id.as_deref().and_then(normalize_bus_id).as_ref() == Some(&b)
                    })
                })
        };
        match by_uuid.or_else(by_bus) {
            Some(n) => gpu.nvml_index = Some(n.index),
            None => {
                gpu.nvml_index = None;
                let why = if env.nvml_gpus.is_empty() {
                    "no NVML device records".to_owned()
                } else if gpu.uuid.is_none() && gpu.pci_bus_id.is_none() {
                    "no UUID or PCI bus id to match on".to_owned()
                } else {
                    format!(
                        "no NVML device has UUID {} or PCI bus id {}",
                        gpu.uuid.as_deref().unwrap_or("(unknown)"),
                        gpu.pci_bus_id.as_deref().unwrap_or("(unknown)")
                    )
                };
                env.missing.push(format!("gpus[{i}].nvml_index: {why}"));
            }
        }
    }
}

/// The devices the NVML sampler should read (`NvmlSamplerConfig::devices`): each linked GPU
/// (CUDA ordinal, NVML index). Without CUDA GPU records, every NVML device with
/// `device_id = nvml index`. Empty when no GPU could be linked: the sampler then refuses to
/// start rather than guess.
pub(crate) fn sampled_devices(env: &Environment) -> Vec<SampledDevice> {
    if env.gpus.is_empty() {
        return env
            .nvml_gpus
            .iter()
            .map(|n| SampledDevice {
                device_id: n.index,
                nvml_index: n.index,
            })
            .collect();
    }
    env.gpus
        .iter()
        .filter_map(|g| {
            g.nvml_index.map(|nvml_index| SampledDevice {
                device_id: g.ordinal,
                nvml_index,
            })
        })
        .collect()
}

fn normalize_uuid(uuid: &str) -> String {
    let u = uuid.trim().to_ascii_lowercase();
    let u = u
        .strip_prefix("gpu-")
        .or_else(|| u.strip_prefix("mig-"))
        .unwrap_or(&u);
    u.chars().filter(|c| *c != '-').collect()
}
