//! `GPU_LEDGER_LEVEL` overrides the configured level at start, without a GPU: its own test
//! binary, since it sets the process's environment.

use gpu_ledger::{read_ledger, Error, Level, Profiler, LEVEL_ENV};

fn builder(path: &std::path::Path) -> gpu_ledger::ProfilerBuilder {
    Profiler::builder()
        .level(Level::Timeline)
        .nvml(false)
        .ledger_path(path)
        .settle(std::time::Duration::from_millis(100))
}

/// One test: the cases share the process's environment.
#[test]
fn the_level_variable_overrides_the_builder_names_bad_values_and_off_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();

    // off: nothing starts, no ledger, and the reason says why.
    let path = dir.path().join("off.jsonl");
    std::env::set_var(LEVEL_ENV, "off");
    let profiler = builder(&path).start().expect("off is not an error");
    assert!(profiler
        .disabled_reason()
        .is_some_and(|r| r.contains("GPU_LEDGER_LEVEL=off")));
    {
        let _s = Profiler::scope("step");
    }
    profiler.step();
    let summary = profiler.finish().unwrap();
    assert!(!path.exists(), "off writes no ledger");
    assert_eq!(summary.ledger_path, None, "and says none was written");
    assert!(summary
        .read_ledger()
        .unwrap_err()
        .to_string()
        .contains("no ledger was written"));

    // scopes (any case): the timeline builder runs at the scopes level, no GPU needed, and the
    // header says where the level came from.
    let path = dir.path().join("scopes.jsonl");
    std::env::set_var(LEVEL_ENV, " Scopes ");
    let profiler = builder(&path)
        .start()
        .expect("the scopes level needs no GPU");
    {
        let _s = Profiler::scope("step");
    }
    profiler.step();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(ledger.header.config.level, "scopes");
    assert_eq!(
        ledger.header.config.level_source.as_deref(),
        Some(LEVEL_ENV)
    );
    assert_eq!(ledger.iterations.len(), 1);

    // A value that is no level: an error naming it and the accepted ones, even with fail_open.
    std::env::set_var(LEVEL_ENV, "fast");
    let err = builder(&dir.path().join("bad.jsonl"))
        .fail_open(true)
        .start()
        .expect_err("an unknown level is an error");
    let msg = err.to_string();
    assert!(matches!(err, Error::Config(_)), "{msg}");
    assert!(
        msg.contains("\"fast\"") && msg.contains("off, scopes, timeline or counters"),
        "{msg}"
    );

    // counters asked of a program with no counters setup: an error naming the fix.
    std::env::set_var(LEVEL_ENV, "counters");
    let err = builder(&dir.path().join("c.jsonl"))
        .start()
        .expect_err("counters need a setup");
    assert!(
        err.to_string().contains("ProfilerBuilder::counters"),
        "{err}"
    );

    // Unset: the builder's level, recorded as the configuration's.
    std::env::remove_var(LEVEL_ENV);
    let path = dir.path().join("builder.jsonl");
    let profiler = Profiler::builder()
        .level(Level::Scopes)
        .nvml(false)
        .ledger_path(&path)
        .start()
        .unwrap();
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert_eq!(
        ledger.header.config.level_source.as_deref(),
        Some("configuration")
    );
}
