//! How long each launching thread waited on a run queue in an iteration: the figure that says
//! whether a host that was late to launch was runnable but not running.
//!
//! The kernel keeps, per thread, the time it ran, the time it waited runnable on a run queue,
//! and the times it was scheduled (`/proc/self/task/<tid>/schedstat`, with CONFIG_SCHED_INFO).
//! The collector reads them when it takes `step()`'s message (at most one tick, 2 ms, after
//! it), on its own thread: the application pays nothing. Each thread's file stays open and is
//! read again from offset 0, so a reading costs one `pread` per thread.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap as HashMap;

use crate::cupti::calls::ApiCalls;
use crate::ledger::schema::LaunchThread;

/// Most threads read per iteration: a process with more launching threads than this reads the
/// first ones (in order of their first call).
const MAX_THREADS: usize = 256;

/// Readings closer together than this share one iteration's figures: several `step()` messages
/// taken in one tick (iterations shorter than the tick) get the figure once, in the first.
const SHARED_READING: Duration = Duration::from_micros(500);

/// One launching thread's scheduling over an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct ThreadSched {
    /// The thread's index ([`crate::cupti::calls::CapturedCall::thread`]).
    pub(super) thread: u32,
    /// ns runnable on a run queue, not running.
    pub(super) run_queue_ns: u64,
    /// ns running on a CPU.
    pub(super) on_cpu_ns: u64,
    /// Times scheduled onto a CPU.
    pub(super) timeslices: u64,
}

/// One thread's open `schedstat` and its last reading.
struct Tracked {
    #[cfg(unix)]
    file: std::fs::File,
    last: Option<[u64; 3]>,
}

/// Reads the launching threads' `schedstat` once per iteration end and gives the differences.
#[derive(Default)]
pub(super) struct SchedReader {
    /// By operating system thread id; `None` for a thread whose file could not be opened (it
    /// exited, or the kernel keeps no scheduler statistics): not tried again.
    files: HashMap<u32, Option<Tracked>>,
    threads: Vec<(u32, u32)>,
    last_read: Option<Instant>,
}

impl SchedReader {
    /// Each launching thread's scheduling since the last reading, or `None` when the last
    /// reading was too recent to stand for a whole iteration ([`SHARED_READING`]). A thread
    /// read for the first time, or whose file cannot be read, is left out.
    pub(super) fn read(&mut self, calls: &ApiCalls) -> Option<Vec<ThreadSched>> {
        let shared = self.last_read.is_some_and(|t| t.elapsed() < SHARED_READING);
        self.last_read = Some(Instant::now());
        calls.threads(&mut self.threads);
        let mut out = Vec::new();
        for &(thread, tid) in self.threads.iter().take(MAX_THREADS) {
            if tid == 0 {
                continue;
            }
            let entry = self.files.entry(tid).or_insert_with(|| open(tid));
            let Some(tracked) = entry else {
                continue;
            };
            let Some(now) = read(tracked) else {
                *entry = None;
                continue;
            };
            if let Some(last) = tracked.last.replace(now) {
                out.push(ThreadSched {
                    thread,
                    on_cpu_ns: now[0].saturating_sub(last[0]),
                    run_queue_ns: now[1].saturating_sub(last[1]),
                    timeslices: now[2].saturating_sub(last[2]),
                });
            }
        }
        (!shared).then_some(out)
    }
}

/// Puts each thread's figures of `sched` on its row of `threads` (by operating system id).
pub(super) fn fill(threads: &mut [LaunchThread], sched: &[ThreadSched], calls: &ApiCalls) {
    for s in sched {
        let Some(tid) = calls.thread(s.thread).map(|t| t.tid).filter(|t| *t != 0) else {
            continue;
        };
        if let Some(t) = threads.iter_mut().find(|t| t.tid == tid) {
            t.run_queue_ns = Some(s.run_queue_ns);
            t.on_cpu_ns = Some(s.on_cpu_ns);
            t.timeslices = Some(s.timeslices);
        }
    }
}

#[cfg(unix)]
fn open(tid: u32) -> Option<Tracked> {
    let file = std::fs::File::open(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    Some(Tracked { file, last: None })
}

#[cfg(not(unix))]
fn open(_tid: u32) -> Option<Tracked> {
    None
}

/// The file's three figures: ns on a CPU, ns on a run queue, timeslices.
#[cfg(unix)]
fn read(t: &Tracked) -> Option<[u64; 3]> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 96];
    let n = t.file.read_at(&mut buf, 0).ok()?;
    parse(std::str::from_utf8(&buf[..n]).ok()?)
}

#[cfg(not(unix))]
fn read(_t: &Tracked) -> Option<[u64; 3]> {
    None
}

fn parse(text: &str) -> Option<[u64; 3]> {
    let mut it = text.split_ascii_whitespace().map(|v| v.parse::<u64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_figures_are_parsed_and_anything_else_refused() {
        assert_eq!(parse("123 456 7\n"), Some([123, 456, 7]));
        assert_eq!(parse("123 456\n"), None);
        assert_eq!(parse("a b c"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_launching_thread_is_read_and_its_figures_grow() {
        // A thread that made a traced call is known to the calls; its schedstat is read.
        let calls = ApiCalls::default();
        calls.call_for_tests("cuLaunchKernel", 1);
        let mut reader = SchedReader::default();
        assert_eq!(
            reader.read(&calls),
            Some(Vec::new()),
            "the first reading is a baseline"
        );
        // A sleep (the thread is scheduled out and in again), then work.
        std::thread::sleep(Duration::from_millis(2));
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        let got = reader
            .read(&calls)
            .expect("30 ms later: a reading of its own");
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert_eq!(got.len(), 1);
            assert!(got[0].on_cpu_ns >= 1_000_000, "{got:?}");
            assert!(got[0].timeslices >= 1, "{got:?}");
        }
        assert_eq!(
            reader.read(&calls),
            None,
            "right after: shared with the one before"
        );
    }
}
