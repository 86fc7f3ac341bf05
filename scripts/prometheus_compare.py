#!/usr/bin/env python3
"""Compares a gpu-ledger ledger with the metrics published from it.

The expected series are computed from the ledger's rows by the rules of gpu-ledger-metrics (its
README section lists them): counters summed, gauges the last row's figure, histograms one
observation per row (sum, count and every bucket checked). Each source is then compared with
them, series by series, both ways: a missing series, a wrong value and a series the ledger has
no figure for are all failures. Several sources are also compared with each other, sample by
sample.

Sources (any number, each repeatable):
  --prometheus URL JOB   a Prometheus server's HTTP API, the series of scrape job JOB
  --scrape URL           a /metrics endpoint, fetched and parsed (no Prometheus needed)
  --text FILE            Prometheus or OpenMetrics text (`gpu-ledger metrics`' output)

--wait SECONDS polls each live source until it shows every row of the ledger (and, for
Prometheus, until the job was scraped at least twice), then compares. Exit status 0 when every
check passed; the last line says `N passed, N failed`.

Needs python3 only (no third-party module), so it runs on a GPU host without Rust:

  python3 scripts/prometheus_compare.py --ledger run.jsonl \\
      --scrape http://127.0.0.1:9184/metrics --wait 60
"""

import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

UNSCOPED = "(unscoped)"
OTHER = "(other)"
SECONDS_BUCKETS = [1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
PREFIX = "gpu_ledger_"


def key(name, labels):
    return (name, tuple(sorted(labels.items())))


class Expected:
    """Series computed from a ledger: scalars by key, histograms as observation lists."""

    def __init__(self):
        self.scalars = {}
        self.histograms = {}

    def count(self, name, labels, n):
        k = key(name, labels)
        self.scalars[k] = self.scalars.get(k, 0) + n

    def gauge(self, name, labels, v):
        self.scalars[key(name, labels)] = v

    def observe(self, name, labels, v):
        self.histograms.setdefault(key(name, labels), []).append(v)


def read_ledger(path):
    header, rows, trailer = None, [], None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n >= len(lines) - 1:
                break  # a last line cut while being written
            raise SystemExit(f"{path}:{n}: not JSON")
        kind = rec.get("type")
        if kind == "header":
            header = rec
        elif kind == "iteration":
            rows.append(rec)
        elif kind == "trailer":
            trailer = rec
    if header is None:
        raise SystemExit(f"{path}: no header line; is it a gpu-ledger ledger?")
    return header, rows, trailer


def place_scopes(paths, state, opts):
    """The publisher's scope admission: (path, place) per path, place 'own', 'other' or 'drop'."""
    depth_of = lambda p: p.count("/") + 1
    out = {}
    pending = [p for p in paths if p not in state["admitted"]]
    for p in sorted(pending, key=depth_of):
        d = depth_of(p)
        always = p == UNSCOPED or p in opts.scope
        fits = d <= opts.scope_depth and state["counted"] < opts.max_scopes
        if always or fits:
            if not always:
                state["counted"] += 1
            state["admitted"].add(p)
        else:
            out[p] = "other" if d == 1 else "drop"
    return [(p, "own" if p in state["admitted"] else out[p]) for p in paths]


def sec(ns):
    return ns / 1e9


def expected_series(header, rows, opts):
    e = Expected()
    level = header["config"]["level"]
    traces = level != "scopes"
    rank = header.get("rank")
    run = {"rank": str(rank["rank"])} if rank else {}
    gpus = {g["ordinal"]: g for g in header["environment"].get("gpus", [])}

    def dev(ordinal, **extra):
        uuid = (gpus.get(ordinal) or {}).get("uuid") or ""
        return {"device": str(ordinal), "UUID": uuid, **run, **extra}

    if rows:
        e.gauge(PREFIX + "run_info", {"version": header["gpu_ledger_version"], "level": level, **run}, 1.0)
        for o, g in gpus.items():
            e.gauge(PREFIX + "device_info", dev(o, name=g["name"]), 1.0)
    scope_state = {"admitted": set(), "counted": 0}
    for row in rows:
        traced = traces and not row.get("untraced", False)
        steady = not row["perturbed"]
        run_row(e, row, run, traced, steady)
        if opts.scope_depth > 0:
            scope_row(e, row, run, traced, steady, scope_state, opts)
        if traced:
            for d in row["devices"]:
                device_row(e, d, row["host_wall_ns"], dev(d["device_id"]), steady)
        for n in row.get("nvml", []):
            nvml_row(e, n, dev, steady)
        energy = [finite(((n.get("energy") or {}).get("joules"))) for n in row.get("nvml", [])]
        if steady and energy and all(j is not None for j in energy):
            total = 0.0
            for j in energy:
                total += j
            e.observe(PREFIX + "iteration_energy_joules", run, total)
    return e


def finite(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def run_row(e, row, run, traced, steady):
    e.count(PREFIX + "iterations_total", run, 1)
    e.count(PREFIX + "iterations_untraced_total", run, int(row.get("untraced", False)))
    e.count(PREFIX + "iterations_perturbed_total", run, int(row["perturbed"]))
    e.count(PREFIX + "iterations_incomplete_total", run, int(not row["complete"]))
    e.gauge(PREFIX + "iteration_index", run, float(row["index"]))
    if steady:
        e.observe(PREFIX + "iteration_duration_seconds", run, sec(row["host_wall_ns"]))
    if traced:
        e.count(PREFIX + "dropped_records_total", run, row["dropped_records"])
        e.count(PREFIX + "missing_records_total", run, row.get("missing_records", 0))
        if steady and row.get("tracing_added_ns") is not None:
            e.observe(PREFIX + "tracing_added_seconds", run, sec(row["tracing_added_ns"]))


def scope_row(e, row, run, traced, steady, state, opts):
    scopes = {s["path"]: s for s in row["scopes"]}
    other = None
    unpublished = 0
    for path, place in place_scopes([s["path"] for s in row["scopes"]], state, opts):
        s = scopes[path]
        figures = (s["calls"], s["host_ns"], s["device_ns_inclusive"], s.get("event_device_ns"))
        if place == "own":
            scope_figures(e, {"scope": path, **run}, figures, traced, steady)
            continue
        unpublished += 1
        if place == "other":
            if other is None:
                other = [0, 0, 0, None]
            for i in range(3):
                other[i] += figures[i]
            if figures[3] is not None:
                other[3] = (other[3] or 0) + figures[3]
    if other is not None:
        scope_figures(e, {"scope": OTHER, **run}, other, traced, steady)
    e.count(PREFIX + "scope_rows_unpublished_total", run, unpublished)


def scope_figures(e, labels, figures, traced, steady):
    calls, host_ns, device_ns, event_ns = figures
    e.count(PREFIX + "scope_calls_total", labels, calls)
    if not steady:
        return
    e.observe(PREFIX + "scope_host_seconds", labels, sec(host_ns))
    if traced:
        e.observe(PREFIX + "scope_device_seconds", labels, sec(device_ns))
    if event_ns is not None:
        e.observe(PREFIX + "scope_event_device_seconds", labels, sec(event_ns))


def device_row(e, d, wall_ns, labels, steady):
    e.count(PREFIX + "device_kernels_total", labels, d["kernel_count"])
    if not steady:
        return
    e.observe(PREFIX + "device_busy_seconds", labels, sec(d["busy_ns"]))
    e.observe(PREFIX + "device_idle_seconds", labels, sec(d["idle_ns"]))
    if wall_ns > 0:
        e.gauge(PREFIX + "device_busy_ratio", labels, d["busy_ns"] / wall_ns)
    window = max(d["last_end_ns"] - d["first_start_ns"], 0)
    if window > 0:
        e.gauge(PREFIX + "device_idle_ratio", labels, d["idle_ns"] / window)


def nvml_row(e, n, dev, steady):
    o = n["device_id"]
    labels = dev(o)
    for field, name in (("sm_clock", "gpu_sm_clock_hertz"), ("mem_clock", "gpu_memory_clock_hertz")):
        mean = finite((n.get(field) or {}).get("mean_mhz"))
        if mean is not None:
            e.gauge(PREFIX + name, labels, mean * 1e6)
    power = finite((n.get("power") or {}).get("mean_w"))
    if power is not None:
        e.gauge(PREFIX + "hw_gpu_power_watts", labels, power)
    joules = finite((n.get("energy") or {}).get("joules"))
    if steady and joules is not None:
        e.observe(PREFIX + "hw_energy_joules", labels, joules)
    if n.get("temperature_max_c") is not None:
        e.gauge(PREFIX + "gpu_temperature_celsius", labels, float(n["temperature_max_c"]))
    if n.get("memory_used_max_bytes") is not None:
        e.gauge(PREFIX + "hw_gpu_memory_usage_bytes", labels, float(n["memory_used_max_bytes"]))
    for direction, field in (("transmit", "pcie_tx_bytes_per_s"), ("receive", "pcie_rx_bytes_per_s")):
        rate = finite(n.get(field))
        if rate is not None:
            e.gauge(PREFIX + "gpu_pcie_bytes_per_second", dev(o, direction=direction), rate)
    if n.get("throttle_samples", 0) > 0:
        for reason in n.get("throttle_reasons", []):
            e.count(PREFIX + "gpu_throttle_iterations_total", dev(o, reason=reason), 1)
    e.count(PREFIX + "gpu_nvml_coarse_iterations_total", labels, int(n.get("coarse", False)))


# ---- sources -------------------------------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def parse_value(v):
    """A sample value or `le`: Python's float reads `+Inf`, `-Inf` and `NaN` as both formats
    write them."""
    return float(v)


def parse_text(text):
    """Samples of a Prometheus or OpenMetrics text exposition: {(name, labels): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        labels = {k: unescape(v) for k, v in LABEL.findall(m.group(2) or "")}
        if m.group(1).startswith(PREFIX):
            out[key(m.group(1), labels)] = parse_value(m.group(3))
    return out


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode("utf-8")


def prometheus_query(base, query):
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    answer = json.loads(http_get(url))
    if answer.get("status") != "success":
        raise RuntimeError(f"query {query!r}: {answer}")
    return answer["data"]["result"]


def prometheus_samples(base, job):
    out = {}
    for r in prometheus_query(base, '{__name__=~"%s.+",job="%s"}' % (PREFIX, job)):
        labels = {k: v for k, v in r["metric"].items() if k not in ("__name__", "instance", "job")}
        out[key(r["metric"]["__name__"], labels)] = parse_value(r["value"][1])
    return out


class Source:
    """A place metrics are read from: `live` ones (a server) are polled until they show every
    row; `ready` adds a condition of its own."""

    def __init__(self, name, fetch, live, ready=None):
        self.name, self.fetch, self.live, self.ready = name, fetch, live, ready


def sources(opts):
    out = []
    for base, job in opts.prometheus or []:
        def ready(base=base, job=job):
            # Two scrapes at least: the values compared are not a first scrape's.
            scrapes = prometheus_query(base, 'count_over_time(up{job="%s"}[1h])' % job)
            return bool(scrapes) and float(scrapes[0]["value"][1]) >= 2
        fetch = lambda b=base, j=job: prometheus_samples(b, j)
        out.append(Source(f"Prometheus {base} job {job}", fetch, True, ready))
    for url in opts.scrape or []:
        out.append(Source(f"scrape of {url}", lambda u=url: parse_text(http_get(u)), True))
    for path in opts.text or []:
        read = lambda p=path: parse_text(open(p, encoding="utf-8").read())
        out.append(Source(f"text {path}", read, False))
    return out


def wait_for(source, rows, run, seconds):
    """Polls until the source shows every row (and is ready): its samples, and what was still
    missing when the time ran out (None when nothing was)."""
    deadline = time.monotonic() + seconds
    want = key(PREFIX + "iterations_total", run)
    samples, last = None, "nothing fetched"
    while True:
        try:
            samples = source.fetch()
            seen = samples.get(want)
            if seen == len(rows):
                if source.ready is None or source.ready():
                    return samples, None
                last = "fewer than two scrapes"
            else:
                last = f"{want[0]} = {seen}, the ledger has {len(rows)} rows"
        except Exception as e:  # a server not up yet, a connection refused
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            if samples is None:
                raise SystemExit(f"prometheus-compare: nothing could be read from {source.name} within {seconds} s ({last})")
            return samples, f"{source.name}: not every row within {seconds} s ({last}); compared as it is"
        time.sleep(0.5)


# ---- comparison ----------------------------------------------------------------------------

class Report:
    def __init__(self):
        self.passed, self.failed = 0, []

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)


def close(a, b, tol):
    if a is None or b is None:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= tol * max(abs(a), abs(b))


def show(k):
    name, labels = k
    return name + ("{" + ",".join(f'{a}="{b}"' for a, b in labels) + "}" if labels else "")


def histogram_keys(k):
    name, labels = k
    return key(name + "_sum", dict(labels)), key(name + "_count", dict(labels))


def compare_expected(e, samples, report, source, tol):
    accounted = set()
    for k, v in e.scalars.items():
        accounted.add(k)
        report.check(close(samples.get(k), float(v), tol), f"{source}: {show(k)} is {samples.get(k)}, the ledger says {v}")
    for k, obs in e.histograms.items():
        total = 0.0
        for v in obs:
            total += v
        s, c = histogram_keys(k)
        accounted |= {s, c}
        report.check(close(samples.get(s), total, tol), f"{source}: {show(s)} is {samples.get(s)}, the ledger says {total}")
        report.check(samples.get(c) == len(obs), f"{source}: {show(c)} is {samples.get(c)}, the ledger says {len(obs)}")
        name, labels = k
        buckets = {sk: sv for sk, sv in samples.items() if sk[0] == name + "_bucket"
                   and tuple(x for x in sk[1] if x[0] != "le") == labels}
        report.check(len(buckets) > 1, f"{source}: {name} has no buckets for {dict(labels)}")
        for bk, bv in buckets.items():
            accounted.add(bk)
            le = parse_value(dict(bk[1])["le"])
            want = sum(1 for v in obs if v <= le)
            report.check(bv == want, f"{source}: {show(bk)} is {bv}, the ledger says {want}")
    extra = sorted(show(k) for k in samples if k not in accounted)
    report.check(not extra, f"{source}: series the ledger has no figure for: {extra[:10]}")


def normalized(samples):
    """Samples with `le` as a number, so that `1` and `1.0` are one bucket."""
    out = {}
    for (name, labels), v in samples.items():
        labels = tuple((a, repr(parse_value(b)) if a == "le" else b) for a, b in labels)
        out[(name, labels)] = v
    return out


def compare_sources(a, b, report, tol):
    (na, sa), (nb, sb) = a, b
    sa, sb = normalized(sa), normalized(sb)
    report.check(set(sa) == set(sb), f"{na} and {nb} differ in series: "
                 f"only in the first {sorted(map(show, set(sa) - set(sb)))[:5]}, "
                 f"only in the second {sorted(map(show, set(sb) - set(sa)))[:5]}")
    for k in set(sa) & set(sb):
        report.check(close(sa[k], sb[k], 1e-12), f"{na} and {nb} differ at {show(k)}: {sa[k]} and {sb[k]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ledger", required=True)
    p.add_argument("--prometheus", nargs=2, action="append", metavar=("URL", "JOB"))
    p.add_argument("--scrape", action="append", metavar="URL")
    p.add_argument("--text", action="append", metavar="FILE")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for live sources")
    p.add_argument("--scope-depth", type=int, default=2)
    p.add_argument("--max-scopes", type=int, default=64)
    p.add_argument("--scope", action="append", default=[], metavar="PATH")
    p.add_argument("--tolerance", type=float, default=1e-9, help="relative, for sums")
    opts = p.parse_args()
    srcs = sources(opts)
    if not srcs:
        p.error("give at least one source: --prometheus URL JOB, --scrape URL or --text FILE")
    header, rows, trailer = read_ledger(opts.ledger)
    if trailer is None:
        print(f"prometheus-compare: warning: {opts.ledger} has no trailer: the run may not have finished", file=sys.stderr)
    e = expected_series(header, rows, opts)
    rank = header.get("rank")
    run = {"rank": str(rank["rank"])} if rank else {}
    report = Report()
    fetched = []
    for s in srcs:
        if s.live:
            samples, late = wait_for(s, rows, run, opts.wait)
            report.check(late is None, late)
        else:
            samples = s.fetch()
        fetched.append((s.name, samples))
        compare_expected(e, samples, report, s.name, opts.tolerance)
    for i in range(1, len(fetched)):
        compare_sources(fetched[0], fetched[i], report, opts.tolerance)
    level = header["config"]["level"]
    print(f"prometheus-compare: {opts.ledger}: {len(rows)} rows at level {level}, "
          f"{len(e.scalars) + len(e.histograms)} series expected, {len(srcs)} source(s)")
    for f in report.failed[:40]:
        print(f"FAILED: {f}")
    if len(report.failed) > 40:
        print(f"... and {len(report.failed) - 40} more")
    print(f"{report.passed} passed, {len(report.failed)} failed")
    return 0 if not report.failed else 1


if __name__ == "__main__":
    sys.exit(main())
