//! The profiler's own kernels (the tracing calibration, the L2 flush): PTX that the driver
//! compiles for whatever GPU runs it, since the default build has no NVRTC, and the device memory
//! they use, each released on drop in the context it belongs to.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use cudarc::driver::{result, result::DriverError, sys, CudaContext};

/// A module loaded from PTX text, unloaded on drop.
pub(crate) struct PtxModule {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
}

// SAFETY: the module handle is a plain driver handle, valid in any thread once its context is
// bound; every use binds `ctx` first.
unsafe impl Send for PtxModule {}

impl PtxModule {
    /// Loads `ptx` in `ctx`.
    ///
    /// # Errors
    /// The driver's, when it cannot bind the context or compile the PTX.
    pub(crate) fn load(ctx: &Arc<CudaContext>, ptx: &CStr) -> Result<Self, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: `ptx` is a NUL-terminated text that outlives the call; the context is current
        // on this thread.
        let module = unsafe { result::module::load_data(ptx.as_ptr() as *const c_void) }?;
        Ok(PtxModule {
            ctx: ctx.clone(),
            module,
        })
    }

    /// The kernel `name`, valid while the module lives.
    ///
    /// # Errors
    /// The driver's, when the module holds no such kernel.
    pub(crate) fn function(&self, name: &CStr) -> Result<sys::CUfunction, DriverError> {
        // SAFETY: the module is loaded and unloaded only when `self` drops.
        unsafe { result::module::get_function(self.module, name.to_owned()) }
    }
}

impl Drop for PtxModule {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the module belongs to this context; its owners wait for their kernels
            // before dropping it.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

/// Device memory left as allocated (a memset would be a record in the application's row while a
/// timeline traces), freed on drop.
pub(crate) struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl DeviceBuffer {
    /// `bytes` bytes in `ctx`.
    ///
    /// # Errors
    /// The driver's, when it cannot bind the context or has not the memory.
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, DriverError> {
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation in the current context, freed when `self` drops; its
        // contents are never interpreted as anything but bits.
        let ptr = unsafe { result::malloc_sync(bytes) }?;
        Ok(DeviceBuffer {
            ctx: ctx.clone(),
            ptr,
        })
    }

    /// Its device address.
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the allocation belongs to this context; its owners wait for the kernels
            // that use it before dropping it.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}
