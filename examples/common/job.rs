//! Ledgers of a generated multi-rank job, as a training step writes them: a header with the
//! rank, then rows of four scopes, three kernels, a copy and a synchronization, with a few
//! percent of noise per rank and iteration, and optionally one rank that slows down for good.
//! Shared by `examples/parquet_scale.rs` and the tests of the Parquet dataset and SQL.

#![allow(dead_code)]

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// One rank that becomes slower from an iteration on.
#[derive(Debug, Clone, Copy)]
pub struct Straggler {
    /// The rank.
    pub rank: u32,
    /// The first slow iteration.
    pub from: u64,
    /// Extra host wall time, in percent of its usual.
    pub percent: u64,
}

/// Writes `ranks` ledgers of `iterations` rows into `dir` (`rank-00000.jsonl`, ...); their paths.
pub fn write_job(
    dir: &Path,
    ranks: u32,
    iterations: u64,
    straggler: Option<Straggler>,
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    (0..ranks)
        .map(|r| {
            let p = dir.join(format!("rank-{r:05}.jsonl"));
            write_rank(&p, r, ranks, iterations, straggler)?;
            Ok(p)
        })
        .collect()
}

/// The ledger of rank `rank` of `world`.
pub fn write_rank(
    path: &Path,
    rank: u32,
    world: u32,
    iterations: u64,
    straggler: Option<Straggler>,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let start_cupti = 5_000_000_000_000u64 + u64::from(rank) * 7_777_777;
    writeln!(
        w,
        r#"{{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":{},"start_cupti_ns":{start_cupti},"config":{{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000}},"environment":{{"gpus":[{{"ordinal":0,"name":"NVIDIA H200","compute_capability":[9,0],"sm_count":132,"total_memory_bytes":150000000000}}],"driver_version":"580.65","cuda_driver_version":13000,"cupti_api_version":130001,"cupti_path":null,"hostname":"node{}","command_line":["python","train.py","--config","big.yaml"]}},"rank":{{"rank":{rank},"local_rank":{},"world_size":{world}}},"warnings":[]}}"#,
        1_764_000_000_000_000_000u64 + u64::from(rank) * 1_000_003,
        rank / 8,
        rank % 8,
    )?;
    let mut state =
        0x9e37_79b9_7f4a_7c15u64 ^ (u64::from(rank) + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut noise = || {
        // xorshift: deterministic noise of a few percent.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % 50_000
    };
    let mut host = 0u64;
    for i in 0..iterations {
        let slow = straggler.is_some_and(|s| s.rank == rank && i >= s.from);
        let scale = |ns: u64| match straggler {
            Some(s) if slow => ns + ns * s.percent / 100,
            _ => ns,
        };
        let gemm = scale(1_000_000 + noise());
        let backward = scale(1_400_000 + noise());
        let optimizer = 200_000 + noise();
        let wall = gemm + backward + optimizer + 100_000 + noise();
        let dev0 = start_cupti + host + 20_000;
        let busy = gemm + backward + 350_000;
        writeln!(
            w,
            r#"{{"type":"iteration","index":{i},"host_start_ns":{host},"host_wall_ns":{wall},"complete":true,"perturbed":false,"devices":[{{"device_id":0,"first_start_ns":{dev0},"last_end_ns":{},"busy_ns":{busy},"idle_ns":50000,"largest_gap_ns":20000,"kernel_count":7}}],"scopes":[{{"path":"step","calls":1,"host_ns":{},"launches":0,"kernels":0,"device_ns":0,"device_ns_inclusive":{busy}}},{{"path":"step/backward","calls":1,"host_ns":{backward},"launches":3,"kernels":3,"device_ns":{},"device_ns_inclusive":{}}},{{"path":"step/forward","calls":1,"host_ns":{gemm},"launches":4,"kernels":3,"device_ns":{},"device_ns_inclusive":{}}},{{"path":"step/optimizer","calls":1,"host_ns":{optimizer},"launches":1,"kernels":1,"device_ns":150000,"device_ns_inclusive":150000}}],"kernels":[{{"name":"_Z4gemmILi128EEvPfS0_i","device_id":0,"grid":[132,1,1],"block":[256,1,1],"cluster":[0,0,0],"registers_per_thread":64,"static_shared_bytes":0,"dynamic_shared_bytes":49152,"local_bytes_per_thread":0,"count":4,"total_ns":{},"min_ns":{},"max_ns":{},"graph_launches":0}},{{"name":"softmax_kernel","device_id":0,"grid":[64,1,1],"block":[128,1,1],"cluster":[0,0,0],"registers_per_thread":32,"static_shared_bytes":1024,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":2,"total_ns":300000,"min_ns":150000,"max_ns":150000,"graph_launches":0}},{{"name":"adam_update","device_id":0,"grid":[132,1,1],"block":[256,1,1],"cluster":[0,0,0],"registers_per_thread":16,"static_shared_bytes":0,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":1,"total_ns":150000,"min_ns":150000,"max_ns":150000,"graph_launches":0}}],"memcpy":[{{"device_id":0,"kind":"HtoD","count":1,"bytes":1048576,"total_ns":40000}}],"memset":[],"synchronization":[{{"kind":"stream","count":1,"total_ns":10000}}],"dropped_records":0,"missing_records":0,"nvml":[],"warnings":[]}}"#,
            dev0 + busy + 50_000,
            wall - 10_000,
            backward - 100_000,
            backward - 100_000,
            gemm - 100_000,
            gemm - 100_000,
            gemm + backward - 400_000,
            (gemm + backward) / 8,
            (gemm + backward) / 3,
        )?;
        host += wall + 5_000;
    }
    writeln!(
        w,
        r#"{{"type":"trailer","iterations":{iterations},"kernel_records":{},"activity_records":{},"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}}}"#,
        iterations * 7,
        iterations * 8
    )?;
    w.flush()
}
