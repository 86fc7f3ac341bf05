//! Scopes for `async` code. A [`ScopeGuard`](super::ScopeGuard) is `!Send`, so holding one
//! across an `.await` makes a future that a multi-threaded runtime cannot move between its
//! threads. The way in for async code is the shape of `tracing::Instrument`: a [`ScopeContext`]
//! (a `Copy + Send` value) entered around every poll of the future, on whichever thread polls it,
//! so that the CUDA calls a poll makes are attributed to the context's scope and scopes opened
//! inside a poll nest below it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::ScopeContext;

pin_project_lite::pin_project! {
    /// A future that enters a [`ScopeContext`] around every poll (see [`InScope::in_scope`]).
    #[derive(Debug)]
    #[must_use = "a future does nothing until it is awaited or spawned"]
    pub struct Scoped<F> {
        context: ScopeContext,
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Entered and left inside the poll: the guard never crosses an await or a thread.
        let _entered = this.context.enter();
        this.inner.poll(cx)
    }
}

/// Runs a future's polls inside a scope context, as `tracing::Instrument` runs them inside a
/// span. Implemented for every future.
///
/// ```no_run
/// use gpu_ledger::{InScope, Profiler, ScopeContext};
/// # async fn load_batch() {}
/// # async fn run() {
/// let load = Profiler::context().child("load"); // `step/load` when `step` is open here
/// tokio::spawn(async { load_batch().await }.in_scope(load));
/// # }
/// ```
pub trait InScope: Future + Sized {
    /// This future, with `context` entered around each of its polls.
    fn in_scope(self, context: ScopeContext) -> Scoped<Self> {
        Scoped {
            context,
            inner: self,
        }
    }
}

impl<F: Future> InScope for F {}
