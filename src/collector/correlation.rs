//! Values kept by CUPTI correlation id, for the collector's per-call bookkeeping.
//!
//! CUPTI numbers API calls from one process-wide counter, so the ids the collector holds at any
//! time are a band of nearly consecutive numbers: calls made since the oldest iteration not yet
//! written, with gaps for the calls it does not keep. [`CorrelationMap`] finds an id at index
//! `id mod capacity` of a table (an index and a compare per lookup) instead of hashing it: a
//! hash insert, lookup and removal per launch were a tenth of the collector's time per captured
//! launch (`benches/decode.rs`). While the band is narrower than the table no two ids meet; the
//! table doubles when they do, up to [`MAX_SLOTS`], and past that the newcomer goes to a hash map,
//! so nothing is lost, only slower.

use rustc_hash::FxHashMap;

/// Slots the table starts with.
const MIN_SLOTS: usize = 1 << 12;

/// Slots the table grows to at most: 2^18 ids, about 10 MiB of 32-byte values. At 200 000 calls a
/// second that is 1.3 s of calls, more than rows wait for their records.
pub(crate) const MAX_SLOTS: usize = 1 << 18;

#[derive(Debug, Clone, Copy)]
struct Slot<V> {
    id: u32,
    used: bool,
    value: V,
}

/// A map from correlation id to `V`, fast for ids in a band of nearly consecutive numbers.
///
/// Invariant: an id is in its slot (`id mod slots.len()`) or in `far`, never both.
#[derive(Debug)]
pub(crate) struct CorrelationMap<V> {
    /// Length a power of two; empty until the first insert.
    slots: Vec<Slot<V>>,
    far: FxHashMap<u32, V>,
    max_slots: usize,
}

impl<V: Copy + Default> Default for CorrelationMap<V> {
    fn default() -> Self {
        Self::with_max_slots(MAX_SLOTS)
    }
}

impl<V: Copy + Default> CorrelationMap<V> {
    /// A map whose table grows to at most `max_slots` (a power of two; tests use small ones).
    pub(crate) fn with_max_slots(max_slots: usize) -> Self {
        assert!(max_slots.is_power_of_two(), "a power of two");
        CorrelationMap {
            slots: Vec::new(),
            far: FxHashMap::default(),
            max_slots,
        }
    }

    #[inline]
    fn index(&self, id: u32) -> usize {
        id as usize & (self.slots.len().wrapping_sub(1))
    }

    /// The value of `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<V> {
        if let Some(s) = self.slots.get(self.index(id)) {
            if s.used && s.id == id {
                return Some(s.value);
            }
        }
        if self.far.is_empty() {
            None
        } else {
            self.far.get(&id).copied()
        }
    }

    /// Changes the value of `id` (made `V::default()` where missing) and returns it.
    #[inline]
    pub(crate) fn update(&mut self, id: u32, change: impl FnOnce(&mut V)) -> V {
        let i = self.index(id);
        if let Some(s) = self.slots.get_mut(i) {
            if s.used && s.id == id {
                // Made in registers and stored whole: changed in place, a value read back right
                // after waits on the narrower stores that wrote it (a stalled store-to-load
                // forward, 14 % of the collector's time per captured launch once).
                let mut value = s.value;
                change(&mut value);
                s.value = value;
                return value;
            }
            if !s.used && self.far.is_empty() {
                let mut value = V::default();
                change(&mut value);
                *s = Slot {
                    id,
                    used: true,
                    value,
                };
                return value;
            }
        }
        self.update_slow(id, change)
    }

    /// [`update`](Self::update) where `id` is not in its slot: it may be in `far`, or meet
    /// another id in its slot, or the table is still empty.
    #[inline(never)]
    fn update_slow(&mut self, id: u32, change: impl FnOnce(&mut V)) -> V {
        if let Some(value) = self.far.get_mut(&id) {
            change(value);
            return *value;
        }
        let mut value = V::default();
        change(&mut value);
        loop {
            if self.slots.is_empty() {
                self.grow();
            }
            let i = self.index(id);
            let s = &mut self.slots[i];
            if !s.used {
                *s = Slot {
                    id,
                    used: true,
                    value,
                };
                return value;
            }
            if self.slots.len() >= self.max_slots {
                self.far.insert(id, value);
                return value;
            }
            self.grow();
        }
    }

    /// Doubles the table (or makes it), placing every id again; an id that meets another in the
    /// new table goes to `far`.
    #[cold]
    fn grow(&mut self) {
        let len = (self.slots.len() * 2).clamp(MIN_SLOTS.min(self.max_slots), self.max_slots);
        let empty = Slot {
            id: 0,
            used: false,
            value: V::default(),
        };
        let old = std::mem::replace(&mut self.slots, vec![empty; len]);
        for s in old.into_iter().filter(|s| s.used) {
            let i = self.index(s.id);
            if self.slots[i].used {
                self.far.insert(s.id, s.value);
            } else {
                self.slots[i] = s;
            }
        }
    }

    /// Removes `id`.
    #[inline]
    pub(crate) fn remove(&mut self, id: u32) {
        let i = self.index(id);
        if let Some(s) = self.slots.get_mut(i) {
            if s.used && s.id == id {
                s.used = false;
                return;
            }
        }
        if !self.far.is_empty() {
            self.far.remove(&id);
        }
    }

    /// Ids held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.used).count() + self.far.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(m: &mut CorrelationMap<u64>, id: u32, v: u64) {
        m.update(id, |x| *x = v);
    }

    #[test]
    fn a_band_of_ids_with_gaps_is_found_and_removed_without_the_hash_map() {
        let mut m = CorrelationMap::<u64>::default();
        // Every third id kept, ten in flight: the band never outgrows the first table.
        for id in (1..300_000u32).step_by(3) {
            set(&mut m, id, u64::from(id) * 3);
            assert_eq!(m.get(id), Some(u64::from(id) * 3));
            assert_eq!(m.get(id + 1), None, "a gap is empty");
            if id > 30 {
                m.remove(id - 30);
                assert_eq!(m.get(id - 30), None);
            }
        }
        assert_eq!(m.len(), 10);
        assert_eq!(m.slots.len(), MIN_SLOTS);
        assert!(m.far.is_empty());
    }

    #[test]
    fn updates_keep_values_in_any_order() {
        let mut m = CorrelationMap::<u64>::default();
        for id in [50u32, 40, 60, 45, 55] {
            set(&mut m, id, u64::from(id));
        }
        m.update(45, |v| *v += 1);
        m.update(41, |v| *v += 7);
        for (id, v) in [(50, 50), (40, 40), (60, 60), (45, 46), (55, 55), (41, 7)] {
            assert_eq!(m.get(id), Some(v), "id {id}");
        }
        for id in [40u32, 41, 45, 50, 55, 60] {
            m.remove(id);
            assert_eq!(m.get(id), None);
        }
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn ids_that_meet_grow_the_table_and_past_its_limit_go_to_the_hash_map() {
        // A band of 64 ids in a table of at most 16 slots: 48 of them in the hash map.
        let mut m = CorrelationMap::<u64>::with_max_slots(16);
        for id in 0..64u32 {
            set(&mut m, id, u64::from(id) + 100);
        }
        assert_eq!(m.slots.len(), 16);
        assert_eq!(m.far.len(), 48);
        assert_eq!(m.len(), 64, "nothing lost");
        for id in 0..64u32 {
            assert_eq!(m.get(id), Some(u64::from(id) + 100), "id {id}");
        }
        // An id in the hash map whose slot is free again still updates where it is, once.
        m.remove(0);
        m.update(16, |v| *v += 1);
        assert_eq!(m.get(16), Some(117));
        assert_eq!(m.len(), 63);
        for id in 1..64u32 {
            m.remove(id);
            assert_eq!(m.get(id), None, "id {id}");
        }
        assert_eq!(m.len(), 0);
        // Ids a table's length apart: the table doubles and both stay in it.
        let mut m = CorrelationMap::<u64>::default();
        set(&mut m, 7, 1);
        set(&mut m, 7 + MIN_SLOTS as u32, 2);
        assert_eq!(m.slots.len(), 2 * MIN_SLOTS);
        assert!(m.far.is_empty());
        assert_eq!((m.get(7), m.get(7 + MIN_SLOTS as u32)), (Some(1), Some(2)));
    }

    #[test]
    fn ids_wrapping_past_u32_max_are_kept() {
        let mut m = CorrelationMap::<u64>::default();
        let start = u32::MAX - 5;
        for i in 0..12u32 {
            set(&mut m, start.wrapping_add(i), u64::from(i));
        }
        assert!(m.far.is_empty(), "consecutive across the wrap");
        for i in 0..12u32 {
            assert_eq!(m.get(start.wrapping_add(i)), Some(u64::from(i)));
            m.remove(start.wrapping_add(i));
        }
        assert_eq!(m.len(), 0);
    }
}
