//! The longest idle gaps of each row (`devices[i].idle.largest_gaps`, docs/idle.md) as marked
//! slices on their device's `idle gaps` track: named by the cause of the gap's largest piece,
//! with its detail, rule, every piece, the scope, the launching thread, the blocking call and the
//! work on either side as arguments. Rows without a split add nothing.

use std::io::{self, Write};

use serde_json::json;

use super::{Complete, TraceWriter};
use gpu_ledger_format::idle::IdleGap;
use gpu_ledger_format::schema::IterationRow;

/// Thread id of the idle-gap track in each GPU process (`+ k` for overlap lanes, when the
/// windows of consecutive rows overlap).
const IDLE_GAPS_TID: u32 = 0x7FFE_0000;

/// The arguments of a gap's slice; `before` and `after` as the trace names kernels.
fn gap_args(
    row: &IterationRow,
    g: &IdleGap,
    before: Option<String>,
    after: Option<String>,
) -> serde_json::Value {
    let parts: Vec<String> = (g.parts.iter())
        .map(|p| {
            let detail = p
                .detail
                .as_deref()
                .map_or(String::new(), |d| format!(" ({d})"));
            format!("{}{detail} by {}: {} ns", p.cause, p.rule, p.ns)
        })
        .collect();
    let mut args = json!({
        "iteration": row.index,
        "idle_ms": g.ns as f64 / 1e6,
        "rule": g.rule,
        "parts": parts,
    });
    let fields = [
        ("detail", g.detail.as_ref().map(|x| json!(x))),
        ("scope", g.scope.as_ref().map(|x| json!(x))),
        ("thread", g.thread.as_ref().map(|x| json!(x))),
        ("tid", g.tid.map(|x| json!(x))),
        ("function", g.function.as_ref().map(|x| json!(x))),
        ("bytes", g.bytes.map(|x| json!(x))),
        ("before", before.map(|x| json!(x))),
        ("before_stream", g.before_stream.map(|x| json!(x))),
        ("after", after.map(|x| json!(x))),
        ("after_stream", g.after_stream.map(|x| json!(x))),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            args[k] = v;
        }
    }
    args
}

impl<W: Write> TraceWriter<W> {
    /// One slice per longest gap of each device of `row` that split its idle time.
    pub(super) fn write_idle_gaps(&mut self, row: &IterationRow) -> io::Result<()> {
        for d in &row.devices {
            let Some(b) = &d.idle else { continue };
            // Longest first in the ledger; in time order here, so that lanes are reused.
            let mut gaps: Vec<&IdleGap> = b.largest_gaps.iter().collect();
            gaps.sort_by_key(|g| g.start_ns);
            for g in gaps {
                let pid = self.device_process(d.device_id)?;
                let start = i128::from(g.start_ns);
                let end = start.saturating_add(i128::from(g.ns));
                // Gaps of one row never overlap; those of rows whose windows do may.
                let lane = self.lane((d.device_id, IDLE_GAPS_TID), start, end);
                let tid = IDLE_GAPS_TID.saturating_add(lane as u32);
                if !self.threads.contains(&(pid, tid)) {
                    let label = match lane {
                        0 => "idle gaps".to_string(),
                        k => format!("idle gaps (overlap {k})"),
                    };
                    self.name_thread(pid, tid, &label, tid)?;
                }
                let before = g.before.as_deref().map(|k| self.display(k));
                let after = g.after.as_deref().map(|k| self.display(k));
                let ts = self.device_ts(g.start_ns, row.host_start_ns);
                let te = self.device_ts(g.start_ns.saturating_add(g.ns), row.host_start_ns);
                self.emit(&Complete {
                    name: &g.cause,
                    cat: "idle gap",
                    ph: "X",
                    pid,
                    tid,
                    ts,
                    dur: te - ts,
                    args: gap_args(row, g, before, after),
                })?;
                self.stats.idle_gaps += 1;
            }
        }
        Ok(())
    }

    /// The trace metadata's count of idle-gap slices, when there are any.
    pub(super) fn idle_meta(&self, meta: &mut serde_json::Value) {
        if self.stats.idle_gaps > 0 {
            meta["idle_gaps"] = json!(self.stats.idle_gaps);
        }
    }
}
