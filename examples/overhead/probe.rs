//! `--probe-correlation`: can the launch callback stand in for CUPTI's API records? Run 48 found
//! the API records to be most of what the timeline level's CUPTI configuration costs per launch.
//! A callback-only design needs two things CUPTI does not document for a session without API
//! records: that every kernel record carries the correlation id the callback saw at the call's
//! entry (for runtime launches such as cuBLAS's, the runtime call's or the nested driver call's),
//! and whether external-correlation records still come. This probes both, with API records on
//! (the baseline) and off, on empty launches and on the training step, and counts the runtime
//! calls whose id a driver entry saw too (a nested driver call sharing its id).

use super::*;

/// The external id pushed around the probed work.
const PROBE_EXTERNAL_ID: u64 = 0x5EED;

pub(super) fn probe_correlation(gpu: &mut Gpu, lib: &'static LoadedCupti) -> Result<()> {
    let session = RawSession::start(lib, RawMode::All)?;
    run_launches::<false>(gpu, WARMUP_LAUNCHES, None, 1)?;
    run_train_steps::<false>(gpu, 1, None, 1)?;
    println!("\n--probe-correlation: kernel records against the launch callback's correlation ids");
    for api_records in [true, false] {
        session.set_part(Part::ApiRecords, api_records)?;
        let seen = session.probe(|| {
            gpu_ledger::cupti::push_external_id(lib, PROBE_EXTERNAL_ID)?;
            let work = run_launches::<false>(gpu, 1000, None, 1)
                .and_then(|_| run_train_steps::<false>(gpu, 2, None, 1));
            gpu_ledger::cupti::pop_external_id(lib)?;
            work.map(drop)
        })?;
        let c = classify(&seen.calls, &seen.kernels);
        let external = seen
            .external
            .iter()
            .filter(|e| e.1 == PROBE_EXTERNAL_ID)
            .count();
        println!(
            "  API records {}: {} kernel records; {} carry a runtime call's id, {} a driver \
             call's, {} neither; callback entries {} runtime, {} driver, {} ids seen by both; \
             external-correlation records with the pushed id: {external} (of {} in all)",
            if api_records { "on " } else { "off" },
            seen.kernels.len(),
            c.at_runtime,
            c.at_driver,
            c.neither,
            c.runtime_calls,
            c.driver_calls,
            c.shared_ids,
            seen.external.len()
        );
    }
    session.set_part(Part::ApiRecords, true)?;
    session.stop()?;
    println!(
        "(1000 empty launches through the driver API and 2 training steps, whose cuBLAS GEMMs \
         launch through the runtime, all inside one pushed external id)"
    );
    Ok(())
}

/// Kernel records sorted by whose correlation id they carry.
#[derive(Debug, PartialEq, Eq)]
struct Classified {
    at_runtime: usize,
    at_driver: usize,
    neither: usize,
    runtime_calls: usize,
    driver_calls: usize,
    /// Runtime calls whose id a driver entry saw too: a driver call made inside a runtime call
    /// that carries the runtime call's id (what run 56's cuBLAS failure suggested).
    shared_ids: usize,
}

/// `calls`: (correlation id, runtime domain) of the callback's entries; `kernels`: the kernel
/// records' correlation ids. A kernel whose id a runtime entry saw counts as the runtime call's,
/// even when a driver entry saw it too.
fn classify(calls: &[(u32, bool)], kernels: &[u32]) -> Classified {
    let runtime: std::collections::HashSet<u32> =
        calls.iter().filter(|c| c.1).map(|c| c.0).collect();
    let driver: std::collections::HashSet<u32> =
        calls.iter().filter(|c| !c.1).map(|c| c.0).collect();
    let mut out = Classified {
        at_runtime: 0,
        at_driver: 0,
        neither: 0,
        runtime_calls: runtime.len(),
        driver_calls: driver.len(),
        shared_ids: runtime.intersection(&driver).count(),
    };
    for corr in kernels {
        if runtime.contains(corr) {
            out.at_runtime += 1;
        } else if driver.contains(corr) {
            out.at_driver += 1;
        } else {
            out.neither += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_sorted_by_the_entry_that_saw_their_id() {
        // A runtime launch (id 1) with its nested driver call (id 2), a driver launch (id 3).
        let calls = [(1, true), (2, false), (3, false)];
        let c = classify(&calls, &[1, 3, 3, 9]);
        assert_eq!(
            c,
            Classified {
                at_runtime: 1,
                at_driver: 2,
                neither: 1,
                runtime_calls: 1,
                driver_calls: 2,
                shared_ids: 0,
            }
        );
        // Kernels that carry the nested driver call's id count as the driver's.
        assert_eq!(classify(&calls, &[2]).at_driver, 1);
        // A nested driver call with the runtime call's id: shared, and its kernel the runtime's.
        let same = [(1, true), (1, false)];
        let c = classify(&same, &[1]);
        assert_eq!((c.shared_ids, c.at_runtime), (1, 1));
    }
}
