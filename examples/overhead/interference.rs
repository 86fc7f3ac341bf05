//! `--nvml-interference`: which of the NVML sampler's reads slows the GPU work.

use super::*;

/// One kind of read the NVML sampler makes, repeated back to back by the interference probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NvmlRead {
    /// No reading thread: the baseline.
    Nothing,
    /// The sampler's every-tick read: clocks, instant power, temperature, throttle, memory used.
    Sample,
    /// The PCIe byte counters (TX and RX, one field-value call).
    Pcie,
    /// The energy counter.
    Energy,
}

impl NvmlRead {
    const ALL: [NvmlRead; 4] = [
        NvmlRead::Nothing,
        NvmlRead::Sample,
        NvmlRead::Pcie,
        NvmlRead::Energy,
    ];
    fn label(self) -> &'static str {
        match self {
            NvmlRead::Nothing => "none",
            NvmlRead::Sample => "sample",
            NvmlRead::Pcie => "pcie",
            NvmlRead::Energy => "energy",
        }
    }
    /// Calls per second of this read under the profiler's default schedule.
    fn default_rate_hz(self) -> f64 {
        let hz = |d: Duration| 1.0 / d.as_secs_f64();
        match self {
            NvmlRead::Nothing => 0.0,
            NvmlRead::Sample => hz(nvml::DEFAULT_SAMPLE_PERIOD),
            NvmlRead::Pcie => hz(nvml::DEFAULT_PCIE_PERIOD),
            NvmlRead::Energy => hz(nvml::DEFAULT_ENERGY_PERIOD),
        }
    }
    fn call(self, lib: &mut NvmlLibrary, index: u32) -> Result<(), nvml::NvmlError> {
        match self {
            NvmlRead::Nothing => Ok(()),
            NvmlRead::Sample => lib.read_sample(index).map(drop),
            NvmlRead::Pcie => lib.read_pcie_bytes(index).map(drop),
            NvmlRead::Energy => lib.read_energy_mj(index).map(drop),
        }
    }
}

/// The NVML index of the benchmark's device, linked as the profiler links it (the environment
/// record: UUID, or else PCI bus id).
fn nvml_index_of(gpu: &Gpu, lib: &NvmlLibrary) -> Result<u32> {
    Ok(gpu_ledger::internals::nvml_index(
        lib,
        gpu.ctx.ordinal() as u32,
    )?)
}

/// What one workload run under one read reported.
struct Interfered {
    elapsed: Duration,
    calls: u64,
    call_ns: u64,
}

/// Runs `work` while another thread repeats `read` back to back (from before `work` starts until
/// it returns).
fn with_reader(
    lib: &mut NvmlLibrary,
    index: u32,
    read: NvmlRead,
    work: impl FnOnce() -> Result<Duration>,
) -> Result<Interfered> {
    if read == NvmlRead::Nothing {
        return Ok(Interfered {
            elapsed: work()?,
            calls: 0,
            call_ns: 0,
        });
    }
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<u64, nvml::NvmlError> {
            let mut busy_ns = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                read.call(lib, index)?;
                busy_ns += t.elapsed().as_nanos() as u64;
                calls.fetch_add(1, Ordering::Relaxed);
            }
            Ok(busy_ns)
        });
        // The workload starts once the reader is in its loop.
        while calls.load(Ordering::Relaxed) == 0 && !reader.is_finished() {
            std::hint::spin_loop();
        }
        let before = calls.load(Ordering::Relaxed);
        let elapsed = work();
        let during = calls.load(Ordering::Relaxed) - before;
        stop.store(true, Ordering::Relaxed);
        let busy_ns = reader
            .join()
            .map_err(|_| "the NVML reading thread panicked")??;
        let total = calls.load(Ordering::Relaxed).max(1);
        Ok(Interfered {
            elapsed: elapsed?,
            calls: during,
            // The mean call, over every call the thread made.
            call_ns: busy_ns / total,
        })
    })
}

/// `--nvml-interference`: which of the sampler's NVML reads slows the GPU work, and by how much
/// per call. No profiler runs; each read is repeated back to back so that its effect is many
/// times the rounds' noise, then scaled to the profiler's default schedule.
pub(super) fn nvml_interference(gpu: &mut Gpu, args: &Args) -> Result<()> {
    let mut lib = NvmlLibrary::init()?;
    let index = nvml_index_of(gpu, &lib)?;
    let workloads = [Workload::Launch, Workload::Train, Workload::Step];
    let launches = args.launches / 5;
    eprintln!(
        "overhead: NVML interference on {} (NVML index {index}); {} rounds; (a) {launches} empty \
         launches, (c) {} training steps, (d) {} kernel-mix steps",
        gpu.name, args.rounds, args.train_steps, args.steps
    );
    // [workload][read] -> per-round (elapsed s, calls during, mean call µs)
    let mut runs: Vec<Vec<Vec<(f64, u64, f64)>>> =
        vec![vec![Vec::new(); NvmlRead::ALL.len()]; workloads.len()];
    for round in 0..=args.rounds {
        for k in 0..NvmlRead::ALL.len() {
            let ri = (k + round) % NvmlRead::ALL.len();
            let read = NvmlRead::ALL[ri];
            for (wi, w) in workloads.iter().enumerate() {
                let r = with_reader(&mut lib, index, read, || match w {
                    Workload::Train => run_train_steps::<false>(gpu, args.train_steps, None, 1),
                    Workload::Step => run_steps::<false>(gpu, args.steps, None, 1),
                    _ => run_launches::<false>(gpu, launches, None, 1),
                })?;
                // Round 0 warms up NVML's and the driver's first calls; not counted.
                if round > 0 {
                    runs[wi][ri].push((r.elapsed.as_secs_f64(), r.calls, r.call_ns as f64 / 1e3));
                }
            }
        }
    }
    println!("\nNVML interference: one thread repeats a read back to back while the workload runs");
    println!(
        "{:<20} {:<7} {:>10} {:>12} {:>12} {:>14} {:>14} {:>16}",
        "workload",
        "read",
        "loop ms",
        "added ms",
        "calls",
        "call µs",
        "added/call µs",
        "default sched %"
    );
    for (wi, w) in workloads.iter().enumerate() {
        let base: Vec<f64> = runs[wi][0].iter().map(|r| r.0).collect();
        for (ri, read) in NvmlRead::ALL.iter().enumerate() {
            let rs = &runs[wi][ri];
            let loop_s: Vec<f64> = rs.iter().map(|r| r.0).collect();
            let added: Vec<f64> = loop_s.iter().zip(&base).map(|(x, b)| x - b).collect();
            let per_call: Vec<f64> = rs
                .iter()
                .zip(&added)
                .filter(|(r, _)| r.1 > 0)
                .map(|(r, d)| d * 1e6 / r.1 as f64)
                .collect();
            let calls: Vec<f64> = rs.iter().map(|r| r.1 as f64).collect();
            let call_us: Vec<f64> = rs.iter().map(|r| r.2).collect();
            let per_call_med = median(&per_call);
            // Added time per second of work at the default schedule, as a share of that second.
            let sched = per_call_med.map(|p| p * read.default_rate_hz() / 1e4);
            let fmt =
                |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
            println!(
                "{:<20} {:<7} {:>10} {:>12} {:>12} {:>14} {:>14} {:>16}",
                w.label(),
                read.label(),
                fmt(median(&loop_s).map(|x| x * 1e3), 2),
                fmt(median(&added).map(|x| x * 1e3), 3),
                fmt(median(&calls), 0),
                fmt(median(&call_us), 1),
                fmt(per_call_med, 2),
                fmt(sched, 3)
            );
        }
    }
    println!(
        "\n`added` is paired by round (the same round's `none` subtracted), median over {} \
         rounds; `added/call` divides it by the calls made while the workload ran; `default \
         sched %` scales that to the sampler's default rates (sample every {} ms, PCIe every {} \
         ms, energy every {} ms) as a share of the workload's time.",
        args.rounds,
        nvml::DEFAULT_SAMPLE_PERIOD.as_millis(),
        nvml::DEFAULT_PCIE_PERIOD.as_millis(),
        nvml::DEFAULT_ENERGY_PERIOD.as_millis()
    );
    Ok(())
}
