//! NVML aggregation math and the sampler thread, on fake sources (no GPU needed).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_ledger::ledger::{
    run_energy, EnergyEstimate, EnergyMethod, NvmlIterationSummary, PowerKind,
};
use gpu_ledger::nvml::{
    integrate_power_j, summarize_samples, throttle_reason_names, EnergyRead, FakeNvmlSource,
    NvmlError, NvmlLibrary, NvmlReading, NvmlSample, NvmlSampler, NvmlSamplerConfig, PcieCounters,
    SampledDevice, SummaryParams,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn sample(host_ns: u64, power_w: f64, sm: u32) -> NvmlSample {
    NvmlSample {
        host_ns,
        reading: NvmlReading {
            sm_clock_mhz: Some(sm),
            mem_clock_mhz: Some(2619),
            power_mw: Some((power_w * 1000.0).round() as u32),
            power_kind: Some(PowerKind::Instant),
            temperature_c: Some(50),
            throttle_reasons: Some(0),
            memory_used_bytes: Some(1 << 30),
            ..NvmlReading::default()
        },
    }
}

/// Samples every `step_ns` from `from_ns` to `to_ns` inclusive at constant power.
fn steady(from_ns: u64, to_ns: u64, step_ns: u64, power_w: f64) -> Vec<NvmlSample> {
    (0..)
        .map(|i| from_ns + i * step_ns)
        .take_while(|t| *t <= to_ns)
        .map(|t| sample(t, power_w, 1980))
        .collect()
}

#[test]
fn clock_power_temperature_min_mean_max_and_counts() {
    let mut samples = vec![
        sample(100 * MS, 300.0, 1980),
        sample(120 * MS, 500.0, 1755),
        sample(140 * MS, 400.0, 1410),
        sample(160 * MS, 600.0, 1980),
    ];
    samples[1].reading.temperature_c = Some(71);
    samples[2].reading.temperature_c = None; // one figure missing in one sample
    samples[2].reading.throttle_reasons = Some(0x4); // sw_power_cap
    samples[3].reading.throttle_reasons = Some(0x40 | 0x4); // + hw_thermal_slowdown
    samples[3].reading.memory_used_bytes = Some(3 << 30);
    let s = summarize_samples(
        3,
        &samples,
        &[],
        90 * MS,
        200 * MS,
        &SummaryParams::default(),
    );
    assert_eq!(s.device_id, 3);
    assert!(!s.coarse);
    assert_eq!(s.samples, 4);
    assert_eq!(s.window_ns, 110 * MS);
    let sm = s.sm_clock.expect("sm clock");
    assert_eq!((sm.min_mhz, sm.max_mhz, sm.samples), (1410, 1980, 4));
    assert!(close(
        sm.mean_mhz,
        (1980.0 + 1755.0 + 1410.0 + 1980.0) / 4.0,
        1e-9
    ));
    let mem = s.mem_clock.expect("mem clock");
    assert_eq!((mem.min_mhz, mem.max_mhz), (2619, 2619));
    let p = s.power.expect("power");
    assert!(close(p.mean_w, 450.0, 1e-9));
    assert!(close(p.max_w, 600.0, 1e-9));
    assert_eq!(p.samples, 4);
    assert_eq!(p.kind, PowerKind::Instant);
    assert_eq!(s.temperature_max_c, Some(71));
    assert_eq!(s.temperature_samples, 3);
    assert_eq!(
        s.throttle_reasons,
        vec!["hw_thermal_slowdown", "sw_power_cap"]
    );
    assert_eq!(s.throttle_samples, 4);
    assert_eq!(s.memory_used_max_bytes, Some(3 << 30));
    assert_eq!(s.memory_used_samples, 4);
    // 110 ms < 2 s: energy from integrated power.
    let e = s.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::IntegratedPower);
}

#[test]
fn trapezoid_with_uneven_spacing_matches_hand_computation() {
    // Power samples (ms, W) at uneven spacing; window [10 ms, 200 ms].
    let points = [
        (0, 100.0),
        (30, 200.0),
        (45, 150.0),
        (120, 300.0),
        (160, 100.0),
        (250, 200.0),
    ];
    let samples: Vec<NvmlSample> = points
        .iter()
        .map(|&(ms, w)| sample(ms * MS, w, 1980))
        .collect();
    // By hand: P(10) = 100 + 100 * 10/30 = 133.33 W, P(200) = 100 + 100 * 40/90 = 144.44 W.
    //   [10, 30]   (133.33 + 200) / 2 * 0.020 = 10/3   = 3.3333 J
    //   [30, 45]   (200 + 150)    / 2 * 0.015          = 2.625  J
    //   [45, 120]  (150 + 300)    / 2 * 0.075          = 16.875 J
    //   [120, 160] (300 + 100)    / 2 * 0.040          = 8.0    J
    //   [160, 200] (100 + 144.44) / 2 * 0.040 = 44/9   = 4.8889 J
    //   total = 27.5 + 10/3 + 44/9 = 35.7222 J
    let expected = 27.5 + 10.0 / 3.0 + 44.0 / 9.0;

    let pts: Vec<(u64, f64)> = points.iter().map(|&(ms, w)| (ms * MS, w)).collect();
    let direct = integrate_power_j(&pts, 10 * MS, 200 * MS).expect("points");
    assert!(close(direct, expected, 1e-9), "{direct} vs {expected}");

    let s = summarize_samples(
        0,
        &samples,
        &[],
        10 * MS,
        200 * MS,
        &SummaryParams::default(),
    );
    let e = s.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::IntegratedPower);
    assert!(
        close(e.joules, expected, 1e-9),
        "{} vs {expected}",
        e.joules
    );
    assert_eq!(e.integrated_joules, Some(e.joules));
    // The four samples inside plus one neighbour on each side.
    assert_eq!(e.power_samples, 6);
    // Mean power is the plain mean of the samples inside the window.
    assert!(close(s.power.expect("power").mean_w, 187.5, 1e-9));
    assert_eq!(s.samples, 4);
}

#[test]
fn trapezoid_holds_the_edge_value_outside_the_samples() {
    let pts = [(S, 200.0), (4 * S, 100.0)];
    // Held 200 W over [0.5, 1], linear to 100 W over [1, 4], held 100 W over [4, 7].
    let j = integrate_power_j(&pts, S / 2, 7 * S).expect("points");
    assert!(close(j, 100.0 + 450.0 + 300.0, 1e-9), "{j}");
    assert_eq!(integrate_power_j(&[], 0, S), None);
    assert_eq!(integrate_power_j(&pts, S, S), Some(0.0));
}

#[test]
fn far_neighbours_are_not_used_for_interpolation() {
    // The sample before the window is 600 ms away (sampler stalled): it must not pull the edge.
    let samples = vec![
        sample(0, 1000.0, 1980),
        sample(700 * MS, 100.0, 1980),
        sample(800 * MS, 100.0, 1980),
    ];
    let s = summarize_samples(
        0,
        &samples,
        &[],
        600 * MS,
        800 * MS,
        &SummaryParams::default(),
    );
    let e = s.energy.expect("energy");
    assert!(close(e.joules, 20.0, 1e-9), "{}", e.joules);
}

#[test]
fn iteration_shorter_than_the_update_period_gets_the_covering_sample() {
    let mut samples = steady(0, 200 * MS, 20 * MS, 200.0);
    samples[2].reading.power_mw = Some(350_000);
    samples[2].reading.sm_clock_mhz = Some(1500); // the sample at 40 ms
    samples[2].reading.throttle_reasons = Some(0x4);

    // 5 ms window with no sample inside: the nearest to its midpoint (40 ms) covers it.
    let s = summarize_samples(
        0,
        &samples,
        &[],
        41 * MS,
        46 * MS,
        &SummaryParams::default(),
    );
    assert!(s.coarse);
    assert_eq!(s.samples, 1);
    let sm = s.sm_clock.expect("sm clock");
    assert_eq!((sm.min_mhz, sm.max_mhz, sm.samples), (1500, 1500, 1));
    assert_eq!(s.power.as_ref().expect("power").samples, 1);
    assert_eq!(s.throttle_reasons, vec!["sw_power_cap"]);
    let e = s.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::CoveringSample);
    assert!(close(e.joules, 350.0 * 0.005, 1e-9), "{}", e.joules);
    assert_eq!(e.integrated_joules, None);
    assert_eq!(s.pcie_tx_bytes_per_s, None);
    assert!(!s.notes.is_empty());

    // 50 ms window holding two samples is still shorter than NVML's 100 ms: one sample only.
    let s = summarize_samples(
        0,
        &samples,
        &[],
        15 * MS,
        65 * MS,
        &SummaryParams::default(),
    );
    assert!(s.coarse);
    assert_eq!(s.samples, 1);
    assert_eq!(s.sm_clock.expect("sm clock").samples, 1);

    // No sample within 100 ms of the window: no figures at all, and a note saying so.
    let s = summarize_samples(
        0,
        &samples,
        &[],
        500 * MS,
        505 * MS,
        &SummaryParams::default(),
    );
    assert!(s.coarse);
    assert_eq!(s.samples, 0);
    assert!(s.sm_clock.is_none() && s.power.is_none() && s.energy.is_none());
    assert!(s.notes.iter().any(|n| n.contains("no sample within")));
}

/// Counter reads consistent with 250 W while power samples say 200 W, so the method shows.
fn counter_reads(times_ms: &[u64]) -> Vec<EnergyRead> {
    times_ms
        .iter()
        .map(|&ms| EnergyRead {
            host_ns: ms * MS,
            energy_mj: 1_000_000 + 250 * (ms - 500),
        })
        .collect()
}

#[test]
fn energy_counter_is_used_when_the_window_is_long_enough() {
    let samples = steady(0, 3 * S, 20 * MS, 200.0);
    let reads = counter_reads(&[500, 1500, 2500]);
    let s = summarize_samples(0, &samples, &reads, 0, 3 * S, &SummaryParams::default());
    let e = s.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::EnergyCounter);
    assert_eq!(e.counter_reads, 3);
    assert_eq!(e.counter_span_ns, Some(2 * S));
    // 500 J from the counter over [0.5 s, 2.5 s] + 2 x 0.5 s x 200 W of edges.
    assert!(close(e.joules, 700.0, 1e-6), "{}", e.joules);
    let integrated = e.integrated_joules.expect("integrated");
    assert!(close(integrated, 600.0, 1e-6), "{integrated}");
}

#[test]
fn integrated_power_is_used_when_the_counter_cannot_resolve_the_window() {
    let samples = steady(0, 3 * S, 20 * MS, 200.0);
    let params = SummaryParams::default();

    // Shorter than 2 s: counter not used, even with reads inside.
    let reads = counter_reads(&[600, 1000, 1400]);
    let s = summarize_samples(0, &samples, &reads, 500 * MS, 1500 * MS, &params);
    let e = s.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::IntegratedPower);
    assert!(close(e.joules, 200.0, 1e-6));

    // Long enough, but one read only.
    let s = summarize_samples(0, &samples, &counter_reads(&[1000]), 0, 3 * S, &params);
    assert_eq!(
        s.energy.expect("energy").method,
        EnergyMethod::IntegratedPower
    );
    assert!(s.notes.iter().any(|n| n.contains("1 energy-counter read")));

    // Reads spanning less than half the window.
    let s = summarize_samples(
        0,
        &samples,
        &counter_reads(&[1000, 1500]),
        0,
        3 * S,
        &params,
    );
    assert_eq!(
        s.energy.expect("energy").method,
        EnergyMethod::IntegratedPower
    );

    // Counter going backwards (driver reload).
    let mut reads = counter_reads(&[500, 1500, 2500]);
    reads[2].energy_mj = 5;
    let s = summarize_samples(0, &samples, &reads, 0, 3 * S, &params);
    assert_eq!(
        s.energy.expect("energy").method,
        EnergyMethod::IntegratedPower
    );
    assert!(s.notes.iter().any(|n| n.contains("backwards")));
}

#[test]
fn unsorted_input_and_reversed_windows() {
    let mut samples = steady(0, 400 * MS, 20 * MS, 100.0);
    samples.reverse();
    let s = summarize_samples(0, &samples, &[], 0, 400 * MS, &SummaryParams::default());
    assert!(close(s.energy.expect("energy").joules, 40.0, 1e-9));
    let s = summarize_samples(0, &samples, &[], 400 * MS, 0, &SummaryParams::default());
    assert_eq!(s.samples, 0);
    assert!(s.energy.is_none());
    assert!(!s.notes.is_empty());
}

#[test]
fn pcie_rates_from_byte_counters() {
    let mut samples = steady(0, 400 * MS, 20 * MS, 100.0);
    // Counters on every fifth sample only (every 100 ms), as the sampler reads them.
    for (i, s) in samples.iter_mut().enumerate().filter(|(i, _)| i % 5 == 0) {
        s.reading.pcie_tx_bytes = Some(i as u64 * 20_000_000); // 1 GB/s
        s.reading.pcie_rx_bytes = Some(i as u64 * 2_000_000); // 100 MB/s
    }
    let p = SummaryParams::default();
    let s = summarize_samples(0, &samples, &[], 0, 200 * MS, &p);
    assert!(close(s.pcie_tx_bytes_per_s.expect("tx"), 1e9, 1.0));
    assert!(close(s.pcie_rx_bytes_per_s.expect("rx"), 1e8, 1.0));
    // A 120 ms window holds one counter read: the nearest reads outside it complete the pair.
    let s = summarize_samples(0, &samples, &[], 110 * MS, 230 * MS, &p);
    assert!(close(s.pcie_tx_bytes_per_s.expect("tx"), 1e9, 1.0));
    // A 32-bit counter that wraps: 2 GB per 100 ms wraps between 200 and 300 ms. The step across
    // the wrap is dropped (never negative): 3 steps of 2 GB over 0.4 s.
    for (i, s) in samples.iter_mut().enumerate().filter(|(i, _)| i % 5 == 0) {
        s.reading.pcie_tx_bytes = Some((i as u64 / 5 * 2_000_000_000) % (1 << 32));
    }
    let s = summarize_samples(0, &samples, &[], 0, 400 * MS, &p);
    assert!(close(s.pcie_tx_bytes_per_s.expect("tx"), 1.5e10, 1.0));
}

#[test]
fn throttle_names_are_stable() {
    assert_eq!(
        throttle_reason_names(0x4 | 0x40 | (1 << 40)),
        vec!["sw_power_cap", "hw_thermal_slowdown", "unknown_bit_40"]
    );
    assert!(throttle_reason_names(0).is_empty());
    assert_eq!(throttle_reason_names(0x1), vec!["gpu_idle"]);
}

fn summary_with_energy(
    device_id: u32,
    joules: Option<f64>,
    method: EnergyMethod,
) -> NvmlIterationSummary {
    NvmlIterationSummary {
        device_id,
        window_ns: S,
        samples: 50,
        coarse: method == EnergyMethod::CoveringSample,
        energy: joules.map(|j| EnergyEstimate {
            joules: j,
            method,
            counter_reads: 0,
            counter_span_ns: None,
            power_samples: 50,
            integrated_joules: Some(j),
        }),
        ..NvmlIterationSummary::default()
    }
}

#[test]
fn whole_run_energy_per_iteration_and_per_unit_of_work() {
    let rows = [
        vec![
            summary_with_energy(0, Some(100.0), EnergyMethod::EnergyCounter),
            summary_with_energy(1, Some(110.0), EnergyMethod::EnergyCounter),
        ],
        vec![
            summary_with_energy(0, Some(90.0), EnergyMethod::IntegratedPower),
            summary_with_energy(1, Some(100.0), EnergyMethod::IntegratedPower),
        ],
        // Device 1 has no figure: the iteration is left out of the energy totals.
        vec![
            summary_with_energy(0, Some(95.0), EnergyMethod::IntegratedPower),
            summary_with_energy(1, None, EnergyMethod::IntegratedPower),
        ],
        vec![
            summary_with_energy(0, Some(1.0), EnergyMethod::CoveringSample),
            summary_with_energy(1, Some(2.0), EnergyMethod::CoveringSample),
        ],
    ];
    let run = run_energy(rows.iter().map(|r| r.as_slice()), Some(1000.0));
    assert_eq!(run.iterations, 4);
    assert_eq!(run.iterations_with_energy, 3);
    assert_eq!(run.coarse_iterations, 1);
    assert!(close(run.total_j, 210.0 + 190.0 + 3.0, 1e-9));
    let mean = 403.0 / 3.0;
    assert!(close(run.mean_j_per_iteration.expect("mean"), mean, 1e-9));
    assert_eq!(run.min_j_per_iteration, Some(3.0));
    assert_eq!(run.max_j_per_iteration, Some(210.0));
    assert!(close(
        run.j_per_unit_work.expect("J/work"),
        mean / 1000.0,
        1e-12
    ));
    assert!(close(run.work_per_j.expect("work/J"), 3000.0 / 403.0, 1e-9));
    assert_eq!(run.methods.energy_counter, 2);
    assert_eq!(run.methods.integrated_power, 3);
    assert_eq!(run.methods.covering_sample, 2);
    assert_eq!(run.per_device.len(), 2);
    assert!(close(run.per_device[0].total_j, 191.0, 1e-9));
    assert_eq!(run.per_device[1].iterations, 3);

    let no_work = run_energy(rows.iter().map(|r| r.as_slice()), Some(0.0));
    assert_eq!(no_work.j_per_unit_work, None);
    let empty = run_energy(std::iter::empty::<&[NvmlIterationSummary]>(), None);
    assert_eq!(empty.mean_j_per_iteration, None);
}

#[test]
fn summary_serde_round_trip_and_old_rows() {
    let mut samples = steady(0, 3 * S, 20 * MS, 200.0);
    samples[10].reading.throttle_reasons = Some(0x4);
    let s = summarize_samples(
        2,
        &samples,
        &counter_reads(&[500, 1500, 2500]),
        0,
        3 * S,
        &SummaryParams::default(),
    );
    let json = serde_json::to_string(&s).expect("serialize");
    assert!(json.contains("\"method\":\"energy_counter\""), "{json}");
    assert!(json.contains("\"kind\":\"instant\""), "{json}");
    let back: NvmlIterationSummary = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, s);

    let coarse = summarize_samples(
        0,
        &samples,
        &[],
        41 * MS,
        46 * MS,
        &SummaryParams::default(),
    );
    let back: NvmlIterationSummary =
        serde_json::from_str(&serde_json::to_string(&coarse).expect("serialize"))
            .expect("deserialize");
    assert_eq!(back, coarse);

    // A row written before these fields existed still reads.
    let old: NvmlIterationSummary = serde_json::from_str(r#"{"device_id":1}"#).expect("old row");
    assert_eq!(old.device_id, 1);
    assert!(old.energy.is_none());

    let sample_json = serde_json::to_string(&samples[10]).expect("sample");
    assert!(sample_json.contains("\"host_ns\""));
    let back: NvmlSample = serde_json::from_str(&sample_json).expect("sample back");
    assert_eq!(back, samples[10]);
}

fn fast_config() -> NvmlSamplerConfig {
    NvmlSamplerConfig {
        period: Duration::from_millis(5),
        energy_period: Some(Duration::from_millis(40)),
        energy_counter_min_window: Duration::from_millis(200),
        ..NvmlSamplerConfig::default()
    }
}

#[test]
fn sampler_thread_starts_collects_and_stops() {
    let thread_name = Arc::new(parking_lot::Mutex::new(None::<String>));
    let seen = Arc::clone(&thread_name);
    let reads = Arc::new(AtomicU64::new(0));
    let reads_in = Arc::clone(&reads);
    let source = FakeNvmlSource::new(
        2,
        move |index, _| {
            *seen.lock() = std::thread::current().name().map(str::to_owned);
            reads_in.fetch_add(1, Ordering::Relaxed);
            Ok(NvmlReading {
                sm_clock_mhz: Some(1980 - index * 100),
                mem_clock_mhz: Some(2619),
                power_mw: Some(300_000),
                power_kind: Some(PowerKind::Instant),
                temperature_c: Some(45),
                throttle_reasons: Some(0),
                memory_used_bytes: Some(1 << 30),
                ..NvmlReading::default()
            })
        },
        // Exactly 300 W since the fake was created.
        |_, t| Ok((300.0 * t.as_secs_f64() * 1000.0) as u64),
    );
    let origin = Instant::now();
    let mut sampler = NvmlSampler::start(source, fast_config(), origin).expect("start");
    assert!(sampler.is_running());
    let identity = vec![
        SampledDevice {
            device_id: 0,
            nvml_index: 0,
        },
        SampledDevice {
            device_id: 1,
            nvml_index: 1,
        },
    ];
    assert_eq!(sampler.devices(), identity);
    assert_eq!(sampler.config().devices.as_ref(), Some(&identity));
    std::thread::sleep(Duration::from_millis(500));

    // 100 ms..150 ms: short, coarse. 0..400 ms: long enough for the (lowered) counter threshold.
    let short = sampler.summarize(0, 100 * MS, 150 * MS);
    assert!(short.coarse);
    let all = sampler.summarize_all(20 * MS, 420 * MS);
    assert_eq!(all.len(), 2);
    for s in &all {
        assert!(!s.coarse, "{s:?}");
        assert!(
            s.samples >= 20,
            "only {} samples in 400 ms at 5 ms",
            s.samples
        );
        let e = s.energy.as_ref().expect("energy");
        assert_eq!(e.method, EnergyMethod::EnergyCounter, "{s:?}");
        assert!(e.counter_reads >= 3, "{e:?}");
        // 300 W over 0.4 s = 120 J, from the counter and from integrated power.
        assert!(close(e.joules, 120.0, 1.2), "{}", e.joules);
        assert!(close(e.integrated_joules.expect("integrated"), 120.0, 1e-6));
        assert!(close(s.power.as_ref().expect("power").mean_w, 300.0, 1e-9));
    }
    assert!(close(
        all[1].sm_clock.as_ref().expect("sm").mean_mhz,
        1880.0,
        1e-9
    ));
    let unknown = sampler.summarize(7, 0, 400 * MS);
    assert!(unknown.energy.is_none() && !unknown.notes.is_empty());

    let t = Instant::now();
    sampler.stop(Duration::from_secs(2)).expect("stop");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "stop took {:?}",
        t.elapsed()
    );
    assert!(!sampler.is_running());
    sampler
        .stop(Duration::from_secs(2))
        .expect("second stop is a no-op");
    assert_eq!(thread_name.lock().as_deref(), Some("gpu-ledger-nvml"));

    // No more reads after stop; samples stay available for export.
    let after = reads.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(reads.load(Ordering::Relaxed), after);
    let tracks = sampler.samples();
    assert_eq!(tracks.len(), 2);
    assert!(tracks[0].samples.len() >= 40);
    assert!(tracks[0]
        .samples
        .windows(2)
        .all(|w| w[0].host_ns <= w[1].host_ns));
    assert!(!tracks[0].energy_reads.is_empty());
    let json = serde_json::to_string(&tracks[0]).expect("serialize");
    let back: gpu_ledger::nvml::DeviceSamples = serde_json::from_str(&json).expect("back");
    assert_eq!(back, tracks[0]);
    let stats = sampler.stats();
    assert!(
        stats[0].samples >= 40 && stats[0].energy_reads >= 3,
        "{stats:?}"
    );
    assert_eq!(stats[0].sample_errors, 0);
}

#[test]
fn sampler_ring_is_bounded() {
    let config = NvmlSamplerConfig {
        ring_capacity: 16,
        energy_ring_capacity: 2,
        energy_period: Some(Duration::from_millis(5)),
        ..fast_config()
    };
    let mut sampler = NvmlSampler::start(
        FakeNvmlSource::constant(1, 100.0, 1000),
        config,
        Instant::now(),
    )
    .expect("start");
    std::thread::sleep(Duration::from_millis(200));
    sampler.stop(Duration::from_secs(2)).expect("stop");
    let tracks = sampler.samples();
    assert_eq!(tracks[0].samples.len(), 16);
    assert_eq!(tracks[0].energy_reads.len(), 2);
    let stats = &sampler.stats()[0];
    assert_eq!(stats.samples - stats.samples_overwritten, 16);
    assert!(stats.energy_reads_overwritten > 0);
}

#[test]
fn sampler_records_errors_and_keeps_going() {
    let source = FakeNvmlSource::new(
        2,
        |index, _| {
            if index == 1 {
                return Err(NvmlError::Device {
                    index,
                    what: "device handle",
                    detail: "GPU is lost".to_owned(),
                });
            }
            Ok(NvmlReading {
                power_mw: Some(50_000),
                power_kind: Some(PowerKind::Average),
                field_errors: vec!["temperature_c: not supported by this device".to_owned()],
                ..NvmlReading::default()
            })
        },
        |index, _| {
            Err(NvmlError::Device {
                index,
                what: "energy counter",
                detail: "not supported".to_owned(),
            })
        },
    );
    let mut sampler = NvmlSampler::start(source, fast_config(), Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(250));
    sampler.stop(Duration::from_secs(2)).expect("stop");
    let stats = sampler.stats();
    assert!(stats[0].samples > 10);
    assert_eq!(stats[0].errors.len(), 2, "{:?}", stats[0].errors); // field error + energy error
    assert_eq!(
        stats[0].energy_errors, 1,
        "an unsupported counter is retried only after 5 s"
    );
    assert_eq!(stats[1].samples, 0);
    assert!(stats[1].sample_errors > 10);
    assert!(stats[1].errors[0].contains("GPU is lost"));

    let s0 = sampler.summarize(0, 0, 200 * MS);
    let e = s0.energy.expect("energy");
    assert_eq!(e.method, EnergyMethod::IntegratedPower);
    assert_eq!(s0.power.expect("power").kind, PowerKind::Average);
    assert_eq!(s0.temperature_max_c, None);
    assert_eq!(s0.temperature_samples, 0);
    let s1 = sampler.summarize(1, 0, 200 * MS);
    assert_eq!(s1.samples, 0);
    assert!(s1.energy.is_none());
}

#[test]
fn stop_never_hangs_on_a_stuck_source() {
    let stuck = Arc::new(AtomicBool::new(false));
    let stuck_in = Arc::clone(&stuck);
    let source = FakeNvmlSource::new(
        1,
        move |_, _| {
            if stuck_in.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(400));
            }
            Ok(NvmlReading::default())
        },
        |_, _| Ok(0),
    );
    let mut sampler = NvmlSampler::start(source, fast_config(), Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(20));
    stuck.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let result = sampler.stop(Duration::from_millis(50));
    assert!(
        matches!(result, Err(NvmlError::StopTimedOut(_))),
        "{result:?}"
    );
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[test]
fn panicking_source_is_reported_not_propagated() {
    let source = FakeNvmlSource::new(1, |_, _| panic!("fake source panics"), |_, _| Ok(0));
    let mut sampler = NvmlSampler::start(source, fast_config(), Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(20));
    let result = sampler.stop(Duration::from_secs(1));
    assert!(matches!(result, Err(NvmlError::Panicked)), "{result:?}");
}

#[test]
fn drop_stops_the_thread() {
    let reads = Arc::new(AtomicU64::new(0));
    let reads_in = Arc::clone(&reads);
    let source = FakeNvmlSource::new(
        1,
        move |_, _| {
            reads_in.fetch_add(1, Ordering::Relaxed);
            Ok(NvmlReading::default())
        },
        |_, _| Ok(0),
    );
    let sampler = NvmlSampler::start(source, fast_config(), Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(20));
    drop(sampler);
    let after = reads.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(reads.load(Ordering::Relaxed), after);
}

#[test]
fn invalid_configurations_are_errors() {
    let bad = |config: NvmlSamplerConfig| {
        NvmlSampler::start(FakeNvmlSource::constant(1, 1.0, 1), config, Instant::now())
    };
    let zero_period = NvmlSamplerConfig {
        period: Duration::ZERO,
        ..NvmlSamplerConfig::default()
    };
    assert!(matches!(bad(zero_period), Err(NvmlError::Config(_))));
    let zero_ring = NvmlSamplerConfig {
        ring_capacity: 0,
        ..NvmlSamplerConfig::default()
    };
    assert!(matches!(bad(zero_ring), Err(NvmlError::Config(_))));
    let none = NvmlSampler::start(
        FakeNvmlSource::constant(0, 1.0, 1),
        NvmlSamplerConfig::default(),
        Instant::now(),
    );
    assert!(matches!(none, Err(NvmlError::Config(_))));
    // An empty device list (no CUDA device linked to NVML) never means "all devices".
    let unlinked = NvmlSamplerConfig {
        devices: Some(Vec::new()),
        ..NvmlSamplerConfig::default()
    };
    assert!(matches!(bad(unlinked), Err(NvmlError::Config(_))));
}

#[test]
fn default_rates_follow_the_measured_nvml_costs() {
    let c = NvmlSamplerConfig::default();
    // At least four samples per 100 ms NVML update.
    assert!(c.period * 4 <= c.update_period);
    // Energy counter (4 ms a read) costs at most 1 % of the sampler thread per device.
    let energy = c.energy_period.expect("energy period");
    assert!(Duration::from_millis(4).as_secs_f64() / energy.as_secs_f64() <= 0.01);
    assert!(c.energy_counter_min_window >= Duration::from_secs(2));
}

#[test]
fn without_nvml_init_is_a_clear_error_not_a_panic() {
    match NvmlLibrary::init() {
        // A GPU host: nothing to check here.
        Ok(_) => {}
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, NvmlError::Unavailable { .. }), "{msg}");
            assert!(msg.contains("NVML is not available"), "{msg}");
            assert!(msg.contains("everything else keeps working"), "{msg}");
        }
    }
    let missing =
        NvmlLibrary::init_from(Some(std::ffi::OsStr::new("/nonexistent/libnvidia-ml.so.1")));
    let msg = missing.expect_err("no library at that path").to_string();
    assert!(msg.contains("/nonexistent/libnvidia-ml.so.1"), "{msg}");
    assert!(msg.contains("could not be loaded"), "{msg}");
}

#[test]
fn sampler_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<NvmlSampler>();
    send::<NvmlLibrary>();
    send::<FakeNvmlSource>();
}

#[test]
fn pcie_counters_are_read_at_their_own_slower_rate() {
    let samples_read = Arc::new(AtomicU64::new(0));
    let pcie_read = Arc::new(AtomicU64::new(0));
    let (s_in, p_in) = (Arc::clone(&samples_read), Arc::clone(&pcie_read));
    let source = FakeNvmlSource::new(
        1,
        move |_, _| {
            s_in.fetch_add(1, Ordering::Relaxed);
            Ok(NvmlReading {
                power_mw: Some(100_000),
                power_kind: Some(PowerKind::Instant),
                ..NvmlReading::default()
            })
        },
        |_, _| Ok(0),
    )
    .with_pcie(move |_, t| {
        p_in.fetch_add(1, Ordering::Relaxed);
        // 2 GB/s out, 0.5 GB/s in.
        Ok(PcieCounters {
            tx_bytes: Some((t.as_secs_f64() * 2e9) as u64),
            rx_bytes: Some((t.as_secs_f64() * 5e8) as u64),
            field_errors: Vec::new(),
        })
    });
    let config = NvmlSamplerConfig {
        pcie_period: Some(Duration::from_millis(20)), // every 4th tick of 5 ms
        ..fast_config()
    };
    let mut sampler = NvmlSampler::start(source, config, Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(400));
    sampler.stop(Duration::from_secs(2)).expect("stop");
    let (n_samples, n_pcie) = (
        samples_read.load(Ordering::Relaxed),
        pcie_read.load(Ordering::Relaxed),
    );
    assert!(
        n_pcie * 3 <= n_samples && n_pcie * 5 >= n_samples,
        "{n_pcie} of {n_samples}"
    );
    let tracks = sampler.samples();
    let with_counters = tracks[0]
        .samples
        .iter()
        .filter(|s| s.reading.pcie_tx_bytes.is_some())
        .count() as u64;
    assert_eq!(with_counters, n_pcie);

    let s = sampler.summarize(0, 50 * MS, 350 * MS);
    let tx = s.pcie_tx_bytes_per_s.expect("tx rate");
    let rx = s.pcie_rx_bytes_per_s.expect("rx rate");
    assert!((tx / 2e9 - 1.0).abs() < 0.02, "{tx}");
    assert!((rx / 5e8 - 1.0).abs() < 0.02, "{rx}");

    let off = NvmlSamplerConfig {
        pcie_period: None,
        ..fast_config()
    };
    let calls = Arc::new(AtomicU64::new(0));
    let c_in = Arc::clone(&calls);
    let source = FakeNvmlSource::constant(1, 1.0, 1).with_pcie(move |_, _| {
        c_in.fetch_add(1, Ordering::Relaxed);
        Ok(PcieCounters::default())
    });
    let mut sampler = NvmlSampler::start(source, off, Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(50));
    sampler.stop(Duration::from_secs(2)).expect("stop");
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

#[test]
fn sampled_devices_map_cuda_ordinals_to_nvml_indices() {
    // CUDA ordinal 0 is NVML index 1 and the other way round; each device draws its own power.
    let source = FakeNvmlSource::new(
        2,
        |index, _| {
            Ok(NvmlReading {
                power_mw: Some(100_000 * (index + 1)),
                power_kind: Some(PowerKind::Instant),
                ..NvmlReading::default()
            })
        },
        |_, _| Ok(0),
    );
    let config = NvmlSamplerConfig {
        devices: Some(vec![
            SampledDevice {
                device_id: 0,
                nvml_index: 1,
            },
            SampledDevice {
                device_id: 1,
                nvml_index: 0,
            },
        ]),
        ..fast_config()
    };
    let mut sampler = NvmlSampler::start(source, config, Instant::now()).expect("start");
    std::thread::sleep(Duration::from_millis(150));
    sampler.stop(Duration::from_secs(2)).expect("stop");
    let all = sampler.summarize_all(0, 120 * MS);
    assert_eq!(all[0].device_id, 0);
    assert!(close(
        all[0].power.as_ref().expect("power").mean_w,
        200.0,
        1e-9
    ));
    assert_eq!(all[1].device_id, 1);
    assert!(close(
        all[1].power.as_ref().expect("power").mean_w,
        100.0,
        1e-9
    ));
}
