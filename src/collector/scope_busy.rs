//! A row's GPU intervals by scope path: each path's own busy time, and the busy time of what it
//! and the scopes below it launched.

use rustc_hash::FxHashMap as HashMap;

use crate::run::PathTable;
use gpu_ledger_format::intervals::BusyAccumulator;

/// A row's GPU intervals by scope path: each path's own, and those launched below it. Kept
/// across rows, with its entries' capacity.
#[derive(Default)]
pub(super) struct ScopeBusyTable {
    entries: Vec<ScopeIntervals>,
    /// Entries of earlier rows, emptied, for their capacity.
    spare: Vec<ScopeIntervals>,
    /// Paths with activities of their own, for ids below [`DENSE_PATH_IDS`]: entry + 1 by id
    /// (0: none). Interned path ids count up from 1, so an indexed load replaces a hash lookup
    /// per activity.
    own_dense: Vec<u32>,
    /// The other paths with activities of their own (external ids the path table does not know).
    own: HashMap<u32, usize>,
    /// Those paths' entries in the order of the first activity placed in each.
    own_order: Vec<usize>,
    /// Every path in `entries`: those and their ancestors.
    all: HashMap<u32, usize>,
}

struct ScopeIntervals {
    path_id: u32,
    /// The parent path's entry; none for top-level paths and the unscoped path.
    parent: Option<usize>,
    launches: u64,
    kernels: u64,
    own: BusyAccumulator,
    /// Set once an activity was placed below this path: `inclusive` is then kept.
    has_below: bool,
    /// Own intervals and those of the activities launched below, in placement order (nearly
    /// sorted, where a concatenation of each path's list was not); empty while `has_below` is
    /// not set, the same as `own` then.
    inclusive: BusyAccumulator,
}

/// Path ids below this are looked up by index in [`ScopeBusyTable`]: 16 KiB at most.
const DENSE_PATH_IDS: usize = 4096;

/// A path's busy time in a row: its own ([`ScopeBusyRows::own`]) or inclusive.
pub(super) struct ScopeBusy {
    pub(super) path_id: u32,
    pub(super) launches: u64,
    pub(super) kernels: u64,
    pub(super) busy_ns: u64,
}

pub(super) struct ScopeBusyRows {
    /// Paths with activities of their own.
    pub(super) own: Vec<ScopeBusy>,
    /// Those and their ancestors, with the activities below them.
    pub(super) inclusive: Vec<ScopeBusy>,
}

impl ScopeBusyTable {
    #[inline]
    pub(super) fn add(
        &mut self,
        paths: &PathTable,
        path_id: u32,
        interval: (u64, u64),
        kernel: bool,
    ) {
        let dense = (path_id as usize) < DENSE_PATH_IDS;
        let known = if dense {
            self.own_dense
                .get(path_id as usize)
                .and_then(|&i| i.checked_sub(1))
                .map(|i| i as usize)
        } else {
            self.own.get(&path_id).copied()
        };
        let i = match known {
            Some(i) => i,
            None => {
                let i = self.entry(paths, path_id);
                if dense {
                    let slot = path_id as usize;
                    if self.own_dense.len() <= slot {
                        self.own_dense.resize(slot + 1, 0);
                    }
                    self.own_dense[slot] = i as u32 + 1;
                } else {
                    self.own.insert(path_id, i);
                }
                self.own_order.push(i);
                i
            }
        };
        let e = &mut self.entries[i];
        e.launches += 1;
        e.kernels += u64::from(kernel);
        e.own.push(interval);
        if e.has_below {
            e.inclusive.push(interval);
        }
        let mut up = e.parent;
        while let Some(j) = up {
            let a = &mut self.entries[j];
            if !a.has_below {
                a.has_below = true;
                a.inclusive.clone_from(&a.own);
            }
            a.inclusive.push(interval);
            up = a.parent;
        }
    }

    /// The entry of `path_id`, made with its ancestors' where missing.
    fn entry(&mut self, paths: &PathTable, path_id: u32) -> usize {
        if let Some(&i) = self.all.get(&path_id) {
            return i;
        }
        let parent = match path_id {
            0 => 0,
            p => paths.parent(p),
        };
        let parent = (parent != 0).then(|| self.entry(paths, parent));
        let mut e = self.spare.pop().unwrap_or_else(|| ScopeIntervals {
            path_id,
            parent,
            launches: 0,
            kernels: 0,
            own: BusyAccumulator::default(),
            has_below: false,
            inclusive: BusyAccumulator::default(),
        });
        e.path_id = path_id;
        e.parent = parent;
        self.entries.push(e);
        let i = self.entries.len() - 1;
        self.all.insert(path_id, i);
        i
    }

    /// The busy times; empties the table for the next row.
    pub(super) fn finish(&mut self) -> ScopeBusyRows {
        let mut own_ns = Vec::with_capacity(self.entries.len());
        let mut inclusive_ns = Vec::with_capacity(self.entries.len());
        for e in &mut self.entries {
            let own = e.own.summary().map_or(0, |b| b.busy_ns);
            let inclusive = if e.has_below {
                e.inclusive.summary().map_or(0, |b| b.busy_ns)
            } else {
                own
            };
            own_ns.push(own);
            inclusive_ns.push(inclusive);
        }
        let entries = &self.entries;
        let busy = |i: usize, ns: &[u64]| ScopeBusy {
            path_id: entries[i].path_id,
            launches: entries[i].launches,
            kernels: entries[i].kernels,
            busy_ns: ns[i],
        };
        // Every entry is a path with activities of its own or an ancestor of one.
        let rows = ScopeBusyRows {
            own: self.own_order.iter().map(|&i| busy(i, &own_ns)).collect(),
            inclusive: (0..entries.len()).map(|i| busy(i, &inclusive_ns)).collect(),
        };
        for &i in &self.own_order {
            if let Some(slot) = self.own_dense.get_mut(self.entries[i].path_id as usize) {
                *slot = 0;
            }
        }
        for mut e in self.entries.drain(..) {
            e.launches = 0;
            e.kernels = 0;
            e.own.clear();
            e.has_below = false;
            e.inclusive.clear();
            self.spare.push(e);
        }
        self.own.clear();
        self.own_order.clear();
        self.all.clear();
        rows
    }
}
