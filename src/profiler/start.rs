//! Starting a run, stage by stage: the checks made before anything starts, the run's shared
//! state, CUPTI's timeline and its calibration, PC sampling, the environment record with NVML,
//! the signal handlers, the header and the collector.
//!
//! The stages run in the order of the one body they were split from: a start that fails
//! returns the error of the first stage that fails, and what the earlier stages started is
//! dropped in the order it was before.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use super::{cupti_for_driver, Lifecycle, NvtxImportState, NvtxState, RunParts};
use crate::clock::HostClock;
use crate::collector;
use crate::config::{config_record, Config, Level, TimelineSampling};
use crate::counters::window::CounterState;
use crate::cupti;
use crate::cupti::activity::{ActivityShared, ActivityStats, FilledBuffer, TimelineSession};
use crate::cupti::pool::BufferPool;
use crate::error::{Error, Result};
use crate::ledger::counters::CountersHeader;
use crate::ledger::schema::{
    ConfigRecord, Header, LedgerLine, TracingCalibration, Trailer, SCHEMA_VERSION,
};
use crate::ledger::Environment;
use crate::nvml::NvmlSampler;
use crate::run::{self, Inbox, RunState};
use crate::scope;
use crate::writer::LedgerWriter;

/// What a start hands to the profiler.
pub(super) struct StartedRun {
    /// The running parts, which the profiler's lifecycle keeps until shutdown.
    pub(super) parts: RunParts,
    /// Warnings for stderr.
    pub(super) warnings: Vec<String>,
    /// The signal handlers, when `flush_on_signal` installed them.
    pub(super) signals: Option<crate::signals::Watch>,
}

/// Starts a run of `config` that writes its ledger to `path`; the signal handlers shut down
/// through `slot`, and the header records `level_source`.
pub(super) fn start_inner(
    config: &Config,
    path: &Path,
    slot: &Arc<Lifecycle>,
    level_source: &str,
) -> Result<StartedRun> {
    check_settings(config)?;
    let claim = run::claim()?;
    let mut notes = HeaderNotes::default();
    let plan = Plan::decide(config, &mut notes)?;
    let cupti = plan.cupti;
    let pc_blocked = plan.pc_blocked.clone();
    let writer = LedgerWriter::create(path)?;
    let origin = Instant::now();
    let start_time = SystemTime::now();
    let start_unix_ns = crate::clock::unix_ns();
    let (buffer_tx, buffer_rx) = crossbeam_channel::unbounded();
    let (running, inbox) = plan.start_running(config, origin, &mut notes);
    let mut timeline = match cupti {
        Some(lib) => start_timeline(config, lib, &running, buffer_tx, &mut notes)?,
        None => Timeline::default(),
    };
    // After the timeline's activity kinds are on and the calibration has toggled them:
    // CUPTI refuses to enable a kind while PC sampling is enabled.
    let pc_sources = start_pc_sampling(config, pc_blocked, &running, &mut notes)?;
    let start_cupti_ns = running.cupti_now();
    let (environment, nvml) = environment_record(
        config,
        cupti,
        start_time,
        origin,
        &timeline.refused_callbacks,
        &mut notes.warnings,
    );
    // Installed before the header, which carries its warnings; on a later error the watch drops
    // and the default dispositions are back.
    let signals = watch_signals(config, slot, &mut notes.warnings);
    let header = notes.header(
        config,
        level_source,
        start_unix_ns,
        start_cupti_ns,
        environment,
    );
    // From the header, which names the level, the rank and the GPUs its series are labelled by.
    #[cfg(feature = "metrics")]
    let metrics = config
        .metrics
        .as_ref()
        .map(|o| crate::metrics::Publisher::new(o, &header));
    writer.send(LedgerLine::Header(header));
    let lines = writer
        .sender()
        .ok_or_else(|| Error::Thread("gpu-ledger-writer closed at start".into()))?;
    let (collector, trailer_rx) = spawn_collector(
        config,
        CollectorParts {
            running: running.clone(),
            inbox,
            activity: timeline.activity.take(),
            buffers: buffer_rx,
            lines,
            start_cupti_ns: start_cupti_ns.unwrap_or(0),
            timeline_rules: cupti.is_some(),
            nvml,
            tracing_calibration: notes.calibration.take(),
            pc_sources,
            #[cfg(feature = "metrics")]
            metrics,
        },
    )?;
    claim.publish(&running);
    Ok(StartedRun {
        parts: RunParts {
            running,
            session: timeline.session,
            collector: Some(collector),
            writer: Some(writer),
            trailer_rx,
            _calibration_ctx: timeline.calibration_ctx,
        },
        warnings: notes.warnings,
        signals,
    })
}

/// Refuses buffer, energy and counters settings that no run can use, before the run is
/// claimed.
fn check_settings(config: &Config) -> Result<()> {
    if config.buffer_bytes < 1024 || config.buffers == 0 {
        return Err(Error::Config(
            "buffers must be at least 1 and buffer_bytes at least 1024".into(),
        ));
    }
    if config.nvml_energy_period.is_some_and(|p| p.is_zero()) {
        return Err(Error::Config(
            "nvml_energy_period is zero: give a period (500 ms by default) or None to never read \
             the energy counter"
                .into(),
        ));
    }
    if let Some(setup) = &config.counters {
        setup.config.validate_with_timeline()?;
    }
    Ok(())
}

/// What the stages record for the ledger header as they go: the warnings, and how counters,
/// the calibration, timeline sampling, PC sampling and NVTX were set up.
#[derive(Default)]
struct HeaderNotes {
    warnings: Vec<String>,
    counters: Option<CountersHeader>,
    counter_iterations: Option<String>,
    /// Handed on to the collector as well.
    calibration: Option<TracingCalibration>,
    /// Why tracing was not calibrated.
    calibration_error: Option<String>,
    timeline_sampling: Option<String>,
    pc_sampling: Option<String>,
    nvtx: Option<String>,
}

impl HeaderNotes {
    /// The ledger header: what only the header records is taken from the notes; the warnings
    /// and the calibration, which go on to the profiler and the collector, are copied.
    fn header(
        &mut self,
        config: &Config,
        level_source: &str,
        start_unix_ns: u64,
        start_cupti_ns: Option<u64>,
        environment: Environment,
    ) -> Header {
        Header {
            schema_version: SCHEMA_VERSION,
            gpu_ledger_version: env!("CARGO_PKG_VERSION").to_string(),
            start_unix_ns,
            start_cupti_ns,
            config: ConfigRecord {
                counter_iterations: self.counter_iterations.take(),
                level_source: Some(level_source.to_string()),
                nvtx: self.nvtx.take(),
                tracing_calibration: self.calibration_error.take(),
                timeline_sampling: self.timeline_sampling.take(),
                pc_sampling: self.pc_sampling.take(),
                ..config_record(config)
            },
            environment,
            rank: crate::rank::from_env(),
            warnings: self.warnings.clone(),
            counters: self.counters.take(),
            tracing_calibration: self.calibration.clone(),
        }
    }
}

/// What the checks made before anything starts decided, for the stages that start things.
struct Plan {
    sampling: Option<TimelineSampling>,
    cupti: Option<&'static cupti::LoadedCupti>,
    counters: Option<CounterState>,
    nvtx: NvtxState,
    /// The counters window, which duty-cycled PC sampling leaves alone.
    pc_blocked: Option<Range<u64>>,
}

impl Plan {
    /// Checks timeline sampling, the level, CUPTI, the counters, PC sampling and NVTX, in this
    /// order (which decides the error of a start with several faults), and sets up the Range
    /// Profiler.
    fn decide(config: &Config, notes: &mut HeaderNotes) -> Result<Plan> {
        let sampling = timeline_sampling(config, &mut notes.warnings)?;
        if config.counters.is_some() != (config.level == Level::Counters) {
            return Err(Error::Config(
                "Level::Counters and Config::counters go together: set both \
                 (ProfilerBuilder::counters does) or neither"
                    .into(),
            ));
        }
        let cupti = match config.level {
            Level::Scopes => None,
            Level::Timeline | Level::Counters => {
                crate::driver::device::require_driver()?;
                Some(cupti_for_driver()?)
            }
        };
        let (counters, counter_range) = set_up_counters(config, notes)?;
        prepare_pc_sampling(config, counter_range.clone())?;
        let nvtx = NvtxState::decide(config, cupti)?;
        if let Some(w) = nvtx.warning() {
            notes.warnings.push(w);
        }
        notes.nvtx = Some(nvtx.describe());
        Ok(Plan {
            sampling,
            cupti,
            counters,
            nvtx,
            pc_blocked: counter_range,
        })
    }

    /// The run's shared state and the collector's inbox, on the clock that starts at `origin`;
    /// NVTX ranges come in as scopes through it when the plan imports them.
    fn start_running(
        self,
        config: &Config,
        origin: Instant,
        notes: &mut HeaderNotes,
    ) -> (Arc<RunState>, Inbox) {
        let (running, inbox) = RunState::new(
            HostClock::new(origin),
            self.cupti,
            self.counters,
            config.follow.clone(),
            self.nvtx.run(),
            self.sampling,
            config.idle.enabled,
        );
        notes.timeline_sampling = config
            .timeline_sampling
            .as_ref()
            .filter(|_| running.cupti.is_some() && config.level == Level::Timeline)
            .map(TimelineSampling::describe);
        if let NvtxImportState::On(import) = &self.nvtx.import {
            let importer = cupti::nvtx::NvtxImporter::new(import.clone(), scope::on_nvtx);
            let _ = running.calls().nvtx.set(importer);
        }
        (running, inbox)
    }
}

/// The timeline sampling the run follows: checked at `Level::Timeline`, refused at
/// `Level::Counters` (whose window chooses the iterations), a warning at `Level::Scopes`.
fn timeline_sampling(
    config: &Config,
    warnings: &mut Vec<String>,
) -> Result<Option<TimelineSampling>> {
    match (&config.timeline_sampling, config.level) {
        (None, _) => Ok(None),
        (Some(s), Level::Timeline) => {
            s.validate()?;
            Ok(Some(s.clone()))
        }
        (Some(_), Level::Counters) => Err(Error::Config(
            "timeline sampling is for Level::Timeline: at Level::Counters the counters window \
             chooses the iterations (CounterWindow); leave Config::timeline_sampling unset"
                .into(),
        )),
        (Some(s), Level::Scopes) => {
            warnings.push(format!(
                "timeline sampling ({}) does nothing at Level::Scopes, which traces no iteration",
                s.describe()
            ));
            Ok(None)
        }
    }
}

/// Sets up the Range Profiler before the timeline starts and before anything is recorded:
/// metric names are checked (a typo is an error), and a device whose counters cannot be read
/// leaves the timeline running with the reason in the header. The counters' state and the
/// iterations they are collected on, when they are.
fn set_up_counters(
    config: &Config,
    notes: &mut HeaderNotes,
) -> Result<(Option<CounterState>, Option<Range<u64>>)> {
    let Some(setup) = &config.counters else {
        return Ok((None, None));
    };
    // The timeline will trace alongside: what the release evaluates wrongly while it traces
    // is refused as the Range Profiler is set up.
    match crate::counters::RangeProfiler::for_profiler(&setup.context, setup.config.clone()) {
        Ok(rp) => {
            if let Some(w) = crate::counters::release::busy_warning() {
                notes.warnings.push(w);
            }
            notes.counters = Some(crate::counters::header_collected(&rp));
            notes.counter_iterations = Some(setup.window.describe(rp.runs_per_collection()));
            let range = setup.window.iterations(rp.runs_per_collection());
            let state = CounterState::new(rp, setup.window, setup.derive);
            Ok((Some(state), Some(range)))
        }
        Err(e) => {
            use crate::counters::Unavailable as U;
            match crate::counters::unavailable_of(&e) {
                U::UnknownMetric | U::NoCupti => Err(e),
                _ if matches!(e, Error::Config(_)) => Err(e),
                _ => {
                    notes.warnings.push(format!(
                        "hardware counters are not collected (the timeline runs): {e}"
                    ));
                    notes.counters = Some(crate::counters::header_not_collected(&setup.config, &e));
                    Ok((None, None))
                }
            }
        }
    }
}

/// Refuses a PC sampling window this run cannot honour, before anything starts; before the
/// timeline, so that its callbacks keep loaded modules' cubins.
fn prepare_pc_sampling(config: &Config, counter_range: Option<Range<u64>>) -> Result<()> {
    let Some(setup) = &config.pc_sampling else {
        return Ok(());
    };
    let end = setup.window.range().end;
    crate::pcsampling::window::prepare(
        setup,
        &crate::pcsampling::window::RunShape {
            timeline: config.level != Level::Scopes,
            untraced: (config.timeline_sampling.as_ref()).and_then(|s| {
                let i = crate::pcsampling::window::first_untraced(end, |i| s.traces(i))?;
                Some((i, s.describe()))
            }),
            counters: counter_range,
            sampled_timeline: config.timeline_sampling.as_ref().map(|s| s.describe()),
        },
    )
}

/// What the timeline stage started, for the profiler and the collector. The fields drop in
/// this order when a later stage fails: the calibration's context before the session.
#[derive(Default)]
struct Timeline {
    /// Functions CUPTI refused callbacks for.
    refused_callbacks: Vec<&'static str>,
    calibration_ctx: Option<Arc<cudarc::driver::CudaContext>>,
    activity: Option<Arc<ActivityShared>>,
    session: Option<TimelineSession>,
}

/// Starts CUPTI's timeline session, whose filled buffers go to `sink`, calibrates what tracing
/// adds when the configuration asks, and turns tracing on.
fn start_timeline(
    config: &Config,
    lib: &'static cupti::LoadedCupti,
    running: &RunState,
    sink: Sender<FilledBuffer>,
    notes: &mut HeaderNotes,
) -> Result<Timeline> {
    let shared = Arc::new(ActivityShared {
        pool: BufferPool::new(config.buffers, config.max_buffers, config.buffer_bytes),
        sink,
        stats: ActivityStats::default(),
    });
    let session = TimelineSession::start(lib, shared.clone(), running.calls().clone())?;
    let mut timeline = Timeline {
        refused_callbacks: session.refused_callbacks().to_vec(),
        calibration_ctx: None,
        activity: Some(shared),
        session: Some(session),
    };
    if config.calibrate_tracing && config.level >= Level::Timeline {
        timeline.calibration_ctx = calibrate_tracing(lib, running, notes);
    }
    if config.pc_sampling.is_some() {
        running.switch_in_step_only();
    }
    running.begin_tracing()?;
    Ok(timeline)
}

/// Measures what tracing adds to the device's time into the notes, and returns the context the
/// calibration retained; a failure leaves the rows without the estimate, and the header says
/// why.
fn calibrate_tracing(
    lib: &'static cupti::LoadedCupti,
    running: &RunState,
    notes: &mut HeaderNotes,
) -> Option<Arc<cudarc::driver::CudaContext>> {
    // Nothing of the calibration is captured as the application's: its records are counted
    // apart by kernel name.
    running.calls().traced.store(false, Ordering::SeqCst);
    match cupti::calibrate::calibrate(lib, cupti::activity::set_kinds) {
        Ok((c, ctx)) => {
            notes.calibration = Some(c);
            Some(ctx)
        }
        Err(e) => {
            notes.warnings.push(format!(
                "tracing's own device time was not calibrated, so rows carry no \
                 tracing_added_ns: {e}"
            ));
            notes.calibration_error = Some(e.to_string());
            None
        }
    }
}

/// Starts PC sampling when it was set up; the cubins and sources its samples are mapped
/// through.
fn start_pc_sampling(
    config: &Config,
    blocked: Option<Range<u64>>,
    running: &RunState,
    notes: &mut HeaderNotes,
) -> Result<Option<crate::pcsampling::window::CollectorSide>> {
    let Some(setup) = &config.pc_sampling else {
        return Ok(None);
    };
    let p = crate::pcsampling::window::start(setup, blocked)?;
    notes.warnings.extend(p.warning);
    if let Some(state) = p.state {
        running.install_pc_sampling(state);
    }
    notes.pc_sampling = Some(p.describe);
    Ok(p.collector)
}

/// The header's environment record, with the callbacks CUPTI refused and NVML's items, and the
/// NVML sampler when the configuration asks for one and NVML starts.
fn environment_record(
    config: &Config,
    cupti: Option<&'static cupti::LoadedCupti>,
    start_time: SystemTime,
    origin: Instant,
    refused_callbacks: &[&'static str],
    warnings: &mut Vec<String>,
) -> (Environment, Option<NvmlSampler>) {
    let mut environment = crate::env::environment(cupti, start_time);
    // Functions the driver predates are refused by a newer CUPTI: a gate of the release, not a
    // loss, since the driver cannot run them.
    if let (Some(lib), false) = (cupti, refused_callbacks.is_empty()) {
        environment.cupti_features.push(format!(
            "callbacks refused by CUPTI {} for {} functions ({}): calls of these are not \
             captured and their GPU records are placed by time",
            lib.release.name,
            refused_callbacks.len(),
            refused_callbacks.join(", ")
        ));
    }
    let sampler = if config.nvml {
        start_nvml(config, &mut environment, origin, warnings)
    } else {
        None
    };
    crate::env::explain_nulls(&mut environment);
    (environment, sampler)
}

/// Loads NVML, adds its items to the environment record and starts the sampler. Without NVML
/// everything else keeps working: the reason goes to the header warnings and stderr.
fn start_nvml(
    config: &Config,
    env: &mut Environment,
    origin: Instant,
    warnings: &mut Vec<String>,
) -> Option<NvmlSampler> {
    use crate::nvml::{NvmlLibrary, NvmlSamplerConfig};
    let lib = match NvmlLibrary::init() {
        Ok(lib) => lib,
        Err(e) => {
            crate::env::nvml_unavailable(env, &e.to_string());
            warnings.push(format!("NVML: {e}"));
            return None;
        }
    };
    crate::env::fill_nvml(env, &lib);
    crate::env::link_gpus_to_nvml(env);
    let sampler_config = NvmlSamplerConfig {
        period: config.nvml_period,
        energy_period: config.nvml_energy_period,
        devices: Some(crate::env::sampled_devices(env)),
        ..NvmlSamplerConfig::default()
    };
    match NvmlSampler::start(lib, sampler_config, origin) {
        Ok(s) => Some(s),
        Err(e) => {
            warnings.push(format!("NVML sampling is off: {e}"));
            None
        }
    }
}

/// With `flush_on_signal`, installs the SIGINT/SIGTERM handlers that shut the run down through
/// `slot` and end the ledger with the signal's name.
fn watch_signals(
    config: &Config,
    slot: &Arc<Lifecycle>,
    warnings: &mut Vec<String>,
) -> Option<crate::signals::Watch> {
    if !config.flush_on_signal {
        return None;
    }
    let slot = slot.clone();
    let on_signal: crate::signals::OnSignal = Arc::new(move |name: &'static str| {
        let warning = format!("run ended by {name} (flush_on_signal)");
        let _ = slot.shut_down(Some(warning), crate::signals::FLUSH_BOUND);
    });
    crate::signals::Watch::install(on_signal, warnings)
}

/// What the stages made that the collector takes over.
struct CollectorParts {
    running: Arc<RunState>,
    inbox: Inbox,
    activity: Option<Arc<ActivityShared>>,
    buffers: Receiver<FilledBuffer>,
    lines: Sender<LedgerLine>,
    start_cupti_ns: u64,
    timeline_rules: bool,
    nvml: Option<NvmlSampler>,
    tracing_calibration: Option<TracingCalibration>,
    pc_sources: Option<crate::pcsampling::window::CollectorSide>,
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Publisher>,
}

/// Starts the collector thread on `parts` with the configuration's timing and row contents;
/// the collector and the channel its trailer comes back on.
fn spawn_collector(
    config: &Config,
    parts: CollectorParts,
) -> Result<(JoinHandle<()>, Receiver<Trailer>)> {
    let (trailer_tx, trailer_rx) = crossbeam_channel::bounded(1);
    let collector = collector::spawn(collector::CollectorSetup {
        running: parts.running,
        inbox: parts.inbox,
        activity: parts.activity,
        buffers: parts.buffers,
        lines: parts.lines,
        trailer: trailer_tx,
        settle: config.settle,
        // A row must get at least two flushes within its settle time.
        flush_interval: config.flush_interval.min(config.settle / 2),
        start_cupti_ns: parts.start_cupti_ns,
        timeline_rules: parts.timeline_rules,
        nvml: parts.nvml,
        work_per_iteration: config.work_per_iteration,
        record_activities: config.record_activities,
        auto_ranges: config
            .counters
            .as_ref()
            .is_some_and(|c| c.config.range_mode == crate::counters::RangeMode::Auto),
        tracing_calibration: parts.tracing_calibration,
        pc_sources: parts.pc_sources,
        #[cfg(feature = "metrics")]
        metrics: parts.metrics,
        idle: (parts.timeline_rules && config.idle.enabled).then(|| config.idle.clone()),
    })?;
    Ok((collector, trailer_rx))
}
