//! What an interrupted command leaves behind: nothing. Outputs are written under hidden
//! temporary names and renamed when complete; a SIGINT, SIGTERM or SIGHUP before that would leave
//! the temporary file (gigabytes for a large export), since the process ends without unwinding.
//! A thread of signal-hook's receives those signals, removes every temporary file registered here
//! (and, in a Parquet dataset being written, every hidden part file of this process), and then
//! ends the process by the signal's default action, so that its exit status says it was killed.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Temporary files being written, removed on a signal.
static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Directories whose hidden files of this process (`.NAME.PID.tmp`, the Parquet writer's) are
/// removed on a signal.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Levels of a dataset's tree searched for part files (`table/run=…/rank=…/`).
const SWEEP_DEPTH: usize = 4;

fn lock(m: &'static Mutex<Vec<PathBuf>>) -> MutexGuard<'static, Vec<PathBuf>> {
    // A thread that panicked holding the lock left a list that is still whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the thread that cleans up on SIGINT, SIGTERM and SIGHUP. Without it (no thread to be
/// had) the signals keep their default action and only a temporary file may be left.
pub(crate) fn install() {
    // The signals are taken on the thread itself, so that none is taken when no thread can be
    // had; the caller waits until they are, so that no output is created before.
    let (ready, wait) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("gpu-ledger-signals".into())
        .spawn(move || {
            let signals = Signals::new([SIGINT, SIGTERM, SIGHUP]);
            let _ = ready.send(());
            let Ok(mut signals) = signals else {
                return;
            };
            if let Some(sig) = signals.forever().next() {
                clean_up();
                // The default action ends the process with the status a shell reports for the
                // signal (130 for SIGINT, 143 for SIGTERM).
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
    if spawned.is_ok() {
        let _ = wait.recv();
    }
}

/// Removes every registered temporary file and the Parquet writer's hidden files.
fn clean_up() {
    for f in lock(&FILES).iter() {
        let _ = std::fs::remove_file(f);
    }
    let suffix = format!(".{}.tmp", std::process::id());
    for d in lock(&DIRS).iter() {
        sweep(d, &suffix, SWEEP_DEPTH);
    }
}

/// Removes the hidden files named `.…{suffix}` under `dir`, `depth` levels down.
fn sweep(dir: &Path, suffix: &str, depth: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => sweep(&e.path(), suffix, depth - 1),
            Ok(t) if t.is_file() && name.starts_with('.') && name.ends_with(suffix) => {
                let _ = std::fs::remove_file(e.path());
            }
            _ => {}
        }
    }
}

/// Registers a temporary file to remove on a signal, before it is created.
pub(crate) fn register_file(path: &Path) {
    lock(&FILES).push(path.to_path_buf());
}

/// The temporary file is renamed or removed: nothing to clean up any more.
pub(crate) fn forget_file(path: &Path) {
    lock(&FILES).retain(|p| p != path);
}

/// Registers a dataset's directory, whose hidden part files of this process are removed on a
/// signal.
pub(crate) fn register_dir(path: &Path) {
    lock(&DIRS).push(path.to_path_buf());
}
