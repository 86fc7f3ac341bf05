//! `--probe-correlation`: can the launch callback stand in for CUPTI's API records? Run 48 found
//! the API records to be most of what the timeline level's CUPTI configuration costs per launch.
//! A callback-only design needs two things CUPTI does not document for a session without API
//! records: that every kernel record carries the correlation id the callback saw at the call's
//! entry (for runtime launches such as cuBLAS's, the runtime call's or the nested driver call's),
//! and whether external-correlation records still come. This probes both, with API records on
//! (the baseline) and off, on empty launches and on the training step.

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
        let runtime: std::collections::HashSet<u32> =
            seen.calls.iter().filter(|c| c.1).map(|c| c.0).collect();
        let driver: std::collections::HashSet<u32> =
            seen.calls.iter().filter(|c| !c.1).map(|c| c.0).collect();
        let (mut at_runtime, mut at_driver, mut neither) = (0, 0, 0);
        for corr in &seen.kernels {
            if runtime.contains(corr) {
                at_runtime += 1;
            } else if driver.contains(corr) {
                at_driver += 1;
            } else {
                neither += 1;
            }
        }
        let external = seen
            .external
            .iter()
            .filter(|e| e.1 == PROBE_EXTERNAL_ID)
            .count();
        println!(
            "  API records {}: {} kernel records; {at_runtime} carry a runtime call's id, \
             {at_driver} a driver call's, {neither} neither; callback entries {} runtime, {} \
             driver; external-correlation records with the pushed id: {external} (of {} in all)",
            if api_records { "on " } else { "off" },
            seen.kernels.len(),
            runtime.len(),
            driver.len(),
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
