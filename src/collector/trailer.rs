//! The end of a run: the last rows, and the trailer with the run's counts, its costs and the
//! warnings that concern the whole run.

use std::sync::atomic::Ordering;

use super::window::Phase;
use super::Collector;
use crate::counters::IterationCounters;
use crate::ledger::schema::LedgerLine;
use crate::pcsampling::window::SampledIteration;

impl Collector {
    /// The end of the run: the open iteration ends at these times, every ended iteration is
    /// written without waiting any longer, the open one when something happened in it, and then
    /// the trailer with the run's counts, costs and warnings.
    pub(super) fn finish(
        &mut self,
        host_end_ns: u64,
        cupti_end: Option<u64>,
        open: Vec<u32>,
        counters: Option<IterationCounters>,
        stalls: Option<SampledIteration>,
        traced: bool,
    ) {
        self.take_everything_sent();
        // The open iteration ends now; what waited for its end is placed.
        if let Some(it) = self.iterations.back_mut() {
            it.phase = Phase::Finished {
                host_end_ns,
                cupti_end: cupti_end.unwrap_or(u64::MAX),
            };
            it.traced = traced;
        }
        self.place_deferred();
        // Ended iterations: written as usual, without waiting any longer.
        while self
            .iterations
            .front()
            .is_some_and(|it| it.ended_at().is_some())
        {
            self.finalize_front(false);
        }
        self.write_partial_row(open, counters, stalls);
        let (stalls, shortfall) = self.rows.stall_trailer(host_end_ns);
        self.trailer.stalls = stalls;
        self.trailer.warnings.extend(shortfall);
        self.warn_of_unplaced();
        self.note_dispatch_floors();
        self.count_cupti_buffers();
        self.warn_of_lost_captures();
        self.finish_graphs();
        self.stop_nvml();
        self.count_overhead();
        if self
            .lines
            .send(LedgerLine::Trailer(self.trailer.clone()))
            .is_err()
        {
            // The writer has ended: shutdown adds this to what it reports.
            self.trailer.lines_not_written += 1;
        }
        let _ = self.trailer_tx.send(self.trailer.clone());
    }

    /// Takes every step() message first, so that iteration boundaries are known; then every
    /// buffer (the session was stopped with a forced flush before Finish was sent), the calls,
    /// the scopes and the run's end warnings.
    fn take_everything_sent(&mut self) {
        self.take_iteration_ends();
        self.drain_calls();
        while let Ok(b) = self.buffers.try_recv() {
            self.decode(b);
        }
        self.drain_scopes();
        self.trailer
            .warnings
            .append(&mut self.running.take_end_warnings());
    }

    /// Writes the open iteration's row when something happened in it (scopes, GPU work, records
    /// waiting, or a counters or PC sampling pass), with the scopes still `open` at the end.
    fn write_partial_row(
        &mut self,
        open: Vec<u32>,
        counters: Option<IterationCounters>,
        stalls: Option<SampledIteration>,
    ) {
        if self.iterations.is_empty() {
            return;
        }
        let it = &self.iterations[0];
        // Scopes or GPU work make a partial row; a trailing synchronize or free alone does not.
        let gpu_work = it
            .placed
            .iter()
            .filter(|p| !p.activity.is_host_side())
            .count();
        let host_only = it.placed.len() - gpu_work;
        // A counters pass that ran in the partial iteration is reported in its row.
        let has_counters = counters.is_some() || stalls.is_some();
        let has_content =
            !it.scopes.is_empty() || gpu_work > 0 || !self.waiting.is_empty() || has_counters;
        if !has_content && host_only > 0 {
            self.trailer.warnings.push(format!(
                "{host_only} synchronization/allocation records after the last step() are in no row"
            ));
        }
        if !open.is_empty() {
            let warning = format!(
                "profiler finished with scopes still open: {}",
                self.paths_text(&open)
            );
            self.iterations[0].warnings.push(warning);
        }
        let it = &mut self.iterations[0];
        it.counters = counters;
        it.stalls = stalls;
        if has_content {
            it.warnings.push("work recorded after the last step(): this row is the partial iteration before finish()".into());
            self.finalize_front(true);
        }
    }

    /// The trailer's warnings of what no row holds: iteration ends not applied, records placed
    /// in no iteration, kernels attributed by following a thread, and records that came late.
    fn warn_of_unplaced(&mut self) {
        let waiting_ends = self.early_ends.len();
        if waiting_ends > 0 || self.stray_ends > 0 {
            self.trailer.warnings.push(format!(
                "{} iteration ends were not applied ({waiting_ends} waited for an earlier \
                 iteration's end that never came, {} repeated an iteration already ended): \
                 their rows are merged into the neighbouring rows",
                waiting_ends as u64 + self.stray_ends,
                self.stray_ends
            ));
        }
        let leftover: usize = self.waiting.values().map(Vec::len).sum();
        self.trailer.unplaced_records += leftover as u64;
        if leftover > 0 {
            self.trailer.warnings.push(format!(
                "{leftover} activity records could not be placed in any iteration (no captured call and no matching time)"
            ));
        }
        self.trailer.warnings.extend(self.rows.follow_note());
        if self.trailer.late_records > 0 {
            self.trailer.warnings.push(format!(
                "{} records arrived after their iteration's row was written (raise Config::settle)",
                self.trailer.late_records
            ));
        }
    }

    /// The dispatch floors the rows split idle time with, and a warning when one was not
    /// measured.
    fn note_dispatch_floors(&mut self) {
        self.trailer.dispatch_floors = self.rows.dispatch_floors();
        let unmeasured: Vec<String> = self
            .trailer
            .dispatch_floors
            .iter()
            .filter(|f| f.source == "default")
            .map(|f| f.device_id.to_string())
            .collect();
        if !unmeasured.is_empty() {
            self.trailer.warnings.push(format!(
                "idle causes: the dispatch floor of device(s) {} was not measured (no \
                 calibration, too few gaps of their own): launch_latency and dependency are split \
                 at the default {} ns; keep Config::calibrate_tracing on, or set \
                 IdleConfig::dispatch_floor",
                unmeasured.join(", "),
                self.trailer.dispatch_floors[0].floor_ns
            ));
        }
    }

    /// The CUPTI buffer callbacks' counts into the trailer, with warnings when the pool grew
    /// or records were dropped.
    fn count_cupti_buffers(&mut self) {
        if let Some(a) = &self.activity {
            let st = &a.stats;
            self.trailer.dropped_records = st.dropped_records.load(Ordering::Relaxed);
            self.trailer.overhead.buffer_callback_ns = st.callback_ns.load(Ordering::Relaxed);
            self.trailer.overhead.buffers_used = st.buffers_used.load(Ordering::Relaxed);
            self.trailer.overhead.buffer_requests_refused =
                st.requests_refused.load(Ordering::Relaxed);
            let growth = st.pool_growth.load(Ordering::Relaxed);
            if growth > 0 {
                self.trailer.warnings.push(format!(
                    "the CUPTI buffer pool grew by {growth} buffers during the run (allocation on a CUPTI thread); raise Config::buffers"
                ));
            }
        }
        if self.trailer.dropped_records > 0 {
            let msg = format!(
                "CUPTI dropped {} activity records (buffer pool exhausted); raise Config::max_buffers or buffer_bytes",
                self.trailer.dropped_records
            );
            eprintln!("gpu-ledger: warning: {msg}");
            self.trailer.warnings.push(msg);
        }
    }

    /// The trailer's warnings of what the application's threads did that could not be
    /// captured: calls of exiting threads, NVTX ranges past the depth, scope timing events.
    fn warn_of_lost_captures(&mut self) {
        let at_exit = self.running.scopes_lost_at_thread_exit();
        self.trailer.scopes_lost_at_thread_exit = at_exit;
        if at_exit > 0 {
            self.trailer.warnings.push(format!(
                "{at_exit} scopes were open or entered while their thread was exiting (a guard \
                 kept in another thread-local) and were not recorded: end scopes before the \
                 thread's locals are torn down"
            ));
        }
        let elsewhere = self.running.scopes_open_elsewhere();
        if elsewhere > 0 {
            self.trailer.warnings.push(format!(
                "{elsewhere} scopes were still open on other threads than the finishing one at \
                 finish() and are in no row: end them (drop their guards) before finish()"
            ));
        }
        let folded = self.running.paths.folded();
        self.trailer.scope_paths_folded = folded;
        if folded > 0 {
            self.trailer.warnings.push(format!(
                "{folded} scopes were recorded as {} because the run already had {} distinct \
                 scope paths: name scopes by what they do, not by a request id or an index",
                crate::run::OTHER_SCOPE_PATHS,
                crate::run::MAX_SCOPE_PATHS
            ));
        }
        let lost = self.running.calls_lost();
        if lost > 0 {
            self.trailer.warnings.push(format!(
                "{lost} API calls made by exiting threads could not be captured; their GPU records were placed by time and counted in the unscoped path"
            ));
        }
        let too_deep = self
            .running
            .nvtx_too_deep
            .load(std::sync::atomic::Ordering::Relaxed);
        if too_deep > 0 {
            let depth = self.running.nvtx_depth.unwrap_or(0);
            self.trailer.warnings.push(format!(
                "{too_deep} NVTX ranges were not imported as scopes: their thread already had \
                 {depth} imported ranges open; raise NvtxImport::max_depth to import them"
            ));
        }
        let event_failures = self.running.events.failures();
        if event_failures > 0 {
            self.trailer.warnings.push(format!(
                "{event_failures} scope timing events could not be recorded"
            ));
        }
    }

    /// The run's energy from the rows' NVML figures, the sampler's error counts as warnings,
    /// and the sampler stopped.
    fn stop_nvml(&mut self) {
        let Some(mut n) = self.nvml.take() else {
            return;
        };
        self.trailer.energy = Some(crate::ledger::run_energy(
            self.nvml_rows.iter().map(Vec::as_slice),
            self.work_per_iteration,
        ));
        for st in n.stats() {
            if st.sample_errors + st.energy_errors > 0 || st.samples_overwritten > 0 {
                self.trailer.warnings.push(format!(
                    "NVML device {}: {} sample errors, {} energy errors, {} samples overwritten; {}",
                    st.device_id,
                    st.sample_errors,
                    st.energy_errors,
                    st.samples_overwritten,
                    st.errors.join("; ")
                ));
            }
        }
        if let Err(e) = n.stop(crate::nvml::DEFAULT_STOP_TIMEOUT) {
            self.trailer.warnings.push(format!("NVML sampler: {e}"));
        }
    }

    /// The profiler's own costs into the trailer: the collector's CPU time so far, step()'s,
    /// the sampled timeline's switches, and the scope clock and events.
    fn count_overhead(&mut self) {
        self.trailer.overhead.collector_cpu_ns = crate::clock::thread_cpu_ns();
        // Final: shutdown closed step() (the `open` lock) before sending Finish.
        self.trailer.overhead.step_ns = self.running.step_ns();
        self.trailer.overhead.sampling_switch_ns = self.running.sampling_switch_ns();
        self.trailer.overhead.sampling_switch_collector_ns =
            self.running.sampling_switch_collector_ns();
        self.trailer.overhead.scope_clock = self.running.clock.source().name().to_string();
        self.trailer.overhead.scope_events_made = self.running.events.made() as u64;
    }
}
