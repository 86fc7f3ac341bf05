//! CPU tests: counter configuration rules and auto-range naming.

use gpu_ledger::counters::{
    name_auto_ranges, CacheState, CounterConfig, CounterWindow, Launch, RangeMode, RangeValues,
    ReplayMode,
};
use gpu_ledger::Error;

#[test]
fn sessions_can_move_to_another_thread() {
    fn send<T: Send>() {}
    send::<gpu_ledger::counters::RangeProfiler>();
    send::<gpu_ledger::counters::ChipCatalog>();
    send::<gpu_ledger::counters::LaunchRecorder>();
}

#[test]
fn default_config_is_valid_speed_of_light_user_ranges() {
    let c = CounterConfig::default();
    c.validate().unwrap();
    assert_eq!(c.metrics, ["speed_of_light"]);
    assert_eq!(c.range_mode, RangeMode::User);
    assert_eq!(c.replay_mode, ReplayMode::User);
}

#[test]
fn invalid_combinations_are_rejected_with_the_fix() {
    let bad = [
        CounterConfig {
            range_mode: RangeMode::User,
            replay_mode: ReplayMode::Kernel,
            ..CounterConfig::default()
        },
        CounterConfig {
            range_mode: RangeMode::Auto,
            nesting_levels: 2,
            ..CounterConfig::default()
        },
        CounterConfig {
            max_ranges: 0,
            ..CounterConfig::default()
        },
        CounterConfig {
            nesting_levels: 0,
            ..CounterConfig::default()
        },
        CounterConfig {
            record_kernel_names: true,
            ..CounterConfig::default()
        },
    ];
    for c in bad {
        let e = c.validate().unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        println!("{e}");
    }
    CounterConfig {
        range_mode: RangeMode::Auto,
        replay_mode: ReplayMode::Kernel,
        record_kernel_names: true,
        ..CounterConfig::default()
    }
    .validate()
    .unwrap();
}

#[test]
fn a_flushed_l2_needs_top_level_user_ranges_and_is_recorded_as_asked() {
    for (c, names) in [
        (
            CounterConfig {
                range_mode: RangeMode::Auto,
                replay_mode: ReplayMode::Kernel,
                cache: CacheState::Flushed,
                ..CounterConfig::default()
            },
            "RangeMode::User",
        ),
        (
            CounterConfig {
                range_mode: RangeMode::Auto,
                cache: CacheState::Flushed,
                ..CounterConfig::default()
            },
            "RangeMode::User",
        ),
        (
            CounterConfig {
                nesting_levels: 2,
                cache: CacheState::Flushed,
                ..CounterConfig::default()
            },
            "nesting_levels to 1",
        ),
    ] {
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("CacheState::Flushed") && e.contains(names),
            "{e}"
        );
    }
    let flushed = CounterConfig {
        cache: CacheState::Flushed,
        ..CounterConfig::default()
    };
    flushed.validate().unwrap();
    assert_eq!(CounterConfig::default().cache, CacheState::AsLeft);
    // The header of a run that could not collect still says which state was asked for, and a
    // ledger written before the field existed reads as the default.
    let header =
        gpu_ledger::counters::header_not_collected(&flushed, &Error::Config("no GPU".into()));
    let json = serde_json::to_value(&header).unwrap();
    assert_eq!(json["cache"], "flushed");
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("cache");
    let back: gpu_ledger::counters::CountersHeader = serde_json::from_value(old).unwrap();
    assert_eq!(back.cache, CacheState::AsLeft);
    let config: CounterConfig = serde_json::from_str(
        r#"{"metrics":["memory"],"range_mode":"user",
        "replay_mode":"user","max_ranges":8,"nesting_levels":1,"record_kernel_names":false}"#,
    )
    .unwrap();
    assert_eq!(config.cache, CacheState::AsLeft);
}

#[test]
fn runs_per_collection_by_mode() {
    let user = CounterConfig {
        nesting_levels: 2,
        ..CounterConfig::default()
    };
    assert_eq!(user.runs_per_collection(3), 6);
    let auto_user = CounterConfig {
        range_mode: RangeMode::Auto,
        ..CounterConfig::default()
    };
    assert_eq!(auto_user.runs_per_collection(3), 3);
    let auto_kernel = CounterConfig {
        range_mode: RangeMode::Auto,
        replay_mode: ReplayMode::Kernel,
        ..CounterConfig::default()
    };
    assert_eq!(auto_kernel.runs_per_collection(3), 1);
    assert_eq!(auto_user.runs_per_collection(0), 1);
}

fn range(name: &str, v: &[(&str, f64)]) -> RangeValues {
    RangeValues {
        index: 0,
        name: name.to_string(),
        path: name.split('/').map(str::to_string).collect(),
        kernel: None,
        launch_index: None,
        values: v.iter().map(|(k, x)| (k.to_string(), *x)).collect(),
    }
}

#[test]
fn auto_ranges_take_kernel_names_by_launch_index() {
    let mut ranges = vec![range("0", &[]), range("1", &[]), range("2", &[])];
    let launches = vec![
        Launch::Kernel("vector_add".into()),
        Launch::Kernel("scale".into()),
        Launch::Kernel("fma".into()),
    ];
    assert_eq!(name_auto_ranges(&mut ranges, &launches), 3);
    let kernels: Vec<_> = ranges.iter().map(|r| r.kernel.clone().unwrap()).collect();
    assert_eq!(kernels, ["vector_add", "scale", "fma"]);
    assert_eq!(ranges[2].launch_index, Some(2));
}

#[test]
fn auto_ranges_after_a_graph_launch_or_past_the_launches_stay_unnamed() {
    let mut ranges = vec![
        range("0", &[]),
        range("1", &[]),
        range("2", &[]),
        range("x", &[]),
    ];
    let launches = vec![
        Launch::Kernel("a".into()),
        Launch::Graph,
        Launch::Kernel("b".into()),
    ];
    assert_eq!(name_auto_ranges(&mut ranges, &launches), 1);
    assert_eq!(ranges[0].kernel.as_deref(), Some("a"));
    assert!(ranges[1..].iter().all(|r| r.kernel.is_none()));
    let mut short = vec![range("0", &[]), range("1", &[])];
    assert_eq!(
        name_auto_ranges(&mut short, &[Launch::Kernel("a".into())]),
        1
    );
    assert_eq!(short[1].kernel, None);
}

#[test]
fn fewer_auto_ranges_than_kernel_launches_name_none_of_them() {
    // CUPTI lost a range: the i-th range is no longer known to be the i-th kernel.
    let mut ranges = vec![range("0", &[]), range("1", &[])];
    let launches = vec![
        Launch::Kernel("a".into()),
        Launch::Kernel("b".into()),
        Launch::Kernel("c".into()),
    ];
    assert_eq!(name_auto_ranges(&mut ranges, &launches), 0);
    assert!(ranges
        .iter()
        .all(|r| r.kernel.is_none() && r.launch_index.is_none()));
    // After a graph launch the count is unknown: the ranges before it are still named.
    let mut ranges = vec![range("0", &[])];
    let launches = vec![Launch::Kernel("a".into()), Launch::Graph];
    assert_eq!(name_auto_ranges(&mut ranges, &launches), 1);
}

#[test]
fn sass_metrics_with_user_replay_are_refused_inside_a_profiler_with_the_fix() {
    let mut c = CounterConfig {
        metrics: vec!["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum".into()],
        range_mode: RangeMode::User,
        replay_mode: ReplayMode::User,
        ..CounterConfig::default()
    };
    let err = c.validate_with_timeline().unwrap_err().to_string();
    assert!(
        err.contains("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"),
        "{err}"
    );
    assert!(err.contains("ReplayMode::Kernel"), "{err}");
    // A preset that holds SASS metrics is refused too, naming them.
    c.metrics = vec!["compute".into()];
    let err = c.validate_with_timeline().unwrap_err().to_string();
    assert!(err.contains("smsp__sass_"), "{err}");
    // Kernel replay with auto ranges is accepted; hardware counters with user replay too.
    c.range_mode = RangeMode::Auto;
    c.replay_mode = ReplayMode::Kernel;
    c.validate_with_timeline().unwrap();
    let hw = CounterConfig {
        metrics: vec!["speed_of_light".into()],
        ..CounterConfig::default()
    };
    hw.validate_with_timeline().unwrap();
    // Kernel names come from the timeline inside a profiler.
    let names = CounterConfig {
        range_mode: RangeMode::Auto,
        replay_mode: ReplayMode::Kernel,
        record_kernel_names: true,
        ..CounterConfig::default()
    };
    let err = names.validate_with_timeline().unwrap_err().to_string();
    assert!(err.contains("record_kernel_names"), "{err}");
}

#[test]
fn the_counter_window_reads_as_iterations_in_the_header() {
    let w = CounterWindow {
        skip: 10,
        collections: 2,
    };
    assert_eq!(
        w.describe(3),
        "10..16 (2 collection(s) of 3 iteration(s), from iteration 10)"
    );
    assert_eq!(CounterWindow::default().skip, 5);
}
