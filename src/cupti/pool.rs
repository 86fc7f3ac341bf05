//! Preallocated CUPTI activity buffers.
//!
//! CUPTI asks for a buffer from whatever thread fills one, often the application's launching
//! thread, so the request must not allocate: buffers are allocated up front and recycled. When
//! all are in flight the pool may grow up to `max_buffers` (each growth is counted); beyond that a
//! request is refused and CUPTI counts the records it could not store as dropped, which the
//! ledger reports.
//!
//! Buffers are handed out zeroed: allocated zeroed, and zeroed again when returned (on the
//! collector's thread). CUPTI is told so (`CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER`);
//! otherwise it zeroes each buffer itself inside the request, on the thread that asked, often the
//! application's launching thread (4 MiB per request by default).
//!
//! Trade-off: memory is `buffer_bytes × buffers`. A kernel launch costs one 216-byte kernel
//! record (the API callback captures the call itself, `super::calls`), so the default 8 × 4 MiB
//! holds about 155 000 launches in flight; growth to 64 buffers (256 MiB) covers bursts the
//! collector falls behind on.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;

/// CUPTI requires 8-byte aligned buffers.
const ALIGN: usize = 8;

/// A fixed-size pool of activity buffers.
pub(crate) struct BufferPool {
    free: ArrayQueue<NonNull<u8>>,
    buffer_bytes: usize,
    max_buffers: usize,
    allocated: AtomicUsize,
    /// Buffers handed out and not yet returned.
    outstanding: AtomicUsize,
    /// Every allocation, freed when the pool is dropped.
    owned: Mutex<Vec<NonNull<u8>>>,
}

// SAFETY: the pool hands out raw buffers to exactly one owner at a time (CUPTI, then the
// collector); the pointers themselves are plain heap addresses.
unsafe impl Send for BufferPool {}
// SAFETY: as above; shared access goes through the lock-free queue and the mutex.
unsafe impl Sync for BufferPool {}

impl BufferPool {
    /// Preallocates `initial` buffers of `buffer_bytes` (rounded up to 8), allowing growth to
    /// `max_buffers`.
    pub(crate) fn new(initial: usize, max_buffers: usize, buffer_bytes: usize) -> Self {
        let buffer_bytes = buffer_bytes.div_ceil(ALIGN) * ALIGN;
        let max_buffers = max_buffers.max(initial).max(1);
        let pool = BufferPool {
            free: ArrayQueue::new(max_buffers),
            buffer_bytes,
            max_buffers,
            allocated: AtomicUsize::new(0),
            outstanding: AtomicUsize::new(0),
            owned: Mutex::new(Vec::with_capacity(max_buffers)),
        };
        for _ in 0..initial {
            if let Some(b) = pool.allocate() {
                let _ = pool.free.push(b);
            }
        }
        pool
    }

    /// Bytes per buffer.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Most buffers the pool may hold.
    #[cfg(test)]
    fn max_buffers(&self) -> usize {
        self.max_buffers
    }

    /// True when at most one more buffer can be handed out (free or by growth): CUPTI is
    /// about to be refused and records to be dropped unless buffers come back.
    pub(crate) fn nearly_exhausted(&self) -> bool {
        self.outstanding() + 1 >= self.max_buffers
    }

    /// Buffers allocated so far.
    #[cfg(test)]
    fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// A free buffer, growing the pool when allowed. `None` means the request must be refused.
    /// The flag says whether this call allocated.
    pub(crate) fn take(&self) -> Option<(NonNull<u8>, bool)> {
        let taken = match self.free.pop() {
            Some(b) => Some((b, false)),
            None => self.allocate().map(|b| (b, true)),
        };
        if taken.is_some() {
            self.outstanding.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Buffers handed out and not yet returned.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Returns a buffer obtained from [`take`](Self::take), zeroing it first (see the module
    /// docs: CUPTI counts on buffers coming zeroed).
    pub(crate) fn give_back(&self, buf: NonNull<u8>) {
        // SAFETY: `buf` is one of this pool's allocations of `buffer_bytes`, handed back by its
        // only owner, so nothing else reads or writes it now.
        unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, self.buffer_bytes) };
        // The queue holds max_buffers, and no more than that many exist, so this cannot fail.
        let _ = self.free.push(buf);
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    fn allocate(&self) -> Option<NonNull<u8>> {
        let n = self.allocated.fetch_add(1, Ordering::Relaxed);
        if n >= self.max_buffers {
            self.allocated.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let layout = std::alloc::Layout::from_size_align(self.buffer_bytes, ALIGN).ok()?;
        // SAFETY: the layout has non-zero size (buffer_bytes >= 8).
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        self.owned.lock().push(ptr);
        Some(ptr)
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        if *self.outstanding.get_mut() != 0 {
            // CUPTI may still write into a buffer it holds: leaking is the only safe choice.
            return;
        }
        let Ok(layout) = std::alloc::Layout::from_size_align(self.buffer_bytes, ALIGN) else {
            return;
        };
        for ptr in self.owned.get_mut().drain(..) {
            // SAFETY: allocated in `allocate` with this layout; by the time the pool drops, CUPTI
            // has returned every buffer (the profiler flushes before releasing the pool).
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of the buffer.
    fn bytes(pool: &BufferPool, b: NonNull<u8>) -> &[u8] {
        // SAFETY: `b` is a live buffer of `buffer_bytes` from `pool`, not handed to anyone else.
        unsafe { std::slice::from_raw_parts(b.as_ptr(), pool.buffer_bytes()) }
    }

    #[test]
    fn buffers_come_zeroed_new_and_after_being_given_back() {
        let pool = BufferPool::new(1, 2, 4096);
        let (a, _) = pool.take().unwrap();
        let (b, grew) = pool.take().unwrap();
        assert!(grew);
        assert!(bytes(&pool, a).iter().all(|&x| x == 0), "preallocated");
        assert!(bytes(&pool, b).iter().all(|&x| x == 0), "grown");
        for buf in [a, b] {
            // SAFETY: as in `bytes`.
            unsafe { std::ptr::write_bytes(buf.as_ptr(), 0xA5, pool.buffer_bytes()) };
            pool.give_back(buf);
        }
        let (c, _) = pool.take().unwrap();
        let (d, _) = pool.take().unwrap();
        for buf in [c, d] {
            assert!(bytes(&pool, buf).iter().all(|&x| x == 0), "recycled");
            pool.give_back(buf);
        }
    }

    #[test]
    fn buffers_are_aligned_recycled_grown_to_the_limit_then_refused() {
        let pool = BufferPool::new(2, 3, 1000);
        assert_eq!(pool.buffer_bytes(), 1000);
        assert_eq!(pool.allocated(), 2);
        let (a, grew_a) = pool.take().unwrap();
        let (b, _) = pool.take().unwrap();
        assert!(!grew_a);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        // SAFETY: the buffer is 1000 writable bytes owned by this test until given back.
        unsafe { std::ptr::write_bytes(a.as_ptr(), 0xAB, 1000) };
        let (c, grew_c) = pool.take().unwrap();
        assert!(grew_c, "the third take grows the pool");
        assert!(
            pool.take().is_none(),
            "the fourth is refused: the limit is 3"
        );
        assert_eq!(pool.outstanding(), 3);
        pool.give_back(a);
        pool.give_back(b);
        pool.give_back(c);
        assert_eq!(pool.outstanding(), 0);
        let (again, grew) = pool.take().unwrap();
        assert!(!grew);
        pool.give_back(again);
    }

    #[test]
    fn the_pool_is_nearly_exhausted_when_one_buffer_is_left() {
        let pool = BufferPool::new(1, 3, 64);
        assert_eq!(pool.max_buffers(), 3);
        assert!(!pool.nearly_exhausted());
        let (a, _) = pool.take().unwrap();
        assert!(!pool.nearly_exhausted(), "two left (one by growth)");
        let (b, _) = pool.take().unwrap();
        assert!(pool.nearly_exhausted(), "one left");
        pool.give_back(a);
        assert!(!pool.nearly_exhausted());
        pool.give_back(b);
    }
}
