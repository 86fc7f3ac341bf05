//! `gpu-ledger parquet`: ledgers into a Hive-partitioned Parquet dataset
//! ([`gpu_ledger_tools::export::parquet`]).

use std::path::{Path, PathBuf};

use gpu_ledger_tools::export::parquet::{ledgers_in, write_dataset, DatasetOptions};

use super::{display, print, CliError};

/// Converts the ledgers (files or directories of `*.jsonl`) into the dataset at `out`.
pub(crate) fn parquet(
    inputs: &[PathBuf],
    out: &Path,
    run: Option<String>,
    overwrite: bool,
    threads: Option<usize>,
) -> Result<(), CliError> {
    let ledgers = ledgers_in(inputs).map_err(|e| CliError::Other(e.to_string()))?;
    let mut opts = DatasetOptions {
        run,
        overwrite,
        ..DatasetOptions::default()
    };
    if let Some(t) = threads {
        opts.threads = t.max(1);
    }
    super::interrupt::register_dir(out);
    let stats = write_dataset(&ledgers, out, &opts).map_err(|e| CliError::Other(e.to_string()))?;
    for n in &stats.notes {
        eprintln!("gpu-ledger: note: {n}");
    }
    let mut runs: Vec<&str> = stats.ledgers.iter().map(|l| l.run.as_str()).collect();
    runs.sort_unstable();
    runs.dedup();
    print(&format!(
        "{}: {} ledger{} ({} rows) of run {} as Parquet, {:.1} MB\n",
        display(out),
        stats.ledgers.len(),
        if stats.ledgers.len() == 1 { "" } else { "s" },
        stats.rows,
        runs.join(", "),
        stats.bytes as f64 / 1e6
    ))
}
