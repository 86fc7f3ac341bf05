//! A thread's hand-over to the collector: a single-producer ring the thread writes without a lock,
//! and an overflow vector for what finds the ring full, so that nothing is dropped when the
//! collector falls behind. Closed scopes and captured API calls travel this way.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Keys handed out to threads in order of first use; 0 is never one.
static NEXT_THREAD_KEY: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_KEY: Cell<u64> = const { Cell::new(0) };
}

/// A key of the calling thread, unique in the process and stable for the thread's life (0 when
/// the thread is exiting).
pub(crate) fn thread_key() -> u64 {
    THREAD_KEY
        .try_with(|k| {
            if k.get() == 0 {
                k.set(NEXT_THREAD_KEY.fetch_add(1, Ordering::Relaxed));
            }
            k.get()
        })
        .unwrap_or(0)
}

/// The collector's end of one thread's hand-over. Outlives the thread: what the thread sent
/// before exiting is still drained.
pub(crate) struct ThreadSlot<T> {
    ring: parking_lot::Mutex<rtrb::Consumer<T>>,
    overflow: parking_lot::Mutex<Vec<T>>,
}

impl<T> ThreadSlot<T> {
    /// A slot whose ring holds `capacity` items, and the sending end for its thread.
    pub(crate) fn new(capacity: usize) -> (Arc<ThreadSlot<T>>, SlotSender<T>) {
        let (producer, consumer) = rtrb::RingBuffer::new(capacity);
        let slot = Arc::new(ThreadSlot {
            ring: parking_lot::Mutex::new(consumer),
            overflow: parking_lot::Mutex::new(Vec::new()),
        });
        let sender = SlotSender {
            producer,
            slot: slot.clone(),
        };
        (slot, sender)
    }

    /// Moves every item sent so far into `out`: the ring's, then the overflow's. Their relative
    /// order is not kept, and need not be: a scope record and a captured call carry what places
    /// them (their iteration).
    pub(crate) fn drain_into(&self, out: &mut Vec<T>) {
        self.drain_map_into(out, |item| item);
    }

    /// As [`drain_into`](Self::drain_into), each item converted by `f` on the way.
    pub(crate) fn drain_map_into<U>(&self, out: &mut Vec<U>, mut f: impl FnMut(T) -> U) {
        {
            let mut ring = self.ring.lock();
            let n = ring.slots();
            if let Ok(chunk) = ring.read_chunk(n) {
                out.extend(chunk.into_iter().map(&mut f));
            }
        }
        let mut overflow = self.overflow.lock();
        if !overflow.is_empty() {
            out.extend(overflow.drain(..).map(f));
        }
    }

    /// Items waiting in the overflow vector (tests).
    #[cfg(test)]
    pub(crate) fn overflowed(&self) -> usize {
        self.overflow.lock().len()
    }
}

/// The writing end of a [`ThreadSlot`], owned by its thread.
pub(crate) struct SlotSender<T> {
    producer: rtrb::Producer<T>,
    slot: Arc<ThreadSlot<T>>,
}

impl<T> SlotSender<T> {
    /// Hands an item to the collector: a store and a release store into the ring, or, when the
    /// ring is full, a lock of the overflow vector.
    #[inline]
    pub(crate) fn send(&mut self, item: T) {
        if let Err(rtrb::PushError::Full(item)) = self.producer.push(item) {
            self.spill(item);
        }
    }

    /// Out of line: the sender's common path stays short (see `scope::RecentNames`).
    #[cold]
    #[inline(never)]
    fn spill(&self, item: T) {
        self.slot.overflow.lock().push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_spills_into_the_overflow_and_nothing_is_lost() {
        const CAPACITY: usize = 64;
        let (slot, mut sender) = ThreadSlot::new(CAPACITY);
        let n = 3 * CAPACITY as u32 + 7;
        for id in 0..n {
            sender.send(id);
        }
        assert_eq!(slot.overflowed(), n as usize - CAPACITY);
        let mut out = Vec::new();
        slot.drain_into(&mut out);
        assert_eq!(out, (0..n).collect::<Vec<_>>());
        // Drained: the whole ring takes items again, and a second drain gives only those.
        for id in 0..CAPACITY as u32 {
            sender.send(n + id);
        }
        assert_eq!(slot.overflowed(), 0);
        out.clear();
        slot.drain_into(&mut out);
        assert_eq!(out.len(), CAPACITY);
        assert_eq!(out[0], n);
    }

    #[test]
    fn items_sent_before_the_thread_exits_are_still_drained() {
        let (slot, mut sender) = ThreadSlot::new(16);
        std::thread::spawn(move || {
            for id in 0..10u32 {
                sender.send(id);
            }
        })
        .join()
        .unwrap();
        let mut out = Vec::new();
        slot.drain_into(&mut out);
        assert_eq!(out.len(), 10);
    }
}
