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

/// A future that enters a [`ScopeContext`] around every poll (see [`InScope::in_scope`]).
///
/// The inner future is boxed: one allocation per scoped future buys a wrapper that needs no pin
/// projection, so no unsafe code and no dependency an application would compile.
#[must_use = "a future does nothing until it is awaited or spawned"]
pub struct Scoped<F> {
    context: ScopeContext,
    inner: Pin<Box<F>>,
}

impl<F> std::fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped")
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Entered and left inside the poll: the guard never crosses an await or a thread.
        let _entered = self.context.enter();
        self.inner.as_mut().poll(cx)
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
            inner: Box::pin(self),
        }
    }
}

impl<F: Future> InScope for F {}
