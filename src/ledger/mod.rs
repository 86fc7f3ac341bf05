//! The ledger: JSON Lines written by a background thread, read back with validation.

pub mod counters;
pub mod reader;
pub mod schema;
pub mod writer;

pub use reader::{read_ledger, Ledger};
pub use schema::*;
