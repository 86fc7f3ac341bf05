//! GPU tests: counters.
