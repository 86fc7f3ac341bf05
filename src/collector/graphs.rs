//! CUDA graphs' nodes in the scopes they were captured in. A graph launch is one API call, and
//! CUPTI gives every node's GPU record that call's correlation id: through the call alone, a
//! whole captured step would land in the scope open where the graph was replayed. Each record
//! also carries its node's id, so the collector keeps, per node of every live graph, the scope
//! path open on the thread that captured (or added) it, and follows the clones an instantiation
//! makes, whose ids are the ones the records carry.
//!
//! A node's record goes to its capture path nested under its launch's path
//! ([`PathTable::nest`](crate::run::PathTable::nest): `step/replay` and `forward/attention` give
//! `step/replay/forward/attention`), attributed `graph_capture`. A node whose capture was not seen
//! (the graph was captured before the profiler started) stays in its launch's scope, attributed
//! `graph_launch`, with one warning naming the remedy.
//!
//! The map holds what live graphs hold: a destroy (of a node, a graph or an executable graph) is
//! applied once the row of the iteration it was made in is written, since a replay just before
//! it may still have records to come; a run that captures a fresh graph every iteration keeps a
//! constant number of entries. [`MAX_GRAPH_NODES`] bounds it whatever CUPTI reports.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use super::attribution::CallSource;
use super::Collector;
use crate::cupti::calls::graphs::{GraphEvent, Owner};
use crate::cupti::calls::Attribution;
use crate::ledger::schema::GraphCounts;
use crate::run::{PathTable, RunState};

/// Node entries the map holds at most (captured graphs' and executable graphs' nodes together):
/// about 40 MiB. Nodes past it are counted and their records stay in their launch's scope.
pub(super) const MAX_GRAPH_NODES: usize = 1 << 20;

/// An owner's list of nodes is pruned of nodes destroyed one by one when it would grow past a
/// power of two at least this long, so that a long-lived graph whose nodes come and go keeps a
/// list as long as its nodes.
const PRUNE_FROM: usize = 64;

/// One node: the scope path it was captured in, and what holds it.
#[derive(Clone, Copy)]
struct Node {
    path_id: u32,
    owner: Option<Owner>,
}

/// What a destroy takes away once its iteration's row is written.
enum Retire {
    Node(u64),
    Owner(Owner),
}

/// The capture scopes of the nodes of live graphs, and what the row counts need of them.
pub(super) struct GraphScopes {
    /// Node id (captured, added, or cloned by an instantiation or `cuGraphClone`) -> its node.
    nodes: HashMap<u64, Node>,
    /// The nodes each graph and executable graph holds, for destroying them with it.
    owners: HashMap<Owner, Vec<u64>>,
    /// Destroys by the iteration they were made in, in arrival order.
    retire: VecDeque<(u64, Retire)>,
    /// Calls whose work stream capture put in a graph (correlation id -> iteration): no GPU
    /// record follows them, so their rows do not wait for one.
    captured_calls: HashMap<u32, u64>,
    /// (launch path, capture path) -> the nested path, interned once per pair.
    nested: HashMap<(u32, u32), u32>,
    /// Reused vector for draining the callbacks' events.
    batch: Vec<GraphEvent>,
    bound: usize,
    counts: GraphCounts,
    /// The warning of a node whose capture was not seen went to stderr once already.
    warned: bool,
}

impl Default for GraphScopes {
    fn default() -> Self {
        GraphScopes::with_bound(MAX_GRAPH_NODES)
    }
}

impl GraphScopes {
    /// A map that holds at most `bound` nodes.
    pub(super) fn with_bound(bound: usize) -> Self {
        GraphScopes {
            nodes: HashMap::default(),
            owners: HashMap::default(),
            retire: VecDeque::new(),
            captured_calls: HashMap::default(),
            nested: HashMap::default(),
            batch: Vec::new(),
            bound,
            counts: GraphCounts::default(),
            warned: false,
        }
    }

    /// One event of the graph callbacks, in the order its thread made them.
    pub(super) fn apply(&mut self, event: GraphEvent) {
        match event {
            GraphEvent::Created {
                node,
                graph,
                path_id,
                call,
                iteration,
            } => {
                self.counts.nodes_captured += 1;
                if call != 0 {
                    self.captured_calls.insert(call, iteration);
                }
                self.insert(node, path_id, graph.map(Owner::Graph));
            }
            // A clone of a node never seen forgets whatever the id held, rather than keep a
            // scope that is not its own.
            GraphEvent::Cloned {
                node,
                original,
                owner,
            } => match self.nodes.get(&original) {
                Some(o) => {
                    let path_id = o.path_id;
                    self.insert(node, path_id, owner);
                }
                None => {
                    self.nodes.remove(&node);
                }
            },
            GraphEvent::ExecCreated { exec, nodes } => {
                let owner = Owner::Exec(exec);
                for node in nodes {
                    if let Some(n) = self.nodes.get_mut(&node) {
                        n.owner = Some(owner);
                        self.own(owner, node);
                    }
                }
            }
            GraphEvent::NodeDestroyed { node, iteration } => {
                self.retire.push_back((iteration, Retire::Node(node)));
            }
            GraphEvent::GraphDestroyed { graph, iteration } => {
                self.retire
                    .push_back((iteration, Retire::Owner(Owner::Graph(graph))));
            }
            GraphEvent::ExecDestroyed { exec, iteration } => {
                self.retire
                    .push_back((iteration, Retire::Owner(Owner::Exec(exec))));
            }
        }
    }

    fn insert(&mut self, node: u64, path_id: u32, owner: Option<Owner>) {
        if self.nodes.len() >= self.bound && !self.nodes.contains_key(&node) {
            self.counts.nodes_not_kept += 1;
            return;
        }
        self.nodes.insert(node, Node { path_id, owner });
        if let Some(owner) = owner {
            self.own(owner, node);
        }
        let live = self.nodes.len() as u64;
        self.counts.nodes_live_peak = self.counts.nodes_live_peak.max(live);
    }

    /// Lists `node` under `owner`.
    fn own(&mut self, owner: Owner, node: u64) {
        let nodes = &self.nodes;
        let list = self.owners.entry(owner).or_default();
        if list.len() == list.capacity() && list.len() >= PRUNE_FROM {
            list.retain(|n| nodes.get(n).is_some_and(|e| e.owner == Some(owner)));
        }
        list.push(node);
    }

    /// Applies the destroys made in iterations up to `index`, whose rows are all written: no
    /// record of theirs is placed any more. Calls captured into a graph in them are forgotten
    /// too (their calls, if they ever come, are late).
    pub(super) fn retire_through(&mut self, index: u64) {
        while self.retire.front().is_some_and(|(it, _)| *it <= index) {
            let Some((_, what)) = self.retire.pop_front() else {
                break;
            };
            match what {
                Retire::Node(node) => {
                    self.nodes.remove(&node);
                }
                Retire::Owner(owner) => {
                    for node in self.owners.remove(&owner).unwrap_or_default() {
                        if self
                            .nodes
                            .get(&node)
                            .is_some_and(|n| n.owner == Some(owner))
                        {
                            self.nodes.remove(&node);
                        }
                    }
                }
            }
        }
        if !self.captured_calls.is_empty() {
            self.captured_calls.retain(|_, it| *it > index);
        }
    }

    /// Whether call `correlation_id` put its work in a graph (then no record follows it);
    /// forgets it.
    #[inline]
    pub(super) fn take_captured_call(&mut self, correlation_id: u32) -> bool {
        !self.captured_calls.is_empty() && self.captured_calls.remove(&correlation_id).is_some()
    }

    /// `capture` nested under `launch` ([`PathTable::nest`]), interned once per pair.
    fn nested_path(&mut self, paths: &PathTable, launch: u32, capture: u32) -> u32 {
        *self
            .nested
            .entry((launch, capture))
            .or_insert_with(|| paths.nest(launch, capture))
    }

    /// A graph node's activity, launched in `path_id` through `by`: its capture path nested
    /// under `path_id`, or `path_id` itself when the node's capture was not seen. Out of line,
    /// so that the path of every other record stays as short as before.
    #[inline(never)]
    pub(super) fn scope(
        &mut self,
        node: u64,
        path_id: u32,
        by: CallSource,
        running: &RunState,
    ) -> (u32, CallSource) {
        let Some(capture) = self.nodes.get(&node).map(|n| n.path_id) else {
            self.counts.records_unseen += 1;
            if !self.warned {
                self.warned = true;
                eprintln!("gpu-ledger: warning: {}", unseen_note(None, running));
            }
            let by = CallSource {
                attribution: Attribution::GraphLaunch,
                ..by
            };
            return (path_id, by);
        };
        self.counts.records_by_capture += 1;
        let path = self.nested_path(&running.paths, path_id, capture);
        let by = CallSource {
            attribution: Attribution::GraphCapture,
            ..by
        };
        (path, by)
    }

    /// Node entries held now.
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Node entries the map has room for without growing.
    #[cfg(any(test, feature = "internals"))]
    pub(super) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }
}

impl Collector {
    /// Applies every graph event the callbacks made so far. Called after the calls are taken
    /// and before they are accepted: a call's nodes were created during the call, so every event
    /// of a call taken is here, and applied first.
    pub(super) fn take_graph_events(&mut self) {
        let mut batch = std::mem::take(&mut self.graphs.batch);
        self.running.calls().graphs.drain_into(&mut batch);
        for event in batch.drain(..) {
            self.graphs.apply(event);
        }
        self.graphs.batch = batch;
    }

    /// The trailer's graph counts and warnings, at the end of the run: every row is written,
    /// so every destroy is applied.
    pub(super) fn finish_graphs(&mut self) {
        self.graphs.retire_through(u64::MAX);
        let mut counts = self.graphs.counts;
        counts.nodes_live_at_end = self.graphs.len() as u64;
        counts.callbacks_lost = self.running.calls().graphs.lost();
        if counts == GraphCounts::default() {
            return;
        }
        if counts.records_unseen > 0 {
            let note = unseen_note(Some(counts.records_unseen), &self.running);
            self.trailer.warnings.push(note);
        }
        if counts.nodes_not_kept > 0 {
            self.trailer.warnings.push(format!(
                "{} graph nodes were not kept: gpu-ledger held {MAX_GRAPH_NODES} nodes of live \
                 graphs already; their kernels are in their graph launch's scope. Destroy graphs \
                 no longer replayed",
                counts.nodes_not_kept
            ));
        }
        if counts.callbacks_lost > 0 {
            self.trailer.warnings.push(format!(
                "{} CUDA graph callbacks could not be kept (CUPTI gave no id for a handle, or \
                 the collector fell behind): the nodes they concern are in their graph launch's \
                 scope, or held until the run ended",
                counts.callbacks_lost
            ));
        }
        self.trailer.graphs = Some(counts);
    }
}

/// The warning for graph nodes whose capture was not seen (`records` of them, when known).
fn unseen_note(records: Option<u64>, running: &RunState) -> String {
    let what = match records {
        Some(n) => format!("{n} kernels, copies and memsets ran graph nodes"),
        None => "kernels ran graph nodes".to_string(),
    };
    if running.calls().graphs.refused() {
        return format!(
            "{what} whose capture gpu-ledger could not see: this CUPTI refused to enable its \
             graph callbacks, so they are in the scope of their graph launch (attribution \
             graph_launch)"
        );
    }
    format!(
        "{what} whose capture gpu-ledger did not see: they are in the scope of their graph launch \
         (attribution graph_launch). Start the profiler before capturing or instantiating graphs \
         (Profiler::start() first) to attribute each node to the scope it was captured in"
    )
}
