//! Exports of a ledger: Chrome/Perfetto trace, CSV, HTML report, Markdown (issue 6).
