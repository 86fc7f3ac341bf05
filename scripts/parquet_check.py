"""Checks a dataset written by `gpu-ledger parquet` with readers that share no code with it.

pyarrow reads the files: schema, row counts against the JSONL ledgers (parsed here with Python's
json), the Hive layout, the key-value metadata, the zstd codec and dictionary-encoded names.
DuckDB runs the SQL of docs/sql.md (its fenced blocks, so the page cannot drift from what is
checked) and its answers are compared with `gpu-ledger merge` and with the embedded engine's.

    python3 scripts/parquet_check.py WORK_DIR docs/sql.md

WORK_DIR holds ledgers/*.jsonl, dataset/, merge.csv and <query>.csv from `gpu-ledger sql`.
"""

import csv
import glob
import json
import os
import re
import sys

import duckdb
import pyarrow.dataset as ds
import pyarrow.parquet as pq

TABLES = ["iterations", "devices", "scopes", "kernels", "transfers", "activities",
          "scope_spans", "nvml", "counters", "launch_threads", "environment", "idle_gaps",
          "idle_causes"]
KEYS = ["gpu_ledger.dataset_version", "gpu_ledger.table", "gpu_ledger.run", "gpu_ledger.rank",
        "gpu_ledger.schema_version", "gpu_ledger.start_unix_ns", "gpu_ledger.start_cupti_ns",
        "gpu_ledger.clock"]
# DataFusion's percentile_cont truncates its interpolation weight to six decimals.
WEIGHT_ERROR = 1e-6

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def expected_counts(ledgers):
    """Rows each table must hold, from the ledgers' own JSON."""
    n = {t: 0 for t in TABLES}
    for path in ledgers:
        with open(path) as f:
            for line in f:
                o = json.loads(line)
                if o["type"] == "header":
                    n["environment"] += 1
                if o["type"] != "iteration":
                    continue
                n["iterations"] += 1
                n["devices"] += len(o["devices"])
                n["scopes"] += len(o["scopes"])
                n["kernels"] += len(o["kernels"])
                n["transfers"] += len(o["memcpy"]) + len(o["memset"]) + len(o["synchronization"])
                n["activities"] += len(o.get("activities") or [])
                n["scope_spans"] += len(o.get("scope_spans") or [])
                n["nvml"] += len(o.get("nvml") or [])
                n["launch_threads"] += len(o.get("launch_threads") or [])
                for d in o["devices"]:
                    idle = d.get("idle") or {}
                    n["idle_gaps"] += len(idle.get("largest_gaps") or [])
                    n["idle_causes"] += len(idle.get("causes") or [])
                c = o.get("counters")
                if c:
                    n["counters"] += sum(len(r["values"]) for r in c["ranges"])
    return n


def check_files(dataset, ledgers):
    counts = expected_counts(ledgers)
    check(os.path.isfile(os.path.join(dataset, "_gpu_ledger_dataset")), "the marker file")
    layout = re.compile(r"^([a-z_]+)/run=([A-Za-z0-9._-]+)/rank=(\d+)/part-0\.parquet$")
    for table in TABLES:
        files = sorted(glob.glob(os.path.join(dataset, table, "*", "*", "*")))
        check(len(files) == len(ledgers), f"{table}: one file per ledger ({len(files)})")
        for f in files:
            m = layout.match(os.path.relpath(f, dataset))
            check(m is not None and m.group(1) == table, f"layout of {f}")
            meta = pq.ParquetFile(f).metadata
            kv = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()}
            for key in KEYS:
                check(key in kv, f"{f}: metadata key {key}")
            if m:
                check(kv.get("gpu_ledger.run") == m.group(2), f"{f}: run in metadata")
                check(kv.get("gpu_ledger.rank") == m.group(3), f"{f}: rank in metadata")
            check(kv.get("gpu_ledger.table") == table, f"{f}: table in metadata")
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                for c in range(rg.num_columns):
                    col = rg.column(c)
                    check(col.compression == "ZSTD", f"{f}: {col.path_in_schema} is {col.compression}")
                    if col.path_in_schema in ("path", "name") and col.num_values > 0:
                        check("RLE_DICTIONARY" in col.encodings,
                              f"{f}: {col.path_in_schema} not dictionary-encoded: {col.encodings}")
        d = ds.dataset(os.path.join(dataset, table), format="parquet", partitioning="hive")
        names = d.schema.names
        check("run" in names and "rank" in names, f"{table}: hive partitions found ({names})")
        check(d.count_rows() == counts[table],
              f"{table}: {d.count_rows()} rows, the ledgers have {counts[table]}")
    print("pyarrow: layout, metadata, codec, dictionaries and row counts of",
          len(TABLES), "tables checked")


def doc_blocks(doc):
    """The fenced `sql <name>` blocks of docs/sql.md."""
    blocks = {}
    for m in re.finditer(r"^```sql ([a-z-]+)\n(.*?)^```", open(doc).read(), re.M | re.S):
        blocks[m.group(1)] = m.group(2)
    return blocks


def read_csv(path):
    with open(path) as f:
        return list(csv.reader(f))


def near(a, b, gap):
    return abs(float(a) - float(b)) <= WEIGHT_ERROR * gap + 1e-9 * max(abs(float(a)), 1.0)


def check_sql(work, doc):
    dataset = os.path.join(work, "dataset")
    blocks = doc_blocks(doc)
    con = duckdb.connect()
    con.execute(blocks["duckdb-setup"].replace("DATASET", dataset))
    res = {}
    for q in ["straggler", "spread", "scope-percentiles", "lag"]:
        # Null is an empty field, as in the CSV of `gpu-ledger sql` and `gpu-ledger merge`.
        res[q] = [["" if v is None else str(v) for v in r]
                  for r in con.execute(blocks[q]).fetchall()]
        emb = read_csv(os.path.join(work, f"{q}.csv"))[1:]
        check(len(res[q]) == len(emb), f"{q}: DuckDB {len(res[q])} rows, embedded {len(emb)}")
        res[q + "-embedded"] = emb
    # Slowest rank and spread: exact, against the embedded engine and against merge.
    check(res["straggler"] == res["straggler-embedded"], "straggler: DuckDB == embedded")
    merge = read_csv(os.path.join(work, "merge.csv"))
    head = merge[0]
    i, s, sp = head.index("index"), head.index("slowest_rank"), head.index("spread_ns")
    check([[r[i], r[s], r[sp]] for r in merge[1:]] ==
          [[r[1], r[2], r[5]] for r in res["straggler"]], "straggler: DuckDB == merge")
    # Percentiles: DuckDB's are exact, the embedded engine's within its stated error.
    gaps = con.execute("SELECT MAX(s) - MIN(s) FROM (SELECT MAX(host_wall_ns) - MIN(host_wall_ns) "
                       "AS s FROM iterations GROUP BY run, iteration)").fetchone()
    for d, e in zip(res["spread"], res["spread-embedded"]):
        check(d[:2] == e[:2] and all(near(a, b, gaps[0]) for a, b in zip(d[2:], e[2:])),
              f"spread: DuckDB {d} vs embedded {e}")
    ranges = {(r[0], r[1]): r[2:] for r in con.execute(
        "SELECT run, path, MAX(host_ns) - MIN(host_ns), MAX(device_ns_inclusive) - "
        "MIN(device_ns_inclusive) FROM scopes GROUP BY run, path").fetchall()}
    for d, e in zip(res["scope-percentiles"], res["scope-percentiles-embedded"]):
        host, dev = ranges[(d[0], d[1])]
        gaps_row = [host, host, dev, dev]
        check(d[:4] == e[:4] and all(near(a, b, g) for a, b, g in zip(d[4:], e[4:], gaps_row)),
              f"scope-percentiles: DuckDB {d} vs embedded {e}")
    for d, e in zip(res["lag"], res["lag-embedded"]):
        check(d[:5] == e[:5] and near(d[5], e[5], 0), f"lag: DuckDB {d} vs embedded {e}")
    check(len(res["lag"]) >= 1, "lag: the generated straggler is found")
    print("duckdb: docs/sql.md's queries agree with gpu-ledger merge and the embedded engine:",
          ", ".join(f"{q} ({len(res[q])} rows)" for q in ["straggler", "spread",
                                                            "scope-percentiles", "lag"]))


def main():
    work, doc = sys.argv[1], sys.argv[2]
    ledgers = sorted(glob.glob(os.path.join(work, "ledgers", "*.jsonl")))
    check(len(ledgers) > 1, "ledgers to check")
    check_files(os.path.join(work, "dataset"), ledgers)
    check_sql(work, doc)
    if failures:
        print(f"parquet-check: {len(failures)} checks failed", file=sys.stderr)
        sys.exit(1)
    print("parquet-check: all checks passed")


if __name__ == "__main__":
    main()
