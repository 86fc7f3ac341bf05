//! The table: every configuration over rounds, the targets, the split and the per-launch table.

use super::*;

/// Per-round figures of one (workload, configuration).
#[derive(Default)]
struct Series {
    /// µs per launch ((c): per step), one value per round.
    per_unit_us: Vec<f64>,
    /// The launching thread's CPU time over the loop, µs per launch ((c): per step): the
    /// launch path's own cost without the time the thread was off the CPU (preempted,
    /// migrated, or asleep in a synchronize).
    cpu_per_unit_us: Vec<f64>,
    /// Whole loop, s, one value per round.
    total_s: Vec<f64>,
}

/// The `q`-quantile of `v` in any order (NaN when empty), by the analysis module's rule.
fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile_sorted(&s, q).unwrap_or(f64::NAN)
}

/// What the table's per-unit figures divide by: launches, except for (c), whose unit is the
/// step (cuBLAS decides its own launches).
fn units_of(w: Workload, args: &Args) -> u64 {
    match w {
        Workload::Train => args.train_steps,
        _ => launches_of(w, args, 0),
    }
}

/// Kernel launches the workload makes, with `train_kernels` per training step.
fn launches_of(w: Workload, args: &Args, train_kernels: u64) -> u64 {
    match w {
        Workload::Launch | Workload::ScopedLaunch => args.launches,
        Workload::Train => args.train_steps * train_kernels,
        Workload::Step => args.steps * LAUNCHES_PER_STEP,
    }
}

/// Kernels one training step launches, counted by the raw-CUPTI reference over one step.
fn kernels_per_train_step(gpu: &mut Gpu, lib: &'static LoadedCupti) -> Result<u64> {
    let raw = RawSession::start(lib)?;
    run_train_steps::<false>(gpu, 1, None, 1)?;
    Ok(raw.stop()?.kernel_records)
}

fn run_workload(
    gpu: &mut Gpu,
    w: Workload,
    config: Config,
    args: &Args,
    profiler: Option<&Profiler>,
) -> Result<Duration> {
    let every = config.step_every();
    match (w, config.scoped()) {
        (Workload::Launch, _) => run_launches::<false>(gpu, args.launches, profiler, every),
        (Workload::ScopedLaunch, false) => {
            run_launches::<false>(gpu, args.launches, profiler, every)
        }
        (Workload::ScopedLaunch, true) => run_launches::<true>(gpu, args.launches, profiler, every),
        (Workload::Train, false) => {
            run_train_steps::<false>(gpu, args.train_steps, profiler, every)
        }
        (Workload::Train, true) => run_train_steps::<true>(gpu, args.train_steps, profiler, every),
        (Workload::Step, false) => run_steps::<false>(gpu, args.steps, profiler, every),
        (Workload::Step, true) => run_steps::<true>(gpu, args.steps, profiler, every),
    }
}

/// The configurations to run: `--configs`, else the default five (and the two ablations with
/// `--decompose`).
fn configs_of(args: &Args) -> Result<Vec<Config>> {
    if let Some(list) = &args.configs {
        return parse_configs(list);
    }
    let mut configs = vec![
        Config::None,
        Config::Disabled,
        Config::Scopes,
        Config::Timeline,
        Config::Raw,
    ];
    if args.decompose {
        configs.push(Config::TimelineNoScopes);
        configs.push(Config::TimelineFewSteps);
    }
    Ok(configs)
}

/// What the rounds gather: per workload and configuration the figures, per configuration the
/// profiler's self-report and each round's steps of (c) with the iteration they began (the
/// steady state's figure and `--step-laps` read them: one clock read a step).
struct Gathered {
    series: Vec<Vec<Series>>,
    reports: Vec<SelfReport>,
    laps: Vec<Vec<super::laps::Laps>>,
}

/// What every run of a configuration shares.
struct Plan<'a> {
    lib: &'static LoadedCupti,
    args: &'a Args,
    dir: &'a Path,
    configs: Vec<Config>,
    workloads: Vec<usize>,
    train_kernels: u64,
}

pub(super) fn table(
    gpu: &mut Gpu,
    lib: &'static LoadedCupti,
    args: &Args,
    dir: &Path,
) -> Result<()> {
    let wall = Instant::now();
    let configs = configs_of(args)?;
    eprintln!(
        "overhead: {} ({} SMs, {:.0} MHz SM clock by calibration); {} rounds of {} configurations",
        gpu.name,
        gpu.sms,
        gpu.cycles_per_us,
        args.rounds,
        configs.len()
    );
    let workloads = parse_workloads(&args.workloads)?;
    let train_kernels = kernels_per_train_step(gpu, lib)?;
    eprintln!("overhead: the training step (c) launches {train_kernels} kernels");
    let plan = Plan {
        lib,
        args,
        dir,
        configs,
        workloads,
        train_kernels,
    };
    let n = plan.configs.len();
    let mut g = Gathered {
        series: Workload::ALL
            .iter()
            .map(|_| (0..n).map(|_| Series::default()).collect())
            .collect(),
        reports: (0..n).map(|_| SelfReport::default()).collect(),
        laps: (0..n).map(|_| Vec::new()).collect(),
    };
    gpu.laps = Some(Vec::new());
    warm_up(gpu, &plan)?;
    for round in 0..args.rounds {
        let t_round = Instant::now();
        for k in 0..n {
            run_config(gpu, &plan, (k + round) % n, round, &mut g)?;
        }
        eprintln!(
            "overhead: round {}/{} done in {:.1} s",
            round + 1,
            args.rounds,
            t_round.elapsed().as_secs_f64()
        );
    }
    print_all(gpu, &plan, &g, wall)
}

/// A round not counted, of every configuration: module loading, CUPTI's first start, NVML's
/// first init.
fn warm_up(gpu: &mut Gpu, plan: &Plan) -> Result<()> {
    for (ci, &config) in plan.configs.iter().enumerate() {
        let ledger = plan.dir.join(format!("warmup-{ci}.jsonl"));
        let active = start(config, plan.lib, plan.args, &ledger)?;
        let p = match &active {
            Active::Profiler(p) => Some(p),
            _ => None,
        };
        run_launches::<false>(gpu, WARMUP_LAUNCHES, p, 1)?;
        run_train_steps::<false>(gpu, 2, p, 1)?;
        run_steps::<false>(gpu, 2, p, 1)?;
        stop(active, 0)?;
    }
    Ok(())
}

/// One configuration's run in one round: every workload, in an order that turns with the round.
fn run_config(gpu: &mut Gpu, plan: &Plan, ci: usize, round: usize, g: &mut Gathered) -> Result<()> {
    let (args, config) = (plan.args, plan.configs[ci]);
    let ledger = plan
        .dir
        .join(format!("{}-round{round}.jsonl", config.label()));
    let active = start(config, plan.lib, args, &ledger)?;
    let profiler = match &active {
        Active::Profiler(p) => Some(p),
        _ => None,
    };
    run_launches::<false>(gpu, WARMUP_LAUNCHES, profiler, 1)?;
    let mut launches = WARMUP_LAUNCHES;
    for j in 0..plan.workloads.len() {
        let wi = plan.workloads[(j + round) % plan.workloads.len()];
        let w = Workload::ALL[wi];
        let cpu0 = thread_cpu_ns();
        let first_iteration = profiler.map_or(0, Profiler::iteration);
        let d = run_workload(gpu, w, config, args, profiler)?;
        if let (Workload::Train, Some(ns)) = (w, &gpu.laps) {
            g.laps[ci].push(super::laps::Laps {
                first_iteration,
                ns: ns.clone(),
            });
        }
        let cpu_us = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e3;
        launches += launches_of(w, args, plan.train_kernels);
        let units = units_of(w, args) as f64;
        let s = &mut g.series[wi][ci];
        s.per_unit_us.push(d.as_secs_f64() * 1e6 / units);
        s.cpu_per_unit_us.push(cpu_us / units);
        s.total_s.push(d.as_secs_f64());
    }
    g.reports[ci].add(stop(active, launches)?);
    Ok(())
}

/// Every table the run asked for, then the line that says how it ran.
fn print_all(gpu: &Gpu, plan: &Plan, g: &Gathered, wall: Instant) -> Result<()> {
    let (args, configs) = (plan.args, &plan.configs);
    print_self_reports(configs, &g.reports);
    print_targets(configs, &g.series, &g.reports);
    super::laps::print_sampled_steady(configs, &g.laps, args.steady_from);
    print_table(configs, &g.series, &g.reports, args);
    if args.step_laps {
        super::laps::print_laps(configs, &g.laps);
        if let Some(path) = &args.laps_csv {
            super::laps::write_csv(path, configs, &g.laps)?;
        }
    }
    let nvml = if args.nvml {
        format!(
            "NVML on (energy counter every {} ms, 0: never)",
            args.energy_ms
        )
    } else {
        "NVML off".to_string()
    };
    println!(
        "{nvml} on {}; {} rounds; whole run {:.1} s",
        gpu.name,
        args.rounds,
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--configs`: the labels, in order; `none` is required (every figure is against it).
pub(super) fn parse_configs(list: &str) -> Result<Vec<Config>> {
    let mut out = Vec::new();
    for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let c = Config::ALL
            .into_iter()
            .find(|c| c.label() == label)
            .ok_or_else(|| {
                let known: Vec<_> = Config::ALL.iter().map(|c| c.label()).collect();
                format!(
                    "--configs: unknown configuration '{label}' (known: {})",
                    known.join(", ")
                )
            })?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    if !out.contains(&Config::None) {
        return Err("--configs must include 'none': every figure is measured against it".into());
    }
    Ok(out)
}

/// `--workloads`: indices into [`Workload::ALL`].
pub(super) fn parse_workloads(list: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for w in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let i = match w {
            "a" => 0,
            "b" => 1,
            "c" => 2,
            "d" => 3,
            _ => return Err(format!("--workloads: unknown workload '{w}' (a, b, c, d)").into()),
        };
        if !out.contains(&i) {
            out.push(i);
        }
    }
    if out.is_empty() {
        return Err("--workloads: name at least one of a, b, c, d".into());
    }
    Ok(out)
}

fn idx(configs: &[Config], c: Config) -> Option<usize> {
    configs.iter().position(|x| *x == c)
}

fn print_self_reports(configs: &[Config], reports: &[SelfReport]) {
    println!("\nself-reported overhead (ledger trailers, summed over rounds; ns per launch made while running)");
    println!(
        "{:<12} {:>10} {:>14} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8}",
        "config",
        "launches",
        "kernel recs",
        "cupti ovh",
        "buffer cb",
        "collector",
        "writer",
        "step()",
        "dropped",
        "late"
    );
    for (c, r) in configs.iter().zip(reports) {
        let per = |ns: u64| ns as f64 / r.launches.max(1) as f64;
        match &r.overhead {
            Some(o) => println!(
                "{:<12} {:>10} {:>14} {:>9.1} ns {:>9.1} ns {:>9.1} ns {:>7.1} ns {:>7.1} ns {:>9} {:>8}",
                c.label(),
                r.launches,
                r.kernel_records,
                per(o.cupti_overhead_ns),
                per(o.buffer_callback_ns),
                per(o.collector_cpu_ns),
                per(o.writer_cpu_ns),
                per(o.step_ns),
                r.dropped,
                r.late
            ),
            None if *c == Config::Raw => println!(
                "{:<12} {:>10} {:>14} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9} {:>8}",
                c.label(),
                r.launches,
                r.kernel_records,
                "-",
                "-",
                "-",
                "-",
                "-",
                r.dropped,
                "-"
            ),
            None => {}
        }
        for w in &r.warnings {
            println!("    {}: {w}", c.label());
        }
    }
    // What a sampled timeline's switches cost the stepping thread, apart from the rest of
    // step(), and what the collector switched ahead instead.
    for (c, r) in configs.iter().zip(reports) {
        if let (Config::TimelineSampled | Config::TimelineIdle, Some(o)) = (c, &r.overhead) {
            let per = |ns: u64| ns as f64 / r.iterations.max(1) as f64;
            println!(
                "{:<12} switching tracing on and off: step() {:.1} µs, the collector {:.1} µs, \
                 over {} iterations ({:.1} and {:.1} ns an iteration); {} records of untraced \
                 iterations dropped",
                c.label(),
                o.sampling_switch_ns as f64 / 1e3,
                o.sampling_switch_collector_ns as f64 / 1e3,
                r.iterations,
                per(o.sampling_switch_ns),
                per(o.sampling_switch_collector_ns),
                r.untraced
            );
        }
    }
}

/// Median µs per launch of (workload, config), if it ran.
fn median_of(series: &[Vec<Series>], configs: &[Config], w: Workload, c: Config) -> Option<f64> {
    let wi = Workload::ALL.iter().position(|x| *x == w)?;
    let ci = idx(configs, c)?;
    median(&series[wi][ci].per_unit_us)
}

/// `combine(a's µs per launch, b's)` in each round (workload `w`): both ran in the same round,
/// close in time, so a drift of the machine between rounds cancels. A workload has the same
/// launch count in every configuration, so a ratio of loop times is the ratio of these.
/// Median, smallest and largest over the rounds, and the median's 95 % interval.
fn paired(
    series: &[Vec<Series>],
    configs: &[Config],
    w: Workload,
    pair: (Config, Config),
    combine: fn(f64, f64) -> f64,
) -> Option<Paired> {
    paired_by(series, configs, w, pair, combine, |s| &s.per_unit_us)
}

/// A paired figure over rounds.
pub(super) struct Paired {
    median: f64,
    min: f64,
    max: f64,
    /// The median's distribution-free 95 % interval (`None` below 6 rounds).
    interval: Option<MedianInterval>,
}

impl Paired {
    /// The figure of paired per-round differences `d`.
    pub(super) fn of(d: &[f64]) -> Option<Paired> {
        let dist = Distribution::from_samples(d)?;
        Some(Paired {
            median: dist.median,
            min: dist.min,
            max: dist.max,
            interval: median_interval(d, 0.95),
        })
    }

    /// `+m (95 % interval a to b; rounds lo to hi)`, values multiplied by `scale`.
    pub(super) fn describe(&self, scale: f64, decimals: usize, unit: &str) -> String {
        let f = |x: f64| format!("{:+.decimals$}", x * scale);
        let interval = match &self.interval {
            Some(i) => format!("95 % interval {} to {}; ", f(i.low), f(i.high)),
            None => "too few rounds for an interval; ".to_string(),
        };
        format!(
            "{}{unit} ({interval}rounds {} to {})",
            f(self.median),
            f(self.min),
            f(self.max)
        )
    }

    /// Against an upper bound: met when the whole interval is at or below it, missed when the
    /// whole interval is above it, unresolved when the interval holds it (the rounds' spread
    /// does not decide). Without an interval, the median decides, and says so.
    pub(super) fn verdict(&self, bound: f64) -> &'static str {
        match &self.interval {
            Some(i) if i.high <= bound => "ok",
            Some(i) if i.low > bound => "MISSED",
            Some(_) => "unresolved (the interval holds the target)",
            None if self.median <= bound => "ok by the median alone",
            None => "MISSED by the median alone",
        }
    }
}

/// [`paired`] over another of the series' figures.
fn paired_by(
    series: &[Vec<Series>],
    configs: &[Config],
    w: Workload,
    (a, b): (Config, Config),
    combine: fn(f64, f64) -> f64,
    field: fn(&Series) -> &Vec<f64>,
) -> Option<Paired> {
    let wi = Workload::ALL.iter().position(|x| *x == w)?;
    let (sa, sb) = (
        field(&series[wi][idx(configs, a)?]),
        field(&series[wi][idx(configs, b)?]),
    );
    let d: Vec<f64> = sa.iter().zip(sb).map(|(x, y)| combine(*x, *y)).collect();
    Paired::of(&d)
}

/// For [`paired`]: the difference of two values, and the slowdown of one over another, %.
fn difference(x: f64, y: f64) -> f64 {
    x - y
}
fn slowdown_pct(x: f64, y: f64) -> f64 {
    100.0 * (x / y - 1.0)
}

/// What the idle causes' clock reads cost: the timeline with and without them, per launch in
/// (a) against raw CUPTI's allowance, and on the training step (c).
fn print_idle_cause_targets(configs: &[Config], series: &[Vec<Series>]) {
    let (tl, off, raw) = (Config::Timeline, Config::TimelineNoCauses, Config::Raw);
    let launch = Workload::Launch;
    if let Some(p) = paired(series, configs, launch, (tl, off), difference) {
        println!(
            "  timeline - tl-nocauses, (a), paired by round: {} (the idle causes' two clock \
             reads per launch)",
            p.describe(1.0, 3, " µs/launch")
        );
    }
    if let Some(p) = paired_by(series, configs, launch, (tl, off), difference, |s| {
        &s.cpu_per_unit_us
    }) {
        println!(
            "  timeline - tl-nocauses, (a), paired by round, launching thread's CPU time: {}",
            p.describe(1.0, 3, " µs/launch")
        );
    }
    if let Some(p) = paired(series, configs, launch, (off, raw), difference) {
        println!(
            "  tl-nocauses, (a), paired by round: tl-nocauses - raw-CUPTI {} (the timeline \
             level's allowance is +0.2 with the idle causes on)",
            p.describe(1.0, 3, " µs/launch")
        );
    }
    let train = Workload::Train;
    if let Some(p) = paired(series, configs, train, (tl, off), slowdown_pct) {
        println!(
            "  timeline vs tl-nocauses, (c) training step, paired by round: slowdown {}; \
             target ≤ +0.1 point: {}",
            p.describe(1.0, 3, " %"),
            p.verdict(0.1)
        );
    }
    if let Some(p) = paired(series, configs, train, (tl, raw), slowdown_pct) {
        println!(
            "  timeline vs raw-CUPTI, (c) training step, paired by round: slowdown {}",
            p.describe(1.0, 3, " %")
        );
    }
}

/// A configuration's median µs per unit of `w` less the baseline's (`none`).
fn added(series: &[Vec<Series>], configs: &[Config], w: Workload, c: Config) -> Option<f64> {
    Some(median_of(series, configs, w, c)? - median_of(series, configs, w, Config::None)?)
}

/// A configuration's median over the baseline's, less one (0.01: 1 % slower).
fn slow(series: &[Vec<Series>], configs: &[Config], w: Workload, c: Config) -> Option<f64> {
    Some(median_of(series, configs, w, c)? / median_of(series, configs, w, Config::None)? - 1.0)
}

fn ok(pass: bool) -> &'static str {
    if pass {
        "ok"
    } else {
        "MISSED"
    }
}

/// Each line is printed when the run has what it compares (see --configs, --workloads).
fn print_targets(configs: &[Config], series: &[Vec<Series>], reports: &[SelfReport]) {
    println!("\ntargets, from the medians below");
    print_launch_targets(configs, series);
    print_step_targets(configs, series);
    print_scope_targets(configs, series, reports);
    print_split(configs, series);
}

/// The timeline's cost per launch in (a) against raw CUPTI's, and what the idle causes add.
fn print_launch_targets(configs: &[Config], series: &[Vec<Series>]) {
    let added = |w, c| added(series, configs, w, c);
    let raw = Config::Raw;
    if let (Some(tl), Some(r)) = (
        added(Workload::Launch, Config::Timeline),
        added(Workload::Launch, raw),
    ) {
        println!(
            "  timeline, (a): added {tl:.3} µs/launch vs raw-CUPTI's {r:.3} + 0.2 µs: {}",
            ok(tl <= r + 0.2)
        );
    }
    if let Some(p) = paired(
        series,
        configs,
        Workload::Launch,
        (Config::Timeline, raw),
        difference,
    ) {
        println!(
            "  timeline, (a), paired by round: timeline - raw-CUPTI {}; target ≤ +0.2: {}",
            p.describe(1.0, 3, " µs/launch"),
            p.verdict(0.2)
        );
    }
    // The same pair on the launching thread's CPU time: what the launch path itself costs,
    // without the rounds' scheduling noise (a thread off the CPU adds wall time, not CPU time).
    if let Some(p) = paired_by(
        series,
        configs,
        Workload::Launch,
        (Config::Timeline, raw),
        difference,
        |s| &s.cpu_per_unit_us,
    ) {
        println!(
            "  timeline, (a), paired by round, launching thread's CPU time: timeline - raw-CUPTI {}",
            p.describe(1.0, 3, " µs/launch")
        );
    }
    print_idle_cause_targets(configs, series);
}

/// The training step's (c) and the kernel mix's (d) slowdown, whole-run and paired by round.
fn print_step_targets(configs: &[Config], series: &[Vec<Series>]) {
    let slow = |w, c| slow(series, configs, w, c);
    let raw = Config::Raw;
    if let Some(tl) = slow(Workload::Train, Config::Timeline) {
        println!(
            "  timeline, (c) training step: whole-run slowdown {:+.2} % (target ≤ 1 %): {}",
            100.0 * tl,
            ok(tl <= 0.01)
        );
    }
    if let Some(tl) = slow(Workload::Step, Config::Timeline) {
        println!(
            "  timeline, (d) kernel mix (a fallback for (c), not a target): slowdown \
             {:+.2} %",
            100.0 * tl
        );
    }
    for w in [Workload::Train, Workload::Step] {
        for c in [Config::Timeline, raw] {
            if let Some(p) = paired(series, configs, w, (c, Config::None), slowdown_pct) {
                let target = if c == Config::Timeline && w == Workload::Train {
                    format!("; target ≤ 1 %: {}", p.verdict(1.0))
                } else {
                    String::new()
                };
                println!(
                    "  {}, {}, paired by round: slowdown {}{target}",
                    c.label(),
                    w.label(),
                    p.describe(1.0, 2, " %")
                );
            }
        }
    }
    if let Some(p) = paired(
        series,
        configs,
        Workload::Train,
        (Config::TimelineSampled, Config::None),
        slowdown_pct,
    ) {
        println!(
            "  tl-sampled (1 in {}), (c) training step, paired by round, each run as timed (the \
             profiler's start included): slowdown {}",
            super::SAMPLE_EVERY,
            p.describe(1.0, 3, " %"),
        );
    }
}

/// Dropped records, and what scopes and their NVTX ranges cost in (a) and (b).
fn print_scope_targets(configs: &[Config], series: &[Vec<Series>], reports: &[SelfReport]) {
    let added = |w, c| added(series, configs, w, c);
    if let Some(i) = idx(configs, Config::Timeline) {
        let dropped = reports[i].dropped;
        println!(
            "  timeline: {dropped} dropped records (target 0): {}",
            ok(dropped == 0)
        );
    }
    if let Some(a) = added(Workload::Launch, Config::Scopes) {
        println!(
            "  scopes, (a): added {a:.3} µs per launch with no scope (target: nothing): {}",
            ok(a <= 0.05)
        );
    }
    if let Some(b) = added(Workload::ScopedLaunch, Config::Scopes) {
        println!(
            "  scopes, (b): added {:.0} ns per scope, host time only (target ≤ 100 ns): {}",
            b * 1e3,
            ok(b <= 0.1)
        );
    }
    if let Some(p) = paired(
        series,
        configs,
        Workload::ScopedLaunch,
        (Config::Scopes, Config::None),
        difference,
    ) {
        println!(
            "  scopes, (b), paired by round: {}; target ≤ 100 ns: {}",
            p.describe(1e3, 0, " ns per scope"),
            p.verdict(0.1)
        );
    }
    // NVTX emission with no NVTX tool attached (each level against itself without its scopes'
    // ranges), and what importing NVTX ranges adds, on (b)'s scope per launch, in wall and in the
    // launching thread's CPU time.
    for (on, off) in [
        (Config::Scopes, Config::ScopesNoNvtx),
        (Config::Timeline, Config::TimelineNoNvtx),
        (Config::TimelineNvtxIn, Config::Timeline),
    ] {
        let pair = (on, off);
        let w = Workload::ScopedLaunch;
        if let Some(p) = paired(series, configs, w, pair, difference) {
            println!(
                "  {} - {}, (b), paired by round: {}; target ≤ 20 ns: {}",
                on.label(),
                off.label(),
                p.describe(1e3, 0, " ns per scope"),
                p.verdict(0.02)
            );
        }
        if let Some(p) = paired_by(series, configs, w, pair, difference, |s| &s.cpu_per_unit_us) {
            println!(
                "  {} - {}, (b), paired by round, launching thread's CPU time: {}",
                on.label(),
                off.label(),
                p.describe(1e3, 0, " ns per scope")
            );
        }
    }
    if let Some(b) = added(Workload::ScopedLaunch, Config::Disabled) {
        println!(
            "  disabled, (b): added {:.0} ns per scope (target ≤ 5 ns; below this run's noise, see \
             benches/scope_overhead.rs)",
            b * 1e3
        );
    }
}

/// With `--decompose`: the steps' slowdown above the kernel-tracing floor (timeline minus
/// raw-cupti), and the parts of it the two ablations isolate, for (c) and (d).
fn print_split(configs: &[Config], series: &[Vec<Series>]) {
    for w in [Workload::Train, Workload::Step] {
        print_split_of(configs, series, w);
    }
}

fn print_split_of(configs: &[Config], series: &[Vec<Series>], w: Workload) {
    let slow = |c| {
        median_of(series, configs, w, c)
            .zip(median_of(series, configs, w, Config::None))
            .map(|(x, none)| slowdown_pct(x, none))
    };
    let (Some(tl), Some(floor), Some(noscope), Some(few)) = (
        slow(Config::Timeline),
        slow(Config::Raw),
        slow(Config::TimelineNoScopes),
        slow(Config::TimelineFewSteps),
    ) else {
        return;
    };
    // step() runs FEW_STEPS times less often in tl-fewsteps: the difference is
    // (1 - 1/FEW_STEPS) of its whole cost.
    let steps = (tl - few) * FEW_STEPS as f64 / (FEW_STEPS - 1) as f64;
    let scopes = tl - noscope;
    println!(
        "\nsplit of the slowdown of {}, percentage points",
        w.label()
    );
    println!(
        "  timeline {tl:+.2} % = raw-cupti (kernel tracing floor) {floor:+.2} + the rest {:+.2}",
        tl - floor
    );
    println!("  of the rest: scopes (timeline - tl-noscope) {scopes:+.2}, step() ((timeline - tl-fewsteps) x {FEW_STEPS}/{}) {steps:+.2}, the remainder (other activity kinds, the call capture, collector, NVML, flushes, ledger) {:+.2}", FEW_STEPS - 1, tl - floor - scopes - steps);
}

fn print_table(configs: &[Config], series: &[Vec<Series>], reports: &[SelfReport], args: &Args) {
    let none = idx(configs, Config::None).unwrap_or(0);
    let raw = idx(configs, Config::Raw);
    println!(
        "\nper-launch cost, median and p90 over {} rounds (µs per launch: loop time / launches; \
         (c): per step)",
        args.rounds
    );
    println!(
        "{:<20} {:<12} {:>8} {:>8} {:>8} {:>9} {:>10} {:>7} {:>9} {:>8}",
        "workload",
        "config",
        "p50 µs",
        "p90 µs",
        "cpu µs",
        "added µs",
        "added-raw",
        "÷raw",
        "slowdown",
        "dropped"
    );
    for (wi, w) in Workload::ALL.iter().enumerate() {
        if series[wi][none].per_unit_us.is_empty() {
            continue; // not run (--workloads)
        }
        let base = percentile(&series[wi][none].per_unit_us, 0.5);
        let base_total = percentile(&series[wi][none].total_s, 0.5);
        let raw_p50 = raw.map(|r| percentile(&series[wi][r].per_unit_us, 0.5));
        for (ci, c) in configs.iter().enumerate() {
            let s = &series[wi][ci];
            let p50 = percentile(&s.per_unit_us, 0.5);
            let p90 = percentile(&s.per_unit_us, 0.9);
            let added = p50 - base;
            let (vs_raw, ratio) = match raw_p50 {
                Some(r) => (
                    format!("{:+.3}", added - (r - base)),
                    format!("{:.3}", p50 / r),
                ),
                None => ("-".into(), "-".into()),
            };
            let slowdown = 100.0 * (percentile(&s.total_s, 0.5) / base_total - 1.0);
            let dropped = match c {
                Config::None | Config::Disabled | Config::Scopes => "-".to_string(),
                _ => reports[ci].dropped.to_string(),
            };
            println!(
                "{:<20} {:<12} {:>8.3} {:>8.3} {:>8.3} {:>+9.3} {:>10} {:>7} {:>+8.2}% {:>8}",
                w.label(),
                c.label(),
                p50,
                p90,
                percentile(&s.cpu_per_unit_us, 0.5),
                added,
                vs_raw,
                ratio,
                slowdown,
                dropped
            );
        }
    }
    println!(
        "(a), (b): {} launches per round; (c): {} training steps per round, figures in µs per \
         step; (d): {} steps of {} kernels per round. cpu = the launching thread's CPU time, p50 \
         (it includes spinning in a synchronize). added = p50 - none's p50; added-raw = added \
         - raw-cupti's added; ÷raw = p50 / raw-cupti's p50; slowdown = median loop time / none's - \
         1; dropped = records dropped over all rounds (the whole run's, not per workload).",
        args.launches, args.train_steps, args.steps, LAUNCHES_PER_STEP
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paired_of(rounds: &[f64]) -> Paired {
        Paired::of(rounds).unwrap()
    }

    #[test]
    fn a_verdict_is_ok_or_missed_only_when_the_interval_decides() {
        // 10 rounds: the 95 % interval is the 2nd to the 9th smallest.
        let below: Vec<f64> = (0..10).map(|i| 0.05 + 0.01 * f64::from(i)).collect();
        assert_eq!(paired_of(&below).verdict(0.2), "ok");
        let above: Vec<f64> = below.iter().map(|x| x + 0.3).collect();
        assert_eq!(paired_of(&above).verdict(0.2), "MISSED");
        // Median 0.18 (met by the median alone) but the interval reaches 0.5: undecided.
        let spread = [-0.9, -0.5, 0.0, 0.1, 0.17, 0.19, 0.3, 0.4, 0.5, 1.5];
        let p = paired_of(&spread);
        assert!(p.median <= 0.2);
        assert!(
            p.verdict(0.2).starts_with("unresolved"),
            "{}",
            p.verdict(0.2)
        );
        // Five rounds give no 95 % interval: the median decides and the verdict says so.
        assert_eq!(
            paired_of(&below[..5]).verdict(0.2),
            "ok by the median alone"
        );
        assert_eq!(
            paired_of(&above[..5]).verdict(0.2),
            "MISSED by the median alone"
        );
    }

    #[test]
    fn a_paired_figure_prints_its_interval_and_range() {
        let rounds: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(
            paired_of(&rounds).describe(1.0, 1, " µs"),
            "+5.5 µs (95 % interval +2.0 to +9.0; rounds +1.0 to +10.0)"
        );
        assert_eq!(
            paired_of(&rounds[..3]).describe(1e3, 0, " ns"),
            "+2000 ns (too few rounds for an interval; rounds +1000 to +3000)"
        );
    }
}
