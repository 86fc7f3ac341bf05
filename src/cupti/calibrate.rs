//! What CUPTI's tracing adds to the device's time, measured at start on the GPU the run uses.
//!
//! Kernel tracing lengthens kernels and leaves gaps between consecutive ones, on the GPU, where
//! no host-side count can see it. The calibration runs the same batches of back-to-back kernels
//! with the timeline's activity kinds on and off, alternated over rounds, each batch queued
//! behind a spin so that the GPU runs it without waiting for the host, and times each batch by
//! CUDA events: a batch of one-block empty kernels (the cost per kernel), two of streaming
//! kernels with a large grid, a copy (each thread loads and stores one float) and an add (each
//! thread loads two floats and stores one), whose per-block costs are averaged (the cost per
//! block: measured on the H200, blocks that do no memory work cost nothing, and streaming blocks
//! 55 ps with the add's mix to 72 ps with the copy's, so the mean errs by about an eighth on
//! either), and one of spins across every SM (whether the cost grows with the kernel's length).
//! Its kernels are named `gpu_ledger_calibrate_*`, and the collector counts their records apart
//! instead of attributing them.

use std::ffi::{c_void, CString};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream};

use super::LoadedCupti;
use crate::driver::ptx::{DeviceBuffer, PtxModule};
use crate::error::{Error, Result};
use crate::ledger::schema::TracingCalibration;

/// The prefix of the calibration's kernel names.
pub(crate) const KERNEL_PREFIX: &str = "gpu_ledger_calibrate_";

/// The calibration's kernels as PTX, compiled by the driver for whatever GPU runs them (the
/// default build has no NVRTC). `spin` waits `cycles` SM clock cycles; `empty` returns.
const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry gpu_ledger_calibrate_spin(
    .param .u64 gpu_ledger_calibrate_spin_cycles
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [gpu_ledger_calibrate_spin_cycles];
    mov.u64 %rd2, %clock64;
$L_spin:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra $L_spin;
    ret;
}

.visible .entry gpu_ledger_calibrate_empty()
{
    ret;
}

.visible .entry gpu_ledger_calibrate_copy(
    .param .u64 gpu_ledger_calibrate_copy_in,
    .param .u64 gpu_ledger_calibrate_copy_out
)
{
    .reg .b32 %r<5>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [gpu_ledger_calibrate_copy_in];
    ld.param.u64 %rd2, [gpu_ledger_calibrate_copy_out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    st.global.f32 [%rd5], %f1;
    ret;
}

.visible .entry gpu_ledger_calibrate_add(
    .param .u64 gpu_ledger_calibrate_add_a,
    .param .u64 gpu_ledger_calibrate_add_b
)
{
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [gpu_ledger_calibrate_add_a];
    ld.param.u64 %rd2, [gpu_ledger_calibrate_add_b];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.u32 %rd3, %r4, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    ld.global.f32 %f2, [%rd5];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd4], %f3;
    ret;
}
"#;

/// Rounds, each timing every batch with tracing on and with it off.
const ROUNDS: u32 = 5;
/// Kernels per timed batch.
const BATCH: u32 = 64;
/// Blocks of the large copy and add grids.
const LARGE_GRID: u32 = 32_768;
/// Threads per block of the empty kernels.
const THREADS: u32 = 128;
/// Threads per block of the copy and add kernels: each copies or adds one float.
const COPY_THREADS: u32 = 256;
/// Bytes of each of the two buffers the copy and the add stream through.
const COPY_BYTES: usize = LARGE_GRID as usize * COPY_THREADS as usize * 4;
/// Length of each kernel of the spin batch, µs.
const SPIN_US: f64 = 20.0;
/// Length of the spin each round's batches queue behind, µs: longer than launching them.
const HEAD_US: f64 = 3_000.0;

/// What one pass over the batches measured: ns per kernel, small, copy, add and spin batches.
#[derive(Debug, Clone, Copy)]
struct Pass {
    small: f64,
    copy: f64,
    add: f64,
    spin: f64,
}

/// The module, its four kernels and the streaming kernels' buffers, released on drop (the
/// calibration synchronizes its stream before it returns).
struct Kernels {
    spin: sys::CUfunction,
    empty: sys::CUfunction,
    copy: sys::CUfunction,
    add: sys::CUfunction,
    // Dropped after the functions, which are valid only while their module lives.
    buffers: [DeviceBuffer; 2],
    _module: PtxModule,
}

fn driver(what: &str, e: result::DriverError) -> Error {
    Error::Config(format!("tracing calibration: {what} failed: {e}"))
}

impl Kernels {
    fn load(ctx: &Arc<CudaContext>) -> Result<Self> {
        let src = CString::new(PTX).map_err(|e| Error::Config(e.to_string()))?;
        let module = PtxModule::load(ctx, &src).map_err(|e| driver("loading its PTX", e))?;
        let get = |name: &str| {
            let name = CString::new(format!("{KERNEL_PREFIX}{name}"))
                .map_err(|e| Error::Config(e.to_string()))?;
            module
                .function(&name)
                .map_err(|e| driver("finding its kernel", e))
        };
        let buffer = || {
            DeviceBuffer::alloc(ctx, COPY_BYTES).map_err(|e| driver("allocating its buffers", e))
        };
        Ok(Kernels {
            spin: get("spin")?,
            empty: get("empty")?,
            copy: get("copy")?,
            add: get("add")?,
            buffers: [buffer()?, buffer()?],
            _module: module,
        })
    }

    fn launch_empty(&self, stream: &CudaStream, grid: u32) -> Result<()> {
        // SAFETY: `empty` takes no parameters; the stream belongs to the module's context.
        unsafe {
            result::launch_kernel(
                self.empty,
                (grid, 1, 1),
                (THREADS, 1, 1),
                0,
                stream.cu_stream(),
                &mut [],
            )
        }
        .map_err(|e| driver("a launch", e))
    }

    /// One launch of the copy (`out[i] = in[i]`) or, with `add`, of the add (`a[i] += b[i]`)
    /// over the two buffers.
    fn launch_streaming(&self, stream: &CudaStream, add: bool) -> Result<()> {
        let [mut first, mut second] = [self.buffers[0].ptr(), self.buffers[1].ptr()];
        let mut params = [
            &mut first as *mut u64 as *mut c_void,
            &mut second as *mut u64 as *mut c_void,
        ];
        // SAFETY: `copy` and `add` take two pointers, passed by pointer as cuLaunchKernel reads
        // them (copied at the call); each of the LARGE_GRID × COPY_THREADS threads reads and
        // writes one float at its own index inside the two buffers, which hold that many; the
        // stream belongs to the module's context.
        unsafe {
            result::launch_kernel(
                if add { self.add } else { self.copy },
                (LARGE_GRID, 1, 1),
                (COPY_THREADS, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| driver("a launch", e))
    }

    fn launch_spin(&self, stream: &CudaStream, grid: u32, cycles: u64) -> Result<()> {
        let mut cycles = cycles;
        let mut params = [&mut cycles as *mut u64 as *mut c_void];
        // SAFETY: `spin` takes one u64, passed by pointer as cuLaunchKernel reads parameters
        // (copied at the call); the stream belongs to the module's context.
        unsafe {
            result::launch_kernel(
                self.spin,
                (grid, 1, 1),
                (32, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| driver("a launch", e))
    }
}

/// Measures what the timeline's activity kinds add per kernel on device 0's primary context,
/// with the kinds switched by `set_kinds` (on, then back off at the end: the caller sets them as
/// the run starts). Returns the calibration and the context, which the caller keeps for the
/// run so that the primary context is not destroyed and created again under the application.
///
/// # Errors
/// A driver or CUPTI failure, or figures that are not finite.
pub(crate) fn calibrate(
    lib: &LoadedCupti,
    set_kinds: impl Fn(&LoadedCupti, bool) -> Result<()>,
) -> Result<(TracingCalibration, Arc<CudaContext>)> {
    let t0 = Instant::now();
    let ctx = CudaContext::new(0).map_err(|e| driver("opening device 0", e))?;
    let stream = ctx.new_stream().map_err(|e| driver("making a stream", e))?;
    let kernels = Kernels::load(&ctx)?;
    let (sms, khz) = sms_and_clock(&ctx)?;
    let event = || {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| driver("making an event", e))
    };
    let events: Vec<CudaEvent> = (0..5).map(|_| event()).collect::<Result<_>>()?;
    let batches = Batches {
        stream: &stream,
        kernels: &kernels,
        events: &events,
        sms,
        khz,
    };
    let pass = |traced: bool| -> Result<Pass> {
        set_kinds(lib, traced)?;
        batches.time()
    };
    // A warm-up pass each way: the module's first launches and CUPTI's first records.
    pass(false)?;
    pass(true)?;
    let mut rounds = Rounds::default();
    for round in 0..ROUNDS {
        let (on, off) = if round % 2 == 0 {
            let off = pass(false)?;
            (pass(true)?, off)
        } else {
            let on = pass(true)?;
            (on, pass(false)?)
        };
        rounds.add(on, off);
    }
    set_kinds(lib, false)?;
    let mut calibration = rounds.calibration(sms)?;
    drop(kernels);
    calibration.took_ns = t0.elapsed().as_nanos() as u64;
    Ok((calibration, ctx))
}

/// The device's SM count and SM clock (kHz), by which the spin batches are sized.
fn sms_and_clock(ctx: &CudaContext) -> Result<(u32, f64)> {
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| driver("reading the SM count", e))?
        .max(1) as u32;
    let khz = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
        .map_err(|e| driver("reading the SM clock", e))?
        .max(1) as f64;
    Ok((sms, khz))
}

/// What one pass over the batches runs on: the stream, the kernels, five events around the four
/// batches, and the SM count and clock.
struct Batches<'a> {
    stream: &'a CudaStream,
    kernels: &'a Kernels,
    events: &'a [CudaEvent],
    sms: u32,
    khz: f64,
}

impl Batches<'_> {
    /// SM clock cycles in `us` microseconds.
    fn cycles(&self, us: f64) -> u64 {
        (us * self.khz / 1_000.0) as u64
    }

    /// Queues the four batches behind a spin, each between two events, and times them: ns per
    /// kernel of each batch.
    fn time(&self) -> Result<Pass> {
        let (stream, kernels) = (self.stream, self.kernels);
        kernels.launch_spin(stream, 1, self.cycles(HEAD_US))?;
        let record = |i: usize| {
            self.events[i]
                .record(stream)
                .map_err(|e| driver("an event", e))
        };
        record(0)?;
        for _ in 0..BATCH {
            kernels.launch_empty(stream, 1)?;
        }
        record(1)?;
        for _ in 0..BATCH {
            kernels.launch_streaming(stream, false)?;
        }
        record(2)?;
        for _ in 0..BATCH {
            kernels.launch_streaming(stream, true)?;
        }
        record(3)?;
        for _ in 0..BATCH {
            kernels.launch_spin(stream, self.sms, self.cycles(SPIN_US))?;
        }
        record(4)?;
        stream
            .synchronize()
            .map_err(|e| driver("synchronizing", e))?;
        let ns = |a: usize, b: usize| -> Result<f64> {
            let ms = self.events[a]
                .elapsed_ms(&self.events[b])
                .map_err(|e| driver("reading an event", e))?;
            Ok(f64::from(ms) * 1e6 / f64::from(BATCH))
        };
        Ok(Pass {
            small: ns(0, 1)?,
            copy: ns(1, 2)?,
            add: ns(2, 3)?,
            spin: ns(3, 4)?,
        })
    }
}

/// What each round measured: the time tracing added per kernel, per block of the copy and the
/// add grids, and per spin kernel, and the spin kernels' untraced time.
#[derive(Default)]
struct Rounds {
    per_kernel: Vec<f64>,
    per_block_copy: Vec<f64>,
    per_block_add: Vec<f64>,
    spin_added: Vec<f64>,
    spin: Vec<f64>,
}

impl Rounds {
    /// Adds the round whose traced pass measured `on` and untraced pass `off`.
    fn add(&mut self, on: Pass, off: Pass) {
        let small = on.small - off.small;
        self.per_kernel.push(small);
        let block = |on: f64, off: f64| (on - off - small) / f64::from(LARGE_GRID - 1);
        self.per_block_copy.push(block(on.copy, off.copy));
        self.per_block_add.push(block(on.add, off.add));
        self.spin_added.push(on.spin - off.spin);
        self.spin.push(off.spin);
    }

    /// The rounds' medians and ranges as the calibration of a device with `sms` SMs, its
    /// `took_ns` left for the caller.
    ///
    /// # Errors
    /// Figures that are not finite.
    fn calibration(mut self, sms: u32) -> Result<TracingCalibration> {
        let stats = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], [v[0], v[v.len() - 1]])
        };
        let (k, k_range) = stats(&mut self.per_kernel);
        let (b_copy, copy_range) = stats(&mut self.per_block_copy);
        let (b_add, add_range) = stats(&mut self.per_block_add);
        let b = (b_copy + b_add) / 2.0;
        let b_range = [
            copy_range[0].min(add_range[0]),
            copy_range[1].max(add_range[1]),
        ];
        let (spin_added, _) = stats(&mut self.spin_added);
        let (spin, _) = stats(&mut self.spin);
        if !(k.is_finite() && b_copy.is_finite() && b_add.is_finite()) {
            return Err(Error::Config(
                "tracing calibration: the timed batches gave no finite figure".into(),
            ));
        }
        Ok(TracingCalibration {
            device_id: 0,
            per_kernel_ns: k,
            per_block_ns: b,
            per_kernel_range_ns: k_range,
            per_block_range_ns: b_range,
            per_block_copy_ns: Some(b_copy),
            per_block_add_ns: Some(b_add),
            rounds: ROUNDS,
            kernels_per_batch: BATCH,
            grids: [1, u64::from(LARGE_GRID)],
            spin_ns: spin,
            spin_added_ns: spin_added,
            spin_grid: u64::from(sms),
            took_ns: 0,
        })
    }
}
