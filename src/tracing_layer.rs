//! `tracing` spans as scopes: a [`tracing_subscriber::Layer`] that opens a scope named after
//! each span as the span is entered and ends it as the span is exited, so that an application
//! already instrumented with `tracing` gets a ledger by adding one layer.
//!
//! A span entered on a thread where its parent span is not the innermost open scope (a task
//! spawned from inside the parent and run on a worker thread) enters the parent's
//! [`ScopeContext`] first: its scope nests under the parent's path, and the worker's launches
//! are attributed there as a hand-off, as with [`ScopeContext::enter`].

use std::cell::RefCell;

use tracing_core::span::Id;
use tracing_core::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::{ContextGuard, Profiler, ScopeContext, ScopeGuard};

/// Makes entered `tracing` spans gpu-ledger scopes. Filter which spans with
/// `tracing_subscriber`'s per-layer filters (`ScopeLayer::new().with_filter(..)`).
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt;
/// let subscriber = tracing_subscriber::registry().with(gpu_ledger::ScopeLayer::new());
/// tracing::subscriber::set_global_default(subscriber).unwrap();
/// let profiler = gpu_ledger::Profiler::builder().start()?;
/// for _ in 0..10 {
///     let _step = tracing::info_span!("step").entered(); // the scope `step`
///     profiler.step();
/// }
/// # Ok::<(), gpu_ledger::Error>(())
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct ScopeLayer {
    _private: (),
}

impl ScopeLayer {
    /// The layer.
    pub fn new() -> Self {
        ScopeLayer::default()
    }
}

/// The scope a span opened when it was entered last, for its children entered elsewhere.
struct EnteredScope(ScopeContext);

/// A span entered on this thread and not exited yet.
struct OpenSpan {
    span: u64,
    /// Dropped first: the scope ends, then the context it was opened in is left.
    _scope: ScopeGuard<'static>,
    _context: Option<ContextGuard>,
}

thread_local! {
    static OPEN: RefCell<Vec<OpenSpan>> = const { RefCell::new(Vec::new()) };
}

impl<S> Layer<S> for ScopeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<EnteredScope>().map(|e| e.0));
        let context = match parent {
            Some(p) if !p.is_none() && p != ScopeContext::current() => Some(p.enter()),
            _ => None,
        };
        let scope = Profiler::scope(span.metadata().name());
        span.extensions_mut()
            .replace(EnteredScope(ScopeContext::current()));
        let _ = OPEN.try_with(|open| {
            open.borrow_mut().push(OpenSpan {
                span: id.into_u64(),
                _scope: scope,
                _context: context,
            });
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let id = id.into_u64();
        let closed = OPEN
            .try_with(|open| {
                let mut open = open.borrow_mut();
                let pos = open.iter().rposition(|o| o.span == id)?;
                Some(open.remove(pos))
            })
            .ok()
            .flatten();
        // Outside the borrow: ending the scope runs gpu-ledger's scope code.
        drop(closed);
    }
}
