//! PC sampling inside a running [`crate::Profiler`]: which iterations are sampled (the window),
//! and the state that starts and stops CUPTI's sampling at their boundaries from the stepping
//! thread.
//!
//! A sampled iteration is one range: sampling starts after `step()`'s boundary timestamp and is
//! stopped and read (after synchronizing the context) before the next one, so that the cost of
//! reading falls inside the iteration, which is flagged `perturbed`. The iterations sampled are
//! a fixed window, or with a duty cycle those its scheduler opens (`duty.rs`), fed back the
//! written rows by the collector.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::duty::DutyCycle;
pub(crate) use super::duty::Planner;
use super::{PcSampler, PcSamplingConfig, RawRange, Sources};
use crate::error::{Error, Result};

/// Which iterations are PC-sampled: `iterations` of them after `skip` of warm-up, each sampled
/// as a range of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcSamplingWindow {
    /// Iterations before the first sampled one (warm-up: compilation, allocator, caches).
    pub skip: u64,
    /// Iterations sampled.
    pub iterations: u64,
}

impl Default for PcSamplingWindow {
    /// Skip 5 iterations of warm-up, then sample one.
    fn default() -> Self {
        PcSamplingWindow {
            skip: 5,
            iterations: 1,
        }
    }
}

impl PcSamplingWindow {
    /// The sampled iterations.
    pub fn range(&self) -> Range<u64> {
        self.skip..self.skip.saturating_add(self.iterations)
    }

    /// Whether iteration `index` is sampled.
    pub fn contains(&self, index: u64) -> bool {
        self.range().contains(&index)
    }
}

/// What the profiler is asked to PC-sample: the context, the sampler's settings, the window,
/// and the cubins of modules loaded before the profiler started.
#[derive(Debug, Clone)]
pub struct PcSamplingSetup {
    /// The CUDA context the application launches its work on (one per GPU can be sampled).
    pub context: Arc<CudaContext>,
    /// Period and buffers.
    pub config: PcSamplingConfig,
    /// Which iterations.
    pub window: PcSamplingWindow,
    /// Cubins of modules loaded before the profiler started: the profiler keeps those of the
    /// modules loaded while it runs itself (CUPTI's module-load callback), and a PC of a module
    /// it has no cubin for is reported without a source line.
    pub cubins: Vec<Arc<[u8]>>,
    /// Source text for files the line table names but that are not on disk where the run
    /// runs (a kernel embedded in the binary), by file name as the line table spells it.
    pub texts: Vec<(String, &'static str)>,
    /// Source lines kept per sampled function and iteration, most samples first.
    pub lines_per_kernel: usize,
    /// Windows of one iteration spread over the run at a set cost, instead of `window`.
    pub duty: Option<DutyCycle>,
}

impl PcSamplingSetup {
    /// PC sampling on `context` with CUPTI's settings and the default window.
    pub fn new(context: &Arc<CudaContext>) -> Self {
        PcSamplingSetup {
            context: context.clone(),
            config: PcSamplingConfig::default(),
            window: PcSamplingWindow::default(),
            cubins: Vec::new(),
            texts: Vec::new(),
            lines_per_kernel: 5,
            duty: None,
        }
    }

    /// Samples windows of one iteration spread over the run instead of the fixed `window`, at
    /// most `duty.budget` of the run's wall time, until the kernels that hold most of the
    /// device time have `duty.target_samples` each:
    ///
    /// ```rust,no_run
    /// use gpu_ledger::pcsampling::{DutyCycle, PcSamplingSetup};
    /// # fn f(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) {
    /// let setup = PcSamplingSetup::new(ctx).duty_cycle(DutyCycle {
    ///     budget: 0.01,
    ///     ..DutyCycle::default()
    /// });
    /// # }
    /// ```
    pub fn duty_cycle(mut self, duty: DutyCycle) -> Self {
        self.duty = Some(duty);
        self
    }

    /// How the header states it.
    fn describe(&self) -> String {
        if let Some(d) = &self.duty {
            return format!("{}; {}", d.describe(), self.config.describe());
        }
        let r = self.window.range();
        format!(
            "iterations {}..{} ({} from iteration {}), one range per iteration; {}",
            r.start,
            r.end,
            self.window.iterations,
            r.start,
            self.config.describe()
        )
    }
}

/// The run PC sampling goes into: whether it traces kernels, which iterations a sampled
/// timeline traces, and the counters window.
pub(crate) struct RunShape {
    /// The level traces kernels (the timeline and counters levels).
    pub(crate) timeline: bool,
    /// A sampled timeline's first untraced iteration before the window's end, and the
    /// timeline's description.
    pub(crate) untraced: Option<(u64, String)>,
    /// The iterations hardware counters are collected in.
    pub(crate) counters: Option<Range<u64>>,
    /// The timeline's sampling, described, when it samples.
    pub(crate) sampled_timeline: Option<String>,
}

/// The first iteration before `end` that `traces` leaves untraced.
pub(crate) fn first_untraced(end: u64, traces: impl Fn(u64) -> bool) -> Option<u64> {
    (0..end).find(|i| !traces(*i))
}

/// Refuses a duty cycle the run cannot honour: its windows may fall anywhere, so every
/// iteration must be traced.
fn validate_duty(duty: &DutyCycle, run: &RunShape) -> Result<()> {
    duty.validate()?;
    if let Some(described) = &run.sampled_timeline {
        return Err(Error::Config(format!(
            "duty-cycled PC sampling opens its windows anywhere in the run, but the timeline \
             samples ({described}): once tracing has been switched off and on, CUPTI's PC \
             samples carry no function and cannot be attributed. Trace every iteration (no \
             TimelineSampling), or sample a fixed PcSamplingWindow"
        )));
    }
    Ok(())
}

/// Refuses a window the run cannot honour.
fn validate(window: &PcSamplingWindow, lines_per_kernel: usize, run: &RunShape) -> Result<()> {
    if !run.timeline {
        return Err(Error::Config(
            "PC sampling attributes samples to scopes through the timeline's kernel records: \
             it needs Level::Timeline or Level::Counters, not Level::Scopes"
                .into(),
        ));
    }
    // Once CUPTI's tracing has been switched off and on again, PC samples come back without
    // their functions (all "non-user", measured with CUPTI 13.0): a sampled timeline must trace
    // every iteration up to the window's end.
    if let Some((i, described)) = run.untraced.as_ref().filter(|_| !window.range().is_empty()) {
        let end = window.range().end;
        return Err(Error::Config(format!(
            "PC sampling's window ends at iteration {end}, but the sampled timeline \
             ({described}) leaves iteration {i} untraced before it: once tracing has been \
             switched off and on, CUPTI's PC samples carry no function and cannot be \
             attributed. Trace every iteration up to the window's end \
             (TimelineSampling::and_window(0..{end})), or sample without a sampled timeline"
        )));
    }
    if let Some(c) = run.counters.clone() {
        let p = window.range();
        if c.start < p.end && p.start < c.end && !c.is_empty() && !p.is_empty() {
            return Err(Error::Config(format!(
                "PC sampling's window (iterations {}..{}) overlaps the counters window \
                 ({}..{}): both use the SMs' profiling hardware and replay or serialize \
                 differently; move one (PcSamplingWindow::skip or CounterWindow::skip)",
                p.start, p.end, c.start, c.end
            )));
        }
    }
    if lines_per_kernel == 0 {
        return Err(Error::Config(
            "PcSamplingSetup::lines_per_kernel is 0: keep at least the hottest line".into(),
        ));
    }
    Ok(())
}

/// Refuses sampling without start/stop control: samples still in the hardware buffer at a read
/// would land in the next iteration's row, and those left at the window's end would be lost.
fn refuse_free_running(config: &PcSamplingConfig) -> Result<()> {
    if config.free_running {
        return Err(Error::Config(
            "PcSamplingConfig::free_running is for a standalone PcSampler: a profiled run reads \
             one range per iteration, which needs start/stop control; leave it off"
                .into(),
        ));
    }
    Ok(())
}

/// PC sampling as a run starts it: the state for `step()`, the collector's sources, and what
/// the header says.
pub(crate) struct Started {
    pub(crate) state: Option<PcSamplingState>,
    pub(crate) collector: Option<CollectorSide>,
    pub(crate) describe: String,
    pub(crate) warning: Option<String>,
}

/// What the collector needs of PC sampling: the sources PCs are mapped through, the lines kept
/// per function, and the planner it hands each written row to.
pub(crate) struct CollectorSide {
    pub(crate) sources: Sources,
    pub(crate) lines_per_kernel: usize,
    pub(crate) planner: Arc<Mutex<Planner>>,
}

/// Refuses a setup a run of this shape cannot honour, and turns on the keeping of loaded
/// modules' cubins (before the timeline starts, whose callbacks keep them).
///
/// # Errors
/// [`Error::Config`] for a setup the run cannot honour.
pub(crate) fn prepare(setup: &PcSamplingSetup, run: &RunShape) -> Result<()> {
    match &setup.duty {
        Some(d) => {
            validate_duty(d, run)?;
            // The fixed window is not used: only its checks of the level and the lines.
            let none = PcSamplingWindow {
                skip: 0,
                iterations: 0,
            };
            validate(&none, setup.lines_per_kernel, run)?;
        }
        None => validate(&setup.window, setup.lines_per_kernel, run)?,
    }
    refuse_free_running(&setup.config)?;
    crate::cupti::pc_sampling::capture_cubins(true);
    Ok(())
}

/// Checks that PC sampling can be enabled for a run [`prepare`] accepted, by enabling and
/// disabling it once: a GPU that cannot be sampled (another client samples it, an unsupported
/// device) leaves the timeline running with the reason in the header. Sampling is enabled again
/// only for the window: while it is enabled CUPTI refuses to enable kernel tracing
/// (`CUPTI_ERROR_NOT_COMPATIBLE`), which a sampled timeline does between iterations. A duty
/// cycle leaves the iterations in `blocked` (the counters window) alone.
///
/// # Errors
/// [`Error::Config`] for settings CUPTI cannot take (a period out of range).
pub(crate) fn start(setup: &PcSamplingSetup, blocked: Option<Range<u64>>) -> Result<Started> {
    match PcSampler::new(&setup.context, setup.config) {
        Ok(s) => drop(s),
        Err(e @ Error::Config(_)) => {
            crate::cupti::pc_sampling::capture_cubins(false);
            return Err(e);
        }
        Err(e) => {
            crate::cupti::pc_sampling::capture_cubins(false);
            let why = format!("PC sampling is not collected (the timeline runs): {e}");
            return Ok(Started {
                state: None,
                collector: None,
                describe: format!("not collected: {e}"),
                warning: Some(why),
            });
        }
    };
    let mut sources = Sources::new();
    let mut warning = None;
    for cubin in &setup.cubins {
        if let Err(e) = sources.add_cubin(cubin.clone()) {
            warning = Some(format!(
                "a cubin given in PcSamplingSetup::cubins was refused, so its PCs have no source \
                 lines: {e}"
            ));
        }
    }
    for (file, text) in &setup.texts {
        sources.add_text(file, text);
    }
    let (context, config) = (setup.context.clone(), setup.config);
    let enable: EnableSampler = Box::new(move || {
        PcSampler::new(&context, config).map(|s| Box::new(s) as Box<dyn WindowSampler>)
    });
    let (state, planner) = PcSamplingState::new(
        enable,
        setup.window,
        setup.context.ordinal() as u32,
        setup.duty.map(|d| (d, blocked)),
    );
    Ok(Started {
        state: Some(state),
        collector: Some(CollectorSide {
            sources,
            lines_per_kernel: setup.lines_per_kernel,
            planner,
        }),
        describe: setup.describe(),
        warning,
    })
}

/// What the collector receives of a sampled iteration: the range CUPTI read, or why there is
/// none.
pub(crate) type SampledIteration = std::result::Result<RawRange, String>;

/// Sampling enabled on the run's context, as a window uses it: CUPTI's [`PcSampler`], or a fake
/// in the tests. Dropping it disables sampling.
pub(crate) trait WindowSampler: Send {
    /// Starts a range.
    fn start(&mut self) -> Result<()>;
    /// Synchronizes, stops the range and reads what it sampled.
    fn stop_and_read(&mut self) -> Result<RawRange>;
}

impl WindowSampler for PcSampler {
    fn start(&mut self) -> Result<()> {
        self.inner.start()
    }
    fn stop_and_read(&mut self) -> Result<RawRange> {
        self.stop_and_read_raw()
    }
}

/// Enables sampling for a window.
pub(crate) type EnableSampler = Box<dyn FnMut() -> Result<Box<dyn WindowSampler>> + Send>;

/// The PC sampling state of a running profiler, behind the profiler's lock.
pub(crate) struct PcSamplingState {
    enable: EnableSampler,
    /// Enabled from the first iteration of a run of window iterations to the last; with a duty
    /// cycle, for each window alone.
    sampler: Option<Box<dyn WindowSampler>>,
    window: PcSamplingWindow,
    /// The tally of the written rows and, with a duty cycle, the scheduler that opens windows.
    planner: Arc<Mutex<Planner>>,
    duty_cycled: bool,
    running: bool,
    /// After an error, sampling does not start again (the error is in the row).
    stopped: bool,
    begin_error: Option<String>,
}

impl PcSamplingState {
    /// The state of a run sampling `window`, or duty-cycled windows when `duty` is given, on
    /// the GPU of CUDA ordinal `device`; and the planner the collector feeds rows to.
    pub(crate) fn new(
        enable: EnableSampler,
        window: PcSamplingWindow,
        device: u32,
        duty: Option<(DutyCycle, Option<Range<u64>>)>,
    ) -> (Self, Arc<Mutex<Planner>>) {
        let planner = Arc::new(Mutex::new(Planner::new(device, duty)));
        let duty_cycled = planner.lock().is_duty_cycled();
        let state = PcSamplingState {
            enable,
            sampler: None,
            window,
            planner: planner.clone(),
            duty_cycled,
            running: false,
            stopped: false,
            begin_error: None,
        };
        (state, planner)
    }

    /// Whether iteration `index`, `elapsed_ns` into the run, is sampled.
    fn sampled(&self, index: u64, elapsed_ns: u64) -> bool {
        if self.duty_cycled {
            self.planner.lock().open_at(index, elapsed_ns)
        } else {
            self.window.contains(index)
        }
    }

    /// Iteration `index` begins, `elapsed_ns` into the run: enables sampling at a window's
    /// first iteration and starts a range when the window holds it.
    pub(crate) fn begin_iteration(&mut self, index: u64, elapsed_ns: u64) {
        if self.stopped || !self.sampled(index, elapsed_ns) {
            return;
        }
        if self.sampler.is_none() {
            match (self.enable)() {
                Ok(s) => self.sampler = Some(s),
                Err(e) => {
                    self.begin_error =
                        Some(self.stop(format!("PC sampling could not be enabled: {e}")));
                    return;
                }
            }
        }
        let Some(sampler) = self.sampler.as_mut() else {
            return;
        };
        if let Err(e) = sampler.start() {
            self.sampler = None;
            self.begin_error = Some(self.stop(format!("PC sampling could not start: {e}")));
            return;
        }
        self.running = true;
    }

    /// Iteration `index` ends, before its boundary timestamp: synchronizes the context, stops
    /// sampling and reads what it sampled, and disables sampling when the next iteration is
    /// not in the window (a duty cycle's windows are one iteration each; `last`: the run ends).
    /// `None` when it was not sampled.
    pub(crate) fn end_iteration(&mut self, index: u64, last: bool) -> Option<SampledIteration> {
        if let Some(e) = self.begin_error.take() {
            return Some(Err(e));
        }
        if !self.running {
            return None;
        }
        self.running = false;
        let sampler = self.sampler.as_mut()?;
        // The profile is made on the collector thread: here only CUPTI's read, which must
        // happen before the iteration's boundary.
        let read = sampler
            .stop_and_read()
            .map_err(|e| format!("PC sampling: stopping and reading failed: {e}"));
        if last || read.is_err() || self.duty_cycled || !self.window.contains(index + 1) {
            self.sampler = None;
        }
        Some(read.map_err(|e| self.stop(e)))
    }

    fn stop(&mut self, message: String) -> String {
        if !self.stopped {
            eprintln!("gpu-ledger: {message}; no further iteration is PC-sampled in this run");
        }
        self.stopped = true;
        message
    }
}

impl Drop for PcSamplingState {
    fn drop(&mut self) {
        crate::cupti::pc_sampling::capture_cubins(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_the_run_cannot_honour_is_refused_with_the_fix() {
        let w = PcSamplingWindow::default();
        let shape =
            |timeline, sampled: Option<(String, &dyn Fn(u64) -> bool)>, counters| RunShape {
                timeline,
                untraced: sampled
                    .and_then(|(d, traces)| Some((first_untraced(w.range().end, traces)?, d))),
                counters,
                sampled_timeline: None,
            };
        let scopes = validate(&w, 5, &shape(false, None, None)).unwrap_err();
        assert!(scopes.to_string().contains("Level::Timeline"), "{scopes}");
        let every_100 = |i: u64| i % 100 == 0;
        let sampled = Some(("1 in 100".to_string(), &every_100 as &dyn Fn(u64) -> bool));
        let untraced = validate(&w, 5, &shape(true, sampled, None)).unwrap_err();
        assert!(
            untraced.to_string().contains("iteration 1 untraced"),
            "{untraced}"
        );
        assert!(
            untraced.to_string().contains("and_window(0..6)"),
            "{untraced}"
        );
        let only_window = |i: u64| i % 100 == 0 || i == 5;
        let gap = Some(("1 in 100".to_string(), &only_window as &dyn Fn(u64) -> bool));
        assert!(validate(&w, 5, &shape(true, gap, None)).is_err());
        let with_window = |i: u64| i % 100 == 0 || i < 6;
        let covered = Some(("1 in 100".to_string(), &with_window as &dyn Fn(u64) -> bool));
        validate(&w, 5, &shape(true, covered, None)).unwrap();
        let overlap = validate(&w, 5, &shape(true, None, Some(4..8))).unwrap_err();
        assert!(overlap.to_string().contains("overlaps"), "{overlap}");
        validate(&w, 5, &shape(true, None, Some(6..8))).unwrap();
        assert!(validate(&w, 0, &shape(true, None, None)).is_err());
    }

    #[test]
    fn a_duty_cycle_is_refused_beside_a_sampled_timeline_and_with_settings_out_of_range() {
        let shape = |sampled: Option<&str>| RunShape {
            timeline: true,
            untraced: None,
            counters: Some(10..12),
            sampled_timeline: sampled.map(str::to_string),
        };
        let ok = DutyCycle::default();
        validate_duty(&ok, &shape(None)).unwrap();
        let e = validate_duty(&ok, &shape(Some("1 in 100"))).unwrap_err();
        assert!(e.to_string().contains("no TimelineSampling"), "{e}");
        for bad in [
            DutyCycle { budget: 0.0, ..ok },
            DutyCycle { budget: 1.5, ..ok },
            DutyCycle {
                coverage: 0.0,
                ..ok
            },
            DutyCycle {
                target_samples: 0,
                ..ok
            },
        ] {
            let e = validate_duty(&bad, &shape(None)).unwrap_err().to_string();
            assert!(e.contains("DutyCycle::"), "{e}");
        }
        assert!(
            ok.describe().contains("at most 1 % of the run"),
            "{}",
            ok.describe()
        );
    }

    #[test]
    fn a_profiled_run_refuses_sampling_without_start_stop_control() {
        let free = PcSamplingConfig {
            free_running: true,
            ..PcSamplingConfig::default()
        };
        let e = refuse_free_running(&free).unwrap_err().to_string();
        assert!(e.contains("start/stop control"), "{e}");
        refuse_free_running(&PcSamplingConfig::default()).unwrap();
    }

    #[test]
    fn the_window_holds_skip_to_skip_plus_iterations() {
        let w = PcSamplingWindow {
            skip: 3,
            iterations: 2,
        };
        assert!(!w.contains(2) && w.contains(3) && w.contains(4) && !w.contains(5));
        let none = PcSamplingWindow {
            skip: 3,
            iterations: 0,
        };
        assert!(none.range().is_empty());
    }
}
