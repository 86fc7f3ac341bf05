//! Chrome trace / Perfetto JSON (the Trace Event Format, JSON object form) of a ledger, written
//! as a stream: one row in, its events out, nothing kept but track names.
//!
//! # Tracks
//! | process (`pid`) | thread (`tid`) | events |
//! |---|---|---|
//! | `GPU d` (`d + 1`) | `stream s` (`s + 1`) | kernels, copies and memsets as complete events (`"ph":"X"`) |
//! | `GPU d` | `stream s (overlap k)` (`s + 1 + k·2²⁰`) | activities that overlap an earlier one on the same stream (programmatic dependent launch) |
//! | `GPU d` | `device busy (summary)` ([`DEVICE_SUMMARY_TID`], `+ k` for overlap lanes) | one slice per iteration over the device's activity window, when activities were not recorded |
//! | `GPU d` | `idle gaps` (`0x7FFE_0000`, `+ k` for overlap lanes) | each row's longest idle gaps, named by cause (`trace/idle.rs`) |
//! | `GPU d` | counters (`"ph":"C"`) | `SM clock`, `memory clock`, `power`, `temperature` from NVML and `device busy` (% of the window), one value per iteration |
//! | `host` ([`HOST_PID`]) | `iterations` (1) | one slice per iteration; when activities were not recorded, scope summary slices nested in it |
//! | `host` | `thread t` (`t + 2`) | scope spans of gpu-ledger thread `t` |
//!
//! Perfetto gives `pid 0` and `tid 0` a special meaning (the kernel's idle task), hence the
//! offsets. Track names come from `"M"` metadata events.
//!
//! # Time
//! Timestamps are µs since the profiler started (fractions keep the ns). Host times in the ledger
//! (`host_start_ns`, scope spans) are already ns since the start; activity times are CUPTI ns and
//! are mapped with the header's `start_cupti_ns`. A ledger without it gets device times shifted so
//! that the first device time seen lines up with its iteration's start, and says so in the
//! metadata.
//!
//! # Several ranks
//! [`TraceWriter::select_rank`] puts the rows of several ranks' ledgers in one trace, each rank's
//! processes [`RANK_PID_STRIDE`] apart, its rows moved by the shift the caller gives (the command
//! line aligns every rank's iteration k on one start, never moving a rank's row before its
//! previous one); the metadata (`ranks`, `alignment`) says so.
//!
//! # Without recorded activities
//! Rows without `activities` (the default: `Config::record_activities` off) give per-iteration
//! summaries instead: scope slices whose durations are the measured host times but whose positions
//! are laid out (children one after another inside their parent, from the iteration's start), and
//! one device slice per iteration with busy, idle and largest gap. The trace metadata
//! (`otherData`) and the host process's label say so.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::str::FromStr;

use serde::Serialize;
use serde_json::json;

use super::lanes::Lanes;
use crate::analysis::families::qualified_name;
use gpu_ledger_format::reader::Ledger;
use gpu_ledger_format::schema::{Header, IterationRow, Trailer};

mod idle;

/// Process id of the host tracks.
pub const HOST_PID: u32 = 100_000;
/// Thread id of the iteration track in the host process.
pub const ITERATION_TID: u32 = 1;
/// Thread id of the per-iteration device summary track in each GPU process.
pub const DEVICE_SUMMARY_TID: u32 = 0x7FFF_0000;
/// Distance between the thread ids of two lanes of one stream.
pub const LANE_STRIDE: u64 = 1 << 20;
/// Distance between the process ids of two ranks in a trace of several
/// ([`TraceWriter::select_rank`]): the `p`-th rank's host is `HOST_PID + p · RANK_PID_STRIDE`.
pub const RANK_PID_STRIDE: u32 = 1_000_000;

/// The process id of device `d`.
pub fn device_pid(d: u32) -> u32 {
    d.saturating_add(1)
}

/// A range of iteration indices: `A..B` (B excluded), `A..=B`, `A..`, `..B`, `..=B`, `N` or `..`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IterationRange {
    /// First index kept.
    pub start: Option<u64>,
    /// First index no longer kept.
    pub end: Option<u64>,
}

impl IterationRange {
    /// Every iteration.
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether `index` is in the range.
    pub fn contains(&self, index: u64) -> bool {
        self.start.is_none_or(|s| index >= s) && self.end.is_none_or(|e| index < e)
    }

    /// Whether every index is in the range.
    pub fn is_all(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
}

impl std::fmt::Display for IterationRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(s) = self.start {
            write!(f, "{s}")?;
        }
        f.write_str("..")?;
        if let Some(e) = self.end {
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// An iteration range that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad iteration range {text:?}: {reason} (expected A..B with B excluded, A..=B, A.., ..B or N)"
)]
pub struct RangeParseError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for IterationRange {
    type Err = RangeParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| RangeParseError {
            text: s.to_string(),
            reason,
        };
        let num = |t: &str| -> Result<Option<u64>, RangeParseError> {
            let t = t.trim();
            if t.is_empty() {
                Ok(None)
            } else {
                t.parse::<u64>()
                    .map(Some)
                    .map_err(|_| err("not a non-negative integer"))
            }
        };
        let t = s.trim();
        // An inclusive end of u64::MAX has no exclusive end: the range is open above.
        let Some((a, b)) = t.split_once("..") else {
            let n = num(t)?.ok_or_else(|| err("empty"))?;
            return Ok(Self {
                start: Some(n),
                end: n.checked_add(1),
            });
        };
        let start = num(a)?;
        let end = match b.strip_prefix('=') {
            Some(b) => num(b)?
                .ok_or_else(|| err("..= needs an end"))?
                .checked_add(1),
            None => num(b)?,
        };
        if let (Some(a), Some(b)) = (start, end) {
            if b <= a {
                return Err(err("the range is empty"));
            }
        }
        Ok(Self { start, end })
    }
}

/// How to write a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOptions {
    /// Iterations exported; the others are skipped. Default: all.
    pub iterations: IterationRange,
    /// Show demangled kernel names (template arguments kept, parameters dropped). Default true.
    pub demangle: bool,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            iterations: IterationRange::all(),
            demangle: true,
        }
    }
}

/// What a trace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceStats {
    /// Trace events written (metadata included).
    pub events: u64,
    /// Iteration rows exported.
    pub iterations: u64,
    /// Rows skipped by the iteration range.
    pub skipped: u64,
    /// Kernel, memcpy and memset events.
    pub activities: u64,
    /// Scope span events.
    pub scope_spans: u64,
    /// Exported rows that had no recorded activities (summarised instead).
    pub summary_iterations: u64,
    /// Activities moved to an overlap lane of their stream.
    pub overlapping_activities: u64,
    /// Idle-gap slices (rows' longest gaps).
    pub idle_gaps: u64,
}

#[derive(Serialize)]
struct Complete<'a, A: Serialize> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    ts: f64,
    dur: f64,
    args: A,
}

#[derive(Serialize)]
struct Counter<'a, A: Serialize> {
    name: &'a str,
    ph: &'static str,
    pid: u32,
    ts: f64,
    args: A,
}

#[derive(Serialize)]
struct ActivityArgs<'a> {
    iteration: u64,
    scope: &'a str,
    stream: u32,
    correlation_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gb_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    graph_id: Option<u32>,
}

fn ns_to_us(ns: i128) -> f64 {
    ns as f64 / 1e3
}

/// Writes a Trace Event Format JSON document row by row.
///
/// ```
/// use gpu_ledger_tools::export::{TraceOptions, TraceWriter};
/// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
/// #     "/../tests/data/v1-overlapping-streams.jsonl")).unwrap();
/// # let ledger = gpu_ledger_format::reader::parse_ledger(text.as_bytes(), "x".as_ref()).unwrap();
/// let mut out = Vec::new();
/// let mut w = TraceWriter::new(&mut out, &ledger.header, TraceOptions::default())?;
/// for row in &ledger.iterations {
///     w.write_row(row)?;
/// }
/// let stats = w.finish(ledger.trailer.as_ref())?;
/// let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert_eq!(doc["traceEvents"].as_array().unwrap().len() as u64, stats.events);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TraceWriter<W: Write> {
    out: W,
    opts: TraceOptions,
    first: bool,
    stats: TraceStats,
    cupti_origin: Option<i128>,
    origin_guessed: bool,
    header_level: String,
    record_activities: bool,
    schema_version: u32,
    start_unix_ns: u64,
    gpu_ledger_version: String,
    processes: BTreeSet<u32>,
    threads: BTreeSet<(u32, u32)>,
    lanes: HashMap<(u32, u32), Lanes>,
    names: HashMap<String, String>,
    first_ts: Option<f64>,
    last_ts: Option<f64>,
    /// Added to every process id: 0 but in a trace of several ranks.
    pid_base: u32,
    /// Added to every time of the rows being written, ns: their rank's alignment.
    shift_ns: i128,
    /// `" (rank r)"` in a trace of several ranks, for process names.
    rank_label: String,
    /// The CUPTI origin of each rank (by process id base) while another rank's rows are written.
    rank_origins: HashMap<u32, Option<i128>>,
    /// The ranks of a trace of several, in the order first selected.
    aligned_ranks: Vec<u32>,
    /// Entries a caller added to the metadata ([`TraceWriter::set_metadata`]).
    extra: Vec<(String, serde_json::Value)>,
}

impl<W: Write> TraceWriter<W> {
    /// Starts the document and names the host process.
    ///
    /// # Errors
    /// Any error of `out`.
    pub fn new(out: W, header: &Header, opts: TraceOptions) -> io::Result<Self> {
        let mut w = Self {
            out,
            opts,
            first: true,
            stats: TraceStats::default(),
            cupti_origin: header.start_cupti_ns.map(i128::from),
            origin_guessed: false,
            header_level: header.config.level.clone(),
            record_activities: header.config.record_activities,
            schema_version: header.schema_version,
            start_unix_ns: header.start_unix_ns,
            gpu_ledger_version: header.gpu_ledger_version.clone(),
            processes: BTreeSet::new(),
            threads: BTreeSet::new(),
            lanes: HashMap::new(),
            names: HashMap::new(),
            first_ts: None,
            last_ts: None,
            pid_base: 0,
            shift_ns: 0,
            rank_label: String::new(),
            rank_origins: HashMap::new(),
            aligned_ranks: Vec::new(),
            extra: Vec::new(),
        };
        w.out.write_all(b"{\"traceEvents\":[\n")?;
        let host_name = match &header.rank {
            Some(r) => format!("host (rank {})", r.rank),
            None => "host".to_string(),
        };
        w.name_process(HOST_PID, &host_name, 0)?;
        if !header.config.record_activities {
            w.emit(
                &json!({"name": "process_labels", "ph": "M", "pid": HOST_PID,
                "args": {"labels": "activities not recorded: per-iteration summaries"}}),
            )?;
        }
        w.name_thread(HOST_PID, ITERATION_TID, "iterations", 0)?;
        Ok(w)
    }

    fn emit<T: Serialize>(&mut self, ev: &T) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, ev).map_err(io::Error::other)?;
        self.stats.events += 1;
        Ok(())
    }

    fn name_process(&mut self, pid: u32, name: &str, sort: u32) -> io::Result<()> {
        if !self.processes.insert(pid) {
            return Ok(());
        }
        self.emit(&json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}))?;
        self.emit(
            &json!({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort}}),
        )
    }

    fn name_thread(&mut self, pid: u32, tid: u32, name: &str, sort: u32) -> io::Result<()> {
        if !self.threads.insert((pid, tid)) {
            return Ok(());
        }
        self.emit(
            &json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}),
        )?;
        self.emit(
            &json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
            "args": {"sort_index": sort}}),
        )
    }

    fn device_process(&mut self, d: u32) -> io::Result<u32> {
        let pid = device_pid(d).saturating_add(self.pid_base);
        if !self.processes.contains(&pid) {
            let name = format!("GPU {d}{}", self.rank_label);
            let sort = (self.pid_base / RANK_PID_STRIDE).saturating_mul(1000);
            self.name_process(pid, &name, sort.saturating_add(d).saturating_add(1))?;
        }
        Ok(pid)
    }

    fn host_pid(&self) -> u32 {
        HOST_PID.saturating_add(self.pid_base)
    }

    /// Makes the rows written next those of rank `rank`, the `position`-th of a trace of several
    /// ranks, whose ledger has `header`: its processes are `position · RANK_PID_STRIDE` above a
    /// single ledger's, and every time of its rows moves by `shift_ns`, which aligns its
    /// iterations with the other ranks'. Position 0 is the rank whose header the writer was made
    /// with.
    ///
    /// # Errors
    /// Any error of the output.
    pub fn select_rank(
        &mut self,
        position: u32,
        rank: u32,
        header: &Header,
        shift_ns: i128,
    ) -> io::Result<()> {
        let base = position.saturating_mul(RANK_PID_STRIDE);
        if base != self.pid_base {
            self.rank_origins.insert(self.pid_base, self.cupti_origin);
            self.cupti_origin = match self.rank_origins.get(&base) {
                Some(o) => *o,
                None => header.start_cupti_ns.map(i128::from),
            };
            self.pid_base = base;
        }
        self.shift_ns = shift_ns;
        self.rank_label = format!(" (rank {rank})");
        if !self.aligned_ranks.contains(&rank) {
            self.aligned_ranks.push(rank);
            let pid = self.host_pid();
            self.name_process(
                pid,
                &format!("host (rank {rank})"),
                position.saturating_mul(1000),
            )?;
            self.name_thread(pid, ITERATION_TID, "iterations", 0)?;
        }
        Ok(())
    }

    fn host_ts(&mut self, ns: u64) -> f64 {
        let ts = ns_to_us(i128::from(ns) + self.shift_ns);
        self.seen(ts);
        ts
    }

    fn device_ts(&mut self, ns: u64, row_host_start_ns: u64) -> f64 {
        let origin = match self.cupti_origin {
            Some(o) => o,
            None => {
                let o = i128::from(ns) - i128::from(row_host_start_ns);
                self.cupti_origin = Some(o);
                self.origin_guessed = true;
                o
            }
        };
        let ts = ns_to_us(i128::from(ns) - origin + self.shift_ns);
        self.seen(ts);
        ts
    }

    fn seen(&mut self, ts: f64) {
        self.first_ts = Some(self.first_ts.map_or(ts, |f| f.min(ts)));
        self.last_ts = Some(self.last_ts.map_or(ts, |l| l.max(ts)));
    }

    /// The first lane of `key` (a process and a stream) free at `start` (slices on one track
    /// must nest), now busy until `end`. The times are a device's, moved by the rank's shift:
    /// two ranks' processes have lanes of their own, and a rank's shift can change between rows.
    fn lane(&mut self, key: (u32, u32), start: i128, end: i128) -> usize {
        let (start, end) = (start + self.shift_ns, end + self.shift_ns);
        self.lanes.entry(key).or_default().take(start, end)
    }

    fn display(&mut self, name: &str) -> String {
        if !self.opts.demangle {
            return name.to_string();
        }
        if let Some(shown) = self.names.get(name) {
            return shown.clone();
        }
        let shown = qualified_name(name).unwrap_or_else(|| name.to_string());
        // The names that repeat fit; millions of distinct ones are demangled each time.
        if self.names.len() < crate::analysis::families::NAMER_CACHE {
            self.names.insert(name.to_string(), shown.clone());
        }
        shown
    }

    /// Writes the events of one row, unless the iteration range leaves it out. Returns whether
    /// the row was exported.
    ///
    /// # Errors
    /// Any error of the output.
    pub fn write_row(&mut self, row: &IterationRow) -> io::Result<bool> {
        if !self.opts.iterations.contains(row.index) {
            self.stats.skipped += 1;
            return Ok(false);
        }
        self.write_iteration_slice(row)?;
        match &row.activities {
            Some(acts) => self.write_activities(row, acts)?,
            None => {
                self.stats.summary_iterations += 1;
                self.write_scope_summary(row)?;
                self.write_device_summary(row)?;
            }
        }
        self.write_idle_gaps(row)?;
        if let Some(spans) = &row.scope_spans {
            for s in spans {
                let tid = s.thread.saturating_add(2);
                let host = self.host_pid();
                if !self.threads.contains(&(host, tid)) {
                    self.name_thread(host, tid, &format!("thread {}", s.thread), tid)?;
                }
                let ts = self.host_ts(s.start_ns);
                let end = self.host_ts(s.end_ns.max(s.start_ns));
                let leaf = s.path.rsplit('/').next().unwrap_or(&s.path);
                self.emit(&Complete {
                    name: leaf,
                    cat: "scope",
                    ph: "X",
                    pid: self.host_pid(),
                    tid,
                    ts,
                    dur: end - ts,
                    args: json!({"path": s.path, "iteration": row.index}),
                })?;
                self.stats.scope_spans += 1;
            }
        }
        self.write_counters(row)?;
        self.stats.iterations += 1;
        Ok(true)
    }

    fn write_iteration_slice(&mut self, row: &IterationRow) -> io::Result<()> {
        let mut name = format!("iteration {}", row.index);
        if row.perturbed {
            name.push_str(" (perturbed)");
        }
        if !row.complete {
            name.push_str(" (incomplete)");
        }
        let ts = self.host_ts(row.host_start_ns);
        let end = self.host_ts(row.host_start_ns.saturating_add(row.host_wall_ns));
        self.emit(&Complete {
            name: &name,
            cat: "iteration",
            ph: "X",
            pid: self.host_pid(),
            tid: ITERATION_TID,
            ts,
            dur: end - ts,
            args: json!({
                "index": row.index,
                "host_wall_ms": row.host_wall_ns as f64 / 1e6,
                "complete": row.complete,
                "perturbed": row.perturbed,
                "dropped_records": row.dropped_records,
                "missing_records": row.missing_records,
                "warnings": row.warnings,
            }),
        })
    }

    fn write_activities(
        &mut self,
        row: &IterationRow,
        acts: &[gpu_ledger_format::schema::ActivityEntry],
    ) -> io::Result<()> {
        let mut order: Vec<usize> = (0..acts.len()).collect();
        order.sort_by_key(|&i| (acts[i].start_ns, acts[i].end_ns));
        for i in order {
            let a = &acts[i];
            let pid = self.device_process(a.device_id)?;
            let start = i128::from(a.start_ns);
            let end = i128::from(a.end_ns.max(a.start_ns));
            let lane = self.lane((pid, a.stream_id), start, end);
            let tid64 = u64::from(a.stream_id) + 1 + lane as u64 * LANE_STRIDE;
            let tid = u32::try_from(tid64).unwrap_or(a.stream_id.saturating_add(1));
            if lane > 0 {
                self.stats.overlapping_activities += 1;
            }
            if !self.threads.contains(&(pid, tid)) {
                let label = if lane == 0 {
                    format!("stream {}", a.stream_id)
                } else {
                    format!("stream {} (overlap {lane})", a.stream_id)
                };
                self.name_thread(pid, tid, &label, a.stream_id.saturating_add(1))?;
            }
            let ts = self.device_ts(a.start_ns, row.host_start_ns);
            let te = self.device_ts(end as u64, row.host_start_ns);
            let dur_ns = (end - start) as f64;
            let (name, cat, kernel) = match a.kind.as_str() {
                "kernel" => (self.display(&a.name), "kernel", Some(a.name.as_str())),
                "memset" => ("memset".to_string(), "memset", None),
                "memcpy" => (format!("memcpy {}", a.name), "memcpy", None),
                other => (format!("{other} {}", a.name), "activity", None),
            };
            let gb_per_s = a.bytes.filter(|_| dur_ns > 0.0).map(|b| b as f64 / dur_ns);
            self.emit(&Complete {
                name: &name,
                cat,
                ph: "X",
                pid,
                tid,
                ts,
                dur: te - ts,
                args: ActivityArgs {
                    iteration: row.index,
                    scope: &a.scope,
                    stream: a.stream_id,
                    correlation_id: a.correlation_id,
                    kernel: kernel.filter(|k| *k != name),
                    bytes: a.bytes,
                    gb_per_s,
                    graph_id: a.graph_id,
                },
            })?;
            self.stats.activities += 1;
        }
        Ok(())
    }

    /// Scope slices laid out inside the iteration slice: durations measured, positions not.
    fn write_scope_summary(&mut self, row: &IterationRow) -> io::Result<()> {
        let paths: BTreeSet<&str> = row.scopes.iter().map(|s| s.path.as_str()).collect();
        let parent_of = |p: &str| -> Option<String> {
            let mut cur = p;
            while let Some((head, _)) = cur.rsplit_once('/') {
                if paths.contains(head) {
                    return Some(head.to_string());
                }
                cur = head;
            }
            None
        };
        // Sum entries listed twice, keep first-seen order.
        let mut order: Vec<&str> = Vec::new();
        let mut host: HashMap<&str, (u64, u64, u64, u64)> = HashMap::new();
        for s in &row.scopes {
            let e = host.entry(s.path.as_str()).or_insert_with(|| {
                order.push(s.path.as_str());
                (0, 0, 0, 0)
            });
            e.0 = e.0.saturating_add(s.host_ns);
            e.1 = e.1.saturating_add(s.device_ns_inclusive);
            e.2 = e.2.saturating_add(s.calls);
            e.3 = e.3.saturating_add(s.launches);
        }
        let mut children: HashMap<Option<String>, Vec<&str>> = HashMap::new();
        for p in &order {
            children.entry(parent_of(p)).or_default().push(p);
        }
        // Depth-first from the top-level scopes; each node gets [start, start + min(host, room)).
        let iter_start = row.host_start_ns;
        let iter_end = row.host_start_ns.saturating_add(row.host_wall_ns);
        let mut stack: Vec<(Option<String>, u64, u64)> = vec![(None, iter_start, iter_end)];
        while let Some((parent, start, end)) = stack.pop() {
            let mut cursor = start;
            for p in children.get(&parent).cloned().unwrap_or_default() {
                let (h, dev, calls, launches) = host.get(p).copied().unwrap_or_default();
                let dur = h.min(end.saturating_sub(cursor));
                if dur > 0 {
                    let ts = self.host_ts(cursor);
                    let te = self.host_ts(cursor + dur);
                    let leaf = p.rsplit('/').next().unwrap_or(p);
                    self.emit(&Complete {
                        name: leaf,
                        cat: "scope summary",
                        ph: "X",
                        pid: self.host_pid(),
                        tid: ITERATION_TID,
                        ts,
                        dur: te - ts,
                        args: json!({
                            "path": p,
                            "iteration": row.index,
                            "host_ms": h as f64 / 1e6,
                            "device_inclusive_ms": dev as f64 / 1e6,
                            "calls": calls,
                            "launches": launches,
                            "layout": "summary: duration measured, position laid out",
                        }),
                    })?;
                }
                stack.push((Some(p.to_string()), cursor, cursor + dur));
                cursor += dur;
            }
        }
        Ok(())
    }

    fn write_device_summary(&mut self, row: &IterationRow) -> io::Result<()> {
        for d in &row.devices {
            if d.last_end_ns == 0 {
                continue; // no activity on this device in this iteration
            }
            let pid = self.device_process(d.device_id)?;
            let end = d.last_end_ns.max(d.first_start_ns);
            // Windows of consecutive iterations overlap when the GPU runs behind the host.
            let lane = self.lane(
                (pid, u32::MAX),
                i128::from(d.first_start_ns),
                i128::from(end),
            );
            let tid = DEVICE_SUMMARY_TID.saturating_add(lane as u32);
            if !self.threads.contains(&(pid, tid)) {
                let label = if lane == 0 {
                    "device busy (summary)".to_string()
                } else {
                    format!("device busy (summary, overlap {lane})")
                };
                self.name_thread(pid, tid, &label, lane as u32)?;
            }
            let window = d.last_end_ns.saturating_sub(d.first_start_ns);
            let ts = self.device_ts(d.first_start_ns, row.host_start_ns);
            let te = self.device_ts(d.last_end_ns.max(d.first_start_ns), row.host_start_ns);
            let busy_share = if window > 0 {
                d.busy_ns as f64 / window as f64
            } else {
                0.0
            };
            let name = format!("iteration {}: busy {:.0}%", row.index, busy_share * 100.0);
            self.emit(&Complete {
                name: &name,
                cat: "device summary",
                ph: "X",
                pid,
                tid,
                ts,
                dur: te - ts,
                args: json!({
                    "iteration": row.index,
                    "busy_ms": d.busy_ns as f64 / 1e6,
                    "idle_ms": d.idle_ns as f64 / 1e6,
                    "largest_gap_ms": d.largest_gap_ns as f64 / 1e6,
                    "kernel_count": d.kernel_count,
                }),
            })?;
        }
        Ok(())
    }

    fn write_counters(&mut self, row: &IterationRow) -> io::Result<()> {
        let ts = self.host_ts(row.host_start_ns);
        for d in &row.devices {
            let window = d.last_end_ns.saturating_sub(d.first_start_ns);
            if window > 0 {
                let pid = self.device_process(d.device_id)?;
                let pct = d.busy_ns as f64 / window as f64 * 100.0;
                self.emit(&Counter {
                    name: "device busy",
                    ph: "C",
                    pid,
                    ts,
                    args: json!({"% of window": pct}),
                })?;
            }
        }
        for n in &row.nvml {
            let pid = self.device_process(n.device_id)?;
            if let Some(c) = &n.sm_clock {
                self.emit(&Counter {
                    name: "SM clock",
                    ph: "C",
                    pid,
                    ts,
                    args: json!({"MHz": c.mean_mhz}),
                })?;
            }
            if let Some(c) = &n.mem_clock {
                self.emit(&Counter {
                    name: "memory clock",
                    ph: "C",
                    pid,
                    ts,
                    args: json!({"MHz": c.mean_mhz}),
                })?;
            }
            if let Some(p) = &n.power {
                self.emit(&Counter {
                    name: "power",
                    ph: "C",
                    pid,
                    ts,
                    args: json!({"W": p.mean_w}),
                })?;
            }
            if let Some(t) = n.temperature_max_c {
                self.emit(&Counter {
                    name: "temperature",
                    ph: "C",
                    pid,
                    ts,
                    args: json!({"C": t}),
                })?;
            }
        }
        Ok(())
    }

    /// Writes the metadata (`otherData`) and closes the document. Returns what was written.
    ///
    /// # Errors
    /// Any error of the output.
    pub fn finish(mut self, trailer: Option<&Trailer>) -> io::Result<TraceStats> {
        let content = match (self.stats.iterations, self.stats.summary_iterations) {
            (0, _) => "empty: no iteration in the range",
            (n, 0) if n > 0 => "activities: kernels, copies and memsets as recorded",
            (n, s) if s == n => {
                "summary: activities were not recorded (Config::record_activities off); scope \
                 slices have measured durations but laid-out positions, device slices span each \
                 iteration's activity window"
            }
            _ => "mixed: some rows carry activities, the others are summarised",
        };
        let time_origin = if self.origin_guessed {
            "µs since the profiler started; the header has no start_cupti_ns, so device times \
             were shifted to start with their iteration and are not aligned with host times"
        } else {
            "µs since the profiler started (device times mapped with start_cupti_ns)"
        };
        let mut meta = json!({
            "generator": format!("gpu-ledger {} trace export", env!("CARGO_PKG_VERSION")),
            "ledger_gpu_ledger_version": self.gpu_ledger_version,
            "ledger_schema_version": self.schema_version,
            "level": self.header_level,
            "activities_recorded": self.record_activities,
            "trace_content": content,
            "time_origin": time_origin,
            "start_unix_ns": self.start_unix_ns,
            "iteration_range": self.opts.iterations.to_string(),
            "iterations_exported": self.stats.iterations,
            "iterations_skipped": self.stats.skipped,
            "activities": self.stats.activities,
            "overlapping_activities": self.stats.overlapping_activities,
            "run_complete": trailer.is_some(),
            "dropped_records": trailer.map(|t| t.dropped_records),
        });
        self.idle_meta(&mut meta);
        if !self.aligned_ranks.is_empty() {
            meta["ranks"] = json!(self.aligned_ranks);
            meta["alignment"] = json!(
                "ranks aligned on iteration boundaries: every rank's iteration k starts at one \
                 common time; host clocks of different hosts are never compared: times within an \
                 iteration are each rank's own (µs since its profiler started, shifted), and the \
                 time from iteration k-1's common start to k's is the longest any rank took from \
                 its own k-1 to k, so that no rank's iterations overlap; a faster rank shows the \
                 difference as a gap before its next iteration, the wait at the next collective"
            );
        }
        for (k, v) in std::mem::take(&mut self.extra) {
            meta[k] = v;
        }
        write!(
            self.out,
            "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":"
        )?;
        serde_json::to_writer(&mut self.out, &meta).map_err(io::Error::other)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        Ok(self.stats)
    }

    /// Counts `n` rows that the range left out without their being handed to
    /// [`TraceWriter::write_row`] (a reader passed over them), as it counts the rows it skips.
    pub fn add_skipped(&mut self, n: u64) {
        self.stats.skipped += n;
    }

    /// Adds `key` to the trace's metadata (`otherData`), replacing an entry of that name.
    pub fn set_metadata(&mut self, key: &str, value: serde_json::Value) {
        self.extra.retain(|(k, _)| k != key);
        self.extra.push((key.to_string(), value));
    }

    /// What was written so far.
    pub fn stats(&self) -> TraceStats {
        self.stats
    }

    /// First and last timestamps written so far, µs.
    pub fn time_span_us(&self) -> Option<(f64, f64)> {
        self.first_ts.zip(self.last_ts)
    }
}

/// Writes the trace of a whole ledger to `out`.
///
/// # Errors
/// Any error of `out`.
pub fn write_trace<W: Write>(
    ledger: &Ledger,
    out: W,
    opts: &TraceOptions,
) -> io::Result<TraceStats> {
    let mut w = TraceWriter::new(out, &ledger.header, opts.clone())?;
    for row in &ledger.iterations {
        w.write_row(row)?;
    }
    w.finish(ledger.trailer.as_ref())
}

#[cfg(test)]
mod tests;
