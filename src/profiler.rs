//! The profiler's wiring: start (CUPTI session, ledger writer, collector thread, NVML sampler,
//! counters, signals), `step()` and finish, and the one shutdown that `finish()`, drop and the
//! signal thread share.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

use crate::config::{
    apply_level_override, config_record, resolve_ledger_path, Config, Level, ProfilerBuilder,
    LEVEL_ENV,
};
use crate::cupti;
use crate::cupti::activity::TimelineSession;
use crate::driver::events::StreamRef;
use crate::error::{Error, Result};
use crate::ledger::schema::{ConfigRecord, Header, LedgerLine, Trailer, SCHEMA_VERSION};
use crate::run::{self, RunState, ENABLED};
use crate::scope::{self, ScopeGuard};
use crate::writer::LedgerWriter;

mod start;

/// What a finished run produced.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Where the ledger was written; `None` when none was (`GPU_LEDGER_LEVEL=off`).
    pub ledger_path: Option<PathBuf>,
    /// The trailer that closes the ledger.
    pub trailer: Trailer,
}

impl RunSummary {
    /// Reads the ledger the run wrote.
    ///
    /// # Errors
    /// [`Error::Config`] when no ledger was written (`GPU_LEDGER_LEVEL=off`); [`Error::Ledger`]
    /// when it does not read.
    pub fn read_ledger(&self) -> Result<crate::Ledger> {
        let path = self.ledger_path.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "no ledger was written ({LEVEL_ENV}=off): unset {LEVEL_ENV} to profile the run"
            ))
        })?;
        Ok(crate::read_ledger(path)?)
    }
}

/// An in-process GPU profiler. One runs per process at a time.
///
/// ```no_run
/// use gpu_ledger::{Level, Profiler};
/// let profiler = Profiler::builder().level(Level::Timeline).ledger_path("run.jsonl").start()?;
/// for _ in 0..10 {
///     let _step = Profiler::scope("step");
///     {
///         let _fwd = Profiler::scope("forward");
///         // launch kernels ...
///     }
///     drop(_step);
///     profiler.step();
/// }
/// let summary = profiler.finish()?;
/// if let Some(path) = &summary.ledger_path {
///     println!("ledger at {}", path.display());
/// }
/// # Ok::<(), gpu_ledger::Error>(())
/// ```
#[must_use = "a Profiler records until finish() or drop: bind it (let profiler = ...)"]
pub struct Profiler {
    /// The running profiler's shared state (`None` when inert, and once finished).
    running: Option<Arc<RunState>>,
    /// What shutdown takes, shared with the signal thread.
    slot: Arc<Lifecycle>,
    /// SIGINT/SIGTERM handling (`flush_on_signal`), stopped after shutdown.
    signals: Option<crate::signals::Watch>,
    /// Where the ledger goes; `None` when profiling is off and none is written.
    ledger_path: Option<PathBuf>,
    /// Why profiling is off, when `fail_open` kept the application running.
    disabled_reason: Option<String>,
    /// The ledger of a run that `fail_open` kept going unprofiled: its `step()` calls are
    /// counted, so that the trailer says how many iterations ran without rows.
    unprofiled: Option<Unprofiled>,
}

/// A run that `fail_open` kept going without the profiler: the ledger's header is written at
/// start, the trailer at the end with the iterations that ran.
struct Unprofiled {
    writer: parking_lot::Mutex<Option<LedgerWriter>>,
    reason: String,
    steps: std::sync::atomic::AtomicU64,
}

impl Unprofiled {
    /// Writes the trailer: the iterations `step()` ended, none of which has a row.
    fn close(&self) -> Result<()> {
        let Some(writer) = self.writer.lock().take() else {
            return Ok(());
        };
        let steps = self.steps.load(std::sync::atomic::Ordering::Relaxed);
        writer.send(LedgerLine::Trailer(Trailer {
            iterations: steps,
            warnings: vec![format!(
                "{}; the application ran {steps} {} unprofiled, which {} no {}",
                self.reason,
                if steps == 1 {
                    "iteration"
                } else {
                    "iterations"
                },
                if steps == 1 { "has" } else { "have" },
                if steps == 1 { "row" } else { "rows" },
            )],
            ..Trailer::default()
        }));
        let path = writer.path().to_path_buf();
        let report = writer.close();
        if report.lines_not_written > 0 {
            return Err(Error::LedgerWrite {
                path,
                source: std::io::Error::other("write failed"),
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("ledger_path", &self.ledger_path)
            .field("running", &self.running.is_some())
            .field("disabled_reason", &self.disabled_reason)
            .finish()
    }
}

struct RunParts {
    running: Arc<RunState>,
    session: Option<TimelineSession>,
    collector: Option<JoinHandle<()>>,
    writer: Option<LedgerWriter>,
    trailer_rx: crossbeam_channel::Receiver<Trailer>,
    /// Device 0's primary context, retained by the calibration: kept for the run, so that it
    /// is not destroyed and made again under the application.
    _calibration_ctx: Option<Arc<cudarc::driver::CudaContext>>,
}

/// How long `finish()` waits for a shutdown that the signal thread began (the signal ends the
/// process within [`crate::signals::FLUSH_BOUND`]).
const FINISH_WAIT: Duration = Duration::from_secs(10);

/// The running profiler's parts, shut down exactly once: by `finish()` or drop, or by the
/// signal thread (`flush_on_signal`), whichever comes first; the other waits for it.
struct Lifecycle {
    state: parking_lot::Mutex<Stage>,
    changed: parking_lot::Condvar,
}

enum Stage {
    /// Not (yet) running: starting, inert, or failed to start.
    Empty,
    Running(RunParts),
    Stopping,
    /// Shut down; the trailer that was written.
    Stopped(Box<Trailer>),
}

impl Lifecycle {
    fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle {
            state: parking_lot::Mutex::new(Stage::Empty),
            changed: parking_lot::Condvar::new(),
        })
    }

    /// Shuts the profiler down (adding `end_warning` to the trailer) if it runs; if a shutdown
    /// is under way, waits for it at most `wait`. The trailer and the first error; `None` when
    /// nothing ran or the wait timed out.
    fn shut_down(
        &self,
        end_warning: Option<String>,
        wait: Duration,
    ) -> Option<(Trailer, Option<Error>)> {
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock();
        loop {
            match std::mem::replace(&mut *state, Stage::Stopping) {
                Stage::Running(inner) => {
                    drop(state);
                    let (trailer, err) = shutdown(inner, end_warning);
                    *self.state.lock() = Stage::Stopped(Box::new(trailer.clone()));
                    self.changed.notify_all();
                    return Some((trailer, err));
                }
                Stage::Stopping => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        return None;
                    }
                }
                Stage::Stopped(trailer) => {
                    *state = Stage::Stopped(trailer.clone());
                    return Some((*trailer, None));
                }
                Stage::Empty => {
                    *state = Stage::Empty;
                    return None;
                }
            }
        }
    }
}

impl ProfilerBuilder {
    /// Starts the profiler.
    ///
    /// # Errors
    /// See [`Profiler::start`].
    pub fn start(self) -> Result<Profiler> {
        Profiler::start(self.config)
    }
}

impl Profiler {
    /// A builder with the default configuration.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// Enters a scope on the calling thread; it ends when the guard drops. Nested scopes form
    /// paths (`step/backward`). Costs one atomic load when no profiler runs.
    #[inline]
    pub fn scope(name: impl Into<Cow<'static, str>>) -> ScopeGuard<'static> {
        if !ENABLED.load(Ordering::Relaxed) {
            return ScopeGuard::inert(None);
        }
        ScopeGuard::enter(name.into(), None)
    }

    /// The innermost scope open on the calling thread, to hand to another thread that works on
    /// its behalf ([`ScopeContext::enter`](crate::ScopeContext::enter)): launches there are then attributed to this scope.
    #[inline]
    pub fn context() -> crate::ScopeContext {
        crate::ScopeContext::current()
    }

    /// Enters a scope whose device time is also measured by timing events recorded on `stream`
    /// at entry and exit (two `cuEventRecord` calls; the events are recycled).
    #[inline]
    pub fn scope_on<'s>(
        name: impl Into<Cow<'static, str>>,
        stream: &'s Arc<CudaStream>,
    ) -> ScopeGuard<'s> {
        let stream = Some(StreamRef::Cudarc(stream));
        if !ENABLED.load(Ordering::Relaxed) {
            return ScopeGuard::inert(stream);
        }
        ScopeGuard::enter(name.into(), stream)
    }

    /// [`scope_on`](Self::scope_on) for a stream the application holds as a raw driver handle
    /// ([`RawStream::from_raw`](crate::RawStream::from_raw)), as frameworks with streams of
    /// their own do. The events are made in the stream's own context.
    #[inline]
    pub fn scope_on_raw<'s>(
        name: impl Into<Cow<'static, str>>,
        stream: &'s crate::RawStream,
    ) -> ScopeGuard<'s> {
        let stream = Some(StreamRef::Raw(stream));
        if !ENABLED.load(Ordering::Relaxed) {
            return ScopeGuard::inert(stream);
        }
        ScopeGuard::enter(name.into(), stream)
    }

    /// Checks, without starting anything, that this machine has what `level` needs: nothing at
    /// the scopes level; the CUDA driver, a GPU and a CUPTI gpu-ledger can use at the timeline
    /// and counters levels.
    /// Call it before the first CUDA call of an application that should fail with one clear
    /// line rather than a panic (cudarc panics when the driver library is missing).
    ///
    /// # Errors
    /// At the timeline and counters levels: [`Error::NoDriver`], [`Error::NoDevice`],
    /// [`Error::CuptiNotFound`], [`Error::CuptiPathUnusable`], [`Error::CuptiVersionMismatch`]
    /// or [`Error::CuptiNeedsNewerDriver`].
    pub fn preflight(level: Level) -> Result<()> {
        // Host times and NVML (which is optional) need no driver: the scopes level runs anywhere.
        if level >= Level::Timeline {
            Self::require_gpu()?;
            cupti_for_driver()?;
        }
        Ok(())
    }

    /// Checks that the CUDA driver loads and reports a GPU: what the application's own cudarc
    /// calls need. Call it before the first of them (`CudaContext::new`), which panics when the
    /// driver library is missing, so that such a machine gets one line naming the cause and the
    /// fix instead.
    ///
    /// # Errors
    /// [`Error::NoDriver`], [`Error::NoDevice`].
    pub fn require_gpu() -> Result<()> {
        crate::driver::device::require_driver()
    }

    /// Starts profiling with `config`, at the level `GPU_LEDGER_LEVEL` names when it is set
    /// ([`crate::LEVEL_ENV`]; `off` returns an inert profiler and writes no ledger).
    ///
    /// # Errors
    /// [`Error::AlreadyRunning`]; [`Error::LedgerWrite`] for an unwritable ledger path;
    /// [`Error::Config`] for a `GPU_LEDGER_LEVEL` that is no level; at the timeline level
    /// [`Error::NoDriver`], [`Error::CuptiNotFound`], [`Error::CuptiPathUnusable`],
    /// [`Error::CuptiVersionMismatch`], [`Error::CuptiNeedsNewerDriver`], [`Error::CuptiBusy`]
    /// or another CUPTI failure. With
    /// `fail_open`, every error but an unwritable ledger and an invalid configuration
    /// ([`Error::Config`]: bad settings, unknown metric names) returns an inert profiler
    /// instead, and the ledger header says why.
    pub fn start(mut config: Config) -> Result<Profiler> {
        let path = resolve_ledger_path(config.ledger_path.clone());
        let slot = Lifecycle::new();
        let env_level = std::env::var_os(LEVEL_ENV);
        let Some(level_source) = apply_level_override(&mut config, env_level.as_deref())? else {
            let reason = format!("profiling off ({LEVEL_ENV}=off): no ledger is written");
            eprintln!("gpu-ledger: {reason}");
            return Ok(Profiler {
                running: None,
                slot,
                signals: None,
                ledger_path: None,
                disabled_reason: Some(reason),
                unprofiled: None,
            });
        };
        match start::start_inner(&config, &path, &slot, level_source) {
            Ok(start::StartedRun {
                parts,
                warnings,
                signals,
            }) => {
                for w in &warnings {
                    eprintln!("gpu-ledger: warning: {w}");
                }
                let running = parts.running.clone();
                *slot.state.lock() = Stage::Running(parts);
                Ok(Profiler {
                    running: Some(running),
                    slot,
                    signals,
                    ledger_path: Some(path),
                    disabled_reason: None,
                    unprofiled: None,
                })
            }
            // Not the environment's fault but the caller's: fail_open does not hide these.
            Err(e @ (Error::LedgerWrite { .. } | Error::AlreadyRunning | Error::Config(_))) => {
                Err(e)
            }
            Err(e) if config.fail_open => {
                let reason = format!("profiling disabled (fail_open): {e}");
                eprintln!("gpu-ledger: {reason}");
                let writer = write_disabled_header(&config, &path, &reason, level_source)?;
                Ok(Profiler {
                    running: None,
                    slot,
                    signals: None,
                    ledger_path: Some(path),
                    disabled_reason: Some(reason.clone()),
                    unprofiled: Some(Unprofiled {
                        writer: parking_lot::Mutex::new(Some(writer)),
                        reason,
                        steps: std::sync::atomic::AtomicU64::new(0),
                    }),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Where the ledger is being written; `None` when profiling is off and none is.
    pub fn ledger_path(&self) -> Option<&Path> {
        self.ledger_path.as_deref()
    }

    /// Why the profiler is inert, when `fail_open` kept the application running without it.
    pub fn disabled_reason(&self) -> Option<&str> {
        self.disabled_reason.as_deref()
    }

    /// Index of the iteration now open.
    pub fn iteration(&self) -> u64 {
        self.running.as_ref().map_or(0, |r| r.iteration())
    }

    /// The first ledger write error, if one happened (reported once on stderr as well).
    pub fn write_error(&self) -> Option<String> {
        match &*self.slot.state.lock() {
            Stage::Running(inner) => inner.writer.as_ref().and_then(|w| w.error()),
            _ => None,
        }
    }

    /// Ends the current iteration and opens the next (like torch.profiler's `step()`). Never
    /// blocks on the GPU: the iteration's row is written once its GPU records have arrived.
    pub fn step(&self) {
        if let Some(running) = &self.running {
            running.step(|| scope::on_step(running));
        } else if let Some(u) = &self.unprofiled {
            u.steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Stops profiling, waits for every record, writes the trailer and closes the ledger.
    /// Synchronize your streams first: work still running on the GPU is recorded only as far as
    /// CUPTI has completed it.
    ///
    /// # Errors
    /// The first ledger write error, or a CUPTI error while stopping; the ledger is still closed.
    pub fn finish(mut self) -> Result<RunSummary> {
        let path = self.ledger_path.clone();
        let was_running = self.running.is_some();
        if let Some(u) = self.unprofiled.take() {
            u.close()?;
            return Ok(RunSummary {
                ledger_path: path,
                trailer: Trailer {
                    iterations: u.steps.into_inner(),
                    ..Trailer::default()
                },
            });
        }
        match self.end() {
            Some((trailer, None)) => Ok(RunSummary {
                ledger_path: path,
                trailer,
            }),
            Some((_, Some(e))) => Err(e),
            None if !was_running => Ok(RunSummary {
                ledger_path: path,
                trailer: Trailer::default(),
            }),
            None => Err(Error::Thread(format!(
                "the signal thread (flush_on_signal) began shutting the profiler down and did \
                 not finish within {FINISH_WAIT:?}"
            ))),
        }
    }

    /// Shuts down (or waits for the signal thread's shutdown), then removes the signal handlers.
    fn end(&mut self) -> Option<(Trailer, Option<Error>)> {
        let ended = self
            .running
            .take()
            .and_then(|_| self.slot.shut_down(None, FINISH_WAIT));
        // After shutdown: a signal that comes while the ledger is being finished waits for it.
        drop(self.signals.take());
        ended
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if let Some(u) = self.unprofiled.take() {
            let _ = u.close();
        }
        let _ = self.end();
    }
}

fn shutdown(mut inner: RunParts, end_warning: Option<String>) -> (Trailer, Option<Error>) {
    let running = inner.running.clone();
    let finish = running.close(end_warning, || scope::open_scopes(&running));
    let mut first_err = None;
    if let Some(session) = inner.session.take() {
        // Flushes every buffer into the collector's inbox before the collector is told to finish.
        if let Err(e) = session.stop() {
            first_err = Some(e);
        }
    }
    running.send_finish(finish);
    if let Some(c) = inner.collector.take() {
        let _ = c.join();
    }
    running.release_counters();
    let mut trailer = inner.trailer_rx.try_recv().unwrap_or_default();
    let late_steps = running.steps_after_close();
    if late_steps > 0 {
        // After the trailer was written: said here and in the run's summary.
        let w = format!(
            "{late_steps} step() calls came after the profiler began shutting down and ended no \
             iteration"
        );
        eprintln!("gpu-ledger: {w}");
        trailer.warnings.push(w);
    }
    if let Some(writer) = inner.writer.take() {
        let err = writer.error();
        let path = writer.path().to_path_buf();
        let report = writer.close();
        trailer.overhead.writer_cpu_ns = report.cpu_ns;
        // The collector counted the lines it could not hand to an ended writer.
        trailer.lines_not_written = trailer
            .lines_not_written
            .saturating_add(report.lines_not_written);
        if let (None, Some(msg)) = (&first_err, err) {
            first_err = Some(Error::LedgerWrite {
                path,
                source: std::io::Error::other(msg),
            });
        }
    }
    run::retire();
    (trailer, first_err)
}

/// Writes the header of a run that `fail_open` keeps going unprofiled; the writer stays open for
/// the trailer.
fn write_disabled_header(
    config: &Config,
    path: &Path,
    reason: &str,
    level_source: &str,
) -> Result<LedgerWriter> {
    let writer = LedgerWriter::create(path)?;
    let header = Header {
        schema_version: SCHEMA_VERSION,
        gpu_ledger_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: crate::clock::unix_ns(),
        start_cupti_ns: None,
        config: ConfigRecord {
            level_source: Some(level_source.to_string()),
            ..config_record(config)
        },
        environment: crate::env::environment(None, std::time::SystemTime::now()),
        rank: crate::rank::from_env(),
        warnings: vec![reason.to_string()],
        counters: None,
        tracing_calibration: None,
    };
    writer.send(LedgerLine::Header(header));
    Ok(writer)
}

/// What a run does with NVTX, decided at start.
struct NvtxState {
    emit: bool,
    import: NvtxImportState,
}

enum NvtxImportState {
    Off,
    On(crate::config::NvtxImport),
    /// Asked for, but NVTX cannot reach gpu-ledger: why.
    Unavailable(String),
}

impl NvtxState {
    /// Whether NVTX ranges can be imported (CUPTI runs, and NVTX's tool is, or can be made,
    /// that CUPTI); sets `NVTX_INJECTION64_PATH` to the CUPTI library when it is unset.
    ///
    /// # Errors
    /// [`Error::Config`] for an import that allows no range.
    fn decide(config: &Config, cupti: Option<&'static cupti::LoadedCupti>) -> Result<Self> {
        use cupti::nvtx::{injection, Injection, INJECTION_ENV};
        let import =
            match (&config.nvtx.import, cupti) {
                (None, _) => NvtxImportState::Off,
                (Some(i), _) if i.max_depth == 0 => return Err(Error::Config(
                    "NvtxImport::max_depth is 0, which imports no NVTX range: give the depth of \
                     nested ranges to import (8 by default), or leave Nvtx::import unset"
                        .into(),
                )),
                (Some(_), None) => NvtxImportState::Unavailable(
                    "NVTX ranges are not imported at Level::Scopes: CUPTI's NVTX callbacks bring \
                 them, at the timeline and counters levels"
                        .into(),
                ),
                (Some(i), Some(lib)) => {
                    match injection(std::env::var_os(INJECTION_ENV).as_deref(), &lib.path) {
                        Injection::Set => {
                            std::env::set_var(INJECTION_ENV, &lib.path);
                            NvtxImportState::On(i.clone())
                        }
                        Injection::AlreadyCupti => NvtxImportState::On(i.clone()),
                        Injection::OtherTool(tool) => NvtxImportState::Unavailable(format!(
                        "NVTX ranges are not imported: {INJECTION_ENV} names another NVTX tool \
                         ({tool}), which receives them instead (scopes' ranges go to it too)"
                    )),
                    }
                }
            };
        Ok(NvtxState {
            emit: config.nvtx.emit,
            import,
        })
    }

    fn run(&self) -> crate::run::NvtxRun {
        crate::run::NvtxRun {
            emit: self.emit,
            import_depth: match &self.import {
                NvtxImportState::On(i) => Some(i.max_depth),
                _ => None,
            },
        }
    }

    fn warning(&self) -> Option<String> {
        match &self.import {
            NvtxImportState::Unavailable(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// As the ledger header records it.
    fn describe(&self) -> String {
        let emit = if self.emit { "on" } else { "off" };
        let import = match &self.import {
            NvtxImportState::Off => "off".to_string(),
            NvtxImportState::On(i) => {
                let domains = if i.domains.is_empty() {
                    "all domains".to_string()
                } else {
                    format!("domains {}", i.domains.join(", "))
                };
                let marker = i
                    .step_marker
                    .as_ref()
                    .map(|m| format!(", step marker {m:?}"))
                    .unwrap_or_default();
                format!("on ({domains}, depth {}{marker})", i.max_depth)
            }
            NvtxImportState::Unavailable(why) => format!("not available: {why}"),
        };
        format!("ranges out of scopes: {emit}; ranges in as scopes: {import}")
    }
}

/// The process's CUPTI, when the driver can serve its CUDA major release: a CUPTI of CUDA 13 on a
/// driver of CUDA 12 cannot trace.
///
/// # Errors
/// The loader's errors, and [`Error::CuptiNeedsNewerDriver`].
fn cupti_for_driver() -> Result<&'static cupti::LoadedCupti> {
    let lib = cupti::api()?;
    let major = lib.release.cuda_major();
    let driver = crate::driver::device::driver_version()?;
    if driver / 1000 < major {
        return Err(Error::CuptiNeedsNewerDriver {
            release: lib.release.name.to_string(),
            path: lib.path.clone(),
            major,
            driver: format!("{}.{}", driver / 1000, driver % 1000 / 10),
        });
    }
    Ok(lib)
}
