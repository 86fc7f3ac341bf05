//! CPU tests: presets and metric-list validation against an offline catalog (the preset names).

use gpu_ledger::counters::metrics::{
    edit_distance, names, nearest, nearest_metric, resolve, split_metric, MetricCatalog, NameList,
    COMPUTE, MEMORY, OCCUPANCY, SPEED_OF_LIGHT,
};
use gpu_ledger::counters::{preset, unavailable_of, Unavailable, PRESETS};
use gpu_ledger::Error;

fn list(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn speed_of_light_preset_has_the_issue_metrics_spelled_as_ncu_does() {
    let sol: Vec<&str> = SPEED_OF_LIGHT.metrics.iter().map(|m| m.name).collect();
    for m in [
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__time_duration.sum",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
    ] {
        assert!(sol.contains(&m), "speed_of_light lacks {m}");
    }
}

#[test]
fn memory_and_compute_presets_hold_the_sector_conflict_spill_and_flop_counters() {
    let mem: Vec<&str> = MEMORY.metrics.iter().map(|m| m.name).collect();
    for m in [
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    ] {
        assert!(mem.contains(&m), "memory lacks {m}");
    }
    let comp: Vec<&str> = COMPUTE.metrics.iter().map(|m| m.name).collect();
    for m in [
        names::FADD,
        names::FMUL,
        names::FFMA,
        names::HADD,
        names::HMUL,
        names::HFMA,
    ] {
        assert!(comp.contains(&m), "compute lacks {m}");
    }
    assert!(comp.iter().any(|m| m.contains("pipe_tensor")));
    let occ: Vec<&str> = OCCUPANCY.metrics.iter().map(|m| m.name).collect();
    assert!(occ.contains(&"sm__warps_active.avg.pct_of_peak_sustained_active"));
    assert!(occ.contains(&"sm__inst_issued.avg.pct_of_peak_sustained_active"));
    assert!(occ.iter().any(|m| m.contains("stalled")));
}

#[test]
fn every_preset_name_is_well_formed_and_unique_within_its_preset() {
    for p in PRESETS {
        assert_eq!(preset(p.name), Some(p));
        let mut seen = std::collections::HashSet::new();
        for m in p.metrics {
            assert!(seen.insert(m.name), "{} twice in {}", m.name, p.name);
            let (base, rest) = split_metric(m.name);
            assert!(base.contains("__"), "{}: no unit__counter base", m.name);
            assert!(rest.is_some(), "{}: no rollup", m.name);
            assert!(
                m.name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'_'
                    || b == b'.'),
                "{}: not an ncu-style name",
                m.name
            );
            assert!(!m.what.is_empty());
        }
    }
}

#[test]
fn presets_expand_and_duplicates_collapse_in_request_order() {
    let cat = NameList::presets();
    let r = resolve(
        &list(&["dram__bytes_read.sum", "speed_of_light", "memory"]),
        &cat,
    )
    .unwrap();
    assert_eq!(r.metrics[0], "dram__bytes_read.sum");
    let reads = r
        .metrics
        .iter()
        .filter(|m| *m == "dram__bytes_read.sum")
        .count();
    assert_eq!(reads, 1, "{:?}", r.metrics);
    assert!(r.metrics.contains(&"gpu__time_duration.sum".to_string()));
    assert!(r
        .metrics
        .contains(&"l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum".to_string()));
    assert!(r.dropped.is_empty());
}

#[test]
fn unknown_names_are_rejected_before_the_run_with_the_nearest_valid_names() {
    let cat = NameList::presets();
    let err = resolve(
        &list(&[
            "dram__bytes_reed.sum",
            "gpu__time_duration.sum",
            "sm__throughput",
        ]),
        &cat,
    )
    .unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, Error::Config(_)));
    assert!(msg.contains("`dram__bytes_reed.sum`"), "{msg}");
    assert!(msg.contains("nearest: dram__bytes_read.sum"), "{msg}");
    assert!(msg.contains("`sm__throughput`"), "{msg}");
    assert!(
        msg.contains("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "{msg}"
    );
    assert!(
        !msg.contains("`gpu__time_duration.sum`"),
        "valid name reported: {msg}"
    );
    assert_eq!(unavailable_of(&err), Unavailable::UnknownMetric);
}

#[test]
fn an_empty_list_is_an_error() {
    let cat = NameList::presets();
    assert!(resolve(&[], &cat).is_err());
    assert!(resolve(&list(&["  "]), &cat).is_err());
}

/// A catalog like a chip that lacks some optional preset metrics (the tensor-pipe names of
/// other architectures) and one required metric.
struct Partial {
    all: NameList,
    missing: Vec<&'static str>,
}

impl MetricCatalog for Partial {
    fn contains(&self, name: &str) -> bool {
        self.all.contains(name) && !self.missing.contains(&name)
    }
    fn suggest(&self, name: &str, n: usize) -> Vec<String> {
        self.all.suggest(name, n)
    }
}

#[test]
fn optional_preset_metrics_the_chip_lacks_are_dropped_and_reported() {
    let chip = Partial {
        all: NameList::presets(),
        missing: vec![
            "sm__inst_executed_pipe_tensor.sum",
            "sm__inst_executed_pipe_fp64.sum",
        ],
    };
    let r = resolve(&list(&["compute"]), &chip).unwrap();
    assert!(!r
        .metrics
        .contains(&"sm__inst_executed_pipe_tensor.sum".to_string()));
    let dropped: Vec<&str> = r.dropped.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        dropped,
        [
            "sm__inst_executed_pipe_fp64.sum",
            "sm__inst_executed_pipe_tensor.sum"
        ]
    );
    assert!(r.dropped.iter().all(|d| d.preset == "compute"));
}

#[test]
fn a_required_preset_metric_the_chip_lacks_fails_the_preset() {
    let chip = Partial {
        all: NameList::presets(),
        missing: vec!["dram__bytes_write.sum"],
    };
    let err = resolve(&list(&["speed_of_light"]), &chip).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`dram__bytes_write.sum` (from preset speed_of_light)"),
        "{msg}"
    );
}

#[test]
fn edit_distance_and_nearest() {
    assert_eq!(
        edit_distance("dram__bytes_reed.sum", "dram__bytes_read.sum"),
        1
    );
    assert_eq!(edit_distance("abc", "abc"), 0);
    assert_eq!(edit_distance("", "ab"), 2);
    let near = nearest(
        "lts__t_sector_hitrate.pct",
        ["lts__t_sector_hit_rate.pct", "dram__bytes_read.sum", "zzz"].into_iter(),
        2,
    );
    assert_eq!(near[0], "lts__t_sector_hit_rate.pct");
    assert_eq!(near.len(), 2);
}

#[test]
fn nearest_metric_compares_base_names_first() {
    let cands = [
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
    ];
    assert_eq!(
        nearest_metric("sm__throughput", cands.into_iter(), 1),
        ["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    );
    assert_eq!(
        nearest_metric("dram__bytes_reed.sum", cands.into_iter(), 2),
        ["dram__bytes_read.sum", "dram__bytes_write.sum"]
    );
}

#[test]
fn split_metric_at_the_first_dot() {
    assert_eq!(
        split_metric("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("sm__throughput", Some("avg.pct_of_peak_sustained_elapsed"))
    );
    assert_eq!(split_metric("dram__bytes_read"), ("dram__bytes_read", None));
}
