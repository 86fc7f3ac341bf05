//! `gpu-ledger sql` (feature `sql`): SQL over a Parquet dataset of ledgers by an embedded
//! DataFusion. The named queries are the fenced `sql <name>` blocks of docs/sql.md, taken into
//! the binary when it is built, so that the page and the command cannot disagree.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::ListingOptions;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{SessionConfig, SessionContext};
use gpu_ledger_tools::export::parquet::{MARKER, TABLES};
use gpu_ledger_tools::export::text::{csv_field, csv_text};

use super::{display, CliError};

/// docs/sql.md, whose `sql <name>` blocks are the named queries.
const SQL_DOC: &str = include_str!("../../docs/sql.md");

/// The named queries of docs/sql.md: `(name, text)` of each block opened by "```sql <name>".
pub(crate) fn named_queries() -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut lines = SQL_DOC.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("```sql ").map(str::trim) else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        // The other engines' registration blocks are not queries of this engine.
        if !name.contains("setup") {
            out.push((name, body.join("\n")));
        }
    }
    out
}

/// The SQL that `query` stands for: a named query, a file of SQL, or SQL itself.
fn query_text(query: &str) -> Result<String, CliError> {
    if let Some((_, q)) = named_queries().into_iter().find(|(n, _)| *n == query) {
        return Ok(q);
    }
    let p = Path::new(query);
    if query.ends_with(".sql") {
        return std::fs::read_to_string(p).map_err(|e| {
            CliError::Other(format!(
                "cannot read the SQL file {}: {e} (named queries: {})",
                display(p),
                names()
            ))
        });
    }
    if !query.contains(char::is_whitespace) {
        return Err(CliError::Other(format!(
            "{query:?} is no named query, no .sql file and no SQL statement: the named queries \
             are {}",
            names()
        )));
    }
    Ok(query.to_string())
}

fn names() -> String {
    named_queries()
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Output of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SqlFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header line.
    Csv,
}

/// Runs `query` over the dataset at `dataset` and prints its result.
pub(crate) fn sql(dataset: &Path, query: &str, format: SqlFormat) -> Result<(), CliError> {
    if !dataset.join(MARKER).is_file() {
        return Err(CliError::Other(format!(
            "{} is not a gpu-ledger dataset (it has no {MARKER} file): write one with `gpu-ledger \
             parquet LEDGERS -o {}`",
            display(dataset),
            display(dataset)
        )));
    }
    let text = query_text(query)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("gpu-ledger-sql")
        .build()
        .map_err(|e| CliError::Other(format!("cannot start the query engine's threads: {e}")))?;
    let batches = runtime.block_on(async {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_target_partitions(threads));
        let mut tables = Vec::new();
        for name in TABLES {
            let dir = dataset.join(name);
            if !dir.is_dir() {
                continue;
            }
            let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
                .with_file_extension(".parquet")
                .with_table_partition_cols(vec![
                    ("run".to_string(), DataType::Utf8),
                    ("rank".to_string(), DataType::Int64),
                ]);
            let url = format!("{}/", dir.display());
            ctx.register_listing_table(name, &url, options, None, None)
                .await
                .map_err(|e| {
                    CliError::Other(format!(
                        "cannot read table {name} in {}: {e}",
                        display(&dir)
                    ))
                })?;
            tables.push(name);
        }
        // A query over a dataset reads that dataset only: no DDL (CREATE EXTERNAL TABLE on any
        // file, DROP), no DML (INSERT, COPY ... TO a file) and no statements (SET, ...).
        let read_only = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = ctx.sql_with_options(&text, read_only).await.map_err(|e| {
            refused(&text, &e).unwrap_or_else(|| {
                CliError::Other(format!(
                    "the query does not run: {e}\nthe tables are {} (columns: docs/dataset.md)",
                    tables.join(", ")
                ))
            })
        })?;
        let schema = df.schema().as_arrow().clone();
        let batches = df
            .collect()
            .await
            .map_err(|e| CliError::Other(format!("the query failed: {e}")))?;
        Ok::<_, CliError>((schema, batches))
    })?;
    let (schema, batches) = batches;
    let out = match format {
        SqlFormat::Table => {
            pretty_format_batches(&batches)
                .map_err(|e| CliError::Other(format!("cannot format the result: {e}")))?
                .to_string()
                + "\n"
        }
        SqlFormat::Csv => to_csv(&schema, &batches)?,
    };
    super::print(&out)
}

/// The statement's first words (`COPY`, `CREATE EXTERNAL TABLE`, `DROP TABLE`), as the refusal
/// names it.
fn statement_words(sql: &str) -> String {
    let words: Vec<String> = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .flat_map(str::split_whitespace)
        .take(3)
        .map(str::to_uppercase)
        .collect();
    let n = match words.first().map(String::as_str) {
        Some("CREATE") if words.get(1).is_some_and(|w| w == "EXTERNAL") => 3,
        Some("CREATE" | "DROP" | "INSERT" | "ALTER" | "TRUNCATE") => 2,
        _ => 1,
    };
    words.into_iter().take(n).collect::<Vec<_>>().join(" ")
}

/// The error of a statement the read-only options refused, naming it; `None` for another error.
fn refused(sql: &str, e: &datafusion::error::DataFusionError) -> Option<CliError> {
    let text = e.to_string();
    let kind = [
        "DDL not supported",
        "DML not supported",
        "Statement not supported",
    ]
    .into_iter()
    .find(|k| text.contains(k))?;
    Some(CliError::Other(format!(
        "{} is refused ({kind}): gpu-ledger sql reads the dataset and writes nothing, so only \
         queries run (SELECT, WITH, EXPLAIN); COPY, CREATE, DROP, INSERT and SET are not \
         statements of a query",
        statement_words(sql)
    )))
}

/// The batches as CSV: a header line (also when no row came back), then one line per row; null
/// is an empty field.
fn to_csv(schema: &Schema, batches: &[RecordBatch]) -> Result<String, CliError> {
    let mut o = String::new();
    let head: Vec<String> = schema.fields().iter().map(|f| csv_text(f.name())).collect();
    o.push_str(&head.join(","));
    o.push('\n');
    let opts = FormatOptions::default();
    for b in batches {
        let cols = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CliError::Other(format!("cannot format the result: {e}")))?;
        // Text (a kernel or scope name from a ledger) is guarded against spreadsheet formulas;
        // a number, negative ones included, is written as it is.
        let text: Vec<bool> = b
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Dictionary(_, v) => v.is_string(),
                t => t.is_string(),
            })
            .collect();
        for row in 0..b.num_rows() {
            let cells: Vec<String> = cols
                .iter()
                .zip(&text)
                .map(|(c, &text)| {
                    let v = c.value(row).to_string();
                    if text {
                        csv_text(&v)
                    } else {
                        csv_field(&v)
                    }
                })
                .collect();
            o.push_str(&cells.join(","));
            o.push('\n');
        }
    }
    Ok(o)
}
