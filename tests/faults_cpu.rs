//! Faults that can be produced without a GPU: no driver, fail-open, the demo without a GPU.

use gpu_ledger::internals as device;
use gpu_ledger::{read_ledger, Error, Level, Profiler};

#[test]
fn the_timeline_without_a_driver_is_a_clear_error_and_fail_open_runs_unprofiled() {
    if device::driver_present() {
        // On a GPU host the same call starts: the no-driver path is exercised on CPU machines.
        assert!(device::require_driver().is_ok());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let err = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(dir.path().join("x.jsonl"))
        .start()
        .err()
        .unwrap();
    assert!(matches!(err, Error::NoDriver), "{err}");
    assert!(err.to_string().contains("libcuda.so.1"));
    let path = dir.path().join("open.jsonl");
    let p = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .fail_open(true)
        .start()
        .unwrap();
    assert!(p.disabled_reason().unwrap().contains("no NVIDIA driver"));
    {
        let _s = Profiler::scope("runs anyway");
    }
    for _ in 0..5 {
        p.step();
    }
    let summary = p.finish().unwrap();
    // The iterations ran, unprofiled: the trailer counts them and says they have no rows.
    assert_eq!(summary.trailer.iterations, 5);
    assert_eq!(summary.ledger_path.as_deref(), Some(path.as_path()));
    let ledger = read_ledger(&path).unwrap();
    assert!(ledger.header.warnings[0].contains("profiling disabled (fail_open)"));
    let trailer = ledger.trailer.expect("the trailer is written at finish");
    assert_eq!(trailer.iterations, 5);
    assert!(
        trailer.warnings[0]
            .ends_with("the application ran 5 iterations unprofiled, which have no rows"),
        "{:?}",
        trailer.warnings
    );
    assert!(ledger.iterations.is_empty());
    // Every null item of the environment has its reason, each reason said once.
    let missing = &ledger.header.environment.missing;
    assert!(
        missing.iter().all(|m| !m.contains("no reason recorded")),
        "{missing:#?}"
    );
    let reasons: Vec<&str> = missing
        .iter()
        .filter_map(|m| m.split_once(": ").map(|x| x.1))
        .collect();
    let distinct: std::collections::BTreeSet<&&str> = reasons.iter().collect();
    assert_eq!(
        distinct.len(),
        reasons.len(),
        "a reason repeated: {missing:#?}"
    );
}

#[test]
fn preflight_asks_only_what_the_level_needs() {
    // The scopes level runs anywhere: host times, and NVML where there is one.
    assert!(Profiler::preflight(Level::Scopes).is_ok());
    if device::driver_present() {
        assert!(Profiler::require_gpu().is_ok());
        return;
    }
    assert!(matches!(Profiler::require_gpu(), Err(Error::NoDriver)));
    assert!(matches!(
        Profiler::preflight(Level::Timeline),
        Err(Error::NoDriver)
    ));
}

#[test]
fn the_demo_without_a_gpu_prints_one_line_and_exits_non_zero() {
    if device::driver_present() {
        return; // the demo runs for real on a GPU host (scripts/gpu-bundle.sh runs it)
    }
    let out = std::process::Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", "demo"])
        .output()
        .expect("cargo runs the demo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("gpu-ledger demo: no NVIDIA driver"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"));
}

/// The README's first program, between its `rust,no_run` fence and the closing one.
fn readme_first_program() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("```rust,no_run\n")
        .expect("the README has a Rust program")
        + 15;
    let len = readme[start..].find("```\n").expect("its fence closes");
    readme[start..start + len].to_string()
}

#[test]
fn the_readme_first_program_is_the_first_example() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/first.rs")).unwrap();
    // The example is the README's program under a one-line doc comment and a blank line.
    let body = example.splitn(3, '\n').nth(2).unwrap_or_default();
    assert_eq!(
        body,
        readme_first_program(),
        "copy the README's program into examples/first.rs"
    );
}

#[test]
fn the_readme_first_program_without_a_gpu_prints_the_cause_and_the_fix_in_one_line() {
    if device::driver_present() {
        return; // on a GPU host the program runs (scripts/gpu-bundle.sh runs the examples)
    }
    let out = std::process::Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", "first"])
        .output()
        .expect("cargo runs the example");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("Error: no NVIDIA driver: libcuda.so.1 could not be loaded."),
        "{stderr}"
    );
    assert!(lines[0].contains("Install the NVIDIA driver"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
