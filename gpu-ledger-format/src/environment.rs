//! The environment record of the ledger header: the GPUs and their state at start, driver, CUDA
//! and CUPTI versions, the host, the build and the process. It holds what shifts results without
//! changing the code.
//!
//! Every item that could not be read is `None` **and** has a line in [`Environment::missing`]
//! (`"host.cpu_governor: /sys/.../scaling_governor: No such file or directory"`); the key before
//! the colon is the item's path in the JSON record, so a reader can tell "not collected" from
//! "not known" for each `null`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One GPU as seen at the start of the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuRecord {
    /// CUDA device ordinal.
    pub ordinal: u32,
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability `[major, minor]`.
    pub compute_capability: [u32; 2],
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory, bytes.
    pub total_memory_bytes: u64,
    /// L2 cache, bytes (`CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`): what decides whether a kernel's
    /// DRAM figures depend on the cache state it starts in.
    #[serde(default)]
    pub l2_bytes: Option<u64>,
    /// UUID in NVML's form (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), from `cuDeviceGetUuid`;
    /// used to match the device to its NVML record.
    #[serde(default)]
    pub uuid: Option<String>,
    /// PCI bus id (`0000:17:00.0`), from `cuDeviceGetPCIBusId`; used when the UUID is unknown.
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Index of the same device in [`Environment::nvml_gpus`], matched by UUID (or, without
    /// one, by PCI bus id).
    #[serde(default)]
    pub nvml_index: Option<u32>,
}

/// One GPU as NVML reports it at the start of the run. Clocks, pstate, temperature, power and
/// throttle reasons are the state at start; the per-iteration state is in the NVML summaries.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlGpuRecord {
    /// NVML device index.
    pub index: u32,
    /// Marketing name.
    #[serde(default)]
    pub name: Option<String>,
    /// UUID (`GPU-...`).
    #[serde(default)]
    pub uuid: Option<String>,
    /// PCI bus id as NVML writes it (`00000000:17:00.0`).
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// NUMA node the GPU is attached to, from sysfs (`-1`: no affinity reported).
    #[serde(default)]
    pub numa_node: Option<i32>,
    /// Architecture (`hopper`).
    #[serde(default)]
    pub architecture: Option<String>,
    /// CUDA compute capability `[major, minor]`.
    #[serde(default)]
    pub compute_capability: Option<[u32; 2]>,
    /// Installed device memory, bytes.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Device memory in use at start (all processes), bytes.
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    /// Memory bus width, bits.
    #[serde(default)]
    pub memory_bus_width_bits: Option<u32>,
    /// VBIOS version.
    #[serde(default)]
    pub vbios_version: Option<String>,
    /// Persistence mode on.
    #[serde(default)]
    pub persistence_mode: Option<bool>,
    /// ECC currently enabled.
    #[serde(default)]
    pub ecc_enabled: Option<bool>,
    /// ECC enabled after the next reboot.
    #[serde(default)]
    pub ecc_pending: Option<bool>,
    /// MIG mode currently enabled.
    #[serde(default)]
    pub mig_enabled: Option<bool>,
    /// MIG mode enabled after the next reset.
    #[serde(default)]
    pub mig_pending: Option<bool>,
    /// Compute mode (`default`, `exclusive_process`, `prohibited`, `exclusive_thread`).
    #[serde(default)]
    pub compute_mode: Option<String>,
    /// Enforced power limit, milliwatts.
    #[serde(default)]
    pub power_limit_mw: Option<u32>,
    /// Default power limit, milliwatts.
    #[serde(default)]
    pub power_limit_default_mw: Option<u32>,
    /// Performance state at start (`P0`).
    #[serde(default)]
    pub pstate: Option<String>,
    /// SM clock at start, MHz.
    #[serde(default)]
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock at start, MHz.
    #[serde(default)]
    pub mem_clock_mhz: Option<u32>,
    /// Highest SM clock, MHz.
    #[serde(default)]
    pub max_sm_clock_mhz: Option<u32>,
    /// Highest memory clock, MHz.
    #[serde(default)]
    pub max_mem_clock_mhz: Option<u32>,
    /// Applications SM clock (the target unless locked or boosted), MHz.
    #[serde(default)]
    pub applications_sm_clock_mhz: Option<u32>,
    /// Applications memory clock, MHz.
    #[serde(default)]
    pub applications_mem_clock_mhz: Option<u32>,
    /// GPU temperature at start, °C.
    #[serde(default)]
    pub temperature_c: Option<u32>,
    /// Power draw at start (`nvmlDeviceGetPowerUsage`), milliwatts.
    #[serde(default)]
    pub power_mw: Option<u32>,
    /// Clock-event (throttle) reasons at start.
    #[serde(default)]
    pub throttle_reasons: Option<Vec<String>>,
    /// Current PCIe link generation.
    #[serde(default)]
    pub pcie_link_gen: Option<u32>,
    /// Current PCIe link width (lanes).
    #[serde(default)]
    pub pcie_link_width: Option<u32>,
}

/// The host the run used.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HostRecord {
    /// Operating system (`PRETTY_NAME` of /etc/os-release).
    #[serde(default)]
    pub os: Option<String>,
    /// Kernel type (`Linux`).
    #[serde(default)]
    pub kernel_type: Option<String>,
    /// Kernel release (`6.8.0-45-generic`).
    #[serde(default)]
    pub kernel_release: Option<String>,
    /// CPU architecture the binary was built for (`x86_64`).
    #[serde(default)]
    pub arch: String,
    /// CPU model (`Intel(R) Xeon(R) Platinum 8480+`).
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// Logical CPUs of the machine.
    #[serde(default)]
    pub cpu_logical: Option<u32>,
    /// Physical cores of the machine.
    #[serde(default)]
    pub cpu_physical_cores: Option<u32>,
    /// CPU sockets.
    #[serde(default)]
    pub cpu_sockets: Option<u32>,
    /// Logical CPUs this process may run on (affinity and cgroup quota).
    #[serde(default)]
    pub cpus_available: Option<u32>,
    /// Frequency governor of CPU 0 (`performance`).
    #[serde(default)]
    pub cpu_governor: Option<String>,
    /// NUMA nodes.
    #[serde(default)]
    pub numa_nodes: Option<u32>,
    /// CPU list of each NUMA node (`node0: 0-55,112-167`).
    #[serde(default)]
    pub numa_node_cpus: Vec<String>,
    /// Installed host memory, bytes.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// cgroup memory limit as written by the kernel (`max` means none).
    #[serde(default)]
    pub cgroup_memory_limit: Option<String>,
    /// cgroup CPU quota as written by the kernel (`max 100000` means none).
    #[serde(default)]
    pub cgroup_cpu_limit: Option<String>,
    /// Container runtime detected (`docker`, `podman`, `kubernetes`, `containerd`, `lxc`), or
    /// `none found` when no marker was found (markers can be hidden, so not a proof).
    #[serde(default)]
    pub container: Option<String>,
    /// Virtual machine detected (`wsl2`, the DMI product name, or `hypervisor (vendor unknown)`),
    /// or `none found` when the CPU reports no hypervisor.
    #[serde(default)]
    pub virtual_machine: Option<String>,
    /// What the two answers above are based on.
    #[serde(default)]
    pub virtualization_evidence: Vec<String>,
}

/// Machine, GPUs and software of the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Environment {
    /// GPUs visible to the process.
    pub gpus: Vec<GpuRecord>,
    /// NVIDIA driver version string (`580.159.04`), from NVML.
    pub driver_version: Option<String>,
    /// CUDA driver API version (`13000` for 13.0), from `cuDriverGetVersion`.
    pub cuda_driver_version: Option<u32>,
    /// CUPTI API version reported by the loaded library.
    pub cupti_api_version: Option<u32>,
    /// Path of the libcupti that was loaded.
    pub cupti_path: Option<String>,
    /// The CUPTI release the API version belongs to (`12.9`, `13.0`, ...), whose record layouts
    /// and callback ids were used.
    #[serde(default)]
    pub cupti_release: Option<String>,
    /// What the release gates, each with its reason (`kernel.device_launched off
    /// (CUpti_ActivityKernel9 has no isDeviceLaunched ...)`), and the record versions read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cupti_features: Vec<String>,
    /// Host name.
    pub hostname: Option<String>,
    /// The process's command line.
    pub command_line: Vec<String>,
    /// Items that could not be read, with the reason (`"driver_version: NVML not found"`).
    #[serde(default)]
    pub missing: Vec<String>,
    /// NVML library version (`12.580.159.04`).
    #[serde(default)]
    pub nvml_version: Option<String>,
    /// Every GPU NVML sees, by NVML index, with its state at start.
    #[serde(default)]
    pub nvml_gpus: Vec<NvmlGpuRecord>,
    /// The host.
    #[serde(default)]
    pub host: HostRecord,
    /// Version of gpu-ledger.
    #[serde(default)]
    pub gpu_ledger_version: String,
    /// Version of the rustc gpu-ledger was built with.
    #[serde(default)]
    pub rustc_version: Option<String>,
    /// Process id.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Start of the run, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub start_unix_ns: Option<u64>,
    /// Start of the run, RFC 3339 UTC (`2025-05-01T12:00:00.123Z`).
    #[serde(default)]
    pub start_utc: Option<String>,
    /// CUDA-related environment variables that were set (`CUDA_VISIBLE_DEVICES`, ...).
    #[serde(default)]
    pub cuda_env: BTreeMap<String, String>,
}

impl Environment {
    /// The NVML record of the GPU with CUDA ordinal `ordinal`, once linked.
    pub fn nvml_for(&self, ordinal: u32) -> Option<&NvmlGpuRecord> {
        let index = self
            .gpus
            .iter()
            .find(|g| g.ordinal == ordinal)?
            .nvml_index?;
        self.nvml_gpus.iter().find(|n| n.index == index)
    }
}
