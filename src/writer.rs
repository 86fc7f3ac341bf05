//! The ledger writer: a named thread that serializes lines and writes each one with one call.
//!
//! Each line goes out in one `write_all` of the complete text plus newline. That does not make
//! the line atomic: a process killed (signal, `exit`) while the writer is in that call can leave
//! the line cut, without its newline, as the file's last line. The lines before it are whole, and
//! the reader drops such a cut last line and reports it
//! ([`crate::ledger::Ledger::truncated_last_line`]), so the file reads as valid up to its last
//! complete line. When a write fails (disk full, file gone), the file is cut back to its last
//! complete line, the error is kept for the application (it is reported once, on stderr and by
//! `Profiler::finish`), and later lines are counted as not written rather than half written.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ledger::schema::LedgerLine;

/// Lines waiting for the writer; the collector blocks (never the application) when it is full.
const QUEUE: usize = 4096;

/// What the writer thread reports when it ends.
#[derive(Debug, Default, Clone)]
pub struct WriterReport {
    /// Lines written whole.
    pub lines_written: u64,
    /// Lines not written because an earlier write failed.
    pub lines_not_written: u64,
    /// CPU time of the writer thread, ns.
    pub cpu_ns: u64,
}

/// Handle to the writer thread.
pub struct LedgerWriter {
    tx: Option<Sender<LedgerLine>>,
    thread: Option<JoinHandle<WriterReport>>,
    error: Arc<Mutex<Option<String>>>,
    path: PathBuf,
}

impl LedgerWriter {
    /// Creates (truncates) the ledger file and starts the writer thread.
    ///
    /// # Errors
    /// [`Error::LedgerWrite`] when the file cannot be created; [`Error::Thread`] when the thread
    /// cannot start.
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::LedgerWrite {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let file = File::create(path).map_err(|source| Error::LedgerWrite {
            path: path.to_path_buf(),
            source,
        })?;
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let error = Arc::new(Mutex::new(None));
        let err2 = error.clone();
        let shown = path.display().to_string();
        let thread = std::thread::Builder::new()
            .name("gpu-ledger-writer".into())
            .spawn(move || write_loop(file, rx, err2, shown))
            .map_err(|e| Error::Thread(format!("gpu-ledger-writer could not start: {e}")))?;
        Ok(LedgerWriter {
            tx: Some(tx),
            thread: Some(thread),
            error,
            path: path.to_path_buf(),
        })
    }

    /// The ledger's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A sender for lines (the collector's).
    pub fn sender(&self) -> Option<Sender<LedgerLine>> {
        self.tx.clone()
    }

    /// Queues one line.
    pub fn send(&self, line: LedgerLine) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(line);
        }
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Closes the queue, waits for the thread and returns its report.
    pub fn close(mut self) -> WriterReport {
        self.tx = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(report)) => report,
            Some(Err(_)) => {
                // Each line's own panic is caught and counted (`write_loop`); this is one
                // outside them, after which nothing says how many lines were lost.
                eprintln!(
                    "gpu-ledger: the ledger writer thread of {} ended abnormally: the file is \
                     whole up to its last complete line, and how many lines after it were not \
                     written is unknown",
                    self.path.display()
                );
                WriterReport {
                    lines_not_written: 1,
                    ..WriterReport::default()
                }
            }
            None => WriterReport::default(),
        }
    }
}

impl Drop for LedgerWriter {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_loop(
    mut file: File,
    rx: Receiver<LedgerLine>,
    error: Arc<Mutex<Option<String>>>,
    path: String,
) -> WriterReport {
    let mut report = WriterReport::default();
    let mut good_len: u64 = 0;
    let mut buf = Vec::with_capacity(64 * 1024);
    for mut line in rx {
        if let LedgerLine::Trailer(t) = &mut line {
            // The trailer is the last line: the writer's CPU time so far is all of it but this line.
            t.overhead.writer_cpu_ns = crate::clock::thread_cpu_ns();
            t.lines_not_written = report.lines_not_written;
        }
        if error.lock().is_some() {
            report.lines_not_written += 1;
            continue;
        }
        buf.clear();
        // A panic while serializing (a Serialize impl's) costs this line, counted, not the
        // thread and every line after it uncounted.
        let serialized = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            serde_json::to_writer(&mut buf, &line)
        }));
        match serialized {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                report.lines_not_written += 1;
                eprintln!("gpu-ledger: a ledger line could not be serialized and was skipped: {e}");
                continue;
            }
            Err(_) => {
                report.lines_not_written += 1;
                eprintln!("gpu-ledger: serializing a ledger line panicked; the line was skipped");
                continue;
            }
        }
        buf.push(b'\n');
        match file.write_all(&buf) {
            Ok(()) => {
                good_len += buf.len() as u64;
                report.lines_written += 1;
            }
            Err(e) => {
                // Cut back to the last whole line so that the file stays valid.
                let _ = file.set_len(good_len);
                let msg = format!(
                    "writing the ledger {path} failed: {e}; the file is valid up to its last \
                     complete line and later lines are counted as not written. Free disk space \
                     or choose another path"
                );
                eprintln!("gpu-ledger: {msg}");
                *error.lock() = Some(msg);
                report.lines_not_written += 1;
            }
        }
    }
    let _ = file.flush();
    let _ = file.sync_data();
    report.cpu_ns = crate::clock::thread_cpu_ns();
    report
}
