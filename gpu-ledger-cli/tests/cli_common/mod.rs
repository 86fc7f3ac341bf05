//! Helpers shared by the tests that run the `gpu-ledger` binary: the command, the golden ledgers
//! of `tests/data/`, and a run's output as text.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `gpu-ledger` binary cargo built for the tests.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpu-ledger"))
}

/// `tests/data/{name}`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

/// Runs `gpu-ledger args` to completion.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("gpu-ledger runs")
}

/// The run's stdout, lossily as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The run's stderr, lossily as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
