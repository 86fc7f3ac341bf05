//! Scope paths with a meaning of their own, which the profiler writes and the tools recognise.

/// The path of launches made outside any scope.
pub const UNSCOPED: &str = "(unscoped)";

/// The path the profiler records scopes under once a run has more distinct scope paths than
/// its bound (the trailer's `scope_paths_folded` counts them).
pub const OTHER_SCOPE_PATHS: &str = "(other scope paths)";

/// The path of the counters level's own GPU work (the Range Profiler's kernels, the L2 flush).
pub const COUNTERS_SCOPE: &str = "(gpu-ledger counters)";
