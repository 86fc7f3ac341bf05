//! NVTX ranges out of gpu-ledger's scopes: a push as a scope opens and a pop as it ends, on the
//! scope's thread, in NVTX's default domain, through the `nvtx` crate's NVTX v3 copy.
//!
//! The crate's `range_push!` formats its message into a new `CString` on every call; a scope's
//! name is kept NUL-terminated once per path, so the push goes to the crate's C wrapper of
//! `nvtxRangePushA` directly (the symbol the crate's own macros call, of the pinned version).
//! With no NVTX tool attached, NVTX's function table holds null pointers after its first call,
//! and a push or pop is a call, a load and a branch.
//!
//! It also holds [`NvtxImport`], the options of the other direction (NVTX ranges as scopes, which
//! `cupti::nvtx` imports): the configuration re-exports it, and the CUPTI layer reads it here
//! without importing the configuration.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

// The `nvtx` crate compiles the NVTX v3 headers' wrappers into the static library it links;
// naming the crate keeps it (and so the symbols below) in the link.
extern crate nvtx as _;

extern "C" {
    fn ffi_range_push(message: *const c_char) -> c_int;
    fn ffi_range_pop() -> c_int;
}

/// Pushes an NVTX range named `name` on the calling thread.
#[inline]
pub(crate) fn push(name: &CStr) {
    // SAFETY: `name` is NUL-terminated and outlives the call (NVTX copies what it keeps); the
    // wrapper's signature is the crate's own declaration of it.
    unsafe {
        ffi_range_push(name.as_ptr());
    }
}

/// Pops the calling thread's innermost NVTX range of the default domain.
#[inline]
pub(crate) fn pop() {
    // SAFETY: takes no arguments; popping with no range open is NVTX's no-op.
    unsafe {
        ffi_range_pop();
    }
}

/// A scope's name as NVTX takes it: NUL-terminated, with any NUL inside replaced (a Rust string
/// may hold one; C would end the name there).
pub(crate) fn range_name(name: &str) -> std::ffi::CString {
    let bytes: Vec<u8> = name
        .bytes()
        .map(|b| if b == 0 { b'?' } else { b })
        .collect();
    std::ffi::CString::new(bytes).unwrap_or_default()
}

/// Which NVTX ranges become scopes ([`Nvtx::import`](crate::Nvtx::import)).
///
/// NVTX finds its tool when a library makes its first NVTX call, through
/// `NVTX_INJECTION64_PATH`: the profiler sets it to the CUPTI it loaded at start when it is
/// unset, and it stays set for the rest of the process (child processes inherit it). A library
/// that made an NVTX call before the profiler started keeps no tool, so start the profiler first
/// (or export `NVTX_INJECTION64_PATH` to the CUPTI library yourself). When
/// it names another tool (Nsight Systems sets it), ranges are not imported and the header says
/// so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvtxImport {
    /// The NVTX domains whose ranges are imported (by name; the default domain is `default`);
    /// empty: every domain.
    pub domains: Vec<String>,
    /// Most imported ranges open at once on a thread; deeper ones are not scopes (counted in
    /// the trailer).
    pub max_depth: u32,
    /// An NVTX mark of this message ends the iteration as [`Profiler::step`](crate::Profiler::step)
    /// does, for applications that mark their steps with NVTX.
    pub step_marker: Option<String>,
}

impl Default for NvtxImport {
    fn default() -> Self {
        NvtxImport {
            domains: Vec::new(),
            max_depth: 8,
            step_marker: None,
        }
    }
}

impl NvtxImport {
    /// Whether ranges of the domain named `name` are imported.
    pub(crate) fn imports(&self, name: &str) -> bool {
        self.domains.is_empty() || self.domains.iter().any(|d| d == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_a_nul_inside_keeps_its_length() {
        let n = range_name("a\0b");
        assert_eq!(n.as_bytes(), b"a?b");
    }

    #[test]
    fn pushes_and_pops_with_no_tool_attached_do_nothing_harmful() {
        // No NVTX_INJECTION64_PATH in unit tests: NVTX initialises to no-ops.
        for _ in 0..3 {
            push(&range_name("outer"));
            push(&range_name("inner"));
            pop();
            pop();
        }
        pop(); // more pops than pushes
    }
}
