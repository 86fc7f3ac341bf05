//! CPU tests: figures derived from counter values, and the memory/compute/latency
//! classification.

use std::collections::BTreeMap;

use gpu_ledger::counters::derived::{
    arithmetic_intensity, bandwidth, classify, derive, flops, pct_of_peak, sector_efficiency,
    sectors_per_request, useful_bytes_of_requests, DeriveOptions, Thresholds,
};
use gpu_ledger::counters::metrics::names;
use gpu_ledger::counters::Bound;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn bandwidth_is_bytes_over_time() {
    // 12 GiB-ish in 2.5 ms: 12e9 B / 2.5e6 ns = 4.8e12 B/s.
    assert!(close(bandwidth(12e9, 2.5e6).unwrap(), 4.8e12));
    assert_eq!(bandwidth(1.0, 0.0), None);
    assert_eq!(bandwidth(f64::NAN, 1.0), None);
    assert_eq!(bandwidth(-1.0, 1.0), None);
}

#[test]
fn percent_of_peak_and_arithmetic_intensity() {
    assert!(close(pct_of_peak(3.6e12, 4.8e12).unwrap(), 75.0));
    assert_eq!(pct_of_peak(1.0, 0.0), None);
    // Vector add: 1 FLOP per 12 bytes.
    assert!(close(arithmetic_intensity(1.0, 12.0).unwrap(), 1.0 / 12.0));
    assert_eq!(arithmetic_intensity(1.0, 0.0), None);
}

#[test]
fn sector_efficiency_is_useful_bytes_over_sector_bytes() {
    // A warp reading 32 consecutive floats: 128 useful bytes in 4 sectors.
    assert!(close(sector_efficiency(128.0, 4.0).unwrap(), 1.0));
    // Every lane in its own sector: 128 useful bytes in 32 sectors of 32 bytes.
    assert!(close(sector_efficiency(128.0, 32.0).unwrap(), 0.125));
    assert_eq!(sector_efficiency(1.0, 0.0), None);
    assert!(close(sectors_per_request(4096.0, 1024.0).unwrap(), 4.0));
    assert!(close(useful_bytes_of_requests(10.0, 4.0), 1280.0));
}

#[test]
fn flops_count_fma_twice() {
    assert!(close(flops(1.0, 2.0, 3.0), 9.0));
}

#[test]
fn four_way_classification_with_the_default_threshold() {
    let t = Thresholds::default();
    assert_eq!(t.high_pct, 60.0);
    assert_eq!(classify(89.0, 20.0, &t), Some(Bound::Memory));
    assert_eq!(classify(35.0, 83.0, &t), Some(Bound::Compute));
    assert_eq!(classify(81.0, 78.0, &t), Some(Bound::Both));
    assert_eq!(classify(20.0, 19.0, &t), Some(Bound::Latency));
    // "High" starts at the threshold.
    assert_eq!(classify(60.0, 59.9, &t), Some(Bound::Memory));
    assert_eq!(classify(f64::NAN, 10.0, &t), None);
    // The threshold is the caller's (there is no universal 80 % rule).
    let strict = Thresholds { high_pct: 80.0 };
    assert_eq!(classify(75.0, 10.0, &strict), Some(Bound::Latency));
    for b in [Bound::Memory, Bound::Compute, Bound::Both, Bound::Latency] {
        assert!(!b.next_step().is_empty());
    }
}

fn values(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn derive_vector_add_at_n_2_28() {
    let n = (1u64 << 28) as f64;
    let v = values(&[
        (names::DRAM_BYTES_READ, 8.0 * n),
        (names::DRAM_BYTES_WRITE, 4.0 * n),
        (names::GPU_TIME, 700_000.0),
        (names::FADD, n),
        (names::MEMORY_THROUGHPUT_PCT, 92.0),
        (names::SM_THROUGHPUT_PCT, 18.0),
    ]);
    let d = derive(&v, &DeriveOptions::default());
    assert!(close(d.dram_bytes.unwrap(), 12.0 * n));
    assert!(close(
        d.dram_bandwidth_bytes_per_s.unwrap(),
        12.0 * n / 700e-6
    ));
    assert!(close(d.fp32_flops.unwrap(), n));
    assert!(close(d.arithmetic_intensity_dram.unwrap(), 1.0 / 12.0));
    assert_eq!(d.bound, Some(Bound::Memory));
    assert_eq!(d.fp16_flops, None);
    assert_eq!(d.dram_pct_of_peak, None, "no peak given and no pct metric");
    let with_peak = derive(
        &v,
        &DeriveOptions {
            peak_dram_bytes_per_s: Some(4.8e12),
            ..DeriveOptions::default()
        },
    );
    let expect = 12.0 * n / 700e-6 / 4.8e12 * 100.0;
    assert!(close(with_peak.dram_pct_of_peak.unwrap(), expect));
}

#[test]
fn derive_sector_efficiency_for_coalesced_and_strided_loads() {
    let coalesced = derive(
        &values(&[
            (names::GLOBAL_LD_SECTORS, 4.0 * 32768.0),
            (names::GLOBAL_LD_REQUESTS, 32768.0),
        ]),
        &DeriveOptions::default(),
    );
    assert!(close(
        coalesced.global_load_sectors_per_request.unwrap(),
        4.0
    ));
    assert!(close(coalesced.global_load_sector_efficiency.unwrap(), 1.0));
    assert_eq!(coalesced.sector_efficiency_access_bytes, Some(4.0));
    let strided = derive(
        &values(&[
            (names::GLOBAL_LD_SECTORS, 32.0 * 32768.0),
            (names::GLOBAL_LD_REQUESTS, 32768.0),
        ]),
        &DeriveOptions::default(),
    );
    assert!(close(
        strided.global_load_sectors_per_request.unwrap(),
        32.0
    ));
    assert!(close(strided.global_load_sector_efficiency.unwrap(), 0.125));
    assert_eq!(strided.global_store_sectors_per_request, None);
}

#[test]
fn derive_uses_the_collected_dram_percentage_and_shared_conflicts() {
    let d = derive(
        &values(&[
            (names::DRAM_THROUGHPUT_PCT, 88.5),
            (names::SHARED_LD_BANK_CONFLICTS, 31.0 * 1024.0),
            (names::SHARED_LD_WAVEFRONTS, 32.0 * 1024.0),
        ]),
        &DeriveOptions::default(),
    );
    assert_eq!(d.dram_pct_of_peak, Some(88.5));
    assert!(close(
        d.shared_load_conflicts_per_wavefront.unwrap(),
        31.0 / 32.0
    ));
    assert_eq!(d.bound, None);
}

#[test]
fn derived_figures_serialize_without_absent_fields() {
    let d = derive(&values(&[(names::FADD, 10.0)]), &DeriveOptions::default());
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(json, r#"{"fp32_flops":10.0}"#);
    let back: gpu_ledger::counters::Derived = serde_json::from_str(&json).unwrap();
    assert_eq!(back, d);
}
