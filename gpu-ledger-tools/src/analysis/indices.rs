//! Iteration indices kept as ascending runs of consecutive values ([`IndexRuns`]), so that a
//! list of the rows left out, used or warned about takes memory for its gaps, not its rows.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Iteration indices as ascending runs of consecutive values: a million consecutive indices take
/// one run. Adding an index twice keeps it once, in any order. Written as `3, 5–9` (or `none`),
/// and serialized as the plain list of indices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Vec<u64>", from = "Vec<u64>")]
pub struct IndexRuns {
    runs: Vec<(u64, u64)>,
    len: usize,
}

impl IndexRuns {
    /// Adds `i`: at the end in constant time when it is the largest yet (ledger order).
    pub fn push(&mut self, i: u64) {
        let Some(last) = self.runs.last_mut() else {
            self.runs.push((i, i));
            self.len = 1;
            return;
        };
        if i > last.1 {
            if i == last.1 + 1 {
                last.1 = i;
            } else {
                self.runs.push((i, i));
            }
            self.len += 1;
            return;
        }
        let p = self.runs.partition_point(|r| r.1 < i);
        let (start, end) = self.runs[p];
        if start <= i {
            return;
        }
        self.len += 1;
        let joins_next = i + 1 == start;
        let joins_prev = p > 0 && self.runs[p - 1].1 + 1 == i;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.runs[p - 1].1 = end;
                self.runs.remove(p);
            }
            (true, false) => self.runs[p - 1].1 = i,
            (false, true) => self.runs[p].0 = i,
            (false, false) => self.runs.insert(p, (i, i)),
        }
    }

    /// Number of indices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().flat_map(|&(a, b)| a..=b)
    }

    /// The runs `(first, last)`, ascending and apart.
    pub fn runs(&self) -> &[(u64, u64)] {
        &self.runs
    }

    /// How many indices lie in `first..=last`.
    pub fn count_in(&self, first: u64, last: u64) -> usize {
        self.runs
            .iter()
            .filter(|r| r.0 <= last && r.1 >= first)
            .map(|&(a, b)| (b.min(last) - a.max(first)) as usize + 1)
            .sum()
    }
}

impl fmt::Display for IndexRuns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.runs.is_empty() {
            return f.write_str("none");
        }
        for (n, &(a, b)) in self.runs.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}–{b}")?;
            }
        }
        Ok(())
    }
}

impl FromIterator<u64> for IndexRuns {
    fn from_iter<T: IntoIterator<Item = u64>>(iter: T) -> Self {
        let mut r = Self::default();
        iter.into_iter().for_each(|i| r.push(i));
        r
    }
}

impl From<Vec<u64>> for IndexRuns {
    fn from(v: Vec<u64>) -> Self {
        v.into_iter().collect()
    }
}

impl From<IndexRuns> for Vec<u64> {
    fn from(r: IndexRuns) -> Self {
        r.iter().collect()
    }
}

impl<const N: usize> PartialEq<[u64; N]> for IndexRuns {
    fn eq(&self, other: &[u64; N]) -> bool {
        self.len == N && self.iter().eq(other.iter().copied())
    }
}

impl PartialEq<Vec<u64>> for IndexRuns {
    fn eq(&self, other: &Vec<u64>) -> bool {
        self.len == other.len() && self.iter().eq(other.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_count_compare_and_serialize_as_a_list() {
        let r: IndexRuns = [7, 1, 2, 3, 9, 8, 3].into_iter().collect();
        assert_eq!(r.runs(), &[(1, 3), (7, 9)]);
        assert_eq!(r.len(), 6);
        assert_eq!(r, [1, 2, 3, 7, 8, 9]);
        assert_eq!(r.count_in(2, 7), 3);
        assert_eq!(r.count_in(4, 6), 0);
        assert_eq!(r.to_string(), "1–3, 7–9");
        assert_eq!(IndexRuns::default().to_string(), "none");
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, "[1,2,3,7,8,9]");
        assert_eq!(serde_json::from_str::<IndexRuns>(&json).unwrap(), r);
    }
}
