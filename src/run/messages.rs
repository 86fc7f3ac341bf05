//! What crosses from the application's threads to the collector: the end of an iteration, the
//! run's finish, and each closed scope (the 64-byte line its thread writes into its ring, and the
//! record the collector works with).

use crate::counters::IterationCounters;
use crate::driver::events::{PackedEvents, ScopeEvents};
use crate::pcsampling::window::SampledIteration;

/// `step()` ended iteration `index`. Sent through a ring the collector polls and never sleeps on,
/// so that `step()` never wakes it: waking a sleeping thread costs a futex wake and an
/// inter-processor interrupt on the application's critical path, right after its synchronize.
/// What only some iterations carry is boxed in [`IterationExtras`], so that the usual message
/// fills one cache line: `step()` runs right after the application's synchronize with its caches
/// cold, and each line it writes into the ring is a miss on the critical path. Aligned so that
/// each message in the ring is exactly one line, never two.
#[repr(align(64))]
pub(crate) struct IterationEnd {
    pub(crate) index: u64,
    /// The scope clock when the iteration ended (`HostClock::raw_now`): the collector converts
    /// it as it converts scopes' times.
    pub(crate) host_end: u64,
    pub(crate) cupti_end: Option<u64>,
    /// Counted launch, copy and memset calls entered since the start, read before the
    /// iteration counter moved: the row waits for that many captured calls.
    pub(crate) launches: u64,
    /// False when a sampled timeline left the iteration untraced.
    pub(crate) traced: bool,
    /// Open scopes, counters, PC samples and a warning, when the iteration has any.
    pub(crate) extras: Option<Box<IterationExtras>>,
}

/// The parts of an [`IterationEnd`] that most iterations lack.
#[derive(Default)]
pub(crate) struct IterationExtras {
    /// Scopes still open on the stepping thread (a structural warning in the row).
    pub(crate) open_scopes: Vec<u32>,
    /// Hardware counters of the iteration, when a pass ran in it.
    pub(crate) counters: Option<IterationCounters>,
    /// What PC sampling read of the iteration, when it was sampled.
    pub(crate) stalls: Option<SampledIteration>,
    /// Why switching tracing for the next iteration failed, for the row.
    pub(crate) warning: Option<String>,
}

impl IterationExtras {
    /// The parts, boxed when any is present; `None` for the usual iteration, which then builds
    /// nothing on `step()`'s cold stack and allocates nothing.
    pub(crate) fn boxed(
        open_scopes: Vec<u32>,
        counters: Option<IterationCounters>,
        stalls: Option<SampledIteration>,
        warning: Option<String>,
    ) -> Option<Box<IterationExtras>> {
        let any =
            !open_scopes.is_empty() || counters.is_some() || stalls.is_some() || warning.is_some();
        any.then(|| {
            Box::new(IterationExtras {
                open_scopes,
                counters,
                stalls,
                warning,
            })
        })
    }
}

/// `finish()`: close everything and send the trailer. The one message the collector sleeps on.
pub(crate) struct Finish {
    pub(crate) host_end_ns: u64,
    pub(crate) cupti_end: Option<u64>,
    pub(crate) open_scopes: Vec<u32>,
    pub(crate) counters: Option<IterationCounters>,
    pub(crate) stalls: Option<SampledIteration>,
    /// False when a sampled timeline left the open iteration untraced.
    pub(crate) traced: bool,
}

/// A closed scope instance, as the collector receives it.
#[derive(Debug)]
pub(crate) struct ScopeRecord {
    /// Interned path id (`step/backward`).
    pub(crate) path_id: u32,
    /// Iteration that was open when the scope was entered.
    pub(crate) iteration_at_entry: u64,
    /// Iteration that was open when the scope was left; the scope is accounted there.
    pub(crate) iteration: u64,
    /// Host time of entry, ns since the profiler started. On the scope's thread it is a raw
    /// reading of the run's scope clock (TSC ticks where scopes read the TSC), which the
    /// collector converts when it takes the record.
    pub(crate) start_ns: u64,
    /// Host time of exit, as `start_ns`.
    pub(crate) end_ns: u64,
    /// Start and end events when the scope was timed on a stream. Shared where one event ends
    /// a scope and starts the next ([`crate::ScopeGuard::next`]).
    pub(crate) events: Option<ScopeEvents>,
    /// Set when this guard was not the innermost open scope when it ended.
    pub(crate) out_of_order: bool,
    /// gpu-ledger's index of the thread the scope ran on.
    pub(crate) thread: u32,
    /// That thread's `crate::thread_slot::thread_key`, which its captured calls carry too.
    pub(crate) thread_key: u64,
}

/// A closed scope as its thread writes it into its ring: one 64-byte cache line, so that handing
/// it to the collector moves one line between cores (the [`ScopeRecord`] it becomes, 80 bytes,
/// spans two). The collector adds the thread, which its ring tells.
#[repr(C, align(64))]
pub(crate) struct ClosedScope {
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) iteration: u64,
    pub(crate) events: PackedEvents,
    pub(crate) path_id: u32,
    /// Iteration boundaries crossed while the scope was open (`iteration` minus the iteration
    /// at entry), saturating.
    pub(crate) boundaries: u32,
    /// [`ClosedScope::OUT_OF_ORDER`], [`ClosedScope::START_SHARED`], [`ClosedScope::END_SHARED`].
    pub(crate) flags: u8,
}

const _: () = assert!(std::mem::size_of::<ClosedScope>() == 64);

impl ClosedScope {
    pub(crate) const OUT_OF_ORDER: u8 = 1;
    pub(crate) const START_SHARED: u8 = 2;
    pub(crate) const END_SHARED: u8 = 4;

    /// The record the collector works with, for a scope closed on gpu-ledger's thread `thread`
    /// of key `thread_key`.
    pub(crate) fn into_record(self, thread: u32, thread_key: u64) -> ScopeRecord {
        let flag = |f: u8| self.flags & f != 0;
        ScopeRecord {
            path_id: self.path_id,
            iteration_at_entry: self.iteration - u64::from(self.boundaries),
            iteration: self.iteration,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            events: self
                .events
                .unpack(flag(Self::START_SHARED), flag(Self::END_SHARED)),
            out_of_order: flag(Self::OUT_OF_ORDER),
            thread,
            thread_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(flags: u8, iteration: u64, boundaries: u32) -> ClosedScope {
        ClosedScope {
            start_ns: 10,
            end_ns: 25,
            iteration,
            events: PackedEvents::NONE,
            path_id: 7,
            boundaries,
            flags,
        }
    }

    #[test]
    fn a_closed_scope_becomes_the_record_it_was_sent_as() {
        let rec = closed(ClosedScope::OUT_OF_ORDER, 9, 2).into_record(3, 8);
        assert_eq!(
            (rec.path_id, rec.iteration_at_entry, rec.iteration),
            (7, 7, 9)
        );
        assert_eq!(
            (rec.start_ns, rec.end_ns, rec.thread, rec.thread_key),
            (10, 25, 3, 8)
        );
        assert!(rec.out_of_order);
        assert!(rec.events.is_none());
        let rec = closed(0, 4, 0).into_record(0, 1);
        assert_eq!((rec.iteration_at_entry, rec.iteration), (4, 4));
        assert!(!rec.out_of_order);
    }

    #[test]
    fn the_shared_flags_reach_the_record_with_the_events() {
        let mut c = closed(ClosedScope::START_SHARED, 1, 0);
        c.events = crate::driver::events::tests::packed(1, 2, 10);
        let ev = c.into_record(0, 1).events.expect("events");
        assert!(ev.start_shared && !ev.end_shared);
        let mut c = closed(ClosedScope::END_SHARED | ClosedScope::OUT_OF_ORDER, 1, 0);
        c.events = crate::driver::events::tests::packed(1, 2, 10);
        let rec = c.into_record(0, 1);
        let ev = rec.events.expect("events");
        assert!(!ev.start_shared && ev.end_shared && rec.out_of_order);
    }

    #[test]
    fn an_iteration_with_nothing_extra_sends_no_box_and_one_with_anything_sends_it_whole() {
        assert!(IterationExtras::boxed(Vec::new(), None, None, None).is_none());
        let open = IterationExtras::boxed(vec![3], None, None, None);
        assert_eq!(open.expect("boxed").open_scopes, vec![3]);
        let warned = IterationExtras::boxed(Vec::new(), None, None, Some("switch failed".into()));
        assert_eq!(
            warned.expect("boxed").warning.as_deref(),
            Some("switch failed")
        );
        // The usual message is one cache line in the ring, aligned to it.
        assert_eq!(std::mem::size_of::<IterationEnd>(), 64);
        assert_eq!(std::mem::align_of::<IterationEnd>(), 64);
    }
}
