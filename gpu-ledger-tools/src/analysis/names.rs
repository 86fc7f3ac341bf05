//! Names bounded as rows are: a program that names scopes dynamically (a request id, a layer
//! index) writes millions of distinct scope paths or kernel names, and a table with one entry
//! per name grew without bound (6.7 GB for a million scope paths). Every table keyed by a name
//! keeps the first [`MAX_NAMES`] names it meets exactly, every figure of theirs from their first
//! row, and folds every later name into one bucket, `(other N names)`, whose figures are the
//! per-iteration sums of the names folded into it. [`NameFold`] counts those names and bounds
//! the device time any one of them had, so that the output can say whether a folded name could
//! belong among the names shown: a name seen first after the table filled is never shown on its
//! own, whatever its time, and the bound says how much time that can hide.
//!
//! The bound comes from a Space-Saving summary ([Metwally et al. 2005]) of the folded names'
//! times: [`HEAVY_SLOTS`] counters whose largest value is at least the total of every folded
//! name. The count of folded names is exact up to [`EXACT_DISTINCT`] and a HyperLogLog estimate
//! (relative error about 1.6 %) past it.
//!
//! [Metwally et al. 2005]: https://doi.org/10.1007/978-3-540-30570-5_27

use std::collections::{BTreeSet, HashMap, HashSet};

/// Names a table keeps apart; later names fold into `(other N names)`.
pub const MAX_NAMES: usize = 1000;

/// Counters of the Space-Saving summary of folded names' times.
pub const HEAVY_SLOTS: usize = 256;

/// Folded names counted exactly before the count becomes an estimate.
pub const EXACT_DISTINCT: usize = 65_536;

/// HyperLogLog's registers: 2^12, a relative error of 1.04/√4096, about 1.6 %.
const HLL_BITS: u32 = 12;

/// The key every table files folded names under, whatever their number; the text shown for it
/// is [`NameFold::label`].
pub const OTHER_NAMES: &str = "(other names)";

/// Whether `name` is the bucket of folded names (as a table keys it, or as it is shown).
pub fn is_other_names(name: &str) -> bool {
    name == OTHER_NAMES || (name.starts_with("(other ") && name.ends_with(" names)"))
}

/// 64 bits of `name`, fixed across runs (FNV-1a, then SplitMix64's finaliser for the high bits
/// HyperLogLog reads).
fn hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Which names a table keeps, the names it folded, and the bound on any one of them.
#[derive(Debug, Clone)]
pub struct NameFold {
    cap: usize,
    kept: HashSet<String>,
    exact: Option<HashSet<u64>>,
    registers: Vec<u8>,
    heavy: HashMap<String, u64>,
    by_weight: BTreeSet<(u64, String)>,
    folded_weight: u64,
}

impl Default for NameFold {
    fn default() -> Self {
        Self::with_cap(MAX_NAMES)
    }
}

impl NameFold {
    /// A table that keeps the first `cap` names (at least 1).
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            kept: HashSet::new(),
            exact: Some(HashSet::new()),
            registers: Vec::new(),
            heavy: HashMap::new(),
            by_weight: BTreeSet::new(),
            folded_weight: 0,
        }
    }

    /// Whether `name` is kept: a name already kept, or a new one while there is room.
    pub fn keeps(&mut self, name: &str) -> bool {
        if self.kept.contains(name) {
            return true;
        }
        // A name is folded only once the table is full, and it never empties: a name with
        // room left was never folded, so its figures are whole from its first row.
        if self.kept.len() < self.cap {
            self.kept.insert(name.to_string());
            return true;
        }
        false
    }

    /// The key a table files `name` under: the name when kept, else [`OTHER_NAMES`], with
    /// `weight` (its device time in this row) counted against the folded names.
    pub fn key<'a>(&mut self, name: &'a str, weight: u64) -> &'a str {
        if self.keeps(name) {
            name
        } else {
            self.fold(name, weight);
            OTHER_NAMES
        }
    }

    /// Counts one row's `weight` of a name the table does not keep.
    pub fn fold(&mut self, name: &str, weight: u64) {
        self.folded_weight = self.folded_weight.saturating_add(weight);
        self.count_distinct(name);
        if let Some(&w) = self.heavy.get(name) {
            self.by_weight.remove(&(w, name.to_string()));
            let w = w.saturating_add(weight);
            self.heavy.insert(name.to_string(), w);
            self.by_weight.insert((w, name.to_string()));
            return;
        }
        // Space-Saving: a new name takes the smallest counter's slot and its count, so that
        // every counter stays at least its name's true total.
        let floor = if self.heavy.len() >= HEAVY_SLOTS {
            match self.by_weight.pop_first() {
                Some((w, old)) => {
                    self.heavy.remove(&old);
                    w
                }
                None => 0,
            }
        } else {
            0
        };
        let w = floor.saturating_add(weight);
        self.heavy.insert(name.to_string(), w);
        self.by_weight.insert((w, name.to_string()));
    }

    fn count_distinct(&mut self, name: &str) {
        let h = hash(name);
        if self.registers.is_empty() {
            self.registers = vec![0; 1 << HLL_BITS];
        }
        let slot = (h >> (64 - HLL_BITS)) as usize;
        let rank = ((h << HLL_BITS) | (1 << (HLL_BITS - 1))).leading_zeros() as u8 + 1;
        self.registers[slot] = self.registers[slot].max(rank);
        if let Some(set) = &mut self.exact {
            set.insert(h);
            if set.len() > EXACT_DISTINCT {
                self.exact = None;
            }
        }
    }

    /// Names folded: exact up to [`EXACT_DISTINCT`], estimated past it.
    pub fn folded(&self) -> u64 {
        match &self.exact {
            Some(set) => set.len() as u64,
            None => self.estimate(),
        }
    }

    /// Whether [`NameFold::folded`] is exact.
    pub fn folded_exactly(&self) -> bool {
        self.exact.is_some()
    }

    fn estimate(&self) -> u64 {
        let m = self.registers.len() as f64;
        let sum: f64 = self.registers.iter().map(|&r| (-f64::from(r)).exp2()).sum();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count() as f64;
        let e = if raw <= 2.5 * m && zeros > 0.0 {
            m * (m / zeros).ln()
        } else {
            raw
        };
        e.round() as u64
    }

    /// The most device time one folded name can have had (at least its true total), 0 when
    /// none was folded.
    pub fn max_folded_weight(&self) -> u64 {
        self.by_weight.last().map_or(0, |(w, _)| *w)
    }

    /// Device time of every folded name, summed.
    pub fn folded_weight(&self) -> u64 {
        self.folded_weight
    }

    /// Names kept.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// The bucket's name as shown: `(other 1234 names)`, or `(other ~1.2 M names)` estimated.
    pub fn label(&self) -> String {
        let n = self.folded();
        if self.folded_exactly() {
            format!("(other {n} names)")
        } else if n >= 1_000_000 {
            format!("(other ~{:.1} M names)", n as f64 / 1e6)
        } else {
            format!("(other ~{n} names)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_names_are_kept_and_the_rest_folded_and_counted() {
        let mut f = NameFold::with_cap(3);
        for n in ["a", "b", "c"] {
            assert_eq!(f.key(n, 10), n);
        }
        assert_eq!(f.key("d", 5), OTHER_NAMES);
        assert_eq!(f.key("a", 1), "a");
        assert_eq!(f.key("e", 7), OTHER_NAMES);
        assert_eq!(f.key("d", 5), OTHER_NAMES);
        assert_eq!((f.folded(), f.folded_weight()), (2, 17));
        assert_eq!(f.max_folded_weight(), 10);
        assert_eq!(f.label(), "(other 2 names)");
        assert!(is_other_names(&f.label()) && is_other_names(OTHER_NAMES));
    }

    #[test]
    fn the_bound_holds_past_the_slots_and_the_count_is_close() {
        let mut f = NameFold::with_cap(1);
        assert!(f.keeps("kept"));
        // One heavy name among 200 000 light ones, arriving in between.
        let n = 200_000u64;
        for i in 0..n {
            f.fold(&format!("light-{i}"), 1);
            if i % 1000 == 0 {
                f.fold("heavy", 100);
            }
        }
        assert!(f.max_folded_weight() >= 20_000, "{}", f.max_folded_weight());
        let est = f.folded() as f64;
        assert!(!f.folded_exactly());
        assert!((est / (n + 1) as f64 - 1.0).abs() < 0.05, "{est}");
        assert!(f.label().starts_with("(other ~"), "{}", f.label());
    }
}
