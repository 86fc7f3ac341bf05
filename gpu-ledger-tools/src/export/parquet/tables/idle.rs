//! The tables of why a device was idle (docs/idle.md): `idle_gaps`, one row per longest gap of a
//! device of a row, and `idle_causes`, one row per piece of a device's idle time by cause,
//! detail and rule (they add up to the `devices` table's `idle_ns`). Rows without a split add
//! none.

use super::super::columns::{opt, req, Col, Kind::*};
use super::{Sink, IDLE_CAUSES, IDLE_GAPS};
use gpu_ledger_format::schema::IterationRow;

pub(super) const GAP_COLS: [Col; 19] = [
    req("iteration", I64),
    req("device_id", I64),
    req("position", I64),
    req("start_ns", I64),
    req("ns", I64),
    req("cause", Str),
    opt("detail", Str),
    req("rule", Str),
    req("parts", StrList),
    opt("function", Str),
    opt("bytes", I64),
    opt("scope", Str),
    opt("tid", I64),
    opt("thread", Str),
    opt("before", Str),
    opt("before_stream", I64),
    opt("after", Str),
    opt("after_stream", I64),
    req("floor_ns", I64),
];

pub(super) const CAUSE_COLS: [Col; 7] = [
    req("iteration", I64),
    req("device_id", I64),
    req("cause", Str),
    opt("detail", Str),
    req("rule", Str),
    req("ns", I64),
    req("gaps", I64),
];

/// The `idle_gaps` table: each device's longest gaps, longest first (`position` 0).
pub(super) fn gap_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for d in &row.devices {
        let Some(b) = &d.idle else { continue };
        for (position, g) in b.largest_gaps.iter().enumerate() {
            // Each piece as `cause (detail) by rule: ns`, as the trace's arguments name them.
            let parts: Vec<String> = (g.parts.iter())
                .map(|p| match &p.detail {
                    Some(det) => format!("{} ({det}) by {}: {}", p.cause, p.rule, p.ns),
                    None => format!("{} by {}: {}", p.cause, p.rule, p.ns),
                })
                .collect();
            sink(IDLE_GAPS, &mut |r| {
                r.u(i)
                    .u(d.device_id.into())
                    .u(position as u64)
                    .u(g.start_ns)
                    .u(g.ns)
                    .str(Some(&g.cause))
                    .str(g.detail.as_deref())
                    .str(Some(&g.rule))
                    .strs(parts.iter().map(String::as_str))
                    .str(g.function.as_deref())
                    .ou(g.bytes)
                    .str(g.scope.as_deref())
                    .ou(g.tid.map(u64::from))
                    .str(g.thread.as_deref())
                    .str(g.before.as_deref())
                    .ou(g.before_stream.map(u64::from))
                    .str(g.after.as_deref())
                    .ou(g.after_stream.map(u64::from))
                    .u(b.floor_ns);
            })?;
        }
    }
    Ok(())
}

/// The `idle_causes` table: each piece of each device's split, as the ledger has it.
pub(super) fn cause_rows<E>(row: &IterationRow, sink: &mut Sink<'_, E>) -> Result<(), E> {
    let i = row.index;
    for d in &row.devices {
        let Some(b) = &d.idle else { continue };
        for c in &b.causes {
            sink(IDLE_CAUSES, &mut |r| {
                r.u(i)
                    .u(d.device_id.into())
                    .str(Some(&c.cause))
                    .str(c.detail.as_deref())
                    .str(Some(&c.rule))
                    .u(c.ns)
                    .u(c.gaps);
            })?;
        }
    }
    Ok(())
}
