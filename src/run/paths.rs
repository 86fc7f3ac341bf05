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
