//! Peak resident memory and wall time of every `gpu-ledger` command on three generated ledgers,
//! side by side: many rows (the row-count case, bounded since the streaming engine), a million
//! distinct scope paths (10 000 rows of 100 paths each, a program that names scopes by request
//! id) and a million distinct kernel names (10 000 rows of 100 kernels each). Each command is a
//! child process; its peak is its `VmHWM`, read from /proc every 2 ms. Every peak must stay under
//! [`LIMIT_MB`]: the example fails otherwise.
//!
//! `cargo build --release -p gpu-ledger-cli --examples && target/release/examples/names_scale
//! [ROWS [DIR]]` (default 1 000 000 rows for the row-count case, in a temporary directory).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[path = "../../examples/common/measure.rs"]
mod measure;
use measure::measure;

/// The peak every command must stay under, MB.
const LIMIT_MB: f64 = 256.0;

/// Rows, and names per row, of the two many-name ledgers: a million distinct names each.
const NAME_ROWS: u64 = 10_000;
const NAMES_PER_ROW: u64 = 100;

const HEADER: &str = r#"{"type":"header","schema_version":1,"gpu_ledger_version":"0.1.0","start_unix_ns":1764000000000000000,"start_cupti_ns":5000000000000,"config":{"level":"timeline","buffer_count":8,"buffer_bytes":4194304,"settle_ms":2000},"environment":{"gpus":[],"driver_version":null,"cuda_driver_version":13000,"cupti_api_version":130001,"cupti_path":null,"hostname":"bench","command_line":[]},"rank":{"rank":0,"local_rank":0,"world_size":1},"warnings":[]}"#;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("names_scale: a command peaked above {LIMIT_MB} MB");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("names_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What varies between the three ledgers' rows.
#[derive(Clone, Copy)]
enum Case {
    Rows,
    Scopes,
    Kernels,
}

/// One kernel group of `name`, 10 µs a launch.
fn kernel(name: &str) -> String {
    format!(
        r#"{{"name":"{name}","device_id":0,"grid":[132,1,1],"block":[256,1,1],"cluster":[0,0,0],"registers_per_thread":32,"static_shared_bytes":0,"dynamic_shared_bytes":0,"local_bytes_per_thread":0,"count":1,"total_ns":10000,"min_ns":10000,"max_ns":10000,"graph_launches":0}}"#
    )
}

/// One scope entry of `path`.
fn scope(path: &str, host: u64, dev: u64) -> String {
    format!(
        r#"{{"path":"{path}","calls":1,"host_ns":{host},"launches":1,"kernels":1,"device_ns":{dev},"device_ns_inclusive":{dev}}}"#
    )
}

/// Row `i` of `case`: a `step` scope, and per case one scope and kernel, or 100 distinct ones.
fn row(case: Case, i: u64) -> String {
    let start = i * 2_000_000;
    let dev0 = 5_000_000_000_000 + start;
    let n = match case {
        Case::Rows => 1,
        _ => NAMES_PER_ROW,
    };
    let busy = n * 10_000;
    let mut scopes = vec![scope("step", 1_900_000, busy)];
    let mut kernels = Vec::new();
    for k in 0..n {
        let id = i * NAMES_PER_ROW + k;
        match case {
            Case::Rows => {
                scopes.push(scope("step/forward", 1_000_000, busy));
                kernels.push(kernel("_Z4gemmILi128EEvPfS0_i"));
            }
            Case::Scopes => {
                scopes.push(scope(&format!("step/request-{id}"), 10_000, 10_000));
                if k == 0 {
                    kernels.push(kernel("_Z4gemmILi128EEvPfS0_i"));
                }
            }
            Case::Kernels => kernels.push(kernel(&format!("layer_{id}_kernel"))),
        }
    }
    format!(
        r#"{{"type":"iteration","index":{i},"host_start_ns":{start},"host_wall_ns":1950000,"complete":true,"perturbed":false,"devices":[{{"device_id":0,"first_start_ns":{dev0},"last_end_ns":{},"busy_ns":{busy},"idle_ns":50000,"largest_gap_ns":20000,"kernel_count":{n}}}],"scopes":[{}],"kernels":[{}],"memcpy":[],"memset":[],"synchronization":[],"dropped_records":0,"missing_records":0,"nvml":[],"warnings":[]}}"#,
        dev0 + busy + 50_000,
        scopes.join(","),
        kernels.join(",")
    )
}

fn generate(path: &Path, case: Case, rows: u64) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(w, "{HEADER}")?;
    for i in 0..rows {
        writeln!(w, "{}", row(case, i))?;
    }
    writeln!(
        w,
        r#"{{"type":"trailer","iterations":{rows},"kernel_records":0,"activity_records":0,"dropped_records":0,"late_records":0,"unplaced_records":0,"lines_not_written":0,"overhead":{{"cupti_overhead_ns":0,"buffer_callback_ns":0,"collector_cpu_ns":0,"writer_cpu_ns":0,"buffers_used":0,"buffer_requests_refused":0}}}}"#
    )?;
    w.flush()
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
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
    let bin = std::env::var_os("GPU_LEDGER_BIN")
        .map(PathBuf::from)
        .or_else(|| exe.parent()?.parent().map(|d| d.join("gpu-ledger")))
        .filter(|b| b.exists())
        .ok_or("gpu-ledger not found: build it with `cargo build --release -p gpu-ledger-cli`")?;
    let cases = [
        ("rows", Case::Rows, rows),
        ("scope names", Case::Scopes, NAME_ROWS),
        ("kernel names", Case::Kernels, NAME_ROWS),
    ];
    let mut paths = Vec::new();
    for (name, case, n) in cases {
        let p = dir.join(format!("{}.jsonl", name.replace(' ', "-")));
        generate(&p, case, n)?;
        println!(
            "{name}: {n} rows, {:.0} MB",
            std::fs::metadata(&p)?.len() as f64 / 1e6
        );
        paths.push(p);
    }
    println!();
    println!(
        "| command | {rows} rows: MB | s | 1 M scope names: MB | s | 1 M kernel names: MB | s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let out = dir.join("out");
    let commands: [&str; 10] = [
        "check",
        "summary",
        "compare",
        "report",
        "csv",
        "csv --long",
        "trace",
        "merge",
        "metrics",
        "parquet",
    ];
    let mut within = true;
    for cmd in commands {
        let mut cells = Vec::new();
        for p in &paths {
            let _ = std::fs::remove_dir_all(&out);
            let _ = std::fs::remove_file(&out);
            let p = p.to_str().ok_or("a path that is not UTF-8")?;
            let o = out.to_str().ok_or("a path that is not UTF-8")?;
            let args: Vec<&str> = match cmd {
                "check" | "summary" | "merge" | "metrics" => vec![cmd, p],
                "compare" => vec![cmd, p, p],
                "csv --long" => vec!["csv", p, "--long", "-o", o],
                _ => vec![cmd, p, "-o", o],
            };
            let m = measure(Command::new(&bin).args(&args))?;
            within &= m.peak_mb() < LIMIT_MB;
            cells.push(format!("{:.1} | {:.1}", m.peak_mb(), m.wall.as_secs_f64()));
        }
        println!("| {cmd} | {} |", cells.join(" | "));
    }
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_file(&out);
    Ok(within)
}
