//! The bundled kernels' counters, for a side-by-side comparison with Nsight Compute
//! (`scripts/ncu-compare.sh` runs it twice and compares).
//!
//! - `ncu_compare ledger OUT.jsonl`: each workload runs once unmeasured, then once under
//!   gpu-ledger's Range Profiler (auto ranges, kernel replay, one range per kernel named by the
//!   launch recorder); one JSON line per kernel launch with its analytic bytes and FLOPs and the
//!   metric values.
//! - `ncu_compare flushed OUT.jsonl`: the same launches, each in a user range of its own (user
//!   replay) that starts with the L2 flushed (`CacheState::Flushed`), to compare with Nsight
//!   Compute's `--cache-control all`; each line also carries the device's L2 size.
//! - `ncu_compare plain`: each workload runs once, in the same order, with no profiler of
//!   gpu-ledger's: the launches Nsight Compute profiles are the ones the ledger mode measured.

use std::io::Write;
use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::counters::{CacheState, CounterConfig, RangeMode, RangeProfiler, ReplayMode};
use gpu_ledger::kernels::suite::experiment::{exit_code, open_device};
use gpu_ledger::kernels::suite::gemm::{GemmGpu, GemmKernel, GemmKernels, GemmSpec};
use gpu_ledger::kernels::suite::reduce::{
    ReduceKernels, ReduceMode, ReduceVariant, ReductionGpu, ReductionSpec,
};
use gpu_ledger::kernels::suite::softmax::{SoftmaxGpu, SoftmaxKernels, SoftmaxSpec};
use gpu_ledger::kernels::suite::transpose::{
    TransposeGpu, TransposeKernels, TransposeSpec, TransposeVariant,
};
use gpu_ledger::kernels::suite::vadd::{VaddKernels, VaddVariant, VectorAddGpu, VectorAddSpec};
use gpu_ledger::kernels::suite::{GpuWorkload, SuiteError};

/// The metrics compared, as Nsight Compute spells them (`--metrics` takes the same list).
const METRICS: [&str; 8] = [
    names::DRAM_BYTES_READ,
    names::DRAM_BYTES_WRITE,
    names::GLOBAL_LD_SECTORS,
    names::GLOBAL_LD_REQUESTS,
    names::GLOBAL_ST_SECTORS,
    names::GLOBAL_ST_REQUESTS,
    names::FADD,
    names::GPU_TIME,
];

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--metrics") {
        println!("{}", METRICS.join(","));
        return ExitCode::SUCCESS;
    }
    exit_code("ncu_compare", run().map(|()| true))
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let out = std::env::args().nth(2);
    if !(mode == "plain" || ((mode == "ledger" || mode == "flushed") && out.is_some())) {
        return Err(
            "usage: ncu_compare plain | ledger OUT.jsonl | flushed OUT.jsonl | --metrics".into(),
        );
    }
    let dev = open_device(0)?;
    let s = &dev.stream;
    let sms = dev.gpu.sm_count;
    let vadd = VaddKernels::load(&dev.ctx)?;
    let transpose = TransposeKernels::load(&dev.ctx)?;
    let reduce = ReduceKernels::load(&dev.ctx)?;
    let gemm = GemmKernels::load(&dev.ctx)?;
    let softmax = SoftmaxKernels::load(&dev.ctx)?;
    let mut workloads: Vec<Box<dyn GpuWorkload>> = Vec::new();
    for n in [1u64 << 24, 1 << 26] {
        let spec = VectorAddSpec::new(n, VaddVariant::Scalar);
        workloads.push(Box::new(VectorAddGpu::new(s, &vadd, spec, 1)?));
    }
    for v in TransposeVariant::ALL {
        let spec = TransposeSpec::new(4096, 4096, v);
        workloads.push(Box::new(TransposeGpu::new(s, &transpose, spec, 2)?));
    }
    let n = (1u64 << 24) + 17;
    for (v, m) in [
        (ReduceVariant::Shuffle, ReduceMode::Unfused),
        (ReduceVariant::Shuffle, ReduceMode::Fused),
        (ReduceVariant::Tree, ReduceMode::Unfused),
    ] {
        let spec = ReductionSpec::for_device(n, v, m, sms);
        workloads.push(Box::new(ReductionGpu::new(s, &reduce, spec, 3)?));
    }
    let spec = GemmSpec::new(2048, 2048, 2048, GemmKernel::Tiled);
    workloads.push(Box::new(GemmGpu::new(s, &gemm, spec, 4)?));
    for fused in [false, true] {
        let spec = SoftmaxSpec::new(8192, 4096, fused);
        workloads.push(Box::new(SoftmaxGpu::new(s, &softmax, spec, 5)?));
    }
    if mode == "plain" {
        for w in &mut workloads {
            w.run()?;
            w.stream().synchronize()?;
        }
        return Ok(());
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(out.expect("checked above"))?);
    if mode == "flushed" {
        flushed(&dev.ctx, &mut workloads, &mut file)?;
        file.flush()?;
        return Ok(());
    }
    let config = CounterConfig {
        metrics: METRICS.iter().map(|m| m.to_string()).collect(),
        range_mode: RangeMode::Auto,
        replay_mode: ReplayMode::Kernel,
        record_kernel_names: true,
        ..CounterConfig::default()
    };
    for w in &mut workloads {
        w.run()?;
        w.stream().synchronize()?;
        let mut rp = RangeProfiler::new(&dev.ctx, config.clone())?;
        let collected = rp.collect(|_| {
            w.run().map_err(suite_error)?;
            Ok(w.stream().synchronize()?)
        })?;
        rp.finish()?;
        let launches = w.spec().launches();
        one_range_per_launch(&w.spec().name(), &collected, launches.len())?;
        for (r, l) in collected.ranges.iter().zip(&launches) {
            if r.kernel.as_deref() != Some(l.kernel) {
                return Err(format!("range {} is {:?}, not {}", r.name, r.kernel, l.kernel).into());
            }
            let line = serde_json::json!({
                "workload": w.spec().name(),
                "kernel": l.kernel,
                "analytic_bytes": l.work.bytes,
                "analytic_flops": l.work.flops,
                "values": r.values,
            });
            writeln!(file, "{line}")?;
        }
    }
    file.flush()?;
    Ok(())
}

/// Each workload once unmeasured, then under user ranges with the L2 flushed before each: one
/// range per launch, pushed before it is enqueued and popped before the next (the flush waits
/// for the context, so the ranges do not overlap).
fn flushed(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    workloads: &mut [Box<dyn GpuWorkload>],
    file: &mut impl Write,
) -> Result<(), Box<dyn std::error::Error>> {
    let l2_bytes =
        ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
    for w in workloads {
        w.run()?;
        w.stream().synchronize()?;
        let launches = w.spec().launches();
        let config = CounterConfig {
            metrics: METRICS.iter().map(|m| m.to_string()).collect(),
            range_mode: RangeMode::User,
            replay_mode: ReplayMode::User,
            cache: CacheState::Flushed,
            max_ranges: launches.len(),
            ..CounterConfig::default()
        };
        let mut rp = RangeProfiler::new(ctx, config)?;
        let collected = rp.collect(|rp| {
            let stream = w.stream().clone();
            w.run_each(&mut |i| {
                if i > 0 {
                    rp.pop_range()?;
                }
                Ok(rp.push_range(&format!("{i:02}"))?)
            })
            .map_err(suite_error)?;
            stream.synchronize()?;
            rp.pop_range()
        })?;
        rp.finish()?;
        one_range_per_launch(&w.spec().name(), &collected, launches.len())?;
        for (i, l) in launches.iter().enumerate() {
            let r = collected
                .range(&format!("{i:02}"))
                .ok_or_else(|| format!("{}: no range for launch {i}", w.spec().name()))?;
            let line = serde_json::json!({
                "workload": w.spec().name(),
                "kernel": l.kernel,
                "analytic_bytes": l.work.bytes,
                "analytic_flops": l.work.flops,
                "l2_bytes": l2_bytes,
                "values": r.values,
            });
            writeln!(file, "{line}")?;
        }
    }
    Ok(())
}

/// Every launch of the workload got its range, or the comparison would pair the wrong kernels.
fn one_range_per_launch(
    workload: &str,
    collected: &gpu_ledger::counters::Collected,
    launches: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    if collected.ranges.len() == launches {
        return Ok(());
    }
    Err(format!(
        "{workload}: {} ranges for {launches} launches",
        collected.ranges.len()
    )
    .into())
}

/// A suite error inside the Range Profiler's workload, as the profiler's error type.
fn suite_error(e: SuiteError) -> gpu_ledger::Error {
    match e {
        SuiteError::Ledger(e) => e,
        SuiteError::Driver(e) => gpu_ledger::Error::Cuda(e),
        other => gpu_ledger::Error::Config(format!("kernel suite: {other}")),
    }
}
