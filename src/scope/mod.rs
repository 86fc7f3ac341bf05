//! Scope guards and the per-thread scope stack.
//!
//! Entering a scope looks up its path id in a thread-local cache, makes it the path the thread's
//! API calls are attributed to (`crate::cupti::calls`, read by CUPTI's callback at the timeline
//! and counters levels only) and reads the host clock (the TSC where the kernel trusts it,
//! `crate::clock`); leaving hands the calls back to the enclosing scope and pushes a 64-byte
//! [`ClosedScope`] onto the thread's own single-producer ring, which the collector drains every
//! 2 ms: no lock, no atomic read-modify-write and no allocation per scope. A scope timed on a
//! stream borrows the stream for its guard's life, so it takes no reference count. A disabled
//! profiler costs one relaxed atomic load per scope.
//!
//! The guard and the thread's stack stay in this one module: every scope runs through both, and
//! code of one module is compiled together, so the hot path inlines whole.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::clock::ClockSource;
use crate::config::Follow;
use crate::cupti::calls::{ApiCalls, HANDOFF_BIT};
use crate::driver::events::{EventHandle, LocalEvents, PackedEvents, StreamRef};
use crate::run::{ClosedScope, RunState, ScopeSender, ENABLED, GENERATION};

struct Frame {
    path_id: u32,
    start_ns: u64,
    iteration: u64,
    start_event: Option<StartEvent>,
    /// Identifies the guard, so that a guard dropped out of order is detected.
    token: u64,
    /// The counters pass this scope pushed a user range in (0: none).
    range_pass: u64,
    /// The path came through a scope context handed over from another thread (this frame's,
    /// or one below it).
    handoff: bool,
    /// An entered [`ScopeContext`], not a scope: it is neither timed nor recorded.
    context: bool,
    /// The scope pushed an NVTX range, which its end pops.
    emitted: bool,
    /// An NVTX range imported as a scope, not a guard of the application's.
    imported: bool,
}

/// The event a scope timed on a stream began with (its guard holds the stream).
struct StartEvent {
    handle: EventHandle,
    /// Also the end of the scope before it ([`ScopeGuard::next`]).
    shared: bool,
}

/// A thread's scope state. `repr(C)`, what every scope touches first: next to launches each
/// cache line a scope touches is likely a miss, so the hot fields share two lines and the
/// running profiler's own structure is not read at all by a host-time scope (its clock kind,
/// whether calls are captured and its iteration counter are kept here).
#[derive(Default)]
#[repr(C)]
struct ThreadScopes {
    generation: u64,
    running: Option<Arc<RunState>>,
    stack: Vec<Frame>,
    /// Where this thread's closed scopes go to the collector.
    sender: Option<ScopeSender>,
    /// The running profiler's open iteration (`ApiCalls::iteration`), without going through
    /// `RunState`.
    calls: Option<Arc<ApiCalls>>,
    next_token: u64,
    /// This thread's free timing events of the running profiler's pool.
    events: LocalEvents,
    thread: u32,
    /// The running profiler's scope clock reads the TSC (else `Instant`).
    tsc: bool,
    /// CUPTI's callback reads the scope path ([`RunState::captures_calls`]).
    captures_calls: bool,
    /// Calls on threads with no scope of their own follow this thread's ([`Follow`]): it
    /// publishes its innermost path as it changes.
    follow: bool,
    /// It is followed as the stepping thread, and stops being followed when another thread
    /// steps.
    follow_stepping: bool,
    /// `crate::thread_slot::thread_key` of this thread.
    key: u64,
    /// The static names found last, in front of `static_cache`.
    recent: RecentNames,
    /// parent path id -> child name -> path id; two levels so that a lookup borrows the name
    /// instead of cloning it.
    cache: rustc_hash::FxHashMap<u32, rustc_hash::FxHashMap<Cow<'static, str>, u32>>,
    /// (parent path id, address, length) of a `&'static str` name -> path id: a static name is
    /// found by its address, without hashing its text.
    static_cache: HashMap<(u32, usize, usize), u32, rustc_hash::FxBuildHasher>,
    /// Scopes push NVTX ranges ([`RunState::nvtx_emit`]).
    nvtx_emit: bool,
    /// Path id -> the scope's name NUL-terminated, for its NVTX range.
    nvtx_names: Vec<Option<std::ffi::CString>>,
    /// NVTX ranges open on this thread that were imported, innermost last: (domain handle,
    /// token of the scope it opened, 0 when it opened none).
    imported: Vec<(usize, u64)>,
    /// Scopes of this thread's own open now (not contexts, not imported ranges), shared with
    /// the run ([`RunState::register_open`]) so that `finish()` sees those of every thread.
    open: Option<Arc<AtomicU32>>,
}

/// Slots of [`RecentNames`], a power of two.
const RECENT_NAMES: usize = 64;

/// A direct-mapped cache of static scope names: (parent, address, length) -> path id in a few
/// instructions and one cache line. Next to the application's launches the scope's code and
/// data are cold (the driver's own evict them), so the hit path is kept short; a miss falls back
/// to `static_cache` out of line.
struct RecentNames([RecentName; RECENT_NAMES]);

#[derive(Clone, Copy, Default)]
struct RecentName {
    parent: u32,
    /// 0: empty (path ids start at 1).
    id: u32,
    ptr: usize,
    len: usize,
}

impl Default for RecentNames {
    fn default() -> Self {
        RecentNames([RecentName::default(); RECENT_NAMES])
    }
}

impl RecentNames {
    #[inline]
    fn slot(parent: u32, ptr: usize) -> usize {
        let h = (ptr as u64 ^ u64::from(parent)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - RECENT_NAMES.trailing_zeros())) as usize
    }

    /// The path id of the name at `ptr` of `len` bytes below `parent`, when its slot holds it.
    #[inline]
    fn get(&self, parent: u32, ptr: usize, len: usize) -> Option<u32> {
        let r = self.0[Self::slot(parent, ptr)];
        (r.id != 0 && r.ptr == ptr && r.len == len && r.parent == parent).then_some(r.id)
    }

    fn put(&mut self, parent: u32, ptr: usize, len: usize, id: u32) {
        self.0[Self::slot(parent, ptr)] = RecentName {
            parent,
            id,
            ptr,
            len,
        };
    }
}

/// Thread indices handed out in order of first scope.
static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static THREAD: RefCell<ThreadScopes> = RefCell::new(ThreadScopes::default());
}

impl ThreadScopes {
    /// Refreshes the running profiler when a new run started; true when one runs.
    #[inline]
    fn refresh(&mut self) -> bool {
        let generation = GENERATION.load(Ordering::Acquire);
        if self.generation != generation {
            self.new_run(generation);
        }
        self.running.is_some()
    }

    /// Drops what belonged to an earlier run and joins the current one.
    #[cold]
    #[inline(never)]
    fn new_run(&mut self, generation: u64) {
        self.generation = generation;
        self.running = crate::run::current();
        self.thread = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        self.stack.clear();
        crate::cupti::calls::set_scope_path(0);
        self.key = crate::thread_slot::thread_key();
        self.sender = self
            .running
            .as_ref()
            .map(|r| r.register_thread(self.thread, self.key));
        self.open = self.running.as_ref().map(|r| r.register_open());
        self.calls = self.running.as_ref().map(|r| r.calls().clone());
        self.tsc = self
            .running
            .as_ref()
            .is_some_and(|r| r.clock.source() == ClockSource::Tsc);
        self.captures_calls = self.running.as_ref().is_some_and(|r| r.captures_calls());
        let (follow, stepping) = match self.running.as_ref().map(|r| (r, &r.follow)) {
            Some((r, Follow::SteppingThread)) => {
                (r.stepping.load(Ordering::Relaxed) == self.key, true)
            }
            Some((_, Follow::Threads(names))) => {
                let me = std::thread::current();
                (names.iter().any(|n| Some(n.as_str()) == me.name()), false)
            }
            _ => (false, false),
        };
        self.follow = follow && self.captures_calls;
        self.follow_stepping = stepping;
        self.cache.clear();
        self.static_cache.clear();
        self.recent = RecentNames::default();
        self.nvtx_emit = self.running.as_ref().is_some_and(|r| r.nvtx_emit);
        self.nvtx_names.clear();
        self.imported.clear();
        // Events of the earlier run's pool, which destroys them.
        self.events = LocalEvents::default();
    }

    /// Path id of the static name `name` below `parent`, when [`RecentNames`] missed.
    #[cold]
    #[inline(never)]
    fn static_path(&mut self, running: &RunState, parent: u32, name: &'static str) -> u32 {
        let key = (parent, name.as_ptr() as usize, name.len());
        let id = match self.static_cache.get(&key) {
            Some(id) => *id,
            None => {
                let id = running.paths.intern(parent, name);
                self.static_cache.insert(key, id);
                id
            }
        };
        self.recent.put(parent, key.1, key.2, id);
        id
    }

    /// Path id of a name made at run time (`Profiler::scope(format!(..))`, an NVTX range's
    /// message) below `parent`; the name is copied only the first time.
    #[inline(never)]
    fn owned_path(&mut self, running: &RunState, parent: u32, name: &str) -> u32 {
        let children = self.cache.entry(parent).or_default();
        match children.get(name) {
            Some(id) => *id,
            None => {
                let id = running.paths.intern(parent, name);
                if !running.paths.is_other(id) {
                    children.insert(Cow::Owned(name.to_owned()), id);
                }
                id
            }
        }
    }

    /// Pushes the NVTX range of scope `path_id` named `name`.
    #[inline]
    fn nvtx_push(&mut self, path_id: u32, name: &str) {
        match self.nvtx_names.get(path_id as usize) {
            Some(Some(n)) => crate::nvtx::push(n),
            _ => self.nvtx_push_new(path_id as usize, name),
        }
    }

    /// [`Self::nvtx_push`] of a path whose name is not NUL-terminated yet.
    #[cold]
    #[inline(never)]
    fn nvtx_push_new(&mut self, index: usize, name: &str) {
        if self.nvtx_names.len() <= index {
            self.nvtx_names.resize(index + 1, None);
        }
        let n = crate::nvtx::range_name(name);
        crate::nvtx::push(&n);
        self.nvtx_names[index] = Some(n);
    }
}

/// A guard that ends its scope when dropped. `!Send`: a scope begins and ends on one thread.
/// A scope timed on a stream ([`crate::Profiler::scope_on`]) borrows the stream for `'s`, since
/// its end is recorded there; a host-time scope is `ScopeGuard<'static>`.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(gpu_ledger::Profiler::scope("x"));
/// ```
///
/// ```compile_fail
/// # fn demo(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) {
/// let stream = ctx.new_stream().unwrap();
/// let scope = gpu_ledger::Profiler::scope_on("x", &stream);
/// drop(stream); // the scope's end is recorded on it
/// drop(scope);
/// # }
/// ```
#[must_use = "a scope ends when its guard is dropped; bind it with `let _s = ...`"]
pub struct ScopeGuard<'s> {
    /// 0 for an inert guard (profiler disabled).
    token: u64,
    /// The stream the scope is timed on: its end event is recorded there.
    stream: Option<StreamRef<'s>>,
    _not_send: PhantomData<*mut ()>,
}

impl<'s> ScopeGuard<'s> {
    pub(crate) const fn inert(stream: Option<StreamRef<'s>>) -> Self {
        ScopeGuard {
            token: 0,
            stream,
            _not_send: PhantomData,
        }
    }

    /// Ends the scope now (same as dropping the guard).
    pub fn end(self) {}

    pub(crate) fn enter(name: Cow<'static, str>, stream: Option<StreamRef<'s>>) -> Self {
        if !ENABLED.load(Ordering::Relaxed) {
            return Self::inert(stream);
        }
        THREAD
            .try_with(|t| {
                let mut guard = t.borrow_mut();
                let t = &mut *guard;
                if !t.refresh() {
                    return Self::inert(stream);
                }
                // Moved out and back: no Arc<RunState> clone (two contended atomic
                // read-modify-writes) per scope.
                let Some(running) = t.running.take() else {
                    return Self::inert(stream);
                };
                let opened = t.open(&running, name, Start::Now, stream);
                t.running = Some(running);
                opened
            })
            .unwrap_or_else(|_| {
                // Entered while its thread exits: nothing of it can be recorded.
                crate::run::lost_at_thread_exit(1);
                Self::inert(stream)
            })
    }

    /// Ends this scope and begins `name` after it, as its sibling, with one boundary: one host
    /// clock reading ends this scope and starts the next, and on a scope timed on a stream
    /// ([`crate::Profiler::scope_on`]) one event on that stream does both, so a chain of
    /// adjacent scopes records one `cuEventRecord` per boundary instead of two. The next scope
    /// is timed on the same stream.
    ///
    /// When this scope is not the innermost one open on the thread, or the profiler is not
    /// running, this is the same as dropping it and opening `name` anew.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # fn demo(stream: &Arc<cudarc::driver::CudaStream>) {
    /// use gpu_ledger::Profiler;
    /// let s = Profiler::scope_on("forward", stream);
    /// // ... forward launches ...
    /// let s = s.next("backward"); // one event between forward and backward
    /// // ... backward launches ...
    /// drop(s);
    /// # }
    /// ```
    pub fn next(mut self, name: impl Into<Cow<'static, str>>) -> ScopeGuard<'s> {
        let name = name.into();
        let token = std::mem::replace(&mut self.token, 0);
        let stream = self.stream;
        if token == 0 {
            return ScopeGuard::enter(name, stream);
        }
        let chained = THREAD.try_with(|t| {
            let mut guard = t.borrow_mut();
            let t = &mut *guard;
            if t.running.is_none()
                || t.generation != GENERATION.load(Ordering::Acquire)
                || t.stack.last().is_none_or(|f| f.token != token)
            {
                return None;
            }
            let running = t.running.take()?;
            let frame = t.stack.pop()?;
            t.release(&running, &frame);
            let boundary_ns = t.clock(&running);
            let boundary_event = t
                .record_event(&running, frame.start_event.as_ref().and(stream))
                .map(|handle| StartEvent {
                    handle,
                    shared: true,
                });
            let end_event = boundary_event.as_ref().map(|e| (e.handle, true));
            t.send_closed(frame, boundary_ns, end_event, false);
            let opened = t.open(
                &running,
                name.clone(),
                Start::At(boundary_ns, boundary_event),
                stream,
            );
            t.running = Some(running);
            Some(opened)
        });
        match chained {
            Ok(Some(next)) => next,
            // Not the innermost scope, or the run changed: end it as a drop would, open anew.
            _ => {
                drop(ScopeGuard {
                    token,
                    stream,
                    _not_send: PhantomData,
                });
                ScopeGuard::enter(name, stream)
            }
        }
    }
}

/// Where a scope opened by [`ThreadScopes::open`] starts.
enum Start {
    /// Now, once the scope is set up (so that its host time leaves gpu-ledger's own work out),
    /// with a start event on the scope's stream when it is timed on one.
    Now,
    /// At a boundary already taken: the end of the scope before it ([`ScopeGuard::next`]).
    At(u64, Option<StartEvent>),
}

/// A counters pass's user range for a scope being entered (out of line: only while a pass runs).
#[cold]
#[inline(never)]
fn counter_push(running: &RunState, name: &str) -> u64 {
    running.counter_push(name)
}

/// Ends a counters pass's user range (out of line, as [`counter_push`]).
#[cold]
#[inline(never)]
fn counter_pop(running: &RunState, pass: u64) {
    running.counter_pop(pass);
}

impl ThreadScopes {
    /// Takes a closed scope (or context) off the counters' range stack and hands the thread's
    /// API calls back to the innermost frame still open, before the scope's end is read.
    #[inline]
    fn release(&mut self, running: &RunState, frame: &Frame) {
        if !frame.context && !frame.imported {
            self.count_open(false);
        }
        if frame.emitted {
            crate::nvtx::pop();
        }
        self.point_calls(running, self.innermost_raw());
        if frame.range_pass != 0 {
            counter_pop(running, frame.range_pass);
        }
    }

    /// Makes `raw` (a path id, with [`HANDOFF_BIT`] when handed over) the path this thread's
    /// API calls are attributed to, and publishes it when calls of other threads follow this
    /// one.
    #[inline]
    fn point_calls(&mut self, running: &RunState, raw: u32) {
        if !self.captures_calls {
            return;
        }
        crate::cupti::calls::set_scope_path(raw);
        if self.follow {
            self.publish_followed(running, raw & !HANDOFF_BIT);
        }
    }

    /// Publishes `path_id` as the followed thread's open scope, unless another thread has
    /// become the stepping thread since.
    #[inline]
    fn publish_followed(&mut self, running: &RunState, path_id: u32) {
        if self.follow_stepping && running.stepping.load(Ordering::Relaxed) != self.key {
            self.follow = false;
            return;
        }
        if let Some(calls) = &self.calls {
            calls.followed.store(path_id, Ordering::Relaxed);
        }
    }

    /// The innermost frame's path as calls carry it: with [`HANDOFF_BIT`] when it came through
    /// a handed-over context (0: none).
    fn innermost_raw(&self) -> u32 {
        self.stack.last().map_or(0, |f| {
            if f.handoff {
                f.path_id | HANDOFF_BIT
            } else {
                f.path_id
            }
        })
    }

    /// The scope clock now: TSC ticks or ns since the origin, per the running profiler's
    /// `HostClock::source`.
    #[inline]
    fn clock(&self, running: &RunState) -> u64 {
        if self.tsc {
            crate::clock::tsc()
        } else {
            running.clock.now_ns()
        }
    }

    /// A timing event recorded now on `stream` from this thread's free events; none without a
    /// stream, or where CUDA refused (counted by the pool).
    #[inline]
    fn record_event(
        &mut self,
        running: &RunState,
        stream: Option<StreamRef<'_>>,
    ) -> Option<EventHandle> {
        running.events.record(&mut self.events, stream?)
    }

    /// The running profiler's open iteration.
    #[inline]
    fn iteration(&self) -> u64 {
        self.calls
            .as_ref()
            .map_or(0, |c| c.iteration.load(Ordering::Relaxed))
    }

    /// Path id of the innermost open scope (0: none).
    fn innermost(&self) -> u32 {
        self.stack.last().map_or(0, |f| f.path_id)
    }

    /// Opens a scope `name` below the innermost open one, starting at `start`, timed on `stream`
    /// when given.
    #[inline]
    fn open<'s>(
        &mut self,
        running: &RunState,
        name: Cow<'static, str>,
        start: Start,
        stream: Option<StreamRef<'s>>,
    ) -> ScopeGuard<'s> {
        let parent = self.innermost();
        let path_id = match name {
            Cow::Borrowed(s) => match self.recent.get(parent, s.as_ptr() as usize, s.len()) {
                Some(id) => id,
                None => self.static_path(running, parent, s),
            },
            Cow::Owned(ref s) => self.owned_path(running, parent, s),
        };
        let token = self.open_path(running, path_id, &name, start, stream, false);
        ScopeGuard {
            token,
            stream,
            _not_send: PhantomData,
        }
    }

    /// Opens scope `path_id` (named `name`) below the innermost open one, as
    /// [`open`](Self::open) does, or as an imported NVTX range (which pushes no NVTX range of
    /// its own); returns its frame's token.
    #[inline]
    fn open_path(
        &mut self,
        running: &RunState,
        path_id: u32,
        name: &str,
        start: Start,
        stream: Option<StreamRef<'_>>,
        imported: bool,
    ) -> u64 {
        let range_pass = if crate::counters::window::ranges_on() {
            counter_push(running, name)
        } else {
            0
        };
        let emitted = self.nvtx_emit && !imported;
        if emitted {
            self.nvtx_push(path_id, name);
        }
        let handoff = self.stack.last().is_some_and(|f| f.handoff);
        self.point_calls(
            running,
            if handoff {
                path_id | HANDOFF_BIT
            } else {
                path_id
            },
        );
        self.next_token += 1;
        let token = self.next_token;
        let (start_ns, start_event) = match start {
            Start::Now => {
                let event = self.record_event(running, stream).map(|handle| StartEvent {
                    handle,
                    shared: false,
                });
                (self.clock(running), event)
            }
            Start::At(ns, event) => (ns, event),
        };
        self.stack.push(Frame {
            path_id,
            start_ns,
            iteration: self.iteration(),
            start_event,
            token,
            range_pass,
            handoff,
            context: false,
            emitted,
            imported,
        });
        if !imported {
            self.count_open(true);
        }
        token
    }

    /// One scope of this thread's own more (`up`) or fewer open. Only this thread writes the
    /// count: a load and a store, no read-modify-write.
    #[inline]
    fn count_open(&self, up: bool) {
        if let Some(o) = &self.open {
            let n = o.load(Ordering::Relaxed);
            o.store(
                if up {
                    n.saturating_add(1)
                } else {
                    n.saturating_sub(1)
                },
                Ordering::Relaxed,
            );
        }
    }

    /// Hands a closed scope's record (its frame taken off the stack and [`release`]d, ended at
    /// `end_ns` and `end_event`, which is shared when it also starts the next scope) to the
    /// collector. A start event without an end (CUDA refused the end's record, counted) is not
    /// reused: the pool destroys it when the run ends.
    #[inline]
    fn send_closed(
        &mut self,
        frame: Frame,
        end_ns: u64,
        end_event: Option<(EventHandle, bool)>,
        out_of_order: bool,
    ) {
        let iteration = self.iteration();
        let Some(sender) = &mut self.sender else {
            return;
        };
        let (events, start_shared, end_shared) = match (frame.start_event, end_event) {
            (Some(start), Some((end, end_shared))) => (
                PackedEvents::new(start.handle, end),
                start.shared,
                end_shared,
            ),
            _ => (PackedEvents::NONE, false, false),
        };
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        let flags = flag(out_of_order, ClosedScope::OUT_OF_ORDER)
            | flag(start_shared, ClosedScope::START_SHARED)
            | flag(end_shared, ClosedScope::END_SHARED);
        sender.send(ClosedScope {
            start_ns: frame.start_ns,
            end_ns,
            iteration,
            events,
            path_id: frame.path_id,
            boundaries: u32::try_from(iteration.saturating_sub(frame.iteration))
                .unwrap_or(u32::MAX),
            flags,
        });
    }
}

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        if self.token == 0 {
            return;
        }
        let stream = self.stream;
        close_frame(self.token, |t, running, frame, out_of_order| {
            let end_ns = t.clock(running);
            let end_event = t
                .record_event(running, frame.start_event.as_ref().and(stream))
                .map(|e| (e, false));
            t.send_closed(frame, end_ns, end_event, out_of_order);
        });
    }
}

/// Takes guard `token`'s frame off the calling thread's stack and hands the thread's calls back
/// to the frame below, then runs `then` with the frame and whether it was dropped out of order;
/// nothing when the run the guard belonged to has finished.
#[inline]
fn close_frame(token: u64, then: impl FnOnce(&mut ThreadScopes, &RunState, Frame, bool)) {
    // Past the thread's teardown the frame is gone, and was counted then (`Drop`).
    let _ = THREAD.try_with(|t| t.borrow_mut().close(token, then));
}

impl Drop for ThreadScopes {
    /// A thread exiting with scopes of the running profiler open (guards kept in another
    /// thread-local, dropped after this one) loses them: counted, since no guard can close them.
    fn drop(&mut self) {
        let open = self
            .stack
            .iter()
            .filter(|f| !f.context && !f.imported)
            .count();
        if open > 0
            && self.running.is_some()
            && self.generation == GENERATION.load(Ordering::Acquire)
        {
            if let Some(o) = &self.open {
                o.store(0, Ordering::Relaxed);
            }
            crate::run::lost_at_thread_exit(open as u64);
        }
    }
}

impl ThreadScopes {
    /// [`close_frame`] on this thread's state.
    #[inline]
    fn close(&mut self, token: u64, then: impl FnOnce(&mut ThreadScopes, &RunState, Frame, bool)) {
        if self.running.is_none() || self.generation != GENERATION.load(Ordering::Acquire) {
            return; // the run this guard belonged to has finished
        }
        let Some((frame, out_of_order)) = take_frame(&mut self.stack, token) else {
            return;
        };
        // Moved out and back, as in `enter`.
        let Some(running) = self.running.take() else {
            return;
        };
        self.release(&running, &frame);
        then(self, &running, frame, out_of_order);
        self.running = Some(running);
    }
}

/// Takes the frame of guard `token` off the stack: the innermost, or one below it (a guard
/// dropped out of order); true in the second case.
#[inline]
fn take_frame(stack: &mut Vec<Frame>, token: u64) -> Option<(Frame, bool)> {
    if stack.last().is_some_and(|f| f.token == token) {
        stack.pop().map(|f| (f, false))
    } else {
        remove_frame(stack, token).map(|f| (f, true))
    }
}

/// Takes the frame of guard `token` from below the innermost (a guard dropped out of order).
#[cold]
#[inline(never)]
fn remove_frame(stack: &mut Vec<Frame>, token: u64) -> Option<Frame> {
    let pos = stack.iter().rposition(|f| f.token == token)?;
    Some(stack.remove(pos))
}

/// Open scope paths of the calling thread, innermost last (for the structural warning when an
/// iteration ends with scopes open); entered contexts are not scopes of the thread's own.
pub(crate) fn open_scopes(running: &RunState) -> Vec<u32> {
    THREAD
        .try_with(|t| {
            let t = t.borrow();
            if t.running
                .as_ref()
                .is_some_and(|r| std::ptr::eq(r.as_ref(), running))
            {
                t.stack
                    .iter()
                    .filter(|f| !f.context && !f.imported)
                    .map(|f| f.path_id)
                    .collect()
            } else {
                Vec::new()
            }
        })
        .unwrap_or_default()
}

/// What `step()` does on its thread: with [`Follow::SteppingThread`], makes the calling thread
/// the followed one (publishing its open scope at once); returns its open scopes as
/// [`open_scopes`] does.
pub(crate) fn on_step(running: &RunState) -> Vec<u32> {
    if running.follow == Follow::SteppingThread && running.captures_calls() {
        let key = crate::thread_slot::thread_key();
        if running.stepping.load(Ordering::Relaxed) != key {
            running.stepping.store(key, Ordering::Relaxed);
            let _ = THREAD.try_with(|t| {
                let mut guard = t.borrow_mut();
                let t = &mut *guard;
                if !t.refresh() {
                    return;
                }
                if let Some(r) = t.running.take() {
                    t.follow = true;
                    let raw = t.innermost_raw();
                    t.point_calls(&r, raw);
                    t.running = Some(r);
                }
            });
        }
    }
    open_scopes(running)
}

mod context;
mod future;
mod imported;
pub use context::{ContextGuard, ScopeContext};
pub use future::{InScope, Scoped};
pub(crate) use imported::on_nvtx;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recent_name_is_found_only_under_its_own_parent_address_and_length() {
        let mut recent = RecentNames::default();
        let ptr = 0x5000_1230usize;
        assert_eq!(recent.get(1, ptr, 4), None, "empty");
        // A second parent whose slot for this address is the first parent's.
        let other = (2..10_000u32)
            .find(|p| RecentNames::slot(*p, ptr) == RecentNames::slot(1, ptr))
            .expect("a colliding parent");
        recent.put(1, ptr, 4, 9);
        assert_eq!(recent.get(1, ptr, 4), Some(9));
        assert_eq!(recent.get(other, ptr, 4), None, "same slot, other parent");
        assert_eq!(recent.get(1, ptr, 5), None, "other length");
        recent.put(other, ptr, 4, 11);
        assert_eq!(recent.get(other, ptr, 4), Some(11));
        assert_eq!(
            recent.get(1, ptr, 4),
            None,
            "evicted by the colliding entry"
        );
        // A colliding address under the same parent.
        let ptr2 = (1..100_000usize)
            .map(|i| ptr + 8 * i)
            .find(|q| RecentNames::slot(1, *q) == RecentNames::slot(1, ptr))
            .expect("a colliding address");
        recent.put(1, ptr, 4, 9);
        assert_eq!(recent.get(1, ptr2, 4), None, "same slot, other address");
    }
}
