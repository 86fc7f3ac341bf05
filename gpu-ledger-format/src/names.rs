//! Scope paths with a meaning of their own, which the profiler writes and the tools recognise.

/// The path of launches made outside any scope.
pub const UNSCOPED: &str = "(unscoped)";

/// The path of the counters level's own GPU work (the Range Profiler's kernels, the L2 flush).
pub const COUNTERS_SCOPE: &str = "(gpu-ledger counters)";
