//! Parameter structs of CUPTI's profiling APIs, in storage a newer CUPTI can read past.
//!
//! # `structSize`
//! Every parameter struct starts with `structSize`, which CUPTI reads to learn which fields the
//! caller knows. The headers set it with `<Type>_STRUCT_SIZE`, defined as
//! `CUPTI_PROFILER_STRUCT_SIZE(type, lastfield) = offsetof(type, lastfield) + sizeof(lastfield)`,
//! i.e. the size *without* the trailing padding. bindgen does not turn those function-like macros
//! into constants, so `struct_size!` computes the same value with [`std::mem::offset_of!`] and
//! the size of the named last field; the unit tests below pin the values for the structs used
//! here against the header layout.

/// `CUPTI_PROFILER_STRUCT_SIZE(Type, lastField)`: offset of the last field plus its size.
macro_rules! struct_size {
    ($t:ty, $last:ident) => {
        ::std::mem::offset_of!($t, $last) + $crate::cupti::params::field_size(|p: &$t| &p.$last)
    };
}

/// A zeroed parameter struct with `structSize` set as the header's `_STRUCT_SIZE` macro does,
/// in zeroed storage longer than the struct ([`Padded`]).
macro_rules! params {
    ($t:ident, $last:ident) => {{
        let mut p = Padded::<sys::$t>::zeroed();
        p.structSize = struct_size!(sys::$t, $last);
        p
    }};
}

/// Size of the field a projection closure returns (used by `struct_size!`).
pub(crate) fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// A parameter struct followed by zeroed bytes. A later CUPTI release appends fields to its
/// parameter structs, and CUPTI 13.4 reads some of them past the `structSize` an older caller
/// passes (13.0-sized structs corrupted the heap in `cuptiProfilerHostGetBaseMetrics`:
/// docs/measurements.md): zeros there are the fields' defaults.
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

#[cfg(test)]
mod tests {
    use cupti_sys as sys;

    #[test]
    fn struct_sizes_match_the_header_macros() {
        // Hand-computed from the header layouts (x86_64: size_t and pointers 8 bytes, enums 4).
        assert_eq!(
            struct_size!(sys::CUpti_Profiler_Initialize_Params, pPriv),
            16
        );
        assert_eq!(
            struct_size!(sys::CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject),
            32
        );
        // ... configSize 24, pConfig 32, counterDataImageSize 40, pCounterDataImage 48,
        // range 56, replayMode 60, maxRangesPerPass 64, numNestingLevels 72, minNestingLevel 74,
        // passIndex 80, targetNestingLevel 88 (+2): 90, not sizeof (96).
        assert_eq!(
            struct_size!(
                sys::CUpti_RangeProfiler_SetConfig_Params,
                targetNestingLevel
            ),
            90
        );
        assert_eq!(
            std::mem::size_of::<sys::CUpti_RangeProfiler_SetConfig_Params>(),
            96
        );
        // ... passIndex 24, targetNestingLevel 32, isAllPassSubmitted 40 (+1).
        assert_eq!(
            struct_size!(sys::CUpti_RangeProfiler_Stop_Params, isAllPassSubmitted),
            41
        );
        // ... maxNumOfRanges 40, maxNumRangeTreeNodes 48 (u32), counterDataSize 56 (+8).
        assert_eq!(
            struct_size!(
                sys::CUpti_RangeProfiler_GetCounterDataSize_Params,
                counterDataSize
            ),
            64
        );
        // ... profilerType 16 (enum), pChipName 24, image 32, pHostObject 40 (+8).
        assert_eq!(
            struct_size!(sys::CUpti_Profiler_Host_Initialize_Params, pHostObject),
            48
        );
        // ... pMetricName 24, description 32, hw 40, dim 48, metricType 56 (+4).
        assert_eq!(
            struct_size!(
                sys::CUpti_Profiler_Host_GetMetricProperties_Params,
                metricType
            ),
            60
        );
        // cuDevice 16 (int), isSupported 20, architecture 24, sli 28, vGpu 32,
        // confidentialCompute 36, cmp 40, wsl 44, api 48 (+4).
        assert_eq!(
            struct_size!(sys::CUpti_Profiler_DeviceSupported_Params, api),
            52
        );
        assert_eq!(
            struct_size!(sys::CUpti_Device_GetChipName_Params, pChipName),
            32
        );
        assert_eq!(
            struct_size!(
                sys::CUpti_Profiler_Host_EvaluateToGpuValues_Params,
                pMetricValues
            ),
            72
        );
    }
}
