//! A model of an asynchronous GPU framework, for the attribution example and its GPU tests
//! (included by both through `#[path]`): the training thread records operations and hands them
//! through channels to named launcher threads that launch their kernels later, on streams of
//! their own, optionally in batches (as a fusing framework does), and a sync at the end of the
//! step waits for every launcher.

#![allow(dead_code)]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use cudarc::driver::CudaContext;
use gpu_ledger::kernels::{TrainOp, TrainOps};
use gpu_ledger::ledger::IterationRow;
use gpu_ledger::{Profiler, ScopeContext};

/// Operations each phase issues: distinct counts, so that a misplaced kernel shows.
pub const OPS_PER_PHASE: [(TrainOp, usize); 3] = [
    (TrainOp::Forward, 4),
    (TrainOp::Backward, 8),
    (TrainOp::Optimizer, 2),
];

/// Kernels one step launches.
pub fn kernels_per_step() -> usize {
    OPS_PER_PHASE.iter().map(|(_, n)| n).sum()
}

/// How the framework launches and how the application profiles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// The launcher enters each operation's scope context around its launch.
    pub handoff: bool,
    /// The training thread waits for the launchers at the end of every phase.
    pub phase_sync: bool,
    /// Launchers hold operations until `BATCH` are queued or a sync comes (fusion-like).
    pub batch: bool,
}

/// Operations a batching launcher holds before it launches them together.
pub const BATCH: usize = 4;

enum Msg {
    Op(TrainOp, ScopeContext),
    /// Launch everything queued, synchronize, and answer.
    Sync(Sender<()>),
}

/// The launcher threads and the channels to them.
pub struct Engine {
    senders: Vec<Sender<Msg>>,
    threads: Vec<JoinHandle<()>>,
    next: usize,
    mode: Mode,
}

impl Engine {
    /// `launchers` threads named `launcher-<i>`, each with its own stream and buffer of `n`
    /// floats, launching kernels of `iters` FMAs per element.
    pub fn new(ctx: &Arc<CudaContext>, launchers: usize, mode: Mode, n: u64, iters: u32) -> Self {
        let ops = Arc::new(TrainOps::new(ctx).expect("NVRTC compiles train_ops"));
        let mut senders = Vec::new();
        let mut threads = Vec::new();
        for i in 0..launchers {
            let (tx, rx) = channel::<Msg>();
            let ctx = ctx.clone();
            let ops = ops.clone();
            let t = std::thread::Builder::new()
                .name(format!("launcher-{i}"))
                .spawn(move || launcher(ctx, ops, rx, mode, n, iters))
                .expect("spawn a launcher");
            senders.push(tx);
            threads.push(t);
        }
        Engine {
            senders,
            threads,
            next: 0,
            mode,
        }
    }

    /// Records an operation on the calling thread, with the scope open there.
    pub fn record(&mut self, op: TrainOp) {
        let ctx = if self.mode.handoff {
            Profiler::context()
        } else {
            ScopeContext::NONE
        };
        let i = self.next % self.senders.len();
        self.next += 1;
        self.senders[i]
            .send(Msg::Op(op, ctx))
            .expect("launcher alive");
    }

    /// Waits until every launcher has launched what it was given and its stream is idle.
    pub fn sync(&self) {
        let acks: Vec<Receiver<()>> = self
            .senders
            .iter()
            .map(|s| {
                let (tx, rx) = channel();
                s.send(Msg::Sync(tx)).expect("launcher alive");
                rx
            })
            .collect();
        for rx in acks {
            rx.recv().expect("launcher answers");
        }
    }

    /// One training step: `step/{forward,backward,optimizer}` on the calling thread, then
    /// `step/sync`.
    pub fn step(&mut self) {
        let _step = Profiler::scope("step");
        for (op, count) in OPS_PER_PHASE {
            let _phase = Profiler::scope(op.scope());
            for _ in 0..count {
                self.record(op);
            }
            if self.mode.phase_sync {
                self.sync();
            }
        }
        let _sync = Profiler::scope("sync");
        self.sync();
    }

    /// Stops the launchers.
    pub fn shutdown(self) {
        drop(self.senders);
        for t in self.threads {
            t.join().expect("launcher exits cleanly");
        }
    }
}

fn launcher(
    ctx: Arc<CudaContext>,
    ops: Arc<TrainOps>,
    rx: Receiver<Msg>,
    mode: Mode,
    n: u64,
    iters: u32,
) {
    ctx.bind_to_thread().expect("bind the context");
    let stream = ctx.new_stream().expect("a launcher stream");
    let mut x = stream.alloc_zeros::<f32>(n as usize).expect("a buffer");
    let mut queue: Vec<(TrainOp, ScopeContext)> = Vec::new();
    let mut launch_all = |queue: &mut Vec<(TrainOp, ScopeContext)>| {
        for (op, scope) in queue.drain(..) {
            let _in = scope.enter();
            ops.launch(&stream, op, &mut x, n, iters).expect("launch");
        }
    };
    for msg in rx {
        match msg {
            Msg::Op(op, scope) => {
                queue.push((op, scope));
                if !mode.batch || queue.len() >= BATCH {
                    launch_all(&mut queue);
                }
            }
            Msg::Sync(ack) => {
                launch_all(&mut queue);
                stream.synchronize().expect("synchronize");
                let _ = ack.send(());
            }
        }
    }
}

/// Kernel time of a row (from its activities) in the scope its kernel's name belongs to, and in
/// all: `(right_ns, total_ns, right_kernels, kernels)`.
pub fn placement(row: &IterationRow) -> (u64, u64, u64, u64) {
    let mut out = (0, 0, 0, 0);
    for a in row
        .activities
        .iter()
        .flatten()
        .filter(|a| a.kind == "kernel")
    {
        let Some(op) = TrainOp::ALL.iter().find(|o| o.kernel() == a.name) else {
            continue;
        };
        let ns = a.end_ns.saturating_sub(a.start_ns);
        out.1 += ns;
        out.3 += 1;
        if a.scope == format!("step/{}", op.scope()) {
            out.0 += ns;
            out.2 += 1;
        }
    }
    out
}
