//! What the idle split works on, all on CUPTI's clock: a device's work, the calls that launched
//! it, and the labelled pieces a gap is cut into.

use crate::cupti::calls::Attribution;
use crate::ledger::idle::cause;

/// A kernel, copy or memset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One piece of a device's work in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Work {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) kind: WorkKind,
    pub(crate) context: u32,
    pub(crate) stream: u32,
    /// A kernel's name, a copy's direction, `memset`.
    pub(crate) name: &'static str,
    /// CUDA graph id (0: not from a graph).
    pub(crate) graph_id: u32,
    /// The correlation id of the outermost call that launched it.
    pub(crate) call: u32,
}

impl Work {
    /// As a gap names the work on either side.
    pub(crate) fn label(&self) -> String {
        match self.kind {
            WorkKind::Kernel => self.name.to_string(),
            WorkKind::Memcpy => format!("memcpy {}", self.name),
            WorkKind::Memset => "memset".into(),
        }
    }
}

/// A launching call, its times on CUPTI's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) entry: u64,
    /// `None` where the exit was not read.
    pub(crate) exit: Option<u64>,
    /// A copy or memset that holds the thread until its work is done (synchronous, or with
    /// pageable host memory): its work was submitted at entry.
    pub(crate) blocking: bool,
    /// The thread's key (what joins its calls to its scopes).
    pub(crate) key: u64,
    /// The thread's index among the launching threads.
    pub(crate) thread: u32,
    /// The call's index among the row's calls.
    pub(crate) index: u32,
    /// The scope the call was made in, and how it was found.
    pub(crate) path_id: u32,
    pub(crate) attribution: Attribution,
}

/// What a piece's detail names: nothing, one of the fixed details, or a scope path by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Detail {
    None,
    Text(Fixed),
    Scope(u32),
}

/// The fixed details ([`crate::ledger::idle::IdleCause::detail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Fixed {
    LaunchCall,
    NothingKnown,
    IterationBoundary,
    Synchronize,
    DeviceSynchronize,
    Allocation,
    Free,
    SyncCopy,
    SyncMemset,
    Event,
    HostFunction,
    Graph,
    OtherDevice,
    StreamOrder,
    Unknown,
}

impl Fixed {
    /// Its text in the ledger.
    pub(crate) fn name(self) -> &'static str {
        use crate::ledger::idle::blocked;
        match self {
            Fixed::LaunchCall => "launch_call",
            Fixed::NothingKnown => "nothing_known",
            Fixed::IterationBoundary => "iteration_boundary",
            Fixed::Synchronize => blocked::SYNCHRONIZE,
            Fixed::DeviceSynchronize => blocked::DEVICE_SYNCHRONIZE,
            Fixed::Allocation => blocked::ALLOCATION,
            Fixed::Free => blocked::FREE,
            Fixed::SyncCopy => blocked::SYNC_COPY,
            Fixed::SyncMemset => blocked::SYNC_MEMSET,
            Fixed::Event => "event",
            Fixed::HostFunction => "host_function",
            Fixed::Graph => "graph",
            Fixed::OtherDevice => "other_device",
            Fixed::StreamOrder => "stream_order",
            Fixed::Unknown => "unknown",
        }
    }
}

/// The cause of a piece ([`crate::ledger::idle::cause`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Cause {
    LaunchLatency,
    HostLaunch,
    Dependency,
    Unknown,
}

impl Cause {
    /// Its name in the ledger.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cause::LaunchLatency => cause::LAUNCH_LATENCY,
            Cause::HostLaunch => cause::HOST_LAUNCH,
            Cause::Dependency => cause::DEPENDENCY,
            Cause::Unknown => cause::UNKNOWN,
        }
    }
}

/// The rule that placed a piece (the ledger's `crate::ledger::idle::RULES`, where each is
/// explained).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Rule {
    BelowFloor,
    SubmitAfterLateLaunch,
    InsideLaunchCall,
    InLaunchCall,
    InCudaCall,
    ScopeOpen,
    AfterStepBeforeFirstCall,
    ScopeAtLaunch,
    NoHostEvidence,
    StreamWaitEvent,
    HostFuncBefore,
    GraphDependency,
    OtherDeviceBusy,
    SameStreamAboveFloor,
    LaunchedBeforeGapStart,
    WaitedAfterLateLaunch,
    NoLaunchCall,
    ZeroLengthWork,
    ClockStep,
    ClockUnreliable,
    AccountingRemainder,
}

impl Rule {
    /// Every rule.
    #[cfg(test)]
    pub(crate) const ALL: [Rule; 21] = [
        Rule::BelowFloor,
        Rule::SubmitAfterLateLaunch,
        Rule::InsideLaunchCall,
        Rule::InLaunchCall,
        Rule::InCudaCall,
        Rule::ScopeOpen,
        Rule::AfterStepBeforeFirstCall,
        Rule::ScopeAtLaunch,
        Rule::NoHostEvidence,
        Rule::StreamWaitEvent,
        Rule::HostFuncBefore,
        Rule::GraphDependency,
        Rule::OtherDeviceBusy,
        Rule::SameStreamAboveFloor,
        Rule::LaunchedBeforeGapStart,
        Rule::WaitedAfterLateLaunch,
        Rule::NoLaunchCall,
        Rule::ZeroLengthWork,
        Rule::ClockStep,
        Rule::ClockUnreliable,
        Rule::AccountingRemainder,
    ];

    /// Its name in the ledger.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rule::BelowFloor => "below_floor",
            Rule::SubmitAfterLateLaunch => "submit_after_late_launch",
            Rule::InsideLaunchCall => "inside_launch_call",
            Rule::InLaunchCall => "in_launch_call",
            Rule::InCudaCall => "in_cuda_call",
            Rule::ScopeOpen => "scope_open",
            Rule::AfterStepBeforeFirstCall => "after_step_before_first_call",
            Rule::ScopeAtLaunch => "scope_at_launch",
            Rule::NoHostEvidence => "no_host_evidence",
            Rule::StreamWaitEvent => "stream_wait_event",
            Rule::HostFuncBefore => "host_func_before",
            Rule::GraphDependency => "graph_dependency",
            Rule::OtherDeviceBusy => "other_device_busy",
            Rule::SameStreamAboveFloor => "same_stream_above_floor",
            Rule::LaunchedBeforeGapStart => "launched_before_gap_start",
            Rule::WaitedAfterLateLaunch => "waited_after_late_launch",
            Rule::NoLaunchCall => "no_launch_call",
            Rule::ZeroLengthWork => "zero_length_work",
            Rule::ClockStep => "clock_step",
            Rule::ClockUnreliable => "clock_unreliable",
            Rule::AccountingRemainder => "accounting_remainder",
        }
    }
}

/// The cause, detail and rule of a piece: what the ledger sums by (eight bytes: a row's
/// thousands of pieces compare and hash no text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Label {
    pub(crate) cause: Cause,
    pub(crate) detail: Detail,
    pub(crate) rule: Rule,
}

impl Label {
    pub(crate) const fn new(cause: Cause, detail: Detail, rule: Rule) -> Self {
        Label {
            cause,
            detail,
            rule,
        }
    }
    pub(crate) const fn host(detail: Fixed, rule: Rule) -> Self {
        Label::new(Cause::HostLaunch, Detail::Text(detail), rule)
    }
    pub(crate) const fn unknown(rule: Rule) -> Self {
        Label::new(Cause::Unknown, Detail::None, rule)
    }
    pub(crate) const fn dependency(detail: Fixed, rule: Rule) -> Self {
        Label::new(Cause::Dependency, Detail::Text(detail), rule)
    }
}

/// The dispatch latency of already launched work, up to the floor.
pub(crate) const BELOW_FLOOR: Label =
    Label::new(Cause::LaunchLatency, Detail::None, Rule::BelowFloor);
/// After a late launch call returned.
pub(crate) const AFTER_LATE_LAUNCH: Label = Label::new(
    Cause::LaunchLatency,
    Detail::None,
    Rule::SubmitAfterLateLaunch,
);
/// Inside the next work's own launch call.
pub(crate) const INSIDE_LAUNCH: Label = Label::host(Fixed::LaunchCall, Rule::InsideLaunchCall);
/// Nothing recorded says what the late host did.
pub(crate) const NOTHING_KNOWN: Label = Label::host(Fixed::NothingKnown, Rule::NoHostEvidence);
/// Between step() and the thread's first call.
pub(crate) const BOUNDARY: Label =
    Label::host(Fixed::IterationBoundary, Rule::AfterStepBeforeFirstCall);

/// The CUDA call a blocked or launching piece was spent in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallNote {
    pub(crate) function: &'static str,
    pub(crate) bytes: Option<u64>,
    /// The scope the call was made in.
    pub(crate) path_id: u32,
}

/// A contiguous piece of a gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) label: Label,
    pub(crate) ns: u64,
    /// For a piece spent in a CUDA call: which.
    pub(crate) call: Option<CallNote>,
}

/// Whether two pieces were spent in the same call (the function's text compared by address
/// first).
fn same_call(a: Option<CallNote>, b: Option<CallNote>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (std::ptr::eq(a.function, b.function) || a.function == b.function)
                && a.bytes == b.bytes
                && a.path_id == b.path_id
        }
        _ => false,
    }
}

/// Appends a piece, merged into the last one when it has the same label and call; nothing for
/// zero length.
pub(crate) fn push(out: &mut Vec<Piece>, label: Label, ns: u64, call: Option<CallNote>) {
    if ns == 0 {
        return;
    }
    match out.last_mut() {
        Some(last) if last.label == label && same_call(last.call, call) => last.ns += ns,
        _ => out.push(Piece { label, ns, call }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_one_the_ledger_explains_and_each_is_used_here() {
        let explained: Vec<&str> = crate::ledger::idle::RULES.iter().map(|(n, _)| *n).collect();
        for r in Rule::ALL {
            assert!(
                explained.contains(&r.name()),
                "{} has no meaning in RULES",
                r.name()
            );
        }
        assert_eq!(
            explained.len(),
            Rule::ALL.len(),
            "RULES names a rule nothing places"
        );
    }
}
