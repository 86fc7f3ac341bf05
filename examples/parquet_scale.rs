//! A generated job of many ranks as JSONL ledgers and as a Parquet dataset, side by side: sizes,
//! the conversion's time, and the wall time and peak resident memory of each cross-rank query on
//! the embedded engine (`gpu-ledger sql`) and of `gpu-ledger merge` on the JSONL. Every command
//! runs as a child process; its peak memory is its `VmHWM` (high-water mark, which only grows),
//! read from /proc every 2 ms while it runs, so growth in its last 2 ms can be missed.
//!
//! `cargo build --release -p gpu-ledger-cli --features sql`, then
//! `GPU_LEDGER_BIN=target/release/gpu-ledger cargo run --example parquet_scale -- [--ranks 1024]
//! [--iterations 1000] [--keep] [DIR]` (default DIR: a temporary directory). The example only
//! generates ledgers and starts the binary, whose figures they are, so its debug build serves.
//! What it writes under DIR (`ledgers/`, `dataset/`, `one/`) is deleted at the end unless
//! `--keep`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

#[path = "common/job.rs"]
mod job;
#[path = "common/measure.rs"]
mod measure;
use measure::measure;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("parquet_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    ranks: u32,
    iterations: u64,
    keep: bool,
    dir: Option<PathBuf>,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        ranks: 1024,
        iterations: 1000,
        keep: false,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--ranks" => a.ranks = it.next().ok_or("--ranks needs a number")?.parse()?,
            "--iterations" => {
                a.iterations = it.next().ok_or("--iterations needs a number")?.parse()?
            }
            "--keep" => a.keep = true,
            d if !d.starts_with('-') => a.dir = Some(PathBuf::from(d)),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    Ok(a)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let bin = std::env::var_os("GPU_LEDGER_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.join("gpu-ledger"))
        })
        .filter(|b| b.exists())
        .ok_or(
            "gpu-ledger binary not found beside this example: build it with `cargo build \
             --release -p gpu-ledger-cli --features sql`, \
             or set GPU_LEDGER_BIN",
        )?;
    let ledgers = dir.join("ledgers");
    let dataset = dir.join("dataset");
    let one = dir.join("one");
    for p in [&ledgers, &dataset, &one] {
        if p.exists() {
            return Err(format!("{} exists: name a directory without it", p.display()).into());
        }
    }
    let result = measure_all(&a, &bin, &ledgers, &dataset, &one);
    if !a.keep {
        for p in [&ledgers, &dataset, &one] {
            if p.exists() {
                std::fs::remove_dir_all(p)?;
            }
        }
    }
    result
}

fn measure_all(
    a: &Args,
    bin: &Path,
    ledgers: &Path,
    dataset: &Path,
    one: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let straggler = job::Straggler {
        rank: a.ranks / 3,
        from: a.iterations * 6 / 10,
        percent: 20,
    };
    let paths = job::write_job(ledgers, a.ranks, a.iterations, Some(straggler))?;
    let jsonl = du(ledgers)?;
    println!(
        "job: {} ranks x {} iterations, rank {} 20 % slower from iteration {}; JSONL {:.2} GB, \
         generated in {:.1} s",
        a.ranks,
        a.iterations,
        straggler.rank,
        straggler.from,
        jsonl as f64 / 1e9,
        t0.elapsed().as_secs_f64()
    );
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let l = ledgers.to_str().ok_or("path not UTF-8")?;
    let d = dataset.to_str().ok_or("path not UTF-8")?;
    let first = paths[0].to_str().ok_or("path not UTF-8")?;
    let o = one.to_str().ok_or("path not UTF-8")?;
    let single = measure(Command::new(bin).args(["parquet", first, "-o", o, "--threads", "1"]))?;
    let conv = measure(Command::new(bin).args(["parquet", l, "-o", d]))?;
    let pq = du(dataset)?;
    println!();
    println!("| figure | JSONL | Parquet dataset |");
    println!("|---|---:|---:|");
    println!(
        "| size | {:.2} GB | {:.3} GB ({:.1}x smaller) |",
        jsonl as f64 / 1e9,
        pq as f64 / 1e9,
        jsonl as f64 / pq as f64
    );
    println!(
        "| conversion, one ledger alone (1 thread) | | {:.3} s, peak RSS {:.1} MB |",
        single.wall.as_secs_f64(),
        single.peak_mb()
    );
    println!(
        "| conversion, whole job ({threads} threads) | | {:.1} s ({:.1} ms per ledger), peak RSS \
         {:.1} MB |",
        conv.wall.as_secs_f64(),
        conv.wall.as_secs_f64() * 1e3 / f64::from(a.ranks),
        conv.peak_mb()
    );
    println!();
    println!("| cross-rank query | wall s | peak RSS MB |");
    println!("|---|---:|---:|");
    for q in ["straggler", "spread", "scope-percentiles", "lag"] {
        let m = measure(Command::new(bin).args(["sql", d, "--query", q, "--format", "csv"]))?;
        println!(
            "| sql --query {q} (Parquet) | {:.2} | {:.1} |",
            m.wall.as_secs_f64(),
            m.peak_mb()
        );
    }
    let mut merge = Command::new(bin);
    merge.args(["merge", "--format", "csv"]).args(&paths);
    let m = measure(&mut merge)?;
    println!(
        "| merge --format csv (JSONL: slowest rank and spread) | {:.2} | {:.1} |",
        m.wall.as_secs_f64(),
        m.peak_mb()
    );
    Ok(())
}

/// Bytes of the files below `dir`.
fn du(dir: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() { du(&e.path())? } else { m.len() };
    }
    Ok(n)
}
