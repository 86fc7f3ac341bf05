//! `--scope-on`: the target for a scope timed on a stream, "no more than the timing
//! events it records, and less where adjacent scopes share one boundary event". In each round,
//! in a rotated order, the same empty launches run four ways: plain; with the application's own
//! pair of timing-enabled events recorded around each launch (two `cuEventRecord`s on two events
//! made beforehand, the reference); inside a `Profiler::scope_on` per launch at `Level::Scopes`
//! (two events each); and inside a chain of adjacent scopes, one per launch, each begun by
//! `ScopeGuard::next` on the one before (one event per boundary). A fifth way separates what
//! reading the events costs the launching thread: the event pair, each on events of its own, read
//! by a second thread every 2 ms as gpu-ledger's collector reads scope events
//! (`gpu_ledger::internals::elapsed_ns`). Two more ways split that figure: the pairs recorded but
//! never read ("pairs cycled": what using a fresh pair per launch costs the driver), and the pairs
//! read by a second thread that finds them through one shared index instead of a channel ("pairs,
//! index read": the reading alone, without a channel's allocation and reference counts). A last
//! way cycles, never read, through as many pairs as the profiler's pool made for scope_on in the
//! round before (its trailer's `scope_events_made`): what events that many cost when cold; and
//! another cycles through them as a pool does, each pair read by a second thread before it is
//! recorded again ("pool-sized, read"): the floor of any timer that reads its events elsewhere
//! and reuses them. "host scope, pair" opens a host-time `Profiler::scope` around the application's
//! own pair: the scope's bookkeeping without its events. The collector's CPU time per scope
//! (trailers) prints with them.
//! Differences are paired by round.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use super::*;

pub(super) fn scope_on(gpu: &Gpu, args: &Args, dir: &Path) -> Result<()> {
    let n = args.launches;
    let rounds = args.rounds.max(6);
    let new_event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let (before, after) = (new_event()?, new_event()?);
    let ways = [
        "plain",
        "event pair",
        "scope_on",
        "chained",
        "pair, read",
        "pairs cycled",
        "pairs, index read",
        "pool-sized",
        "pool-sized, read",
        "host scope, pair",
    ];
    let mut per_launch: [Vec<f64>; 10] = Default::default();
    // Collector CPU ns per scope, per round: scope_on, chained.
    let mut collector_cpu: [Vec<f64>; 2] = Default::default();
    let mut reuse_waits = 0u64;
    // Pairs the pool-sized way cycles through: set by each scope_on round's trailer (round 0
    // runs the ways in order, scope_on before this one).
    let mut pool_pairs = 1usize;
    let mut pool_sizes = Vec::new();
    // The fifth way's events: a pair per launch, made once.
    let pairs: Vec<(Arc<CudaEvent>, Arc<CudaEvent>)> = (0..n)
        .map(|_| Ok((Arc::new(new_event()?), Arc::new(new_event()?))))
        .collect::<Result<_>>()?;
    eprintln!(
        "overhead: --scope-on on {}: {rounds} rounds of {n} empty launches, {} ways",
        gpu.name,
        ways.len()
    );
    for round in 0..=rounds {
        for k in 0..ways.len() {
            let way = (k + round) % ways.len();
            let elapsed = match way {
                0 => run_launches::<false>(gpu, n, None, 1)?,
                1 => {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        before.record(&gpu.stream)?;
                        gpu.launch_empty()?;
                        after.record(&gpu.stream)?;
                    }
                    gpu.stream.synchronize()?;
                    t0.elapsed()
                }
                4 => read_pairs(gpu, &pairs)?,
                5 => {
                    let t0 = Instant::now();
                    for (before, after) in &pairs {
                        before.record(&gpu.stream)?;
                        gpu.launch_empty()?;
                        after.record(&gpu.stream)?;
                    }
                    gpu.stream.synchronize()?;
                    t0.elapsed()
                }
                // Every pair once: never reused, so no launch waits for a read.
                6 => read_pool_sized(gpu, &pairs, pairs.len())?.0,
                7 => {
                    let t0 = Instant::now();
                    for (before, after) in pairs[..pool_pairs].iter().cycle().take(n as usize) {
                        before.record(&gpu.stream)?;
                        gpu.launch_empty()?;
                        after.record(&gpu.stream)?;
                    }
                    gpu.stream.synchronize()?;
                    t0.elapsed()
                }
                8 => {
                    let (elapsed, waits) = read_pool_sized(gpu, &pairs[..pool_pairs], n as usize)?;
                    reuse_waits += waits;
                    elapsed
                }
                chained_or_not => {
                    let chained = chained_or_not == 3;
                    let host_only = chained_or_not == 9;
                    let profiler = Profiler::builder()
                        .level(Level::Scopes)
                        .nvml(args.nvml)
                        .ledger_path(dir.join(format!("scope-on-{round}.jsonl")))
                        .start()?;
                    let t0 = Instant::now();
                    if host_only {
                        for i in 0..n {
                            let scope = Profiler::scope("launch");
                            before.record(&gpu.stream)?;
                            gpu.launch_empty()?;
                            after.record(&gpu.stream)?;
                            drop(scope);
                            if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                                profiler.step();
                            }
                        }
                    } else if chained {
                        // Each launch in its own scope, begun by `next` on the one before; the
                        // chain is closed at each iteration's end so that no scope spans a step.
                        let mut scope = Profiler::scope_on("launch", &gpu.stream);
                        for i in 0..n {
                            gpu.launch_empty()?;
                            if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                                drop(scope);
                                profiler.step();
                                scope = Profiler::scope_on("launch", &gpu.stream);
                            } else {
                                scope = scope.next("launch");
                            }
                        }
                        drop(scope);
                    } else {
                        for i in 0..n {
                            let scope = Profiler::scope_on("launch", &gpu.stream);
                            gpu.launch_empty()?;
                            drop(scope);
                            if (i + 1) % LAUNCHES_PER_ITERATION == 0 {
                                profiler.step();
                            }
                        }
                    }
                    gpu.stream.synchronize()?;
                    let elapsed = t0.elapsed();
                    let trailer = profiler.finish()?.trailer;
                    if !chained && !host_only {
                        pool_pairs =
                            (trailer.overhead.scope_events_made as usize / 2).clamp(1, n as usize);
                        pool_sizes.push(trailer.overhead.scope_events_made);
                    }
                    if round > 0 && !host_only {
                        collector_cpu[usize::from(chained)]
                            .push(trailer.overhead.collector_cpu_ns as f64 / n as f64);
                    }
                    for w in &trailer.warnings {
                        eprintln!("overhead: --scope-on round {round}: {w}");
                    }
                    elapsed
                }
            };
            // Round 0 warms up the events, the pool and the profiler's first start.
            if round > 0 {
                per_launch[way].push(elapsed.as_secs_f64() * 1e6 / n as f64);
            }
        }
    }
    let diff = |a: usize, b: usize| -> Option<Paired> {
        let d: Vec<f64> = per_launch[a]
            .iter()
            .zip(&per_launch[b])
            .map(|(x, y)| x - y)
            .collect();
        Paired::of(&d)
    };
    println!("\n--scope-on: {rounds} rounds of {n} empty launches (µs per launch, medians)");
    for (way, v) in ways.iter().zip(&per_launch) {
        println!("  {way:<11} {:.3}", median(v).unwrap_or(f64::NAN));
    }
    if let (Some(read), Some(scope_vs_read)) = (diff(4, 1), diff(2, 4)) {
        println!(
            "  reading the pairs on another thread adds {} over the event pair",
            read.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  scope_on - read pair {}",
            scope_vs_read.describe(1.0, 3, " µs/launch")
        );
    }
    if let (Some(cycled), Some(index_read), Some(channel)) = (diff(5, 1), diff(6, 5), diff(4, 6)) {
        println!(
            "  a fresh pair per launch adds {} over the same pair each time",
            cycled.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  reading them on another thread (shared index) adds {}",
            index_read.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  handing them over by channel adds {}",
            channel.describe(1.0, 3, " µs/launch")
        );
    }
    pool_sizes.sort_unstable();
    if let (Some(pool_sized), Some(min), Some(max)) =
        (diff(7, 1), pool_sizes.first(), pool_sizes.last())
    {
        println!(
            "  scope_on's pool made {min} to {max} events a round; cycling that many, never read, \
             adds {} over the same pair each time",
            pool_sized.describe(1.0, 3, " µs/launch")
        );
    }
    if let (Some(host), Some(scope)) = (diff(9, 1), diff(2, 9)) {
        println!(
            "  a host-time scope around the pair adds {}",
            host.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  scope_on - host scope around the pair {}",
            scope.describe(1.0, 3, " µs/launch")
        );
    }
    if let (Some(on), Some(chained)) = (median(&collector_cpu[0]), median(&collector_cpu[1])) {
        println!(
            "  collector CPU per scope (median of rounds): scope_on {on:.0} ns, chained {chained:.0} ns"
        );
    }
    if let (Some(read), Some(scope)) = (diff(8, 1), diff(2, 8)) {
        println!(
            "  cycling them, each pair read by another thread before reuse, adds {} over the same \
             pair each time ({reuse_waits} launches waited for a read)",
            read.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  scope_on - pool-sized read {}",
            scope.describe(1.0, 3, " µs/launch")
        );
    }
    if let (Some(events), Some(scope), Some(vs), Some(chained), Some(chained_vs)) =
        (diff(1, 0), diff(2, 0), diff(2, 1), diff(3, 0), diff(3, 1))
    {
        println!(
            "  the event pair adds {}",
            events.describe(1.0, 3, " µs/launch")
        );
        println!("  scope_on adds {}", scope.describe(1.0, 3, " µs/launch"));
        println!(
            "  scope_on - event pair {}; target ≤ 0 (no more than the events it records): {}",
            vs.describe(1.0, 3, " µs/launch"),
            vs.verdict(0.0)
        );
        println!(
            "  chained scopes add {}",
            chained.describe(1.0, 3, " µs/launch")
        );
        println!(
            "  chained - event pair {}; target < 0 (less where adjacent scopes share one boundary \
             event): {}",
            chained_vs.describe(1.0, 3, " µs/launch"),
            chained_vs.verdict(0.0)
        );
    }
    Ok(())
}

/// The event pair around each launch, each pair read by a second thread every 2 ms while the
/// launches go on, as the collector reads scope events. Returns the launching thread's time.
fn read_pairs(gpu: &Gpu, pairs: &[(Arc<CudaEvent>, Arc<CudaEvent>)]) -> Result<Duration> {
    let (tx, rx) = crossbeam_channel::unbounded::<(Arc<CudaEvent>, Arc<CudaEvent>)>();
    let reader = std::thread::spawn(move || -> std::result::Result<u64, String> {
        let mut pending = std::collections::VecDeque::new();
        let mut read = 0u64;
        let mut open = true;
        while open || !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
            loop {
                match rx.try_recv() {
                    Ok(pair) => pending.push_back(pair),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            while let Some((start, end)) = pending.front() {
                match gpu_ledger::internals::elapsed_ns(start, end).map_err(|e| e.to_string())? {
                    Some(_) => {
                        read += 1;
                        pending.pop_front();
                    }
                    None => break,
                }
            }
        }
        Ok(read)
    });
    let t0 = Instant::now();
    for (before, after) in pairs {
        before.record(&gpu.stream)?;
        gpu.launch_empty()?;
        after.record(&gpu.stream)?;
        let _ = tx.send((before.clone(), after.clone()));
    }
    gpu.stream.synchronize()?;
    let elapsed = t0.elapsed();
    drop(tx);
    let read = reader
        .join()
        .map_err(|_| "the reading thread panicked".to_string())??;
    if read != pairs.len() as u64 {
        return Err(format!("read {read} of {} pairs", pairs.len()).into());
    }
    Ok(elapsed)
}

/// `n` launches, each between a pair of `pool`'s, cycled; a second thread reads each pair every
/// 2 ms (as the collector does) and a pair is recorded again only once it has been read (the
/// launching thread spins until then, counted). Returns the launching thread's time and the
/// launches that waited.
fn read_pool_sized(
    gpu: &Gpu,
    pool: &[(Arc<CudaEvent>, Arc<CudaEvent>)],
    n: usize,
) -> Result<(Duration, u64)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let k = pool.len();
    let recorded = AtomicUsize::new(0);
    let read = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    // Set when the reader stops, so that a launch waiting for a read does not wait forever.
    let reader_stopped = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(Duration, u64)> {
        let reader = s.spawn(|| -> std::result::Result<(), String> {
            let _stopped = SetOnDrop(&reader_stopped);
            let mut next = 0usize;
            loop {
                let finished = done.load(Ordering::Acquire);
                let upto = recorded.load(Ordering::Acquire);
                while next < upto {
                    let (start, end) = &pool[next % k];
                    match gpu_ledger::internals::elapsed_ns(start, end)
                        .map_err(|e| e.to_string())?
                    {
                        Some(_) => {
                            next += 1;
                            read.store(next, Ordering::Release);
                        }
                        None => break,
                    }
                }
                if finished && next == upto {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let t0 = Instant::now();
        let mut waits = 0u64;
        let mut result = Ok(());
        for i in 0..n {
            if i >= k && read.load(Ordering::Acquire) <= i - k {
                waits += 1;
                while read.load(Ordering::Acquire) <= i - k {
                    if reader_stopped.load(Ordering::Acquire) {
                        break;
                    }
                    std::hint::spin_loop();
                }
            }
            let (before, after) = &pool[i % k];
            let step = before
                .record(&gpu.stream)
                .map_err(Into::into)
                .and_then(|()| gpu.launch_empty())
                .and_then(|()| after.record(&gpu.stream).map_err(Into::into));
            if let Err(e) = step {
                result = Err(e);
                break;
            }
            recorded.store(i + 1, Ordering::Release);
        }
        let synced = gpu.stream.synchronize();
        let elapsed = t0.elapsed();
        done.store(true, Ordering::Release);
        result?;
        synced?;
        reader
            .join()
            .map_err(|_| "the reading thread panicked".to_string())??;
        Ok((elapsed, waits))
    })
}

/// Sets its flag when dropped: on any way out of the thread that owns it.
struct SetOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}
