//! GPU tests: NVML clocks, power and energy per iteration, and the environment record.

use std::time::{Duration, Instant};

use gpu_ledger::ledger::EnergyMethod;
use gpu_ledger::{read_ledger, Level, Profiler};

use crate::{gpu, SERIAL};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn sustained_load_raises_power_and_energy_counter_agrees_with_integrated_power() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n: usize = 1 << 28; // 1 GiB per array: every launch streams 3 GiB through DRAM
    let a = g.stream.alloc_zeros::<f32>(n).unwrap();
    let b = g.stream.alloc_zeros::<f32>(n).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvml.jsonl");
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(&path)
        .work_per_iteration(12.0 * n as f64)
        .start()
        .unwrap();
    // Iteration 0: idle for 1 s. Iteration 1: 3 s of back-to-back bandwidth-bound launches.
    std::thread::sleep(Duration::from_secs(1));
    profiler.step();
    let t0 = Instant::now();
    let mut launches = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        for _ in 0..50 {
            g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
        }
        g.stream.synchronize().unwrap();
        launches += 50;
    }
    profiler.step();
    let summary = profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 2);
    let idle = &ledger.iterations[0].nvml[0];
    let load = &ledger.iterations[1].nvml[0];
    println!("idle: {idle:?}");
    println!("load ({launches} launches): {load:?}");
    let idle_w = idle.power.as_ref().expect("idle power").mean_w;
    let load_power = load.power.as_ref().expect("power under load");
    println!(
        "power: idle {idle_w:.1} W, load mean {:.1} W max {:.1} W ({:?})",
        load_power.mean_w, load_power.max_w, load_power.kind
    );
    assert!(
        load_power.mean_w > idle_w + 100.0,
        "power under load {:.1} W vs idle {idle_w:.1} W",
        load_power.mean_w
    );
    let sm = load.sm_clock.as_ref().expect("SM clock reported");
    assert!(sm.mean_mhz > 500.0 && sm.samples > 50, "{sm:?}");
    assert!(load.mem_clock.is_some());
    let energy = load.energy.as_ref().expect("energy over the 3 s window");
    assert_eq!(
        energy.method,
        EnergyMethod::EnergyCounter,
        "a 3 s window is long enough for the counter"
    );
    let integrated = energy
        .integrated_joules
        .expect("integrated power alongside");
    let rel = (energy.joules - integrated).abs() / integrated;
    println!(
        "energy: counter {:.1} J, integrated power {integrated:.1} J, differ {:.2}%",
        energy.joules,
        rel * 100.0
    );
    assert!(
        rel <= 0.05,
        "counter {:.1} J vs integrated {integrated:.1} J",
        energy.joules
    );
    assert!(!load.coarse && load.temperature_max_c.is_some());
    let run = summary.trailer.energy.expect("run energy in the trailer");
    println!("run energy: {run:?}");
    assert!(run.j_per_unit_work.is_some());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn environment_record_is_filled_on_the_gpu_host() {
    let _g = SERIAL.lock();
    let _gpu = gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.jsonl");
    let profiler = crate::timeline(&path);
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let env = &ledger.header.environment;
    println!("{}", serde_json::to_string_pretty(env).unwrap());
    println!("missing: {:?}", env.missing);
    assert!(
        ledger.header.warnings.is_empty(),
        "{:?}",
        ledger.header.warnings
    );
    let gpu = &env.gpus[0];
    assert!(
        gpu.uuid.is_some() && gpu.pci_bus_id.is_some() && gpu.nvml_index.is_some(),
        "{gpu:?}"
    );
    assert!(
        env.driver_version.is_some()
            && env.cuda_driver_version.is_some()
            && env.cupti_api_version.is_some()
    );
    assert!(!env.nvml_gpus.is_empty());
    // Nothing about the GPU, driver or CUDA may be missing on the GPU host; host items that a
    // container hides (CPU governor, cgroup limits) may be, each with its reason.
    let gpu_missing: Vec<&String> = env
        .missing
        .iter()
        .filter(|m| !m.starts_with("host."))
        .collect();
    assert!(gpu_missing.is_empty(), "{gpu_missing:?}");
}
