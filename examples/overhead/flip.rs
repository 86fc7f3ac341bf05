//! `--flip`: what each part of session 5's timeline configuration (API records on, `raw+all`)
//! adds per launch. Inside one raw-CUPTI session with that whole configuration, one part at a
//! time is switched off and on between short blocks of empty launches, in alternating order. The
//! host's speed drifts by ±1 µs per launch between the table's rounds (seconds apart); blocks tens
//! of milliseconds apart share most of that drift, so the pair's difference keeps the part's cost.
//!
//! Two more parts model the callback capture as session 5 proposed it: `callback capture` (the
//! callback reads CUPTI's clock at entry and exit and writes each call into a per-thread ring,
//! drained between blocks as a collector would), and `API records - callback capture` (API
//! records against that capture in their place). Run 49 measured them; session 6 then built a
//! cheaper capture (no clock read) and switched the API records off, so this mode measures that
//! experiment, not today's timeline level: `timeline` minus `raw-cupti` in the table does.

use super::*;

/// Empty launches after each switch, not timed (CUPTI's first records after a change).
const SETTLE_LAUNCHES: u64 = 200;

pub(super) fn flip(gpu: &Gpu, lib: &'static LoadedCupti, args: &Args) -> Result<()> {
    let pairs = args.rounds.max(6);
    let block = args.launches;
    let mut parts = vec![Part::Nothing, Part::ApiRecords, Part::Callback];
    parts.extend(Part::other_kinds().into_iter().map(Part::Kind));
    parts.push(Part::AllButKernels);
    parts.push(Part::Capture);
    parts.push(Part::ApiRecordsOverCapture);
    eprintln!(
        "overhead: --flip on {}: {} parts, {pairs} pairs of blocks of {block} empty launches each",
        gpu.name,
        parts.len()
    );
    let session = RawSession::start(lib, RawMode::All)?;
    run_launches::<false>(gpu, WARMUP_LAUNCHES, None, 1)?;
    // Per part: (on - off) µs per launch for each pair, and the on and off values.
    let mut results: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut captured = CapturedSummary::default();
    for &part in &parts {
        let (mut diffs, mut ons, mut offs) = (Vec::new(), Vec::new(), Vec::new());
        for pair in 0..pairs {
            let mut timed = [0.0; 2]; // [off, on]
            let order = if pair % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for on in order {
                session.set_part(part, on)?;
                run_launches::<false>(gpu, SETTLE_LAUNCHES, None, 1)?;
                let d = run_launches::<false>(gpu, block, None, 1)?;
                timed[usize::from(on)] = d.as_secs_f64() * 1e6 / block as f64;
                // The pool holds 8 buffers; this run makes far more records than that. The
                // capture rings are drained here too, as a collector would drain them.
                session.flush()?;
                drain_captured(&mut captured);
            }
            session.set_part(part, part.in_baseline())?;
            diffs.push(timed[1] - timed[0]);
            offs.push(timed[0]);
            ons.push(timed[1]);
        }
        results.push((diffs, ons, offs));
    }
    let report = session.stop()?;
    drain_captured(&mut captured);
    println!(
        "\n--flip: each part of the timeline level's CUPTI configuration switched off and on inside \
         one raw+all session, {pairs} pairs of blocks of {block} launches"
    );
    println!(
        "{:<34} {:>10} {:>10} {:>12} {:>26}",
        "part", "on µs", "off µs", "on - off", "95 % interval"
    );
    for (part, (diffs, ons, offs)) in parts.iter().zip(&results) {
        let interval = median_interval(diffs, 0.95);
        println!(
            "{:<34} {:>10.3} {:>10.3} {:>+12.3} {:>26}",
            part.label(),
            median(ons).unwrap_or(f64::NAN),
            median(offs).unwrap_or(f64::NAN),
            median(diffs).unwrap_or(f64::NAN),
            interval.map_or("too few pairs".to_string(), |i| format!(
                "{:+.3} to {:+.3}",
                i.low, i.high
            ))
        );
    }
    println!(
        "(medians over pairs; on - off is paired within each pair; `nothing` switches nothing, so \
         its interval is the method's own spread. {} kernel records, {} dropped, {} buffer \
         requests refused; the proposed callback captured {} calls ({} malformed, {} runtime, \
         {} in a scope, {} lost to a full ring).)",
        report.kernel_records,
        report.dropped,
        report.refused,
        captured.calls,
        captured.malformed,
        captured.runtime,
        captured.scoped,
        captured.lost
    );
    Ok(())
}
