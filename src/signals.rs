//! [`Config::flush_on_signal`](crate::Config::flush_on_signal): on SIGINT or SIGTERM, finish the
//! ledger, then let the signal end the process as it would have without the profiler.
//!
//! Linux only. The signal handler is async-signal-safe: it writes the signal's number, one byte,
//! to a non-blocking socket and returns (saving and restoring `errno`). A thread named
//! `gpu-ledger-signal` reads that socket; on a signal it runs the profiler's shutdown on a helper
//! thread, waits for it at most [`FLUSH_BOUND`], restores the default disposition and raises the
//! signal again, so the process dies of it with the status it would have had.
//!
//! Only a signal whose disposition is the default is taken: one the application handles or
//! ignores is left alone, and the ledger header says so. [`Watch`]'s drop (the profiler finished)
//! puts the default disposition back where the handler is still gpu-ledger's and stops the thread;
//! a signal that came in meanwhile is raised again then.

use std::sync::Arc;
use std::time::Duration;

/// How long the signal thread waits for the ledger to be finished before the signal ends the
/// process anyway (the ledger is then valid up to its last whole line, maybe without trailer).
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// What the signal thread runs, given the signal's name (`"SIGTERM"`): finishes the ledger.
pub(crate) type OnSignal = Arc<dyn Fn(&'static str) + Send + Sync>;

pub(crate) use imp::Watch;

#[cfg(target_os = "linux")]
mod imp {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::OnceLock;
    use std::thread::JoinHandle;

    use libc::c_int;

    use super::{OnSignal, FLUSH_BOUND};

    /// The byte that tells the signal thread to end (no signal has number 0).
    const STOP: u8 = 0;

    /// The signals watched, with their names.
    const SIGNALS: [(c_int, &str); 2] = [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")];

    /// The write end of [`channel`], for the handler; -1 until the channel exists.
    static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

    /// The socket pair from the handler to the signal thread: created once and kept for the
    /// process's life, so that a handler still running while a watch stops never writes to a
    /// closed (or reused) descriptor. One profiler runs at a time, so one reader at a time.
    fn channel() -> std::io::Result<&'static (UnixStream, UnixStream)> {
        static CHANNEL: OnceLock<(UnixStream, UnixStream)> = OnceLock::new();
        if let Some(c) = CHANNEL.get() {
            return Ok(c);
        }
        let (reader, writer) = UnixStream::pair()?;
        writer.set_nonblocking(true)?;
        let c = CHANNEL.get_or_init(|| (reader, writer));
        WRITE_FD.store(c.1.as_raw_fd(), Ordering::SeqCst);
        Ok(c)
    }

    /// The signal handler: writes the signal's number to the channel, nothing else.
    extern "C" fn on_signal(signal: c_int) {
        let fd = WRITE_FD.load(Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        let byte = signal as u8;
        // SAFETY: `write(2)` is async-signal-safe and `byte` outlives the call; the descriptor is
        // never closed (see `channel`). It is non-blocking: with the buffer full the byte is
        // lost, which only drops a repeat of a signal already queued. `errno` is this thread's;
        // it is restored so that the interrupted code never sees the handler's value.
        unsafe {
            let errno = libc::__errno_location();
            let saved = *errno;
            libc::write(fd, (&raw const byte).cast(), 1);
            *errno = saved;
        }
    }

    fn handler_address() -> libc::sighandler_t {
        on_signal as extern "C" fn(c_int) as libc::sighandler_t
    }

    /// The current disposition of `signal` (`SIG_DFL`, `SIG_IGN` or a handler's address).
    fn disposition(signal: c_int) -> std::io::Result<libc::sighandler_t> {
        // SAFETY: all-zero bytes are a valid `sigaction` (integers, a plain-data mask and an
        // `Option` of a function pointer).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `old`, valid for writes.
        if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(old.sa_sigaction)
    }

    /// Sets `signal`'s disposition to `SIG_DFL` or to [`on_signal`].
    fn set_disposition(signal: c_int, handler: libc::sighandler_t) -> std::io::Result<()> {
        // SAFETY: as in `disposition`, all-zero bytes are a valid `sigaction`.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        // Interrupted system calls of the application resume as they would without a handler.
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `sa_mask` is valid for writes. Then `action` is a complete action whose
        // handler is `SIG_DFL` or `on_signal`, which is async-signal-safe.
        let rc = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Puts the default disposition back and raises `signal`, so that the process ends the way
    /// it would have without the profiler.
    fn die_of(signal: c_int) -> ! {
        let _ = set_disposition(signal, libc::SIG_DFL);
        // SAFETY: `set` is initialized by `sigemptyset` before it is read; unblocking the signal
        // in this thread and raising it have no memory-safety preconditions.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
        }
        // The default action of SIGINT and SIGTERM ends the process; this is not reached.
        std::process::exit(128 + signal)
    }

    fn name_of(signal: c_int) -> &'static str {
        SIGNALS
            .iter()
            .find(|(s, _)| *s == signal)
            .map_or("a signal", |(_, n)| n)
    }

    /// SIGINT and SIGTERM handled by gpu-ledger while a profiler with `flush_on_signal` runs.
    pub(crate) struct Watch {
        /// The signals whose handler gpu-ledger installed.
        installed: Vec<c_int>,
        /// The signal thread; it returns the bytes it read after the stop byte.
        thread: Option<JoinHandle<Vec<u8>>>,
    }

    impl Watch {
        /// Starts the signal thread and installs the handler for SIGINT and SIGTERM where their
        /// disposition is the default. Problems go to `warnings` (for the ledger header); `None`
        /// when no signal is watched.
        pub(crate) fn install(on_signal: OnSignal, warnings: &mut Vec<String>) -> Option<Watch> {
            let fail = |warnings: &mut Vec<String>, what: String| {
                warnings.push(format!(
                    "flush_on_signal: {what}; SIGINT and SIGTERM are left alone"
                ));
                None
            };
            let (reader, _) = match channel() {
                Ok(c) => c,
                Err(e) => return fail(warnings, format!("no socket pair: {e}")),
            };
            let mut take = Vec::new();
            for (signal, name) in SIGNALS {
                match disposition(signal) {
                    Ok(libc::SIG_DFL) => take.push(signal),
                    Ok(libc::SIG_IGN) => warnings.push(format!(
                        "flush_on_signal: {name} is ignored in this process; it is left alone"
                    )),
                    Ok(_) => warnings.push(format!(
                        "flush_on_signal: {name} already has a handler in this process; it is \
                         left alone (that handler should have the application finish the \
                         profiler)"
                    )),
                    Err(e) => warnings.push(format!(
                        "flush_on_signal: cannot read {name}'s disposition ({e}); it is left \
                         alone"
                    )),
                }
            }
            if take.is_empty() {
                return None;
            }
            let thread = std::thread::Builder::new()
                .name("gpu-ledger-signal".into())
                .spawn(move || watch_loop(reader, on_signal));
            let mut watch = match thread {
                Ok(t) => Watch {
                    installed: Vec::new(),
                    thread: Some(t),
                },
                Err(e) => return fail(warnings, format!("the signal thread did not start: {e}")),
            };
            for signal in take {
                match set_disposition(signal, handler_address()) {
                    Ok(()) => watch.installed.push(signal),
                    Err(e) => warnings.push(format!(
                        "flush_on_signal: cannot install the {} handler ({e}); it is left alone",
                        name_of(signal)
                    )),
                }
            }
            Some(watch)
        }
    }

    impl Drop for Watch {
        /// Puts the default disposition back (where the handler is still gpu-ledger's: an
        /// application that replaced it keeps its own), stops the signal thread, and raises a
        /// signal that arrived meanwhile.
        fn drop(&mut self) {
            for &signal in &self.installed {
                if disposition(signal).is_ok_and(|h| h == handler_address()) {
                    let _ = set_disposition(signal, libc::SIG_DFL);
                }
            }
            let Ok((reader, writer)) = channel() else {
                return;
            };
            let mut left = Vec::new();
            if let Some(thread) = self.thread.take() {
                // The writer is non-blocking; the buffer holds far more than a few bytes.
                while let Err(e) = (&*writer).write(&[STOP]) {
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                // A signal read before the stop byte ends the process in the thread.
                left = thread.join().unwrap_or_default();
            }
            // A handler that ran just before the dispositions were restored may have written
            // after the stop byte.
            if reader.set_nonblocking(true).is_ok() {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = (&*reader).read(&mut buf) {
                    left.extend_from_slice(&buf[..n]);
                }
                let _ = reader.set_nonblocking(false);
            }
            if let Some(&signal) = left.iter().find(|&&b| b != STOP) {
                die_of(c_int::from(signal));
            }
        }
    }

    /// The signal thread: waits for a byte; a signal finishes the ledger and ends the process,
    /// the stop byte ends the thread (returning what was read after it).
    fn watch_loop(reader: &'static UnixStream, on_signal: OnSignal) -> Vec<u8> {
        let mut buf = [0u8; 64];
        loop {
            let n = match (&*reader).read(&mut buf) {
                Ok(0) => return Vec::new(),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("gpu-ledger: flush_on_signal: the signal thread stops: {e}");
                    return Vec::new();
                }
            };
            // Only the first byte counts: a signal never returns here.
            if buf[0] == STOP {
                return buf[1..n].to_vec();
            }
            finish_and_die(c_int::from(buf[0]), &on_signal);
        }
    }

    /// Runs `on_signal` on a helper thread, waits for it at most [`FLUSH_BOUND`], then lets
    /// `signal` end the process.
    fn finish_and_die(signal: c_int, on_signal: &OnSignal) -> ! {
        let name = name_of(signal);
        eprintln!(
            "gpu-ledger: {name}: finishing the ledger before exiting (flush_on_signal, at most \
             {FLUSH_BOUND:?})"
        );
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let run = on_signal.clone();
        let helper = std::thread::Builder::new()
            .name("gpu-ledger-signal-flush".into())
            .spawn(move || {
                run(name);
                let _ = done_tx.send(());
            });
        match helper {
            Ok(_) => {
                if done_rx.recv_timeout(FLUSH_BOUND).is_err() {
                    eprintln!(
                        "gpu-ledger: {name}: the ledger was not finished within {FLUSH_BOUND:?}; \
                         exiting anyway (it is valid up to its last whole line)"
                    );
                }
            }
            // No thread to bound it with: finish here, unbounded, rather than lose the rows.
            Err(_) => on_signal(name),
        }
        die_of(signal)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::OnSignal;

    /// Nothing is watched on this platform.
    pub(crate) struct Watch;

    impl Watch {
        /// Says in the header that the option does nothing here.
        pub(crate) fn install(_on_signal: OnSignal, warnings: &mut Vec<String>) -> Option<Watch> {
            warnings.push(
                "flush_on_signal is supported on Linux only: SIGINT and SIGTERM are left alone \
                 here"
                    .into(),
            );
            None
        }
    }
}
