//! Scopes in async code: a future scoped with `InScope::in_scope` enters its context around
//! every poll, on whichever worker thread of a multi-threaded runtime polls it, and leaves it
//! after; scopes opened inside a poll nest below the context. Needs no GPU (`Level::Scopes`).

use std::collections::BTreeSet;

use gpu_ledger::{read_ledger, InScope, Level, Profiler, ScopeContext};

/// One test: a profiler runs once per process, and the part without one must not see it.
#[test]
fn a_scoped_future_enters_its_context_on_every_poll_on_any_worker() {
    // Without a profiler a child context is none and the future runs as it is.
    let none = ScopeContext::NONE.child("load");
    assert!(none.is_none());
    let plain = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(plain.block_on(async { 41 + 1 }.in_scope(none)), 42);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("async.jsonl");
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .nvml(false)
        .ledger_path(&path)
        .start()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let load = {
        let _step = Profiler::scope("step");
        Profiler::context().child("load")
    };
    assert!(!load.is_none());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            runtime.spawn(
                async move {
                    let mut threads = BTreeSet::new();
                    for _ in 0..5 {
                        // Inside every poll the context is the innermost scope.
                        assert_eq!(ScopeContext::current(), load);
                        {
                            let _io = Profiler::scope("io");
                        }
                        threads.insert(format!("{:?}", std::thread::current().id()));
                        tokio::task::yield_now().await;
                    }
                    threads
                }
                .in_scope(load),
            )
        })
        .collect();
    let mut workers = BTreeSet::new();
    for t in tasks {
        workers.extend(runtime.block_on(t).unwrap());
    }
    // Between polls a worker holds no context: a task polled there outside any scope sees none.
    let outside = runtime.block_on(runtime.spawn(async { ScopeContext::current().is_none() }));
    assert!(outside.unwrap(), "a context stayed entered after its poll");
    drop(runtime);
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let row = &ledger.iterations[0];
    let io = row
        .scopes
        .iter()
        .find(|s| s.path == "step/load/io")
        .unwrap_or_else(|| panic!("no step/load/io in {:?}", row.scopes));
    assert_eq!(io.calls, 40, "every poll's scope nests below the context");
    assert!(!workers.is_empty());
}
