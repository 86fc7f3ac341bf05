//! One table of the dataset being written: typed Arrow column builders filled one row at a time,
//! handed to a Parquet writer in batches, so that a table's memory is one batch and the row
//! group being encoded whatever the ledger's length.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::file::metadata::KeyValue;
use ::parquet::file::properties::WriterProperties;
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::DatasetError;

/// Rows gathered before they go to the Parquet writer as one batch.
const BATCH_ROWS: usize = 8192;

/// The type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    I64,
    F64,
    Bool,
    Str,
    StrList,
}

/// A column: its name, its type and whether it may be null.
#[derive(Debug, Clone, Copy)]
pub(super) struct Col {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) nullable: bool,
}

/// A non-null column.
pub(super) const fn req(name: &'static str, kind: Kind) -> Col {
    Col {
        name,
        kind,
        nullable: false,
    }
}

/// A nullable column.
pub(super) const fn opt(name: &'static str, kind: Kind) -> Col {
    Col {
        name,
        kind,
        nullable: true,
    }
}

/// The Arrow schema of `cols`.
pub(super) fn schema(cols: &[Col]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|c| {
                let t = match c.kind {
                    Kind::I64 => DataType::Int64,
                    Kind::F64 => DataType::Float64,
                    Kind::Bool => DataType::Boolean,
                    Kind::Str => DataType::Utf8,
                    Kind::StrList => {
                        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
                    }
                };
                Field::new(c.name, t, c.nullable)
            })
            .collect::<Vec<_>>(),
    ))
}

#[derive(Debug)]
enum Builder {
    I64(Int64Builder),
    F64(Float64Builder),
    Bool(BooleanBuilder),
    Str(StringBuilder),
    StrList(ListBuilder<StringBuilder>),
}

impl Builder {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::I64 => Self::I64(Int64Builder::with_capacity(BATCH_ROWS)),
            Kind::F64 => Self::F64(Float64Builder::with_capacity(BATCH_ROWS)),
            Kind::Bool => Self::Bool(BooleanBuilder::with_capacity(BATCH_ROWS)),
            Kind::Str => Self::Str(StringBuilder::new()),
            Kind::StrList => Self::StrList(ListBuilder::new(StringBuilder::new())),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::I64(b) => Arc::new(b.finish()),
            Self::F64(b) => Arc::new(b.finish()),
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Str(b) => Arc::new(b.finish()),
            Self::StrList(b) => Arc::new(b.finish()),
        }
    }
}

/// A value for an integer column: ledger counts and nanoseconds are `u64`, which Parquet readers
/// without unsigned types (Spark, Trino) cannot hold, so they are stored as `i64`; nothing a
/// ledger records reaches 2⁶³ ns (292 years), and a value that did would be stored as `i64::MAX`.
pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The next row of a table, filled column by column in schema order.
#[derive(Debug)]
pub(super) struct Row<'t> {
    cols: &'t mut [Builder],
    at: usize,
}

impl Row<'_> {
    fn next(&mut self) -> &mut Builder {
        let b = &mut self.cols[self.at];
        self.at += 1;
        b
    }

    /// An integer column.
    pub(super) fn i64(&mut self, v: Option<i64>) -> &mut Self {
        match self.next() {
            Builder::I64(b) => b.append_option(v),
            other => panic!("column is {other:?}, not i64"),
        }
        self
    }

    /// A non-null integer column from a ledger's `u64`.
    pub(super) fn u(&mut self, v: u64) -> &mut Self {
        self.i64(Some(int(v)))
    }

    /// A nullable integer column from a ledger's `Option<u64>`.
    pub(super) fn ou(&mut self, v: Option<u64>) -> &mut Self {
        self.i64(v.map(int))
    }

    /// A floating-point column.
    pub(super) fn f64(&mut self, v: Option<f64>) -> &mut Self {
        match self.next() {
            Builder::F64(b) => b.append_option(v),
            other => panic!("column is {other:?}, not f64"),
        }
        self
    }

    /// A boolean column.
    pub(super) fn bool(&mut self, v: Option<bool>) -> &mut Self {
        match self.next() {
            Builder::Bool(b) => b.append_option(v),
            other => panic!("column is {other:?}, not bool"),
        }
        self
    }

    /// A string column.
    pub(super) fn str(&mut self, v: Option<&str>) -> &mut Self {
        match self.next() {
            Builder::Str(b) => b.append_option(v),
            other => panic!("column is {other:?}, not a string"),
        }
        self
    }

    /// A list-of-strings column.
    pub(super) fn strs<'s>(&mut self, v: impl IntoIterator<Item = &'s str>) -> &mut Self {
        match self.next() {
            Builder::StrList(b) => {
                v.into_iter().for_each(|s| b.values().append_value(s));
                b.append(true);
            }
            other => panic!("column is {other:?}, not a list of strings"),
        }
        self
    }
}

/// One table's part file being written: its builders, its writer and where it goes.
pub(super) struct TableWriter {
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows_in_batch: usize,
    rows: u64,
    writer: Option<ArrowWriter<File>>,
    /// The hidden file written to, renamed to `path` when the table is complete.
    tmp: PathBuf,
    path: PathBuf,
}

impl std::fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableWriter")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

/// How a part file is written: compression, row groups and the file's key-value metadata.
pub(super) fn properties(row_group_rows: usize, metadata: Vec<KeyValue>) -> WriterProperties {
    WriterProperties::builder()
        // Level 3: zstd's default, most of its ratio at a fraction of the higher levels' time.
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_key_value_metadata(Some(metadata))
        .build()
}

impl TableWriter {
    /// A table of `cols` to be written at `path` (through a hidden file beside it).
    pub(super) fn create(
        path: &Path,
        cols: &[Col],
        props: WriterProperties,
    ) -> Result<Self, DatasetError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(DatasetError::io(dir, "cannot create directory"))?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            name.unwrap_or_default(),
            std::process::id()
        ));
        let file = File::create(&tmp).map_err(DatasetError::io(&tmp, "cannot create"))?;
        let schema = schema(cols);
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(DatasetError::parquet(&tmp))?;
        Ok(Self {
            builders: cols.iter().map(|c| Builder::new(c.kind)).collect(),
            schema,
            rows_in_batch: 0,
            rows: 0,
            writer: Some(writer),
            tmp,
            path: path.to_path_buf(),
        })
    }

    /// Appends one row, filled by `fill` in schema order.
    pub(super) fn row(&mut self, fill: impl FnOnce(&mut Row<'_>)) -> Result<(), DatasetError> {
        let mut row = Row {
            cols: &mut self.builders,
            at: 0,
        };
        fill(&mut row);
        assert_eq!(
            row.at,
            self.builders.len(),
            "a row of {} fills every column",
            self.path.display()
        );
        self.rows_in_batch += 1;
        self.rows += 1;
        if self.rows_in_batch >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DatasetError> {
        if self.rows_in_batch == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        let batch = RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| DatasetError::Other(format!("{}: {e}", self.path.display())))?;
        self.rows_in_batch = 0;
        match &mut self.writer {
            Some(w) => w.write(&batch).map_err(DatasetError::parquet(&self.tmp)),
            None => Ok(()),
        }
    }

    /// Rows appended.
    pub(super) fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes what is left and the footer, and moves the file to its name; its size in bytes.
    pub(super) fn finish(mut self) -> Result<u64, DatasetError> {
        self.flush()?;
        if let Some(w) = self.writer.take() {
            w.close().map_err(DatasetError::parquet(&self.tmp))?;
        }
        std::fs::rename(&self.tmp, &self.path).map_err(DatasetError::io(
            &self.path,
            "cannot move the written file to",
        ))?;
        let len = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        Ok(len)
    }
}

impl Drop for TableWriter {
    /// A table not finished (an error elsewhere) leaves no partial file behind: only the hidden
    /// file this writer created is removed.
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.writer = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
