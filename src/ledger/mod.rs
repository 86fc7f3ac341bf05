//! The ledger: JSON Lines written by a background thread, read back with validation.

#![forbid(unsafe_code)]

pub mod counters;
pub mod environment;
mod float;
pub mod nvml;
pub mod reader;
pub mod schema;
pub mod stalls;
pub mod validate;
pub(crate) mod writer;

pub use environment::*;
pub use nvml::*;
pub use reader::{read_ledger, Ledger};
pub use schema::*;
