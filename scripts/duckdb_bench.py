"""Wall time and peak resident memory of docs/sql.md's queries on DuckDB (its Python package),
each in a child process of its own, read with wait4: the other engine's figures beside
`examples/parquet_scale.rs`'s for the embedded one.

    python3 scripts/duckdb_bench.py DATASET docs/sql.md
"""

import os
import re
import sys
import time

QUERIES = ["straggler", "spread", "scope-percentiles", "lag"]


def blocks(doc):
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^```sql ([a-z-]+)\n(.*?)^```", open(doc).read(), re.M | re.S)}


def child(dataset, doc, name):
    import duckdb
    b = blocks(doc)
    con = duckdb.connect()
    con.execute(b["duckdb-setup"].replace("DATASET", dataset))
    con.execute(b[name]).fetchall()


def main():
    if sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    dataset, doc = sys.argv[1], sys.argv[2]
    print("| query on DuckDB | wall s | peak RSS MB |")
    print("|---|---:|---:|")
    for q in QUERIES:
        t0 = time.monotonic()
        # A fresh interpreter per query, so that each peak is that query's alone.
        pid = os.spawnv(os.P_NOWAIT, sys.executable,
                        [sys.executable, __file__, "--child", dataset, doc, q])
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - t0
        if status != 0:
            sys.exit(f"duckdb_bench: {q} failed")
        # ru_maxrss is in KiB on Linux.
        print(f"| {q} | {wall:.2f} | {usage.ru_maxrss / 1024:.1f} |")


if __name__ == "__main__":
    main()
