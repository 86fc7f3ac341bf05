//! GPU tests: nvml.
