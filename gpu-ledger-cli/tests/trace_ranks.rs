//! `gpu-ledger trace` of several ranks: one trace, each rank's processes apart, every rank's
//! iteration k starting at one common time that never moves a rank's row onto its previous one,
//! times inside an iteration each rank's own (as in its trace alone), the metadata saying so,
//! and on every track of every trace the command writes slices that nest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_ledger_format::read_ledger;
use gpu_ledger_tools::export::trace::{device_pid, HOST_PID, RANK_PID_STRIDE};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data")
        .join(name)
}

fn trace(ledgers: &[PathBuf], out: &Path) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-ledger"))
        .arg("trace")
        .args(ledgers)
        .arg("-o")
        .arg(out)
        .output()
        .expect("gpu-ledger runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(out).unwrap()).expect("a JSON trace")
}

/// `(pid, iteration) -> ts` of the complete events of category `cat`.
fn starts(doc: &Value, cat: &str) -> BTreeMap<(u64, u64), f64> {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == cat)
        .map(|e| {
            let it = e["args"]["index"]
                .as_u64()
                .or(e["args"]["iteration"].as_u64());
            (
                (e["pid"].as_u64().unwrap(), it.unwrap()),
                e["ts"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn ranks_are_aligned_on_iteration_starts_and_keep_their_own_times_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let (r0, r1) = (data("v1-rank0.jsonl"), data("v1-rank1.jsonl"));
    let both = trace(&[r1.clone(), r0.clone()], &tmp.path().join("both.json"));
    let alone = trace(std::slice::from_ref(&r1), &tmp.path().join("alone.json"));
    let (l0, l1) = (read_ledger(&r0).unwrap(), read_ledger(&r1).unwrap());
    let host = |pos: u32| u64::from(HOST_PID + pos * RANK_PID_STRIDE);
    let gpu0 = |pos: u32| u64::from(device_pid(0) + pos * RANK_PID_STRIDE);
    let it = starts(&both, "iteration");
    let dev = starts(&both, "device summary");
    let it_alone = starts(&alone, "iteration");
    let dev_alone = starts(&alone, "device summary");
    let mut shared = 0;
    // The first common start is the earliest rank's; from one iteration to the next the common
    // start moves by the longest step any rank took, so that no rank's slices overlap.
    let mut common = l0.iterations[0]
        .host_start_ns
        .min(l1.iterations[0].host_start_ns) as f64
        / 1e3;
    for (n, r) in l1.iterations.iter().enumerate() {
        let k = r.index;
        if !l0.iterations.iter().any(|x| x.index == k) {
            continue;
        }
        shared += 1;
        if n > 0 {
            let step = |l: &gpu_ledger_format::reader::Ledger| {
                (l.iterations[n].host_start_ns - l.iterations[n - 1].host_start_ns) as f64 / 1e3
            };
            common += step(&l0).max(step(&l1));
        }
        assert!(
            (it[&(host(0), k)] - common).abs() < 1e-6,
            "rank 0, iteration {k}"
        );
        assert!(
            (it[&(host(1), k)] - common).abs() < 1e-6,
            "rank 1, iteration {k}"
        );
        // Inside the iteration, rank 1's device slice keeps its offset from its iteration start.
        let offset = dev[&(gpu0(1), k)] - it[&(host(1), k)];
        let offset_alone = dev_alone[&(gpu0(0), k)] - it_alone[&(host(0), k)];
        assert!(
            (offset - offset_alone).abs() < 1e-6,
            "iteration {k}: {offset} vs {offset_alone}"
        );
    }
    assert!(shared > 5, "the goldens share iterations");
    assert!(
        l0.iterations
            .iter()
            .zip(&l1.iterations)
            .any(|(a, b)| a.host_start_ns != b.host_start_ns),
        "the ranks' own starts differ, so the alignment moved something"
    );
    let meta = &both["otherData"];
    assert_eq!(meta["ranks"], serde_json::json!([0, 1]));
    assert!(meta["alignment"]
        .as_str()
        .unwrap()
        .contains("aligned on iteration boundaries"));
    let names: Vec<&str> = both["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"host (rank 1)") && names.contains(&"GPU 0 (rank 1)"),
        "{names:?}"
    );
    assert!(
        alone["otherData"].get("alignment").is_none(),
        "one ledger is not aligned"
    );
}

#[test]
fn two_ledgers_of_one_rank_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let r0 = data("v1-rank0.jsonl");
    let out = tmp.path().join("t.json");
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-ledger"))
        .arg("trace")
        .args([&r0, &r0])
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("both claim rank 0"));
    assert!(!out.exists(), "no trace written");
}

/// A trace's slices by track (pid, tid): start, end and name of each.
type Tracks = BTreeMap<(u64, u64), Vec<(f64, f64, String)>>;

/// Every complete event has a non-negative duration and on each track the slices nest:
/// Perfetto does not draw a slice that partly overlaps another on its track.
fn assert_slices_nest(doc: &Value, what: &str) {
    let mut tracks = Tracks::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["ph"] != "X" {
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        let dur = e["dur"].as_f64().unwrap();
        assert!(dur >= 0.0, "{what}: negative duration: {e}");
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let name = e["name"].as_str().unwrap_or_default().to_string();
        tracks.entry(key).or_default().push((ts, ts + dur, name));
    }
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<(f64, f64, String)> = Vec::new();
        for s in slices {
            while open.last().is_some_and(|p| p.1 <= s.0 + 1e-6) {
                open.pop();
            }
            if let Some(p) = open.last() {
                assert!(
                    s.1 <= p.1 + 1e-6,
                    "{what}: slices overlap on track {track:?}: {p:?} and {s:?}"
                );
            }
            open.push(s);
        }
    }
}

#[test]
fn no_slice_overlaps_another_on_its_track_in_any_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let goldens: Vec<PathBuf> = std::fs::read_dir(data(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| !p.to_string_lossy().contains("corrupt"))
        .collect();
    assert!(goldens.len() >= 9, "{goldens:?}");
    let mut cases: Vec<Vec<PathBuf>> = goldens.iter().map(|g| vec![g.clone()]).collect();
    let (r0, r1) = (data("v1-rank0.jsonl"), data("v1-rank1.jsonl"));
    cases.push(vec![r0.clone(), r1.clone()]);
    cases.push(vec![r1, r0]);
    // Ledgers without a rank are numbered in the order given: every unranked pair, each with
    // its own clock and its own slow iterations.
    let unranked: Vec<&PathBuf> = goldens
        .iter()
        .filter(|g| !g.to_string_lossy().contains("rank"))
        .collect();
    for (i, a) in unranked.iter().enumerate() {
        for b in &unranked[i + 1..] {
            cases.push(vec![(*a).clone(), (*b).clone()]);
        }
    }
    cases.push(unranked.iter().map(|p| (*p).clone()).collect());
    for (n, ledgers) in cases.iter().enumerate() {
        let doc = trace(ledgers, &tmp.path().join(format!("{n}.json")));
        assert_slices_nest(&doc, &format!("{ledgers:?}"));
    }
}
