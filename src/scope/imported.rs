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
    let _ = THREAD.try_with(|t| {
        // Borrowed: the push is one of gpu-ledger's own scopes' ranges.
        let Ok(mut guard) = t.try_borrow_mut() else {
            return;
        };
        let t = &mut *guard;
        if !t.refresh() {
            return;
        }
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

/// Ends the innermost imported range of `domain` on the calling thread; a pop whose push came
/// before the run started finds none and does nothing.
fn pop(domain: usize) {
    let _ = THREAD.try_with(|t| {
        let Ok(mut guard) = t.try_borrow_mut() else {
            return;
        };
        let t = &mut *guard;
        if !t.refresh() {
            return;
        }
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
