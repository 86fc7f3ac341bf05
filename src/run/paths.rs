//! Interned scope paths: each `parent/name` gets a small id once, which scopes, calls and
//! records carry instead of the text.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinct scope paths a run keeps apart: a program that names scopes by request id would
/// otherwise grow the table, every thread's cache and every row without bound. Past it, a new
/// path is recorded as [`OTHER_SCOPE_PATHS`], counted in the trailer.
pub(crate) const MAX_SCOPE_PATHS: usize = 16_384;

/// Interned scope paths: id 0 is the root, `(unscoped)`.
#[derive(Default)]
pub(crate) struct PathTable {
    inner: parking_lot::RwLock<PathTableInner>,
    /// Scopes recorded under [`OTHER_SCOPE_PATHS`].
    folded: AtomicU64,
}

#[derive(Default)]
struct PathTableInner {
    by_key: HashMap<(u32, String), u32>,
    /// Index = id - 1: (parent id, full path).
    paths: Vec<(u32, String)>,
}

pub(crate) use crate::ledger::{OTHER_SCOPE_PATHS, UNSCOPED};

impl PathTable {
    /// The id of `parent/name`, creating it on first use.
    pub(crate) fn intern(&self, parent: u32, name: &str) -> u32 {
        let key = (parent, name.to_string());
        if let Some(id) = self.inner.read().by_key.get(&key) {
            return *id;
        }
        let mut inner = self.inner.write();
        if let Some(id) = inner.by_key.get(&key) {
            return *id;
        }
        if inner.paths.len() >= MAX_SCOPE_PATHS {
            self.folded.fetch_add(1, Ordering::Relaxed);
            return Self::other(&mut inner);
        }
        let full = match parent {
            0 => name.to_string(),
            p => format!("{}/{}", inner.paths[(p - 1) as usize].1, name),
        };
        inner.paths.push((parent, full));
        let id = inner.paths.len() as u32;
        inner.by_key.insert(key, id);
        id
    }

    /// The id of [`OTHER_SCOPE_PATHS`], made past the bound.
    fn other(inner: &mut PathTableInner) -> u32 {
        let key = (0, OTHER_SCOPE_PATHS.to_string());
        if let Some(id) = inner.by_key.get(&key) {
            return *id;
        }
        inner.paths.push((0, OTHER_SCOPE_PATHS.to_string()));
        let id = inner.paths.len() as u32;
        inner.by_key.insert(key, id);
        id
    }

    /// Whether `id` is [`OTHER_SCOPE_PATHS`] (a thread does not cache a name folded there, so
    /// that each of its scopes is counted and its cache stays bounded).
    pub(crate) fn is_other(&self, id: u32) -> bool {
        id != 0 && self.path(id) == OTHER_SCOPE_PATHS
    }

    /// Scopes recorded under [`OTHER_SCOPE_PATHS`].
    pub(crate) fn folded(&self) -> u64 {
        self.folded.load(Ordering::Relaxed)
    }

    /// Full path of an id; `(unscoped)` for 0 or an unknown id.
    pub(crate) fn path(&self, id: u32) -> String {
        if id == 0 {
            return UNSCOPED.to_string();
        }
        self.inner
            .read()
            .paths
            .get((id - 1) as usize)
            .map_or_else(|| UNSCOPED.to_string(), |p| p.1.clone())
    }

    /// `path` nested under `base`: the scopes of `path` after those it shares with `base` from
    /// the root, interned one by one below `base`. `step/replay` and `forward/attention` give
    /// `step/replay/forward/attention`; `step` and `step/forward` give `step/forward` (no
    /// `step/step/forward` for a graph captured in the scope it is replayed in); base 0 gives
    /// `path` itself.
    pub(crate) fn nest(&self, base: u32, path: u32) -> u32 {
        let (shared, names) = {
            let inner = self.inner.read();
            let base_chain = inner.chain(base);
            let chain = inner.chain(path);
            let shared = base_chain
                .iter()
                .zip(&chain)
                .take_while(|(a, b)| a == b)
                .count();
            let names: Vec<String> = chain[shared..]
                .iter()
                .map(|&id| inner.name(id).to_string())
                .collect();
            (shared, names)
        };
        if shared == 0 && base == 0 {
            return path;
        }
        names
            .iter()
            .fold(base, |parent, name| self.intern(parent, name))
    }

    /// Parent id of an id (0 for top-level scopes and unknown ids).
    pub(crate) fn parent(&self, id: u32) -> u32 {
        if id == 0 {
            return 0;
        }
        self.inner
            .read()
            .paths
            .get((id - 1) as usize)
            .map_or(0, |p| p.0)
    }
}

impl PathTableInner {
    /// The ids from the outermost scope of `id`'s path down to `id` (empty for 0 and unknown
    /// ids).
    fn chain(&self, mut id: u32) -> Vec<u32> {
        let mut chain = Vec::new();
        while let Some((parent, _)) = id.checked_sub(1).and_then(|i| self.paths.get(i as usize)) {
            chain.push(id);
            id = *parent;
        }
        chain.reverse();
        chain
    }

    /// The name `id` was interned with: its full path after its parent's (a name may hold a
    /// `/` of its own, so the path is not split on it).
    fn name(&self, id: u32) -> &str {
        let Some((parent, full)) = id.checked_sub(1).and_then(|i| self.paths.get(i as usize))
        else {
            return "";
        };
        match parent
            .checked_sub(1)
            .and_then(|i| self.paths.get(i as usize))
        {
            Some((_, parent_full)) => full.get(parent_full.len() + 1..).unwrap_or(""),
            None => full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(t: &PathTable, p: &str) -> u32 {
        p.split('/').fold(0, |parent, name| t.intern(parent, name))
    }

    #[test]
    fn nest_puts_a_path_under_another_after_the_scopes_both_begin_with() {
        let t = PathTable::default();
        let replay = path(&t, "step/replay");
        let attention = path(&t, "forward/attention");
        let nested = t.nest(replay, attention);
        assert_eq!(t.path(nested), "step/replay/forward/attention");
        assert_eq!(nested, path(&t, "step/replay/forward/attention"));
        assert_eq!(t.nest(replay, attention), nested, "the same id each time");
        // Captured inside the scope it is replayed in, or in a sibling of the replay scope.
        let step = path(&t, "step");
        let forward = path(&t, "step/forward");
        assert_eq!(t.nest(step, forward), forward);
        assert_eq!(t.path(t.nest(replay, forward)), "step/replay/forward");
        assert_eq!(
            t.nest(forward, step),
            forward,
            "an outer capture adds nothing"
        );
        assert_eq!(t.nest(forward, forward), forward);
        assert_eq!(t.nest(0, attention), attention);
        assert_eq!(t.nest(replay, 0), replay);
        // A name with a slash of its own (an NVTX range) stays one scope.
        let odd = t.intern(0, "a/b");
        let under = t.nest(replay, odd);
        assert_eq!(t.path(under), "step/replay/a/b");
        assert_eq!(t.parent(under), replay);
    }
}
