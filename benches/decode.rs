//! Decoding CUPTI activity records and attributing them, on one core, from synthetic buffers
//! (target: at least 10 million records per second, decoding and attribution together).
//!
//! The buffers hold `CUpti_ActivityKernel10` records as CUPTI 13.0 writes them for kernel
//! launches (back to back, 8-byte aligned). Kernel names are 20 mangled C++ names, each at one
//! address as CUPTI hands them out, so the name cache hits as it does in a real run.
//!
//! Groups (throughput in kernel records, one per launch):
//! - `decode/kernel`: decoding alone;
//! - `attribution/captured_calls`: each launch's call handed to the profiler's own collector as
//!   the API callback captures it (`OfflineCollector::accept_call`), just before its kernel
//!   record is decoded and accepted: attribution to scope and iteration, an iteration ended every
//!   1 000 launches and its row built;
//! - `attribution/captured_calls_step_first`: the same with each iteration ended before its
//!   records arrive, as when CUPTI delivers buffers at a flush after `step()`.
//!
//! `cargo bench --bench decode` (add `-- --quick` for a short run); a summary with records/s
//! against the target prints last. `DECODE_CASES=captured` limits the summary to the cases whose
//! name holds that text (a short run, to repeat on a noisy host). Each launch's call carries its
//! entry and exit times, so every row's idle time is split by cause as in a run;
//! `DECODE_IDLE=off` turns the split off (`IdleConfig::enabled`), for what it costs the collector.

use std::ffi::CString;
use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{verdict, wall_and_cpu_medians, KERNEL_NAMES, SAMPLES};
use criterion::{criterion_group, Criterion, Throughput};
use cupti_sys as sys;
use gpu_ledger::internals::{
    decode, Attribution, CapturedCall, Layouts, NameCache, OfflineCollector, Record,
};
use gpu_ledger::ledger::schema::IterationRow;

mod common;

/// Bytes per synthetic buffer: the profiler's default CUPTI buffer size.
const BUFFER_BYTES: usize = 4 << 20;

/// The target, records per second on one core.
const TARGET_RECORDS_PER_S: f64 = 10e6;

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

impl Buffer {
    /// Fills [`BUFFER_BYTES`] with kernel records.
    fn new(names: &[CString]) -> Buffer {
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
            let ok = put(&mut at, as_bytes(&kernel_record(i, corr, name)));
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
        let r = unsafe { decode(rec, names, &Layouts::BOUND) };
        kernels += u64::from(matches!(r, Record::Kernel(_)));
        black_box(&r);
    }
    kernels
}

/// Launches per iteration in the attribution benchmark.
const LAUNCHES_PER_ITERATION: u64 = 1_000;

/// CUPTI time of launch `g`'s call in the synthetic run, ns.
fn launch_api_start(g: u64) -> u64 {
    1_000_000_000 + g * 7_000 - 4_000
}

/// Scope path ids the launches are attributed to: 1 + i % 10.
const SCOPES: u64 = 10;

/// The profiler's collector fed the kernel buffer pass after pass. Pass `p` shifts every time by
/// `p * launches * 7 µs` and every correlation id by `p * launches`, so that the passes make one
/// continuous timeline (the collector's maps live on across iterations as in a run).
struct RealAttribution {
    collector: OfflineCollector,
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
    fn new(buf: &Buffer, step_first: bool) -> Self {
        let idle = (std::env::var("DECODE_IDLE").as_deref() != Ok("off"))
            .then(gpu_ledger::IdleConfig::default);
        let collector = OfflineCollector::with_idle(launch_api_start(0) - 1, idle);
        // Path ids 1..=10: "step" and nine phases below it.
        assert_eq!(collector.intern_path("step"), 1);
        for id in 2..=SCOPES as u32 {
            assert_eq!(collector.intern_path(&format!("step/phase{id}")), id);
        }
        let launches_per_pass = buf.records.len() as u64;
        RealAttribution {
            collector,
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

    /// One pass over `buf`.
    fn run(&mut self, buf: &Buffer, mut on_row: impl FnMut(&IterationRow)) {
        let dt = self.pass * self.launches_per_pass * 7_000;
        let dc = (self.pass * self.launches_per_pass) as u32;
        self.pass += 1;
        for &rec in &buf.records {
            if self.step_first && self.launches_seen == self.ended_through {
                self.end_iteration(&mut on_row);
            }
            // SAFETY: as in `decode_all`.
            let mut r = unsafe { decode(rec, &mut self.names, &Layouts::BOUND) };
            let kernel = match &mut r {
                Record::Kernel(k) => {
                    k.start += dt;
                    k.end += dt;
                    k.correlation_id = k.correlation_id.wrapping_add(dc);
                    // Launch g of the run is the buffer's launch i = g % n, in scope 1 + i % 10,
                    // entered in iteration g / 1000.
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
                        attribution: Attribution::OwnThread,
                        thread: 0,
                        // Entered 4 µs before its kernel starts, 2 µs in the call: the row's
                        // idle split then places each gap as a run would have it.
                        entry: launch_api_start(self.launches_seen),
                        exit: launch_api_start(self.launches_seen) + 2_000,
                    });
                    true
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

/// Checks that the collector attributes every launch (a benchmark of a
/// collector that places nothing would measure a no-op): over a few passes, every row written is
/// complete and holds its 1 000 kernels, each in its launch's scope path, none unscoped.
fn verify_real_attribution(buf: &Buffer, step_first: bool) {
    let mut a = RealAttribution::new(buf, step_first);
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
            // The idle split ran on every row (unless turned off), and adds up.
            for d in &row.devices {
                let Some(idle) = d.idle.as_ref() else {
                    assert_eq!(std::env::var("DECODE_IDLE").as_deref(), Ok("off"));
                    continue;
                };
                let placed: u64 = idle.causes.iter().map(|c| c.ns).sum();
                assert_eq!(placed, d.idle_ns, "row {}", row.index);
                assert!(
                    idle.causes.iter().all(|c| c.cause != "unknown"),
                    "row {}: every launch has its call: {:?}",
                    row.index,
                    idle.causes
                );
            }
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
    let buf = Buffer::new(&names);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(buf.records.len() as u64));
    group.bench_function("kernel", |b| {
        let mut cache = NameCache::default();
        b.iter(|| decode_all(&buf, &mut cache))
    });
    group.finish();

    let mut group = c.benchmark_group("attribution");
    for (label, step_first) in [
        ("captured_calls", false),
        ("captured_calls_step_first", true),
    ] {
        verify_real_attribution(&buf, step_first);
        group.throughput(Throughput::Elements(buf.records.len() as u64));
        group.bench_function(label, |b| {
            let mut a = RealAttribution::new(&buf, step_first);
            b.iter(|| a.pass(&buf))
        });
    }
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
    println!();
    println!(
        "record sizes: CUpti_ActivityKernel10 {} B; decoded Record {} B",
        std::mem::size_of::<sys::CUpti_ActivityKernel10>(),
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
    let buf = Buffer::new(&names);
    case("decode kernel", None, &mut || {
        rate(&buf, |b| decode_all(b, &mut cache))
    });
    for (label, step_first) in [
        ("attribution, captured calls (kernel records)", false),
        ("attribution, captured calls, step first", true),
    ] {
        case(label, target, &mut || {
            verify_real_attribution(&buf, step_first);
            let mut a = RealAttribution::new(&buf, step_first);
            rate(&buf, |b| a.pass(b))
        });
    }
    println!(
        "(captured calls: one kernel record and one captured call per launch, decoded and handed \
         to the profiler's collector through OfflineCollector, an iteration ended every \
         {LAUNCHES_PER_ITERATION} launches and its row built; rates in kernel records)"
    );
}

fn main() {
    common::run(benches, summary);
}
