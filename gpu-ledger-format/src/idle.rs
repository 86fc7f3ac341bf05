//! Why a device was idle: each row's idle time split by cause, the largest gaps, the host calls
//! that block or allocate, and the dispatch floor the split was made with.
//!
//! A device's `idle_ns` is the time inside its window `[first_start_ns, last_end_ns)` that no
//! kernel, copy or memset covered. The profiler cuts every idle gap into contiguous pieces and
//! gives each piece one cause, one detail and the rule that placed it, so that a row's causes add
//! up to `idle_ns` exactly. docs/idle.md says what each cause means and how it is found; the rule
//! names and their one-line meaning are [`RULES`].
//!
//! Every field here is optional in the ledger: rows written without idle causes (older ledgers,
//! `Config::idle_causes(false)`, the scopes level, untraced rows) carry none.

use serde::{Deserialize, Serialize};

/// The causes a piece of idle time can have.
pub mod cause {
    /// The next work was launched before the gap began and the gap (or its first part) is no
    /// longer than the device's dispatch floor: the cost of launching work one piece at a time.
    pub const LAUNCH_LATENCY: &str = "launch_latency";
    /// The host launched the next work after the gap began: the host was late. The detail says
    /// what the launching thread was doing meanwhile.
    pub const HOST_LAUNCH: &str = "host_launch";
    /// The next work was launched before the gap began and waited longer than the dispatch floor
    /// on something else: an event, its graph, a host function, another device, its own stream.
    pub const DEPENDENCY: &str = "dependency";
    /// Nothing recorded says why: no call was captured for the next work, or the host clock could
    /// not be mapped onto CUPTI's.
    pub const UNKNOWN: &str = "unknown";
}

/// Every rule that places a piece of idle time, with what it means. The ledger names the rule of
/// each piece, so that a figure can be traced to the evidence behind it.
pub const RULES: &[(&str, &str)] = &[
    ("below_floor", "launched before the gap began: the gap's first floor_ns (or all of a shorter gap) is dispatch latency"),
    ("submit_after_late_launch", "after a late launch call returned, until the work started: dispatch latency"),
    ("inside_launch_call", "the host was inside the launch call of the next work"),
    ("in_launch_call", "the launching thread was inside another launch, copy or other non-blocking CUDA call"),
    ("in_cuda_call", "the launching thread was blocked in a CUDA call (synchronize, allocation, free, synchronous copy or memset): CUPTI's synchronization record where there is one, else the call's entry and exit"),
    ("scope_open", "the launching thread was inside this scope (the innermost one open, closed in this row or the one before)"),
    ("after_step_before_first_call", "between step() and the launching thread's first traced call of the iteration"),
    ("scope_at_launch", "no closed scope covers the time; the next work was launched inside this scope, still open when the row was written"),
    ("no_host_evidence", "the host was late and nothing recorded says what the launching thread did"),
    ("stream_wait_event", "the next work's stream waited on an event (cuStreamWaitEvent issued between its predecessor's launch and its own)"),
    ("host_func_before", "a host function (cuLaunchHostFunc) was enqueued between the predecessor's launch and the next work's"),
    ("graph_dependency", "the next work and the work before are nodes of one CUDA graph launch"),
    ("other_device_busy", "another device was busy for at least half of the wait"),
    ("same_stream_above_floor", "the next work waited on its own stream's previous work for longer than the floor (a copy engine after a kernel, or the reverse)"),
    ("launched_before_gap_start", "the next work was launched before the gap began and no evidence says what it waited for"),
    ("waited_after_late_launch", "the next work was launched late and still waited longer than the floor after its launch call, on nothing recorded"),
    ("no_launch_call", "the next work has no captured call (device-launched, or its call was not captured)"),
    ("zero_length_work", "the gap ends at a zero-length record: no work starts there"),
    ("clock_step", "the host clock jumped against CUPTI's during the iteration: host times cannot be placed"),
    ("clock_unreliable", "launch times and GPU start times disagree by more than the tolerance: host times cannot be placed"),
    ("accounting_remainder", "time the split could not place (never expected; counted so that the causes still add up)"),
];

/// The details of [`cause::HOST_LAUNCH`] that name a blocking CUDA call, by what the call does.
pub mod blocked {
    /// Stream or event synchronization (cuStreamSynchronize, cuEventSynchronize).
    pub const SYNCHRONIZE: &str = "blocked:synchronize";
    /// Device-wide synchronization (cuCtxSynchronize, cudaDeviceSynchronize).
    pub const DEVICE_SYNCHRONIZE: &str = "blocked:device_synchronize";
    /// An allocation (cuMemAlloc, cudaMalloc, and their host, managed and pitched forms).
    pub const ALLOCATION: &str = "blocked:allocation";
    /// A release (cuMemFree, cudaFree).
    pub const FREE: &str = "blocked:free";
    /// A synchronous copy, or an asynchronous one with pageable host memory.
    pub const SYNC_COPY: &str = "blocked:sync_copy";
    /// A synchronous memset.
    pub const SYNC_MEMSET: &str = "blocked:sync_memset";
}

/// What the funnel suggests when a cause (and detail) dominates the idle time of the steady
/// state; `None` for causes with no general remedy (`unknown`).
pub fn remedy(cause: &str, detail: Option<&str>) -> Option<&'static str> {
    let detail = detail.unwrap_or("");
    Some(match cause {
        cause::LAUNCH_LATENCY => {
            "launch fewer, larger pieces of work: capture the loop in a CUDA graph, or fuse kernels"
        }
        cause::HOST_LAUNCH if detail.starts_with("blocked:") => {
            "remove the synchronization, allocation or .item()-like read from the loop (or move it \
             off the critical path)"
        }
        cause::HOST_LAUNCH if detail == "launch_call" => {
            "the host spends the gap launching: capture the loop in a CUDA graph, or fuse kernels"
        }
        cause::HOST_LAUNCH => {
            "move the host work off the launching thread, or overlap it with GPU work (launch \
             ahead, prefetch)"
        }
        cause::DEPENDENCY => {
            "overlap the dependency: record the event earlier, split the work across streams, or \
             move the host function off the stream"
        }
        _ => return None,
    })
}

/// One cause's share of an idle figure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleCause {
    /// [`cause`]: `launch_latency`, `host_launch`, `dependency` or `unknown`.
    pub cause: String,
    /// What the cause was, when it says more: for `host_launch`, `scope:<path>`, `blocked:<what>`
    /// ([`blocked`]), `launch_call`, `iteration_boundary` or `nothing_known`; for `dependency`,
    /// `event`, `host_function`, `graph`, `other_device`, `stream_order` or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The rule that placed these nanoseconds ([`RULES`]).
    pub rule: String,
    /// Idle time, ns.
    pub ns: u64,
    /// Gaps that have a piece of this cause, detail and rule.
    pub gaps: u64,
}

/// A device's idle time in one row, split by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleBreakdown {
    /// The dispatch floor the split used, ns: a gap between work already launched is dispatch
    /// latency up to this long.
    pub floor_ns: u64,
    /// Where the floor came from: `config` (`IdleConfig::dispatch_floor`), `calibration` (the
    /// gaps between the start-up calibration's back-to-back empty kernels), `observed` (the
    /// median gap between already-launched work of one stream seen so far in the run) or
    /// `default`.
    pub floor_source: String,
    /// CUPTI time minus host time, ns, as used to place the host's calls and scopes on the
    /// GPU's timeline (from `step()`'s pair of readings, lowered where a kernel would otherwise
    /// start before its launch call was entered).
    pub host_offset_ns: i64,
    /// The split of the device's `idle_ns`, sorted by cause, detail and rule; the pieces add up
    /// to `idle_ns` exactly.
    pub causes: Vec<IdleCause>,
    /// The window's time with no kernel or memset running, ns: `idle_ns + copy_only_ns`.
    pub compute_idle_ns: u64,
    /// Copy time with no kernel or memset running, ns: the compute engines idle while only
    /// copies ran. Busy in `idle_ns`'s terms, so not among `causes`.
    pub copy_only_ns: u64,
    /// Copy time overlapped with a kernel or memset, ns.
    pub copy_overlapped_ns: u64,
    /// The gap between the device's last work of the previous traced row and its first work of
    /// this one, split the same way. Outside this row's window and so outside `idle_ns`: it is
    /// where a loop's synchronize, `step()` and the next launch leave the GPU idle. None after an
    /// untraced row, for the first row, and when the two windows overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_in: Option<IdleGap>,
    /// The longest gaps inside the window, longest first (`IdleConfig::largest_gaps` of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub largest_gaps: Vec<IdleGap>,
    /// Kernels and copies that started before their launch call was entered by `step()`'s
    /// clock mapping: the offset was lowered to make them consistent (see `host_offset_ns`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub causality_violations: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One idle gap: where it was, what filled it, and the work on either side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleGap {
    /// Start, CUPTI ns.
    pub start_ns: u64,
    /// Length, ns.
    pub ns: u64,
    /// Cause of its largest piece.
    pub cause: String,
    /// Detail of its largest piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Rule of its largest piece.
    pub rule: String,
    /// Every piece of the gap by cause, detail and rule (each `gaps` is 1); they add up to `ns`.
    pub parts: Vec<IdleCause>,
    /// The CUDA function the launching thread was blocked in, for the longest blocked piece
    /// (`cuStreamSynchronize`, `cudaMemcpy`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Bytes of that call's copy or allocation, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The scope of the gap: of its largest scope piece, else of the blocking call, else the
    /// scope the next work was launched in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The operating system's id of the thread that launched the next work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// That thread's name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// The work that ended where the gap begins: a kernel's name, `memcpy <direction>` or
    /// `memset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Its CUPTI stream id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_stream: Option<u32>,
    /// The work that starts where the gap ends, named as `before`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Its CUPTI stream id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_stream: Option<u32>,
}

/// Host calls of one kind, scope and function in a row: what the funnel asks to find inside
/// the steady state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryEntry {
    /// `device_sync`, `stream_sync`, `event_sync`, `sync_copy` (synchronous copies, and
    /// asynchronous ones with pageable host memory), `sync_memset`, `small_dtoh` (device-to-host
    /// copies of at most `IdleConfig::small_read_bytes`: `.item()`-like reads, synchronous or
    /// not), `alloc` or `free`.
    pub kind: String,
    /// The scope the calls were made in.
    pub scope: String,
    /// The CUDA function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The device, where a record says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<u32>,
    /// Calls.
    pub count: u64,
    /// Host time inside them, ns: CUPTI's synchronization record's wait where there is one,
    /// else the call's entry to exit.
    pub host_ns: u64,
    /// Bytes copied, set, allocated or freed, where records say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Of the copies, those that were synchronous with the host (`small_dtoh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous: Option<u64>,
}

/// The dispatch floor of one device: the gap between back-to-back work already launched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchFloor {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// The floor the rows used, ns (the 90th percentile of the samples for `calibration`, their
    /// median for `observed`).
    pub floor_ns: u64,
    /// Median of the samples, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ns: Option<u64>,
    /// 90th percentile of the samples, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90_ns: Option<u64>,
    /// Gaps measured.
    pub samples: u64,
    /// `config`, `calibration`, `observed` or `default` (see [`IdleBreakdown::floor_source`]).
    pub source: String,
}

impl IdleBreakdown {
    /// The idle time of each cause (all details and rules together).
    pub fn by_cause(&self) -> std::collections::BTreeMap<&str, u64> {
        let mut out = std::collections::BTreeMap::new();
        for c in &self.causes {
            *out.entry(c.cause.as_str()).or_insert(0) += c.ns;
        }
        out
    }
}

/// The cause and detail holding more than `share` of `causes`' total, with their total: the
/// one to name in a warning, with [`remedy`]. `None` when no pair does or there is no idle time.
pub fn dominant<'a>(
    causes: impl IntoIterator<Item = &'a IdleCause>,
    share: f64,
) -> Option<(&'a str, Option<&'a str>, u64)> {
    let mut by: std::collections::BTreeMap<(&str, Option<&str>), u64> = Default::default();
    let mut total = 0u64;
    for c in causes {
        *by.entry((c.cause.as_str(), c.detail.as_deref()))
            .or_insert(0) += c.ns;
        total = total.saturating_add(c.ns);
    }
    if total == 0 {
        return None;
    }
    by.into_iter()
        .find(|(_, ns)| *ns as f64 > share * total as f64)
        .map(|((c, d), ns)| (c, d, ns))
}

/// Sum of `parts`' ns.
fn sum(parts: &[IdleCause]) -> u64 {
    parts.iter().fold(0u64, |a, c| a.saturating_add(c.ns))
}

/// The checks a breakdown must pass beyond its types, for the device's `idle_ns`: the causes
/// add up to it, the compute-idle figure is it plus the copy-only time, and every gap's parts
/// add up to its length. The error names the field under `at` (`devices[0].idle`).
pub(crate) fn check(b: &IdleBreakdown, idle_ns: u64, at: &str) -> Result<(), String> {
    let causes = sum(&b.causes);
    if causes != idle_ns {
        return Err(format!(
            "{at}.causes add up to {causes} ns, not the device's idle_ns = {idle_ns}: the split \
             must place every idle nanosecond once; regenerate the ledger, or remove the line"
        ));
    }
    if b.compute_idle_ns != idle_ns.saturating_add(b.copy_only_ns) {
        return Err(format!(
            "{at}.compute_idle_ns = {} is not idle_ns + copy_only_ns = {} + {}: regenerate the \
             ledger, or remove the line",
            b.compute_idle_ns, idle_ns, b.copy_only_ns
        ));
    }
    let gaps = b.lead_in.iter().map(|g| ("lead_in".to_string(), g));
    let largest =
        (b.largest_gaps.iter().enumerate()).map(|(i, g)| (format!("largest_gaps[{i}]"), g));
    for (name, g) in gaps.chain(largest) {
        let parts = sum(&g.parts);
        if parts != g.ns {
            return Err(format!(
                "{at}.{name}.parts add up to {parts} ns, not the gap's ns = {}: regenerate the \
                 ledger, or remove the line",
                g.ns
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(cause: &str, detail: Option<&str>, ns: u64) -> IdleCause {
        IdleCause {
            cause: cause.into(),
            detail: detail.map(Into::into),
            rule: "r".into(),
            ns,
            gaps: 1,
        }
    }

    #[test]
    fn the_dominant_cause_is_named_with_its_remedy() {
        let causes = [
            part(cause::HOST_LAUNCH, Some("blocked:synchronize"), 700),
            part(cause::HOST_LAUNCH, Some("scope:step/data"), 200),
            part(cause::LAUNCH_LATENCY, None, 100),
        ];
        let (c, d, ns) = dominant(&causes, 0.5).expect("70 % dominates");
        assert_eq!(
            (c, d, ns),
            ("host_launch", Some("blocked:synchronize"), 700)
        );
        assert!(remedy(c, d).unwrap().contains("remove the synchronization"));
        assert_eq!(
            dominant(&causes, 0.7),
            None,
            "700 of 1000 is not above 70 %"
        );
        assert_eq!(dominant(&[], 0.5), None);
        assert!(remedy(cause::LAUNCH_LATENCY, None)
            .unwrap()
            .contains("CUDA graph"));
        assert!(remedy(cause::HOST_LAUNCH, Some("scope:x"))
            .unwrap()
            .contains("overlap"));
        assert_eq!(remedy(cause::UNKNOWN, None), None);
    }

    #[test]
    fn every_rule_has_a_meaning_and_is_named_once() {
        let mut names: Vec<&str> = RULES.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
        assert!(RULES.iter().all(|(_, m)| m.len() > 20));
    }

    #[test]
    fn a_breakdown_whose_causes_do_not_add_up_is_refused_by_name() {
        let mut b = IdleBreakdown {
            causes: vec![part("host_launch", None, 60), part("unknown", None, 40)],
            compute_idle_ns: 150,
            copy_only_ns: 50,
            ..IdleBreakdown::default()
        };
        assert_eq!(check(&b, 100, "devices[0].idle"), Ok(()));
        let e = check(&b, 101, "devices[0].idle").unwrap_err();
        assert!(
            e.starts_with("devices[0].idle.causes add up to 100 ns"),
            "{e}"
        );
        b.compute_idle_ns = 100;
        assert!(check(&b, 100, "d")
            .unwrap_err()
            .starts_with("d.compute_idle_ns"));
        b.compute_idle_ns = 150;
        b.largest_gaps = vec![IdleGap {
            ns: 30,
            parts: vec![part("host_launch", None, 20)],
            ..IdleGap::default()
        }];
        let e = check(&b, 100, "d").unwrap_err();
        assert!(
            e.starts_with("d.largest_gaps[0].parts add up to 20 ns"),
            "{e}"
        );
    }
}
