//! A row's kernel groups: kernels of one name and launch shape, with their count and total,
//! shortest and longest duration, longest total first.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap as HashMap;

use crate::cupti::record::KernelRecord;
use crate::ledger::schema::{KernelGroup, LaunchShape};

/// What makes a kernel group: the name's text, the device and the launch shape.
#[derive(Hash, PartialEq, Eq)]
struct KernelKey {
    name: &'static str,
    device_id: u32,
    shape: LaunchShape,
}

impl KernelKey {
    fn of_group(name: &'static str, g: &KernelGroup) -> Self {
        KernelKey {
            name,
            device_id: g.device_id,
            shape: g.shape,
        }
    }
}

/// A hash of a kernel's name address (and length) and launch shape, read straight from its
/// record: hashing the name's text per kernel was a fifth of building a row, and a key struct
/// built on the stack to be hashed and compared cost as much again (loads of fields just stored).
fn shape_hash(k: &KernelRecord) -> u64 {
    // Each pair of u32 times its own odd constant (products that do not wait on each other),
    // folded: collisions only cost a comparison ([`KernelGroups::add`]).
    let pair = |a: u32, b: u32| u64::from(a) | (u64::from(b) << 32);
    let s = &k.shape;
    let words = [
        k.name.as_ptr() as u64,
        k.name.len() as u64 ^ (u64::from(k.device_id) << 32),
        pair(s.grid[0], s.grid[1]),
        pair(s.grid[2], s.block[0]),
        pair(s.block[1], s.block[2]),
        pair(s.cluster[0], s.cluster[1]),
        pair(s.cluster[2], s.registers_per_thread),
        pair(s.static_shared_bytes, s.dynamic_shared_bytes),
        u64::from(s.local_bytes_per_thread),
    ];
    const ODD: [u64; 9] = [
        0x9E37_79B9_7F4A_7C15,
        0xC2B2_AE3D_27D4_EB4F,
        0x1656_67B1_9E37_79F9,
        0xD6E8_FEB8_6659_FD93,
        0xFF51_AFD7_ED55_8CCD,
        0xC4CE_B9FE_1A85_EC53,
        0x94D0_49BB_1331_11EB,
        0xBF58_476D_1CE4_E5B9,
        0x8CB9_2BA7_2F3D_8DD7,
    ];
    words
        .iter()
        .zip(ODD)
        .fold(0u64, |h, (w, c)| h ^ w.wrapping_mul(c))
}

/// One kernel group of a row, with its name (copied into the group once, at the end) and the
/// next group whose [`shape_hash`] is the same.
struct KernelAcc {
    name: &'static str,
    group: KernelGroup,
    next: Option<usize>,
}

impl KernelAcc {
    /// Same name address and shape: the same group.
    fn holds(&self, k: &KernelRecord) -> bool {
        let g = &self.group;
        std::ptr::eq(self.name, k.name) && g.device_id == k.device_id && g.shape == k.shape
    }
}

/// A row's kernel groups ([`KernelKey`]), in the order of their first launch placed. Kernels
/// are grouped by name address, and the groups of one text at two addresses merged at the end.
pub(super) struct KernelGroups {
    /// The groups found last, direct-mapped by [`shape_hash`]'s top bits: the hash and the
    /// group's index plus one (0: none). A hit is a compare where `index` took a probe sequence
    /// per kernel. Kept across rows: an entry is used only where the group it names holds the
    /// kernel, and a row has one group per name address and shape, so an entry of an earlier
    /// row is either right or passed over.
    recent: Box<[(u64, u32); RECENT_GROUPS]>,
    /// [`shape_hash`] -> the first group with it.
    index: HashMap<u64, usize>,
    groups: Vec<KernelAcc>,
    /// Every name address seen (in any row), and whether its text was seen at another address
    /// too: decoded names are interned (one address per text), but a record built by hand may
    /// hold a text at another address.
    addresses: HashMap<(usize, usize), bool>,
    /// The first address of each text.
    texts: HashMap<&'static str, (usize, usize)>,
    /// A name of this row has its text at two addresses: groups are merged by text at the end.
    merge: bool,
}

/// Slots of [`KernelGroups::recent`] (a power of two, 8 KiB): a row's distinct kernel shapes,
/// up to a few hundred, mostly find their own. More slots measured no faster
/// (docs/measurements.md) and take more of a cache the collector shares with the buffers it
/// streams.
const RECENT_GROUPS: usize = 512;

impl Default for KernelGroups {
    fn default() -> Self {
        KernelGroups {
            recent: Box::new([(0, 0); RECENT_GROUPS]),
            index: HashMap::default(),
            groups: Vec::new(),
            addresses: HashMap::default(),
            texts: HashMap::default(),
            merge: false,
        }
    }
}

impl KernelGroups {
    #[inline]
    pub(super) fn add(&mut self, k: &KernelRecord) {
        let hash = shape_hash(k);
        // The top bits: a product's best mixed.
        let slot = (hash >> (64 - RECENT_GROUPS.trailing_zeros())) as usize;
        let (seen, group) = self.recent[slot];
        let i = match (group as usize).checked_sub(1) {
            Some(i) if seen == hash && self.groups.get(i).is_some_and(|g| g.holds(k)) => i,
            _ => {
                let i = self.find_or_add(k, hash);
                self.recent[slot] = (hash, i as u32 + 1);
                i
            }
        };
        let g = &mut self.groups[i].group;
        let d = k.end.saturating_sub(k.start);
        g.count += 1;
        g.local_bytes_total = g.local_bytes_total.max(k.local_bytes_total);
        g.total_ns += d;
        g.min_ns = g.min_ns.min(d);
        g.max_ns = g.max_ns.max(d);
        g.graph_launches += u64::from(k.graph_id != 0);
    }

    /// The index of `k`'s group (whose [`shape_hash`] is `hash`), made where missing.
    #[inline(never)]
    fn find_or_add(&mut self, k: &KernelRecord, hash: u64) -> usize {
        let groups = &mut self.groups;
        let mut new_group = |groups: &mut Vec<KernelAcc>| {
            let address = (k.name.as_ptr() as usize, k.name.len());
            let shared = match self.addresses.get(&address) {
                Some(&shared) => shared,
                None => {
                    let shared = match self.texts.entry(k.name) {
                        Entry::Vacant(e) => {
                            e.insert(address);
                            false
                        }
                        Entry::Occupied(e) => {
                            self.addresses.insert(*e.get(), true);
                            true
                        }
                    };
                    self.addresses.insert(address, shared);
                    shared
                }
            };
            self.merge |= shared;
            groups.push(KernelAcc {
                name: k.name,
                group: KernelGroup {
                    name: String::new(),
                    device_id: k.device_id,
                    shape: k.shape,
                    local_bytes_total: 0,
                    count: 0,
                    total_ns: 0,
                    min_ns: u64::MAX,
                    max_ns: 0,
                    graph_launches: 0,
                },
                next: None,
            });
            groups.len() - 1
        };
        match self.index.entry(hash) {
            Entry::Vacant(e) => *e.insert(new_group(groups)),
            Entry::Occupied(e) => {
                let mut i = *e.get();
                loop {
                    if groups[i].holds(k) {
                        break i;
                    }
                    match groups[i].next {
                        Some(next) => i = next,
                        None => {
                            let j = new_group(groups);
                            groups[i].next = Some(j);
                            break j;
                        }
                    }
                }
            }
        }
    }

    /// The groups, longest total time first, then by name; empties the table for the next row.
    pub(super) fn finish(&mut self) -> Vec<KernelGroup> {
        self.index.clear();
        if std::mem::take(&mut self.merge) {
            // One text at two addresses: its groups become one, in the order of first launch.
            let merged = merge_by_text(self.groups.drain(..).map(|a| (a.name, a.group)).collect());
            self.groups
                .extend(merged.into_iter().map(|(name, group)| KernelAcc {
                    name,
                    group,
                    next: None,
                }));
        }
        // Longest total first, then by name, device and shape: a total order, as a row has one
        // group per name text, device and shape. Sorting (total, name, index) rather than the
        // groups themselves: a group is 120 bytes.
        let groups = &self.groups;
        let mut order: Vec<(u64, &'static str, usize)> = groups
            .iter()
            .enumerate()
            .map(|(i, a)| (a.group.total_ns, a.name, i))
            .collect();
        order.sort_unstable_by(|a, b| {
            b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)).then_with(|| {
                let (x, y) = (&groups[a.2].group, &groups[b.2].group);
                (x.device_id, x.shape).cmp(&(y.device_id, y.shape))
            })
        });
        let out = order
            .iter()
            .map(|&(_, name, i)| KernelGroup {
                name: name.to_string(),
                ..self.groups[i].group.clone()
            })
            .collect();
        self.groups.clear();
        out
    }
}

/// Merges the groups whose keys differ only in the address of one name text, in the order of
/// their first launch.
fn merge_by_text(groups: Vec<(&'static str, KernelGroup)>) -> Vec<(&'static str, KernelGroup)> {
    let mut index: HashMap<KernelKey, usize> = HashMap::default();
    let mut out: Vec<(&'static str, KernelGroup)> = Vec::with_capacity(groups.len());
    for (name, g) in groups {
        match index.entry(KernelKey::of_group(name, &g)) {
            Entry::Occupied(e) => {
                let m = &mut out[*e.get()].1;
                m.count += g.count;
                m.local_bytes_total = m.local_bytes_total.max(g.local_bytes_total);
                m.total_ns += g.total_ns;
                m.min_ns = m.min_ns.min(g.min_ns);
                m.max_ns = m.max_ns.max(g.max_ns);
                m.graph_launches += g.graph_launches;
            }
            Entry::Vacant(e) => {
                e.insert(out.len());
                out.push((name, g));
            }
        }
    }
    out
}
