//! JSON has no NaN or infinity: serde_json writes them as `null`. A figure that could not be
//! measured (a NaN counter value, a mean of no samples) must still read back, so every `f64`
//! field of the ledger that is not already an `Option` reads `null` as NaN.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// An `f64` field: `null` (a NaN or an infinity when written) reads as NaN.
pub(crate) fn null_as_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// A map of `f64` values: each `null` reads as NaN.
pub(crate) fn map_null_as_nan<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let map = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(map
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}
