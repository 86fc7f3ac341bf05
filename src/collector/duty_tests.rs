//! Duty-cycled PC sampling over a simulated run, through the profiler's own window state and
//! collector with a fake sampler (no GPU, no CUPTI): the windows' cost stays within the budget,
//! the rotation reaches every top kernel (one that runs only every tenth iteration too), the
//! trailer's profile adds up the windows' rows, and the rows of windows are perturbed.

use std::sync::Arc;

use parking_lot::Mutex;

use super::offline::OfflineCollector;
use super::tests::call;
use crate::cupti::record::{intern_name, KernelRecord, Record};
use crate::error::Result;
use crate::ledger::schema::{IterationRow, LaunchShape, Trailer};
use crate::pcsampling::window::{CollectorSide, EnableSampler, PcSamplingState, WindowSampler};
use crate::pcsampling::{DutyCycle, PcSamplingWindow, RawRange, Sources};

/// One kernel of the simulated step: launches an iteration, each launch's device time and
/// samples by reason, the scope it runs in, and every how many iterations it runs.
struct Kernel {
    name: &'static str,
    scope: &'static str,
    launches: u64,
    ns: u64,
    every: u64,
    samples: &'static [(&'static str, u64)],
}

const STEP: [Kernel; 4] = [
    Kernel {
        name: "gemm",
        scope: "train/forward",
        launches: 3,
        ns: 1_000_000,
        every: 1,
        samples: &[
            ("math_pipe_throttle", 1200),
            ("long_scoreboard", 500),
            ("selected", 300),
        ],
    },
    Kernel {
        name: "attention",
        scope: "train/attention",
        launches: 1,
        ns: 600_000,
        every: 1,
        samples: &[
            ("long_scoreboard", 900),
            ("mio_throttle", 400),
            ("selected", 200),
        ],
    },
    Kernel {
        name: "eval",
        scope: "eval",
        launches: 1,
        ns: 4_000_000,
        every: 10,
        samples: &[("wait", 5000), ("selected", 3000)],
    },
    Kernel {
        name: "small",
        scope: "train/forward",
        launches: 5,
        ns: 10_000,
        every: 1,
        samples: &[("barrier", 10)],
    },
];

/// Host wall time of an unsampled iteration, and of one that runs the eval kernel.
const BASE_NS: u64 = 5_000_000;
const EVAL_NS: u64 = 8_000_000;
/// What each kernel launch costs while sampling runs, in the simulation.
const SAMPLED_LAUNCH_NS: u64 = 1_500_000;

/// The fake sampler: what the current iteration launches, and whether a range is running.
#[derive(Default)]
struct Fake {
    launched: Vec<(String, Vec<(&'static str, u64)>)>,
    started: bool,
    enables: u64,
}

struct FakeSampler(Arc<Mutex<Fake>>);

impl WindowSampler for FakeSampler {
    fn start(&mut self) -> Result<()> {
        self.0.lock().started = true;
        Ok(())
    }
    fn stop_and_read(&mut self) -> Result<RawRange> {
        let mut f = self.0.lock();
        f.started = false;
        Ok(RawRange::fake(&f.launched))
    }
}

fn kernel_record(corr: u32, start: u64, k: &Kernel) -> Record {
    Record::Kernel(KernelRecord {
        name: intern_name(k.name),
        start,
        end: start + k.ns,
        device_id: 0,
        context_id: 1,
        stream_id: 7,
        correlation_id: corr,
        shape: LaunchShape {
            grid: [132, 1, 1],
            block: [256, 1, 1],
            ..LaunchShape::default()
        },
        shared_executed_bytes: 0,
        local_bytes_total: 0,
        graph_id: 0,
        graph_node_id: 0,
        device_launched: false,
    })
}

/// A simulated run of `iterations` under `duty`: its rows, its trailer, the host time the
/// windows added, the run's length, and how often sampling was enabled.
struct Simulated {
    rows: Vec<IterationRow>,
    trailer: Trailer,
    added_ns: u64,
    run_ns: u64,
    enables: u64,
    /// At the end of each window: the run's time so far and the time windows added to it.
    at_windows: Vec<(u64, u64)>,
}

fn simulate(duty: DutyCycle, iterations: u64) -> Simulated {
    let fake = Arc::new(Mutex::new(Fake::default()));
    let shared = fake.clone();
    let enable: EnableSampler = Box::new(move || {
        shared.lock().enables += 1;
        Ok(Box::new(FakeSampler(shared.clone())) as Box<dyn WindowSampler>)
    });
    let (mut state, planner) =
        PcSamplingState::new(enable, PcSamplingWindow::default(), 0, Some((duty, None)));
    let mut c = OfflineCollector::with_pc_sampling(
        0,
        CollectorSide {
            sources: Sources::new(),
            lines_per_kernel: 5,
            planner,
        },
    );
    let (mut t, mut corr, mut launches, mut added_ns) = (0u64, 0u32, 0u64, 0u64);
    let mut rows = Vec::new();
    let mut at_windows = Vec::new();
    for i in 0..iterations {
        state.begin_iteration(i, t);
        let sampled = fake.lock().started;
        let mut at = t + 1_000;
        let mut launched = Vec::new();
        let mut wall = BASE_NS;
        for k in STEP.iter().filter(|k| i % k.every == 0) {
            let path = c.intern_path(k.scope);
            for _ in 0..k.launches {
                corr += 1;
                launches += 1;
                c.accept_call(call(corr, i, path));
                c.accept(kernel_record(corr, at, k));
                at += k.ns + 1_000;
            }
            let reasons = k
                .samples
                .iter()
                .map(|(r, n)| (*r, n * k.launches))
                .collect();
            launched.push((k.name.to_string(), reasons));
            if sampled {
                added_ns += k.launches * SAMPLED_LAUNCH_NS;
                wall += k.launches * SAMPLED_LAUNCH_NS;
            }
            if k.name == "eval" {
                wall += EVAL_NS - BASE_NS;
            }
        }
        fake.lock().launched = launched;
        let stalls = state.end_iteration(i, false);
        assert_eq!(stalls.is_some(), sampled, "iteration {i}");
        t += wall;
        if sampled {
            at_windows.push((t, added_ns));
        }
        c.end_sampled_iteration(t, t + 1_000, launches, stalls);
        rows.extend(c.take_rows());
    }
    let (rest, trailer) = c.finish(t, t + 1_000);
    rows.extend(rest);
    let enables = fake.lock().enables;
    Simulated {
        rows,
        trailer,
        added_ns,
        run_ns: t,
        enables,
        at_windows,
    }
}

#[test]
fn the_windows_cost_stays_within_the_budget_and_reach_every_top_kernel() {
    let duty = DutyCycle {
        budget: 0.02,
        ..DutyCycle::default()
    };
    let s = simulate(duty, 3_000);
    let windows: Vec<&IterationRow> = s.rows.iter().filter(|r| r.stalls.is_some()).collect();
    // The rows of windows, and only they, are perturbed; each window enabled sampling once.
    for r in &s.rows {
        assert_eq!(r.perturbed, r.stalls.is_some(), "row {}", r.index);
        assert!(r.complete, "row {}: {:?}", r.index, r.warnings);
    }
    assert_eq!(s.enables, windows.len() as u64);
    let st = s
        .trailer
        .stalls
        .as_ref()
        .expect("the trailer has the run's profile");
    let d = st.duty_cycle.as_ref().expect("the duty cycle's cost");
    println!(
        "windows at {:?}; added {:.3} % of the run, measured {:.3} %",
        windows.iter().map(|r| r.index).collect::<Vec<_>>(),
        s.added_ns as f64 / s.run_ns as f64 * 100.0,
        d.cost_fraction() * 100.0
    );
    assert_eq!(d.windows_opened, windows.len() as u64);
    assert_eq!(d.windows_measured, d.windows_opened);
    // Budget: at the end of every window the windows so far have added at most 2 % of the run
    // so far; over the run too, and what the scheduler
    // measured (against the median unperturbed row) is not less than what they added.
    for (t, added) in &s.at_windows {
        assert!(
            *added as f64 <= 0.02 * *t as f64,
            "{added} ns added by {t} ns"
        );
    }
    let added = s.added_ns as f64 / s.run_ns as f64;
    assert!(
        added <= 0.02,
        "the windows added {:.3} % of the run",
        added * 100.0
    );
    assert!(d.cost_ns >= s.added_ns, "{} < {}", d.cost_ns, s.added_ns);
    assert!(d.cost_fraction() <= 0.021, "{:.4}", d.cost_fraction());
    // Rotation: the kernels holding 90 % of the device time, the every-tenth-iteration one
    // among them, each reached the target; the small kernel is not among them.
    let top: Vec<&str> = st
        .kernels
        .iter()
        .filter(|k| k.top)
        .map(|k| k.name.as_str())
        .collect();
    assert_eq!(top, ["gemm", "attention", "eval"]);
    for k in st.kernels.iter().filter(|k| k.top) {
        assert!(
            k.samples >= duty.target_samples,
            "{}: {}",
            k.name,
            k.samples
        );
    }
    assert!(d.covered);
    assert!(
        windows.iter().any(|r| r.index % 10 == 0),
        "a window ran the eval kernel"
    );
    // Once every top kernel had its samples, no further window opened.
    let last = windows.last().expect("windows").index;
    assert!(last < 2_500, "the last window was at iteration {last}");
    // No calibration offline: the idle split says so once; any other warning is a fault.
    assert_eq!(other_warnings(&s.trailer.warnings), Vec::<&String>::new());
}

#[test]
fn the_trailer_adds_up_the_windows_rows_per_kernel_and_per_scope() {
    let s = simulate(
        DutyCycle {
            budget: 0.05,
            ..DutyCycle::default()
        },
        1_500,
    );
    let st = s.trailer.stalls.as_ref().expect("profile");
    let windows: Vec<_> = s.rows.iter().filter_map(|r| r.stalls.as_ref()).collect();
    assert_eq!(st.windows, windows.len() as u64);
    assert_eq!(st.samples, windows.iter().map(|w| w.sampled()).sum::<u64>());
    for k in &st.kernels {
        let from_rows: u64 = windows
            .iter()
            .flat_map(|w| &w.kernels)
            .filter(|x| x.name == k.name)
            .map(|x| x.samples)
            .sum();
        let in_windows = windows
            .iter()
            .filter(|w| w.kernels.iter().any(|x| x.name == k.name))
            .count() as u64;
        assert_eq!(k.samples, from_rows, "{}", k.name);
        assert_eq!(k.windows, in_windows, "{}", k.name);
        assert_eq!(k.by_reason.values().sum::<u64>(), k.samples, "{}", k.name);
    }
    let gemm = st.kernels.iter().find(|k| k.name == "gemm").expect("gemm");
    assert_eq!(gemm.by_reason["math_pipe_throttle"], 3_600 * gemm.windows);
    // Device time over the unperturbed rows only: 3 ms of GEMM a row.
    let clean = s.rows.iter().filter(|r| !r.perturbed).count() as u64;
    assert_eq!(gemm.device_ns, 3_000_000 * clean);
    // The scope of the GEMMs and the small kernel holds both; eval's scope only eval's.
    let fwd = st
        .scopes
        .iter()
        .find(|x| x.scope == "train/forward")
        .expect("scope");
    assert_eq!(fwd.windows, st.windows);
    assert_eq!(fwd.samples, (6_000 + 50) * fwd.windows);
    let eval = st
        .scopes
        .iter()
        .find(|x| x.scope == "eval")
        .expect("eval scope");
    let eval_kernel = st.kernels.iter().find(|k| k.name == "eval").expect("eval");
    assert_eq!(eval.samples, eval_kernel.samples);
    assert_eq!(eval.by_reason["wait"], 5_000 * eval.windows);
}

#[test]
fn a_budget_too_small_for_one_window_opens_none_and_says_so() {
    let s = simulate(
        DutyCycle {
            budget: 0.0005,
            ..DutyCycle::default()
        },
        400,
    );
    assert!(s.rows.iter().all(|r| r.stalls.is_none() && !r.perturbed));
    let st = s
        .trailer
        .stalls
        .as_ref()
        .expect("a duty cycle is always reported");
    let d = st.duty_cycle.as_ref().expect("cost");
    assert_eq!((d.windows_opened, st.windows, d.cost_ns), (0, 0, 0));
    assert!(!d.covered);
    let w = s.trailer.warnings.join("\n");
    assert!(w.contains("raise DutyCycle::budget"), "{w}");
    assert!(w.contains("gemm, attention, eval"), "{w}");
}

#[test]
fn a_known_run_length_lets_the_budget_be_spent_early() {
    let duty = DutyCycle {
        budget: 0.01,
        expected_iterations: Some(2_000),
        ..DutyCycle::default()
    };
    let early = simulate(duty, 200);
    let without = simulate(
        DutyCycle {
            expected_iterations: None,
            ..duty
        },
        200,
    );
    let opened = |s: &Simulated| {
        s.trailer
            .stalls
            .as_ref()
            .unwrap()
            .duty_cycle
            .clone()
            .unwrap()
    };
    // 1 % of 2 000 iterations of 5 ms is 100 ms: several windows of about 15 ms fit at once;
    // 1 % of the first 200 iterations (1 s) fits none.
    assert!(opened(&early).windows_opened >= 2, "{:?}", opened(&early));
    assert_eq!(opened(&without).windows_opened, 0);
    assert!(opened(&early).cost_ns as f64 <= 0.01 * 2_000.0 * BASE_NS as f64);
}

/// The trailer's warnings other than the idle split's note that no dispatch floor was measured
/// (an offline collector has no calibration).
fn other_warnings(warnings: &[String]) -> Vec<&String> {
    warnings
        .iter()
        .filter(|w| !w.starts_with("idle causes: the dispatch floor"))
        .collect()
}
