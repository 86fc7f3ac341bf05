//! Host, build and process items of the environment record, read from the operating system
//! (`/proc`, `/sys`, `/etc/os-release`); none needs a GPU.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::missing::take;
use crate::ledger::{Environment, HostRecord};

/// Environment variables recorded in [`Environment::cuda_env`] when set: they change which GPUs
/// run, in which order, and how kernels are loaded or launched.
const RECORDED_ENV_VARS: [&str; 10] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_CACHE_DISABLE",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "NCCL_P2P_DISABLE",
    "OMP_NUM_THREADS",
];

/// Host, build and process items, with the start time taken now. Needs no GPU.
#[cfg(test)]
pub(crate) fn collect_host() -> Environment {
    collect_host_at(SystemTime::now())
}

/// Host, build and process items, with `start` as the run's start time.
pub(crate) fn collect_host_at(start: SystemTime) -> Environment {
    let mut env = Environment {
        gpu_ledger_version: env!("CARGO_PKG_VERSION").to_owned(),
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        pid: Some(std::process::id()),
        ..Environment::default()
    };
    let missing = &mut env.missing;

    env.rustc_version = option_env!("GPU_LEDGER_RUSTC_VERSION").map(str::to_owned);
    if env.rustc_version.is_none() {
        missing.push(
            "rustc_version: GPU_LEDGER_RUSTC_VERSION was not set by build.rs at build time"
                .to_owned(),
        );
    }

    match start.duration_since(UNIX_EPOCH) {
        Ok(d) => {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            env.start_unix_ns = Some(ns);
            env.start_utc = Some(rfc3339_utc(ns));
        }
        Err(_) => {
            missing.push("start_unix_ns: the system clock is before 1970".to_owned());
            missing.push("start_utc: the system clock is before 1970".to_owned());
        }
    }

    env.hostname = take(
        missing,
        "hostname",
        read_trimmed("/proc/sys/kernel/hostname")
            .or_else(|e| std::env::var("HOSTNAME").map_err(|_| e))
            .and_then(non_empty),
    );

    for var in RECORDED_ENV_VARS {
        if let Some(v) = std::env::var_os(var) {
            env.cuda_env
                .insert(var.to_owned(), v.to_string_lossy().into_owned());
        }
    }

    env.host = collect_host_record(missing);
    env
}

/// `(domain, bus, device, function)` from `0000:17:00.0` or `00000000:17:00.0`.
pub(super) fn normalize_bus_id(bus: &str) -> Option<(u32, u32, u32, u32)> {
    let bus = bus.trim();
    let (domain, rest) = bus.split_once(':')?;
    let (b, rest) = rest.split_once(':')?;
    let (d, f) = rest.split_once('.')?;
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(b, 16).ok()?,
        u32::from_str_radix(d, 16).ok()?,
        u32::from_str_radix(f, 16).ok()?,
    ))
}

/// The NUMA node of a PCI device from `/sys/bus/pci/devices/<bus id>/numa_node`.
pub(super) fn pci_numa_node(bus_id: &str) -> Result<i32, String> {
    let (domain, bus, device, function) =
        normalize_bus_id(bus_id).ok_or_else(|| format!("cannot parse PCI bus id {bus_id:?}"))?;
    let path =
        format!("/sys/bus/pci/devices/{domain:04x}:{bus:02x}:{device:02x}.{function:x}/numa_node");
    let text = read_trimmed(&path)?;
    text.parse::<i32>()
        .map_err(|e| format!("{path}: cannot parse {text:?}: {e}"))
}

fn read_to_string(path: impl AsRef<Path>) -> Result<String, String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_trimmed(path: impl AsRef<Path>) -> Result<String, String> {
    read_to_string(path).map(|s| s.trim().to_owned())
}

fn non_empty(s: String) -> Result<String, String> {
    if s.is_empty() {
        Err("empty".to_owned())
    } else {
        Ok(s)
    }
}

/// The host record, each item read in turn; the reason of every item that could not be read goes
/// to `missing`.
fn collect_host_record(missing: &mut Vec<String>) -> HostRecord {
    let mut h = HostRecord {
        arch: std::env::consts::ARCH.to_owned(),
        ..HostRecord::default()
    };
    let kernel_release = host_os(&mut h, missing);
    let cpuinfo = read_to_string("/proc/cpuinfo").map(|t| parse_cpuinfo(&t));
    host_cpus(&mut h, missing, &cpuinfo);
    host_memory(&mut h, missing);
    host_virtualization(&mut h, missing, kernel_release.ok(), cpuinfo.ok());
    h
}

/// The operating system and kernel; the kernel release is handed on to the virtualization
/// probe.
fn host_os(h: &mut HostRecord, missing: &mut Vec<String>) -> Result<String, String> {
    h.os = take(
        missing,
        "host.os",
        read_to_string("/etc/os-release")
            .or_else(|e| read_to_string("/usr/lib/os-release").map_err(|_| e))
            .and_then(|t| parse_os_release(&t)),
    );
    h.kernel_type = take(
        missing,
        "host.kernel_type",
        read_trimmed("/proc/sys/kernel/ostype").and_then(non_empty),
    );
    let kernel_release = read_trimmed("/proc/sys/kernel/osrelease").and_then(non_empty);
    h.kernel_release = take(missing, "host.kernel_release", kernel_release.clone());
    kernel_release
}

/// The CPUs: model, logical CPUs, cores and sockets from `/proc/cpuinfo`, the CPUs this process
/// may use, and the frequency governor.
fn host_cpus(h: &mut HostRecord, missing: &mut Vec<String>, cpuinfo: &Result<CpuInfo, String>) {
    match cpuinfo {
        Ok(c) => {
            h.cpu_model = take(
                missing,
                "host.cpu_model",
                c.model
                    .clone()
                    .ok_or_else(|| "/proc/cpuinfo has no model name or CPU part line".to_owned()),
            );
            h.cpu_logical = take(
                missing,
                "host.cpu_logical",
                (c.logical > 0)
                    .then_some(c.logical)
                    .ok_or_else(|| "/proc/cpuinfo lists no processor".to_owned()),
            );
            h.cpu_physical_cores = take(
                missing,
                "host.cpu_physical_cores",
                c.physical_cores
                    .ok_or_else(|| "/proc/cpuinfo has no physical id / core id lines".to_owned()),
            );
            h.cpu_sockets = take(
                missing,
                "host.cpu_sockets",
                c.sockets
                    .ok_or_else(|| "/proc/cpuinfo has no physical id lines".to_owned()),
            );
        }
        Err(e) => {
            for key in [
                "host.cpu_model",
                "host.cpu_logical",
                "host.cpu_physical_cores",
                "host.cpu_sockets",
            ] {
                missing.push(format!("{key}: {e}"));
            }
        }
    }
    h.cpus_available = take(
        missing,
        "host.cpus_available",
        std::thread::available_parallelism()
            .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
            .map_err(|e| e.to_string()),
    );
    h.cpu_governor = take(
        missing,
        "host.cpu_governor",
        read_trimmed("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
            .map_err(|e| format!("{e} (no cpufreq driver: common in VMs and containers)")),
    );
}

/// NUMA nodes and their CPUs, total memory, and the cgroup's memory and CPU limits.
fn host_memory(h: &mut HostRecord, missing: &mut Vec<String>) {
    match numa_nodes() {
        Ok(nodes) => {
            h.numa_nodes = Some(u32::try_from(nodes.len()).unwrap_or(u32::MAX));
            h.numa_node_cpus = nodes;
        }
        Err(e) => missing.push(format!("host.numa_nodes: {e}")),
    }

    h.memory_total_bytes = take(
        missing,
        "host.memory_total_bytes",
        read_to_string("/proc/meminfo").and_then(|t| parse_meminfo_total(&t)),
    );
    h.cgroup_memory_limit = take(
        missing,
        "host.cgroup_memory_limit",
        read_trimmed("/sys/fs/cgroup/memory.max")
            .or_else(|e| read_trimmed("/sys/fs/cgroup/memory/memory.limit_in_bytes").map_err(|_| e))
            .map_err(|e| format!("{e} (and no cgroup v1 memory.limit_in_bytes)")),
    );
    h.cgroup_cpu_limit = take(
        missing,
        "host.cgroup_cpu_limit",
        read_trimmed("/sys/fs/cgroup/cpu.max")
            .or_else(|e| {
                let quota = read_trimmed("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
                let period = read_trimmed("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
                match (quota, period) {
                    (Ok(q), Ok(p)) => Ok(format!("{q} {p}")),
                    _ => Err(e),
                }
            })
            .map_err(|e| format!("{e} (and no cgroup v1 cpu.cfs_quota_us)")),
    );
}

/// Whether the host is a container or a virtual machine, and the evidence, from the files and
/// variables that tell (with the kernel release and CPU flags already read).
fn host_virtualization(
    h: &mut HostRecord,
    missing: &mut Vec<String>,
    kernel_release: Option<String>,
    cpuinfo: Option<CpuInfo>,
) {
    let probe = VirtProbe {
        dockerenv: Path::new("/.dockerenv").exists(),
        containerenv: Path::new("/run/.containerenv").exists(),
        pid1_cgroup: read_to_string("/proc/1/cgroup").ok(),
        kubernetes: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        kernel_release,
        cpu_flags: cpuinfo.and_then(|c| c.flags),
        dmi_product: read_trimmed("/sys/class/dmi/id/product_name").ok(),
        dmi_vendor: read_trimmed("/sys/class/dmi/id/sys_vendor").ok(),
        hypervisor_type: read_trimmed("/sys/hypervisor/type").ok(),
    };
    let v = probe.detect();
    h.container = Some(v.container);
    h.virtualization_evidence = v.evidence;
    h.virtual_machine = take(missing, "host.virtual_machine", v.vm);
}

fn parse_os_release(text: &str) -> Result<String, String> {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_owned())
        })
    };
    field("PRETTY_NAME")
        .or_else(|| {
            let name = field("NAME")?;
            Some(match field("VERSION") {
                Some(v) => format!("{name} {v}"),
                None => name,
            })
        })
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "os-release has no PRETTY_NAME or NAME".to_owned())
}

fn parse_meminfo_total(text: &str) -> Result<u64, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .ok_or_else(|| "/proc/meminfo has no MemTotal line".to_owned())?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("cannot parse {line:?}"))?;
    match parts.next() {
        Some("kB") | Some("KB") => Ok(value.saturating_mul(1024)),
        None => Ok(value),
        Some(unit) => Err(format!("unknown unit {unit:?} in {line:?}")),
    }
}

#[derive(Debug, Default, PartialEq)]
struct CpuInfo {
    model: Option<String>,
    logical: u32,
    physical_cores: Option<u32>,
    sockets: Option<u32>,
    /// The `flags` line (x86); `None` on architectures without one.
    flags: Option<String>,
}

/// Arm CPU parts seen on GPU hosts (`CPU implementer 0x41`).
fn arm_part_name(part: &str) -> Option<&'static str> {
    match part.to_ascii_lowercase().as_str() {
        "0xd0c" => Some("Neoverse-N1"),
        "0xd40" => Some("Neoverse-V1"),
        "0xd49" => Some("Neoverse-N2"),
        "0xd4f" => Some("Neoverse-V2"),
        "0xd84" => Some("Neoverse-V3"),
        _ => None,
    }
}

fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut cores = std::collections::BTreeSet::new();
    let mut sockets = std::collections::BTreeSet::new();
    let mut physical_id: Option<String> = None;
    let mut arm_implementer: Option<String> = None;
    let mut arm_part: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => info.logical += 1,
            "model name" | "cpu model" if info.model.is_none() && !value.is_empty() => {
                info.model = Some(value.to_owned());
            }
            "physical id" => {
                physical_id = Some(value.to_owned());
                sockets.insert(value.to_owned());
            }
            "core id" => {
                cores.insert((physical_id.clone().unwrap_or_default(), value.to_owned()));
            }
            "flags" if info.flags.is_none() => info.flags = Some(value.to_owned()),
            "CPU implementer" if arm_implementer.is_none() => {
                arm_implementer = Some(value.to_owned());
            }
            "CPU part" if arm_part.is_none() => arm_part = Some(value.to_owned()),
            _ => {}
        }
    }
    if info.model.is_none() {
        if let Some(part) = arm_part {
            info.model = Some(match arm_part_name(&part) {
                Some(name) => format!("Arm {name} (part {part})"),
                None => format!(
                    "Arm CPU implementer {} part {part}",
                    arm_implementer.as_deref().unwrap_or("?")
                ),
            });
        }
    }
    if !cores.is_empty() {
        info.physical_cores = u32::try_from(cores.len()).ok();
    }
    if !sockets.is_empty() {
        info.sockets = u32::try_from(sockets.len()).ok();
    }
    info
}

/// `node0: 0-55,112-167`, one per NUMA node.
fn numa_nodes() -> Result<Vec<String>, String> {
    let dir = "/sys/devices/system/node";
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut nodes: Vec<(u32, String)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(n) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cpus =
            read_trimmed(entry.path().join("cpulist")).unwrap_or_else(|e| format!("? ({e})"));
        nodes.push((n, format!("{name}: {cpus}")));
    }
    if nodes.is_empty() {
        return Err(format!("{dir} lists no node"));
    }
    nodes.sort();
    Ok(nodes.into_iter().map(|(_, s)| s).collect())
}

/// What container and VM detection looks at (gathered from the file system, or given by tests).
#[derive(Debug, Default)]
struct VirtProbe {
    dockerenv: bool,
    containerenv: bool,
    pid1_cgroup: Option<String>,
    kubernetes: bool,
    kernel_release: Option<String>,
    cpu_flags: Option<String>,
    dmi_product: Option<String>,
    dmi_vendor: Option<String>,
    hypervisor_type: Option<String>,
}

#[derive(Debug, PartialEq)]
struct Virtualization {
    container: String,
    vm: Result<String, String>,
    evidence: Vec<String>,
}

const NONE_FOUND: &str = "none found";

impl VirtProbe {
    fn detect(&self) -> Virtualization {
        let mut evidence = Vec::new();
        let mut container: Option<&str> = None;
        if self.dockerenv {
            evidence.push("/.dockerenv exists".to_owned());
            container.get_or_insert("docker");
        }
        if self.containerenv {
            evidence.push("/run/.containerenv exists".to_owned());
            container.get_or_insert("podman");
        }
        if let Some(cg) = &self.pid1_cgroup {
            let markers = [
                ("kubepods", "kubernetes"),
                ("docker", "docker"),
                ("libpod", "podman"),
                ("containerd", "containerd"),
                ("lxc", "lxc"),
            ];
            if let Some((m, kind)) = markers.iter().find(|(m, _)| cg.contains(m)) {
                evidence.push(format!("/proc/1/cgroup mentions {m}"));
                container.get_or_insert(kind);
            }
        }
        if self.kubernetes {
            evidence.push("KUBERNETES_SERVICE_HOST is set".to_owned());
            container.get_or_insert("kubernetes");
        }

        let mut vm: Option<String> = None;
        if let Some(release) = &self.kernel_release {
            let r = release.to_ascii_lowercase();
            if r.contains("microsoft") || r.contains("wsl") {
                evidence.push(format!("kernel release {release:?} is a WSL kernel"));
                vm = Some("wsl2".to_owned());
            }
        }
        let dmi_vm = [self.dmi_product.as_deref(), self.dmi_vendor.as_deref()]
            .into_iter()
            .flatten()
            .find(|s| {
                let s = s.to_ascii_lowercase();
                [
                    "kvm",
                    "qemu",
                    "vmware",
                    "virtualbox",
                    "xen",
                    "virtual machine",
                    "bochs",
                    "parallels",
                    "amazon ec2",
                    "google compute engine",
                    "openstack",
                    "cloud hypervisor",
                    "firecracker",
                ]
                .iter()
                .any(|m| s.contains(m))
            });
        if let Some(name) = dmi_vm {
            evidence.push(format!("DMI names {name:?}"));
            vm.get_or_insert_with(|| name.to_owned());
        }
        if let Some(t) = self.hypervisor_type.as_deref().filter(|t| !t.is_empty()) {
            evidence.push(format!("/sys/hypervisor/type is {t:?}"));
            vm.get_or_insert_with(|| t.to_owned());
        }
        let hypervisor_flag = self
            .cpu_flags
            .as_deref()
            .map(|f| f.split_whitespace().any(|w| w == "hypervisor"));
        if hypervisor_flag == Some(true) {
            evidence.push("the CPU flags include hypervisor".to_owned());
            vm.get_or_insert_with(|| "hypervisor (vendor unknown)".to_owned());
        }
        let vm = match (vm, hypervisor_flag) {
            (Some(v), _) => Ok(v),
            (None, Some(false)) => Ok(NONE_FOUND.to_owned()),
            (None, _) => Err(
                "no VM marker found, and this CPU has no hypervisor flag to tell a VM from bare \
                 metal"
                    .to_owned(),
            ),
        };
        Virtualization {
            container: container.unwrap_or(NONE_FOUND).to_owned(),
            vm,
            evidence,
        }
    }
}

/// `2025-05-01T12:00:00.123456789Z` from nanoseconds since the Unix epoch.
fn rfc3339_utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let nanos = unix_ns % 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm), valid for u64 input.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{nanos:09}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000000000Z");
        // 2000-02-29T12:34:56.5Z (a leap day in a century leap year).
        assert_eq!(
            rfc3339_utc(951_827_696_500_000_000),
            "2000-02-29T12:34:56.500000000Z"
        );
        // 2024-12-31T23:59:59Z
        assert_eq!(
            rfc3339_utc(1_735_689_599_000_000_000),
            "2024-12-31T23:59:59.000000000Z"
        );
    }

    #[test]
    fn cpuinfo_x86() {
        let text = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\
                    physical id\t: 0\ncore id\t: 0\nflags\t: fpu sse hypervisor\n\n\
                    processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\
                    physical id\t: 0\ncore id\t: 0\nflags\t: fpu sse hypervisor\n\n\
                    processor\t: 2\nphysical id\t: 1\ncore id\t: 0\n\n\
                    processor\t: 3\nphysical id\t: 1\ncore id\t: 1\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.model.as_deref(), Some("Intel(R) Xeon(R) Platinum 8480+"));
        assert_eq!(c.logical, 4);
        assert_eq!(c.physical_cores, Some(3));
        assert_eq!(c.sockets, Some(2));
        assert!(c.flags.as_deref().is_some_and(|f| f.contains("hypervisor")));
    }

    #[test]
    fn cpuinfo_grace() {
        let text = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\n\
                    CPU part\t: 0xd4f\n\nprocessor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n";
        let c = parse_cpuinfo(text);
        assert_eq!(c.model.as_deref(), Some("Arm Neoverse-V2 (part 0xd4f)"));
        assert_eq!(c.logical, 2);
        assert_eq!(c.physical_cores, None);
        assert_eq!(c.flags, None);
    }

    #[test]
    fn meminfo_and_os_release() {
        assert_eq!(
            parse_meminfo_total("MemTotal:       16303412 kB\nMemFree: 1 kB\n"),
            Ok(16_303_412 * 1024)
        );
        assert!(parse_meminfo_total("MemFree: 1 kB\n").is_err());
        assert_eq!(
            parse_os_release("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\n"),
            Ok("Ubuntu 22.04.4 LTS".to_owned())
        );
        assert_eq!(
            parse_os_release("NAME=Alpine\nVERSION=3.19\n"),
            Ok("Alpine 3.19".to_owned())
        );
    }

    #[test]
    fn virtualization() {
        let bare = VirtProbe {
            pid1_cgroup: Some("0::/init.scope\n".to_owned()),
            cpu_flags: Some("fpu sse".to_owned()),
            kernel_release: Some("6.8.0-45-generic".to_owned()),
            ..VirtProbe::default()
        }
        .detect();
        assert_eq!(bare.container, NONE_FOUND);
        assert_eq!(bare.vm, Ok(NONE_FOUND.to_owned()));

        let k8s_vm = VirtProbe {
            pid1_cgroup: Some("0::/kubepods/burstable/pod1/abc\n".to_owned()),
            cpu_flags: Some("fpu hypervisor".to_owned()),
            dmi_product: Some("Standard PC (Q35 + ICH9, 2009)".to_owned()),
            dmi_vendor: Some("QEMU".to_owned()),
            ..VirtProbe::default()
        }
        .detect();
        assert_eq!(k8s_vm.container, "kubernetes");
        assert_eq!(k8s_vm.vm, Ok("QEMU".to_owned()));
        assert!(k8s_vm.evidence.len() >= 3);

        let wsl = VirtProbe {
            dockerenv: true,
            kernel_release: Some("5.15.153.1-microsoft-standard-WSL2".to_owned()),
            ..VirtProbe::default()
        }
        .detect();
        assert_eq!(wsl.container, "docker");
        assert_eq!(wsl.vm, Ok("wsl2".to_owned()));

        let arm = VirtProbe::default().detect();
        assert!(arm.vm.is_err());
    }
}
