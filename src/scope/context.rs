//! Scope contexts: the scope open on one thread, carried to another so that work done there on
//! its behalf is attributed to it. A framework that records operations on the application's
//! thread and launches them on a worker thread captures [`ScopeContext::current`] with each
//! operation and enters it around the launch, in the way `tracing::Span` or OpenTelemetry's
//! context crosses threads.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use super::{close_frame, Frame, THREAD};
use crate::run::{ENABLED, GENERATION};

/// The innermost scope open on a thread when it was captured, as a small `Copy + Send` value
/// for another thread to [`enter`](Self::enter). Capturing costs a thread-local read; a context
/// of a run that has finished, or captured with no scope open, enters as nothing.
///
/// ```no_run
/// use gpu_ledger::{Profiler, ScopeContext};
/// let (tx, rx) = std::sync::mpsc::channel::<(ScopeContext, u32)>();
/// let launcher = std::thread::spawn(move || {
///     for (ctx, op) in rx {
///         let _in = ctx.enter(); // launches here are attributed to the op's scope
///         // ... launch the kernels of `op` ...
///         # let _ = op;
///     }
/// });
/// {
///     let _fwd = Profiler::scope("forward");
///     tx.send((Profiler::context(), 1)).unwrap();
/// }
/// drop(tx);
/// launcher.join().unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[must_use = "a ScopeContext attributes nothing until a thread enters it: hand it to the thread \
              that does the work (ctx.enter())"]
pub struct ScopeContext {
    /// The run it was captured in (0: none).
    generation: u64,
    /// The scope's path id (0: none).
    path_id: u32,
}

impl ScopeContext {
    /// A context of no scope: entering it does nothing.
    pub const NONE: ScopeContext = ScopeContext {
        generation: 0,
        path_id: 0,
    };

    /// The innermost scope open on the calling thread (an entered context included), or
    /// [`NONE`](Self::NONE) when none is open or no profiler runs.
    pub fn current() -> ScopeContext {
        if !ENABLED.load(Ordering::Relaxed) {
            return ScopeContext::NONE;
        }
        THREAD
            .try_with(|t| {
                let t = t.borrow();
                match t.stack.last() {
                    Some(f) if t.generation == GENERATION.load(Ordering::Acquire) => ScopeContext {
                        generation: t.generation,
                        path_id: f.path_id,
                    },
                    _ => ScopeContext::NONE,
                }
            })
            .unwrap_or(ScopeContext::NONE)
    }

    /// The context of a scope `name` nested below this one (or at the top when this is
    /// [`NONE`](Self::NONE)), for work that has no thread of its own to open a scope on, such as
    /// an `async` task: entered around the task's polls ([`crate::InScope`]), its CUDA calls are
    /// attributed to `parent/name`. It records no host time (nothing opens or closes it); a scope
    /// opened inside an entered context is timed as any other. `NONE` when no profiler runs.
    pub fn child(self, name: &str) -> ScopeContext {
        let Some(running) = crate::run::current() else {
            return ScopeContext::NONE;
        };
        let generation = GENERATION.load(Ordering::Acquire);
        let parent = if self.generation == generation {
            self.path_id
        } else {
            0
        };
        ScopeContext {
            generation,
            path_id: running.paths.intern(parent, name),
        }
    }

    /// Whether it holds no scope.
    pub fn is_none(&self) -> bool {
        self.path_id == 0
    }

    /// Enters the context on the calling thread until the guard drops: API calls made there
    /// with no scope of the thread's own open inside it are attributed to the context's scope
    /// (the row counts them as `handoff`), and scopes opened inside it nest below that scope.
    /// It records no time of its own: the scope it stands for was timed where it was opened.
    pub fn enter(self) -> ContextGuard {
        let inert = ContextGuard {
            token: 0,
            _not_send: PhantomData,
        };
        if self.path_id == 0 || !ENABLED.load(Ordering::Relaxed) {
            return inert;
        }
        THREAD
            .try_with(|t| {
                let mut guard = t.borrow_mut();
                let t = &mut *guard;
                if !t.refresh() || t.generation != self.generation {
                    return None;
                }
                let running = t.running.take()?;
                t.next_token += 1;
                let token = t.next_token;
                t.stack.push(Frame {
                    path_id: self.path_id,
                    start_ns: 0,
                    iteration: t.iteration(),
                    start_event: None,
                    token,
                    range_pass: 0,
                    handoff: true,
                    context: true,
                    emitted: false,
                    imported: false,
                });
                let raw = t.innermost_raw();
                t.point_calls(&running, raw);
                t.running = Some(running);
                Some(ContextGuard {
                    token,
                    _not_send: PhantomData,
                })
            })
            .unwrap_or_else(|_| {
                // Entered while its thread exits: the launches it would attribute are unscoped.
                crate::run::lost_at_thread_exit(1);
                None
            })
            .unwrap_or(inert)
    }

    /// Runs `f` inside the context.
    pub fn in_scope<T>(self, f: impl FnOnce() -> T) -> T {
        let _entered = self.enter();
        f()
    }
}

/// A [`ScopeContext`] entered on a thread; leaves it when dropped. `!Send`: it is entered and
/// left on one thread.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(gpu_ledger::ScopeContext::NONE.enter());
/// ```
#[must_use = "a context is left when its guard is dropped; bind it with `let _in = ...`"]
pub struct ContextGuard {
    /// 0 for an inert guard.
    token: u64,
    _not_send: PhantomData<*mut ()>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if self.token != 0 {
            // A context records nothing of its own: taking its frame off is all.
            close_frame(self.token, |_, _, _, _| {});
        }
    }
}
