//! The thin layer over the CUDA driver that the profiler itself uses: whether there is a driver
//! and what GPUs it shows, and the timing events scopes record on their streams. Its unsafe code
//! stays here, behind safe functions.

pub(crate) mod device;
pub(crate) mod events;
pub(crate) mod flush;
pub(crate) mod ptx;
