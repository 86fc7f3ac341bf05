//! The change of each device's idle time by cause between A and B: the median per iteration of
//! each cause (and `host_launch`'s detail, [`crate::analysis::idle`]) over each side's kept rows
//! that split idle time, and their difference. No interval: the bootstrap is the compared
//! metric's; these medians say where idle time moved, not whether the move is significant.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::analysis::idle::IdleCauses;

/// One cause of one device, A against B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleCauseChange {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// The cause.
    pub cause: String,
    /// `host_launch`'s detail (`scope` for every scope).
    pub detail: Option<String>,
    /// Median idle time per iteration in A, ns; `None` when no kept row of A split the
    /// device's idle time (not measured), 0 when those that did had none of this cause.
    pub a_median_ns: Option<f64>,
    /// The same in B.
    pub b_median_ns: Option<f64>,
    /// `b_median_ns - a_median_ns`; `None` unless both sides measured it.
    pub delta_median_ns: Option<f64>,
    /// Its share of the device's idle time in A.
    pub a_share: Option<f64>,
    /// Its share of the device's idle time in B.
    pub b_share: Option<f64>,
}

type Key = (u32, String, Option<String>);

/// Each side's median and share of every cause either side has, by key.
fn by_key(s: &IdleCauses) -> BTreeMap<Key, (f64, Option<f64>)> {
    (s.causes.iter())
        .map(|c| {
            let key = (c.device_id, c.cause.clone(), c.detail.clone());
            (key, (c.per_iteration_ns.median, c.share_of_idle))
        })
        .collect()
}

/// The changes, per device, largest absolute change of the median first; empty when neither
/// side split idle time.
pub(super) fn idle_cause_changes(a: &IdleCauses, b: &IdleCauses) -> Vec<IdleCauseChange> {
    let (ka, kb) = (by_key(a), by_key(b));
    let keys: BTreeSet<&Key> = ka.keys().chain(kb.keys()).collect();
    // Measured on a side without the cause: 0 there; not measured: None.
    let side = |m: &BTreeMap<Key, (f64, Option<f64>)>, s: &IdleCauses, k: &Key| match m.get(k) {
        Some(&(median, share)) => (Some(median), share),
        None if s.devices.contains_key(&k.0) => (Some(0.0), Some(0.0)),
        None => (None, None),
    };
    let mut out: Vec<IdleCauseChange> = keys
        .into_iter()
        .map(|k| {
            let ((am, ash), (bm, bsh)) = (side(&ka, a, k), side(&kb, b, k));
            IdleCauseChange {
                device_id: k.0,
                cause: k.1.clone(),
                detail: k.2.clone(),
                a_median_ns: am,
                b_median_ns: bm,
                delta_median_ns: am.zip(bm).map(|(x, y)| y - x),
                a_share: ash,
                b_share: bsh,
            }
        })
        .collect();
    out.sort_by(|p, q| {
        let size = |c: &IdleCauseChange| c.delta_median_ns.map_or(-1.0, f64::abs);
        (p.device_id.cmp(&q.device_id))
            .then(size(q).total_cmp(&size(p)))
            .then_with(|| (&p.cause, &p.detail).cmp(&(&q.cause, &q.detail)))
    });
    out
}
