//! The aggregation math on hand-made samples.

use super::{integrate_power_j, summarize_samples, SummaryParams};
use crate::ledger::{EnergyMethod, NvmlIterationSummary, PowerKind};
use crate::nvml::samples::{EnergyRead, NvmlSample};
use crate::nvml::test_support::{close, sample, steady, MS, S};

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
