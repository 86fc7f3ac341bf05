//! Faults of the application process, at the scopes level so they run anywhere: a
//! panic inside a scope, and an exit without `finish()`.

use std::time::Duration;

use gpu_ledger::{read_ledger, Level, Profiler};

fn scopes_profiler(path: &std::path::Path) -> Profiler {
    Profiler::builder()
        .level(Level::Scopes)
        .ledger_path(path)
        .settle(Duration::from_millis(100))
        .nvml(false)
        .start()
        .unwrap()
}

/// When this variable names a path, the test binary acts as the child process.
const CHILD_ENV: &str = "GPU_LEDGER_TEST_CHILD_LEDGER";

#[test]
fn a_panic_inside_a_scope_keeps_every_complete_iteration_and_marks_the_partial_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("panic.jsonl");
    let p2 = path.clone();
    let result = std::thread::spawn(move || {
        let profiler = scopes_profiler(&p2);
        for _ in 0..3 {
            let _s = Profiler::scope("step");
            drop(_s);
            profiler.step();
        }
        let _s = Profiler::scope("step");
        panic!("the application fails inside a scope");
    })
    .join();
    assert!(
        result.is_err(),
        "the application's panic is its own; the profiler adds none"
    );
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(
        ledger.iterations.len(),
        4,
        "three complete rows and the partial one"
    );
    assert!(ledger.iterations[..3].iter().all(|r| r.complete));
    let partial = &ledger.iterations[3];
    assert!(!partial.complete);
    assert!(
        partial
            .warnings
            .iter()
            .any(|w| w.contains("partial iteration")),
        "{:?}",
        partial.warnings
    );
    assert_eq!(partial.scopes[0].path, "step");
    assert!(
        ledger.trailer.is_some(),
        "the profiler's Drop closed the ledger during unwinding"
    );
}

#[test]
fn an_exit_without_finish_leaves_a_valid_ledger_up_to_the_last_written_row() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        // Child: five iterations, wait for their rows, then exit without finish().
        let profiler = scopes_profiler(std::path::Path::new(&path));
        for _ in 0..5 {
            let _s = Profiler::scope("step");
            drop(_s);
            profiler.step();
        }
        std::thread::sleep(Duration::from_millis(500));
        std::process::exit(0);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exit.jsonl");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_exit_without_finish_leaves_a_valid_ledger_up_to_the_last_written_row",
            "--nocapture",
        ])
        .env(CHILD_ENV, &path)
        .status()
        .unwrap();
    assert!(status.success());
    let ledger = read_ledger(&path).expect("every line that was written is whole");
    assert_eq!(ledger.iterations.len(), 5);
    assert!(
        ledger.trailer.is_none(),
        "no finish(), so no trailer: the reader says the run did not finish"
    );
}

#[test]
fn a_killed_run_leaves_whole_lines() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let profiler = scopes_profiler(std::path::Path::new(&path));
        loop {
            let _s = Profiler::scope("step");
            drop(_s);
            profiler.step();
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.jsonl");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_killed_run_leaves_whole_lines", "--nocapture"])
        .env(CHILD_ENV, &path)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let ledger = read_ledger(&path).expect("the file is valid up to its last whole line");
    assert!(!ledger.iterations.is_empty());
    for (i, r) in ledger.iterations.iter().enumerate() {
        assert_eq!(r.index, i as u64);
    }
}
