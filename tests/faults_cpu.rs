//! Faults that can be produced without a GPU: missing or wrong libcupti, no driver, fail-open.

use std::path::PathBuf;

use gpu_ledger::loader::{self, Candidate};
use gpu_ledger::{device, read_ledger, Error, Level, Profiler};

#[test]
fn a_missing_libcupti_lists_every_path_tried_and_the_fix() {
    let cands = vec![
        Candidate::File(PathBuf::from("/nonexistent/a/libcupti.so.13")),
        Candidate::File(PathBuf::from("/nonexistent/b/libcupti.so.13")),
    ];
    let err = loader::load_first(&cands).expect_err("nothing there");
    let msg = err.to_string();
    assert!(matches!(err, Error::CuptiNotFound { .. }), "{msg}");
    assert!(
        msg.contains("/nonexistent/a/libcupti.so.13: no such file"),
        "{msg}"
    );
    assert!(msg.contains("/nonexistent/b/libcupti.so.13"), "{msg}");
    assert!(msg.contains("GPU_LEDGER_CUPTI_PATH"), "{msg}");
}

#[test]
fn a_library_that_is_not_cupti_is_skipped_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libcupti.so.13");
    std::fs::write(&fake, b"not an ELF file").unwrap();
    let err = loader::load_first(&[Candidate::File(fake.clone())])
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains(&fake.display().to_string()) && msg.contains("cannot open"),
        "{msg}"
    );
}

/// Builds a shared library whose `cuptiGetVersion` reports `version`, with the system C compiler.
fn fake_cupti(dir: &std::path::Path, version: u32) -> PathBuf {
    let src = dir.join("fake.c");
    std::fs::write(
        &src,
        format!("unsigned cuptiGetVersion(unsigned *v) {{ *v = {version}; return 0; }}\n"),
    )
    .unwrap();
    let lib = dir.join("libcupti.so.13");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed to build the fake libcupti");
    assert!(status.success());
    lib
}

#[test]
fn a_cupti_of_another_api_version_is_refused_with_the_version_found() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_cupti(dir.path(), 120_800);
    let err = loader::load_first(&[Candidate::File(lib.clone())])
        .err()
        .unwrap();
    let msg = err.to_string();
    match err {
        Error::CuptiVersionMismatch {
            found,
            expected,
            path,
        } => {
            assert_eq!(found, 120_800);
            assert_eq!(expected, 130_001);
            assert_eq!(path, lib);
        }
        other => panic!("expected a version mismatch, got {other}"),
    }
    assert!(
        msg.contains("120800") && msg.contains("130001") && msg.contains("CUDA 13.0"),
        "{msg}"
    );
}

#[test]
fn a_right_version_without_the_other_symbols_is_reported_not_panicked_on() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_cupti(dir.path(), 130_001);
    let err = loader::load_first(&[Candidate::File(lib)]).err().unwrap();
    assert!(err.to_string().contains("missing CUPTI symbol"), "{err}");
}

#[test]
fn the_search_order_is_override_cuda_home_cuda_path_usr_local_wheel_then_loader() {
    let c = loader::candidates(
        Some(PathBuf::from("/opt/override")),
        Some(PathBuf::from("/cuda-home")),
        Some(PathBuf::from("/cuda-path")),
        &[
            PathBuf::from("/usr/local/cuda"),
            PathBuf::from("/usr/local/cuda-13.0"),
        ],
        &[PathBuf::from("/py/site-packages")],
    );
    let shown: Vec<String> = c
        .iter()
        .map(|c| match c {
            Candidate::File(p) => p.display().to_string(),
            Candidate::SystemLoader(n) => format!("loader:{n}"),
        })
        .collect();
    assert_eq!(shown[0], "/opt/override/libcupti.so.13");
    assert_eq!(shown[1], "/cuda-home/extras/CUPTI/lib64/libcupti.so.13");
    assert_eq!(
        shown[3],
        "/cuda-home/targets/x86_64-linux/lib/libcupti.so.13"
    );
    assert_eq!(shown[4], "/cuda-path/extras/CUPTI/lib64/libcupti.so.13");
    assert!(
        shown.contains(&"/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13".to_string())
    );
    assert_eq!(
        shown[shown.len() - 2],
        "/py/site-packages/nvidia/cu13/lib/libcupti.so.13"
    );
    assert_eq!(shown.last().unwrap(), "loader:libcupti.so.13");
}

#[test]
fn usr_local_cuda_dirs_are_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["cuda-12.4", "cuda-13.0", "cuda-12.10", "other"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    let dirs = loader::usr_local_cuda_dirs(dir.path());
    let names: Vec<String> = dirs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["cuda", "cuda-13.0", "cuda-12.10", "cuda-12.4"]);
}

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
