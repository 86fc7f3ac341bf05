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
    /// The scope the call was made in, and how it was found.
    pub(crate) path_id: u32,
    pub(crate) attribution: Attribution,
}

/// What a piece's detail names: nothing, a fixed text, or a scope path by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Detail {
    None,
    Text(&'static str),
    Scope(u32),
}

/// The cause, detail and rule of a piece: what the ledger sums by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Label {
    pub(crate) cause: &'static str,
    pub(crate) detail: Detail,
    pub(crate) rule: &'static str,
}

impl Label {
    pub(crate) const fn new(cause: &'static str, detail: Detail, rule: &'static str) -> Self {
        Label {
            cause,
            detail,
            rule,
        }
    }
    pub(crate) const fn host(detail: &'static str, rule: &'static str) -> Self {
        Label::new(cause::HOST_LAUNCH, Detail::Text(detail), rule)
    }
    pub(crate) const fn unknown(rule: &'static str) -> Self {
        Label::new(cause::UNKNOWN, Detail::None, rule)
    }
    pub(crate) const fn dependency(detail: &'static str, rule: &'static str) -> Self {
        Label::new(cause::DEPENDENCY, Detail::Text(detail), rule)
    }
}

/// The dispatch latency of already launched work, up to the floor.
pub(crate) const BELOW_FLOOR: Label =
    Label::new(cause::LAUNCH_LATENCY, Detail::None, "below_floor");
/// After a late launch call returned.
pub(crate) const AFTER_LATE_LAUNCH: Label = Label::new(
    cause::LAUNCH_LATENCY,
    Detail::None,
    "submit_after_late_launch",
);
/// Inside the next work's own launch call.
pub(crate) const INSIDE_LAUNCH: Label = Label::host("launch_call", "inside_launch_call");
/// Nothing recorded says what the late host did.
pub(crate) const NOTHING_KNOWN: Label = Label::host("nothing_known", "no_host_evidence");
/// Between step() and the thread's first call.
pub(crate) const BOUNDARY: Label =
    Label::host("iteration_boundary", "after_step_before_first_call");

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

/// Appends a piece, merged into the last one when it has the same label and call; nothing for
/// zero length.
pub(crate) fn push(out: &mut Vec<Piece>, label: Label, ns: u64, call: Option<CallNote>) {
    if ns == 0 {
        return;
    }
    match out.last_mut() {
        Some(last) if last.label == label && last.call == call => last.ns += ns,
        _ => out.push(Piece { label, ns, call }),
    }
}
