#!/usr/bin/env python3
"""Built the hand-made golden ledgers v1-*.jsonl of tests/data (schema version 1). Every figure is
chosen so that tests can assert exact values; see tests/data/README.md.

The v1 files are frozen: they stand for ledgers written by schema version 1 and must keep reading.
Do not regenerate them after a schema change; add v2-*.jsonl files (a copy of this script adapted
to the new schema) instead.

Usage: python3 make_golden.py OUT_DIR"""
import json, os, sys

OUT = sys.argv[1]
US = 1000
MS = 1000 * US
START_UNIX = 1_764_000_000_000_000_000
START_CUPTI = 5_000_000_000_000


def dump(name, lines, tail=None):
    with open(os.path.join(OUT, name), "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":")) + "\n")
        if tail is not None:
            f.write(tail)


def gpu(ordinal):
    return {"ordinal": ordinal, "name": "NVIDIA H200", "compute_capability": [9, 0], "sm_count": 132,
            "total_memory_bytes": 150109880320,
            "uuid": f"GPU-0000000{ordinal}-1111-2222-3333-444444444444",
            "pci_bus_id": f"0000:1{ordinal}:00.0", "nvml_index": ordinal}


def nvml_gpu(i, with_nvml=True):
    if not with_nvml:
        return None
    return {"index": i, "name": "NVIDIA H200", "uuid": f"GPU-0000000{i}-1111-2222-3333-444444444444",
            "pci_bus_id": f"0000:1{i}:00.0", "numa_node": 0, "architecture": "Hopper",
            "compute_capability": [9, 0], "memory_total_bytes": 150109880320,
            "memory_used_bytes": 600 << 20, "memory_bus_width_bits": 6144, "vbios_version": "96.00.9F.00.01",
            "persistence_mode": True, "ecc_enabled": True, "ecc_pending": False, "mig_enabled": False,
            "mig_pending": False, "compute_mode": "default", "power_limit_mw": 700000,
            "power_limit_default_mw": 700000, "pstate": "P0", "sm_clock_mhz": 1980, "mem_clock_mhz": 3201,
            "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": 3201, "applications_sm_clock_mhz": 1980,
            "applications_mem_clock_mhz": 3201, "temperature_c": 34, "power_mw": 120000,
            "throttle_reasons": [], "pcie_link_gen": 5, "pcie_link_width": 16}


def header(*, level="timeline", record=False, devices=1, nvml=True, rank=None, warnings=(),
           counter_iterations=None, missing=(), command=("train", "--steps", "100"), cupti=True):
    env = {
        "gpus": [gpu(d) for d in range(devices)],
        "driver_version": "580.95.05" if nvml else None,
        "cuda_driver_version": 13000,
        "cupti_api_version": 130001,
        "cupti_path": "/usr/local/cuda/lib64/libcupti.so.13",
        "hostname": "gpu-host-1",
        "command_line": list(command),
        "missing": list(missing),
        "nvml_version": "13.580.95.05" if nvml else None,
        "nvml_gpus": [nvml_gpu(d) for d in range(devices)] if nvml else [],
        "host": {"os": "Debian GNU/Linux 12 (bookworm)", "kernel_type": "Linux", "kernel_release": "6.8.0",
                 "arch": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_logical": 112,
                 "cpu_physical_cores": 56, "cpu_sockets": 2, "cpus_available": 112,
                 "cpu_governor": "performance", "numa_nodes": 2, "numa_node_cpus": ["0-55", "56-111"],
                 "memory_total_bytes": 2 << 40, "cgroup_memory_limit": None, "cgroup_cpu_limit": None,
                 "container": None, "virtual_machine": None, "virtualization_evidence": []},
        "gpu_ledger_version": "0.1.0",
        "rustc_version": "rustc 1.95.0",
        "pid": 4242,
        "start_unix_ns": START_UNIX,
        "start_utc": "2025-11-24T16:00:00.000Z",
        "cuda_env": {"CUDA_VISIBLE_DEVICES": ",".join(str(d) for d in range(devices))},
    }
    return {"type": "header", "schema_version": 1, "gpu_ledger_version": "0.1.0",
            "start_unix_ns": START_UNIX, "start_cupti_ns": START_CUPTI if cupti else None,
            "config": {"level": level, "buffer_count": 8, "buffer_bytes": 4 << 20, "settle_ms": 2000,
                       "nvml_period_ms": 20 if nvml else None, "counter_iterations": counter_iterations,
                       "record_activities": record},
            "environment": env, "rank": rank, "warnings": list(warnings)}


def kgroup(name, count, each_ns, *, device=0, grid=(132, 1, 1), block=(256, 1, 1), regs=64, graph=0,
           smem=0, min_ns=None, max_ns=None, total=None):
    return {"name": name, "device_id": device, "grid": list(grid), "block": list(block), "cluster": [0, 0, 0],
            "registers_per_thread": regs, "static_shared_bytes": smem, "dynamic_shared_bytes": 0,
            "local_bytes_per_thread": 0, "count": count,
            "total_ns": total if total is not None else count * each_ns,
            "min_ns": min_ns if min_ns is not None else each_ns,
            "max_ns": max_ns if max_ns is not None else each_ns, "graph_launches": graph}


def scope(path, host, dev, inc, launches=0, kernels=0, calls=1, event=None):
    return {"path": path, "calls": calls, "host_ns": host, "launches": launches, "kernels": kernels,
            "device_ns": dev, "device_ns_inclusive": inc, "event_device_ns": event}


def nvml_sum(device, window, sm, power, *, energy=True, temp=61, throttle=(), mem=3201):
    s = {"device_id": device, "window_ns": window, "samples": max(1, window // (20 * MS)),
         "coarse": window < 100 * MS,
         "sm_clock": {"min_mhz": int(sm) - 15, "mean_mhz": sm, "max_mhz": int(sm), "samples": 5},
         "mem_clock": {"min_mhz": mem, "mean_mhz": float(mem), "max_mhz": mem, "samples": 5},
         "power": {"mean_w": power, "max_w": round(power * 1.08, 1), "samples": 5, "kind": "instant"},
         "energy": None, "temperature_max_c": temp, "temperature_samples": 5,
         "throttle_reasons": list(throttle), "throttle_samples": 5,
         "memory_used_max_bytes": 20 << 30, "memory_used_samples": 5,
         "pcie_tx_bytes_per_s": None, "pcie_rx_bytes_per_s": None}
    if energy:
        j = round(power * window / 1e9, 6)
        s["energy"] = {"joules": j, "method": "integrated_power", "counter_reads": 0,
                       "counter_span_ns": None, "power_samples": 5, "integrated_joules": j}
    return s


def device(d, first, last, busy, gap, kernels):
    return {"device_id": d, "first_start_ns": first, "last_end_ns": last, "busy_ns": busy,
            "idle_ns": last - first - busy, "largest_gap_ns": gap, "kernel_count": kernels,
            "peak_memory_bytes": 20 << 30}


def row(index, start, wall, devices, scopes, kernels, memcpy=(), memset=(), sync=(), nvml=(), *,
        complete=True, perturbed=False, dropped=0, missing=0, warnings=(), activities=None, spans=None):
    r = {"type": "iteration", "index": index, "host_start_ns": start, "host_wall_ns": wall,
         "complete": complete, "perturbed": perturbed, "devices": list(devices), "scopes": list(scopes),
         "kernels": list(kernels), "memcpy": list(memcpy), "memset": list(memset),
         "synchronization": list(sync), "dropped_records": dropped, "missing_records": missing,
         "nvml": list(nvml), "warnings": list(warnings)}
    if activities is not None:
        r["activities"] = activities
        r["scope_spans"] = spans
    return r


def trailer(iterations, kernels, activities, *, energy=None, warnings=(), dropped=0):
    return {"type": "trailer", "iterations": iterations, "kernel_records": kernels,
            "activity_records": activities, "api_records": kernels + 4 * iterations,
            "dropped_records": dropped, "late_records": 0, "unplaced_records": 0, "lines_not_written": 0,
            "overhead": {"cupti_overhead_ns": 1_200_000, "buffer_callback_ns": 90_000,
                         "collector_cpu_ns": 2_500_000, "writer_cpu_ns": 400_000, "buffers_used": 3,
                         "buffer_requests_refused": 0},
            "energy": energy, "warnings": list(warnings)}


def run_energy(rows, devices=(0,)):
    per_dev = {d: [0, 0.0] for d in devices}
    tot, js = 0.0, []
    for r in rows:
        j = 0.0
        for s in r["nvml"]:
            j += s["energy"]["joules"]
            per_dev[s["device_id"]][0] += 1
            per_dev[s["device_id"]][1] += s["energy"]["joules"]
        js.append(j)
        tot += j
    n = len(rows)
    return {"iterations": n, "iterations_with_energy": n, "coarse_iterations": n, "total_j": tot,
            "mean_j_per_iteration": tot / n, "min_j_per_iteration": min(js),
            "max_j_per_iteration": max(js), "work_per_iteration": None, "j_per_unit_work": None,
            "work_per_j": None,
            "methods": {"energy_counter": 0, "integrated_power": n * len(devices), "covering_sample": 0},
            "per_device": [{"device_id": d, "iterations": v[0], "total_j": v[1]} for d, v in per_dev.items()]}


SOFTMAX = "_Z14softmax_kernelILi256EEvPKfPfi"           # void softmax_kernel<256>(float const*, float*, int)
FLASH = "_ZN5flash16flash_fwd_kernelILi128ELb1EEEvNS_6ParamsE"  # flash::flash_fwd_kernel<128, true>
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_"
GEMM = "ampere_sgemm_128x64_nn"


# --- 1. overlapping streams, activities and scope spans recorded, NVML with energy -------------
def overlapping():
    lines = [header(record=True)]
    walls = [14_000_000, 10_000_000, 10_100_000, 9_900_000, 10_050_000, 10_000_000]
    rows, start = [], 0
    for i, wall in enumerate(walls):
        t0 = START_CUPTI + start  # CUPTI time of the iteration's start
        a = lambda off_us: t0 + off_us * US
        acts = [
            {"kind": "memcpy", "name": "HtoD", "device_id": 0, "stream_id": 7, "start_ns": a(100),
             "end_ns": a(600), "scope": "step/load", "correlation_id": 100 * i + 1, "bytes": 8 << 20,
             "graph_id": None},
            {"kind": "kernel", "name": GEMM, "device_id": 0, "stream_id": 7, "start_ns": a(700),
             "end_ns": a(4700), "scope": "step/forward", "correlation_id": 100 * i + 2, "bytes": None,
             "graph_id": None},
            {"kind": "kernel", "name": SOFTMAX, "device_id": 0, "stream_id": 13, "start_ns": a(3000),
             "end_ns": a(5000), "scope": "step/forward", "correlation_id": 100 * i + 3, "bytes": None,
             "graph_id": None},
            {"kind": "memset", "name": "memset", "device_id": 0, "stream_id": 13, "start_ns": a(5100),
             "end_ns": a(5200), "scope": "step/forward", "correlation_id": 100 * i + 4, "bytes": 1 << 20,
             "graph_id": None},
            {"kind": "kernel", "name": GEMM, "device_id": 0, "stream_id": 7, "start_ns": a(6000),
             "end_ns": a(8000), "scope": "step/backward", "correlation_id": 100 * i + 5, "bytes": None,
             "graph_id": None},
            {"kind": "memcpy", "name": "DtoH", "device_id": 0, "stream_id": 13, "start_ns": a(8200),
             "end_ns": a(8700), "scope": "step/backward", "correlation_id": 100 * i + 6, "bytes": 8 << 20,
             "graph_id": None},
        ]
        h = lambda off_us: start + off_us * US
        spans = [
            {"path": "step", "thread": 0, "start_ns": h(10), "end_ns": h(9000)},
            {"path": "step/load", "thread": 0, "start_ns": h(20), "end_ns": h(650)},
            {"path": "step/forward", "thread": 0, "start_ns": h(660), "end_ns": h(5050)},
            {"path": "step/backward", "thread": 0, "start_ns": h(5060), "end_ns": h(8800)},
            {"path": "prefetch", "thread": 1, "start_ns": h(50), "end_ns": h(3000)},
        ]
        scopes = [
            scope("prefetch", 2950 * US, 0, 0),
            scope("step", 8990 * US, 0, 7400 * US),
            scope("step/backward", 3740 * US, 2500 * US, 2500 * US, 2, 1),
            scope("step/forward", 4390 * US, 4400 * US, 4400 * US, 3, 2),
            scope("step/load", 630 * US, 500 * US, 500 * US, 1, 0),
        ]
        kernels = [kgroup(GEMM, 2, 0, total=6000 * US, min_ns=2000 * US, max_ns=4000 * US, regs=128),
                   kgroup(SOFTMAX, 1, 2000 * US, block=(256, 1, 1), regs=32, smem=1024)]
        memcpy = [{"device_id": 0, "kind": "DtoH", "count": 1, "bytes": 8 << 20, "total_ns": 500 * US},
                  {"device_id": 0, "kind": "HtoD", "count": 1, "bytes": 8 << 20, "total_ns": 500 * US}]
        memset = [{"device_id": 0, "kind": "memset", "count": 1, "bytes": 1 << 20, "total_ns": 100 * US}]
        sm = 1755.0 if i == 0 else 1980.0
        power = 380.0 if i == 0 else 450.0 + i
        r = row(i, start, wall, [device(0, a(100), a(8700), 7400 * US, 800 * US, 3)], scopes, kernels, memcpy,
                memset, [{"kind": "stream", "count": 1, "total_ns": 1200 * US}],
                [nvml_sum(0, wall, sm, power)], activities=acts, spans=spans)
        rows.append(r)
        start += wall
    lines += rows
    lines.append(trailer(len(rows), 3 * len(rows), 6 * len(rows), energy=run_energy(rows)))
    dump("v1-overlapping-streams.jsonl", lines)


# --- 2. nested scopes, warm-up, a perturbed and an incomplete iteration, no activities ---------
def nested():
    lines = [header(level="counters", counter_iterations="6")]
    rows, start = [], 0
    for i in range(12):
        fwd_attn = 3 * MS + (i % 3) * 10 * US
        fwd_mlp = 2 * MS + (i % 2) * 20 * US
        bwd = 6 * MS + (i % 4) * 15 * US
        opt = 1 * MS
        if i == 0:
            fwd_attn *= 3
            bwd *= 3
        if i == 6:
            fwd_attn *= 5
        fwd = fwd_attn + fwd_mlp + 100 * US
        step = fwd + bwd + opt + 200 * US
        wall = step + 300 * US
        dev = lambda x: x - 50 * US
        scopes = [
            scope("(unscoped)", 0, 40 * US, 40 * US, 1, 1, calls=0),
            scope("step", step, 0, dev(fwd_attn) + dev(fwd_mlp) + dev(bwd) + dev(opt), event=step - 20 * US),
            scope("step/backward", bwd, dev(bwd), dev(bwd), 8, 8),
            scope("step/forward", fwd, 0, dev(fwd_attn) + dev(fwd_mlp)),
            scope("step/forward/attention", fwd_attn, dev(fwd_attn), dev(fwd_attn), 2, 2),
            scope("step/forward/mlp", fwd_mlp, dev(fwd_mlp), dev(fwd_mlp), 2, 2),
            scope("step/optimizer", opt, dev(opt), dev(opt), 1, 1),
        ]
        busy = dev(fwd_attn) + dev(fwd_mlp) + dev(bwd) + dev(opt) + 40 * US
        kernels = [
            kgroup(FLASH, 2, dev(fwd_attn) // 2, grid=(264, 1, 1), block=(128, 1, 1), regs=255, smem=49152),
            kgroup(GEMM, 10, (dev(fwd_mlp) + dev(bwd)) // 10, grid=(528, 1, 1), regs=126),
            kgroup(FILL, 2, (dev(opt) + 40 * US) // 2, grid=(1024, 1, 1), block=(128, 1, 1), regs=16),
        ]
        window = busy + 700 * US
        incomplete = i == 11
        r = row(i, start, wall, [device(0, START_CUPTI + start + 30 * US, START_CUPTI + start + 30 * US + window,
                                        busy, 400 * US, 14)],
                scopes, kernels, nvml=[nvml_sum(0, wall, 1980.0 - (i % 3), 500.0 + i, energy=False)],
                perturbed=(i == 6), complete=not incomplete,
                warnings=["scope step/backward left open at shutdown"] if incomplete else [])
        rows.append(r)
        start += wall
    lines += rows
    lines.append(trailer(len(rows), 14 * len(rows), 14 * len(rows),
                         warnings=["iteration 11 written at shutdown before it ended"]))
    dump("v1-nested-scopes.jsonl", lines)


# --- 3. CUDA graph kernels on two devices ------------------------------------------------------
# Device 0 busy 3.84 ms, device 1 busy 4.48 ms per iteration of about 5 ms.
def graphs():
    lines = [header(devices=2)]
    rows, start = [], 0
    for i in range(8):
        wall = 5 * MS + (i % 3) * 25 * US
        devs, kernels, nv = [], [], []
        for d in (0, 1):
            each = 120 * US + d * 20 * US
            kernels += [kgroup(SOFTMAX, 16, each, device=d, graph=16, regs=32),
                        kgroup(GEMM, 8, 2 * each, device=d, graph=8, regs=126)]
            busy = 16 * each + 16 * each
            devs.append(device(d, START_CUPTI + start + 100 * US, START_CUPTI + start + 100 * US + busy + 160 * US,
                               busy, 12 * US, 24))
            nv.append(nvml_sum(d, wall, 1980.0, 610.0 + 10 * d, energy=True))
        scopes = [scope("step", wall - 100 * US, 0, sum(x["busy_ns"] for x in devs)),
                  scope("step/graph_replay", wall - 200 * US, sum(x["busy_ns"] for x in devs),
                        sum(x["busy_ns"] for x in devs), 48, 48)]
        rows.append(row(i, start, wall, devs, scopes, kernels, nvml=nv))
        start += wall
    lines += rows
    lines.append(trailer(len(rows), 48 * len(rows), 48 * len(rows), energy=run_energy(rows, (0, 1))))
    dump("v1-graph-kernels.jsonl", lines)


# --- 4. NVML missing -----------------------------------------------------------------------------
def missing_nvml():
    lines = [header(nvml=False,
                    warnings=["NVML: NVML is not available: libnvidia-ml.so.1 not found; clocks, power, "
                              "temperature and energy are not recorded"],
                    missing=["driver_version: NVML not available", "nvml_version: NVML not available"])]
    rows, start = [], 0
    for i in range(5):
        wall = 2 * MS + i * 10 * US
        k = 1500 * US
        rows.append(row(i, start, wall, [device(0, START_CUPTI + start, START_CUPTI + start + k + 100 * US, k,
                                              60 * US, 4)],
                        [scope("step", wall - 50 * US, k, k, 4, 4)], [kgroup("vector_add", 4, k // 4, regs=16)],
                        [{"device_id": 0, "kind": "HtoD", "count": 1, "bytes": 1 << 20, "total_ns": 0}],
                        dropped=12 if i == 3 else 0, missing=2 if i == 3 else 0,
                        warnings=["2 launches had no GPU record within the settle time"] if i == 3 else []))
        start += wall
    lines += rows
    lines.append(trailer(len(rows), 20, 25, dropped=12))
    dump("v1-missing-nvml.jsonl", lines)


# --- 5. two ranks ----------------------------------------------------------------------------------
def ranks():
    for rank in (0, 1):
        lines = [header(rank={"rank": rank, "local_rank": rank, "world_size": 2},
                        command=("torchrun", "--nproc-per-node", "2", "train.py"))]
        rows, start = [], 0
        n = 10 if rank == 0 else 9  # rank 1 was killed before iteration 9 was written
        for i in range(n):
            wall = 8 * MS + i * 10 * US
            if rank == 1 and i in (3, 7):
                wall += 2 * MS  # straggler
            if rank == 0 and i == 5:
                wall += 1 * MS
            busy = 6 * MS
            rows.append(row(i, start, wall, [device(0, START_CUPTI + start, START_CUPTI + start + busy + 500 * US,
                                                  busy, 300 * US, 6)],
                            [scope("step", wall - 100 * US, 0, busy),
                             scope("step/allreduce", 1 * MS, 1 * MS, 1 * MS, 1, 1),
                             scope("step/compute", wall - 1200 * US, busy - MS, busy - MS, 5, 5)],
                            [kgroup(GEMM, 5, (busy - MS) // 5, regs=126),
                             kgroup("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, MS, grid=(32, 1, 1),
                                    block=(640, 1, 1), regs=96)],
                            nvml=[nvml_sum(0, wall, 1980.0, 520.0, energy=True)]))
            start += wall
        lines += rows
        if rank == 0:
            lines.append(trailer(len(rows), 6 * len(rows), 6 * len(rows), energy=run_energy(rows)))
        dump(f"v1-rank{rank}.jsonl", lines)


# --- 6. an A/B pair of the same workload: B halves the GEMM --------------------------------------
def ab():
    state = [12345]

    def noise():  # deterministic, in [-1, 1)
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return ((state[0] >> 11) / float(1 << 53)) * 2 - 1

    for name, gemm_each in (("baseline", 1200 * US), ("change", 600 * US)):
        lines = [header()]
        rows, start = [], 0
        for i in range(24):
            other = 4 * MS + int(noise() * 80 * US)
            gemm = 10 * gemm_each + int(noise() * 40 * US)
            wall = other + gemm + 500 * US
            if i == 0:
                wall += 20 * MS
            busy = gemm + other - 600 * US
            rows.append(row(i, start, wall, [device(0, START_CUPTI + start, START_CUPTI + start + busy + 700 * US,
                                                  busy, 200 * US, 30)],
                            [scope("step", wall - 100 * US, 0, busy),
                             scope("step/forward", wall // 3, (busy) // 3, busy // 3, 12, 12),
                             scope("step/backward", 2 * wall // 3 - 200 * US, busy - busy // 3, busy - busy // 3,
                                   18, 18)],
                            [kgroup(GEMM, 10, 0, total=gemm, min_ns=gemm // 10 - 5 * US, max_ns=gemm // 10 + 5 * US,
                                    regs=126),
                             kgroup(SOFTMAX, 20, (other - 600 * US) // 20, regs=32)],
                            nvml=[nvml_sum(0, wall, 1980.0, 560.0, energy=True)]))
            start += wall
        lines += rows
        lines.append(trailer(len(rows), 30 * len(rows), 30 * len(rows), energy=run_energy(rows)))
        dump(f"v1-ab-{name}.jsonl", lines)


# --- 7. broken files ---------------------------------------------------------------------------------
def broken():
    # Truncated: the process was killed while writing the 4th row (line 5); no trailer, no newline.
    h = header()
    rows = []
    for i in range(4):
        rows.append(row(i, i * 2 * MS, 2 * MS, [device(0, START_CUPTI + i * 2 * MS, START_CUPTI + i * 2 * MS + MS,
                                                      MS, 0, 1)],
                        [scope("step", 2 * MS - 10 * US, MS, MS, 1, 1)], [kgroup("vector_add", 1, MS, regs=16)]))
    last = json.dumps(rows[3], separators=(",", ":"))
    dump("v1-truncated.jsonl", [h] + rows[:3], tail=last[: len(last) // 2])
    # Corrupt: line 3 has a string where a number belongs; later lines are fine.
    bad = json.loads(json.dumps(rows[1]))
    bad["host_wall_ns"] = "fast"
    lines = [json.dumps(x, separators=(",", ":")) for x in [h, rows[0], bad, rows[2], trailer(3, 3, 3)]]
    with open(os.path.join(OUT, "v1-corrupt.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


# --- 8. idle time split by cause, with the host calls, the longest gaps and the dispatch floor ---
# Steady rows: 10 ms wall, GPU 0 busy 6 ms, idle 2.5 ms (2.6 ms in row 3) = 25 % of the wall time,
# host_launch 60 % of it (scope step/data 1.2 ms, blocked:synchronize 0.3 ms), launch_latency
# 0.6 ms, dependency (event) 0.4 ms. Row 0 is a slow warm-up with 5 ms of unknown idle time; row 6
# was not traced (no split); allocations in rows 4 and 8, a device-wide synchronize in row 9.
def idle_pieces(i):
    p = lambda cause, detail, rule, ns, gaps: {**{"cause": cause}, **({"detail": detail} if detail else {}),
                                                **{"rule": rule, "ns": ns, "gaps": gaps}}
    out = [p("dependency", "event", "stream_wait_event", 400 * US, 2),
           p("host_launch", "blocked:synchronize", "in_cuda_call", 300 * US, 1),
           p("host_launch", "scope:step/data", "scope_open", 1200 * US, 1),
           p("launch_latency", None, "below_floor", 600 * US, 150)]
    if i == 3:
        out.insert(3, p("host_launch", "scope:step/log", "scope_open", 100 * US, 1))
    if i == 0:
        out.append(p("unknown", None, "no_launch_call", 5 * MS, 1))
    return out


def gap(start, ns, parts, **kw):
    top = max(parts, key=lambda x: x["ns"])
    g = {"start_ns": start, "ns": ns, "cause": top["cause"]}
    if "detail" in top:
        g["detail"] = top["detail"]
    g["rule"] = top["rule"]
    g["parts"] = [{**x, "gaps": 1} for x in parts]
    g.update(kw)
    return g


def idle_row(i, start):
    wall = 30 * MS if i == 0 else 10 * MS
    if i == 6:
        r = row(i, start, wall, [], [scope("step", wall - 100 * US, 0, 0),
                                     scope("step/data", 1200 * US, 0, 0)], [],
                nvml=[nvml_sum(0, wall, 1980.0, 500.0)])
        r["untraced"] = True
        return r
    pieces = idle_pieces(i)
    idle = sum(x["ns"] for x in pieces)
    busy = 6 * MS
    first = START_CUPTI + start + 200 * US
    d = device(0, first, first + busy + idle, busy, 1200 * US, 12)
    p = lambda cause, detail, rule, ns: {**{"cause": cause}, **({"detail": detail} if detail else {}),
                                         "rule": rule, "ns": ns}
    d["idle"] = {
        "floor_ns": 4 * US, "floor_source": "calibration", "host_offset_ns": -1500, "causes": pieces,
        "compute_idle_ns": idle + 150 * US, "copy_only_ns": 150 * US, "copy_overlapped_ns": 500 * US,
        "lead_in": gap(first - 300 * US, 300 * US,
                       [p("host_launch", "blocked:synchronize", "in_cuda_call", 300 * US)],
                       function="cuStreamSynchronize", scope="step/loss", tid=4242, thread="main",
                       before=GEMM, before_stream=7, after="memcpy HtoD", after_stream=7),
        "largest_gaps": [
            gap(first + 1000 * US, 1200 * US, [p("host_launch", "scope:step/data", "scope_open", 1200 * US)],
                scope="step/data", tid=4242, thread="main", before=GEMM, before_stream=7, after=SOFTMAX,
                after_stream=7),
            gap(first + 4000 * US, 300 * US,
                [p("host_launch", "blocked:synchronize", "in_cuda_call", 300 * US)],
                function="cuStreamSynchronize", scope="step/loss", tid=4242, thread="main", before=SOFTMAX,
                before_stream=7, after=GEMM, after_stream=7),
            gap(first + 6000 * US, 204 * US,
                [p("launch_latency", None, "below_floor", 4 * US),
                 p("dependency", "event", "stream_wait_event", 200 * US)],
                scope="step/forward", tid=4242, thread="main", before=GEMM, before_stream=7, after=SOFTMAX,
                after_stream=13),
        ],
    }
    if i == 0:
        d["idle"]["largest_gaps"].insert(0, gap(first + 7000 * US, 5 * MS,
                                                [p("unknown", None, "no_launch_call", 5 * MS)],
                                                before=GEMM, before_stream=7, after=SOFTMAX, after_stream=7))
    inv = [{"kind": "small_dtoh", "scope": "step/loss", "function": "cuMemcpyDtoH_v2", "device_id": 0,
            "count": 1, "host_ns": 300 * US, "bytes": 4, "synchronous": 1},
           {"kind": "stream_sync", "scope": "step/loss", "function": "cuStreamSynchronize", "count": 1,
            "host_ns": 290 * US}]
    if i in (4, 8):
        inv.append({"kind": "alloc", "scope": "step/forward", "function": "cuMemAlloc_v2", "device_id": 0,
                    "count": 2, "host_ns": 80 * US, "bytes": 64 << 20})
    if i == 9:
        inv.append({"kind": "device_sync", "scope": "(unscoped)", "function": "cuCtxSynchronize", "count": 1,
                    "host_ns": 500 * US})
    r = row(i, start, wall, [d],
            [scope("step", wall - 100 * US, 0, busy), scope("step/data", 1200 * US, 0, 0),
             scope("step/forward", 3 * MS, busy, busy, 12, 12), scope("step/loss", 400 * US, 0, 0, 1, 0)],
            [kgroup(GEMM, 4, 1000 * US, regs=126), kgroup(SOFTMAX, 8, 250 * US, regs=32)],
            [{"device_id": 0, "kind": "DtoH", "count": 1, "bytes": 4, "total_ns": 2 * US},
             {"device_id": 0, "kind": "HtoD", "count": 1, "bytes": 8 << 20, "total_ns": 650 * US}],
            sync=[{"kind": "stream", "count": 1, "total_ns": 290 * US}],
            nvml=[nvml_sum(0, wall, 1980.0, 500.0)])
    r["launch_threads"] = [{"name": "main", "tid": 4242, "kernels": 12, "kernel_ns": busy, "copies": 2,
                            "attribution": {"own_thread": 12, "handoff": 0, "followed": 0, "profiler": 0,
                                            "unscoped": 0},
                            "run_queue_ns": 20 * US, "on_cpu_ns": 9 * MS, "timeslices": 40}]
    r["host_inventory"] = inv
    return r


def idle_causes():
    lines = [header()]
    lines[0]["config"]["idle_causes"] = "on: largest_gaps=3 small_read_bytes=1024 floor=calibration"
    rows, start = [], 0
    for i in range(10):
        r = idle_row(i, start)
        rows.append(r)
        start += r["host_wall_ns"]
    lines += rows
    t = trailer(len(rows), 12 * 9, 14 * 9, energy=run_energy(rows))
    t["untraced_records"] = 14
    t["dispatch_floors"] = [{"device_id": 0, "floor_ns": 4 * US, "median_ns": 3 * US, "p90_ns": 4 * US,
                             "samples": 640, "source": "calibration"}]
    lines.append(t)
    dump("v1-idle-causes.jsonl", lines)


overlapping()
nested()
graphs()
missing_nvml()
ranks()
ab()
broken()
idle_causes()
