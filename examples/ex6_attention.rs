//! Fused attention, resource trade-offs. For head dimensions 64 and 128, runs the fused FP32
//! attention kernel with 32-query tiles (baseline) against 64-query, 64-key tiles (the change),
//! with the 64-query, 32-key tile for reference, under gpu-ledger; prints one experiment ledger per
//! head dimension, with registers, shared memory and theoretical occupancy of each variant, and
//! which tile is best.
//!
//! `cargo run --release --example ex6_attention [-- LEDGER_PREFIX]`

use std::process::ExitCode;

use gpu_ledger::counters::metrics::names;
use gpu_ledger::kernels::suite::attention::{
    AttentionGpu, AttentionKernels, AttentionSpec, AttentionVariant,
};
use gpu_ledger::kernels::suite::experiment::{
    device_line, exit_code, measure, open_device, ExperimentConfig, ExperimentPage, Side,
};

/// Achieved occupancy: warps active, % of the maximum.
const WARPS_ACTIVE: &str = "sm__warps_active.avg.pct_of_peak_sustained_active";
/// L2 sectors read by L1 (global loads that missed L1).
const L2_READ_SECTORS: &str = "lts__t_sectors_srcunit_tex_op_read.sum";

fn main() -> ExitCode {
    exit_code("ex6_attention", run())
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let prefix = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/gpu-ledger-ex6".into());
    let dev = open_device(0)?;
    let kernels = AttentionKernels::load(&dev.ctx)?;
    let (bh, seq) = (32, 2048);
    let mut all_correct = true;
    let mut best = Vec::new();
    for d in [64u32, 128] {
        let path = format!("{prefix}-d{d}.jsonl");
        let variant = |bq, bkv| AttentionVariant::find(d, bq, bkv).expect("compiled variant");
        let mk = |v| AttentionGpu::new(&dev.stream, &kernels, AttentionSpec::new(bh, seq, v), 8);
        let mut small = mk(variant(32, 32))?;
        let mut large = mk(variant(64, 64))?;
        let mut mid = mk(variant(64, 32))?;
        let results = measure(
            &mut [
                Side {
                    label: "baseline",
                    workload: &mut small,
                },
                Side {
                    label: "change",
                    workload: &mut large,
                },
                Side {
                    label: "q64 k32",
                    workload: &mut mid,
                },
            ],
            &ExperimentConfig::new(10, 3, &path).with_counters(&[
                WARPS_ACTIVE,
                names::SHARED_LD_WAVEFRONTS,
                names::DRAM_BYTES_READ,
                L2_READ_SECTORS,
            ]),
        )?;
        let mut page = ExperimentPage::new(
            format!("ex6 attention, head dim {d}: resource trade-offs"),
            device_line(&dev.gpu),
            format!(
                "attention_d{d}_q32_k32: {bh} heads x {seq} tokens, FP32 online softmax, 32 \
                 query rows per block, K/V streamed through shared memory 32 keys at a time"
            ),
            "Because every block re-reads all of K and V once per query tile, doubling the query \
             tile halves K/V traffic and shared-memory fills per FLOP; registers and shared \
             memory per block grow and theoretical occupancy falls, and the kernel should still \
             get faster if it is bound by K/V loads rather than by latency hiding.",
            format!("attention_d{d}_q64_k64: 64 query rows and 64 keys per tile (the one knob: tile size)"),
            results,
            std::path::Path::new(&path),
        );
        // Doubling the query tile halves the K/V tiles each query row needs from L2.
        let l2 = |i: usize| page.results[i].counter("", L2_READ_SECTORS);
        page.check(
            "change / baseline: L2 sectors read by L1",
            l2(1).zip(l2(0)).map(|(c, b)| c / b),
            "< 0.75 (half the K/V re-reads; Q and the output unchanged)",
            |v| v < 0.75,
        );
        let wavefronts = |i: usize| page.results[i].counter("", names::SHARED_LD_WAVEFRONTS);
        page.check(
            "change / baseline: shared-memory load wavefronts",
            wavefronts(1).zip(wavefronts(0)).map(|(c, b)| c / b),
            "≤ 1 (K/V tiles are filled half as often per FLOP)",
            |v| v <= 1.0,
        );
        if let Some((i, r)) = page
            .results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.device_per_run().map(|dd| (i, dd.median, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _, r)| (i, r))
        {
            let line = format!(
                "head dim {d}: best tile is {} ({})",
                r.name, page.results[i].label
            );
            page.notes.push(line.clone());
            best.push(line);
        }
        println!("{page}");
        all_correct &= page.all_correct();
    }
    for b in best {
        println!("{b}");
    }
    Ok(all_correct)
}
