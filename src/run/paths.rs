//! Interned scope paths: each `parent/name` gets a small id once, which scopes, calls and
//! records carry instead of the text.

use std::collections::HashMap;

/// Interned scope paths: id 0 is the root, `(unscoped)`.
#[derive(Default)]
pub(crate) struct PathTable {
    inner: parking_lot::RwLock<PathTableInner>,
}

#[derive(Default)]
struct PathTableInner {
    by_key: HashMap<(u32, String), u32>,
    /// Index = id - 1: (parent id, full path).
    paths: Vec<(u32, String)>,
}

pub(crate) use crate::ledger::UNSCOPED;

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
        let full = match parent {
            0 => name.to_string(),
            p => format!("{}/{}", inner.paths[(p - 1) as usize].1, name),
        };
        inner.paths.push((parent, full));
        let id = inner.paths.len() as u32;
        inner.by_key.insert(key, id);
        id
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
