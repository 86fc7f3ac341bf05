//! The sampler thread on fake sources: what it collects, how it stops, what it does with errors.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{DeviceSamples, NvmlSampler};
use crate::ledger::{EnergyMethod, PowerKind};
use crate::nvml::fake::FakeNvmlSource;
use crate::nvml::samples::NvmlReading;
use crate::nvml::source::PcieCounters;
use crate::nvml::test_support::{close, MS};
use crate::nvml::{NvmlError, NvmlLibrary, NvmlSamplerConfig, SampledDevice};

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
    let (source, thread_name, reads) = watched_source();
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

    check_summaries(&sampler);
    check_stop(&mut sampler, &thread_name);
    check_kept_after_stop(&sampler, &reads);
}

/// Two fake devices at a steady 300 W whose readings record the thread that reads them and
/// count the reads.
fn watched_source() -> (
    FakeNvmlSource,
    Arc<parking_lot::Mutex<Option<String>>>,
    Arc<AtomicU64>,
) {
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
    (source, thread_name, reads)
}

/// After 500 ms of sampling the watched source: a short window is coarse, a long one has its
/// energy from the counter, and an unknown device has none.
fn check_summaries(sampler: &NvmlSampler) {
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
}

/// The sampler stops promptly, a second stop does nothing, and the reads were made on the
/// sampler's own thread.
fn check_stop(sampler: &mut NvmlSampler, thread_name: &parking_lot::Mutex<Option<String>>) {
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
}

/// No more reads after stop; samples stay available for export, in time order, and serialize
/// back to themselves.
fn check_kept_after_stop(sampler: &NvmlSampler, reads: &AtomicU64) {
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
    let back: DeviceSamples = serde_json::from_str(&json).expect("back");
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
