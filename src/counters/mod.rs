//! Hardware counters through the CUPTI Range Profiler (issue 3).
