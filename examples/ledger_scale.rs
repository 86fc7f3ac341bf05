//! Every `gpu-ledger` command on a generated ledger of many rows, side by side with a plain
//! line-by-line serde_json reader of the same file: wall time and peak resident memory of each,
//! measured in one run, and compare's time against the plain reader of both its ledgers. Each command and the plain reader run as child processes; peak memory is
//! the child's `VmHWM` (its high-water mark, which only grows), read from /proc every 2 ms while
//! it runs, so growth in its last 2 ms can be missed.
//!
//! `cargo build --release -p gpu-ledger-cli && cargo run --release --example
//! ledger_scale [-- ROWS [DIR]]` (default 1 000 000 rows, in a temporary directory).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use gpu_ledger::ledger::schema::LedgerLine;

#[path = "common/measure.rs"]
mod measure;
use measure::{measure, Measured};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--plain-reader") {
        // Each read panics on an error, so reaching the end is success.
        for p in &args[2..] {
            plain_reader(Path::new(p));
        }
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The baseline: every line parsed as a ledger line, one at a time, nothing kept.
fn plain_reader(path: &Path) {
    let file = std::fs::File::open(path).expect("the generated ledger opens");
    let mut rows = 0u64;
    for line in BufReader::new(file).lines() {
        let line = line.expect("the generated ledger reads");
        if let LedgerLine::Iteration(_) = serde_json::from_str(&line).expect("a ledger line") {
            rows += 1;
        }
    }
    println!("{rows}");
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let rows: u64 = args.get(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let tmp;
    let dir = match args.get(2) {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let exe = std::env::current_exe()?;
    let bin = std::env::var_os("GPU_LEDGER_BIN").map_or_else(
        || {
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("gpu-ledger"))
        },
        |b| Some(PathBuf::from(b)),
    );
    let bin = bin.filter(|b| b.exists()).ok_or(
        "gpu-ledger binary not found beside this example: build it with `cargo build --release \
         -p gpu-ledger-cli`, or set GPU_LEDGER_BIN",
    )?;
    let a = dir.join("a.jsonl");
    let b = dir.join("b.jsonl");
    let t0 = Instant::now();
    generate(&a, rows, 0)?;
    generate(&b, rows, 1)?;
    let bytes = std::fs::metadata(&a)?.len();
    println!(
        "ledgers: 2 x {rows} rows, {:.2} GB each, generated in {:.1} s",
        bytes as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    let (pa, pb) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let plain = measure(Command::new(&exe).args(["--plain-reader", pa]))?;
    println!();
    println!("| command | wall s | peak RSS MB | wall / plain reader | RSS / plain reader |");
    println!("|---|---:|---:|---:|---:|");
    let line = |name: &str, m: &Measured| {
        println!(
            "| {name} | {:.1} | {:.1} | {:.2}x | {:.2}x |",
            m.wall.as_secs_f64(),
            m.peak_kib as f64 / 1024.0,
            m.wall.as_secs_f64() / plain.wall.as_secs_f64(),
            m.peak_kib as f64 / plain.peak_kib as f64
        )
    };
    line("plain reader (one ledger)", &plain);
    // What compare is held to: reading both of its ledgers, one after the other.
    let plain_both = measure(Command::new(&exe).args(["--plain-reader", pa, pb]))?;
    line("plain reader (both ledgers)", &plain_both);
    let commands: [(&str, Vec<&str>); 7] = [
        ("check", vec!["check", pa]),
        ("csv", vec!["csv", pa, "-o", o]),
        ("trace", vec!["trace", pa, "-o", o]),
        ("summary", vec!["summary", pa]),
        ("report", vec!["report", pa, "-o", o]),
        ("merge", vec!["merge", pa]),
        ("compare (two ledgers)", vec!["compare", pa, pb]),
    ];
    let mut compare_wall = None;
    for (name, cmd) in commands {
        let m = measure(Command::new(&bin).args(&cmd))?;
        line(name, &m);
        compare_wall = Some(m.wall);
    }
    if let Some(c) = compare_wall {
        println!();
        println!(
            "compare / plain reader of both ledgers: {:.2}x",
            c.as_secs_f64() / plain_both.wall.as_secs_f64()
        );
    }
    Ok(())
}

/// A ledger of `rows` rows like a small training step: two scopes, three kernels, a copy;
/// `variant` 1 makes one kernel 5 % faster, so that compare has something to find.
fn generate(path: &Path, rows: u64, variant: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(
        w,
        r#"{{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1764000000000000000,"start_cupti_ns":5000000000000,"config":{{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000}},"environment":{{"gpus":[],"driver_version":null,"cuda_driver_version":13000,"cupti_api_version":130001,"cupti_path":null,"hostname":"bench","command_line":[]}},"rank":{{"rank":0,"local_rank":0,"world_size":1}},"warnings":[]}}"#
    )?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ variant;
    for i in 0..rows {
        // xorshift: deterministic noise of a few percent.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let noise = state % 50_000;
        let gemm = if variant == 1 { 950_000 } else { 1_000_000 } + noise;
        let wall = gemm + 600_000 + noise;
        let start = i * 2_000_000;
        let dev0 = 5_000_000_000_000 + start;
        writeln!(
            w,
            r#"{{"type":"iteration","index":{i},"host_start_ns":{start},"host_wall_ns":{wall},"complete":true,"perturbed":false,"devices":[{{"device_id":0,"first_start_ns":{dev0},"last_end_ns":{},"busy_ns":{},"idle_ns":50000,"largest_gap_ns":20000,"kernel_count":6}}],"scopes":[{{"path":"step","calls":1,"host_ns":{},"launches":7,"kernels":6,"device_ns":0,"device_ns_inclusive":{}}},{{"path":"step/forward","calls":1,"host_ns":{gemm},"launches":7,"kernels":6,"device_ns":{},"device_ns_inclusive":{}}}],"kernels":[{{"name":"_Z4gemmILi128EEvPfS0_i","device_id":0,"grid":[132,1,1],"block":[256,1,1],"cluster":[0,0,0],"registers_per_thread":64,"static_shared_bytes":0,"dynamic_shared_bytes":49152,"local_bytes_per_thread":0,"count":2,"total_ns":{gemm},"min_ns":{},"max_ns":{},"graph_launches":0}},{{"name":"softmax_kernel","device_id":0,"grid":[64,1,1],"block":[128,1,1],"cluster":[0,0,0],"registers_per_thread":32,"static_shared_bytes":1024,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":2,"total_ns":300000,"min_ns":150000,"max_ns":150000,"graph_launches":0}},{{"name":"vector_add","device_id":0,"grid":[132,1,1],"block":[256,1,1],"cluster":[0,0,0],"registers_per_thread":16,"static_shared_bytes":0,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":2,"total_ns":200000,"min_ns":100000,"max_ns":100000,"graph_launches":0}}],"memcpy":[{{"device_id":0,"kind":"HtoD","count":1,"bytes":1048576,"total_ns":40000}}],"memset":[],"synchronization":[{{"kind":"stream","count":1,"total_ns":10000}}],"dropped_records":0,"missing_records":0,"nvml":[],"warnings":[]}}"#,
            dev0 + gemm + 550_000,
            gemm + 500_000,
            wall - 10_000,
            gemm + 540_000,
            gemm + 540_000,
            gemm + 540_000,
            gemm / 2,
            gemm - gemm / 2,
        )?;
    }
    writeln!(
        w,
        r#"{{"type":"trailer","iterations":{rows},"kernel_records":{},"activity_records":{},"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}}}"#,
        rows * 6,
        rows * 7
    )?;
    w.flush()
}
