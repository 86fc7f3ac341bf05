//! Progress of a long read on stderr. On a terminal, once a command has run for a second, one
//! line that updates in place: bytes read of the ledger's size, and rows. Not on a terminal,
//! nothing, unless `--progress` asks for a line every [`PROGRESS_EVERY`] rows (a log keeps each).

use std::cell::Cell;
use std::io::{self, IsTerminal, Read, Write};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Rows between two progress lines when `--progress` is given and stderr is not a terminal.
pub(crate) const PROGRESS_EVERY: u64 = 10_000;

/// How long a command runs before the terminal shows its progress.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// Least time between two updates of the terminal's line.
const REDRAW_EVERY: Duration = Duration::from_millis(100);

/// Rows between two looks at the clock (a clock read per row would cost more than the row).
const CLOCK_EVERY: u64 = 256;

/// A reader that counts the bytes read through it, for the progress line.
pub(crate) struct Counted<R> {
    inner: R,
    bytes: Rc<Cell<u64>>,
}

impl<R> Counted<R> {
    /// `inner`, counting into the returned counter.
    pub(crate) fn new(inner: R) -> (Self, Rc<Cell<u64>>) {
        let bytes = Rc::new(Cell::new(0));
        (
            Self {
                inner,
                bytes: Rc::clone(&bytes),
            },
            bytes,
        )
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What a progress display shows and where (see the module doc).
pub(crate) struct Progress {
    out: Box<dyn Write>,
    tty: bool,
    forced: bool,
    label: String,
    bytes: Rc<Cell<u64>>,
    total: Option<u64>,
    start: Instant,
    last_draw: Option<Instant>,
}

impl Progress {
    /// Progress of reading `label` (`total` bytes, when known) on stderr; `terminal`: whether it
    /// may take a terminal's line (else a terminal shows nothing of it).
    pub(crate) fn stderr(
        forced: bool,
        terminal: bool,
        label: &str,
        bytes: Rc<Cell<u64>>,
        total: Option<u64>,
    ) -> Self {
        let tty = io::stderr().is_terminal();
        let forced = forced && (terminal || !tty);
        Self::new(
            Box::new(io::stderr()),
            tty && terminal,
            forced,
            label,
            bytes,
            total,
        )
    }

    /// Progress on `out`, a terminal when `tty`.
    pub(crate) fn new(
        out: Box<dyn Write>,
        tty: bool,
        forced: bool,
        label: &str,
        bytes: Rc<Cell<u64>>,
        total: Option<u64>,
    ) -> Self {
        Self {
            out,
            tty,
            forced,
            label: label.to_string(),
            bytes,
            total,
            start: Instant::now(),
            last_draw: None,
        }
    }

    /// Counts from `start` instead of now (a command that read other inputs first).
    pub(crate) fn since(mut self, start: Instant) -> Self {
        self.start = start;
        self
    }

    fn line(&self, rows: u64) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        let read = self.bytes.get();
        match self.total.filter(|&t| t > 0) {
            Some(t) => format!(
                "{}: {:.0} / {:.0} MB read ({:.0} %), {rows} rows",
                self.label,
                mb(read),
                mb(t),
                100.0 * read.min(t) as f64 / t as f64
            ),
            None => format!("{}: {:.0} MB read, {rows} rows", self.label, mb(read)),
        }
    }

    /// After each row; `rows` read so far.
    pub(crate) fn tick(&mut self, rows: u64) {
        if !self.tty {
            if self.forced && rows > 0 && rows % PROGRESS_EVERY == 0 {
                let _ = writeln!(self.out, "{}: {rows} rows read", self.label);
            }
            return;
        }
        if rows % CLOCK_EVERY != 0 {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.start) < QUIET_FOR
            || self
                .last_draw
                .is_some_and(|t| now.duration_since(t) < REDRAW_EVERY)
        {
            return;
        }
        self.last_draw = Some(now);
        // `\r` and erase-to-end keep it one line that updates in place.
        let line = self.line(rows);
        let _ = write!(self.out, "\r{line}\x1b[K");
        let _ = self.out.flush();
    }

    /// At the end of the read: the terminal's line is finished with the final count.
    pub(crate) fn done(&mut self, rows: u64) {
        if self.tty && self.last_draw.take().is_some() {
            let line = self.line(rows);
            let _ = writeln!(self.out, "\r{line}\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A sink the test can read after the progress has written to it.
    #[derive(Clone, Default)]
    struct Sink(Rc<RefCell<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.borrow().clone()).unwrap()
        }
    }

    fn run(tty: bool, forced: bool, started_ago: Duration) -> String {
        let sink = Sink::default();
        let bytes = Rc::new(Cell::new(0));
        let mut p = Progress::new(
            Box::new(sink.clone()),
            tty,
            forced,
            "run.jsonl",
            Rc::clone(&bytes),
            Some(2_000_000_000),
        )
        .since(Instant::now() - started_ago);
        for rows in 1..=30_000u64 {
            bytes.set(rows * 2_000);
            p.tick(rows);
        }
        p.done(30_000);
        sink.text()
    }

    #[test]
    fn silent_when_stderr_is_not_a_terminal() {
        assert_eq!(run(false, false, Duration::from_secs(60)), "");
    }

    #[test]
    fn a_terminal_sees_nothing_in_the_first_second() {
        assert_eq!(run(true, false, Duration::ZERO), "");
    }

    #[test]
    fn a_terminal_sees_one_updating_line_of_bytes_and_rows_after_a_second() {
        let text = run(true, false, Duration::from_secs(2));
        assert!(
            text.starts_with("\rrun.jsonl: 1 / 2000 MB read (0 %), 256 rows"),
            "{text:?}"
        );
        assert_eq!(
            text.matches('\n').count(),
            1,
            "one line, ended once: {text:?}"
        );
        assert!(
            text.ends_with("\rrun.jsonl: 60 / 2000 MB read (3 %), 30000 rows\x1b[K\n"),
            "{text:?}"
        );
    }

    #[test]
    fn asked_for_off_a_terminal_it_logs_every_ten_thousand_rows() {
        let text = run(false, true, Duration::ZERO);
        assert_eq!(
            text,
            "run.jsonl: 10000 rows read\nrun.jsonl: 20000 rows read\nrun.jsonl: 30000 rows read\n"
        );
    }

    #[test]
    fn counted_reader_counts_bytes() {
        let (mut r, bytes) = Counted::new(&b"hello world"[..]);
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(bytes.get(), 11);
    }
}
