//! Ledgers as a Parquet dataset (feature `parquet`), for query engines that read many ranks at
//! once (DataFusion in `gpu-ledger sql`, DuckDB, Spark, Trino, pyarrow).
//!
//! The layout is Hive-partitioned by run and rank: `OUT/<table>/run=<run>/rank=<rank>/part-0.parquet`,
//! one file per table and ledger, every table written for every ledger (empty when the ledger has
//! nothing for it) so that replacing a rank replaces all of its files. Files are zstd-compressed
//! with dictionary-encoded columns, in row groups of [`DatasetOptions::row_group_rows`]; a ledger
//! is read as a stream, so memory does not grow with its length. `docs/dataset.md` lists the
//! tables and their columns.
//!
//! Every file's key-value metadata carries the ledger's schema version and clock anchors
//! (`gpu_ledger.start_unix_ns`, `gpu_ledger.start_cupti_ns`), the run and the rank.
//!
//! The profiler itself never links Arrow: an application converts its ledger after the run.
//!
//! ```no_run
//! use gpu_ledger_tools::export::parquet::{write_dataset, DatasetOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // After `profiler.finish()`: every rank adds its own ledger to the job's dataset.
//! let stats = write_dataset(&["run.jsonl".into()], "dataset".as_ref(), &DatasetOptions::default())?;
//! println!("{} rows in {} bytes", stats.rows, stats.bytes);
//! # Ok(()) }
//! ```

mod columns;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use ::parquet::file::metadata::KeyValue;
use parking_lot::Mutex;

use self::columns::{properties, TableWriter};
pub use self::tables::TABLES;
use self::tables::{columns, environment_row, iteration_rows, LedgerFacts, ENVIRONMENT};
use gpu_ledger_format::schema::Header;
use gpu_ledger_format::stream::{LedgerStream, StreamItem};

/// The file in a dataset's root that marks it as one: a directory holding it may be added to.
pub const MARKER: &str = "_gpu_ledger_dataset";

/// Version of the dataset's layout and columns, in every file's metadata.
pub const DATASET_VERSION: u32 = 1;

/// How a dataset is written.
#[derive(Debug, Clone)]
pub struct DatasetOptions {
    /// The run's partition value; `None` derives it from each header ([`run_key`]).
    pub run: Option<String>,
    /// Replace the files of a run and rank already in the dataset (only those).
    pub overwrite: bool,
    /// Rows per row group at most.
    pub row_group_rows: usize,
    /// Ledgers converted at once.
    pub threads: usize,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        Self {
            run: None,
            overwrite: false,
            // Large enough for zstd and dictionaries to pay off, small enough that a row group of
            // the widest table stays a few MB while it is encoded.
            row_group_rows: 65_536,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Why a dataset cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A ledger does not read (names the file and line).
    #[error("{0}")]
    Ledger(#[from] gpu_ledger_format::Error),
    /// A file or directory cannot be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("cannot write {}: {message}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The writer's message.
        message: String,
    },
    /// The output is not a directory this writer may fill.
    #[error("{message}")]
    Output {
        /// The cause and the fix.
        message: String,
    },
    /// Anything else, with its cause and fix.
    #[error("{0}")]
    Other(String),
}

impl DatasetError {
    fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { what, path, source }
    }

    fn parquet(path: &Path) -> impl FnOnce(::parquet::errors::ParquetError) -> Self {
        let path = path.to_path_buf();
        move |e| Self::Parquet {
            path,
            message: e.to_string(),
        }
    }
}

/// One ledger converted.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerStats {
    /// The ledger.
    pub path: PathBuf,
    /// Its run's partition value.
    pub run: String,
    /// Its rank's partition value.
    pub rank: u32,
    /// Iteration rows read.
    pub rows: u64,
    /// Bytes of the Parquet files written.
    pub bytes: u64,
    /// Seconds the conversion took.
    pub seconds: f64,
}

/// A dataset written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DatasetStats {
    /// Each ledger, in the order given.
    pub ledgers: Vec<LedgerStats>,
    /// Iteration rows, all ledgers.
    pub rows: u64,
    /// Bytes written, all files.
    pub bytes: u64,
    /// Things to know (ranks numbered by argument order, ...).
    pub notes: Vec<String>,
}

/// The run's partition value derived from a header, for ledgers whose header names no run (none
/// does today): `<program>-<12 hex digits>`, the program's file name and a 64-bit FNV-1a hash of
/// the command line and the world size. A launcher's per-process arguments (`--local_rank N`,
/// `--local-rank=N`) are left out, so the ranks of one job agree; two jobs of the same command and
/// world size agree too, which `--run` (or [`DatasetOptions::run`]) tells apart.
pub fn run_key(h: &Header) -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes.iter().chain(&[0]) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let args = &h.environment.command_line;
    let mut skip_next = false;
    for a in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if a == "--local_rank" || a == "--local-rank" {
            skip_next = true;
            continue;
        }
        if a.starts_with("--local_rank=") || a.starts_with("--local-rank=") {
            continue;
        }
        eat(a.as_bytes());
    }
    let world = h.rank.as_ref().and_then(|r| r.world_size).unwrap_or(0);
    eat(&world.to_le_bytes());
    let program: String = args
        .first()
        .and_then(|p| Path::new(p).file_name())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if partition_char(c) { c } else { '_' })
        .take(32)
        .collect();
    let program = program.trim_start_matches(['.', '_']);
    let program = if program.is_empty() { "run" } else { program };
    format!("{program}-{:012x}", hash >> 16)
}

fn partition_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Checks a run name given by the user: it becomes a directory name.
fn check_run_name(run: &str) -> Result<(), DatasetError> {
    if run.is_empty() || run.starts_with(['.', '_']) || !run.chars().all(partition_char) {
        return Err(DatasetError::Other(format!(
            "run name {run:?} cannot be a partition value: use letters, digits, '.', '_' and '-', \
             not starting with '.' or '_' (readers skip such directories)"
        )));
    }
    Ok(())
}

/// The ledgers named by `paths`: files as given, and the `*.jsonl` files of each directory
/// (sorted by name).
///
/// # Errors
/// A directory that cannot be read, holds no `*.jsonl` file, or holds a compressed ledger
/// (`*.jsonl.gz`, `*.jsonl.zst`) without its decompressed twin beside it: the dataset is written
/// from text ledgers, and leaving one out would lose its rows without a word.
pub fn ledgers_in(paths: &[PathBuf]) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(ledgers_of_dir(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Directory `dir`'s `*.jsonl` files, sorted; see [`ledgers_in`].
fn ledgers_of_dir(dir: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let (mut found, mut compressed) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(dir).map_err(DatasetError::io(dir, "cannot read directory"))? {
        let path = e
            .map_err(DatasetError::io(dir, "cannot read directory"))?
            .path();
        if !path.is_file() {
            continue;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if name.ends_with(".jsonl") {
            found.push(path);
        } else if name.ends_with(".jsonl.gz") || name.ends_with(".jsonl.zst") {
            compressed.push(path);
        }
    }
    // A compressed ledger whose text twin is here too is the same run, read once.
    compressed.retain(|c| !found.contains(&c.with_extension("")));
    compressed.sort();
    if let Some(first) = compressed.first() {
        let names: Vec<String> = compressed.iter().map(|c| c.display().to_string()).collect();
        let gz = first.extension().is_some_and(|e| e == "gz");
        let tool = if gz { "zcat" } else { "zstdcat" };
        return Err(DatasetError::Other(format!(
            "{} holds compressed ledgers, which the dataset is not written from: {}; decompress \
             them beside the others (`{tool} {} > {}`), or name the ledgers to convert",
            dir.display(),
            names.join(", "),
            first.display(),
            first.with_extension("").display()
        )));
    }
    if found.is_empty() {
        return Err(DatasetError::Other(format!(
            "{} holds no ledger (*.jsonl): name the ledgers or their directory",
            dir.display()
        )));
    }
    found.sort();
    Ok(found)
}

/// One ledger's place in the dataset.
#[derive(Debug, Clone)]
struct Planned {
    path: PathBuf,
    run: String,
    rank: u32,
}

/// A ledger opened, its header read.
type Opened = LedgerStream<std::io::BufReader<std::fs::File>>;

/// What [`plan`] finds: each ledger's place, the notes, and the ledgers that can be read only
/// once (a FIFO, `/dev/stdin`) kept open after their header, in the order given.
type Plan = (Vec<Planned>, Vec<String>, Vec<Option<Opened>>);

/// Each ledger's run and rank from its header: within a run, ranks as the headers give them,
/// or numbered in the order given when no header has one (as `gpu-ledger merge` does).
fn plan(ledgers: &[PathBuf], opts: &DatasetOptions) -> Result<Plan, DatasetError> {
    if ledgers.is_empty() {
        return Err(DatasetError::Other("no ledger to convert".into()));
    }
    if let Some(run) = &opts.run {
        check_run_name(run)?;
    }
    let mut heads = Vec::new();
    let mut kept = Vec::new();
    for p in ledgers {
        let stream = LedgerStream::open(p)?;
        let h = stream.header().clone();
        // A regular file is opened again to convert it (a thousand ranks would take a thousand
        // descriptors); anything else cannot be read twice and stays open.
        let regular = std::fs::metadata(p).is_ok_and(|m| m.is_file());
        kept.push((!regular).then_some(stream));
        let run = opts.run.clone().unwrap_or_else(|| run_key(&h));
        heads.push((p.clone(), run, h.rank.map(|r| r.rank)));
    }
    let mut notes = Vec::new();
    let mut runs: Vec<&str> = heads.iter().map(|h| h.1.as_str()).collect();
    runs.sort_unstable();
    runs.dedup();
    let mut planned: Vec<Option<Planned>> = vec![None; heads.len()];
    for run in runs {
        let members: Vec<usize> = (0..heads.len()).filter(|&i| heads[i].1 == run).collect();
        let with_rank = members.iter().filter(|&&i| heads[i].2.is_some()).count();
        if with_rank > 0 && with_rank < members.len() {
            let i = members
                .iter()
                .find(|&&i| heads[i].2.is_none())
                .copied()
                .unwrap_or(0);
            return Err(DatasetError::Other(format!(
                "{} has no rank in its header while other ledgers of run {run} do: it was not \
                 launched as a rank; convert it with its own --run",
                heads[i].0.display()
            )));
        }
        if with_rank == 0 && members.len() > 1 {
            notes.push(format!(
                "run {run}: no ledger has a rank in its header: ranks are numbered in the order given"
            ));
        }
        let mut seen: std::collections::BTreeMap<u32, usize> = Default::default();
        for (n, &i) in members.iter().enumerate() {
            let rank = heads[i].2.unwrap_or(n as u32);
            if let Some(&first) = seen.get(&rank) {
                return Err(DatasetError::Other(format!(
                    "{} and {} both claim rank {rank} of run {run}: pass each rank's ledger once, \
                     or give each run its own --run",
                    heads[first].0.display(),
                    heads[i].0.display()
                )));
            }
            seen.insert(rank, i);
            planned[i] = Some(Planned {
                path: heads[i].0.clone(),
                run: run.to_string(),
                rank,
            });
        }
    }
    Ok((planned.into_iter().flatten().collect(), notes, kept))
}

/// The part file of table `table` for one ledger.
pub fn part_path(out: &Path, table: &str, run: &str, rank: u32) -> PathBuf {
    out.join(table)
        .join(format!("run={run}"))
        .join(format!("rank={rank}"))
        .join("part-0.parquet")
}

/// What [`prepare_output`] made, to be undone when no ledger could be converted.
#[derive(Debug, Clone, Copy, Default)]
struct Made {
    dir: bool,
    marker: bool,
}

/// Removes what [`prepare_output`] made and the empty table directories, when no ledger was
/// converted: a failed first conversion leaves no dataset behind.
fn undo_output(out: &Path, made: Made) {
    if !made.marker {
        return;
    }
    for name in TABLES {
        let _ = std::fs::remove_dir(out.join(name));
    }
    let _ = std::fs::remove_file(out.join(MARKER));
    if made.dir {
        let _ = std::fs::remove_dir(out);
    }
}

/// Makes `out` a dataset directory, or checks that it is one: it may not exist, be empty, or hold
/// [`MARKER`]; anything else (a file, a device, a directory of other files) is refused untouched.
fn prepare_output(out: &Path) -> Result<Made, DatasetError> {
    let mut made = Made::default();
    let refuse = |why: String| Err(DatasetError::Output { message: why });
    match std::fs::metadata(out) {
        Ok(m) if !m.is_dir() => {
            return refuse(format!(
                "{} exists and is not a directory: name a new or empty directory for the dataset",
                out.display()
            ))
        }
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(out).map_err(DatasetError::io(out, "cannot read directory"))?;
            if entries.next().is_some() && !out.join(MARKER).is_file() {
                return refuse(format!(
                    "{} is not empty and is not a gpu-ledger dataset (it has no {MARKER} file): \
                     name a new or empty directory",
                    out.display()
                ));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(out)
                .map_err(DatasetError::io(out, "cannot create directory"))?;
            made.dir = true;
        }
        Err(e) => return Err(DatasetError::io(out, "cannot read")(e)),
    }
    let marker = out.join(MARKER);
    if !marker.is_file() {
        let text = format!(
            "{{\"dataset_version\":{DATASET_VERSION},\"layout\":\"<table>/run=<run>/rank=<rank>/part-0.parquet\",\"tables\":{}}}\n",
            serde_json::to_string(&TABLES).unwrap_or_default()
        );
        std::fs::write(&marker, text).map_err(DatasetError::io(&marker, "cannot write"))?;
        made.marker = true;
    }
    Ok(made)
}

/// The key-value metadata of every file of one ledger, table `table`.
fn metadata(h: &Header, p: &Planned, table: &str) -> Vec<KeyValue> {
    let kv = |k: &str, v: String| KeyValue::new(format!("gpu_ledger.{k}"), v);
    let mut m = vec![
        kv("dataset_version", DATASET_VERSION.to_string()),
        kv("table", table.to_string()),
        kv("run", p.run.clone()),
        kv("rank", p.rank.to_string()),
        kv("schema_version", h.schema_version.to_string()),
        kv("ledger_writer_version", h.gpu_ledger_version.clone()),
        kv("converter_version", env!("CARGO_PKG_VERSION").to_string()),
        kv("source", p.path.display().to_string()),
        kv("start_unix_ns", h.start_unix_ns.to_string()),
        kv(
            "clock",
            "host times (host_start_ns, scope spans) are ns since start_unix_ns; device times \
             (first_start_ns, activities) are CUPTI ns: Unix ns = t - start_cupti_ns + \
             start_unix_ns"
                .to_string(),
        ),
    ];
    if let Some(c) = h.start_cupti_ns {
        m.push(kv("start_cupti_ns", c.to_string()));
    }
    m
}

/// Converts one planned ledger; its files appear only once all are complete, and a failure
/// leaves none of them and none of the directories it created empty.
fn convert(
    p: &Planned,
    opened: Option<Opened>,
    out: &Path,
    opts: &DatasetOptions,
) -> Result<LedgerStats, DatasetError> {
    let r = convert_files(p, opened, out, opts);
    if r.is_err() {
        for name in TABLES {
            let part = part_path(out, name, &p.run, p.rank);
            // `remove_dir` removes only an empty directory: files already there stay.
            for dir in part.ancestors().skip(1).take(2) {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    r
}

fn convert_files(
    p: &Planned,
    opened: Option<Opened>,
    out: &Path,
    opts: &DatasetOptions,
) -> Result<LedgerStats, DatasetError> {
    let t0 = Instant::now();
    let mut stream = match opened {
        Some(s) => s,
        None => LedgerStream::open(&p.path)?,
    };
    let header = stream.header().clone();
    let mut writers = Vec::with_capacity(TABLES.len());
    for (t, name) in TABLES.iter().enumerate() {
        let path = part_path(out, name, &p.run, p.rank);
        if path.exists() && !opts.overwrite {
            return Err(DatasetError::Output {
                message: format!(
                    "{} exists: rank {} of run {} is already in the dataset; pass --overwrite to \
                     replace that rank's files, or --run NAME to add it as another run",
                    path.display(),
                    p.rank,
                    p.run
                ),
            });
        }
        let props = properties(opts.row_group_rows, metadata(&header, p, name));
        writers.push(TableWriter::create(&path, columns(t), props)?);
    }
    let mut trailer = None;
    let mut rows = 0u64;
    while let Some(item) = stream.next_item()? {
        match item {
            StreamItem::Row(_, row) => {
                rows += 1;
                iteration_rows(&row, &mut |t, fill| writers[t].row(fill))?;
            }
            StreamItem::Trailer(_, t) => trailer = Some(*t),
        }
    }
    let source = p.path.display().to_string();
    let facts = LedgerFacts {
        source: &source,
        rows,
        truncated_last_line: stream.truncated_last_line(),
    };
    writers[ENVIRONMENT].row(|r| environment_row(r, &header, trailer.as_ref(), &facts))?;
    debug_assert_eq!(writers[ENVIRONMENT].rows(), 1);
    let mut bytes = 0;
    for w in writers {
        bytes += w.finish()?;
    }
    Ok(LedgerStats {
        path: p.path.clone(),
        run: p.run.clone(),
        rank: p.rank,
        rows,
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// Converts `ledgers` into the dataset at `out`, [`DatasetOptions::threads`] ledgers at a time.
/// `out` may not exist (it is created), be empty, or be a dataset (it holds [`MARKER`]) that
/// ranks are added to.
///
/// # Errors
/// [`DatasetError`]: a ledger that does not read (file and line), two ledgers of one rank, an
/// output that is not a dataset directory, a rank already converted (without
/// [`DatasetOptions::overwrite`]), a file that cannot be written. Ledgers converted before the
/// error keep their complete files; the failing one leaves none.
pub fn write_dataset(
    ledgers: &[PathBuf],
    out: &Path,
    opts: &DatasetOptions,
) -> Result<DatasetStats, DatasetError> {
    let (planned, notes, kept) = plan(ledgers, opts)?;
    let made = prepare_output(out)?;
    let kept: Vec<Mutex<Option<Opened>>> = kept.into_iter().map(Mutex::new).collect();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<(usize, Result<LedgerStats, DatasetError>)>> = Mutex::new(Vec::new());
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= planned.len() || failed.load(Ordering::Relaxed) {
            break;
        }
        let r = convert(&planned[i], kept[i].lock().take(), out, opts);
        if r.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        results.lock().push((i, r));
    };
    std::thread::scope(|s| {
        for n in 1..opts.threads.clamp(1, planned.len()) {
            let spawned = std::thread::Builder::new()
                .name(format!("gpu-ledger-parquet-{n}"))
                .spawn_scoped(s, work);
            // No thread to be had: the calling thread converts them all.
            if spawned.is_err() {
                break;
            }
        }
        work();
    });
    let mut results = results.into_inner();
    results.sort_by_key(|r| r.0);
    let mut stats = DatasetStats {
        notes,
        ..DatasetStats::default()
    };
    if !results.iter().any(|r| r.1.is_ok()) {
        undo_output(out, made);
    }
    for (_, r) in results {
        let l = r?;
        stats.rows += l.rows;
        stats.bytes += l.bytes;
        stats.ledgers.push(l);
    }
    Ok(stats)
}
