//! What the scopes level cannot record is counted, never dropped silently: a scope closed while
//! its thread's state is torn down, and scopes past the bound on distinct paths. No GPU.

use std::cell::RefCell;
use std::time::Duration;

use gpu_ledger::{read_ledger, Level, Profiler, ScopeGuard};
use parking_lot::Mutex;

/// One profiler per process at a time: tests in this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn profiler(path: &std::path::Path) -> Profiler {
    Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(path)
        .settle(Duration::from_millis(200))
        .start()
        .expect("the scopes level needs no GPU")
}

thread_local! {
    /// A guard kept in a thread-local made before gpu-ledger's own: torn down after it.
    static HELD: RefCell<Option<ScopeGuard<'static>>> = const { RefCell::new(None) };
}

#[test]
fn a_scope_closed_while_its_thread_exits_is_counted() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let p = profiler(&path);
    std::thread::spawn(|| {
        // This thread-local first, gpu-ledger's at the scope: destroyed in reverse order, so
        // the guard is dropped when gpu-ledger's state is gone.
        HELD.with(|_| {});
        let guard = Profiler::scope("held until exit");
        HELD.with(|h| *h.borrow_mut() = Some(guard));
    })
    .join()
    .unwrap();
    p.step();
    let summary = p.finish().unwrap();
    assert_eq!(summary.trailer.scopes_lost_at_thread_exit, 1);
    let ledger = read_ledger(&path).unwrap();
    let trailer = ledger.trailer.unwrap();
    assert_eq!(trailer.scopes_lost_at_thread_exit, 1);
    assert!(
        trailer
            .warnings
            .iter()
            .any(|w| w.contains("while their thread was exiting")),
        "{:?}",
        trailer.warnings
    );
}

#[test]
fn scopes_past_the_bound_on_paths_are_folded_and_counted() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let p = profiler(&path);
    let bound = 16_384;
    for i in 0..bound + 100 {
        let _s = Profiler::scope(format!("request-{i}"));
    }
    p.step();
    let summary = p.finish().unwrap();
    assert_eq!(summary.trailer.scope_paths_folded, 100);
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    let other = row
        .scopes
        .iter()
        .find(|s| s.path == gpu_ledger::ledger::OTHER_SCOPE_PATHS)
        .expect("the folded scopes have a row entry");
    assert_eq!(other.calls, 100);
    assert_eq!(row.scopes.len(), bound + 1);
}

#[test]
fn scopes_open_on_other_threads_at_finish_are_counted() {
    let _turn = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let p = profiler(&path);
    let (opened_tx, opened) = std::sync::mpsc::channel();
    let (finished, finished_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let _outer = Profiler::scope("worker");
        let _inner = Profiler::scope("inner");
        // A scope closed before finish() is recorded, not counted as open.
        drop(Profiler::scope("closed"));
        opened_tx.send(()).unwrap();
        finished_rx.recv().unwrap();
    });
    opened.recv().unwrap();
    let own = Profiler::scope("own");
    p.step();
    let summary = p.finish().unwrap();
    drop(own);
    finished.send(()).unwrap();
    worker.join().unwrap();
    let warned = |warnings: &[String]| {
        warnings
            .iter()
            .any(|w| w.starts_with("2 scopes were still open on other threads"))
    };
    assert!(
        warned(&summary.trailer.warnings),
        "{:?}",
        summary.trailer.warnings
    );
    let trailer = read_ledger(&path).unwrap().trailer.unwrap();
    assert!(warned(&trailer.warnings), "{:?}", trailer.warnings);
    // The finishing thread's own open scope is said in its row, not counted again.
    assert_eq!(summary.trailer.scopes_lost_at_thread_exit, 0);
}
