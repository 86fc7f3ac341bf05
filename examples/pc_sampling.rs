//! PC sampling of the kernels whose stall character is known: per kernel, the samples by stall
//! reason (shares, largest first) and the hottest source lines.
//!
//! `pc_sampling [--json PATH] [--repeats N] [--period N]` samples every case;
//! `pc_sampling --launch-only` runs the same launches without sampling, for Nsight Compute to
//! sample them instead (`scripts/pc-sampling-ncu.sh` compares the two).

use std::collections::BTreeMap;
use std::process::ExitCode;

use cudarc::driver::CudaContext;
use gpu_ledger::kernels::suite::stalls::{StallCase, StallCases};
use gpu_ledger::pcsampling::{reasons, PcSampler, PcSamplingConfig};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> ExitCode {
    if !gpu_ledger::internals::driver_present() {
        eprintln!("pc_sampling: no NVIDIA driver or GPU here; run it on a machine with one");
        return ExitCode::FAILURE;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pc_sampling: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let repeats: u32 = arg("--repeats").map_or(Ok(5), |s| s.parse())?;
    let ctx = CudaContext::new(0)?;
    let mut cases = StallCases::new(&ctx)?;
    if std::env::args().any(|a| a == "--launch-only") {
        // Twice each: the second launch of a case starts with the caches its first left, as
        // the sampled runs do.
        for case in StallCase::ALL {
            cases.run(case, 2)?;
        }
        ctx.synchronize()?;
        println!("launched every case twice, unsampled");
        return Ok(());
    }
    let config = PcSamplingConfig {
        period_log2: arg("--period").map(|s| s.parse()).transpose()?,
        ..PcSamplingConfig::default()
    };
    let mut sampler = PcSampler::new(&ctx, config)?;
    println!(
        "stall reasons CUPTI samples: {}",
        sampler.reason_names().join(" ")
    );
    let mut json = BTreeMap::new();
    for case in StallCase::ALL {
        let profile = cases.sample(&mut sampler, case, repeats)?;
        let Some(f) = profile.function(case.kernel()) else {
            return Err(format!(
                "{}: no samples of the kernel ({} samples in all, {} dropped)",
                case.kernel(),
                profile.total_samples,
                profile.dropped_samples
            )
            .into());
        };
        println!(
            "\n{}: {} samples, {} dropped, hardware buffer full: {}",
            case.kernel(),
            f.samples(),
            profile.dropped_samples,
            profile.hardware_buffer_full
        );
        for (k, share) in f.shares().iter().take(6) {
            println!("  {:<26} {:>6.1} %", reasons::label(k), share * 100.0);
        }
        let lines = profile.hottest_lines(case.kernel(), &cases.sources, 3);
        for l in &lines {
            println!(
                "  {:>6} samples  {}:{}  {}",
                l.samples,
                l.file,
                l.line,
                l.text.as_deref().unwrap_or("")
            );
        }
        json.insert(
            case.kernel().to_string(),
            serde_json::json!({
                "samples": f.samples(),
                "dropped": profile.dropped_samples,
                "by_reason": f.by_reason,
                "hottest": lines,
            }),
        );
    }
    if let Some(path) = arg("--json") {
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("\nwrote {path}");
    }
    Ok(())
}
