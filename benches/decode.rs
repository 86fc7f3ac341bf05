//! Decoding CUPTI activity records on one core, from synthetic buffers (issue 7: at least
//! 10 million records per second, decoding and attribution together).
//!
//! The buffers hold the records CUPTI 13.0 writes for a kernel launch, laid out as CUPTI lays them
//! out (back to back, 8-byte aligned): a `CUpti_ActivityKernel10`, a `CUpti_ActivityAPI` of kind
//! DRIVER for `cuLaunchKernel` (cbid 307) and, when the launch is inside a scope, a
//! `CUpti_ActivityExternalCorrelation`. Kernel names are 20 mangled C++ names, each at one
//! address as CUPTI hands them out, so the name cache hits as it does in a real run.
//!
//! Groups (throughput in records):
//! - `decode/{kernel,api,external_correlation}`: one kind per buffer;
//! - `decode/launch_mix`: 3 records per launch, in launch order: the figure against the target;
//! - `decode/launch_mix_collect`: the same, collected into a fresh `Vec<Record>` per 4 MiB
//!   buffer first, which is what `Collector::decode` does today;
//! - `attribution/real_collector`: the launch mix decoded and handed to the profiler's own
//!   collector (`gpu_ledger::collector::OfflineCollector`, hidden from the docs): attribution to
//!   scope and iteration, an iteration ended every 1 000 launches and its row built
//!   (`build_row`), per record. The records of an iteration arrive before its end (the API
//!   records wait for the end, kernels for their API record);
//! - `attribution/real_collector_step_first`: the same with each iteration ended before its
//!   records arrive, as when CUPTI delivers buffers at a flush after `step()`;
//! - `attribution/captured_calls` and `captured_calls_step_first`: the design since session 6
//!   (`docs/design-notes.md`): a buffer of kernel records only, each launch's call handed to the
//!   collector as the API callback captures it (`OfflineCollector::accept_call`) just before its
//!   kernel record is decoded. Throughput in kernel records (one per launch);
//! - `attribution_model/{siphash,multiplicative}`: NOT the collector's code: a stand-in doing the
//!   per-launch hash-map work `Collector::accept` does (see `AttributionModel` below), with std's
//!   SipHash and with a multiplicative hash of the u32 correlation id, to size what the hasher
//!   costs.
//!
//! `cargo bench --bench decode` (add `-- --quick` for a short run); a summary with records/s
//! against the target prints last. `DECODE_CASES=captured` limits the summary to the cases whose
//! name holds that text (a short run, to repeat on a noisy host).

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{verdict, wall_and_cpu_medians, KERNEL_NAMES, SAMPLES};
use criterion::{criterion_group, Criterion, Throughput};
use cupti_sys as sys;
use gpu_ledger::activity::calls::CapturedCall;
use gpu_ledger::activity::record::{decode, NameCache, Record};
use gpu_ledger::collector::OfflineCollector;
use gpu_ledger::ledger::schema::IterationRow;

mod common;

/// Bytes per synthetic buffer: the profiler's default CUPTI buffer size.
const BUFFER_BYTES: usize = 4 << 20;

/// The target from issue 7, records per second on one core.
const TARGET_RECORDS_PER_S: f64 = 10e6;

/// What one buffer holds.
#[derive(Clone, Copy)]
enum Mix {
    Kernel,
    Api,
    ExternalCorrelation,
    /// External correlation, API and kernel record per launch (a launch inside a scope).
    Launch,
}

/// A synthetic CUPTI buffer: 8-byte aligned storage, and the record addresses
/// `cuptiActivityGetNextRecord` would hand out for it.
struct Buffer {
    /// Backing store; `u64` for CUPTI's 8-byte alignment. Never resized after the records are
    /// written (the addresses point into it).
    _storage: Vec<u64>,
    records: Vec<*const sys::CUpti_Activity>,
}

/// The kernel names, NUL-terminated, alive for the whole benchmark.
fn names() -> Vec<CString> {
    KERNEL_NAMES
        .iter()
        .map(|n| CString::new(*n).expect("no NUL in names"))
        .collect()
}

fn padded(size: usize) -> usize {
    size.div_ceil(8) * 8
}

fn kernel_record(i: u64, corr: u32, name: &CString) -> sys::CUpti_ActivityKernel10 {
    let start = 1_000_000_000 + i * 7_000;
    let end = start + 2_000 + (i % 97) * 50;
    sys::CUpti_ActivityKernel10 {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        registersPerThread: 32 + (i % 4) as u16 * 8,
        start,
        end,
        completed: end,
        queued: start - 3_000,
        submitted: start - 2_500,
        deviceId: 0,
        contextId: 1,
        streamId: 7,
        gridX: 132 * (1 + (i % 8) as i32),
        gridY: 1,
        gridZ: 1,
        blockX: 256,
        blockY: 1,
        blockZ: 1,
        staticSharedMemory: if i % 3 == 0 { 8192 } else { 0 },
        dynamicSharedMemory: if i % 5 == 0 { 49152 } else { 0 },
        correlationId: corr,
        gridId: i as i64,
        name: name.as_ptr(),
        sharedMemoryExecuted: 65536,
        ..Default::default()
    }
}

fn api_record(i: u64, corr: u32) -> sys::CUpti_ActivityAPI {
    let start = launch_api_start(i);
    sys::CUpti_ActivityAPI {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
        cbid: sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
        start,
        end: start + 2_500,
        processId: 4242,
        threadId: 4243,
        correlationId: corr,
        returnValue: 0,
    }
}

fn external_record(corr: u32, scope: u64) -> sys::CUpti_ActivityExternalCorrelation {
    sys::CUpti_ActivityExternalCorrelation {
        kind: sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
        externalKind: sys::CUpti_ExternalCorrelationKind::CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
        externalId: scope,
        correlationId: corr,
        ..Default::default()
    }
}

impl Buffer {
    /// Fills [`BUFFER_BYTES`] with records of `mix`.
    fn new(mix: Mix, names: &[CString]) -> Buffer {
        let mut storage = vec![0u64; BUFFER_BYTES / 8];
        let base = storage.as_mut_ptr().cast::<u8>();
        let mut offsets = Vec::new();
        let mut at = 0usize;
        let mut i = 0u64;
        // Writes one record at the next 8-byte aligned offset; false when the buffer is full.
        let mut put = |at: &mut usize, bytes: &[u8]| -> bool {
            let size = padded(bytes.len());
            if *at + size > BUFFER_BYTES {
                return false;
            }
            // SAFETY: `at + size` is within the storage (checked above), the source is a
            // plain-old-data record and the regions do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(*at), bytes.len());
            }
            offsets.push(*at);
            *at += size;
            true
        };
        loop {
            let corr = 1 + i as u32;
            let name = &names[(i as usize * 7) % names.len()];
            let scope = 1 + i % SCOPES;
            let ok = match mix {
                Mix::Kernel => put(&mut at, as_bytes(&kernel_record(i, corr, name))),
                Mix::Api => put(&mut at, as_bytes(&api_record(i, corr))),
                Mix::ExternalCorrelation => put(&mut at, as_bytes(&external_record(corr, scope))),
                Mix::Launch => {
                    // Whole launches only: a launch's API record without its kernel record
                    // would leave the real collector waiting for it.
                    let launch = padded(size_of::<sys::CUpti_ActivityExternalCorrelation>())
                        + padded(size_of::<sys::CUpti_ActivityAPI>())
                        + padded(size_of::<sys::CUpti_ActivityKernel10>());
                    at + launch <= BUFFER_BYTES
                        && put(&mut at, as_bytes(&external_record(corr, scope)))
                        && put(&mut at, as_bytes(&api_record(i, corr)))
                        && put(&mut at, as_bytes(&kernel_record(i, corr, name)))
                }
            };
            if !ok {
                break;
            }
            i += 1;
        }
        let records = offsets
            .iter()
            // SAFETY: every offset is inside the storage.
            .map(|&o| {
                unsafe { base.add(o) }
                    .cast::<sys::CUpti_Activity>()
                    .cast_const()
            })
            .collect();
        Buffer {
            _storage: storage,
            records,
        }
    }
}

/// The bytes of a plain-old-data record.
fn as_bytes<T: Copy>(rec: &T) -> &[u8] {
    // SAFETY: `T` is a bindgen record struct (Copy, no padding-sensitive invariants); reading its
    // bytes, padding included, is what copying it into a CUPTI buffer does.
    unsafe { std::slice::from_raw_parts((rec as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Decodes every record of `buf` and drops it, as the collector consumes records one by one.
fn decode_all(buf: &Buffer, names: &mut NameCache) -> u64 {
    let mut kernels = 0u64;
    for &rec in &buf.records {
        // SAFETY: `rec` points to a complete record of the kind its header says, inside storage
        // that outlives this call; the kernel names it points to are alive (`names()`).
        let r = unsafe { decode(rec, names) };
        kernels += u64::from(matches!(r, Record::Kernel(_)));
        black_box(&r);
    }
    kernels
}

/// Decodes every record of `buf` into a fresh vector first (the collector's current shape).
fn decode_collect(buf: &Buffer, names: &mut NameCache) -> usize {
    let mut decoded = Vec::new();
    for &rec in &buf.records {
        // SAFETY: as in `decode_all`.
        decoded.push(unsafe { decode(rec, names) });
    }
    let n = decoded.len();
    for r in decoded {
        black_box(&r);
    }
    n
}

/// A multiplicative hash for u32 keys (Fibonacci hashing), the kind of hasher correlation ids
/// need: they are sequential integers chosen by CUPTI, not by an attacker.
#[derive(Default)]
struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ u64::from(v)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type MulBuild = BuildHasherDefault<MulHasher>;

/// The hash-map work `Collector::accept` does per scoped kernel launch, with hasher `S`:
/// external-correlation record: `external` insert; API record: `api` insert, `api_ids` push,
/// `waiting` lookup, `expected` insert; kernel record: `api` lookup, `external` lookup,
/// `expected` remove, push to `placed`; when the row is written: `api` and `external` removes.
/// A stand-in for sizing, not the real code. The maps live across passes, as the collector's
/// do across iterations, so their capacity is reused.
#[derive(Default)]
struct AttributionModel<S> {
    external: HashMap<u32, u32, S>,
    api: HashMap<u32, u64, S>,
    waiting: HashMap<u32, Vec<Record>, S>,
    expected: HashSet<u32, S>,
    api_ids: Vec<u32>,
    placed: Vec<(u32, Record)>,
}

impl<S: std::hash::BuildHasher> AttributionModel<S> {
    /// Attributes every record of `buf`, then forgets them as a written row does.
    fn run(&mut self, buf: &Buffer, names: &mut NameCache) -> u64 {
        for &rec in &buf.records {
            // SAFETY: as in `decode_all`.
            match unsafe { decode(rec, names) } {
                Record::ExternalCorrelation {
                    correlation_id,
                    external_id,
                } => {
                    self.external.insert(correlation_id, external_id as u32);
                }
                Record::Api(a) => {
                    self.api.insert(a.correlation_id, 0);
                    self.api_ids.push(a.correlation_id);
                    if self.waiting.remove(&a.correlation_id).is_none() {
                        self.expected.insert(a.correlation_id);
                    }
                }
                Record::Kernel(k) => {
                    let corr = k.correlation_id;
                    if self.api.contains_key(&corr) {
                        let path = self.external.get(&corr).copied().unwrap_or(0);
                        self.expected.remove(&corr);
                        self.placed.push((path, Record::Kernel(k)));
                    } else {
                        self.waiting
                            .entry(corr)
                            .or_default()
                            .push(Record::Kernel(k));
                    }
                }
                other => {
                    black_box(other);
                }
            }
        }
        for corr in &self.api_ids {
            self.api.remove(corr);
            self.external.remove(corr);
        }
        self.api_ids.clear();
        let n = self.placed.len() as u64;
        black_box(&self.placed);
        self.placed.clear();
        n
    }
}

/// Launches per iteration in the real-collector benchmark.
const LAUNCHES_PER_ITERATION: u64 = 1_000;

/// Host start of launch `g`'s API call in the synthetic buffers, CUPTI ns (see `api_record`).
fn launch_api_start(g: u64) -> u64 {
    1_000_000_000 + g * 7_000 - 4_000
}

/// Scope ids the launch-mix buffers use as external ids: 1 + i % 10.
const SCOPES: u64 = 10;

/// The real collector fed the launch mix pass after pass. Pass `p` shifts every time by
/// `p * launches * 7 µs` and every correlation id by `p * launches`, so that the passes make one
/// continuous timeline (the collector's maps live on across iterations as in a run).
struct RealAttribution {
    collector: OfflineCollector,
    /// Kernel-record buffers, each launch's call captured (else the launch mix of records).
    captured: bool,
    /// End each iteration before its records arrive (else right after its last record).
    step_first: bool,
    launches_per_pass: u64,
    pass: u64,
    /// Kernel records accepted (= launches, one kernel per launch).
    launches_seen: u64,
    /// Launches covered by the iterations ended so far.
    ended_through: u64,
    names: NameCache,
}

impl RealAttribution {
    fn new(buf: &Buffer, step_first: bool, captured: bool) -> Self {
        let collector = OfflineCollector::new(launch_api_start(0) - 1);
        // External ids 1..=10: "step" and nine phases below it.
        assert_eq!(collector.intern_path("step"), 1);
        for id in 2..=SCOPES as u32 {
            assert_eq!(collector.intern_path(&format!("step/phase{id}")), id);
        }
        let per_launch = if captured { 1 } else { 3 };
        assert_eq!(buf.records.len() % per_launch, 0, "whole launches");
        let launches_per_pass = (buf.records.len() / per_launch) as u64;
        RealAttribution {
            collector,
            captured,
            step_first,
            launches_per_pass,
            pass: 0,
            launches_seen: 0,
            ended_through: 0,
            names: NameCache::default(),
        }
    }

    /// Ends the iteration that covers launches up to `ended_through + LAUNCHES_PER_ITERATION`
    /// and hands the rows written to `on_row`.
    fn end_iteration(&mut self, on_row: &mut impl FnMut(&IterationRow)) {
        self.ended_through += LAUNCHES_PER_ITERATION;
        let end = launch_api_start(self.ended_through);
        self.collector.end_iteration(end, end, self.ended_through);
        for row in self.collector.take_rows() {
            on_row(&row);
        }
    }

    /// One pass over `buf` (a launch-mix buffer).
    fn run(&mut self, buf: &Buffer, mut on_row: impl FnMut(&IterationRow)) {
        let dt = self.pass * self.launches_per_pass * 7_000;
        let dc = (self.pass * self.launches_per_pass) as u32;
        self.pass += 1;
        for &rec in &buf.records {
            if self.step_first && self.launches_seen == self.ended_through {
                self.end_iteration(&mut on_row);
            }
            // SAFETY: as in `decode_all`.
            let mut r = unsafe { decode(rec, &mut self.names) };
            let kernel = match &mut r {
                Record::Kernel(k) => {
                    k.start += dt;
                    k.end += dt;
                    k.correlation_id = k.correlation_id.wrapping_add(dc);
                    if self.captured {
                        // Launch g of the run is the buffer's launch i = g % n, in scope
                        // 1 + i % 10, entered in iteration g / 1000.
                        let i = self.launches_seen % self.launches_per_pass;
                        self.collector.accept_call(CapturedCall {
                            correlation_id: k.correlation_id,
                            cbid: sys::CUpti_driver_api_trace_cbid_enum::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                            iteration: self.launches_seen / LAUNCHES_PER_ITERATION,
                            path_id: (1 + i % SCOPES) as u32,
                            return_value: 0,
                            runtime: false,
                            nested: false,
                            outer_correlation_id: k.correlation_id,
                        });
                    }
                    true
                }
                Record::Api(a) => {
                    a.start += dt;
                    a.end += dt;
                    a.correlation_id = a.correlation_id.wrapping_add(dc);
                    false
                }
                Record::ExternalCorrelation { correlation_id, .. } => {
                    *correlation_id = correlation_id.wrapping_add(dc);
                    false
                }
                _ => false,
            };
            self.collector.accept(r);
            if kernel {
                self.launches_seen += 1;
                if !self.step_first
                    && self.launches_seen == self.ended_through + LAUNCHES_PER_ITERATION
                {
                    self.end_iteration(&mut on_row);
                }
            }
        }
    }

    /// A pass for the benchmark: returns the kernels in the rows written.
    fn pass(&mut self, buf: &Buffer) -> u64 {
        let mut kernels = 0;
        self.run(buf, |row| {
            kernels += row.kernels.iter().map(|k| k.count).sum::<u64>();
        });
        black_box(kernels)
    }
}

/// Checks that the real collector attributes every launch of the launch mix (a benchmark of a
/// collector that places nothing would measure a no-op): over a few passes, every row written is
/// complete and holds its 1 000 kernels, each in its launch's scope path, none unscoped.
fn verify_real_attribution(buf: &Buffer, step_first: bool, captured: bool) {
    let mut a = RealAttribution::new(buf, step_first, captured);
    let n = a.launches_per_pass;
    let mut rows = 0u64;
    let mut next_index = 0u64;
    let passes = 3;
    for _ in 0..passes {
        a.run(buf, |row| {
            assert_eq!(row.index, next_index, "rows in order");
            next_index += 1;
            rows += 1;
            assert!(
                row.complete,
                "row {} incomplete: {:?}",
                row.index, row.warnings
            );
            let kernels: u64 = row.kernels.iter().map(|k| k.count).sum();
            assert_eq!(kernels, LAUNCHES_PER_ITERATION, "row {}", row.index);
            // Launch g is the buffer's launch i = g % n, in scope 1 + i % 10.
            let mut expected = [0u64; SCOPES as usize + 1];
            let first = row.index * LAUNCHES_PER_ITERATION;
            for g in first..first + LAUNCHES_PER_ITERATION {
                expected[(1 + (g % n) % SCOPES) as usize] += 1;
            }
            for s in &row.scopes {
                let id = match s.path.as_str() {
                    "step" => 1,
                    p => p
                        .strip_prefix("step/phase")
                        .and_then(|id| id.parse::<usize>().ok())
                        .unwrap_or_else(|| panic!("row {}: kernels in {}", row.index, s.path)),
                };
                assert_eq!(
                    s.kernels, expected[id],
                    "row {} scope {}",
                    row.index, s.path
                );
                expected[id] = 0;
            }
            assert_eq!(expected, [0; SCOPES as usize + 1], "row {}", row.index);
        });
    }
    let launches = a.launches_per_pass * passes;
    // Step first: the row of an iteration is written when the next one ends.
    let expect = launches / LAUNCHES_PER_ITERATION - u64::from(step_first);
    assert!(
        rows >= expect,
        "{rows} rows for {launches} launches (expected {expect})"
    );
    let t = a.collector.trailer();
    assert_eq!(t.kernel_records, launches);
    assert_eq!(
        (t.late_records, t.unplaced_records),
        (0, 0),
        "late or unplaced records"
    );
}

fn bench_decode(c: &mut Criterion) {
    let names = names();
    let mut group = c.benchmark_group("decode");
    for (label, mix) in [
        ("kernel", Mix::Kernel),
        ("api", Mix::Api),
        ("external_correlation", Mix::ExternalCorrelation),
        ("launch_mix", Mix::Launch),
    ] {
        let buf = Buffer::new(mix, &names);
        group.throughput(Throughput::Elements(buf.records.len() as u64));
        group.bench_function(label, |b| {
            let mut cache = NameCache::default();
            b.iter(|| decode_all(&buf, &mut cache))
        });
    }
    let buf = Buffer::new(Mix::Launch, &names);
    group.throughput(Throughput::Elements(buf.records.len() as u64));
    group.bench_function("launch_mix_collect", |b| {
        let mut cache = NameCache::default();
        b.iter(|| decode_collect(&buf, &mut cache))
    });
    group.finish();

    let mut group = c.benchmark_group("attribution");
    // The old design's records (three per launch), then the captured calls (kernel records).
    let kernels = Buffer::new(Mix::Kernel, &names);
    for (label, input, step_first, captured) in [
        ("real_collector", &buf, false, false),
        ("real_collector_step_first", &buf, true, false),
        ("captured_calls", &kernels, false, true),
        ("captured_calls_step_first", &kernels, true, true),
    ] {
        verify_real_attribution(input, step_first, captured);
        group.throughput(Throughput::Elements(input.records.len() as u64));
        group.bench_function(label, |b| {
            let mut a = RealAttribution::new(input, step_first, captured);
            b.iter(|| a.pass(input))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("attribution_model");
    group.throughput(Throughput::Elements(buf.records.len() as u64));
    group.bench_function("siphash", |b| {
        let mut cache = NameCache::default();
        let mut model = AttributionModel::<std::hash::RandomState>::default();
        b.iter(|| model.run(&buf, &mut cache))
    });
    group.bench_function("multiplicative", |b| {
        let mut cache = NameCache::default();
        let mut model = AttributionModel::<MulBuild>::default();
        b.iter(|| model.run(&buf, &mut cache))
    });
    group.finish();
}

criterion_group!(benches, bench_decode);

/// Wall time of one summary sample: the thread CPU clock advances in scheduler ticks (1 to 4 ms),
/// so a sample must be long for it to be read to about 1 %.
const SAMPLE: Duration = Duration::from_millis(250);

/// Median records per second over [`common::SAMPLES`] samples of repeated passes of `f` over
/// `buf` (each sample about [`SAMPLE`] long): by wall time, and by the thread's CPU time when it
/// is available.
fn rate(buf: &Buffer, mut f: impl FnMut(&Buffer) -> u64) -> (f64, Option<f64>) {
    let t0 = Instant::now();
    f(buf); // also warms the name cache and the buffer
    let one = t0.elapsed().max(Duration::from_micros(1));
    let passes = (SAMPLE.as_secs_f64() / one.as_secs_f64()).ceil().max(1.0) as u64;
    let n = (buf.records.len() as u64 * passes) as f64;
    wall_and_cpu_medians(
        || {
            let t0 = Instant::now();
            for _ in 0..passes {
                black_box(f(buf));
            }
            t0.elapsed()
        },
        // Records per second; at least 1 ns per sample, by either clock.
        |ns| n / (ns.max(1.0) / 1e9),
    )
}

fn summary() {
    let names = names();
    let k = std::mem::size_of::<sys::CUpti_ActivityKernel10>();
    let a = std::mem::size_of::<sys::CUpti_ActivityAPI>();
    let e = std::mem::size_of::<sys::CUpti_ActivityExternalCorrelation>();
    println!();
    println!(
        "record sizes: CUpti_ActivityKernel10 {k} B, CUpti_ActivityAPI {a} B, \
         CUpti_ActivityExternalCorrelation {e} B; a launch is {} B unscoped, {} B in a scope; \
         decoded Record {} B",
        padded(k) + padded(a),
        padded(k) + padded(a) + padded(e),
        std::mem::size_of::<Record>()
    );
    println!(
        "decode summary, one core (median of {SAMPLES} samples of about 0.25 s of passes over a \
         4 MiB buffer; rates by wall time and by the thread's CPU time, which a loaded machine \
         does not inflate; verdict on CPU time)"
    );
    println!(
        "{:<46} {:>11} {:>11} {:>10} {:>9} {:>7}",
        "case", "rec/s wall", "rec/s CPU", "ns/rec CPU", "target", ""
    );
    let mut cache = NameCache::default();
    // `DECODE_CASES=captured` (any part of a case's name) runs only the cases that match: a
    // short run to repeat on a noisy host.
    let cases = std::env::var("DECODE_CASES").ok();
    // Measures and prints one case, where it is wanted.
    let case =
        |case: &str, target: Option<f64>, measure: &mut dyn FnMut() -> (f64, Option<f64>)| {
            if cases.as_deref().is_some_and(|c| !case.contains(c)) {
                return;
            }
            let (wall, cpu) = measure();
            let judged = cpu.unwrap_or(wall);
            let verdict = target.map_or("", |t| verdict(judged >= t));
            let t = target.map_or(String::from("-"), |t| format!("{:.0} M/s", t / 1e6));
            println!(
                "{case:<46} {:>9.1} M {:>9} M {:>10.1} {t:>9} {verdict:>7}",
                wall / 1e6,
                cpu.map_or("-".into(), |c| format!("{:.1}", c / 1e6)),
                1e9 / judged
            );
        };
    let target = Some(TARGET_RECORDS_PER_S);
    for (label, mix) in [
        ("decode kernel", Mix::Kernel),
        ("decode api", Mix::Api),
        ("decode external_correlation", Mix::ExternalCorrelation),
    ] {
        case(label, None, &mut || {
            rate(&Buffer::new(mix, &names), |b| decode_all(b, &mut cache))
        });
    }
    let buf = Buffer::new(Mix::Launch, &names);
    case(
        "decode launch mix (3 records per launch)",
        target,
        &mut || rate(&buf, |b| decode_all(b, &mut cache)),
    );
    case(
        "decode launch mix into Vec<Record> per buffer",
        target,
        &mut || rate(&buf, |b| decode_collect(b, &mut cache) as u64),
    );
    for (label, step_first) in [
        ("attribution, real collector", false),
        ("attribution, real collector, step first", true),
    ] {
        case(label, target, &mut || {
            let mut a = RealAttribution::new(&buf, step_first, false);
            rate(&buf, |b| a.pass(b))
        });
    }
    let kernels = Buffer::new(Mix::Kernel, &names);
    for (label, step_first) in [
        ("attribution, captured calls (kernel records)", false),
        ("attribution, captured calls, step first", true),
    ] {
        case(label, target, &mut || {
            verify_real_attribution(&kernels, step_first, true);
            let mut a = RealAttribution::new(&kernels, step_first, true);
            rate(&kernels, |b| a.pass(b))
        });
    }
    case("attribution model, SipHash (std)", target, &mut || {
        let mut model = AttributionModel::<std::hash::RandomState>::default();
        rate(&buf, |b| model.run(b, &mut cache))
    });
    case(
        "attribution model, multiplicative hash",
        target,
        &mut || {
            let mut model = AttributionModel::<MulBuild>::default();
            rate(&buf, |b| model.run(b, &mut cache))
        },
    );
    println!(
        "(real collector: decode, Collector::accept, an iteration ended every {LAUNCHES_PER_ITERATION} \
         launches and its row built, through gpu_ledger::collector::OfflineCollector; captured \
         calls: the timeline level's design since session 6, one kernel record and one captured \
         call per launch, rates in kernel records; the attribution model rows are a stand-in for \
         Collector::accept, not its code)"
    );
}

fn main() {
    common::run(benches, summary);
}
