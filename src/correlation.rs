//! Values kept by CUPTI correlation id, for the collector's per-call bookkeeping.
//!
//! CUPTI numbers API calls from one process-wide counter, so the ids the collector holds at any
//! time are a band of consecutive numbers: every call made since the oldest iteration not yet
//! written. [`CorrelationMap`] keeps that band in a ring indexed by `id - base` (an index and a
//! load per lookup) instead of a hash map: a hash insert, lookup and removal per launch were a
//! fifth of the collector's time per captured launch (`benches/decode.rs`). Ids outside the band
//! (a call far older than the rest, or a band wider than [`SPAN`]) go to a hash map, so nothing
//! is lost, only slower.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Widest band of ids the ring holds: 2^18 ids, 8 MiB of 32-byte values at most. At 200 000
/// calls a second that is 1.3 s of calls, more than rows wait for their records; an id further
/// ahead moves the oldest ones to the hash map.
pub(crate) const SPAN: u32 = 1 << 18;

/// A map from correlation id to `V`, fast for ids in a band of nearly consecutive numbers.
///
/// Invariant: every id in `far` is behind `base` (in wrapping order), so an id is in the ring or
/// in `far`, never both: `base` only moves forward.
#[derive(Debug)]
pub(crate) struct CorrelationMap<V> {
    /// The id of `ring[0]`.
    base: u32,
    /// Values of ids `base..base + ring.len()`; holes (ids never inserted, or removed) are `None`.
    /// The front is never a hole.
    ring: VecDeque<Option<V>>,
    /// Ids behind `base`.
    far: FxHashMap<u32, V>,
    span: u32,
}

impl<V: Copy + Default> Default for CorrelationMap<V> {
    fn default() -> Self {
        Self::with_span(SPAN)
    }
}

impl<V: Copy + Default> CorrelationMap<V> {
    /// A map whose ring holds at most `span` ids (tests use small spans).
    pub(crate) fn with_span(span: u32) -> Self {
        assert!(
            span > 0 && span <= u32::MAX / 2,
            "span within half the id space"
        );
        CorrelationMap {
            base: 0,
            ring: VecDeque::new(),
            far: FxHashMap::default(),
            span,
        }
    }

    /// Where `id` is in the ring, if it is in the band.
    #[inline]
    fn offset(&self, id: u32) -> Option<usize> {
        let off = id.wrapping_sub(self.base) as usize;
        (off < self.ring.len()).then_some(off)
    }

    /// Whether `id` is behind the band (in wrapping order: up to half the id space behind).
    fn behind(&self, id: u32) -> bool {
        id.wrapping_sub(self.base) > u32::MAX / 2
    }

    /// The value of `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<V> {
        match self.offset(id) {
            Some(off) => self.ring[off],
            None if self.far.is_empty() => None,
            None => self.far.get(&id).copied(),
        }
    }

    /// Changes the value of `id` (made `V::default()` where missing) and returns it.
    #[inline]
    pub(crate) fn update(&mut self, id: u32, change: impl FnOnce(&mut V)) -> V {
        let off = id.wrapping_sub(self.base) as usize;
        let len = self.ring.len();
        if off < len {
            let slot = &mut self.ring[off];
            let mut value = slot.unwrap_or_default();
            change(&mut value);
            *slot = Some(value);
            value
        } else if len != 0 && off < self.span as usize {
            // A new call ahead of the band: the common case. Ids between (calls not kept, or
            // not here yet) are holes.
            if off > len {
                self.ring.resize(off, None);
            }
            let mut value = V::default();
            change(&mut value);
            self.ring.push_back(Some(value));
            value
        } else {
            self.update_outside(id, change)
        }
    }

    /// [`update`](Self::update) of an id outside the ring: the band grows to it, or it goes to
    /// `far`.
    #[inline(never)]
    fn update_outside(&mut self, id: u32, change: impl FnOnce(&mut V)) -> V {
        if self.ring.is_empty() && (self.far.is_empty() || !self.behind(id)) {
            // An empty band starts anywhere ahead (never behind: `far` ids stay behind `base`).
            self.base = id;
        }
        if self.behind(id) {
            let value = self.far.entry(id).or_default();
            change(value);
            return *value;
        }
        if id.wrapping_sub(self.base) >= self.span {
            self.slide_to(id);
            if self.ring.is_empty() {
                self.base = id;
            }
        }
        let off = id.wrapping_sub(self.base) as usize;
        if off >= self.ring.len() {
            self.ring.resize(off + 1, None);
        }
        let mut value = V::default();
        change(&mut value);
        self.ring[off] = Some(value);
        value
    }

    /// Moves the band forward until `id` fits in it: the oldest ids go to `far`.
    #[cold]
    fn slide_to(&mut self, id: u32) {
        let new_base = id.wrapping_sub(self.span - 1);
        while !self.ring.is_empty() && self.behind_of(self.base, new_base) {
            if let Some(Some(v)) = self.ring.pop_front() {
                self.far.insert(self.base, v);
            }
            self.base = self.base.wrapping_add(1);
        }
        self.trim_front();
    }

    /// Whether `a` is behind `b`.
    fn behind_of(&self, a: u32, b: u32) -> bool {
        a != b && b.wrapping_sub(a) <= u32::MAX / 2
    }

    /// Removes `id`.
    #[inline]
    pub(crate) fn remove(&mut self, id: u32) {
        match self.offset(id) {
            Some(0) => {
                self.ring[0] = None;
                self.trim_front();
            }
            Some(off) => self.ring[off] = None,
            None => {
                if !self.far.is_empty() {
                    self.far.remove(&id);
                }
            }
        }
    }

    /// Drops the holes at the front, moving `base` past them.
    fn trim_front(&mut self) {
        while let Some(None) = self.ring.front() {
            self.ring.pop_front();
            self.base = self.base.wrapping_add(1);
        }
    }

    /// Ids held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ring.iter().filter(|v| v.is_some()).count() + self.far.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(m: &mut CorrelationMap<u64>, id: u32, v: u64) {
        m.update(id, |x| *x = v);
    }

    #[test]
    fn ids_in_order_are_found_and_removed_and_the_ring_does_not_grow() {
        let mut m = CorrelationMap::<u64>::default();
        for id in 1..100_000u32 {
            set(&mut m, id, u64::from(id) * 3);
            assert_eq!(m.get(id), Some(u64::from(id) * 3));
            if id > 10 {
                m.remove(id - 10);
                assert_eq!(m.get(id - 10), None);
            }
        }
        assert_eq!(m.len(), 10);
        assert!(m.ring.len() <= 10, "ring {} long", m.ring.len());
        assert!(m.far.is_empty());
    }

    #[test]
    fn ids_out_of_order_holes_and_updates_keep_their_values() {
        let mut m = CorrelationMap::<u64>::default();
        for id in [50u32, 40, 60, 45, 55] {
            set(&mut m, id, u64::from(id));
        }
        // 40 came after 50 started the band: behind it, in the hash map.
        assert!(m.far.contains_key(&40));
        m.update(45, |v| *v += 1);
        m.update(41, |v| *v += 7);
        for (id, v) in [(50, 50), (40, 40), (60, 60), (45, 46), (55, 55), (41, 7)] {
            assert_eq!(m.get(id), Some(v), "id {id}");
        }
        assert_eq!(m.get(52), None, "a hole is empty");
        for id in [40u32, 41, 45, 50, 55, 60] {
            m.remove(id);
            assert_eq!(m.get(id), None);
        }
        assert_eq!(m.len(), 0);
        assert!(m.ring.is_empty());
    }

    #[test]
    fn a_band_wider_than_the_span_moves_the_oldest_ids_to_the_hash_map() {
        let mut m = CorrelationMap::<u64>::with_span(8);
        for id in 0..20u32 {
            set(&mut m, id, u64::from(id) + 100);
        }
        assert!(m.ring.len() <= 8);
        assert_eq!(m.len(), 20, "nothing lost");
        for id in 0..20u32 {
            assert_eq!(m.get(id), Some(u64::from(id) + 100), "id {id}");
        }
        // A jump far ahead keeps everything too.
        set(&mut m, 1_000_000, 7);
        assert_eq!(m.len(), 21);
        assert_eq!(m.get(3), Some(103));
        assert_eq!(m.get(1_000_000), Some(7));
        // Old ids still update in place, where they are.
        m.update(3, |v| *v += 1);
        assert_eq!(m.get(3), Some(104));
        for id in (0..20u32).chain([1_000_000]) {
            m.remove(id);
        }
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn ids_wrapping_past_u32_max_stay_in_the_ring() {
        let mut m = CorrelationMap::<u64>::default();
        let start = u32::MAX - 5;
        for i in 0..12u32 {
            set(&mut m, start.wrapping_add(i), u64::from(i));
        }
        assert!(m.far.is_empty(), "consecutive across the wrap");
        for i in 0..12u32 {
            assert_eq!(m.get(start.wrapping_add(i)), Some(u64::from(i)));
        }
        for i in 0..12u32 {
            m.remove(start.wrapping_add(i));
        }
        assert_eq!(m.len(), 0);
        assert!(m.ring.is_empty());
    }

    #[test]
    fn an_emptied_band_never_restarts_behind_the_hash_maps_ids() {
        let mut m = CorrelationMap::<u64>::default();
        set(&mut m, 100, 1);
        set(&mut m, 90, 2); // behind: far
        m.remove(100); // the ring is empty now
        set(&mut m, 80, 3); // behind base still: far, not a new band at 80
        set(&mut m, 95, 4);
        assert_eq!(m.get(90), Some(2));
        assert_eq!(m.get(80), Some(3));
        assert_eq!(m.get(95), Some(4));
        m.update(90, |v| *v += 10);
        assert_eq!(m.get(90), Some(12));
        for id in [80, 90, 95] {
            m.remove(id);
        }
        assert_eq!(m.len(), 0);
    }
}
