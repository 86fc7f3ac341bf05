//! The format's one error: a ledger that cannot be read, with the place and the fix.

use std::path::PathBuf;

/// Result alias of the format crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading a ledger.
///
/// `Debug` prints what `Display` does (the file, the line and what is wrong), since Rust prints an
/// error returned from `main` with `Debug`.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A ledger file could not be read or parsed.
    #[error("{}{}: {message}", path.display(), line_suffix(*line))]
    LedgerRead {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0 when the file itself could not be opened).
        line: usize,
        /// What was wrong and what was expected.
        message: String,
    },
}

/// `:N` for a line number; nothing for 0 (the file itself could not be opened).
fn line_suffix(line: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}")
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
