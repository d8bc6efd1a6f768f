"""Offline tile tuning on the GPU: sweep (BLOCK_B, BLOCK_T, num_warps, segments) per shape and
record device times, so the heuristic in kernels/_tiles.py is chosen from data.

    python -m paper_repro.tuning --out data/h200 [--quick]

Writes ``tuning.csv`` (every configuration tried), ``heuristic.csv`` (the shipped heuristic's
choice beside the best found) and ``copy_bandwidth.csv`` (the roofline ceiling).
``--prefetch-probe`` writes ``prefetch_probe.csv``: the shipped tiles with the kernels' PREFETCH
switch forced off and on, beside an SM copy of the same bytes timed the same way.
``--split-probe`` writes ``split_probe.csv``: the shipped tiles beside single-pass look-back
tiles (where time is split) and one-row wide tiles (mid shapes), with the same copy.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
import time
from pathlib import Path

import torch

import paper_repro as P
from paper_repro.kernels import _launch as L

SHAPES = [(4096, 8), (32768, 8), (32768, 32), (4096, 128), (16384, 128), (256, 1024),
          (4096, 512), (16384, 512), (2048, 1024), (512, 4096), (8192, 4096), (64, 131072),
          (16, 524288), (4, 1048576), (1, 4194304)]
TIME_MAJOR_SHAPES = [(4096, 128), (16384, 128), (32768, 32)]


def device_time_us(fn, calls=20, trials=5) -> float:
    """Device time per call from CUDA-graph replay (no launch overhead), min over trials."""
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    best = float("inf")
    for _ in range(trials):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3 / calls)
    return best


def full_call_us(fn, calls=50, trials=5) -> float:
    """The paper's full-call time: events around one call, median per trial, min of trials."""
    for _ in range(10):
        fn()
    best = float("inf")
    for _ in range(trials):
        times = []
        for _ in range(calls):
            torch.cuda.synchronize()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) * 1e3)
        best = min(best, sorted(times)[len(times) // 2])
    return best


def copy_bandwidth_gbs(nbytes=2 << 30) -> float:
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    # an SM kernel, timed by events: inside a CUDA graph copy_ becomes a copy-engine memcpy node,
    # which is slower than the kernels being compared against it
    for _ in range(3):
        torch.mul(src, 1.0, out=dst)
    best = float("inf")
    for _ in range(10):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mul(src, 1.0, out=dst)
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) * 1e3)
    return 2 * nbytes / best / 1e3


def probe_inputs(algorithm, N, T, dtype=torch.float32, time_major=False):
    """A call of one estimator on random inputs, and its minimal traffic in bytes."""
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (T, N) if time_major else (N, T)
    x = torch.randn(shape, device="cuda", generator=g).to(dtype)
    v = torch.randn(shape, device="cuda", generator=g).to(dtype)
    done = torch.rand(shape, device="cuda", generator=g) < 0.05
    done = done.to(dtype) if dtype == torch.float32 else done
    dim = 0 if time_major else -1
    item = x.element_size()
    if algorithm == "gae":
        return (lambda: P.compute_gae(x, v, done, time_dim=dim)), x.numel() * (
            3 * item + done.element_size())
    return (lambda: P.compute_episodic_prefix_sum(x, done, time_dim=dim)), x.numel() * (
        2 * item + done.element_size())


def gae_inputs(N, T, time_major=False):
    """A compute_gae call on random fp32 inputs (the sweep's and the probes' workload)."""
    return probe_inputs("gae", N, T, time_major=time_major)[0]


def copy_us(nbytes: int) -> float:
    """An SM copy moving ``nbytes`` (half read, half written), timed like the kernels."""
    src = torch.empty(nbytes // 8, device="cuda")
    dst = torch.empty_like(src)
    return device_time_us(lambda: torch.mul(src, 1.0, out=dst))


def write_prefetch_probe(out):
    cases = [("gae", s, torch.float32, False) for s in SHAPES]
    cases += [(a, s, d, tm) for a in ("gae", "prefix_sum")
              for s in [(512, 4096), (64, 131072), (1, 4194304)]
              for d, tm in ((torch.bfloat16, False), (torch.float32, True))
              if not (a == "prefix_sum" and d == torch.bfloat16)]
    cases += [("prefix_sum", s, torch.float32, False) for s in SHAPES]
    with open(out / "prefetch_probe.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["algorithm", "num_envs", "seq_len", "dtype", "time_major", "config",
                    "load_us", "prefetch_us", "copy_us", "bytes"])
        for algorithm, (N, T), dtype, tm in cases:
            fn, nbytes = probe_inputs(algorithm, N, T, dtype, tm)
            cfg = L.choose_config(N, T, tm, L.num_sms(torch.device("cuda")), False)
            times = []
            for flag in (False, True):
                with L.force_prefetch(flag):
                    times.append(round(device_time_us(fn), 3))
            w.writerow([algorithm, N, T, str(dtype).split(".")[-1], int(tm),
                        [cfg.BLOCK_B, cfg.BLOCK_T, cfg.num_warps, cfg.seg_len], *times,
                        round(copy_us(nbytes), 3), nbytes])
            f.flush()


SPLIT_CASES = [(s, tm) for s in [(512, 4096), (64, 131072), (16, 524288), (4, 1048576),
                                  (1, 4194304)] for tm in (False, True)] + \
    [((64, 32768), False)] + [(s, True) for s in [(2048, 1024), (4096, 128), (4096, 512),
                                                   (16384, 1024), (32768, 256)]]
WIDE_CASES = [(4096, 512), (16384, 512), (256, 1024), (2048, 1024), (4096, 128), (16384, 128)]


def split_candidates(N, T, time_major):
    """Single-pass look-back tiles (one per program) of 2-8K elements; time-major also the
    same tiles in one pass, and tiles as tall as the batch where it has under 16 rows."""
    pow_n = 1 << max(0, (N - 1).bit_length())
    if not time_major:
        shapes = [(1, 1024, 4), (1, 2048, 4), (1, 2048, 8), (1, 4096, 8), (2, 1024, 4),
                  (2, 2048, 8), (4, 512, 4), (4, 1024, 8)]
        return [L.ScanConfig(bb, bt, w, bt, True) for bb, bt, w in shapes
                if bb <= pow_n and bt < T]
    shapes = [(16, 128, 4), (32, 64, 4), (32, 128, 8), (64, 32, 4)]
    if pow_n < 16:
        shapes = [(pow_n, 2048 // pow_n, 4), (pow_n, 4096 // pow_n, 8), (pow_n, 512, 4)]
    pow_t = 1 << max(0, (T - 1).bit_length())
    return [L.ScanConfig(bb, bt, w, bt, True) for bb, bt, w in shapes if bt < T] + \
        [L.ScanConfig(bb, bt, w, pow_t) for bb, bt, w in shapes if bt < T]


def wide_candidates(N, T):
    """One or two rows a program over the whole horizon (mid shapes)."""
    pow_t = 1 << max(0, (T - 1).bit_length())
    return [L.ScanConfig(bb, pow_t, w, pow_t) for bb, w in ((1, 2), (1, 4), (1, 8), (2, 4),
                                                              (2, 8), (4, 8))
            if bb * pow_t <= 4096]


def write_split_probe(out, algorithms=("gae", "prefix_sum"), time_major_only=False):
    sms = L.num_sms(torch.device("cuda"))
    cases = [(a, N, T, torch.float32, tm, split_candidates(N, T, tm))
             for (N, T), tm in SPLIT_CASES for a in algorithms if tm or not time_major_only]
    if not time_major_only:
        cases += [("gae", N, T, torch.bfloat16, False, split_candidates(N, T, False))
                  for N, T in [(512, 4096), (64, 131072)] if "gae" in algorithms]
        cases += [(a, N, T, torch.float32, False, wide_candidates(N, T))
                  for N, T in WIDE_CASES for a in algorithms]
    name = "split_probe" + ("" if len(algorithms) == 2 else f"_{algorithms[0]}") + \
        ("_time_major" if time_major_only else "") + ".csv"
    with open(out / name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["algorithm", "num_envs", "seq_len", "dtype", "time_major", "shipped",
                    "BLOCK_B", "BLOCK_T", "num_warps", "seg_len", "single_pass", "device_us",
                    "copy_us", "bytes", "max_abs_diff"])
        for algorithm, N, T, dtype, tm, configs in cases:
            fn, nbytes = probe_inputs(algorithm, N, T, dtype, tm)
            copy = round(copy_us(nbytes), 3)
            shipped = L.choose_config(N, T, tm, sms, False)
            want = fn().double()
            for cfg in [shipped] + [c for c in configs if c != shipped]:
                with L.force_config(cfg):
                    us = round(device_time_us(fn), 3)
                    # against the shipped tiles' answer: a race would show here
                    diff = (fn().double() - want).abs().max().item()
                w.writerow([algorithm, N, T, str(dtype).split(".")[-1], int(tm),
                            int(cfg == shipped), cfg.BLOCK_B, cfg.BLOCK_T, cfg.num_warps,
                            cfg.seg_len, int(cfg.single_pass), us, copy, nbytes,
                            f"{diff:.3g}"])
            f.flush()
            print(f"{algorithm} {N}x{T} {dtype} tm={tm}", file=sys.stderr)


def candidates(N, T, time_major):
    pow_t = 1 << max(0, (T - 1).bit_length())
    pow_n = 1 << max(0, (N - 1).bit_length())
    out = set()
    for tile in (512, 1024, 2048, 4096):
        for bt in (8, 32, 128, 512, 2048):
            bt = min(bt, pow_t)
            bb = max(1, tile // bt)
            if bb > pow_n or (time_major and bb < 16 and N >= 16):
                continue
            chunks = -(-T // bt)
            segs = {chunks} | ({8, 32} & set(range(1, chunks)) if N // bb < 264 else set())
            for warps, seg in itertools.product({max(1, min(16, tile // e)) for e in
                                                 (128, 256, 512)}, segs):
                out.add(L.ScanConfig(bb, bt, warps, seg * bt))
    # Round-robin over tile widths, so a sweep cut short by its time budget has still tried
    # every BLOCK_T (sorted by BLOCK_T, the budget used to stop before the wide tiles).
    by_width = {}
    for c in sorted(out, key=lambda c: (c.BLOCK_T, c.BLOCK_B, c.num_warps, c.seg_len)):
        by_width.setdefault(c.BLOCK_T, []).append(c)
    groups = list(by_width.values())
    return [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="data/h200")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--no-sweep", action="store_true", help="only the heuristic's timings")
    p.add_argument("--launch-probe", action="store_true",
                   help="only split compute_gae's full call into host work and launch cost")
    p.add_argument("--prefetch-probe", action="store_true",
                   help="only time the shipped tiles with PREFETCH off and on")
    p.add_argument("--split-probe", nargs="*", choices=["gae", "prefix_sum"],
                   help="only time look-back and one-row tiles beside the shipped ones")
    p.add_argument("--time-major-only", action="store_true",
                   help="with --split-probe: only the [T, N] cases")
    p.add_argument("--shipped-report", action="store_true",
                   help="no GPU: the current heuristic against the recorded sweep")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.shipped_report:
        write_shipped_report(out)
        return
    if args.launch_probe:
        write_launch_probe(out)
        return
    if args.prefetch_probe:
        write_prefetch_probe(out)
        return
    if args.split_probe is not None:
        write_split_probe(out, tuple(args.split_probe) or ("gae", "prefix_sum"),
                          args.time_major_only)
        return
    t0 = time.time()
    with open(out / "copy_bandwidth.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "metric", "value", "unit"])
        w.writerow([torch.cuda.get_device_name(), "device_to_device_copy", round(
            copy_bandwidth_gbs(), 1), "GB/s"])
    rows = []
    shapes = [(s, False) for s in SHAPES] + [(s, True) for s in TIME_MAJOR_SHAPES]
    if args.quick:
        shapes = shapes[:4]
    for (N, T), tm in ([] if args.no_sweep else shapes):
        fn = gae_inputs(N, T, tm)
        deadline = time.time() + args.budget_s / len(shapes)
        for cfg in candidates(N, T, tm):
            if time.time() > deadline:
                break
            with L.force_config(cfg):
                us = device_time_us(fn)
            rows.append([N, T, int(tm), cfg.BLOCK_B, cfg.BLOCK_T, cfg.num_warps, cfg.seg_len,
                         round(us, 3)])
        print(f"{N}x{T} tm={tm}: {len(rows)} rows, {time.time() - t0:.0f}s", file=sys.stderr)
    if rows:
        write_tuning(out, rows)
    write_heuristic_report(out, shapes, rows)


def write_tuning(out, rows):
    with open(out / "tuning.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_envs", "seq_len", "time_major", "BLOCK_B", "BLOCK_T", "num_warps",
                    "seg_len", "device_us"])
        w.writerows(rows)


def write_heuristic_report(out, shapes, rows):
    with open(out / "heuristic.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_envs", "seq_len", "time_major", "heuristic_config", "heuristic_us",
                    "full_call_us", "best_config", "best_us"])
        for (N, T), tm in shapes:
            fn = gae_inputs(N, T, tm)
            cfg = L.choose_config(N, T, tm, L.num_sms(torch.device("cuda")), False)
            tried = [r for r in rows if r[:3] == [N, T, int(tm)]]
            best = min(tried, key=lambda r: r[-1]) if tried else None
            w.writerow([N, T, int(tm), cfg, round(device_time_us(fn), 3),
                        round(full_call_us(fn), 3), best[3:7] if best else "", best[-1] if best
                        else ""])


def write_shipped_report(out, sms=132):
    """No GPU: the current heuristic's pick per tuned shape beside the sweep's timing of that
    same tile (when the sweep tried it), the measured heuristic and the best tile."""
    swept = {}
    with open(out / "tuning.csv") as f:
        for r in csv.DictReader(f):
            key = tuple(int(r[k]) for k in ("num_envs", "seq_len", "time_major", "BLOCK_B",
                                            "BLOCK_T", "num_warps", "seg_len"))
            swept[key] = float(r["device_us"])
    with open(out / "heuristic.csv") as f:
        measured = list(csv.DictReader(f))
    with open(out / "heuristic_shipped.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["num_envs", "seq_len", "time_major", "shipped_config", "shipped_us_in_sweep",
                    "measured_heuristic_us", "best_us"])
        for r in measured:
            N, T, tm = int(r["num_envs"]), int(r["seq_len"]), int(r["time_major"])
            c = L.choose_config(N, T, bool(tm), sms, False)
            us = swept.get((N, T, tm, c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len), "")
            w.writerow([N, T, tm, [c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len], us,
                        r["heuristic_us"], r["best_us"]])


def host_us(fn, calls=2000) -> float:
    """Wall time per call of host-side work, no synchronisation."""
    for _ in range(50):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def write_launch_probe(out, N=4096, T=128):
    """Where compute_gae's full call goes at one shape: the whole call, our host work with the
    kernel launch replaced by a no-op, Triton's launcher, our direct launch of the compiled
    kernel, and a torch op and an allocation for scale."""
    from paper_repro.kernels import _direct as D

    fn = gae_inputs(N, T)
    fn()
    captured = {}

    def record(kernel, grid, num_warps, values, n_tensors=None):
        captured.update(kernel=kernel, grid=grid, num_warps=num_warps, values=values,
                        n_tensors=n_tensors)

    real = D.run, D.run_bound
    D.run = record
    D.run_bound = lambda cache, *args: record(*args)  # a launch plan's path
    try:
        host = host_us(fn)
    finally:
        D.run, D.run_bound = real
    k, grid, w, values = (captured[n] for n in ("kernel", "grid", "num_warps", "values"))
    compiled = k[grid](*values, num_warps=w)
    g = tuple(grid) + (1,) * (3 - len(grid))
    stream = torch.cuda.current_stream().cuda_stream
    x = torch.zeros(N, T, device="cuda")

    def raw_run():
        compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata,
                     None, None, None, *values)

    rows = [("full_call_us", full_call_us(fn)), ("host_without_launch_us", host),
            ("triton_launcher_us", host_us(lambda: k[grid](*values, num_warps=w))),
            ("direct_launch_us", host_us(lambda: D.run(k, grid, w, values,
                                                       captured["n_tensors"]))),
            ("compiled_run_us", host_us(raw_run)),
            ("torch_add_us", host_us(lambda: x.add_(1.0))),
            ("empty_like_us", host_us(lambda: torch.empty((N, T), device="cuda"))),
            ("device_us", device_time_us(fn))]
    # appended: each probe is one run, labelled by date, commit, machine and launch path
    path = out / "launch_probe.csv"
    new = not path.exists()
    run = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    commit = (os.environ.get("PAPER_REPRO_GIT_COMMIT") or "unknown")[:7]
    machine = f"{torch.cuda.get_device_name()} x{torch.cuda.device_count()}"
    how = "direct launch" if D.ENABLED else "triton launcher"
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["run", "commit", "machine", "launch_path", "num_envs", "seq_len", "metric",
                        "value"])
        w.writerows([run, commit, machine, how, N, T, name, round(v, 3)] for name, v in rows)


if __name__ == "__main__":
    main()
