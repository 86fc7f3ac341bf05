//! A loop whose idle time per iteration is known by construction, for `examples/idle_causes.rs`
//! and its GPU test (`tests/gpu/idle.rs`). Each iteration, on one stream (`a`) and a second one
//! (`b`) of device 0:
//!
//! 1. an empty kernel; then a scope `step/host_work` that busy-waits [`HOST_WORK`] (a host step
//!    between two phases); then an empty kernel: host_launch in `scope:step/host_work`;
//! 2. a host function on `b` that busy-waits [`SYNC_WAIT`], `cuStreamSynchronize(b)`, then an
//!    empty kernel on `a`: host_launch `blocked:synchronize` (the device has nothing to run while
//!    the host waits);
//! 3. a host function on `b` that busy-waits [`EVENT_WAIT`], an event recorded on `b` after it,
//!    `cuStreamWaitEvent(a)` and an empty kernel on `a`, launched at once: dependency `event`;
//! 4. a 30 µs spin, then a 4-byte device-to-host read into pageable memory (an `.item()`), then
//!    an empty kernel: the host's wake-up after the read, a few µs of `blocked:sync_copy`;
//! 5. `cuMemAlloc` of [`ALLOC_BYTES`], then an empty kernel: `blocked:allocation`;
//! 6. a [`QUEUE_SPIN`] spin and, queued behind it, [`BACK_TO_BACK`] empty kernels:
//!    launch_latency, each gap a dispatch (the host's time to queue them is measured, and a row
//!    where it reached the spin's length is reported: the device would have run ahead of the
//!    host, and the kernels' gaps would be the host's);
//! 7. `cuStreamSynchronize(a)` (the window ends), the allocation freed, `step()`.
//!
//! Every gap but the back-to-back ones ends with a kernel the host launched late, so besides
//! its constructed wait each holds the host's own work up to that launch: the launch call itself
//! (`host_launch launch_call`), and the code and calls between the wait's end and it, inside
//! the `step` scope (`host_launch scope:step`). The example counts these as one group, timed on
//! the host from each wait's end to the return of the launch that ends the gap.
//!
//! What each cause should measure is taken on the host (the busy waits, the blocking calls and
//! the host's own work timed by `Instant`) and from the dispatch floor the profiler's start-up
//! calibration measured, never from the split itself: [`compare`] sets them beside the row's
//! causes.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use gpu_ledger::ledger::idle::IdleGap;
use gpu_ledger::ledger::IterationRow;
use gpu_ledger::Profiler;

/// The host step between the first two phases.
pub const HOST_WORK: Duration = Duration::from_micros(200);
/// The host function the synchronize waits for.
pub const SYNC_WAIT: Duration = Duration::from_micros(300);
/// The host function the event is recorded after.
pub const EVENT_WAIT: Duration = Duration::from_micros(300);
/// The allocation made in the loop.
pub const ALLOC_BYTES: usize = 64 << 20;
/// Empty kernels queued back to back.
pub const BACK_TO_BACK: u64 = 200;
/// The spin the back-to-back kernels queue behind: several times what queueing them takes with
/// a profiler's callbacks on every launch (a few µs a launch), so that the device has them all
/// queued when it reaches them.
pub const QUEUE_SPIN: Duration = Duration::from_millis(3);
/// Gaps of an iteration whose next work the host launched late (phases 1 to 5 and the spin of
/// 6): each ends with a floor of dispatch latency after the launch call.
pub const LATE_LAUNCHES: u64 = 6;
/// Largest gaps the example keeps per row: the five the phases make, and room.
pub const LARGEST_GAPS: usize = 8;

const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry idle_empty()
{
    ret;
}

.visible .entry idle_spin(
    .param .u64 idle_spin_cycles
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [idle_spin_cycles];
    mov.u64 %rd2, %clock64;
$L_spin:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra $L_spin;
    ret;
}
"#;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn check(what: &str, r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {r:?}").into())
    }
}

/// A host function's busy wait and when it ended (ns since `origin`).
struct HostWait {
    origin: Instant,
    wait: Duration,
    end_ns: AtomicU64,
}

extern "C" fn host_wait(user: *mut c_void) {
    // SAFETY: `user` is a `HostWait` of the workload, which outlives every host function it
    // enqueues (each iteration synchronizes both streams before the next one).
    let w = unsafe { &*(user as *const HostWait) };
    let t = Instant::now();
    while t.elapsed() < w.wait {
        std::hint::spin_loop();
    }
    w.end_ns
        .store(w.origin.elapsed().as_nanos() as u64, Ordering::Release);
}

/// What an iteration's causes should measure, from the host's own timing, ns.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected {
    /// The scope's busy wait.
    pub host_work: u64,
    /// `cuStreamSynchronize(b)`, entry to exit.
    pub synchronize: u64,
    /// From the return of the launch of the kernel that waits on the event to the end of the
    /// host function the event is recorded after.
    pub event: u64,
    /// `cuMemAlloc`, entry to exit.
    pub allocation: u64,
    /// The host's time from the return of the event phase's first launch to the call that
    /// launches the kernel waiting on the event: the host's own work inside that gap.
    pub before_wait_launch: u64,
    /// The host's own work in the gaps it was late for: from each constructed wait's end to the
    /// return of the launch that ends the gap.
    pub own_work: u64,
    /// The host's time from the spin's launch to the return of the last back-to-back launch.
    pub queued: u64,
}

/// The device, its two streams, kernels, event, host functions and the 4-byte buffer.
pub struct Workload {
    a: Arc<CudaStream>,
    b: Arc<CudaStream>,
    empty: CudaFunction,
    spin: CudaFunction,
    /// SM clock, kHz.
    khz: f64,
    event: sys::CUevent,
    sync_wait: Box<HostWait>,
    event_wait: Box<HostWait>,
    word: sys::CUdeviceptr,
    origin: Instant,
}

impl Workload {
    /// Loads the kernels on `ctx` and makes the streams, the event and the 4-byte buffer.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        // No event records of cudarc's own around each launch: the iteration's calls are the
        // ones listed above.
        // SAFETY: the workload synchronizes its streams before reusing or freeing memory.
        unsafe { ctx.disable_event_tracking() };
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(PTX))?;
        let khz = f64::from(
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?
                .max(1),
        );
        let mut event = std::ptr::null_mut();
        let mut word = 0;
        // SAFETY: out-pointers valid; the context is current (cudarc binds it).
        unsafe {
            check(
                "cuEventCreate",
                sys::cuEventCreate(
                    &mut event,
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                ),
            )?;
            check("cuMemAlloc", sys::cuMemAlloc_v2(&mut word, 4))?;
        }
        let origin = Instant::now();
        let wait = |wait| {
            Box::new(HostWait {
                origin,
                wait,
                end_ns: AtomicU64::new(0),
            })
        };
        Ok(Workload {
            a: ctx.new_stream()?,
            b: ctx.new_stream()?,
            empty: module.load_function("idle_empty")?,
            spin: module.load_function("idle_spin")?,
            khz,
            event,
            sync_wait: wait(SYNC_WAIT),
            event_wait: wait(EVENT_WAIT),
            word,
            origin,
        })
    }

    fn empty(&self) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `idle_empty` takes no parameters.
        unsafe { self.a.launch_builder(&self.empty).launch(cfg) }?;
        Ok(())
    }

    fn spin(&self, us: f64) -> Result<()> {
        let cycles = (us * self.khz / 1_000.0) as u64;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `idle_spin` takes one u64.
        unsafe { self.a.launch_builder(&self.spin).arg(&cycles).launch(cfg) }?;
        Ok(())
    }

    fn host_function(&self, w: &HostWait) -> Result<()> {
        // SAFETY: `w` is boxed in the workload and outlives the stream's work (see host_wait).
        check("cuLaunchHostFunc", unsafe {
            sys::cuLaunchHostFunc(
                self.b.cu_stream(),
                Some(host_wait),
                w as *const HostWait as *mut c_void,
            )
        })
    }

    fn since_origin(&self, t: Instant) -> u64 {
        t.duration_since(self.origin).as_nanos() as u64
    }

    /// An empty kernel that ends a gap the host was late for; the host's time from `since` (the
    /// end of the gap's constructed wait) to the launch's return is its own work in the gap.
    /// Returns when the launch returned.
    fn late_empty(&self, since: Instant, e: &mut Expected) -> Result<Instant> {
        self.empty()?;
        let done = Instant::now();
        e.own_work += ns(done - since);
        Ok(done)
    }

    /// One iteration, ended by `profiler.step()`; what its causes should measure.
    pub fn iteration(&mut self, profiler: &Profiler) -> Result<Expected> {
        let mut e = Expected::default();
        let step = Profiler::scope("step");
        // 1. A host step between two phases.
        self.empty()?;
        {
            let _s = Profiler::scope("host_work");
            let t = Instant::now();
            while t.elapsed() < HOST_WORK {
                std::hint::spin_loop();
            }
            e.host_work = ns(t.elapsed());
        }
        let launched = self.late_empty(Instant::now(), &mut e)?;
        // 2. A synchronize, then a launch (the event phase's first kernel).
        self.host_function(&self.sync_wait)?;
        let t = Instant::now();
        e.own_work += ns(t - launched);
        // SAFETY: a stream of the workload's context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.b.cu_stream())
        })?;
        let returned = Instant::now();
        e.synchronize = ns(returned - t);
        let launched = self.late_empty(returned, &mut e)?;
        // 3. A kernel waiting on an event recorded on the other stream after a host function.
        let waiting_launched = self.event_phase(launched, &mut e)?;
        // 4. A 4-byte read into pageable memory, after a short kernel.
        self.spin(30.0)?;
        let mut word = 0u32;
        // SAFETY: `word` is 4 writable bytes; the copy into pageable memory returns once done.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                (&mut word as *mut u32).cast(),
                self.word,
                4,
                self.a.cu_stream(),
            )
        })?;
        let launched = self.late_empty(Instant::now(), &mut e)?;
        // 5. An allocation in the loop.
        let mut block = 0;
        let t = Instant::now();
        e.own_work += ns(t - launched);
        // SAFETY: out-pointer valid.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut block, ALLOC_BYTES)
        })?;
        let returned = Instant::now();
        e.allocation = ns(returned - t);
        let launched = self.late_empty(returned, &mut e)?;
        // 6. Empty kernels back to back, queued behind a spin.
        self.back_to_back(launched, &mut e)?;
        // 7. The end of the step: the host waits for the device, frees, steps.
        // SAFETY: streams of the workload's context; `block` is not used by queued work.
        unsafe {
            check(
                "cuStreamSynchronize",
                sys::cuStreamSynchronize(self.a.cu_stream()),
            )?;
            check(
                "cuStreamSynchronize",
                sys::cuStreamSynchronize(self.b.cu_stream()),
            )?;
            check("cuMemFree", sys::cuMemFree_v2(block))?;
        }
        let event_end = self.event_wait.end_ns.load(Ordering::Acquire);
        e.event = event_end.saturating_sub(self.since_origin(waiting_launched));
        drop(step);
        profiler.step();
        Ok(e)
    }

    /// Phase 3 after its first kernel (launched, returning at `first`): a host function on `b`,
    /// an event recorded after it, `a` made to wait on the event, and the kernel that waits.
    /// Returns when the waiting kernel's launch returned.
    fn event_phase(&self, first: Instant, e: &mut Expected) -> Result<Instant> {
        self.host_function(&self.event_wait)?;
        // SAFETY: the event and the streams belong to the workload's context.
        unsafe {
            check(
                "cuEventRecord",
                sys::cuEventRecord(self.event, self.b.cu_stream()),
            )?;
            check(
                "cuStreamWaitEvent",
                sys::cuStreamWaitEvent(self.a.cu_stream(), self.event, 0),
            )?;
        }
        e.before_wait_launch = ns(first.elapsed());
        self.late_empty(first, e)
    }

    /// Phase 6 after the allocation's kernel (its launch returning at `launched`): the spin, a
    /// late launch, then the back-to-back kernels queued behind it, and how long queueing took.
    fn back_to_back(&self, launched: Instant, e: &mut Expected) -> Result<()> {
        let t = Instant::now();
        self.spin(QUEUE_SPIN.as_secs_f64() * 1e6)?;
        e.own_work += ns(t.elapsed() + (t - launched));
        for _ in 0..BACK_TO_BACK {
            self.empty()?;
        }
        e.queued = ns(t.elapsed());
        Ok(())
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        // SAFETY: both streams are synchronized at the end of every iteration; nothing uses
        // the event or the buffer after this.
        unsafe {
            let _ = sys::cuEventDestroy_v2(self.event);
            let _ = sys::cuMemFree_v2(self.word);
        }
    }
}

/// One cause's expected and measured idle time in a row, ns.
#[derive(Debug, Clone)]
pub struct Line {
    pub name: &'static str,
    pub expected: u64,
    pub measured: u64,
}

/// A row's causes beside what they should be.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub idle_ns: u64,
    /// 5 % of the row's idle time, or 5 µs, whichever is larger.
    pub tolerance_ns: u64,
    pub lines: Vec<Line>,
    /// The causes add up to `idle_ns`.
    pub adds_up: bool,
    /// The gap before the window (outside `idle_ns`), ns.
    pub lead_in_ns: Option<u64>,
    /// What `other` holds: each cause, detail and rule no group takes, with its ns.
    pub other_parts: Vec<(String, u64)>,
    /// The host's own time inside the event phase's gap, ns ([`Expected::before_wait_launch`]).
    pub before_wait_launch_ns: u64,
    /// The host's time to queue the back-to-back kernels, ns ([`Expected::queued`]).
    pub queued_ns: u64,
}

impl Comparison {
    /// Whether the back-to-back kernels were all queued before the spin ahead of them ended:
    /// when not, the row does not hold the profile it was built to hold.
    pub fn queued_in_time(&self) -> bool {
        self.queued_ns < QUEUE_SPIN.as_nanos() as u64
    }

    /// The lines off by more than the tolerance.
    pub fn missed(&self) -> Vec<&Line> {
        self.lines
            .iter()
            .filter(|l| l.measured.abs_diff(l.expected) > self.tolerance_ns)
            .collect()
    }
}

/// The groups the comparison sums causes by: `(name, cause, details)`; an empty `details`
/// matches any detail. What no group takes is `other`, expected 0.
const GROUPS: [(&str, &str, &[&str]); 7] = [
    (
        "host_launch scope:step/host_work",
        "host_launch",
        &["scope:step/host_work"],
    ),
    (
        "host_launch blocked:synchronize",
        "host_launch",
        &["blocked:synchronize"],
    ),
    ("dependency event", "dependency", &["event"]),
    (
        "host_launch blocked:sync_copy",
        "host_launch",
        &["blocked:sync_copy"],
    ),
    (
        "host_launch blocked:allocation",
        "host_launch",
        &["blocked:allocation"],
    ),
    (
        "host_launch own work (launch_call, scope:step)",
        "host_launch",
        &["launch_call", "scope:step"],
    ),
    ("launch_latency", "launch_latency", &[]),
];

/// Row `row`'s device-0 causes beside `expected`, with `median_gap_ns` the calibration's median
/// gap between back-to-back empty kernels; `None` for a row without a breakdown.
pub fn compare(row: &IterationRow, expected: &Expected, median_gap_ns: u64) -> Option<Comparison> {
    let d = row.devices.iter().find(|d| d.device_id == 0)?;
    let idle = d.idle.as_ref()?;
    let want = [
        expected.host_work,
        expected.synchronize,
        expected.event,
        0,
        expected.allocation,
        expected.own_work,
        BACK_TO_BACK * median_gap_ns + LATE_LAUNCHES * idle.floor_ns,
    ];
    let mut lines: Vec<Line> = GROUPS
        .iter()
        .zip(want)
        .map(|(&(name, _, _), expected)| Line {
            name,
            expected,
            measured: 0,
        })
        .collect();
    let mut other = 0;
    let mut other_parts = Vec::new();
    for c in &idle.causes {
        let group = GROUPS.iter().position(|&(_, cause, details)| {
            c.cause == cause
                && (details.is_empty() || details.iter().any(|d| c.detail.as_deref() == Some(d)))
        });
        match group {
            Some(i) => lines[i].measured += c.ns,
            None => {
                other += c.ns;
                let detail = c.detail.as_deref().unwrap_or("-");
                other_parts.push((format!("{} {detail} ({})", c.cause, c.rule), c.ns));
            }
        }
    }
    lines.push(Line {
        name: "other",
        expected: 0,
        measured: other,
    });
    let sum: u64 = idle.causes.iter().map(|c| c.ns).sum();
    Some(Comparison {
        idle_ns: d.idle_ns,
        tolerance_ns: (d.idle_ns / 20).max(5_000),
        lines,
        adds_up: sum == d.idle_ns,
        lead_in_ns: idle.lead_in.as_ref().map(|g| g.ns),
        other_parts,
        before_wait_launch_ns: expected.before_wait_launch,
        queued_ns: expected.queued,
    })
}

/// Which of the five phases the row's largest gaps name: the sleeping scope, the synchronize,
/// the 4-byte read, the allocation and the event wait.
pub fn named_in_largest_gaps(row: &IterationRow) -> [(&'static str, bool); 5] {
    let gaps: &[IdleGap] = row
        .devices
        .iter()
        .find(|d| d.device_id == 0)
        .and_then(|d| d.idle.as_ref())
        .map_or(&[], |i| &i.largest_gaps[..]);
    let any = |f: &dyn Fn(&IdleGap) -> bool| gaps.iter().any(f);
    [
        (
            "the host scope step/host_work",
            any(&|g| g.scope.as_deref() == Some("step/host_work")),
        ),
        (
            "the synchronize",
            any(&|g| {
                g.detail.as_deref() == Some("blocked:synchronize")
                    && g.function
                        .as_deref()
                        .is_some_and(|f| f.contains("StreamSynchronize"))
            }),
        ),
        (
            "the 4-byte read",
            any(&|g| {
                g.function
                    .as_deref()
                    .is_some_and(|f| f.contains("MemcpyDtoH"))
                    && g.bytes == Some(4)
            }),
        ),
        (
            "the allocation",
            any(&|g| {
                g.function
                    .as_deref()
                    .is_some_and(|f| f.contains("MemAlloc"))
            }),
        ),
        (
            "the event wait",
            any(&|g| g.cause == "dependency" && g.detail.as_deref() == Some("event")),
        ),
    ]
}

/// The comparison as a table.
pub fn print(index: u64, c: &Comparison) {
    println!(
        "iteration {index}: idle {:.1} µs, tolerance {:.1} µs, lead-in {}",
        c.idle_ns as f64 / 1e3,
        c.tolerance_ns as f64 / 1e3,
        c.lead_in_ns
            .map_or("none".into(), |ns| format!("{:.1} µs", ns as f64 / 1e3))
    );
    println!(
        "  {:<36} {:>12} {:>12} {:>10}  within",
        "cause", "expected µs", "measured µs", "diff µs"
    );
    for l in &c.lines {
        let diff = l.measured as f64 - l.expected as f64;
        println!(
            "  {:<36} {:>12.1} {:>12.1} {:>+10.1}  {}",
            l.name,
            l.expected as f64 / 1e3,
            l.measured as f64 / 1e3,
            diff / 1e3,
            if diff.abs() <= c.tolerance_ns as f64 {
                "yes"
            } else {
                "NO"
            }
        );
    }
    for (what, ns) in &c.other_parts {
        println!("    other: {what} {:.1} µs", *ns as f64 / 1e3);
    }
    println!(
        "  host: {:.1} µs of its own work before launching the kernel that waits on the event; \
         {BACK_TO_BACK} launches queued in {:.1} µs behind a {} µs spin: {}",
        c.before_wait_launch_ns as f64 / 1e3,
        c.queued_ns as f64 / 1e3,
        QUEUE_SPIN.as_micros(),
        if c.queued_in_time() {
            "in time"
        } else {
            "NOT in time (the device ran ahead of the host)"
        }
    );
    println!(
        "  causes add up to idle_ns: {}",
        if c.adds_up { "yes" } else { "NO" }
    );
}
