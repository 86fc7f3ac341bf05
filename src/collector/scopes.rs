//! Closed scopes as the collector takes them from the threads' rings: their host times
//! converted to ns, each placed in the iteration it ended in, and the timing events of scopes
//! opened on a stream read once they complete.

use super::window::PendingEvents;
use super::Collector;
use crate::run::ScopeRecord;

impl Collector {
    /// Takes the scopes every thread closed since the last call.
    pub(super) fn drain_scopes(&mut self) {
        let mut batch = std::mem::take(&mut self.scope_batch);
        // The anchor first: every record drained below was made before it, but for those closed
        // while the rings are read (converted at the newest segment's rate).
        if let Some(clock) = &mut self.clock {
            clock.push(self.running.clock.anchor());
        }
        self.running.drain_scopes(&mut batch);
        if let Some(clock) = &self.clock {
            for rec in &mut batch {
                rec.start_ns = clock.to_ns(rec.start_ns);
                rec.end_ns = clock.to_ns(rec.end_ns);
            }
        }
        self.add_scopes(batch);
    }

    /// Places the scopes that waited for iteration `index` to begin.
    pub(super) fn add_future_scopes(&mut self, index: u64) {
        if let Some(future) = self.future_scopes.remove(&index) {
            self.add_scopes(future);
        }
    }

    /// Places each closed scope in the iteration it ended in, with the structural warnings it
    /// calls for; a scope of an iteration not begun yet waits for it (a thread raced the
    /// stepping thread's message).
    pub(super) fn add_scopes(&mut self, mut batch: Vec<ScopeRecord>) {
        let newest = self.iterations.back().map_or(0, |it| it.index);
        for mut rec in batch.drain(..) {
            if rec.iteration > newest {
                self.future_scopes
                    .entry(rec.iteration)
                    .or_default()
                    .push(rec);
                continue;
            }
            let Some(pos) = self.position_of(rec.iteration) else {
                self.trailer.late_records += 1;
                continue;
            };
            let it = &mut self.iterations[pos];
            if rec.out_of_order {
                it.warnings.push(format!(
                    "scope {} ended while a scope opened after it was still open (guards dropped out of order)",
                    self.running.paths.path(rec.path_id)
                ));
            }
            if rec.iteration_at_entry != rec.iteration {
                it.warnings.push(format!(
                    "scope {} was open across {} iteration boundary(ies); its host time is counted in the iteration where it ended",
                    self.running.paths.path(rec.path_id),
                    rec.iteration - rec.iteration_at_entry
                ));
            }
            if let Some(events) = rec.events.take() {
                self.events_pending += 1;
                it.events.push(PendingEvents {
                    path_id: rec.path_id,
                    events,
                });
            }
            it.scopes.push(rec);
        }
        self.scope_batch = batch;
    }

    /// Reads the scope events that have completed, in every waiting iteration.
    pub(super) fn resolve_events(&mut self) {
        // Most runs time no scope on a stream: nothing to look at in any iteration.
        if self.events_pending == 0 {
            return;
        }
        for pos in 0..self.iterations.len() {
            self.resolve_events_at(pos, false);
        }
        self.event_reader.end_pass(&self.running.events);
    }

    /// Reads the completed scope events of the iteration at `pos`; with `force`, gives up on the
    /// rest (each with a warning in its row).
    pub(super) fn resolve_events_at(&mut self, pos: usize, force: bool) {
        let running = &self.running;
        let it = &mut self.iterations[pos];
        if it.events.is_empty() {
            return;
        }
        let before = it.events.len();
        let mut still = Vec::new();
        // Scopes complete in the order they were recorded on a stream: unless giving up, the
        // first pending pair ends this pass, so a tick makes one driver call per completed scope
        // and one more, not one per scope still running.
        let mut blocked = false;
        for ev in it.events.drain(..) {
            if blocked {
                still.push(ev);
                continue;
            }
            match self.event_reader.read(&ev.events) {
                Ok(Some(ns)) => *it.event_ns.entry(ev.path_id).or_default() += ns,
                Ok(None) if !force => {
                    blocked = true;
                    still.push(ev);
                }
                Ok(None) => it.warnings.push(format!(
                    "scope {}: timing events had not completed when the row was written",
                    running.paths.path(ev.path_id)
                )),
                Err(e) => it.warnings.push(format!(
                    "scope {}: timing events failed: {e}",
                    running.paths.path(ev.path_id)
                )),
            }
        }
        self.events_pending -= before - still.len();
        it.events = still;
    }
}
