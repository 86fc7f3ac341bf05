//! Parameter structs of CUPTI's profiling APIs, in storage a newer CUPTI can read past.

/// A parameter struct followed by zeroed bytes. A later CUPTI release appends fields to its
/// parameter structs, and CUPTI 13.4 reads some of them past the `structSize` an older caller
/// passes (a heap corruption in `cuptiProfilerHostGetBaseMetrics` was seen with 13.0-sized
/// structs): zeros there are the fields' defaults.
#[repr(C)]
pub(crate) struct Padded<T> {
    params: T,
    tail: [u64; 32],
}

impl<T> Padded<T> {
    /// All bytes zero, the struct's padding and the tail included.
    pub(crate) fn zeroed() -> Self {
        // SAFETY: every CUPTI parameter struct is plain C data (integers, pointers, enums whose
        // zero value is valid), for which all-zero bytes are a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// The struct, as CUPTI's functions take it.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        &mut self.params
    }
}

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.params
    }
}

impl<T> std::ops::DerefMut for Padded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.params
    }
}
