//! A profiled training-like loop whose ledger rows are also served as Prometheus metrics: the
//! application installs `metrics-exporter-prometheus` (its HTTP listener answers `/metrics`),
//! and the profiler, with `.metrics(MetricsOptions::default())`, publishes every row to it from
//! its collector thread. No other line of code is needed.
//!
//! ```sh
//! cargo run --features metrics --example metrics_prometheus -- \
//!     [--listen 127.0.0.1:9184] [--ledger PATH] [--level scopes|timeline] \
//!     [--iterations N] [--sample-every K] [--linger SECONDS] [--no-nvml]
//! ```
//!
//! - `--level scopes` (the default, or `GPU_LEDGER_LEVEL`) needs no GPU: the scopes sleep
//!   (`step/forward` 2 ms, `step/backward` 3 ms);
//! - `--level timeline` runs the bundled vector-add kernel in each scope on GPU 0, and with
//!   `--sample-every K` traces one iteration in K (`TimelineSampling::every(K)`);
//! - after the last row is published the example prints `finished: N rows` and keeps serving
//!   for `--linger` seconds (default 0), so that a scraper can read the final figures;
//!   `scripts/prometheus-check.sh` compares them with the ledger.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use gpu_ledger::metrics::{MetricsOptions, JOULES_BUCKETS, SECONDS_BUCKETS};
use gpu_ledger::{Level, Profiler, TimelineSampling, LEVEL_ENV};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

struct Args {
    listen: SocketAddr,
    ledger: String,
    level: Level,
    iterations: u64,
    sample_every: Option<u64>,
    linger: Duration,
    nvml: bool,
}

const USAGE: &str = "--listen ADDR:PORT, --ledger PATH, --level scopes|timeline, --iterations N, \
                     --sample-every K, --linger SECONDS, --no-nvml";

fn parse_level(text: &str) -> Result<Level, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "scopes" => Ok(Level::Scopes),
        "timeline" => Ok(Level::Timeline),
        other => Err(format!("level {other:?}: give scopes or timeline")),
    }
}

fn parse() -> Result<Args, String> {
    let env_level = std::env::var(LEVEL_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty());
    let mut a = Args {
        listen: "127.0.0.1:9184".parse().expect("a socket address"),
        ledger: "target/gpu-ledger-metrics.jsonl".into(),
        level: env_level
            .as_deref()
            .map_or(Ok(Level::Scopes), parse_level)?,
        iterations: 50,
        sample_every: None,
        linger: Duration::ZERO,
        nvml: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value ({USAGE})"))
        };
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{arg} {v:?}: {e}"));
        match arg.as_str() {
            "--listen" => a.listen = value()?.parse().map_err(|e| format!("--listen: {e}"))?,
            "--ledger" => a.ledger = value()?,
            "--level" => a.level = parse_level(&value()?)?,
            "--iterations" => a.iterations = number(value()?)?,
            "--sample-every" => a.sample_every = Some(number(value()?)?),
            "--linger" => a.linger = Duration::from_secs(number(value()?)?),
            "--no-nvml" => a.nvml = false,
            other => return Err(format!("unknown argument {other} ({USAGE})")),
        }
    }
    // GPU_LEDGER_LEVEL overrides the profiler's level at start: the loop's work must match it.
    if let Some(env) = env_level {
        if parse_level(&env)? != a.level {
            return Err(format!(
                "{LEVEL_ENV}={env} and --level disagree: unset {LEVEL_ENV} or give the same level"
            ));
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a).map_err(|e| e.to_string())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metrics_prometheus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    // The exporter is installed before the profiler starts, so that the first row finds it.
    // Buckets turn the per-iteration histograms into Prometheus histograms, which aggregate
    // across ranks (the default, summaries, do not).
    PrometheusBuilder::new()
        .with_http_listener(args.listen)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_joules".into()), JOULES_BUCKETS)?
        .install()
        .map_err(|e| format!("the exporter could not listen on {}: {e}", args.listen))?;
    println!("serving /metrics on http://{}", args.listen);
    let mut builder = Profiler::builder()
        .level(args.level)
        .ledger_path(&args.ledger)
        .nvml(args.nvml)
        .metrics(MetricsOptions::default());
    if let Some(k) = args.sample_every {
        builder = builder.sample_timeline(TimelineSampling::every(k));
    }
    let rows = match args.level {
        Level::Scopes => cpu_loop(builder, args.iterations)?,
        _ => gpu::run(builder, args.iterations)?,
    };
    println!("ledger: {}", args.ledger);
    println!("finished: {rows} rows");
    std::thread::sleep(args.linger);
    Ok(())
}

/// The loop at `Level::Scopes`: host work only. Returns the rows written.
fn cpu_loop(
    builder: gpu_ledger::ProfilerBuilder,
    iterations: u64,
) -> Result<u64, Box<dyn std::error::Error>> {
    let profiler = builder.start()?;
    for _ in 0..iterations {
        {
            let _step = Profiler::scope("step");
            {
                let _s = Profiler::scope("forward");
                std::thread::sleep(Duration::from_millis(2));
            }
            {
                let _s = Profiler::scope("backward");
                std::thread::sleep(Duration::from_millis(3));
            }
        }
        profiler.step();
    }
    // Joins the collector: every row has been published when it returns.
    Ok(profiler.finish()?.trailer.iterations)
}

/// The loop at `Level::Timeline`: the bundled vector add in each scope, on GPU 0.
mod gpu {
    use cudarc::driver::CudaContext;
    use gpu_ledger::kernels::VectorAdd;
    use gpu_ledger::{Level, Profiler};

    /// Elements per vector (16 MiB each).
    const N: u64 = 1 << 22;

    pub(super) fn run(
        builder: gpu_ledger::ProfilerBuilder,
        iterations: u64,
    ) -> Result<u64, Box<dyn std::error::Error>> {
        // One clear line without a driver or CUPTI, before cudarc (which would panic).
        Profiler::preflight(Level::Timeline)?;
        let ctx = CudaContext::new(0)?;
        let stream = ctx.default_stream();
        let kernel = VectorAdd::new(&ctx)?;
        let a = stream.alloc_zeros::<f32>(N as usize)?;
        let b = stream.alloc_zeros::<f32>(N as usize)?;
        let mut c = stream.alloc_zeros::<f32>(N as usize)?;
        stream.synchronize()?;
        let profiler = builder.start()?;
        for _ in 0..iterations {
            {
                let _step = Profiler::scope("step");
                {
                    let _s = Profiler::scope("forward");
                    for _ in 0..4 {
                        kernel.launch(&stream, &a, &b, &mut c, N)?;
                    }
                }
                {
                    let _s = Profiler::scope("backward");
                    for _ in 0..8 {
                        kernel.launch(&stream, &a, &b, &mut c, N)?;
                    }
                }
                stream.synchronize()?;
            }
            profiler.step();
        }
        Ok(profiler.finish()?.trailer.iterations)
    }
}
