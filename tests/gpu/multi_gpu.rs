//! Several GPUs and several ranks: run on a host with two or more GPUs.

use std::time::Duration;

use cudarc::driver::CudaContext;
use gpu_ledger::export::merge::{merge_ranks, RankSeries};
use gpu_ledger::kernels::VectorAdd;
use gpu_ledger::{read_ledger, Profiler};

use crate::SERIAL;

fn contexts() -> (std::sync::Arc<CudaContext>, std::sync::Arc<CudaContext>) {
    gpu_ledger::Profiler::require_gpu().expect("this test needs NVIDIA GPUs");
    let n = CudaContext::device_count().unwrap();
    assert!(n >= 2, "this test needs two GPUs, the host shows {n}");
    (CudaContext::new(0).unwrap(), CudaContext::new(1).unwrap())
}

#[test]
#[ignore = "needs two NVIDIA GPUs"]
fn two_gpus_in_one_process_keep_per_device_figures() {
    let _g = SERIAL.lock();
    let (c0, c1) = contexts();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.jsonl");
    let profiler = crate::timeline(&path);
    for _ in 0..3 {
        std::thread::scope(|s| {
            for (ctx, launches, name) in [(&c0, 3u64, "dev0"), (&c1, 7u64, "dev1")] {
                s.spawn(move || {
                    let stream = ctx.default_stream();
                    let vadd = VectorAdd::new(ctx).unwrap();
                    let n = 1 << 22;
                    let a = stream.alloc_zeros::<f32>(n).unwrap();
                    let b = stream.alloc_zeros::<f32>(n).unwrap();
                    let mut c = stream.alloc_zeros::<f32>(n).unwrap();
                    let _s = Profiler::scope(name);
                    for _ in 0..launches {
                        vadd.launch(&stream, &a, &b, &mut c, n as u64).unwrap();
                    }
                    stream.synchronize().unwrap();
                });
            }
        });
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    assert!(ledger.header.environment.gpus.len() >= 2);
    for row in &ledger.iterations {
        println!("iteration {}: devices {:?}", row.index, row.devices);
        println!(
            "  kernels {:?}",
            row.kernels
                .iter()
                .map(|k| (k.device_id, k.count))
                .collect::<Vec<_>>()
        );
        println!(
            "  nvml devices {:?}",
            row.nvml
                .iter()
                .map(|n| (n.device_id, n.power.as_ref().map(|p| p.mean_w)))
                .collect::<Vec<_>>()
        );
        let dev = |d: u32| {
            row.devices
                .iter()
                .find(|x| x.device_id == d)
                .map(|x| x.kernel_count)
        };
        assert_eq!(dev(0), Some(3));
        assert_eq!(dev(1), Some(7));
        let k = |d: u32| {
            row.kernels
                .iter()
                .filter(|k| k.device_id == d && k.name == "vector_add")
                .map(|k| k.count)
                .sum::<u64>()
        };
        assert_eq!((k(0), k(1)), (3, 7));
        let scope = |p: &str| row.scopes.iter().find(|s| s.path == p).map(|s| s.kernels);
        assert_eq!((scope("dev0"), scope("dev1")), (Some(3), Some(7)));
        assert!(row.devices.iter().all(|d| d.busy_ns > 0));
        assert!(row.nvml.len() >= 2, "NVML per device: {:?}", row.nvml);
    }
}

/// When set, the test binary acts as one rank of the two-process test.
const RANK_CHILD: &str = "GPU_LEDGER_TEST_RANK_LEDGER";

#[test]
#[ignore = "needs two NVIDIA GPUs"]
fn two_ranks_are_merged_and_the_slow_one_is_named_in_every_iteration() {
    if let Ok(path) = std::env::var(RANK_CHILD) {
        let rank: u32 = std::env::var("RANK").unwrap().parse().unwrap();
        let ctx = CudaContext::new(rank as usize).unwrap();
        let stream = ctx.default_stream();
        let vadd = VectorAdd::new(&ctx).unwrap();
        let n = 1 << 22;
        let a = stream.alloc_zeros::<f32>(n).unwrap();
        let b = stream.alloc_zeros::<f32>(n).unwrap();
        let mut c = stream.alloc_zeros::<f32>(n).unwrap();
        let profiler = crate::timeline(std::path::Path::new(&path));
        for _ in 0..5 {
            let _s = Profiler::scope("step");
            for _ in 0..10 {
                vadd.launch(&stream, &a, &b, &mut c, n as u64).unwrap();
            }
            stream.synchronize().unwrap();
            if rank == 1 {
                std::thread::sleep(Duration::from_millis(30)); // the straggler
            }
            drop(_s);
            profiler.step();
        }
        profiler.finish().unwrap();
        return;
    }
    let _g = SERIAL.lock();
    let _ = contexts();
    let dir = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    for rank in 0..2u32 {
        let path = dir.path().join(format!("rank{rank}.jsonl"));
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "multi_gpu::two_ranks_are_merged_and_the_slow_one_is_named_in_every_iteration",
                "--nocapture",
            ])
            .env(RANK_CHILD, &path)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .spawn()
            .unwrap();
        children.push((path, child));
    }
    let mut series = Vec::new();
    for (path, mut child) in children {
        assert!(child.wait().unwrap().success());
        let ledger = read_ledger(&path).unwrap();
        let rank = ledger.header.rank.clone().expect("rank taken from RANK");
        assert_eq!(rank.world_size, Some(2));
        series.push(RankSeries::from_rows(
            &ledger.header,
            &path.display().to_string(),
            &ledger.iterations,
        ));
    }
    let merged = merge_ranks(series).unwrap();
    assert_eq!(merged.ranks, vec![0, 1]);
    assert_eq!(merged.iterations.len(), 5);
    for it in &merged.iterations {
        println!(
            "iteration {}: slowest rank {:?} ({} ns), spread {:?} ns",
            it.index, it.slowest_rank, it.slowest_ns, it.spread_ns
        );
        assert_eq!(it.slowest_rank, Some(1), "iteration {}", it.index);
        let spread = it.spread_ns.expect("both ranks have every iteration");
        assert!(
            spread >= 25_000_000,
            "the straggler sleeps 30 ms: spread {spread}"
        );
    }
}
