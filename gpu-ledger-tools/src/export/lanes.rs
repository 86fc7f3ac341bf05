//! The lanes of one trace track: slices on one track must nest, so a slice that overlaps an
//! earlier one goes to the first lane free at its start. A scan of every lane per slice is
//! quadratic when slices never free a lane (device windows that do not advance gave one lane
//! per row: 1 024 s for a million rows), so the lanes' ends are kept in a tree of minima that
//! finds the first free lane in logarithmic time, the same lane the scan found.

/// The end of the last slice on each lane, and a tree of their minima.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    /// Lanes in use.
    len: usize,
    /// Leaves from `cap`: the end of each lane (`i128::MAX` past `len`); node `n` holds the
    /// minimum of nodes `2n` and `2n + 1`. Empty until the first slice.
    tree: Vec<i128>,
}

impl Lanes {
    fn cap(&self) -> usize {
        self.tree.len() / 2
    }

    /// Sets lane `lane`'s end and the minima above it.
    fn set(&mut self, lane: usize, end: i128) {
        let mut n = self.cap() + lane;
        self.tree[n] = end;
        while n > 1 {
            n /= 2;
            self.tree[n] = self.tree[2 * n].min(self.tree[2 * n + 1]);
        }
    }

    /// Doubles the leaves (at least 8), keeping the lanes' ends.
    fn grow(&mut self) {
        let old: Vec<i128> = (0..self.len).map(|i| self.tree[self.cap() + i]).collect();
        let cap = (self.cap() * 2).max(8);
        self.tree = vec![i128::MAX; 2 * cap];
        for (i, end) in old.into_iter().enumerate() {
            self.set(i, end);
        }
    }

    /// The first lane free at `start` (its last slice ended at or before it), now busy until
    /// `end`; a new lane when none is free.
    pub(crate) fn take(&mut self, start: i128, end: i128) -> usize {
        let lane = if self.len > 0 && self.tree[1] <= start {
            // Down the tree, left first: the lowest lane whose end is at or before `start`.
            let mut n = 1;
            while n < self.cap() {
                n = if self.tree[2 * n] <= start {
                    2 * n
                } else {
                    2 * n + 1
                };
            }
            n - self.cap()
        } else {
            if self.len == self.cap() {
                self.grow();
            }
            self.len += 1;
            self.len - 1
        };
        self.set(lane, end);
        lane
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scan the tree replaces.
    fn scan(lanes: &mut Vec<i128>, start: i128, end: i128) -> usize {
        let lane = match lanes.iter().position(|&last| last <= start) {
            Some(k) => k,
            None => {
                lanes.push(i128::MIN);
                lanes.len() - 1
            }
        };
        lanes[lane] = end;
        lane
    }

    #[test]
    fn the_tree_finds_the_lane_the_scan_found() {
        let mut rng = crate::analysis::rng::SplitMix64(7);
        let (mut tree, mut list) = (Lanes::default(), Vec::new());
        for _ in 0..20_000 {
            let start = (rng.next_u64() % 1000) as i128;
            let end = start + (rng.next_u64() % 50) as i128;
            assert_eq!(tree.take(start, end), scan(&mut list, start, end));
        }
    }

    #[test]
    fn slices_that_never_free_a_lane_are_not_quadratic() {
        let mut lanes = Lanes::default();
        let t = std::time::Instant::now();
        for i in 0..200_000 {
            assert_eq!(lanes.take(0, 10), i);
        }
        // The scan took minutes for these in a debug build.
        assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    }
}
