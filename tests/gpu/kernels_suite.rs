//! GPU tests: kernels_suite.
