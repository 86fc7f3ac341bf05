//! GPU tests: PC sampling of the kernels whose stall character is known. Each case's dominant
//! stall reason, the direction of each before/after pair, no dropped samples, and the hottest
//! source line of the pointer chase and of the spilling kernel. No gpu-ledger `Profiler` runs
//! while these do (SERIAL): one client samples a GPU at a time.

use std::collections::HashMap;

use gpu_ledger::kernels::suite::stalls::{StallCase, StallCases};
use gpu_ledger::pcsampling::{reasons, FunctionStalls, PcSampler, PcSamplingConfig, StallProfile};

use crate::{gpu, SERIAL};

fn print(case: StallCase, f: &FunctionStalls, p: &StallProfile) {
    let top: Vec<String> = f
        .shares()
        .iter()
        .take(5)
        .map(|(k, s)| format!("{k} {:.1}%", s * 100.0))
        .collect();
    println!(
        "{}: {} samples, {} dropped: {}",
        case.kernel(),
        f.samples(),
        p.dropped_samples,
        top.join(", ")
    );
}

fn share_of(f: &FunctionStalls, keys: &[&str]) -> f64 {
    keys.iter().map(|k| f.share(k)).sum()
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn each_kernel_stalls_where_its_code_says_and_each_fix_moves_the_mix() {
    let _serial = SERIAL.lock();
    let g = gpu();
    let mut cases = StallCases::new(&g.ctx).expect("the stall kernels compile and load");
    let mut sampler = PcSampler::new(&g.ctx, PcSamplingConfig::default())
        .expect("PC sampling enables on the H200");
    let mut got: HashMap<StallCase, (FunctionStalls, StallProfile)> = HashMap::new();
    for case in StallCase::ALL {
        let p = cases.sample(&mut sampler, case, 5).expect("sampled");
        let f = p
            .function(case.kernel())
            .unwrap_or_else(|| panic!("{} has samples", case.kernel()))
            .clone();
        print(case, &f, &p);
        assert!(f.samples() >= 1000, "{}: too few samples", case.kernel());
        assert_eq!(p.dropped_samples, 0, "{}: samples dropped", case.kernel());
        assert!(
            !p.hardware_buffer_full,
            "{}: hardware buffer full",
            case.kernel()
        );
        got.insert(case, (f, p));
    }
    let f = |c: StallCase| &got[&c].0;

    assert_eq!(
        f(StallCase::PointerChase).dominant(),
        Some("long_scoreboard")
    );
    assert_eq!(f(StallCase::FmaChain).dominant(), Some("wait"));
    let fma_memory: f64 = f(StallCase::FmaChain)
        .by_reason
        .keys()
        .filter(|k| reasons::is_memory(k))
        .map(|k| f(StallCase::FmaChain).share(k))
        .sum();
    assert!(
        fma_memory < 0.05,
        "the FMA chain waits on memory: {fma_memory:.3}"
    );

    let mio = ["mio_throttle", "short_scoreboard"];
    let (conflicted, padded) = (
        share_of(f(StallCase::TransposeConflicted), &mio),
        share_of(f(StallCase::TransposePadded), &mio),
    );
    println!("MIO + short scoreboard: conflicted {conflicted:.3}, padded {padded:.3}");
    assert!(
        conflicted > padded,
        "padding lowers MIO/short-scoreboard stalls"
    );

    let local = ["long_scoreboard", "lg_throttle"];
    let (spill, free) = (
        share_of(f(StallCase::Spill), &local),
        share_of(f(StallCase::SpillFree), &local),
    );
    println!("long scoreboard + LG throttle: spilling {spill:.3}, spill-free {free:.3}");
    assert!(spill > free, "local-memory stalls vanish without the spill");

    let (tree, shuffle) = (
        f(StallCase::ReduceTree).share("barrier"),
        f(StallCase::ReduceShuffle).share("barrier"),
    );
    println!("barrier: tree {tree:.3}, shuffle {shuffle:.3}");
    assert!(tree > shuffle, "shuffles lower barrier stalls");

    for (case, needle) in [
        (StallCase::PointerChase, "p = next[p];"),
        (StallCase::Spill, "acc[idx] += v;"),
    ] {
        let lines = got[&case].1.hottest_lines(case.kernel(), &cases.sources, 3);
        for l in &lines {
            println!(
                "{}: {} samples at {}:{} {}",
                case.kernel(),
                l.samples,
                l.file,
                l.line,
                l.text.as_deref().unwrap_or("")
            );
        }
        let top = lines.first().expect("a hottest line");
        assert!(
            top.file.ends_with(".cu") && top.line > 0,
            "{}: the hottest PC maps to a source line",
            case.kernel()
        );
        assert!(
            top.text.as_deref().is_some_and(|t| t.contains(needle)),
            "{}: the hottest line is `{needle}`",
            case.kernel()
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_second_sampler_on_the_same_gpu_is_refused_with_the_reason() {
    let _serial = SERIAL.lock();
    let g = gpu();
    let _first = PcSampler::new(&g.ctx, PcSamplingConfig::default()).expect("first sampler");
    let second = PcSampler::new(&g.ctx, PcSamplingConfig::default());
    let e = second.expect_err("a second sampler on the same context is refused");
    println!("second sampler: {e}");
    assert!(
        e.to_string().contains("only one client can PC-sample"),
        "{e}"
    );
}
