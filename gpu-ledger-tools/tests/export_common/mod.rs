//! Helpers shared by the `export_*` tests: the golden ledgers of `tests/data/` and the ids of the
//! report's charts.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use gpu_ledger_format::reader::{read_ledger, Ledger};

/// `tests/data/`, where the golden ledgers are.
pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data")
}

/// The golden ledger `tests/data/{name}`, read with the ledger reader.
pub fn read(name: &str) -> Ledger {
    read_ledger(&data().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The id of every chart of the HTML report.
pub const CHARTS: [&str; 7] = [
    "chart-families",
    "chart-scopes-host",
    "chart-scopes-device",
    "chart-idle",
    "chart-clocks",
    "chart-power",
    "chart-roofline",
];
