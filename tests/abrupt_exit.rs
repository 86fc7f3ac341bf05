//! Fault matrix: the process ends without `Profiler::finish()` — `std::process::exit`,
//! SIGINT, SIGTERM or SIGKILL. The ledger must stay valid up to the last complete iteration:
//! the header is there, every row that was written is whole and parses, the rows are iterations
//! 0, 1, 2, … without a gap, and at most the very last line is cut (the reader then drops that
//! line and names it in `Ledger::truncated_last_line`, as `read_ledger` documents), with no
//! trailer.
//!
//! Runs at `Level::Scopes`, so no GPU is needed. Each case re-executes this test binary with
//! `--exact abrupt_exit_child`: that test does nothing unless the two environment variables below
//! are set, in which case it is the profiled child process. The child steps `K` iterations, waits
//! until the ledger file holds their `K` rows, prints a ready line, and then either exits or waits
//! (idle, or still stepping) for the parent's signal.
//!
//! With `Config::flush_on_signal` (Linux, the `flush-*` modes) SIGINT and SIGTERM no longer cut
//! the run short: every iteration ended before the signal gets its row, the trailer is written
//! with the warning `run ended by SIG… (flush_on_signal)`, and the child still dies of the signal.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpu_ledger::export::LedgerStream;
use gpu_ledger::ledger::reader::parse_ledger;
use gpu_ledger::ledger::schema::IterationRow;
use gpu_ledger::{read_ledger, Ledger, Level, Profiler};

/// The child's behaviour after its ready line: `exit`, `exit-busy`, `idle` or `busy`; or, with
/// `flush_on_signal`, `flush-idle`, `flush-busy`, `flush-restart-busy` (a first profiler with
/// the option runs and finishes before the one that is signalled) or `flush-stuck` (busy, with a
/// ledger that is a FIFO nobody reads: the writer blocks, so the ledger can never be finished).
const MODE_ENV: &str = "GPU_LEDGER_ABRUPT_EXIT_MODE";
/// The child's ledger path.
const LEDGER_ENV: &str = "GPU_LEDGER_ABRUPT_EXIT_LEDGER";
/// The test that acts as the child.
const CHILD_TEST: &str = "abrupt_exit_child";
/// What the child prints once `K` rows are in the file.
const READY: &str = "gpu-ledger-abrupt-exit: stepped ";
/// What a `flush-*busy` child prints after every [`PROGRESS_EVERY`] iterations it stepped.
const PROGRESS: &str = "gpu-ledger-abrupt-exit: ended ";
const PROGRESS_EVERY: u64 = 5;
/// Iterations stepped (and rows waited for) before the ready line.
const K: u64 = 8;
/// Iterations the `exit-busy` child steps after the ready line before it exits.
const EXTRA: u64 = 200;
/// Scopes under `step` per iteration: few when idle, many when busy (rows of some kilobytes, so
/// that a signal is likelier to land while a row is being written).
const LAYERS_IDLE: usize = 2;
const LAYERS_BUSY: usize = 48;
/// Generous limit for every wait (rows reaching the file, child exit). The parent waits twice as
/// long for the ready line, so that a child that gives up first can say why on stderr.
const WAIT: Duration = Duration::from_secs(30);
/// How long a child that is never signalled keeps going before it gives up on its own.
const CHILD_LIFETIME: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// The child.

/// The child process. Run normally (without the environment variables) it passes at once.
#[test]
fn abrupt_exit_child() {
    let (Ok(mode), Ok(path)) = (std::env::var(MODE_ENV), std::env::var(LEDGER_ENV)) else {
        return;
    };
    child_main(&mode, Path::new(&path));
}

fn child_main(mode: &str, path: &Path) -> ! {
    let busy = mode.ends_with("busy");
    let flush = mode.starts_with("flush-");
    let layers = if busy { LAYERS_BUSY } else { LAYERS_IDLE };
    if mode == "flush-restart-busy" {
        first_run_with_flush_on_signal(&path.with_extension("first.jsonl"));
    }
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(path)
        .settle(Duration::from_millis(10))
        .nvml(false)
        .flush_on_signal(flush)
        .start()
        .unwrap_or_else(|e| child_fail(2, &format!("the profiler did not start: {e}")));
    for _ in 0..K {
        iteration(&profiler, layers);
    }
    if mode != "flush-stuck" {
        wait_for_rows(path, K);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{READY}{K} sigint_ignored={}",
        signal_ignored_here(SIGINT)
    )
    .and_then(|()| out.flush())
    .unwrap_or_else(|e| child_fail(2, &format!("cannot write the ready line: {e}")));
    drop(out);
    let deadline = Instant::now() + CHILD_LIFETIME;
    match mode {
        "exit" => {
            // An iteration is open (its scope too) and is never ended: it gets no row.
            let _open = Profiler::scope("step");
            std::process::exit(0);
        }
        "exit-busy" => {
            // Exit right after stepping, while the collector and writer may be mid-row.
            for _ in 0..EXTRA {
                iteration(&profiler, layers);
            }
            std::process::exit(0);
        }
        "idle" => {
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "busy" => {
            while Instant::now() < deadline {
                iteration(&profiler, layers);
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        "flush-idle" => {
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "flush-busy" | "flush-restart-busy" | "flush-stuck" => {
            // Says how many iterations step() has ended: the parent signals after reading some,
            // and the ledger must then have at least that many rows.
            let mut ended = K;
            while Instant::now() < deadline {
                iteration(&profiler, layers);
                ended += 1;
                if ended % PROGRESS_EVERY == 0 {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{PROGRESS}{ended}").and_then(|()| out.flush());
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        other => child_fail(2, &format!("unknown mode {other:?}")),
    }
    child_fail(4, "no signal came from the parent")
}

/// A profiler with `flush_on_signal` that finishes normally before the signalled one starts:
/// its trailer has no signal warning, and SIGINT and SIGTERM are no longer caught after it.
fn first_run_with_flush_on_signal(path: &Path) {
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(path)
        .nvml(false)
        .flush_on_signal(true)
        .start()
        .unwrap_or_else(|e| child_fail(2, &format!("the first profiler did not start: {e}")));
    if signal_mask("SigCgt").is_none_or(|m| m & bit(SIGTERM as u32) == 0) {
        child_fail(6, "the first profiler does not catch SIGTERM");
    }
    for _ in 0..3 {
        iteration(&profiler, LAYERS_IDLE);
    }
    let summary = profiler
        .finish()
        .unwrap_or_else(|e| child_fail(6, &format!("the first profiler did not finish: {e}")));
    if summary.trailer.iterations != 3 || !summary.trailer.warnings.is_empty() {
        child_fail(6, &format!("first trailer: {:?}", summary.trailer));
    }
    if signal_mask("SigCgt").is_some_and(|m| m & (bit(SIGTERM as u32) | bit(SIGINT)) != 0) {
        child_fail(6, "SIGINT or SIGTERM is still caught after finish()");
    }
}

/// One iteration: `step` with `layers` child scopes, then `step()`.
fn iteration(profiler: &Profiler, layers: usize) {
    {
        let _step = Profiler::scope("step");
        for l in 0..layers {
            let _layer = Profiler::scope(format!("layer{l:03}"));
        }
    }
    profiler.step();
}

/// Polls the ledger until its whole lines hold `k` rows; exits with status 3 after [`WAIT`].
fn wait_for_rows(path: &Path, k: u64) {
    let start = Instant::now();
    loop {
        let bytes = std::fs::read(path).unwrap_or_default();
        let whole = &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
        if !whole.is_empty() {
            match parse_ledger(whole, path) {
                Ok(l) if l.iterations.len() as u64 >= k => return,
                Ok(_) => {}
                Err(e) => child_fail(5, &format!("a whole line of the live ledger is bad: {e}")),
            }
        }
        if start.elapsed() > WAIT {
            child_fail(
                3,
                &format!("{k} rows did not reach {} in {WAIT:?}", path.display()),
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn child_fail(code: i32, msg: &str) -> ! {
    eprintln!("abrupt_exit child: {msg}");
    std::process::exit(code);
}

const SIGINT: u32 = 2;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// Whether `signal` is ignored in this process (an ignored SIGINT is inherited from a
/// non-interactive shell that started the tests in the background, and cannot be undone
/// without libc).
fn signal_ignored_here(signal: u32) -> bool {
    signal_mask("SigIgn").is_some_and(|mask| mask & bit(signal) != 0)
}

/// A signal mask of this process from `/proc/self/status`: `SigIgn` (ignored) or `SigCgt`
/// (caught by a handler).
fn signal_mask(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
}

fn bit(signal: u32) -> u64 {
    1 << (signal - 1)
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// A running child; killed (SIGKILL) and reaped if a test fails before it ended.
struct Spawned {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: Option<JoinHandle<String>>,
    status: Option<ExitStatus>,
}

impl Spawned {
    fn start(mode: &str, ledger: &Path) -> Spawned {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(MODE_ENV, mode)
            .env(LEDGER_ENV, ledger)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the test binary re-executes itself");
        let (tx, stdout) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = Some(std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }));
        Spawned {
            child,
            stdout,
            stderr,
            status: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the ready line; returns whether SIGINT is ignored in the child.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + 2 * WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(READY) {
                        let rest = &line[at + READY.len()..];
                        let mut words = rest.split_whitespace();
                        assert_eq!(words.next(), Some(K.to_string().as_str()), "{line}");
                        return words.next() == Some("sigint_ignored=true");
                    }
                }
                Err(e) => {
                    let status = self.kill_and_wait();
                    panic!(
                        "no ready line from the child ({e:?}); it ended with {status}; stderr:\n{}",
                        self.stderr()
                    );
                }
            }
        }
    }

    /// Waits for the child to end (at most [`WAIT`]).
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.status = Some(status);
                return status;
            }
            if Instant::now() > deadline {
                let status = self.kill_and_wait();
                panic!(
                    "the child did not end within {WAIT:?} (now {status}); stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (`TERM`, `INT`) with the `kill` command.
    fn signal(&mut self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("the `kill` command (procps or util-linux) sends the signal");
        assert!(ok.success(), "kill -{signal} {} failed: {ok}", self.pid());
    }

    fn kill_and_wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let _ = self.child.kill();
        let s = self.child.wait().unwrap();
        self.status = Some(s);
        s
    }

    /// The child's stderr; call after it ended.
    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill_and_wait();
        }
    }
}

/// Reads the ledger of a run that did not finish and checks it line by line; returns the rows
/// that are whole (plus the last line, if it happens to be whole JSON without its newline).
/// `may_cut_last_line`: the run ended while rows were being written, so the last line may be cut
/// (the reader then drops it and names it); otherwise every line must end with its newline.
fn check_ledger(path: &Path, may_cut_last_line: bool) -> Ledger {
    let bytes = std::fs::read(path).expect("the ledger file exists");
    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let (whole, tail) = bytes.split_at(cut);
    assert!(
        may_cut_last_line || tail.is_empty(),
        "the run ended while no row was being written, yet the last line is cut: {:?}",
        String::from_utf8_lossy(tail)
    );
    assert!(
        !whole.is_empty(),
        "the header line, written at start, is whole; file: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let prefix = parse_ledger(whole, path)
        .unwrap_or_else(|e| panic!("every whole line parses, the header first: {e}"));
    let whole_lines = whole.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(
        whole_lines,
        1 + prefix.iterations.len(),
        "the whole lines are the header and the rows, nothing else"
    );
    assert!(
        prefix.trailer.is_none(),
        "no finish(), no Drop and no signal handler ran: no trailer, so readers know the run did \
         not finish"
    );
    assert_eq!(prefix.header.config.level, "scopes");
    assert_eq!(prefix.header.config.settle_ms, 10);
    let full = read_ledger(path).unwrap_or_else(|e| {
        panic!("the ledger of a killed run reads up to its last complete line: {e}")
    });
    let streamed = LedgerStream::open(path)
        .and_then(|s| s.into_ledger(|_| {}))
        .unwrap_or_else(|e| panic!("the streaming reader reads it too: {e}"));
    assert_eq!(streamed, full, "the two readers agree");
    if tail.is_empty() {
        assert_eq!(full, prefix);
    } else if full.truncated_last_line.is_none() {
        // Cut between a row's closing brace and its newline: that row is whole JSON.
        assert_eq!(full.iterations.len(), prefix.iterations.len() + 1);
        assert_eq!(
            full.iterations[..prefix.iterations.len()],
            prefix.iterations
        );
        assert!(full.trailer.is_none());
    } else {
        assert_eq!(
            full.truncated_last_line,
            Some(whole_lines + 1),
            "the reader names the cut last line"
        );
        assert_eq!(
            full.iterations, prefix.iterations,
            "every whole row is there, and the cut one is dropped"
        );
        assert!(full.trailer.is_none());
        eprintln!(
            "note: the last line was cut after {} bytes; the {} rows before it are whole",
            tail.len(),
            prefix.iterations.len()
        );
    }
    full
}

/// Rows 0, 1, … without a gap, each a complete iteration of `step` with its `layers` scopes;
/// at least `at_least` and at most `at_most` of them.
fn assert_rows(ledger: &Ledger, at_least: u64, at_most: u64, layers: usize) {
    let n = ledger.iterations.len() as u64;
    assert!(
        (at_least..=at_most).contains(&n),
        "{n} rows; expected {at_least}..={at_most}"
    );
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(
            row.index, i as u64,
            "rows are iterations 0, 1, 2, … in order"
        );
        assert!(
            row.complete,
            "row {i} was written while running: {:?}",
            row.warnings
        );
        let step = row
            .scopes
            .iter()
            .find(|s| s.path == "step")
            .unwrap_or_else(|| panic!("row {i} has the step scope: {:?}", row.scopes));
        assert_eq!(step.calls, 1, "row {i}");
        assert_layer_scopes(i, row, layers);
    }
}

/// Row `i` has exactly `layers` scopes `step/layer…`, each called once.
fn assert_layer_scopes(i: usize, row: &IterationRow, layers: usize) {
    let layer_rows = row
        .scopes
        .iter()
        .filter(|s| s.path.starts_with("step/layer") && s.calls == 1)
        .count();
    assert_eq!(layer_rows, layers, "row {i}: {:?}", row.scopes);
}

/// Whether a case that ends with signal `number` must be skipped because SIGINT is ignored
/// (`sigint_ignored`, from [`Spawned::wait_ready`]); says so on stderr when it is.
fn sigint_case_skipped(number: i32, sigint_ignored: bool) -> bool {
    let skipped = number == SIGINT as i32 && sigint_ignored;
    if skipped {
        eprintln!(
            "SIGINT is ignored in this process tree (inherited from the shell that started the \
             tests); the SIGINT case cannot be exercised here and is skipped"
        );
    }
    skipped
}

/// Runs the child in `mode`, lets it become ready, and ends it with `end`; returns the ledger.
fn run_case(mode: &str, end: End) -> Option<Ledger> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{mode}.jsonl"));
    let mut child = Spawned::start(mode, &path);
    let sigint_ignored = child.wait_ready();
    let status = match end {
        End::Exits => child.wait_exit(),
        End::Signal(name, number) => {
            if sigint_case_skipped(number, sigint_ignored) {
                return None;
            }
            if mode == "busy" {
                // Let it write rows for a while, so that the signal finds it mid-run.
                std::thread::sleep(Duration::from_millis(100));
            }
            if number == SIGKILL {
                child.child.kill().unwrap();
            } else {
                child.signal(name);
            }
            child.wait_exit()
        }
    };
    let stderr = child.stderr();
    match end {
        End::Exits => assert_eq!(status.code(), Some(0), "{status}; stderr:\n{stderr}"),
        End::Signal(name, number) => assert_eq!(
            status.signal(),
            Some(number),
            "the child was ended by SIG{name}, no handler ran ({status}); stderr:\n{stderr}"
        ),
    }
    // Only a child still stepping can be ended while a row is being written.
    let may_cut_last_line = mode.ends_with("busy");
    Some(check_ledger(&path, may_cut_last_line))
}

#[derive(Clone, Copy)]
enum End {
    /// The child calls `std::process::exit(0)` by itself.
    Exits,
    /// The parent sends this signal (name for `kill -NAME`, number).
    Signal(&'static str, i32),
}

const TERM: End = End::Signal("TERM", SIGTERM);
const INT: End = End::Signal("INT", SIGINT as i32);
const KILL: End = End::Signal("KILL", SIGKILL);

#[test]
fn process_exit_without_finish_keeps_every_written_row_and_no_row_for_the_open_iteration() {
    let ledger = run_case("exit", End::Exits).unwrap();
    assert_rows(&ledger, K, K, LAYERS_IDLE);
}

#[test]
fn process_exit_right_after_stepping_leaves_a_gapless_prefix_of_whole_rows() {
    let ledger = run_case("exit-busy", End::Exits).unwrap();
    assert_rows(&ledger, K, K + EXTRA, LAYERS_BUSY);
}

#[test]
fn sigterm_while_idle_keeps_exactly_the_rows_stepped_before_it() {
    let ledger = run_case("idle", TERM).unwrap();
    assert_rows(&ledger, K, K, LAYERS_IDLE);
}

#[test]
fn sigint_while_idle_keeps_exactly_the_rows_stepped_before_it() {
    if let Some(ledger) = run_case("idle", INT) {
        assert_rows(&ledger, K, K, LAYERS_IDLE);
    }
}

#[test]
fn sigkill_while_idle_keeps_exactly_the_rows_stepped_before_it() {
    let ledger = run_case("idle", KILL).unwrap();
    assert_rows(&ledger, K, K, LAYERS_IDLE);
}

#[test]
fn sigterm_while_stepping_leaves_a_gapless_prefix_of_whole_rows() {
    let ledger = run_case("busy", TERM).unwrap();
    assert_rows(&ledger, K, u64::MAX, LAYERS_BUSY);
}

#[test]
fn sigint_while_stepping_leaves_a_gapless_prefix_of_whole_rows() {
    if let Some(ledger) = run_case("busy", INT) {
        assert_rows(&ledger, K, u64::MAX, LAYERS_BUSY);
    }
}

#[test]
fn sigkill_while_stepping_leaves_a_gapless_prefix_of_whole_rows() {
    let ledger = run_case("busy", KILL).unwrap();
    assert_rows(&ledger, K, u64::MAX, LAYERS_BUSY);
}

// ---------------------------------------------------------------------------------------------
// flush_on_signal (Linux).

/// Runs a `flush-*` child, signals it with `end` once it is ready (a busy child after it said
/// it ended some iterations), checks that it died of that signal, and returns its ledger with
/// the iterations it had ended before the signal was sent; `None` when SIGINT cannot be tested.
#[cfg(target_os = "linux")]
fn run_flush_case(mode: &str, end: End) -> Option<(Ledger, u64)> {
    let End::Signal(name, number) = end else {
        panic!("flush cases end with a signal")
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{mode}.jsonl"));
    let mut child = Spawned::start(mode, &path);
    let sigint_ignored = child.wait_ready();
    if sigint_case_skipped(number, sigint_ignored) {
        return None;
    }
    // The count in a progress line of the child's.
    let progress = |line: &str| -> Option<u64> {
        line.split(PROGRESS)
            .nth(1)
            .map(|n| n.trim().parse().unwrap())
    };
    let mut ended_before_signal = K;
    if mode.ends_with("busy") {
        // Let it step (and write rows) for a while, and wait until it said it ended some more.
        std::thread::sleep(Duration::from_millis(100));
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match child.stdout.recv_timeout(left) {
                Ok(line) => line,
                Err(e) => {
                    let status = child.kill_and_wait();
                    panic!(
                        "no progress from the child ({e:?}; {status}):\n{}",
                        child.stderr()
                    );
                }
            };
            if let Some(n) = progress(&line) {
                ended_before_signal = n;
                // Every line already printed was printed before the signal.
                while let Ok(line) = child.stdout.try_recv() {
                    if let Some(n) = progress(&line) {
                        ended_before_signal = n;
                    }
                }
                break;
            }
        }
        assert!(ended_before_signal > K);
    }
    child.signal(name);
    let status = child.wait_exit();
    let stderr = child.stderr();
    assert_eq!(
        status.signal(),
        Some(number),
        "with flush_on_signal the child still dies of SIG{name} ({status}); stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "gpu-ledger: SIG{name}: finishing the ledger before exiting"
        )),
        "the signal thread says what it does; stderr:\n{stderr}"
    );
    Some((check_flushed_ledger(&path, name), ended_before_signal))
}

/// The ledger of a run that a signal ended with `flush_on_signal`: every line whole, the
/// header's warnings say nothing about the signal, and the trailer is there with the warning.
#[cfg(target_os = "linux")]
fn check_flushed_ledger(path: &Path, name: &str) -> Ledger {
    let bytes = std::fs::read(path).expect("the ledger file exists");
    assert!(
        bytes.ends_with(b"\n"),
        "the ledger was finished: its last line is whole"
    );
    let ledger =
        parse_ledger(&bytes[..], path).unwrap_or_else(|e| panic!("the ledger parses: {e}"));
    assert_eq!(
        read_ledger(path).unwrap(),
        ledger,
        "the file reader agrees (nothing cut)"
    );
    assert_eq!(ledger.truncated_last_line, None);
    assert_eq!(ledger.header.config.level, "scopes");
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(lines, ledger.iterations.len() + 2, "header, rows, trailer");
    assert!(
        !ledger
            .header
            .warnings
            .iter()
            .any(|w| w.contains(&format!("SIG{name}"))),
        "SIG{name} had the default disposition and was taken: {:?}",
        ledger.header.warnings
    );
    let trailer = ledger
        .trailer
        .as_ref()
        .expect("flush_on_signal wrote the trailer");
    let warning = format!("run ended by SIG{name} (flush_on_signal)");
    assert!(
        trailer.warnings.contains(&warning),
        "the trailer says the signal ended the run: {:?}",
        trailer.warnings
    );
    assert_eq!(trailer.iterations, ledger.iterations.len() as u64);
    assert_eq!(trailer.lines_not_written, 0);
    ledger
}

/// Rows 0, 1, … without a gap, at least `at_least`, each a complete iteration of `step` with its
/// `layers` scopes, except that the last may be the partial iteration open at the signal.
#[cfg(target_os = "linux")]
fn assert_flushed_rows(ledger: &Ledger, at_least: u64, layers: usize) {
    let n = ledger.iterations.len() as u64;
    eprintln!("note: {n} rows; step() had ended {at_least} iterations before the signal");
    assert!(
        n >= at_least,
        "{n} rows, yet step() had ended {at_least} iterations before the signal"
    );
    for (i, row) in ledger.iterations.iter().enumerate() {
        assert_eq!(
            row.index, i as u64,
            "rows are iterations 0, 1, 2, … in order"
        );
        if !row.complete {
            assert_eq!(i as u64, n - 1, "only the last row may be partial");
            assert!(
                row.warnings
                    .iter()
                    .any(|w| w.contains("the partial iteration before finish()")),
                "{:?}",
                row.warnings
            );
            continue;
        }
        let step = row.scopes.iter().find(|s| s.path == "step");
        assert_eq!(step.map(|s| s.calls), Some(1), "row {i}: {:?}", row.scopes);
        assert_layer_scopes(i, row, layers);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_sigterm_while_idle_writes_every_row_and_the_trailer() {
    let (ledger, ended) = run_flush_case("flush-idle", TERM).unwrap();
    assert_eq!(ended, K);
    assert_flushed_rows(&ledger, K, LAYERS_IDLE);
    assert_eq!(
        ledger.iterations.len() as u64,
        K,
        "no partial row: nothing after the last step()"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_sigint_while_idle_writes_every_row_and_the_trailer() {
    if let Some((ledger, _)) = run_flush_case("flush-idle", INT) {
        assert_flushed_rows(&ledger, K, LAYERS_IDLE);
        assert_eq!(ledger.iterations.len() as u64, K);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_sigterm_while_stepping_writes_every_ended_iteration_and_the_trailer() {
    let (ledger, ended) = run_flush_case("flush-busy", TERM).unwrap();
    assert_flushed_rows(&ledger, ended, LAYERS_BUSY);
}

#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_sigint_while_stepping_writes_every_ended_iteration_and_the_trailer() {
    if let Some((ledger, ended)) = run_flush_case("flush-busy", INT) {
        assert_flushed_rows(&ledger, ended, LAYERS_BUSY);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_works_again_for_a_second_profiler_in_the_same_process() {
    let (ledger, ended) = run_flush_case("flush-restart-busy", TERM).unwrap();
    assert_flushed_rows(&ledger, ended, LAYERS_BUSY);
}

/// In this (parent) process, the only test here that starts a profiler: the handlers are
/// installed only while a profiler with the option runs, only over default dispositions, and an
/// application's own handler is left in place.
#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_catches_only_while_running_and_leaves_an_applications_handler_alone() {
    let dir = tempfile::tempdir().unwrap();
    let caught = || signal_mask("SigCgt").unwrap();
    let term = bit(SIGTERM as u32);
    let int = bit(SIGINT);
    let int_ignored = signal_ignored_here(SIGINT);
    let start = |name: &str, flush: bool| {
        Profiler::builder()
            .level(Level::Scopes)
            .ledger_path(dir.path().join(name))
            .nvml(false)
            .flush_on_signal(flush)
            .start()
            .unwrap()
    };
    assert_eq!(caught() & (term | int), 0, "nothing catches them before");

    let off = start("off.jsonl", false);
    assert_eq!(caught() & (term | int), 0, "the option is off by default");
    off.finish().unwrap();

    for run in ["first.jsonl", "second.jsonl"] {
        let p = start(run, true);
        assert_ne!(caught() & term, 0, "{run}: SIGTERM is caught while it runs");
        assert_eq!(
            caught() & int != 0,
            !int_ignored,
            "{run}: SIGINT unless ignored"
        );
        p.step();
        let summary = p.finish().unwrap();
        assert_eq!(summary.trailer.iterations, 1);
        assert!(summary.trailer.warnings.is_empty(), "{:?}", summary.trailer);
        assert_eq!(
            caught() & (term | int),
            0,
            "{run}: default dispositions are back"
        );
        let ledger = read_ledger(&dir.path().join(run)).unwrap();
        let about_int = ledger
            .header
            .warnings
            .iter()
            .any(|w| w.contains("SIGINT is ignored in this process"));
        assert_eq!(about_int, int_ignored, "{:?}", ledger.header.warnings);
        assert_eq!(ledger.header.warnings.len(), usize::from(int_ignored));
    }

    // An application's own SIGTERM handler.
    extern "C" fn app_handler(_: libc::c_int) {}
    let handler = app_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `app_handler` does nothing, so it is async-signal-safe; no SIGTERM is sent here.
    let old = unsafe { libc::signal(libc::SIGTERM, handler) };
    assert_eq!(old, libc::SIG_DFL);
    let p = start("own-handler.jsonl", true);
    assert_ne!(caught() & term, 0);
    p.finish().unwrap();
    let ledger = read_ledger(&dir.path().join("own-handler.jsonl")).unwrap();
    assert!(
        ledger
            .header
            .warnings
            .iter()
            .any(|w| w.contains("SIGTERM already has a handler in this process; it is left alone")),
        "{:?}",
        ledger.header.warnings
    );
    // SAFETY: restores the default disposition; the returned one is the application's.
    let now = unsafe { libc::signal(libc::SIGTERM, libc::SIG_DFL) };
    assert_eq!(now, handler, "the application's handler stayed in place");
    assert_eq!(caught() & (term | int), 0);
}

/// Finishing the ledger is bounded: here the ledger is a FIFO that the parent holds open but never
/// reads, so the writer blocks once the pipe is full and shutdown cannot complete. The signal
/// still ends the child, about 5 s after it came.
#[cfg(target_os = "linux")]
#[test]
fn flush_on_signal_gives_up_after_5_s_and_the_signal_still_ends_the_process() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("stuck.jsonl");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success());
    // Opened for reading first (non-blocking, so without a writer yet), so that the child's open
    // for writing does not wait; kept open and never read until the child is gone.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let mut child = Spawned::start("flush-stuck", &fifo);
    child.wait_ready();
    // Busy rows of some kilobytes fill the pipe (64 KiB) within a few dozen iterations.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    child.signal("TERM");
    let status = child.wait_exit();
    let took = sent.elapsed();
    let stderr = child.stderr();
    assert_eq!(
        status.signal(),
        Some(SIGTERM),
        "{status}; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("the ledger was not finished within 5s; exiting anyway"),
        "stderr:\n{stderr}"
    );
    assert!(
        (Duration::from_millis(4900)..Duration::from_secs(15)).contains(&took),
        "the child ended {took:?} after SIGTERM"
    );
}
