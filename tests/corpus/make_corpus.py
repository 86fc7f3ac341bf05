#!/usr/bin/env python3
"""Writes the hostile-input corpus beside this script from the golden ledger
tests/data/v1-missing-nvml.jsonl. `bad-*` files must fail every command with a line-numbered
error; `ok-*` files must be read. Run it again after changing a case; the files are committed."""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "data", "v1-missing-nvml.jsonl")
with open(SRC) as f:
    LINES = [json.loads(l) for l in f if l.strip()]
U64_MAX = 2**64 - 1


def dump(name, lines=None, raw=None):
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        if raw is not None:
            f.write(raw)
        else:
            for l in lines:
                f.write(json.dumps(l, separators=(",", ":")).encode() + b"\n")


def variant(edit):
    lines = copy.deepcopy(LINES)
    edit(lines)
    return lines


def setv(path, value):
    def edit(lines):
        obj = lines
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return edit


dump("ok-bom.jsonl", raw=b"\xef\xbb\xbf" + open(SRC, "rb").read())
dump("ok-crlf.jsonl", raw=open(SRC, "rb").read().replace(b"\n", b"\r\n"))
dump("ok-header-only.jsonl", LINES[:1])
dump("bad-empty.jsonl", raw=b"")
dump("bad-not-json.jsonl", raw=b"hello\n")
dump("bad-binary.jsonl", raw=bytes([0xFF, 0xFE, 0x00, 0x01, 0x0A]))
dump("bad-array.jsonl", raw=b"[1,2,3]\n")
dump("bad-schema-string.jsonl", variant(setv([0, "schema_version"], "1")))
dump("bad-schema-missing.jsonl", variant(lambda l: l[0].pop("schema_version")))
dump("bad-schema-newer.jsonl", variant(setv([0, "schema_version"], 99)))
dump("bad-wall-max.jsonl", variant(setv([1, "host_wall_ns"], U64_MAX)))
dump("bad-start-max.jsonl", variant(setv([2, "host_start_ns"], U64_MAX)))
dump("bad-kernel-total-max.jsonl", variant(setv([1, "kernels", 0, "total_ns"], U64_MAX)))
dump("bad-kernel-count-max.jsonl", variant(setv([1, "kernels", 0, "count"], U64_MAX)))
dump("bad-busy-max.jsonl", variant(setv([1, "devices", 0, "busy_ns"], U64_MAX)))
dump("bad-scope-host-max.jsonl", variant(setv([1, "scopes", 0, "host_ns"], U64_MAX)))
dump("bad-copy-bytes-max.jsonl", variant(setv([1, "memcpy", 0, "bytes"], U64_MAX)))
dump("bad-window-reversed.jsonl", variant(setv([1, "devices", 0, "last_end_ns"], 1)))
dump("bad-index-repeated.jsonl", variant(setv([2, "index"], 0)))
dump("bad-index-backwards.jsonl", variant(setv([3, "index"], 0)))
dump("bad-wall-string.jsonl", variant(setv([1, "host_wall_ns"], "2000000")))
dump("bad-wall-negative.jsonl", variant(setv([1, "host_wall_ns"], -1)))
dump("bad-wall-float.jsonl", variant(setv([1, "host_wall_ns"], 1.5)))
dump("bad-type-unknown.jsonl", variant(setv([1, "type"], "row")))
dump("bad-type-missing.jsonl", variant(lambda l: l[1].pop("type")))
dump("bad-second-header.jsonl", variant(lambda l: l.insert(2, copy.deepcopy(l[0]))))
dump("bad-row-before-header.jsonl", variant(lambda l: l.insert(0, copy.deepcopy(l[1]))))
dump("bad-after-trailer.jsonl", variant(lambda l: l.append(copy.deepcopy(l[1]))))
dump("bad-nested-depth.jsonl", raw=json.dumps(LINES[0]).encode() + b"\n" + b"[" * 200000 + b"\n")
dump("bad-cut-middle.jsonl", raw=b"\n".join(
    [json.dumps(LINES[0]).encode(), json.dumps(LINES[1]).encode()[:100],
     json.dumps(LINES[2]).encode()]) + b"\n")
dump("bad-invalid-utf8.jsonl", raw=json.dumps(LINES[0]).encode() + b"\n\xc3\x28\n")
# Fields that contradict each other (the validator's rules between fields).
dump("bad-busy-past-window.jsonl", variant(setv([1, "devices", 0, "busy_ns"], 1600001)))
dump("bad-idle-not-rest.jsonl", variant(setv([1, "devices", 0, "idle_ns"], 99999)))
dump("bad-gap-past-idle.jsonl", variant(setv([1, "devices", 0, "largest_gap_ns"], 100001)))
dump("bad-span-reversed.jsonl", variant(setv([1, "scope_spans"],
     [{"path": "step", "thread": 0, "start_ns": 10, "end_ns": 9}])))
dump("bad-activity-reversed.jsonl", variant(setv([1, "activities"],
     [{"kind": "kernel", "name": "k", "device_id": 0, "stream_id": 7, "start_ns": 5000000000010,
       "end_ns": 5000000000000, "scope": "step", "correlation_id": 1}])))
dump("bad-kernel-min-past-max.jsonl", variant(setv([1, "kernels", 0, "min_ns"], 10**12)))
dump("bad-nvml-power-negative.jsonl", variant(setv([1, "nvml"],
     [{"device_id": 0, "power": {"mean_w": -5.0, "max_w": 1.0, "samples": 1, "kind": "instant"}}])))
dump("bad-nvml-clock-huge.jsonl", variant(setv([1, "nvml"],
     [{"device_id": 0, "sm_clock": {"min_mhz": 1, "mean_mhz": 1e300, "max_mhz": 2, "samples": 1}}])))
dump("bad-header-start-max.jsonl", variant(setv([0, "start_cupti_ns"], U64_MAX)))
dump("bad-trailer-late-max.jsonl", variant(setv([-1, "late_records"], U64_MAX)))
dump("bad-schema-float.jsonl", variant(setv([0, "schema_version"], 1.0)))
dump("bad-schema-null.jsonl", variant(setv([0, "schema_version"], None)))
dump("bad-schema-negative.jsonl", variant(setv([0, "schema_version"], -1)))
# NVML's unknown figure (null) is read, and written as an empty cell.
dump("ok-nvml-null.jsonl", variant(setv([1, "nvml"],
     [{"device_id": 0, "power": {"mean_w": None, "max_w": None, "samples": 0, "kind": "average"}}])))
# Sums past u64::MAX (five entries of one scope at 2^62) saturate in every command.
dump("ok-sums-saturate.jsonl", variant(setv([1, "scopes"],
     [dict(LINES[1]["scopes"][0], host_ns=2**62, calls=2**62)] * 5)))
# Names a spreadsheet would take for formulas, in scopes and kernels: every CSV escapes them.
dump("ok-formula-names.jsonl", variant(lambda l: (
    l[1].__setitem__("scopes", [dict(l[1]["scopes"][0], path=p, calls=1, host_ns=400000,
                                     launches=1, kernels=1, device_ns=300000,
                                     device_ns_inclusive=300000)
                                for p in ["=HYPERLINK(\"http://x\")", "+1", "@SUM(A1)", "-2"]]),
    l[1]["kernels"][0].__setitem__("name", "=cmd|' /C calc'!A0"))))
# A run whose profiler folded scope paths past its bound and lost scopes at thread exit: the
# trailer's counts and the folded path are read.
dump("ok-scopes-folded.jsonl", variant(lambda l: (
    l[1]["scopes"].append(dict(l[1]["scopes"][0], path="(other scope paths)")),
    l[-1].update(scope_paths_folded=5, scopes_lost_at_thread_exit=2))))
