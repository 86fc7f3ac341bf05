//! Puts the L2 in a known state before a counted range: every line the previous work left in it
//! (dirty or clean) is evicted, the way Nsight Compute's `--cache-control all` starts each
//! kernel.
//!
//! CUPTI's Range Profiler has no cache control, so the flush reads a buffer several times the
//! L2's size after the context has finished its work. The reads evict the previous work's lines,
//! writing the dirty ones back to DRAM while the flush runs (outside the range), and leave only
//! clean lines of the buffer, which the counted work evicts without writing anything. The kernel
//! is named [`KERNEL`] so that the collector charges it to the counters scope.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaStream};

use super::ptx::{DeviceBuffer, PtxModule};
use crate::error::{Error, Result};

/// The flush kernel's name, as its kernel records carry it.
pub(crate) const KERNEL: &str = "gpu_ledger_l2_flush";

/// How many times the L2's size the flush reads: the H100 and H200 L2 is two partitions that can
/// each hold a copy of a line, so one L2's worth of reads does not evict every line.
const L2_MULTIPLE: usize = 4;

/// The flush kernel as PTX, compiled by the driver for whatever GPU runs it. It reads `words`
/// 16-byte words of `buf` through L2 only (`.cg`), and stores their XOR to `out` only if it
/// equals a constant, so that the loads cannot be removed.
const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry gpu_ledger_l2_flush(
    .param .u64 p_buf,
    .param .u64 p_words,
    .param .u64 p_out
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_words];
    ld.param.u64 %rd3, [p_out];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r4, %r2;
    mov.u32 %r5, 0;
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra $L_done;
$L_loop:
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.cg.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];
    xor.b32 %r5, %r5, %r6;
    xor.b32 %r5, %r5, %r7;
    xor.b32 %r5, %r5, %r8;
    xor.b32 %r5, %r5, %r9;
    add.u64 %rd4, %rd4, %rd6;
    setp.lt.u64 %p2, %rd4, %rd2;
    @%p2 bra $L_loop;
$L_done:
    setp.ne.u32 %p1, %r5, 12345;
    @%p1 bra $L_end;
    st.global.u32 [%rd3], %r5;
$L_end:
    ret;
}
"#;

/// Threads per block of the flush.
const THREADS: u32 = 256;
/// Blocks per SM of the flush.
const BLOCKS_PER_SM: u32 = 8;

fn driver(what: &str, e: result::DriverError) -> Error {
    Error::Config(format!("counters: the L2 flush: {what} failed: {e}"))
}

/// The flush's module, buffer and stream in one context, released on drop.
pub(crate) struct L2Flush {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernel: sys::CUfunction,
    grid: u32,
    bytes: usize,
    // Dropped after `kernel`, which is valid only while its module lives.
    buf: DeviceBuffer,
    _module: PtxModule,
}

// SAFETY: the function handle is a plain driver handle, valid in any thread once its context is
// bound; every use binds `ctx` first.
unsafe impl Send for L2Flush {}

impl L2Flush {
    /// Loads the kernel and allocates the buffer (`L2_MULTIPLE` × the device's L2), left as
    /// allocated: the flush only folds what it reads into a value it almost never stores (into
    /// the buffer's own last 16 bytes).
    ///
    /// # Errors
    /// A driver failure (no memory for the buffer, a PTX the driver cannot load), with the cause.
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let attr = |a| {
            ctx.attribute(a)
                .map_err(|e| driver("reading the device", e))
        };
        let l2 = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        // A 16-byte multiple, at least 1 MiB when the device reports no L2.
        let bytes = (usize::try_from(l2).unwrap_or(0).max(1 << 18) * L2_MULTIPLE) & !15;
        let stream = ctx.new_stream().map_err(|e| driver("making a stream", e))?;
        let src = CString::new(PTX).map_err(|e| Error::Config(e.to_string()))?;
        let module = PtxModule::load(ctx, &src).map_err(|e| driver("loading its PTX", e))?;
        let name = CString::new(KERNEL).map_err(|e| Error::Config(e.to_string()))?;
        let kernel = module
            .function(&name)
            .map_err(|e| driver("finding its kernel", e))?;
        let buf = DeviceBuffer::alloc(ctx, bytes + 16)
            .map_err(|e| driver(&format!("allocating {} MiB", bytes >> 20), e))?;
        Ok(L2Flush {
            ctx: ctx.clone(),
            stream,
            kernel,
            grid: u32::try_from(sms).unwrap_or(1).max(1) * BLOCKS_PER_SM,
            bytes,
            buf,
            _module: module,
        })
    }

    /// Waits for the context's work, runs the flush and waits for it: when this returns, the L2
    /// holds none of the earlier work's lines.
    ///
    /// # Errors
    /// A driver failure (an earlier kernel's fault surfaces here), with the cause.
    pub(crate) fn run(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver("binding the context", e))?;
        self.ctx
            .synchronize()
            .map_err(|e| driver("waiting for the context's work", e))?;
        let mut buf = self.buf.ptr();
        let mut words = (self.bytes / 16) as u64;
        // The last 16 bytes, past what is read, are the store target.
        let mut out = buf + self.bytes as u64;
        let mut params = [
            &mut buf as *mut u64 as *mut c_void,
            &mut words as *mut u64 as *mut c_void,
            &mut out as *mut u64 as *mut c_void,
        ];
        // SAFETY: the kernel takes three u64s, passed by pointer as cuLaunchKernel reads them
        // (copied at the call); it reads `words` 16-byte words of `buf`, which holds them, and
        // may store 4 bytes at `out`, inside the allocation; the stream belongs to the context.
        unsafe {
            result::launch_kernel(
                self.kernel,
                (self.grid, 1, 1),
                (THREADS, 1, 1),
                0,
                self.stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| driver("a launch", e))?;
        self.stream
            .synchronize()
            .map_err(|e| driver("waiting for it", e))
    }
}

impl Drop for L2Flush {
    fn drop(&mut self) {
        // Before the buffer and the module go: no flush may still read them.
        if self.ctx.bind_to_thread().is_ok() {
            let _ = self.stream.synchronize();
        }
    }
}
