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

/// Iterations of the profiled run, and the window PC sampling samples.
const PROFILED_ITERATIONS: u64 = 5;

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_profiled_run_gives_each_scope_its_stall_reasons_and_hottest_lines_in_the_sampled_rows() {
    use gpu_ledger::pcsampling::{PcSamplingSetup, PcSamplingWindow};
    use gpu_ledger::{read_ledger, Level, Profiler};
    let _serial = SERIAL.lock();
    let g = gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pc.jsonl");
    let mut setup = PcSamplingSetup::new(&g.ctx);
    setup.window = PcSamplingWindow {
        skip: 2,
        iterations: 2,
    };
    // The bundled kernels are compiled from embedded text: the line table names `stalls.cu`,
    // which is not on disk here.
    setup.texts.extend(gpu_ledger::kernels::source_files());
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .settle(std::time::Duration::from_secs(10))
        .pc_sampling(setup)
        .start()
        .expect("the timeline with PC sampling starts on the GPU host");
    // Loaded after the start: the profiler keeps the modules' cubins as they load.
    let mut cases = StallCases::new(&g.ctx).expect("the stall kernels compile and load");
    for _ in 0..PROFILED_ITERATIONS {
        for (scope, case, runs) in [
            ("chase", StallCase::PointerChase, 2),
            ("fma", StallCase::FmaChain, 2),
            ("spill", StallCase::Spill, 1),
        ] {
            let _s = Profiler::scope(scope);
            cases.run(case, runs).unwrap();
        }
        g.ctx.synchronize().unwrap();
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let described = ledger.header.config.pc_sampling.clone().unwrap_or_default();
    println!("header: {described}");
    assert!(described.starts_with("iterations 2..4"), "{described}");
    assert_eq!(ledger.iterations.len() as u64, PROFILED_ITERATIONS);
    for r in &ledger.iterations {
        let sampled = (2..4).contains(&r.index);
        assert_eq!(r.stalls.is_some(), sampled, "row {} sampled", r.index);
        assert_eq!(r.perturbed, sampled, "row {} perturbed", r.index);
        assert!(r.complete, "row {}: {:?}", r.index, r.warnings);
        let Some(s) = &r.stalls else { continue };
        println!(
            "row {}: {} samples, {} dropped, {} unattributed, wall {:.1} ms",
            r.index,
            s.total_samples,
            s.dropped_samples,
            s.unattributed_samples,
            r.host_wall_ns as f64 / 1e6
        );
        assert!(s.error.is_none(), "row {}: {:?}", r.index, s.error);
        assert_eq!(s.dropped_samples, 0, "row {}: samples dropped", r.index);
        let scope = |name: &str| {
            s.scopes
                .iter()
                .find(|x| x.scope == name)
                .unwrap_or_else(|| panic!("row {}: scope {name} has samples", r.index))
        };
        for sc in &s.scopes {
            let top: Vec<String> = gpu_ledger::ledger::stalls::reason_shares(&sc.by_reason)
                .iter()
                .take(3)
                .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
                .collect();
            println!("  {}: {} samples: {}", sc.scope, sc.samples, top.join(", "));
        }
        let dominant = |name: &str| {
            gpu_ledger::ledger::stalls::reason_shares(&scope(name).by_reason)[0]
                .0
                .clone()
        };
        assert_eq!(dominant("chase"), "long_scoreboard");
        assert_eq!(dominant("fma"), "wait");
        assert!(!scope("chase").split_by_time);
        // Every sample with a PC is in a scope or counted as unattributed.
        let in_scopes: u64 = s.scopes.iter().map(|x| x.samples).sum();
        assert_eq!(in_scopes + s.unattributed_samples, s.sampled());
        for (kernel, needle) in [
            (StallCase::PointerChase.kernel(), "p = next[p];"),
            (StallCase::Spill.kernel(), "acc[idx] += v;"),
        ] {
            let k = s
                .kernels
                .iter()
                .find(|k| k.name == kernel)
                .unwrap_or_else(|| panic!("row {}: {kernel} sampled", r.index));
            assert!(k.cubin, "{kernel}: its module's cubin was kept at load");
            let top = k.lines.first().expect("a hottest line");
            println!(
                "  {kernel}: {} of {} samples at {}:{} {}",
                top.samples,
                k.samples,
                top.file,
                top.line,
                top.text.as_deref().unwrap_or("")
            );
            assert!(
                top.text.as_deref().is_some_and(|t| t.contains(needle)),
                "{kernel}: the hottest line is `{needle}`"
            );
        }
    }
}

/// CUPTI refuses to enable kernel tracing while PC sampling is enabled on a context: a
/// `PcSampler` the application keeps alive makes the timeline's start fail with the reason.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_live_pc_sampler_makes_the_timelines_start_fail_with_the_reason() {
    use gpu_ledger::{Level, Profiler};
    let _serial = SERIAL.lock();
    let g = gpu();
    let dir = tempfile::tempdir().unwrap();
    let alive = PcSampler::new(&g.ctx, PcSamplingConfig::default()).unwrap();
    let refused = Profiler::builder()
        .level(Level::Timeline)
        .calibrate_tracing(false)
        .ledger_path(dir.path().join("refused.jsonl"))
        .start()
        .expect_err("kernel tracing cannot be enabled beside an enabled PcSampler")
        .to_string();
    println!("timeline beside a PcSampler: {refused}");
    assert!(refused.contains("CONCURRENT_KERNEL"), "{refused}");
    assert!(refused.contains("drop the PcSampler"), "{refused}");
    drop(alive);
}

/// The profiler enables sampling only for its window, so a sampled timeline that traces every
/// iteration up to the window's end still switches tracing off and on after it.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn pc_sampling_is_enabled_only_for_its_window_so_a_sampled_timeline_still_switches() {
    use gpu_ledger::pcsampling::{PcSamplingSetup, PcSamplingWindow};
    use gpu_ledger::{read_ledger, Level, Profiler, TimelineSampling};
    let _serial = SERIAL.lock();
    let g = gpu();
    let dir = tempfile::tempdir().unwrap();
    let n = 1 << 20;
    let (a, b, mut c) = crate::vectors(&g.stream, n);
    let mut cases = StallCases::new(&g.ctx).expect("the stall kernels compile and load");
    let mut setup = PcSamplingSetup::new(&g.ctx);
    for (_, cubin) in gpu_ledger::kernels::compiled_cubins() {
        setup.cubins.push(cubin);
    }
    setup.window = PcSamplingWindow {
        skip: 3,
        iterations: 2,
    };
    let refused = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(dir.path().join("refused.jsonl"))
        .sample_timeline(TimelineSampling::every(4).and_window(3..5))
        .pc_sampling(setup.clone())
        .start()
        .expect_err("an untraced iteration before the window is refused")
        .to_string();
    println!("refused: {refused}");
    assert!(refused.contains("and_window(0..5)"), "{refused}");
    let path = dir.path().join("sampled.jsonl");
    let p = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .settle(std::time::Duration::from_secs(10))
        .sample_timeline(TimelineSampling::every(4).and_window(0..5))
        .pc_sampling(setup)
        .start()
        .expect("a sampled timeline with PC sampling inside its window starts");
    for _ in 0..9 {
        {
            let _s = Profiler::scope("vadd");
            for _ in 0..5 {
                g.vadd.launch(&g.stream, &a, &b, &mut c, n as u64).unwrap();
            }
        }
        {
            let _s = Profiler::scope("fma");
            cases.run(StallCase::FmaChain, 1).unwrap();
        }
        g.ctx.synchronize().unwrap();
        p.step();
    }
    p.finish().unwrap();
    let rows = read_ledger(&path).unwrap().iterations;
    for r in &rows {
        println!(
            "row {}: untraced {}, kernels {:?}, warnings {:?}",
            r.index,
            r.untraced,
            r.kernels.iter().map(|k| &k.name).collect::<Vec<_>>(),
            r.warnings
        );
        if let Some(s) = &r.stalls {
            println!(
                "  {} samples, {} non-user, {} unattributed, buffer full {}; functions {:?}; \
                 scopes {:?}",
                s.total_samples,
                s.non_user_samples,
                s.unattributed_samples,
                s.hardware_buffer_full,
                s.kernels
                    .iter()
                    .map(|k| (&k.name, k.samples))
                    .collect::<Vec<_>>(),
                s.scopes
                    .iter()
                    .map(|k| (&k.scope, k.samples))
                    .collect::<Vec<_>>()
            );
        }
        assert!(r.warnings.is_empty(), "row {}: {:?}", r.index, r.warnings);
        let traced = r.index % 4 == 0 || r.index < 5;
        assert_eq!(!r.untraced, traced, "row {} traced", r.index);
        assert_eq!(r.stalls.is_some(), (3..5).contains(&r.index));
        if let Some(s) = &r.stalls {
            let fma = s.scopes.iter().find(|x| x.scope == "fma");
            assert!(
                fma.is_some_and(|f| f.samples > 1000),
                "row {}: the FMA chain's samples are in its scope",
                r.index
            );
            let in_scopes: u64 = s.scopes.iter().map(|x| x.samples).sum();
            assert_eq!(in_scopes + s.unattributed_samples, s.sampled());
        }
    }
    // Iteration 8 is traced again after the window: tracing switched back on.
    assert_eq!(rows[8].kernels.iter().map(|k| k.count).sum::<u64>(), 6);
}

/// A hardware buffer too small for a kernel's samples loses them: the loss is reported, never a
/// silent empty profile.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn samples_lost_to_a_small_hardware_buffer_are_reported() {
    let _serial = SERIAL.lock();
    let g = gpu();
    let mut cases = StallCases::new(&g.ctx).expect("the stall kernels compile and load");
    for bytes in [128usize << 10, 2 << 20, 16 << 20] {
        let mut sampler = PcSampler::new(
            &g.ctx,
            PcSamplingConfig {
                hardware_buffer_bytes: Some(bytes),
                ..PcSamplingConfig::default()
            },
        )
        .unwrap();
        let p = cases
            .sample(&mut sampler, StallCase::PointerChase, 2)
            .expect("sampled");
        let with_pc: u64 = p.functions.iter().map(|f| f.samples()).sum();
        println!(
            "hardware buffer {bytes} B: {} samples, {with_pc} with a PC, {} dropped, full {}",
            p.total_samples, p.dropped_samples, p.hardware_buffer_full
        );
        assert!(
            with_pc > 0 || p.hardware_buffer_full || p.dropped_samples > 0,
            "{bytes} B: an empty profile must say why"
        );
    }
}

/// A duty-cycled profiled run: the window opens within the budget of the expected run, its row
/// is the only perturbed one, and the trailer sums it per kernel and per scope with the chase's
/// and the FMA chain's dominant reasons; the target reached in one window, no second opens.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_duty_cycled_run_samples_one_window_and_sums_it_in_the_trailer() {
    use gpu_ledger::pcsampling::{DutyCycle, PcSamplingSetup};
    use gpu_ledger::{read_ledger, Level, Profiler};
    const ITERATIONS: u64 = 200;
    let _serial = SERIAL.lock();
    let g = gpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("duty.jsonl");
    let mut cases = StallCases::new(&g.ctx).expect("the stall kernels compile and load");
    let mut setup = PcSamplingSetup::new(&g.ctx).duty_cycle(DutyCycle {
        // Half the expected run: the first window's real cost is not known before it runs.
        budget: 0.5,
        target_samples: 1_000,
        expected_iterations: Some(ITERATIONS),
        ..DutyCycle::default()
    });
    setup.cubins.extend(
        gpu_ledger::kernels::compiled_cubins()
            .into_iter()
            .map(|c| c.1),
    );
    setup.texts.extend(gpu_ledger::kernels::source_files());
    let profiler = Profiler::builder()
        .level(Level::Timeline)
        .ledger_path(&path)
        .settle(std::time::Duration::from_secs(10))
        // Rows come back within milliseconds, so that the scheduler has its baseline and the
        // window's cost early in a short run.
        .flush_interval(std::time::Duration::from_millis(5))
        .pc_sampling(setup)
        .start()
        .expect("the timeline with duty-cycled PC sampling starts");
    for _ in 0..ITERATIONS {
        for (scope, case) in [
            ("chase", StallCase::PointerChase),
            ("fma", StallCase::FmaChain),
        ] {
            let _s = Profiler::scope(scope);
            cases.run(case, 2).unwrap();
        }
        g.ctx.synchronize().unwrap();
        profiler.step();
    }
    profiler.finish().unwrap();
    let ledger = read_ledger(&path).unwrap();
    let described = ledger.header.config.pc_sampling.clone().unwrap_or_default();
    println!("header: {described}");
    assert!(described.starts_with("duty-cycled"), "{described}");
    let windows: Vec<_> = ledger
        .iterations
        .iter()
        .filter(|r| r.stalls.is_some())
        .collect();
    for r in &ledger.iterations {
        assert_eq!(r.perturbed, r.stalls.is_some(), "row {}", r.index);
        if r.stalls.is_some() {
            println!(
                "window at iteration {}: wall {:.1} ms",
                r.index,
                r.host_wall_ns as f64 / 1e6
            );
        }
    }
    let trailer = ledger.trailer.expect("trailer");
    let st = trailer.stalls.expect("the trailer sums the windows");
    let d = st.duty_cycle.clone().expect("the duty cycle's cost");
    println!(
        "{} window(s), {} samples, cost {:.3} % of {:.1} ms, covered {}; warnings {:?}",
        d.windows_opened,
        st.samples,
        d.cost_fraction() * 100.0,
        d.run_ns as f64 / 1e6,
        d.covered,
        trailer.warnings
    );
    assert_eq!(
        windows.len(),
        1,
        "one window reaches 1 000 samples of each kernel"
    );
    assert_eq!(
        (d.windows_opened, d.windows_measured, st.windows),
        (1, 1, 1)
    );
    assert!(windows[0].index >= 5, "no window in the warm-up");
    assert!(d.covered && d.cost_ns > 0);
    let dominant = |counts: &std::collections::BTreeMap<String, u64>| {
        gpu_ledger::ledger::stalls::reason_shares(counts)[0]
            .0
            .clone()
    };
    for (kernel, scope, reason) in [
        (StallCase::PointerChase.kernel(), "chase", "long_scoreboard"),
        (StallCase::FmaChain.kernel(), "fma", "wait"),
    ] {
        let k = st
            .kernels
            .iter()
            .find(|k| k.name == kernel)
            .expect("kernel profiled");
        assert!(
            k.top && k.windows == 1 && k.samples >= 1_000,
            "{kernel}: {k:?}"
        );
        assert_eq!(dominant(&k.by_reason), reason, "{kernel}");
        let s = st
            .scopes
            .iter()
            .find(|s| s.scope == scope)
            .expect("scope profiled");
        assert_eq!(dominant(&s.by_reason), reason, "{scope}");
        let in_row = windows[0]
            .stalls
            .as_ref()
            .unwrap()
            .kernels
            .iter()
            .find(|x| x.name == kernel);
        assert_eq!(
            in_row.map(|x| x.samples),
            Some(k.samples),
            "{kernel}: trailer = row"
        );
    }
}
