//! CUDA graphs' nodes as CUPTI's resource callbacks report them, on the thread that makes them:
//! each kernel, copy and memset node with the scope open where it was created (stream capture or
//! an explicit node), the clones an instantiation makes of it, and the destroys. A node's GPU
//! record carries the node's id, which is all the collector needs to attribute it to the scope it
//! was captured in rather than to the one open when the whole graph was launched.
//!
//! The callbacks run inside the driver call that creates, clones or destroys a node, which costs
//! the driver microseconds; a graph's replay never reaches them. They are enabled apart from the
//! API domains a sampled timeline switches, so that a graph captured while tracing is off is
//! known when a traced iteration replays it.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cupti_sys as sys;

use super::{ApiCalls, CALL_THREAD};

/// The resource callbacks that keep graph nodes' scopes: enabled with the API callback, never
/// switched by a sampled timeline.
pub(crate) const CALLBACKS: [u32; 7] = {
    use sys::CUpti_CallbackIdResource as r;
    [
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING,
        r::CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING,
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING,
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING,
    ]
};

/// Graph events the queue holds between two drains of the collector (every 2 ms) before it
/// counts the next ones as lost: a bound for a collector that has stopped draining.
const QUEUE_CAPACITY: usize = 1 << 20;

/// A graph callback with CUPTI's handles turned into ids; `None` where CUPTI gave no handle or
/// could not give its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GraphCallback {
    /// A kernel, copy or memset node of graph `graph` was created.
    NodeCreated { node: u64, graph: Option<u32> },
    /// Kernel, copy or memset node `node` of graph `graph`, or of executable graph `exec`, was
    /// cloned from node `original`.
    NodeCloned {
        node: u64,
        original: u64,
        graph: Option<u32>,
        exec: Option<u32>,
    },
    /// A kernel, copy or memset node is about to be destroyed.
    NodeDestroyed { node: u64 },
    /// A graph is about to be destroyed.
    GraphDestroyed { graph: u32 },
    /// An instantiation begins on this thread.
    ExecCreateStarting,
    /// The instantiation on this thread made executable graph `exec`.
    ExecCreated { exec: u32 },
    /// An executable graph is about to be destroyed.
    ExecDestroyed { exec: u32 },
}

/// What holds a node: destroying it forgets the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A graph (`CUgraph`), by CUPTI's graph id.
    Graph(u32),
    /// An executable graph (`CUgraphExec`), by CUPTI's id of it.
    Exec(u32),
}

/// What the collector receives of the graph callbacks, in the order each thread made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphEvent {
    /// A kernel, copy or memset node created outside an instantiation.
    Created {
        /// CUPTI's id of the node.
        node: u64,
        /// Its graph (none when CUPTI could not give the id).
        graph: Option<u32>,
        /// The scope path open on the creating thread (0: none).
        path_id: u32,
        /// The correlation id of the traced call it was made in (0: none): stream capture put
        /// that call's work in the graph, so no GPU record follows the call itself.
        call: u32,
        /// The iteration open when it was made.
        iteration: u64,
    },
    /// A node cloned from another: by an instantiation, `cuGraphClone` or a child graph.
    Cloned {
        /// The clone.
        node: u64,
        /// The node it was cloned from.
        original: u64,
        /// What holds the clone; none while the instantiation that made it has not named its
        /// executable graph ([`GraphEvent::ExecCreated`] does).
        owner: Option<Owner>,
    },
    /// An instantiation made an executable graph.
    ExecCreated {
        /// CUPTI's id of the executable graph.
        exec: u32,
        /// The clones the instantiation made whose callbacks named no executable graph.
        nodes: Vec<u64>,
    },
    /// A node is about to be destroyed.
    NodeDestroyed {
        /// The node.
        node: u64,
        /// The iteration open then.
        iteration: u64,
    },
    /// A graph is about to be destroyed, with every node it holds.
    GraphDestroyed {
        /// CUPTI's id of the graph.
        graph: u32,
        /// The iteration open then.
        iteration: u64,
    },
    /// An executable graph is about to be destroyed, with every node it holds.
    ExecDestroyed {
        /// CUPTI's id of the executable graph.
        exec: u32,
        /// The iteration open then.
        iteration: u64,
    },
}

/// The graph events waiting for the collector, and what could not be kept.
#[derive(Default)]
pub(crate) struct GraphQueue {
    events: parking_lot::Mutex<Vec<GraphEvent>>,
    /// Callbacks whose handles CUPTI could not give ids for, and events past the capacity.
    lost: AtomicU64,
    /// CUPTI refused to enable the graph callbacks: no capture is seen.
    refused: AtomicBool,
}

impl GraphQueue {
    fn push(&self, event: GraphEvent) {
        let mut events = self.events.lock();
        if events.len() < QUEUE_CAPACITY {
            events.push(event);
        } else {
            drop(events);
            self.lose();
        }
    }

    fn lose(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves every event so far into `out`, in the order they were made.
    pub(crate) fn drain_into(&self, out: &mut Vec<GraphEvent>) {
        let mut events = self.events.lock();
        if !events.is_empty() {
            out.append(&mut events);
        }
    }

    /// Callbacks that could not be kept.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// CUPTI refused the graph callbacks at start.
    pub(crate) fn set_refused(&self) {
        self.refused.store(true, Ordering::Relaxed);
    }

    /// Whether CUPTI refused the graph callbacks at start.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }
}

/// A thread's instantiation in progress: the nodes created meanwhile are the executable graph's
/// own (skipped: the clones carry the captured nodes' scopes), and the clones whose callback
/// named no executable graph wait for the one `GRAPHEXEC_CREATED` names.
struct Instantiation {
    active: Cell<bool>,
    clones: RefCell<Vec<u64>>,
}

thread_local! {
    static INSTANTIATION: Instantiation = const {
        Instantiation {
            active: Cell::new(false),
            clones: RefCell::new(Vec::new()),
        }
    };
}

impl ApiCalls {
    /// What a graph callback does on the thread that made it, whether or not a sampled timeline
    /// traces the iteration: the node map must hold every graph a later traced iteration may
    /// replay.
    pub(crate) fn on_graph(&self, cb: GraphCallback) {
        let iteration = self.iteration.load(Ordering::Relaxed);
        let event = match cb {
            GraphCallback::NodeCreated { node, graph } => {
                let Some((path_id, call)) = self.creating_call() else {
                    return;
                };
                // A traced call in progress is a stream capture: no instantiation is under way
                // on this thread then (one that failed left the mark behind).
                let instantiating = INSTANTIATION
                    .try_with(|i| i.active.replace(i.active.get() && call == 0))
                    .unwrap_or(false);
                if instantiating && call == 0 {
                    return;
                }
                GraphEvent::Created {
                    node,
                    graph,
                    path_id,
                    call,
                    iteration,
                }
            }
            GraphCallback::NodeCloned {
                node,
                original,
                graph,
                exec,
            } => {
                let owner = match exec {
                    Some(exec) => Some(Owner::Exec(exec)),
                    None if instantiation_clone(node) => None,
                    None => graph.map(Owner::Graph),
                };
                GraphEvent::Cloned {
                    node,
                    original,
                    owner,
                }
            }
            GraphCallback::ExecCreateStarting => {
                let _ = INSTANTIATION.try_with(|i| {
                    i.active.set(true);
                    if let Ok(mut clones) = i.clones.try_borrow_mut() {
                        clones.clear();
                    }
                });
                return;
            }
            GraphCallback::ExecCreated { exec } => {
                let nodes = INSTANTIATION
                    .try_with(|i| {
                        i.active.set(false);
                        i.clones
                            .try_borrow_mut()
                            .map(|mut c| std::mem::take(&mut *c))
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                GraphEvent::ExecCreated { exec, nodes }
            }
            GraphCallback::NodeDestroyed { node } => GraphEvent::NodeDestroyed { node, iteration },
            GraphCallback::GraphDestroyed { graph } => {
                GraphEvent::GraphDestroyed { graph, iteration }
            }
            GraphCallback::ExecDestroyed { exec } => GraphEvent::ExecDestroyed { exec, iteration },
        };
        self.graphs.push(event);
    }

    /// The scope path open on the calling thread, found as a call's is, and the outermost
    /// traced call in progress on it (0: none).
    fn creating_call(&self) -> Option<(u32, u32)> {
        CALL_THREAD
            .try_with(|t| {
                let (path_id, _) = self.scope_of(t.scope_path.get());
                let call = if t.depth.get() > 0 { t.outer.get() } else { 0 };
                (path_id, call)
            })
            .ok()
    }
}

/// Whether an instantiation is under way on this thread; if so, `node` is kept as one of its
/// clones.
fn instantiation_clone(node: u64) -> bool {
    INSTANTIATION
        .try_with(|i| i.active.get() && i.clones.try_borrow_mut().map(|mut c| c.push(node)).is_ok())
        .unwrap_or(false)
}

/// The graph callback `cbid` CUPTI made with `data`, turned into ids and handed to
/// [`ApiCalls::on_graph`]. A callback whose handles CUPTI cannot give ids for is counted lost.
///
/// # Safety
/// `data` is the `CUpti_ResourceData` CUPTI passed with resource callback `cbid`, one of
/// [`CALLBACKS`], valid for the call.
pub(crate) unsafe fn on_resource(
    calls: &ApiCalls,
    cbid: u32,
    data: *const sys::CUpti_ResourceData,
) {
    let Ok(lib) = crate::cupti::api() else {
        return;
    };
    // SAFETY: the caller passes CUPTI's resource data, whose descriptor for a graph callback is
    // a CUpti_GraphData valid for the call (read once, by copy).
    let graph = unsafe {
        let descriptor = (*data).resourceDescriptor as *const sys::CUpti_GraphData;
        if descriptor.is_null() {
            calls.graphs.lose();
            return;
        }
        *descriptor
    };
    match decode(lib, cbid, &graph) {
        Ok(Some(cb)) => calls.on_graph(cb),
        Ok(None) => {}
        Err(()) => calls.graphs.lose(),
    }
}

/// `CUpti_GraphData` of callback `cbid` as ids: `Ok(None)` for a node that is neither a
/// kernel, nor a copy, nor a memset (no record of it is attributed), `Err` when a handle the
/// callback needs has no id.
fn decode(
    lib: &crate::cupti::LoadedCupti,
    cbid: u32,
    g: &sys::CUpti_GraphData,
) -> Result<Option<GraphCallback>, ()> {
    use sys::CUgraphNodeType_enum as t;
    use sys::CUpti_CallbackIdResource as r;
    let work = matches!(
        g.nodeType,
        t::CU_GRAPH_NODE_TYPE_KERNEL | t::CU_GRAPH_NODE_TYPE_MEMCPY | t::CU_GRAPH_NODE_TYPE_MEMSET
    );
    let of_a_node = matches!(
        cbid,
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED
            | r::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED
            | r::CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING
    );
    if of_a_node && !work {
        return Ok(None);
    }
    let node = || node_id(lib, g.node).ok_or(());
    Ok(Some(match cbid {
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED => GraphCallback::NodeCreated {
            node: node()?,
            graph: graph_id(lib, g.graph),
        },
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED => GraphCallback::NodeCloned {
            node: node()?,
            original: node_id(lib, g.originalNode).ok_or(())?,
            graph: graph_id(lib, g.graph),
            exec: exec_id(lib, g.graphExec),
        },
        r::CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING => {
            GraphCallback::NodeDestroyed { node: node()? }
        }
        r::CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING => GraphCallback::GraphDestroyed {
            graph: graph_id(lib, g.graph).ok_or(())?,
        },
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING => GraphCallback::ExecCreateStarting,
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED => GraphCallback::ExecCreated {
            exec: exec_id(lib, g.graphExec).ok_or(())?,
        },
        r::CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING => GraphCallback::ExecDestroyed {
            exec: exec_id(lib, g.graphExec).ok_or(())?,
        },
        _ => return Ok(None),
    }))
}

/// `cuptiGetGraphNodeId`; none for a null handle or an error.
fn node_id(lib: &crate::cupti::LoadedCupti, node: sys::CUgraphNode) -> Option<u64> {
    if node.is_null() {
        return None;
    }
    let mut id = 0u64;
    // SAFETY: a node handle CUPTI passed in this callback's data, valid for the call; out-pointer
    // valid.
    let rc = unsafe { lib.api.cuptiGetGraphNodeId(node, &mut id) };
    (rc == sys::CUptiResult::CUPTI_SUCCESS).then_some(id)
}

/// `cuptiGetGraphId`; none for a null handle or an error.
fn graph_id(lib: &crate::cupti::LoadedCupti, graph: sys::CUgraph) -> Option<u32> {
    if graph.is_null() {
        return None;
    }
    let mut id = 0u32;
    // SAFETY: as in `node_id`, for a graph handle.
    let rc = unsafe { lib.api.cuptiGetGraphId(graph, &mut id) };
    (rc == sys::CUptiResult::CUPTI_SUCCESS).then_some(id)
}

/// `cuptiGetGraphExecId`; none for a null handle or an error.
fn exec_id(lib: &crate::cupti::LoadedCupti, exec: sys::CUgraphExec) -> Option<u32> {
    if exec.is_null() {
        return None;
    }
    let mut id = 0u32;
    // SAFETY: as in `node_id`, for an executable graph handle.
    let rc = unsafe { lib.api.cuptiGetGraphExecId(exec, &mut id) };
    (rc == sys::CUptiResult::CUPTI_SUCCESS).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::super::set_scope_path;
    use super::super::tests::call;
    use super::*;

    fn events(calls: &ApiCalls) -> Vec<GraphEvent> {
        let mut out = Vec::new();
        calls.graphs.drain_into(&mut out);
        out
    }

    fn created(node: u64) -> GraphCallback {
        GraphCallback::NodeCreated {
            node,
            graph: Some(1),
        }
    }

    #[test]
    fn a_node_created_inside_a_traced_call_names_the_call_and_the_open_scope() {
        let calls = ApiCalls::default();
        set_scope_path(5);
        call(&calls, true, "cudaLaunchKernel_v7000", 70, || {
            call(&calls, false, "cuLaunchKernel", 71, || {
                calls.on_graph(created(11))
            });
        });
        // An explicit node, outside any traced call.
        calls.on_graph(created(12));
        set_scope_path(0);
        let got = events(&calls);
        assert_eq!(
            got,
            [
                GraphEvent::Created {
                    node: 11,
                    graph: Some(1),
                    path_id: 5,
                    call: 70,
                    iteration: 0,
                },
                GraphEvent::Created {
                    node: 12,
                    graph: Some(1),
                    path_id: 5,
                    call: 0,
                    iteration: 0,
                },
            ],
            "the outermost call is the one awaited"
        );
    }

    #[test]
    fn a_node_finds_its_scope_as_a_call_does() {
        let calls = ApiCalls::default();
        let path = |calls: &ApiCalls| match events(calls).as_slice() {
            [GraphEvent::Created { path_id, .. }] => *path_id,
            other => panic!("{other:?}"),
        };
        set_scope_path(6 | crate::cupti::calls::HANDOFF_BIT);
        calls.on_graph(created(1));
        assert_eq!(path(&calls), 6, "a handed-over scope");
        set_scope_path(0);
        calls.on_graph(created(2));
        assert_eq!(path(&calls), 0, "none");
        calls.followed.store(9, Ordering::Relaxed);
        calls.on_graph(created(3));
        assert_eq!(path(&calls), 9, "the followed thread's");
    }

    #[test]
    fn nodes_made_by_an_instantiation_are_skipped_and_its_clones_wait_for_its_exec() {
        let calls = ApiCalls::default();
        calls.on_graph(GraphCallback::ExecCreateStarting);
        calls.on_graph(created(100));
        for (node, original) in [(101, 11), (102, 12)] {
            calls.on_graph(GraphCallback::NodeCloned {
                node,
                original,
                graph: Some(2),
                exec: None,
            });
        }
        calls.on_graph(GraphCallback::ExecCreated { exec: 7 });
        // After it: cuGraphClone's clones belong to their graph, and a clone that names its
        // executable graph to that.
        calls.on_graph(GraphCallback::NodeCloned {
            node: 301,
            original: 11,
            graph: Some(3),
            exec: None,
        });
        calls.on_graph(GraphCallback::NodeCloned {
            node: 401,
            original: 11,
            graph: Some(4),
            exec: Some(8),
        });
        let cloned = |node, original, owner| GraphEvent::Cloned {
            node,
            original,
            owner,
        };
        assert_eq!(
            events(&calls),
            [
                cloned(101, 11, None),
                cloned(102, 12, None),
                GraphEvent::ExecCreated {
                    exec: 7,
                    nodes: vec![101, 102],
                },
                cloned(301, 11, Some(Owner::Graph(3))),
                cloned(401, 11, Some(Owner::Exec(8))),
            ]
        );
    }

    #[test]
    fn instantiations_on_two_threads_each_name_their_own_clones() {
        let calls = std::sync::Arc::new(ApiCalls::default());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = [(7u32, 100u64), (8, 200)]
            .into_iter()
            .map(|(exec, first)| {
                let (calls, barrier) = (calls.clone(), barrier.clone());
                std::thread::spawn(move || {
                    calls.on_graph(GraphCallback::ExecCreateStarting);
                    for node in first..first + 50 {
                        calls.on_graph(GraphCallback::NodeCloned {
                            node,
                            original: node - first,
                            graph: Some(exec),
                            exec: None,
                        });
                        if node == first + 25 {
                            barrier.wait();
                        }
                    }
                    calls.on_graph(GraphCallback::ExecCreated { exec });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for e in events(&calls) {
            if let GraphEvent::ExecCreated { exec, nodes } = e {
                let first = if exec == 7 { 100 } else { 200 };
                assert_eq!(nodes, (first..first + 50).collect::<Vec<u64>>());
            }
        }
    }

    #[test]
    fn graph_callbacks_are_kept_while_the_iteration_is_sampled_out() {
        let calls = ApiCalls::default();
        calls.traced.store(false, Ordering::SeqCst);
        calls.iteration.store(3, Ordering::SeqCst);
        calls.on_graph(created(11));
        calls.on_graph(GraphCallback::NodeDestroyed { node: 11 });
        calls.on_graph(GraphCallback::GraphDestroyed { graph: 1 });
        calls.on_graph(GraphCallback::ExecDestroyed { exec: 7 });
        let got = events(&calls);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(
            got[1..],
            [
                GraphEvent::NodeDestroyed {
                    node: 11,
                    iteration: 3
                },
                GraphEvent::GraphDestroyed {
                    graph: 1,
                    iteration: 3
                },
                GraphEvent::ExecDestroyed {
                    exec: 7,
                    iteration: 3
                },
            ]
        );
    }

    #[test]
    fn a_failed_instantiation_does_not_hide_later_captures() {
        let calls = ApiCalls::default();
        set_scope_path(5);
        // cuGraphInstantiate began and failed: no GRAPHEXEC_CREATED.
        calls.on_graph(GraphCallback::ExecCreateStarting);
        // A stream capture's launch on the same thread: kept, and the mark is gone.
        call(&calls, false, "cuLaunchKernel", 80, || {
            calls.on_graph(created(11))
        });
        calls.on_graph(created(12));
        set_scope_path(0);
        let nodes: Vec<u64> = events(&calls)
            .iter()
            .filter_map(|e| match e {
                GraphEvent::Created { node, .. } => Some(*node),
                _ => None,
            })
            .collect();
        assert_eq!(nodes, [11, 12]);
    }
}
