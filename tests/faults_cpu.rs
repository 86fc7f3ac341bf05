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
    p.step();
    let summary = p.finish().unwrap();
    assert_eq!(summary.trailer.iterations, 0);
    let ledger = read_ledger(&path).unwrap();
    assert!(ledger.header.warnings[0].contains("profiling disabled (fail_open)"));
    assert!(ledger.trailer.is_some());
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
