//! A step whose phases run in scopes, captured into a CUDA graph through cudarc's stream capture
//! and replayed in scope `step/replay`, with what a ledger row should show of it: the workload of
//! `examples/graph_scopes.rs` and of the GPU tests of graph attribution (included by both through
//! `#[path]`).
//!
//! Capture rules kept here: the stream is a `new_stream()` (the legacy default stream cannot be
//! captured), cudarc's event tracking is off before any allocation (it would record and wait on
//! events inside the capture), capture mode `THREAD_LOCAL`, and the scopes inside are
//! `Profiler::scope` (host only: `scope_on`'s event record would be captured into the graph).

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaGraph, CudaSlice, CudaStream};
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::ledger::IterationRow;
use gpu_ledger::Profiler;

pub type Error = Box<dyn std::error::Error>;

/// Elements of each vector.
pub const N: usize = 1 << 16;

/// What one replay runs in each phase, by its scope path below the replay's: kernels, copies
/// and memsets.
pub const PHASES: [(&str, u64, u64, u64); 3] = [
    ("forward/attention", 2, 0, 0),
    ("backward", 1, 1, 1),
    ("optimizer", 1, 0, 0),
];
/// Kernels one replay runs.
pub const KERNELS: u64 = 4;
/// Kernel, copy and memset nodes of the graph.
pub const NODES: u64 = 6;

/// The step's stream, kernel and buffers.
pub struct GraphStep {
    pub stream: Arc<CudaStream>,
    vadd: VectorAdd,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    d: CudaSlice<f32>,
}

impl GraphStep {
    /// The step on a stream of its own of `ctx`, whose event tracking must be off already
    /// (`ctx.disable_event_tracking()` before any allocation).
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self, Error> {
        if ctx.is_managing_stream_synchronization() {
            return Err(
                "cudarc's event tracking is on: it would record and wait on events inside the \
                 capture (call ctx.disable_event_tracking() first)"
                    .into(),
            );
        }
        let stream = ctx.new_stream()?;
        let vadd = VectorAdd::new(ctx)?;
        let v = || stream.alloc_zeros::<f32>(N);
        let (a, b, c, d) = (v()?, v()?, v()?, v()?);
        stream.synchronize()?;
        Ok(GraphStep {
            stream,
            vadd,
            a,
            b,
            c,
            d,
        })
    }

    /// The step's work, each phase in its scope: run eagerly, or captured by [`capture`].
    pub fn phases(&mut self) -> Result<(), Error> {
        let n = N as u64;
        {
            let _forward = Profiler::scope("forward");
            let _attention = Profiler::scope("attention");
            self.vadd
                .launch(&self.stream, &self.a, &self.b, &mut self.c, n)?;
            self.vadd
                .launch(&self.stream, &self.c, &self.b, &mut self.d, n)?;
        }
        {
            let _backward = Profiler::scope("backward");
            self.vadd
                .launch(&self.stream, &self.d, &self.a, &mut self.c, n)?;
            self.stream.memcpy_dtod(&self.c, &mut self.d)?;
            self.stream.memset_zeros(&mut self.c)?;
        }
        let _optimizer = Profiler::scope("optimizer");
        self.vadd
            .launch(&self.stream, &self.d, &self.b, &mut self.a, n)?;
        Ok(())
    }

    /// Captures [`phases`] into a graph and instantiates it (cudarc's `end_capture` does both).
    /// An error inside the capture is reported rather than the invalidated capture's.
    pub fn capture(&mut self) -> Result<CudaGraph, Error> {
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let captured = self.phases();
        let ended = self.stream.end_capture(CUgraphInstantiate_flags(0));
        captured.map_err(|e| format!("during stream capture: {e}"))?;
        Ok(ended?.ok_or("stream capture produced an empty graph")?)
    }
}

/// Launches `graph` with scope `step/<name>` open.
pub fn replay(graph: &CudaGraph, name: &'static str) -> Result<(), Error> {
    let _step = Profiler::scope("step");
    let _replay = Profiler::scope(name);
    graph.launch()?;
    Ok(())
}

/// Kernels of a row in `path`.
pub fn kernels_in(row: &IterationRow, path: &str) -> u64 {
    row.scopes
        .iter()
        .filter(|s| s.path == path)
        .map(|s| s.kernels)
        .sum()
}

/// What is wrong with a traced row that ran `replays` replays of the graph in `step/<name>`
/// (none when all is as it should be): each phase's kernels in `step/<name>/<phase>`, none in
/// `step/<name>` itself.
pub fn phase_errors(row: &IterationRow, name: &str, replays: u64) -> Vec<String> {
    let mut errors = Vec::new();
    for (phase, kernels, _, _) in PHASES {
        let path = format!("step/{name}/{phase}");
        let got = kernels_in(row, &path);
        if got != kernels * replays {
            errors.push(format!(
                "row {}: {got} kernels in {path}, not {}",
                row.index,
                kernels * replays
            ));
        }
    }
    let launch = kernels_in(row, &format!("step/{name}"));
    if launch != 0 {
        errors.push(format!(
            "row {}: {launch} kernels in step/{name} itself",
            row.index
        ));
    }
    errors
}

/// One graph launch as a row's recorded activities show it: the records that carry its
/// correlation id, and the scopes they landed in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LaunchSeen {
    pub records: u64,
    pub scopes: BTreeSet<String>,
}

/// The row's graph node records (`record_activities` on) by correlation id: a correct
/// correlation gives one id per replay, each carrying every node's record, in scopes below the
/// replay's.
pub fn graph_launches(row: &IterationRow) -> BTreeMap<u32, LaunchSeen> {
    let mut seen: BTreeMap<u32, LaunchSeen> = BTreeMap::new();
    for a in row.activities.iter().flatten() {
        if a.graph_id.is_none() {
            continue;
        }
        let l = seen.entry(a.correlation_id).or_default();
        l.records += 1;
        l.scopes.insert(a.scope.clone());
    }
    seen
}

/// One line on the row's graph launches: how many, their correlation ids, and whether each
/// carried every node's record in scopes below `step/`.
pub fn launches_line(row: &IterationRow) -> String {
    let launches = graph_launches(row);
    let ids: Vec<String> = launches.keys().map(u32::to_string).collect();
    let whole = launches
        .values()
        .filter(|l| l.records == NODES && l.scopes.iter().all(|s| s.starts_with("step/")))
        .count();
    format!(
        "row {}: {} graph launches (correlation ids {}), {whole} with all {NODES} node records \
         in scopes below step/",
        row.index,
        launches.len(),
        ids.join(", ")
    )
}
