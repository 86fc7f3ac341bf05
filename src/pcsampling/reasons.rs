//! Stall reason names: CUPTI's (`smsp__pcsamp_warps_issue_stalled_long_scoreboard`, with a
//! `_not_issued` twin that counts the subset of samples whose warp issued nothing) mapped to the
//! key and the label Nsight Compute shows (`long_scoreboard`, "Stall Long Scoreboard").

/// CUPTI's prefix of a sampled stall reason's metric name.
const PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

/// The short key of a CUPTI stall reason name and whether it is the `_not_issued` subset.
/// Names without CUPTI's prefix are taken as keys already.
pub fn key(cupti_name: &str) -> (String, bool) {
    let bare = cupti_name.strip_prefix(PREFIX).unwrap_or(cupti_name);
    match bare.strip_suffix("_not_issued") {
        Some(k) => (k.to_string(), true),
        None => (bare.to_string(), false),
    }
}

pub use gpu_ledger_format::stalls::{is_memory, label};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cupti_names_map_to_ncu_keys_and_the_not_issued_subset_is_told_apart() {
        assert_eq!(
            key("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
            ("long_scoreboard".into(), false)
        );
        assert_eq!(
            key("smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"),
            ("long_scoreboard".into(), true)
        );
        assert_eq!(key("wait"), ("wait".into(), false));
        assert_eq!(label("long_scoreboard"), "Stall Long Scoreboard");
        assert_eq!(label("selected"), "Selected");
        assert_eq!(label("something_new"), "something_new");
        assert!(is_memory("long_scoreboard") && !is_memory("wait"));
    }
}
