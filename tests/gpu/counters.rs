//! GPU tests: hardware counters through the CUPTI Range Profiler, checked against the
//! analytic counts of small kernels. No gpu-ledger `Profiler` runs while these do (SERIAL).
//! Every test prints each measured value next to its expectation.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use gpu_ledger::counters::metrics::{names, resolve, MetricCatalog};
use gpu_ledger::counters::{
    derive, ChipCatalog, Collected, CounterConfig, CounterWindow, CountersSetup, DeriveOptions,
    RangeMode, RangeProfiler, ReplayMode, Unavailable, PRESETS,
};
use gpu_ledger::{read_ledger, Profiler};

use crate::{gpu, report, Gpu, SERIAL};

/// Test kernels: a coalesced and a strided copy, a 32x32 shared tile read column-wise without
/// and with one column of padding, an FP32 multiply and an FP32 FMA kernel.
const KERNELS: &str = r#"
extern "C" __global__ void copy_coalesced(const float* in, float* out, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
extern "C" __global__ void copy_strided(const float* in, float* out, unsigned int n,
                                        unsigned int stride) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[(unsigned long long)i * stride];
}
extern "C" __global__ void tile_columns(const float* in, float* out) {
    __shared__ float tile[32][32];
    unsigned int base = blockIdx.x * 1024u;
    tile[threadIdx.y][threadIdx.x] = in[base + threadIdx.y * 32u + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.y * 32u + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
extern "C" __global__ void tile_columns_padded(const float* in, float* out) {
    __shared__ float tile[32][33];
    unsigned int base = blockIdx.x * 1024u;
    tile[threadIdx.y][threadIdx.x] = in[base + threadIdx.y * 32u + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.y * 32u + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
extern "C" __global__ void scale(const float* x, float* y, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * a;
}
extern "C" __global__ void fma_kernel(const float* x, const float* y, float* z, float a,
                                      unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = fmaf(a, x[i], y[i]);
}
"#;

struct Kernels {
    _module: Arc<CudaModule>,
    copy_coalesced: CudaFunction,
    copy_strided: CudaFunction,
    tile_columns: CudaFunction,
    tile_columns_padded: CudaFunction,
    scale: CudaFunction,
    fma: CudaFunction,
}

fn kernels(ctx: &Arc<CudaContext>) -> Kernels {
    let (major, minor) = ctx.compute_capability().unwrap();
    let ptx = compile_ptx_with_opts(
        KERNELS,
        CompileOptions {
            options: vec![format!("--gpu-architecture=sm_{major}{minor}")],
            ..Default::default()
        },
    )
    .expect("NVRTC compiles the counter test kernels");
    let module = ctx.load_module(ptx).unwrap();
    let f = |name: &str| module.load_function(name).unwrap();
    Kernels {
        copy_coalesced: f("copy_coalesced"),
        copy_strided: f("copy_strided"),
        tile_columns: f("tile_columns"),
        tile_columns_padded: f("tile_columns_padded"),
        scale: f("scale"),
        fma: f("fma_kernel"),
        _module: module,
    }
}

fn cfg_1d(n: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn launch_scale(
    k: &Kernels,
    s: &Arc<CudaStream>,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    n: u32,
) {
    let mut b = s.launch_builder(&k.scale);
    b.arg(x).arg(y).arg(&2.0f32).arg(&n);
    // SAFETY: (const float*, float*, float, unsigned int) matches the kernel; n fits the slices.
    unsafe { b.launch(cfg_1d(n)) }.unwrap();
}

fn launch_fma(
    k: &Kernels,
    s: &Arc<CudaStream>,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    z: &mut CudaSlice<f32>,
    n: u32,
) {
    let mut b = s.launch_builder(&k.fma);
    b.arg(x).arg(y).arg(z).arg(&3.0f32).arg(&n);
    // SAFETY: (const float*, const float*, float*, float, unsigned int) matches the kernel.
    unsafe { b.launch(cfg_1d(n)) }.unwrap();
}

/// A Range Profiler on the test GPU (shared with the kernel-suite counter tests).
/// What the loaded CUPTI release lacks for auto ranges on this driver, by the release's own gate
/// (each release's gate is unit-tested in the crate); `None` when it has them.
pub(crate) fn auto_ranges_lack() -> Option<gpu_ledger::internals::Lack> {
    let lib = gpu_ledger::internals::cupti().expect("CUPTI loads on the GPU host");
    let driver = gpu_ledger::internals::driver_version().expect("the driver reports its version");
    lib.release.auto_ranges(driver / 1000).err()
}

/// Asserts that `err` is the refusal of auto ranges that names the release, what it does and
/// the fix.
pub(crate) fn assert_auto_ranges_refused(err: &gpu_ledger::Error) {
    let text = err.to_string();
    println!("refused as expected: {text}");
    let lib = gpu_ledger::internals::cupti().unwrap();
    assert!(
        matches!(err, gpu_ledger::Error::CuptiLacks { .. })
            && text.contains(&format!("CUPTI {}", lib.release.name))
            && text.contains("auto ranges")
            && text.contains("RangeMode::User"),
        "{text}"
    );
}

/// [`profiler`] with auto ranges: `None` after asserting the clear refusal when the loaded
/// release lacks them on this driver.
pub(crate) fn auto_profiler(
    g: &Gpu,
    metrics: &[&str],
    replay: ReplayMode,
) -> Option<RangeProfiler> {
    if auto_ranges_lack().is_some() {
        let config = CounterConfig {
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            range_mode: RangeMode::Auto,
            replay_mode: replay,
            ..CounterConfig::default()
        };
        let err = RangeProfiler::new(&g.ctx, config)
            .err()
            .expect("auto ranges refused by this CUPTI release");
        assert_auto_ranges_refused(&err);
        return None;
    }
    Some(profiler(g, metrics, RangeMode::Auto, replay))
}

pub(crate) fn profiler(
    g: &Gpu,
    metrics: &[&str],
    range_mode: RangeMode,
    replay: ReplayMode,
) -> RangeProfiler {
    let config = CounterConfig {
        metrics: metrics.iter().map(|m| m.to_string()).collect(),
        range_mode,
        replay_mode: replay,
        record_kernel_names: range_mode == RangeMode::Auto,
        ..CounterConfig::default()
    };
    let rp = RangeProfiler::new(&g.ctx, config).expect(
        "Range Profiler set up (if this is a permission error, see its fix: \
         NVreg_RestrictProfilingToAdminUsers=0)",
    );
    println!(
        "chip {}: {} metric(s), {} pass(es), {} run(s) per collection ({} ranges, {} replay)",
        rp.chip(),
        rp.metrics().len(),
        rp.passes(),
        rp.runs_per_collection(),
        range_mode.as_str(),
        replay.as_str()
    );
    rp
}

/// One metric of one range, with a clear panic naming what is missing.
pub(crate) fn value(c: &Collected, range: &str, metric: &str) -> f64 {
    c.range(range)
        .unwrap_or_else(|| {
            panic!(
                "no range {range:?}; ranges: {:?}",
                c.ranges.iter().map(|r| &r.name).collect::<Vec<_>>()
            )
        })
        .get(metric)
        .unwrap_or_else(|| panic!("no {metric} in range {range}"))
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_vector_add_2_28_dram_bytes_and_fp32_adds_match_analytic_counts() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n: u64 = 1 << 28;
    let a = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let b = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    // Warm-up: each measured run then starts with L2 as a vector add leaves it (dirty lines of
    // c's tail), so the write-backs it causes balance the dirty lines it leaves behind.
    g.vadd.launch(&g.stream, &a, &b, &mut c, n).unwrap();
    g.stream.synchronize().unwrap();

    let mut rp = profiler(
        &g,
        &[
            names::DRAM_BYTES_READ,
            names::DRAM_BYTES_WRITE,
            names::GPU_TIME,
        ],
        RangeMode::User,
        ReplayMode::User,
    );
    let bytes = rp
        .collect(|rp| {
            rp.push_range("vector_add")?;
            g.vadd.launch(&g.stream, &a, &b, &mut c, n)?;
            g.stream.synchronize()?;
            rp.pop_range()
        })
        .unwrap();
    rp.finish().unwrap();

    let mut rp = profiler(&g, &[names::FADD], RangeMode::User, ReplayMode::User);
    let adds = rp
        .collect(|rp| {
            rp.push_range("vector_add")?;
            g.vadd.launch(&g.stream, &a, &b, &mut c, n)?;
            g.stream.synchronize()?;
            rp.pop_range()
        })
        .unwrap();
    rp.finish().unwrap();

    println!("vector_add, N = 2^28 = {n} floats:");
    let read = value(&bytes, "vector_add", names::DRAM_BYTES_READ);
    let write = value(&bytes, "vector_add", names::DRAM_BYTES_WRITE);
    let fadd = value(&adds, "vector_add", names::FADD);
    let r = report(
        "dram__bytes_read.sum vs 8N (within 2 %)",
        read,
        8.0 * n as f64,
    );
    let w = report(
        "dram__bytes_write.sum vs 4N (within 3 %)",
        write,
        4.0 * n as f64,
    );
    report("FP32 adds vs N (exact)", fadd, n as f64);
    let d = derive(
        &bytes.range("vector_add").unwrap().values,
        &DeriveOptions::default(),
    );
    println!(
        "  gpu__time_duration.sum {:.0} ns; derived DRAM bandwidth {:.3} TB/s",
        value(&bytes, "vector_add", names::GPU_TIME),
        d.dram_bandwidth_bytes_per_s.unwrap_or(f64::NAN) / 1e12
    );
    assert_eq!(bytes.ranges.len(), 1, "one user range");
    assert!(r.abs() <= 0.02, "DRAM reads {read} not within 2 % of 8N");
    assert!(w.abs() <= 0.03, "DRAM writes {write} not within 3 % of 4N");
    assert_eq!(fadd, n as f64, "FP32 add count must equal N exactly");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_coalesced_vs_strided_sectors_per_request_and_sector_efficiency() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let n: u32 = 1 << 22;
    let stride: u32 = 32;
    let src = g
        .stream
        .alloc_zeros::<f32>(n as usize * stride as usize)
        .unwrap();
    let mut dst = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    g.stream.synchronize().unwrap();
    let mut rp = profiler(
        &g,
        &[names::GLOBAL_LD_SECTORS, names::GLOBAL_LD_REQUESTS],
        RangeMode::User,
        ReplayMode::User,
    );
    let c = rp
        .collect(|rp| {
            rp.push_range("coalesced")?;
            let mut b = g.stream.launch_builder(&k.copy_coalesced);
            b.arg(&src).arg(&mut dst).arg(&n);
            // SAFETY: (const float*, float*, unsigned int) matches; n is within both slices.
            unsafe { b.launch(cfg_1d(n)) }?;
            g.stream.synchronize()?;
            rp.pop_range()?;
            rp.push_range("strided")?;
            let mut b = g.stream.launch_builder(&k.copy_strided);
            b.arg(&src).arg(&mut dst).arg(&n).arg(&stride);
            // SAFETY: as above; (n-1)*stride is within src (n*stride floats).
            unsafe { b.launch(cfg_1d(n)) }?;
            g.stream.synchronize()?;
            rp.pop_range()
        })
        .unwrap();
    rp.finish().unwrap();
    let warps = f64::from(n / 32);
    let opts = DeriveOptions::default();
    println!("copy of N = 2^22 floats, 4-byte loads, stride {stride} floats for the strided copy:");
    let mut spr = Vec::new();
    for (range, expect) in [("coalesced", 4.0), ("strided", 32.0)] {
        let sectors = value(&c, range, names::GLOBAL_LD_SECTORS);
        let requests = value(&c, range, names::GLOBAL_LD_REQUESTS);
        report(&format!("{range}: load requests vs N/32"), requests, warps);
        report(
            &format!("{range}: load sectors vs {expect} x N/32"),
            sectors,
            expect * warps,
        );
        let d = derive(&c.range(range).unwrap().values, &opts);
        let s = d.global_load_sectors_per_request.unwrap();
        let e = d.global_load_sector_efficiency.unwrap();
        report(&format!("{range}: sectors/request vs {expect}"), s, expect);
        report(
            &format!("{range}: sector efficiency vs {}", 4.0 / expect),
            e,
            4.0 / expect,
        );
        spr.push((s, e));
    }
    assert!(
        (3.9..=4.1).contains(&spr[0].0),
        "coalesced: {} sectors/request",
        spr[0].0
    );
    assert!(
        (31.0..=32.1).contains(&spr[1].0),
        "strided: {} sectors/request",
        spr[1].0
    );
    assert!(spr[0].1 > 0.95, "coalesced sector efficiency {}", spr[0].1);
    assert!(spr[1].1 < 0.15, "strided sector efficiency {}", spr[1].1);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_padded_shared_tile_has_under_one_percent_of_the_bank_conflicts() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let blocks: u32 = 4096;
    let n = blocks as usize * 1024;
    let src = g.stream.alloc_zeros::<f32>(n).unwrap();
    let mut dst = g.stream.alloc_zeros::<f32>(n).unwrap();
    g.stream.synchronize().unwrap();
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (32, 32, 1),
        shared_mem_bytes: 0,
    };
    let mut rp = profiler(
        &g,
        &[names::SHARED_LD_BANK_CONFLICTS, names::SHARED_LD_WAVEFRONTS],
        RangeMode::User,
        ReplayMode::User,
    );
    let c = rp
        .collect(|rp| {
            for (range, f) in [
                ("unpadded", &k.tile_columns),
                ("padded", &k.tile_columns_padded),
            ] {
                rp.push_range(range)?;
                let mut b = g.stream.launch_builder(f);
                b.arg(&src).arg(&mut dst);
                // SAFETY: (const float*, float*) matches; blocks*1024 floats in both slices.
                unsafe { b.launch(cfg) }?;
                g.stream.synchronize()?;
                rp.pop_range()?;
            }
            Ok(())
        })
        .unwrap();
    rp.finish().unwrap();
    // Column read of a 32x32 float tile: all 32 lanes in one bank, 32 wavefronts per warp load
    // (31 of them conflicts); with 33 columns every lane has its own bank.
    let warp_loads = f64::from(blocks) * 32.0;
    println!("shared tile 32x32 floats read column-wise, {blocks} blocks of 32x32 threads:");
    let un = value(&c, "unpadded", names::SHARED_LD_BANK_CONFLICTS);
    let pad = value(&c, "padded", names::SHARED_LD_BANK_CONFLICTS);
    report(
        "unpadded: load bank conflicts vs 31 per warp load",
        un,
        31.0 * warp_loads,
    );
    report(
        "unpadded: load wavefronts vs 32 per warp load",
        value(&c, "unpadded", names::SHARED_LD_WAVEFRONTS),
        32.0 * warp_loads,
    );
    report("padded: load bank conflicts vs 0", pad, 0.0);
    report(
        "padded: load wavefronts vs 1 per warp load",
        value(&c, "padded", names::SHARED_LD_WAVEFRONTS),
        warp_loads,
    );
    println!(
        "  padded / unpadded = {:.5} % (must be < 1 %)",
        pad / un * 100.0
    );
    assert!(
        un > 0.5 * 31.0 * warp_loads,
        "unpadded conflicts {un} too few"
    );
    assert!(pad < 0.01 * un, "padded conflicts {pad} not < 1 % of {un}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_user_ranges_get_their_own_counters_and_keep_their_nesting() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let (n1, n2, n3): (u32, u32, u32) = (1 << 20, 1 << 18, 1 << 19);
    let a = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let b = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    g.stream.synchronize().unwrap();
    let config = CounterConfig {
        metrics: vec![names::FADD.into(), names::FMUL.into()],
        nesting_levels: 2,
        ..CounterConfig::default()
    };
    let mut rp = RangeProfiler::new(&g.ctx, config).unwrap();
    println!(
        "{} pass(es); predicted runs with 2 nesting levels: {}",
        rp.passes(),
        rp.runs_per_collection()
    );
    let col = rp
        .collect(|rp| {
            rp.push_range("outer")?;
            g.vadd.launch(&g.stream, &a, &b, &mut c, u64::from(n1))?;
            g.stream.synchronize()?;
            rp.push_range("inner")?;
            g.vadd.launch(&g.stream, &a, &b, &mut c, u64::from(n2))?;
            g.stream.synchronize()?;
            rp.pop_range()?;
            rp.pop_range()?;
            rp.push_range("second")?;
            launch_scale(&k, &g.stream, &a, &mut c, n3);
            g.stream.synchronize()?;
            rp.pop_range()
        })
        .unwrap();
    rp.finish().unwrap();
    println!(
        "runs made: {} (predicted {}); ranges:",
        col.runs,
        col.passes * 2
    );
    for r in &col.ranges {
        println!(
            "  [{}] {:<14} depth {} {:?}",
            r.index,
            r.name,
            r.depth(),
            r.values
        );
    }
    let mut got: Vec<(&str, usize)> = col
        .ranges
        .iter()
        .map(|r| (r.name.as_str(), r.depth()))
        .collect();
    got.sort();
    assert_eq!(got, [("outer", 1), ("outer/inner", 2), ("second", 1)]);
    let inner_adds = value(&col, "outer/inner", names::FADD);
    let outer_adds = value(&col, "outer", names::FADD);
    let second_muls = value(&col, "second", names::FMUL);
    report("outer/inner: FP32 adds vs n2", inner_adds, f64::from(n2));
    report(
        "outer: FP32 adds vs n1 + n2 (inclusive of inner)",
        outer_adds,
        f64::from(n1 + n2),
    );
    report(
        "outer: FP32 multiplies vs 0",
        value(&col, "outer", names::FMUL),
        0.0,
    );
    report("second: FP32 multiplies vs n3", second_muls, f64::from(n3));
    report(
        "second: FP32 adds vs 0",
        value(&col, "second", names::FADD),
        0.0,
    );
    assert_eq!(inner_adds, f64::from(n2));
    assert_eq!(
        outer_adds,
        f64::from(n1 + n2),
        "outer range counts its nested range too (if this is n1 = {n1}, CUPTI reports \
         exclusive ranges: update docs/counters.md)"
    );
    assert_eq!(value(&col, "outer", names::FMUL), 0.0);
    assert_eq!(second_muls, f64::from(n3));
    assert_eq!(value(&col, "second", names::FADD), 0.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_auto_ranges_three_kernels_in_launch_order_with_kernel_replay() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let (n1, n2, n3): (u32, u32, u32) = (1 << 20, 1 << 19, 1 << 18);
    let x = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let y = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let mut z = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    g.stream.synchronize().unwrap();
    let Some(mut rp) = auto_profiler(
        &g,
        &[names::FADD, names::FMUL, names::FFMA],
        ReplayMode::Kernel,
    ) else {
        return;
    };
    let col = rp
        .collect(|_rp| {
            g.vadd.launch(&g.stream, &x, &y, &mut z, u64::from(n1))?;
            launch_scale(&k, &g.stream, &x, &mut z, n2);
            launch_fma(&k, &g.stream, &x, &y, &mut z, n3);
            g.stream.synchronize()?;
            Ok(())
        })
        .unwrap();
    rp.finish().unwrap();
    println!("runs: {} (kernel replay: 1); ranges:", col.runs);
    for r in &col.ranges {
        println!(
            "  [{}] name {:?} kernel {:?} {:?}",
            r.index, r.name, r.kernel, r.values
        );
    }
    assert_eq!(
        col.runs, 1,
        "kernel replay needs one run of the application"
    );
    let names_kernels: Vec<(&str, Option<&str>)> = col
        .ranges
        .iter()
        .map(|r| (r.name.as_str(), r.kernel.as_deref()))
        .collect();
    assert_eq!(
        names_kernels,
        [
            ("0", Some("vector_add")),
            ("1", Some("scale")),
            ("2", Some("fma_kernel"))
        ]
    );
    let expect = [
        ("0", [f64::from(n1), 0.0, 0.0]),
        ("1", [0.0, f64::from(n2), 0.0]),
        ("2", [0.0, 0.0, f64::from(n3)]),
    ];
    for (range, [add, mul, fma]) in expect {
        let got = [
            value(&col, range, names::FADD),
            value(&col, range, names::FMUL),
            value(&col, range, names::FFMA),
        ];
        report(&format!("range {range}: FP32 adds"), got[0], add);
        report(&format!("range {range}: FP32 multiplies"), got[1], mul);
        report(&format!("range {range}: FP32 FMAs"), got[2], fma);
        assert_eq!(got, [add, mul, fma], "range {range}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_pass_count_reported_before_collection_matches_the_runs() {
    let _g = SERIAL.lock();
    let g = gpu();
    let n: u64 = 1 << 20;
    let a = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let b = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    g.stream.synchronize().unwrap();
    for levels in [1u16, 2] {
        let config = CounterConfig {
            metrics: vec!["memory".into()],
            nesting_levels: levels,
            ..CounterConfig::default()
        };
        let mut rp = RangeProfiler::new(&g.ctx, config).unwrap();
        let passes = rp.passes();
        let predicted = rp.runs_per_collection();
        let col = rp
            .collect(|rp| {
                rp.push_range("outer")?;
                rp.push_range("inner")?;
                g.vadd.launch(&g.stream, &a, &b, &mut c, n)?;
                g.stream.synchronize()?;
                rp.pop_range()?;
                rp.pop_range()
            })
            .unwrap();
        rp.finish().unwrap();
        println!(
            "memory preset ({} metrics), {levels} nesting level(s): {passes} pass(es) reported \
             before collection, {predicted} run(s) predicted, {} run(s) made, {} range(s)",
            col.metrics.len(),
            col.runs,
            col.ranges.len()
        );
        assert!(passes >= 1);
        assert_eq!(col.runs, predicted, "runs made vs predicted");
        assert_eq!(col.ranges.len(), usize::from(levels));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_presets_resolve_on_this_gpu_and_unknown_names_get_suggestions() {
    let _g = SERIAL.lock();
    let g = gpu();
    let catalog = ChipCatalog::new(&g.ctx).unwrap();
    println!(
        "chip {}: {} base metrics",
        catalog.chip(),
        catalog.base_metrics().count()
    );
    let props = catalog.properties(names::DRAM_BYTES_READ).unwrap().unwrap();
    println!("  {}: {props:?}", names::DRAM_BYTES_READ);
    assert_eq!(props.dim_unit, "byte");
    for p in PRESETS {
        let r = resolve(&[p.name.to_string()], &catalog);
        match &r {
            Ok(r) => println!(
                "  preset {:<15} {} metric(s); left out (not on this chip): {:?}",
                p.name,
                r.metrics.len(),
                r.dropped.iter().map(|d| &d.name).collect::<Vec<_>>()
            ),
            Err(e) => println!("  preset {:<15} FAILED: {e}", p.name),
        }
        let r = r.unwrap();
        let rp = RangeProfiler::new(
            &g.ctx,
            CounterConfig {
                metrics: vec![p.name.into()],
                ..CounterConfig::default()
            },
        )
        .unwrap();
        println!("    config image built: {} pass(es)", rp.passes());
        assert_eq!(rp.metrics(), r.metrics.as_slice());
        rp.finish().unwrap();
    }
    assert!(!catalog.contains("dram__bytes_reed.sum"));
    let err = resolve(&["dram__bytes_reed.sum".to_string()], &catalog).unwrap_err();
    println!("{err}");
    assert!(err.to_string().contains("dram__bytes_read.sum"), "{err}");
    let err = RangeProfiler::new(
        &g.ctx,
        CounterConfig {
            metrics: vec!["sm__throughput.avg.pct_of_peak_sustaind_elapsed".into()],
            ..CounterConfig::default()
        },
    )
    .err()
    .expect("an unknown metric is rejected before the run");
    println!("{err}");
    assert!(
        err.to_string()
            .contains("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The counters level inside a `Profiler`: the window, the ledger fields, the timeline alongside.

/// Launches attributed to the application's scopes (everything but the counters scope).
pub(crate) fn app_launches(row: &gpu_ledger::ledger::IterationRow) -> u64 {
    row.scopes
        .iter()
        .filter(|s| s.path != gpu_ledger::COUNTERS_SCOPE)
        .map(|s| s.kernels)
        .sum()
}

pub(crate) fn counters_scope_launches(row: &gpu_ledger::ledger::IterationRow) -> u64 {
    row.scopes
        .iter()
        .filter(|s| s.path == gpu_ledger::COUNTERS_SCOPE)
        .map(|s| s.kernels)
        .sum()
}

pub(crate) fn counters_profiler(
    g: &Gpu,
    path: &std::path::Path,
    config: CounterConfig,
    window: CounterWindow,
) -> Profiler {
    let mut setup = CountersSetup::new(&g.ctx, config);
    setup.window = window;
    Profiler::builder()
        .ledger_path(path)
        .settle(std::time::Duration::from_secs(5))
        .counters(setup)
        .start()
        .expect("profiler with counters starts on the GPU host")
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_level_scopes_become_ranges_on_the_window_and_the_timeline_keeps_running() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let (n1, n2): (u32, u32) = (1 << 22, 1 << 21);
    let x = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let y = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let mut z = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.jsonl");
    let config = CounterConfig {
        // Hardware counters with exact analytic values (one 32-byte sector per 8 floats of a
        // coalesced access): SASS-instrumented metrics are refused under user replay while
        // the timeline traces (docs/counters.md).
        metrics: vec![
            names::GLOBAL_LD_SECTORS.into(),
            names::GLOBAL_ST_SECTORS.into(),
            names::GPU_TIME.into(),
        ],
        range_mode: RangeMode::User,
        replay_mode: ReplayMode::User,
        nesting_levels: 2,
        ..CounterConfig::default()
    };
    let window = CounterWindow {
        skip: 2,
        collections: 1,
    };
    let profiler = counters_profiler(&g, &path, config, window);
    const ITERATIONS: u64 = 12;
    for _ in 0..ITERATIONS {
        {
            let _step = Profiler::scope("step");
            {
                let _add = Profiler::scope("add");
                g.vadd
                    .launch(&g.stream, &x, &y, &mut z, u64::from(n1))
                    .unwrap();
            }
            {
                let _scale = Profiler::scope("scale");
                launch_scale(&k, &g.stream, &x, &mut z, n2);
            }
            g.stream.synchronize().unwrap();
        }
        profiler.step();
    }
    profiler.finish().unwrap();

    let ledger = read_ledger(&path).unwrap();
    let header = ledger.header.counters.as_ref().expect("header counters");
    println!(
        "header: collected {} passes {} iterations/collection {} window {:?}",
        header.collected,
        header.passes,
        header.iterations_per_collection,
        ledger.header.config.counter_iterations
    );
    assert!(header.collected, "{:?}", header.reason);
    assert_eq!(ledger.header.config.level, "counters");
    let runs = u64::from(header.iterations_per_collection);
    assert_eq!(
        runs,
        u64::from(header.passes) * 2,
        "two nesting levels, each in passes of its own"
    );
    assert!(ledger.header.config.counter_iterations.is_some());
    assert_eq!(ledger.iterations.len() as u64, ITERATIONS);
    for row in &ledger.iterations {
        let in_window = (2..2 + runs).contains(&row.index);
        println!(
            "row {}: perturbed {} counters {}",
            row.index,
            row.perturbed,
            row.counters.as_ref().map_or("-".to_string(), |c| format!(
                "run {}/{} complete {} ranges {} error {:?}",
                c.run,
                c.runs,
                c.complete,
                c.ranges.len(),
                c.error
            ))
        );
        assert_eq!(row.perturbed, in_window, "row {}", row.index);
        assert_eq!(row.counters.is_some(), in_window, "row {}", row.index);
        // The timeline runs on every row, perturbed or not; CUPTI's own kernels of a pass are
        // in the counters scope, not in the application's.
        assert_eq!(app_launches(row), 2, "row {}", row.index);
        assert_eq!(
            crate::kernel_launches(row),
            2 + counters_scope_launches(row),
            "row {}",
            row.index
        );
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
    }
    let last = &ledger.iterations[(1 + runs) as usize];
    let c = last.counters.as_ref().unwrap();
    assert!(c.complete && c.error.is_none(), "{c:?}");
    assert_eq!(c.first_iteration, 2);
    let range = |name: &str| {
        c.ranges
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no range {name}: {:?}", c.ranges))
    };
    for r in &c.ranges {
        println!("  range {} (depth {}): {:?}", r.name, r.depth, r.values);
    }
    assert_eq!(range("step").depth, 1);
    assert_eq!(range("step/add").depth, 2);
    let (ld, st) = (names::GLOBAL_LD_SECTORS, names::GLOBAL_ST_SECTORS);
    // vector_add loads a and b and stores c; scale loads x and stores y: 4-byte elements.
    let add = (f64::from(n1) * 8.0 / 32.0, f64::from(n1) * 4.0 / 32.0);
    let scale = (f64::from(n2) * 4.0 / 32.0, f64::from(n2) * 4.0 / 32.0);
    for (r, metric, kind, analytic) in [
        ("step/add", ld, "load", add.0),
        ("step/add", st, "store", add.1),
        ("step/scale", ld, "load", scale.0),
        ("step/scale", st, "store", scale.1),
        ("step", ld, "load", add.0 + scale.0),
    ] {
        report(
            &format!("{r}: global {kind} sectors"),
            range(r).values[metric],
            analytic,
        );
    }
    // Loads are exact. Stores are exact up to the Range Profiler's own `WaitNs` kernels, which
    // CUPTI launches inside user-replay ranges (one thread; measured +1 sector per range, +2
    // for `step`, docs/measurements.md): the allowance is the number of them the ledger shows.
    let waitns: u64 = ledger
        .iterations
        .iter()
        .filter(|r| r.perturbed)
        .map(counters_scope_launches)
        .sum();
    println!("  Range Profiler kernels (WaitNs) in the collection: {waitns}");
    assert!(
        waitns > 0,
        "CUPTI's WaitNs kernels are attributed to the counters scope"
    );
    assert_eq!(range("step/add").values[ld], add.0);
    assert_eq!(range("step/scale").values[ld], scale.0);
    assert_eq!(range("step").values[ld], add.0 + scale.0);
    for (name, analytic) in [
        ("step/add", add.1),
        ("step/scale", scale.1),
        ("step", add.1 + scale.1),
    ] {
        let got = range(name).values[st];
        assert!(
            (analytic..=analytic + waitns as f64).contains(&got),
            "{name}: {got} store sectors, analytic {analytic} + at most {waitns} from WaitNs"
        );
    }
    // Each range's time is measured in its own pass (another iteration): not compared.
    let t = |r: &str| range(r).values[names::GPU_TIME];
    assert!(t("step") > 0.0 && t("step/add") > 0.0 && t("step/scale") > 0.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_level_auto_ranges_are_named_from_the_kernel_records_in_launch_order() {
    let _g = SERIAL.lock();
    let g = gpu();
    let k = kernels(&g.ctx);
    let (n1, n2, n3): (u32, u32, u32) = (1 << 20, 1 << 19, 1 << 18);
    let x = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let y = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    let mut z = g.stream.alloc_zeros::<f32>(n1 as usize).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auto.jsonl");
    let config = CounterConfig {
        metrics: vec![names::FADD.into(), names::FMUL.into(), names::FFMA.into()],
        range_mode: RangeMode::Auto,
        replay_mode: ReplayMode::Kernel,
        ..CounterConfig::default()
    };
    let profiler = counters_profiler(
        &g,
        &path,
        config,
        CounterWindow {
            skip: 1,
            collections: 1,
        },
    );
    for _ in 0..4 {
        let _s = Profiler::scope("step");
        g.vadd
            .launch(&g.stream, &x, &y, &mut z, u64::from(n1))
            .unwrap();
        launch_scale(&k, &g.stream, &x, &mut z, n2);
        launch_fma(&k, &g.stream, &x, &y, &mut z, n3);
        g.stream.synchronize().unwrap();
        drop(_s);
        profiler.step();
    }
    let summary = profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let t = &summary.trailer;
    println!(
        "trailer: kernel records {}, late {}, unplaced {}, warnings {:?}",
        t.kernel_records, t.late_records, t.unplaced_records, t.warnings
    );
    for row in &ledger.iterations {
        println!(
            "row {}: perturbed {} complete {} missing {} kernels {:?} scopes {:?} warnings {:?}",
            row.index,
            row.perturbed,
            row.complete,
            row.missing_records,
            row.kernels
                .iter()
                .map(|k| (k.name.as_str(), k.count))
                .collect::<Vec<_>>(),
            row.scopes
                .iter()
                .map(|s| (s.path.as_str(), s.kernels))
                .collect::<Vec<_>>(),
            row.warnings
        );
    }
    // A release that lacks auto ranges on this driver, or evaluates these SASS-instrumented
    // metrics as 0 while the timeline traces, is refused before the run: the timeline runs and
    // the header says why.
    let lib = gpu_ledger::internals::cupti().unwrap();
    let lack = auto_ranges_lack().map(|l| ("auto ranges", l)).or_else(|| {
        lib.release
            .sass_metrics(gpu_ledger::internals::Tracing::SetUpFirst)
            .err()
            .map(|l| ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", l))
    });
    if let Some((feature, l)) = lack {
        let h = ledger.header.counters.as_ref().unwrap();
        let reason = h.reason.clone().unwrap_or_default();
        println!("refused as expected: {reason}");
        assert!(!h.collected, "{h:?}");
        assert_eq!(
            h.unavailable,
            Some(Unavailable::UnsupportedRelease),
            "{h:?}"
        );
        assert!(
            reason.contains(&format!("CUPTI {}", lib.release.name))
                && reason.contains(feature)
                && reason.contains(l.what)
                && reason.contains(l.fix),
            "{reason}"
        );
        assert!(
            ledger
                .header
                .warnings
                .iter()
                .any(|w| w.starts_with("hardware counters are not collected")),
            "{:?}",
            ledger.header.warnings
        );
        for row in &ledger.iterations {
            assert_eq!(crate::kernel_launches(row), 3, "row {}", row.index);
            assert!(
                !row.perturbed && row.counters.is_none(),
                "row {}",
                row.index
            );
        }
        return;
    }
    for row in &ledger.iterations {
        // Kernel replay must not show up as extra launches in the timeline.
        assert_eq!(crate::kernel_launches(row), 3, "row {}", row.index);
        assert_eq!(row.perturbed, row.index == 1, "row {}", row.index);
    }
    let c = ledger.iterations[1].counters.as_ref().unwrap();
    assert!(c.complete && c.error.is_none(), "{c:?}");
    let got: Vec<(&str, Option<&str>, Option<u64>)> = c
        .ranges
        .iter()
        .map(|r| (r.name.as_str(), r.kernel.as_deref(), r.launch_index))
        .collect();
    println!("ranges: {got:?}");
    for r in &c.ranges {
        println!("  range {} values {:?}", r.name, r.values);
    }
    assert_eq!(
        got,
        [
            ("0", Some("vector_add"), Some(0)),
            ("1", Some("scale"), Some(1)),
            ("2", Some("fma_kernel"), Some(2))
        ]
    );
    assert_eq!(c.ranges[0].values[names::FADD], f64::from(n1));
    assert_eq!(c.ranges[1].values[names::FMUL], f64::from(n2));
    assert_eq!(c.ranges[2].values[names::FFMA], f64::from(n3));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_level_rejects_an_unknown_metric_before_the_run_with_suggestions() {
    let _g = SERIAL.lock();
    let g = gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.jsonl");
    let config = CounterConfig {
        metrics: vec!["dram__bytes_reed.sum".into()],
        ..CounterConfig::default()
    };
    let err = Profiler::builder()
        .ledger_path(&path)
        .counters(CountersSetup::new(&g.ctx, config))
        .fail_open(true)
        .start()
        .expect_err("a misspelt metric is an error even with fail_open");
    let msg = err.to_string();
    println!("{msg}");
    assert!(msg.contains("dram__bytes_reed.sum"), "{msg}");
    assert!(msg.contains("dram__bytes_read.sum"), "{msg}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_level_counters_held_by_another_process_leave_the_timeline_running_and_say_why() {
    use std::io::BufRead;
    let _g = SERIAL.lock();
    // Another process holds a Range Profiler collection open on the GPU.
    let mut other = std::process::Command::new(crate::example_binary("counters_probe"))
        .arg(names::GPU_TIME)
        .env("PROBE_HOLD_MS", "20000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
    let held = lines.by_ref().map_while(|l| l.ok()).any(|l| l == "holding");
    assert!(held, "the other process did not reach its collection");
    // The profiled application is a fresh process, as in the field: the demo, whose counters
    // window covers iterations 5 and 6 (this test process has set up Range Profilers before,
    // and CUPTI 12.9 checks for another process's collection when a process first sets one up).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.jsonl");
    let demo = std::process::Command::new(crate::example_binary("demo"))
        .arg("10")
        .arg(&path)
        .output()
        .unwrap();
    let _ = other.kill();
    let _ = other.wait();
    let out = String::from_utf8_lossy(&demo.stdout);
    println!("{out}{}", String::from_utf8_lossy(&demo.stderr));
    assert!(demo.status.success(), "the demo runs without its counters");
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.iterations.len(), 10);
    for row in &ledger.iterations {
        assert!(app_launches(row) > 0, "row {}", row.index);
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
    }
    let header = ledger.header.counters.as_ref().unwrap();
    let row_errors: Vec<String> = ledger
        .iterations
        .iter()
        .filter_map(|r| r.counters.as_ref().and_then(|c| c.error.clone()))
        .collect();
    println!(
        "header collected {} reason {:?} ({:?}); row errors {row_errors:?}",
        header.collected, header.reason, header.unavailable
    );
    // A release that does not refuse the collection says so in the header instead.
    let lib = gpu_ledger::internals::cupti().unwrap();
    let driver = gpu_ledger::internals::driver_version().unwrap() / 1000;
    if let Err(l) = lib.release.busy_detection(driver) {
        let w = &ledger.header.warnings;
        println!("this release does not refuse it; header warnings {w:?}");
        assert!(
            w.iter()
                .any(|w| w.contains(&format!("CUPTI {}", lib.release.name)) && w.contains(l.what)),
            "{w:?}"
        );
        assert!(
            ledger
                .header
                .environment
                .cupti_features
                .iter()
                .any(|f| f.starts_with("counters.busy_detection off")),
            "{:?}",
            ledger.header.environment.cupti_features
        );
        return;
    }
    // Either the set-up already saw the counters taken (the header says why) or opening the
    // collection did (the window's row says why); no values are reported.
    let busy = |t: &str| t.contains("HARDWARE_BUSY") || t.contains("another process");
    assert!(
        (!header.collected && header.reason.as_deref().is_some_and(busy))
            || row_errors.iter().any(|e| busy(e)),
        "the ledger must say why there are no counters"
    );
    assert!(ledger
        .iterations
        .iter()
        .all(|r| r.counters.as_ref().is_none_or(|c| !c.complete)));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn counters_level_every_row_keeps_its_records_to_the_last_iteration() {
    // The demo's loop: uploads, ten launches, a download and a synchronize per iteration, with a
    // counters window in the middle. Every row, the last included, must hold all of its work.
    let _g = SERIAL.lock();
    let g = gpu();
    let n: u64 = 1 << 22;
    let a_host = vec![1.0f32; n as usize];
    let mut c_host = vec![0.0f32; n as usize];
    let mut a = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let mut b = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    let mut c = g.stream.alloc_zeros::<f32>(n as usize).unwrap();
    g.stream.synchronize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo-like.jsonl");
    let config = CounterConfig {
        metrics: vec![names::DRAM_BYTES_READ.into(), names::GPU_TIME.into()],
        nesting_levels: 2,
        ..CounterConfig::default()
    };
    let profiler = counters_profiler(
        &g,
        &path,
        config,
        CounterWindow {
            skip: 3,
            collections: 1,
        },
    );
    const ITERATIONS: u64 = 12;
    for _ in 0..ITERATIONS {
        {
            let _step = Profiler::scope_on("step", &g.stream);
            {
                let _s = Profiler::scope("upload");
                g.stream.memcpy_htod(&a_host, &mut a).unwrap();
                g.stream.memcpy_htod(&a_host, &mut b).unwrap();
            }
            {
                let _s = Profiler::scope("compute");
                for _ in 0..10 {
                    g.vadd.launch(&g.stream, &a, &b, &mut c, n).unwrap();
                }
            }
            {
                let _s = Profiler::scope("download");
                g.stream.memcpy_dtoh(&c, &mut c_host).unwrap();
            }
            g.stream.synchronize().unwrap();
        }
        profiler.step();
    }
    let summary = profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    println!("trailer: {:?}", summary.trailer);
    for row in &ledger.iterations {
        println!(
            "row {}: complete {} perturbed {} kernels {:?} counters scope {} copies {} missing {} {:?}",
            row.index,
            row.complete,
            row.perturbed,
            row.kernels
                .iter()
                .map(|k| (k.name.as_str(), k.count))
                .collect::<Vec<_>>(),
            counters_scope_launches(row),
            row.memcpy.iter().map(|m| m.count).sum::<u64>(),
            row.missing_records,
            row.warnings
        );
    }
    assert_eq!(ledger.iterations.len() as u64, ITERATIONS);
    for row in &ledger.iterations {
        assert!(row.complete, "row {}: {:?}", row.index, row.warnings);
        let compute = row
            .scopes
            .iter()
            .find(|s| s.path == "step/compute")
            .unwrap();
        assert_eq!(compute.kernels, 10, "row {}", row.index);
        assert_eq!(
            row.memcpy.iter().map(|m| m.count).sum::<u64>(),
            3,
            "row {}",
            row.index
        );
    }
    assert_eq!(
        summary.trailer.kernel_records,
        10 * ITERATIONS
            + ledger
                .iterations
                .iter()
                .map(counters_scope_launches)
                .sum::<u64>()
    );
}
