//! NVTX ranges imported as scopes: CUPTI's NVTX callback ([`crate::cupti::nvtx`]) calls
//! [`on_nvtx`] on the thread that pushed or popped the range, inside the NVTX call.
//!
//! A range opens a scope below the innermost one open on its thread, so a library's ranges nest
//! under the application's phases. gpu-ledger's own ranges (the ones its scopes push) come back
//! through the same callback while the thread's scope state is borrowed by the scope that pushes
//! them, and are skipped for that reason.

use std::sync::atomic::Ordering;

use super::{Start, THREAD};
use crate::cupti::nvtx::NvtxEvent;

/// What an NVTX call does to the calling thread's scopes.
pub(crate) fn on_nvtx(event: NvtxEvent<'_>) {
    match event {
        NvtxEvent::Push { domain, message } => push(domain, &message),
        NvtxEvent::Pop { domain } => pop(domain),
        NvtxEvent::Mark { .. } => {
            if let Some(running) = crate::run::current() {
                running.step(|| super::on_step(&running));
            }
        }
    }
}

/// Opens a scope for an NVTX range of `domain` named `message`, unless the thread already has
/// as many imported ranges open as the run allows (counted).
fn push(domain: usize, message: &str) {
    with_thread(|t| {
        let Some(running) = t.running.take() else {
            return;
        };
        let open = t.imported.iter().filter(|(_, token)| *token != 0).count();
        let limit = running.nvtx_depth.unwrap_or(0) as usize;
        if open >= limit {
            running.nvtx_too_deep.fetch_add(1, Ordering::Relaxed);
            t.imported.push((domain, 0));
        } else {
            let parent = t.innermost();
            let path_id = t.owned_path(&running, parent, message);
            let token = t.open_path(&running, path_id, message, Start::Now, None, true);
            t.imported.push((domain, token));
        }
        t.running = Some(running);
    });
}

/// Runs `f` on the calling thread's scope state while a run is on, unless the state is
/// borrowed: then the NVTX call is one of gpu-ledger's own scopes' ranges, and is skipped.
fn with_thread(f: impl FnOnce(&mut super::ThreadScopes)) {
    let _ = THREAD.try_with(|t| {
        let Ok(mut guard) = t.try_borrow_mut() else {
            return;
        };
        if guard.refresh() {
            f(&mut guard);
        }
    });
}

/// Ends the innermost imported range of `domain` on the calling thread; a pop whose push came
/// before the run started finds none and does nothing.
fn pop(domain: usize) {
    with_thread(|t| {
        let Some(pos) = t.imported.iter().rposition(|(d, _)| *d == domain) else {
            return;
        };
        let (_, token) = t.imported.remove(pos);
        if token == 0 {
            return;
        }
        t.close(token, |t, running, frame, out_of_order| {
            let end_ns = t.clock(running);
            t.send_closed(frame, end_ns, None, out_of_order);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{NvtxRun, RunState};
    use std::borrow::Cow;

    fn push(message: &'static str) {
        on_nvtx(NvtxEvent::Push {
            domain: 0,
            message: Cow::Borrowed(message),
        });
    }

    fn pop(domain: usize) {
        on_nvtx(NvtxEvent::Pop { domain });
    }

    #[test]
    fn imported_ranges_nest_under_the_open_scope_stop_at_the_depth_limit_and_skip_own_ranges() {
        let claim = crate::run::claim().expect("no other run in the unit tests");
        let (running, _inbox) = RunState::new(
            crate::clock::HostClock::monotonic(std::time::Instant::now()),
            None,
            None,
            crate::config::Follow::Off,
            NvtxRun {
                emit: true,
                import_depth: Some(2),
            },
            None,
            false,
        );
        claim.publish(&running);
        {
            let _step = super::super::ScopeGuard::enter(Cow::Borrowed("step"), None);
            push("attention");
            push("softmax");
            push("too-deep"); // a third imported range: over the limit of 2
            pop(0);
            pop(0);
            // A pop of another domain finds no range of its own and ends nothing.
            pop(0x40);
            // A range pushed while the thread's scope state is borrowed is one of gpu-ledger's
            // own scopes' ranges coming back through CUPTI: not a scope.
            THREAD.with(|t| {
                let _held = t.borrow_mut();
                push("own");
            });
            pop(0);
        }
        // A pop with no imported range open (its push came before the run) does nothing.
        pop(0);
        let mut closed = Vec::new();
        running.drain_scopes(&mut closed);
        let close = running.close(None, Vec::new);
        drop(close);
        crate::run::retire();
        let paths: Vec<String> = closed
            .iter()
            .map(|s| running.paths.path(s.path_id))
            .filter(|p| p.starts_with("step"))
            .collect();
        assert_eq!(
            paths,
            ["step/attention/softmax", "step/attention", "step"],
            "closed innermost first"
        );
        assert_eq!(running.nvtx_too_deep.load(Ordering::Relaxed), 1);
    }
}
