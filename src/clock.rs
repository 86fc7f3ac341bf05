//! Host clocks: the one scope guards read and its conversion to nanoseconds since the profiler
//! started, the wall clock, and a thread's CPU time.
//!
//! A scope reads the host clock twice, and a `clock_gettime` read (`Instant::now`) is a large part
//! of a scope's 100 ns budget (`benches/scope_overhead.rs` prints both). Where the kernel itself
//! keeps time with the TSC (`current_clocksource` is
//! `tsc`: the kernel found it constant-rate and synchronized across CPUs, and its vDSO reads it
//! too), scopes read the TSC directly and the collector converts the readings.
//!
//! The conversion interpolates between anchors, pairs of (TSC, `Instant`) readings the collector
//! takes each time it drains the scope rings (every 2 ms), so it follows `CLOCK_MONOTONIC` as NTP
//! slews it, where a single calibrated rate drifts from it by tens of µs a second.
//! Everywhere else scopes read `Instant` and no conversion happens.

use std::collections::VecDeque;
use std::time::Instant;

/// Which clock scopes read (`ThreadScopes::clock` in `crate::scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockSource {
    /// The time-stamp counter, in ticks; converted by [`TickConverter`].
    Tsc,
    /// `Instant` (`CLOCK_MONOTONIC`), already ns since the origin.
    Monotonic,
}

impl ClockSource {
    /// The name the ledger's trailer and the benchmarks print.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClockSource::Tsc => "tsc",
            ClockSource::Monotonic => "monotonic",
        }
    }
}

/// A reading of both clocks at (nearly) one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// TSC ticks.
    pub tsc: u64,
    /// ns since the profiler's origin.
    pub ns: u64,
}

/// The clock of one profiler run: its origin, and the source scopes read.
pub(crate) struct HostClock {
    origin: Instant,
    /// Where scopes read the TSC: both clocks read at the start (the converter's first
    /// anchor). `None` where scopes read `Instant`.
    tsc_start: Option<Anchor>,
}

impl HostClock {
    /// The TSC where the kernel keeps time with it (x86-64 only), else `Instant`.
    pub(crate) fn new(origin: Instant) -> Self {
        let tsc = cfg!(target_arch = "x86_64") && kernel_clocksource().as_deref() == Some("tsc");
        HostClock {
            origin,
            tsc_start: tsc.then(|| anchor_at(origin)),
        }
    }

    /// A clock that reads `Instant` only (the offline collector, and hosts without a usable TSC).
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn monotonic(origin: Instant) -> Self {
        HostClock {
            origin,
            tsc_start: None,
        }
    }

    pub(crate) fn source(&self) -> ClockSource {
        match self.tsc_start {
            Some(_) => ClockSource::Tsc,
            None => ClockSource::Monotonic,
        }
    }

    /// The scope clock now: TSC ticks where scopes read the TSC, else ns since the origin.
    /// Cheaper than [`now_ns`](Self::now_ns) (no `clock_gettime`, whose code and data are cold
    /// lines right after an application's synchronize); [`converter`](Self::converter) turns
    /// readings into ns.
    #[inline]
    pub(crate) fn raw_now(&self) -> u64 {
        if self.tsc_start.is_some() {
            tsc()
        } else {
            self.now_ns()
        }
    }

    /// A duration of `raw` scope clock units in ns, at the run's average TSC rate so far.
    pub(crate) fn raw_duration_ns(&self, raw: u64) -> u64 {
        match self.tsc_start {
            Some(start) => (raw as f64 * rate(start, anchor_at(self.origin))).round() as u64,
            None => raw,
        }
    }

    /// What converts this clock's readings to ns: `None` where they are ns already.
    pub(crate) fn converter(&self) -> Option<TickConverter> {
        self.tsc_start.map(TickConverter::new)
    }

    /// ns since the origin, through `Instant`.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        ns_since(self.origin)
    }

    /// Both clocks at one moment (see [`anchor_at`]).
    pub(crate) fn anchor(&self) -> Anchor {
        anchor_at(self.origin)
    }
}

/// The clock the API callback stamps calls with (`crate::cupti::calls`): the scope clock's raw
/// reading, the same units the collector converts for scopes, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallClock {
    /// Calls carry no time (idle causes off).
    Off,
    /// TSC ticks.
    Tsc,
    /// ns since the origin.
    Monotonic(Instant),
}

impl CallClock {
    /// A reading, never 0 (which means "not read").
    #[inline]
    pub(crate) fn raw_now(self) -> u64 {
        match self {
            CallClock::Off => 0,
            CallClock::Tsc => tsc().max(1),
            CallClock::Monotonic(origin) => ns_since(origin).max(1),
        }
    }
}

impl HostClock {
    /// The call clock of this run: the scope clock when `on`, else [`CallClock::Off`].
    pub(crate) fn call_clock(&self, on: bool) -> CallClock {
        match (on, self.tsc_start) {
            (false, _) => CallClock::Off,
            (true, Some(_)) => CallClock::Tsc,
            (true, None) => CallClock::Monotonic(self.origin),
        }
    }
}

fn ns_since(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

/// The TSC and ns since `origin` at one moment: of three tries, the one whose two TSC reads
/// around the `Instant` read are closest (a try the thread was preempted in is far off).
fn anchor_at(origin: Instant) -> Anchor {
    let mut best: Option<(u64, Anchor)> = None;
    for _ in 0..3 {
        let before = tsc();
        let ns = ns_since(origin);
        let after = tsc();
        let width = after.wrapping_sub(before);
        let anchor = Anchor {
            tsc: before + width / 2,
            ns,
        };
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, anchor));
        }
    }
    best.map(|(_, a)| a).expect("three tries")
}

/// The kernel's clock source, `None` where it cannot be read (not Linux).
pub(crate) fn kernel_clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(unsafe_code)]
pub(crate) fn tsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 processor and only reads the time-stamp counter
    // into registers: no memory is touched, no precondition to uphold.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub(crate) fn tsc() -> u64 {
    0
}

/// Anchors kept for interpolation: 1 to 2 s of the collector's 2 ms ticks (an anchor each tick as
/// it drains the scope rings, and one after it drains `step()`'s iteration ends when there are
/// any). Older readings (a scope open longer than that) are extrapolated with the rate over the
/// whole run.
const ANCHORS_KEPT: usize = 1024;

/// Converts TSC readings of the scope clock to ns since the origin, on the collector thread.
pub(crate) struct TickConverter {
    /// The anchor taken when the run started.
    first: Anchor,
    /// The most recent anchors, oldest first, TSC increasing.
    recent: VecDeque<Anchor>,
    /// Whether anchors were let go (`recent` no longer reaches back to `first`).
    forgot: bool,
}

impl TickConverter {
    /// A converter from an anchor taken at the run's start.
    fn new(first: Anchor) -> Self {
        TickConverter {
            first,
            recent: VecDeque::new(),
            forgot: false,
        }
    }

    /// Adds an anchor taken now (after every anchor so far).
    pub(crate) fn push(&mut self, anchor: Anchor) {
        let last = self.recent.back().copied().unwrap_or(self.first);
        if anchor.tsc <= last.tsc || anchor.ns < last.ns {
            return; // not later than the last one: it adds nothing to interpolate with
        }
        if self.recent.len() == ANCHORS_KEPT {
            self.recent.pop_front();
            self.forgot = true;
        }
        self.recent.push_back(anchor);
    }

    /// ns since the origin of a reading `raw` of the scope clock.
    pub(crate) fn to_ns(&self, raw: u64) -> u64 {
        let Some(&last) = self.recent.back() else {
            // No second anchor yet: nothing to take a rate from. The collector pushes an
            // anchor before it converts anything, so this is only reached with no readings.
            return self.first.ns;
        };
        // The segment that holds `raw`: between the last anchor at or before it and the next.
        // Most readings are from the last tick: the newest two anchors are tried first.
        let n = self.recent.len();
        let next = if raw >= last.tsc {
            n
        } else if n >= 2 && raw >= self.recent[n - 2].tsc {
            n - 1
        } else {
            self.recent.partition_point(|a| a.tsc <= raw)
        };
        let (a, b) = match next {
            0 => {
                // Before every kept anchor: from the start of the run when it is that old,
                // else from the oldest kept one at the run's average rate.
                let oldest = self.recent[0];
                if raw >= self.first.tsc && !self.forgot {
                    (self.first, oldest)
                } else {
                    return extrapolate(oldest, rate(self.first, last), raw);
                }
            }
            n if n == self.recent.len() => {
                // After the newest anchor (a scope closed while the collector drained):
                // the newest segment's rate.
                let before = if n >= 2 {
                    self.recent[n - 2]
                } else {
                    self.first
                };
                return extrapolate(last, rate(before, last), raw);
            }
            n => (self.recent[n - 1], self.recent[n]),
        };
        extrapolate(a, rate(a, b), raw)
    }
}

/// ns per tick between two anchors.
fn rate(a: Anchor, b: Anchor) -> f64 {
    let ticks = b.tsc.saturating_sub(a.tsc);
    if ticks == 0 {
        return 0.0;
    }
    b.ns.saturating_sub(a.ns) as f64 / ticks as f64
}

/// The ns of reading `raw`, from anchor `a` at `rate` ns per tick (before `a` as well).
fn extrapolate(a: Anchor, rate: f64, raw: u64) -> u64 {
    let ticks = raw as i128 - a.tsc as i128;
    let ns = a.ns as f64 + ticks as f64 * rate;
    ns.round().max(0.0) as u64
}

/// CPU time consumed by the calling thread so far, ns (from /proc/thread-self/schedstat on Linux;
/// 0 where that is not available).
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anchor(tsc: u64, ns: u64) -> Anchor {
        Anchor { tsc, ns }
    }

    #[test]
    fn monotonic_readings_need_no_conversion() {
        assert!(HostClock::monotonic(Instant::now()).converter().is_none());
    }

    #[test]
    fn readings_between_anchors_follow_each_segment_rate() {
        // 2 ticks per ns for the first 1000 ns, then 4 ticks per ns (as when NTP slews the
        // monotonic clock against the TSC, exaggerated).
        let mut c = TickConverter::new(anchor(10_000, 0));
        c.push(anchor(12_000, 1_000));
        c.push(anchor(16_000, 2_000));
        assert_eq!(c.to_ns(10_000), 0);
        assert_eq!(c.to_ns(11_000), 500);
        assert_eq!(c.to_ns(12_000), 1_000);
        assert_eq!(c.to_ns(14_000), 1_500);
        assert_eq!(c.to_ns(16_000), 2_000);
        // After the newest anchor: the newest segment's rate.
        assert_eq!(c.to_ns(18_000), 2_500);
    }

    #[test]
    fn anchors_out_of_order_are_ignored() {
        let mut c = TickConverter::new(anchor(1_000, 0));
        c.push(anchor(2_000, 1_000));
        c.push(anchor(1_500, 1_200)); // earlier TSC than the last: dropped
        c.push(anchor(3_000, 900)); // earlier ns than the last: dropped
        assert_eq!(c.recent.len(), 1);
        assert_eq!(c.to_ns(1_500), 500);
    }

    #[test]
    fn readings_older_than_the_kept_anchors_use_the_run_rate() {
        let mut c = TickConverter::new(anchor(0, 0));
        // 3 ticks per ns throughout; more anchors than are kept.
        for i in 1..=(ANCHORS_KEPT as u64 + 10) {
            c.push(anchor(3_000 * i, 1_000 * i));
        }
        assert_eq!(c.recent.len(), ANCHORS_KEPT);
        assert_eq!(c.to_ns(3_000), 1_000);
        assert_eq!(c.to_ns(30), 10);
    }

    #[test]
    fn anchors_read_both_clocks_together() {
        let clock = HostClock::new(Instant::now());
        let a = clock.anchor();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = clock.anchor();
        assert!(b.ns >= a.ns + 20_000_000, "{a:?} {b:?}");
        if clock.source() == ClockSource::Tsc {
            // The TSC advanced too, and a reading taken between them converts to between them.
            assert!(b.tsc > a.tsc);
            let mut c = TickConverter::new(a);
            c.push(b);
            let mid = c.to_ns(a.tsc + (b.tsc - a.tsc) / 2);
            assert!(mid > a.ns && mid < b.ns, "{mid} not within {a:?}..{b:?}");
        }
    }
}
