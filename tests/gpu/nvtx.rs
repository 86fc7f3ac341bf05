//! NVTX both ways and `tracing` spans, through the examples that show them: each runs as a
//! process of its own, since NVTX finds its tool once per process, at its first call, and this
//! binary's other tests have made NVTX calls (every scope pushes a range) before.

use std::path::PathBuf;
use std::process::Command;

use gpu_ledger::read_ledger;

use super::SERIAL;

/// Nsight Compute, which the GPU host has.
fn ncu() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/local/cuda/bin")])
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file());
    found.expect("ncu (Nsight Compute) on PATH or in /usr/local/cuda/bin")
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nvtx_ranges_of_the_application_become_scopes_and_an_nvtx_mark_ends_the_iteration() {
    let _g = SERIAL.lock();
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("nvtx.jsonl");
    let out = Command::new(crate::example_binary("nvtx_scopes"))
        .arg("6")
        .arg(&ledger)
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("GPU_LEDGER_LEVEL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    let ledger = read_ledger(&ledger).unwrap();
    let nvtx = ledger.header.config.nvtx.clone().unwrap_or_default();
    assert!(nvtx.contains("ranges in as scopes: on"), "{nvtx}");
    // Three iterations end with step(), three with the NVTX mark `step`: six rows.
    assert_eq!(ledger.iterations.len(), 6);
    for row in &ledger.iterations {
        let scope = |p: &str| row.scopes.iter().find(|s| s.path == p);
        let attention = scope("step/forward/attention").expect("the NVTX range is a scope");
        assert_eq!(
            (attention.calls, attention.kernels),
            (1, 2),
            "row {}",
            row.index
        );
        assert_eq!(scope("step/forward").map(|s| s.kernels), Some(1));
        assert_eq!(scope("step/backward").map(|s| s.kernels), Some(3));
        assert_eq!(scope("step/optimizer").map(|s| s.kernels), Some(1));
        // gpu-ledger's own ranges come back through CUPTI too; they are not scopes twice.
        let expected = [
            "step",
            "step/forward",
            "step/forward/attention",
            "step/backward",
            "step/optimizer",
            gpu_ledger::UNSCOPED,
        ];
        for s in &row.scopes {
            assert!(
                expected.contains(&s.path.as_str()),
                "row {}: {}",
                row.index,
                s.path
            );
        }
    }
}

/// Kernels Nsight Compute profiled when its NVTX filter is `include`, by name.
fn ncu_kernels(include: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ncu.csv");
    let out = Command::new(ncu())
        .args([
            "--nvtx",
            "--nvtx-include",
            include,
            "--clock-control",
            "none",
        ])
        .args(["--metrics", "gpu__time_duration.sum", "--csv", "--log-file"])
        .arg(&log)
        .arg(crate::example_binary("nvtx_scopes"))
        .arg("2")
        .arg(dir.path().join("ledger.jsonl"))
        // Nsight Compute is the NVTX tool and holds the counters: gpu-ledger at its scopes
        // level, switched without a code change.
        .env("GPU_LEDGER_LEVEL", "scopes")
        .output()
        .unwrap();
    let csv = std::fs::read_to_string(&log).unwrap_or_default();
    println!(
        "ncu {include}: {}\n{}\n{csv}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ncu failed");
    csv.lines()
        .filter(|l| l.contains("gpu__time_duration.sum"))
        .filter_map(|l| {
            ["forward_op", "backward_op", "optimizer_op"]
                .into_iter()
                .find(|k| l.contains(k))
                .map(str::to_owned)
        })
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn nsight_compute_selects_exactly_one_scopes_kernels_through_its_nvtx_range() {
    let _g = SERIAL.lock();
    let backward = ncu_kernels("step/backward/");
    assert_eq!(
        backward,
        vec!["backward_op"; 6],
        "3 launches x 2 iterations"
    );
    let attention = ncu_kernels("step/forward/attention/");
    assert_eq!(
        attention,
        vec!["forward_op"; 4],
        "2 launches x 2 iterations"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tracing_spans_give_the_same_per_scope_table_as_guards() {
    let _g = SERIAL.lock();
    let out = Command::new(crate::example_binary("tracing_scopes"))
        .arg("4")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    assert!(stdout.contains("same per-scope table: yes"), "{stdout}");
    assert!(stdout.contains("step/backward/allreduce"), "{stdout}");
}
