//! The thin layer over the CUDA driver that the profiler itself uses: the timing events scopes
//! record on their streams. Its unsafe code stays here, behind safe functions.

pub(crate) mod events;
