"""Tile probe: every estimator at the roofline shapes under the shipped tiles and candidate
tiles, fp32 and bf16 batch-major and fp32 time-major, so the heuristic is chosen per estimator
from data (``data/h200/tile_probe.csv``).

    python -m paper_repro.bench.tile_probe --out DIR [--part I/K] [--warm-only] [--list]
        [--small | --retrace-rows | --time-major FAMILY] [--words on|off] [--estimators ...]

``--part I/K`` takes every K-th (case, tile) pair from the I-th, so several processes (one a
GPU) share a sweep; ``--warm-only`` compiles without timing, filling Triton's cache in
parallel before the timed processes run. Each row also records the largest difference from
the shipped tiles' answer (a race or a bad tile shows there). The committed file is the parts
of each run concatenated, with the commit that ran them.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import sys
from dataclasses import replace
from pathlib import Path

from paper_repro.bench.gate import FORWARD_ALGORITHMS
from paper_repro.bench.inputs import ALGORITHMS
from paper_repro.bench.suites import ROOFLINE
from paper_repro.kernels import _launch as L

VARIANTS = (("fp32", "NT", "float"), ("bf16", "NT", "bool"), ("fp32", "TN", "float"))
WIDE = ("vtrace", "retrace")
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "layout", "shipped", "BLOCK_B",
           "BLOCK_T", "num_warps", "seg_len", "single_pass", "flip", "device_us", "bytes",
           "max_abs_diff", "max_registers"]


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _per_thread(c) -> float:
    return c.BLOCK_B * c.BLOCK_T / (32 * c.num_warps)


def _flipped(configs) -> list:
    return [replace(c, flip=1) for c in configs]


def _runs(configs) -> list:
    """Time-ordered tiles held as runs of 4 or 8 ascending steps, latest run first (a forward
    scan that keeps the vector loads: 4 fp32 or 8 bf16 steps are 16 bytes)."""
    return [replace(c, flip=r) for c in configs for r in (4, 8)
            if not c.flip and 2 * r <= c.BLOCK_T]


def batch_major_candidates(N: int, T: int, wide: bool) -> list:
    """[N, T] tiles: fat short tiles, whole rows a program, multi-tile rows, look-back; one-warp
    tiles for the wide estimators (their many layout changes each cost a block barrier); tiles
    held latest step first where each thread holds few steps; each time-ordered tile as runs."""
    pt = _pow2(T)
    if T >= 65536:
        out = [L.ScanConfig(bb, bt, w, bt, True) for bb, bt, w in
               [(1, 1024, 4), (1, 2048, 4), (1, 2048, 8), (1, 4096, 8), (1, 4096, 16),
                (1, 8192, 16), (2, 2048, 8)]]
        out += [L.ScanConfig(1, 2048, 8, 16 * 2048), L.ScanConfig(1, 4096, 16, 8 * 4096)]
        if wide:
            out += [L.ScanConfig(1, bt, w, bt, True) for bt, w in ((256, 1), (512, 1), (512, 2))]
        return out + _flipped([L.ScanConfig(1, 1024, 4, 1024, True),
                               L.ScanConfig(1, 2048, 4, 2048, True)]) + _runs(out)
    if T > 256:
        out = [L.ScanConfig(1, pt, w, pt) for w in (4, 8, 16) if 8 <= pt // (32 * w) <= 32]
        out += [L.ScanConfig(2, pt, 16, pt)] if pt <= 4096 else []
        out += [L.ScanConfig(1, bt, w, pt) for bt, w in ((512, 2), (1024, 4), (2048, 4),
                                                         (2048, 8)) if bt < pt]
        if wide:
            out += [L.ScanConfig(1, bt, 1, pt) for bt in (128, 256, 512)]
        return out + _flipped([L.ScanConfig(1, 512, 2, pt), L.ScanConfig(1, 256, 1, pt)]) + \
            _runs(out)
    out = [L.ScanConfig(bb, pt, w, pt) for bb in (1, 2, 4, 8, 16, 32, 64, 128)
           for w in (1, 2, 4, 8) if bb <= _pow2(N)]
    out = [c for c in out if 2 <= _per_thread(c) <= 32]
    return out + _flipped([c for c in out if _per_thread(c) <= 4]) + _runs(out)


def time_major_candidates(N: int, T: int) -> list:
    """[T, N] tiles: short tiles as wide as a warp's rows (each thread scans its own envs),
    one pass, two passes over segments, or look-back with short tiles; each also held latest
    step first (time is not the vectorised axis here, so flipping costs nothing)."""
    pt = _pow2(T)
    if T >= 65536:  # one pass or many short segments would walk thousands of tiles serially
        out = [L.ScanConfig(bb, bt, w, bt, True) for bb, bt, w in
               [(16, 32, 4), (32, 32, 4), (32, 16, 1), (16, 64, 2), (64, 32, 4), (16, 128, 4)]]
        return out + _flipped(out)
    out = []
    for bb, bt, w in [(16, 32, 4), (32, 32, 4), (64, 16, 2), (128, 8, 1), (32, 16, 1)]:
        bt = min(bt, pt)
        if bb > max(16, _pow2(N)):
            continue
        chunks = -(-T // bt)
        out.append(L.ScanConfig(bb, bt, w, chunks * bt))
        if chunks >= 16:
            out.append(L.ScanConfig(bb, bt, w, 8 * bt))
            if bb <= 32:
                out.append(L.ScanConfig(bb, bt, w, bt, True))
    out += [L.ScanConfig(16, 128, 4, 128, True)] if T >= 16 * 128 else []
    return out + _flipped(out)


# [T, N] tile families beyond the shipped ones: "wide", 64 to 256 envs, a warp's lanes all
# along the envs so each thread scans its own steps in registers; "tall", 8 to 32 envs and up
# to 256 steps with 4 to 16 warps, a whole short horizon in one tile; "interleaved", tiles
# whose columns a thread holds (every 8 x warps-th for 16 envs) are runs of consecutive steps
# (flip < 0); "runs", interleaved tiles of 16 to 64 envs (a thread's columns: every
# (BLOCK_B / 4 lanes across the envs, the rest and every warp along time)-th step);
# "more-warps", the same with more warps or envs a tile (fewer registers a thread);
# "retrace", Retrace's reverse-scan tiles beside interleaved ones (an order given per tile
# applies to Retrace too; without one Retrace keeps the reverse scan); "segment", the shipped
# interleaved tiles in a look-back over segments of several tiles.
TIME_MAJOR_TILES = {
    "runs": [(16, 128, 4, -4), (16, 32, 1, -4), (32, 32, 1, -8), (32, 16, 1, -4),
             (32, 128, 4, -8), (64, 32, 2, -8), (16, 256, 8, -8)],
    "retrace": [(16, 32, 1, 0), (16, 32, 4, 0), (16, 128, 4, 0), (16, 32, 1, -4), (32, 16, 1, -4),
                (32, 32, 1, -8), (16, 64, 4, -2), (16, 128, 4, -4)],
    "segment": [(32, 32, 1, -8), (16, 32, 1, -4), (32, 16, 1, -4), (16, 128, 4, -4),
                (32, 128, 4, -8)],
    "more-warps": [(32, 128, 8, -4), (32, 64, 2, -8), (64, 64, 4, -8), (64, 128, 8, -8),
                   (32, 256, 8, -8)],
    "interleaved": [(16, 64, 4, -2), (16, 128, 4, -4), (16, 128, 8, -4), (16, 256, 8, -8),
                    (32, 32, 1, -8), (32, 64, 1, -8), (16, 32, 1, -4)],
    "wide": [(64, 16, 2), (64, 32, 4), (128, 8, 2), (128, 16, 4), (256, 8, 4), (128, 32, 8)],
    "tall": [(16, 64, 4), (16, 64, 8), (16, 128, 8), (16, 128, 16), (8, 128, 4), (32, 128, 8),
             (16, 256, 16)]}


def time_major_split_candidates(N: int, T: int, retrace: bool, family: str) -> list:
    """``TIME_MAJOR_TILES[family]``, each in one pass (up to 64 tiles a row), in two passes over
    segments of 1 to 128 tiles (at most 512 segments), and as one-tile look-back programs; the
    "segment" family also as look-back programs over segments of 2 to 16 tiles."""
    pt = _pow2(T)
    out = []
    for bb, bt, w, *order in TIME_MAJOR_TILES[family]:
        flip = order[0] if order else 0 if retrace else 1
        bt = min(bt, pt)
        if bb > max(64, _pow2(N)) or (bt < 64 and family == "tall"):
            continue
        chunks = -(-T // bt)
        if chunks <= 64:
            out.append(L.ScanConfig(bb, bt, w, chunks * bt, flip=flip))
        out += [L.ScanConfig(bb, bt, w, k * bt, flip=flip) for k in (1, 2, 4, 8, 32, 128)
                if k < chunks and chunks <= 512 * k]
        if chunks >= 16:
            out.append(L.ScanConfig(bb, bt, w, bt, True, flip))
        if family == "segment":  # look-back over segments of 2 to 16 tiles (PHASE 4)
            out += [L.ScanConfig(bb, bt, w, k * bt, True, flip) for k in (2, 4, 8, 16)
                    if chunks >= 4 * k]
    return list(dict.fromkeys(out))  # tiles capped at a short T can coincide


# Grid shapes where a program's latency, not the bytes, sets the time (a few programs an SM or
# fewer, 1.6-12 us): the peers' one-program-a-row kernels were level with ours there.
SMALL = ((64, 512), (512, 128), (128, 1024), (256, 1024), (512, 512), (512, 1024), (512, 2048),
         (4096, 2048))


def small_candidates(N: int, T: int, retrace: bool, backward: bool = True) -> list:
    """fp32 [N, T] tiles for ``SMALL``: whole rows in one tile with 1 to 16 warps (1 to 32
    steps a thread), rows walked in shorter tiles, two passes over 2 or 4 segments and one-tile
    look-back, each in the shipped order of steps (``run_length``); for backward scans, whole
    rows of under 4 steps a thread also in runs of 2 (forward scans hold no runs)."""
    pt = _pow2(T)
    out = [L.ScanConfig(bb, pt, w, pt) for bb in (1, 2, 4, 8) for w in (1, 2, 4, 8, 16)
           if bb * pt <= 8192 and 1 <= bb * pt / (32 * w) <= 32 and (bb == 1 or T <= 256)]
    for bt in (256, 512, 1024, 2048):
        if bt < pt:
            out += [L.ScanConfig(1, bt, w, pt) for w in (1, 2, 4, 8) if 2 <= bt / (32 * w) <= 16]
            out += [L.ScanConfig(1, bt, w, pt // k) for w in (2, 4) for k in (2, 4)
                    if pt // k >= bt and 2 <= bt / (32 * w) <= 16]
    if T >= 1024:
        out += [L.ScanConfig(1, bt, w, bt, True) for bt, w in ((256, 1), (256, 2), (512, 2),
                                                                (512, 4))]
    shipped = [replace(c, flip=L.run_length(c.BLOCK_T, 4, retrace)) for c in dict.fromkeys(out)]
    # Whole rows with fewer than 4 steps a thread, also in runs of 2: runs of 4 leave threads
    # without a run of their own, so a warp's chain is no shorter than in fewer warps.
    short_runs = [replace(c, flip=2) for c in shipped
                  if backward and c.flip == 4 and c.seg_len == c.BLOCK_T >= T and not c.single_pass
                  and c.BLOCK_B * c.BLOCK_T // (32 * c.num_warps) < 4]
    return shipped + short_runs


def small_cases(algorithms=ALGORITHMS, shapes=SMALL, variants=(("fp32", "float"),)):
    """Batch-major cases (fp32 at ``SMALL`` unless told) with ``small_candidates``."""
    return [(a, N, T, dtype, "NT", flags,
             small_candidates(N, T, a == "retrace", a not in FORWARD_ALGORITHMS))
            for N, T in shapes for dtype, flags in variants for a in algorithms]


def time_major_split_cases(family: str, algorithms=("discounted_returns", "gae", "vtrace")):
    """fp32 time-major cases of a few estimators with ``time_major_split_candidates``."""
    return [(a, N, T, "fp32", "TN", "float",
             time_major_split_candidates(N, T, a == "retrace", family))
            for N, T in ROOFLINE for a in algorithms]


def cases(shapes=ROOFLINE):
    """(algorithm, N, T, dtype, layout, flags, candidate tiles) of the sweep."""
    out = []
    for N, T in shapes:
        for dtype, layout, flags in VARIANTS:
            for a in ALGORITHMS:
                configs = (time_major_candidates(N, T) if layout == "TN"
                           else batch_major_candidates(N, T, a in WIDE))
                out.append((a, N, T, dtype, layout, flags, configs))
    return out


def items(sweep):
    """Every (case, tile) pair, the shipped tile (None) first in each case."""
    return [(c, cfg) for c in sweep for cfg in [None] + list(c[-1])]


def run(out: Path, part=(0, 1), warm_only=False, only=None, sweep_cases=None):
    """This process's share of the sweep (``sweep_cases``, default ``cases()``), into
    ``tile_probe.partI.csv`` unless warming; ``only(case, tile)`` narrows it (the shipped tile
    always stays)."""
    sweep = [(c, cfg) for c, cfg in items(sweep_cases or cases())
             if cfg is None or only is None or only(c, cfg)]
    mine = sweep[part[0]::part[1]]
    path = out / f"tile_probe.part{part[0]}.csv"
    with (contextlib.nullcontext() if warm_only else open(path, "w", newline="")) as f:
        writer = None if warm_only else csv.writer(f)
        if writer:
            writer.writerow(COLUMNS)
        _sweep(mine, writer, f)
    print(f"part {part}: {len(mine)} pairs done", file=sys.stderr)


def _sweep(pairs, writer, f):
    """Time each (case, tile) pair (compile only when ``writer`` is None)."""
    import torch

    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.bench.roofline import min_bytes

    warm_only = writer is None
    sms = L.num_sms(torch.device("cuda"))
    current = None  # one case's tensors alive at a time
    for (a, N, T, dtype, layout, flags, _), cfg in pairs:
        if current != (a, N, T, dtype, layout):
            current = (a, N, T, dtype, layout)
            case, prep, want = prepared(a, N, T, dtype, layout, flags)
        shipped = L.choose_config(N, T, layout == "TN", sms, a in WIDE, a == "retrace",
                                  2 if dtype == "bf16" else 4, traits=traits_of(a))
        if cfg is not None and cfg == shipped:
            continue
        tile = shipped if cfg is None else cfg
        try:
            diff, us = forced_time(prep, want, tile, warm_only)
            if warm_only:
                continue
            diff, us = f"{diff:.3g}", round(us, 3)
        except Exception as e:  # a tile that does not compile or launch is a result too
            if warm_only:
                continue
            diff, us = f"error: {type(e).__name__}", ""
        writer.writerow([a, N, T, dtype, layout, int(cfg is None), tile.BLOCK_B, tile.BLOCK_T,
                         tile.num_warps, tile.seg_len, int(tile.single_pass), int(tile.flip), us,
                         min_bytes(case), diff, tile.max_registers])
        f.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="data/h200")
    p.add_argument("--part", default="0/1", help="I/K: this process's share of the sweep")
    p.add_argument("--warm-only", action="store_true", help="compile, do not time")
    p.add_argument("--list", action="store_true", help="print the sweep's size (no GPU)")
    p.add_argument("--flipped-and-one-warp", action="store_true",
                   help="only flipped tiles and the wide estimators' one-warp tiles")
    p.add_argument("--runs", action="store_true",
                   help="only backward batch-major tiles held as runs of steps")
    p.add_argument("--time-major", choices=sorted(TIME_MAJOR_TILES),
                   help="only fp32 time-major tiles of one family (time_major_split_cases)")
    p.add_argument("--small", action="store_true",
                   help="only fp32 batch-major tiles at the latency-bound SMALL shapes")
    p.add_argument("--retrace-rows", action="store_true",
                   help="Retrace's batch-major tiles at the warps probe's shapes, fp32 and "
                        "bf16, with the SMALL candidates")
    p.add_argument("--words", choices=("on", "off"),
                   help="Retrace's per-action inputs as words wherever allowed, or never")
    p.add_argument("--estimators", nargs="+", choices=ALGORITHMS,
                   help="with --time-major (default: discounted returns, GAE, V-trace) or "
                        "--small (default: all): the estimators to probe")
    args = p.parse_args(argv)
    if args.time_major:
        sweep = time_major_split_cases(args.time_major, tuple(
            args.estimators or ("discounted_returns", "gae", "vtrace")))
    elif args.small:
        sweep = small_cases(tuple(args.estimators or ALGORITHMS))
    elif args.retrace_rows:
        from paper_repro.bench import warps_probe

        sweep = small_cases(("retrace",), warps_probe.SHAPES, warps_probe.VARIANTS)
    else:
        sweep = cases()
    if args.list:
        print(f"{len(sweep)} cases, {len(items(sweep))} (case, tile) pairs")
        return
    i, k = (int(x) for x in args.part.split("/"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = (_flipped_or_one_warp if args.flipped_and_one_warp else
            _backward_runs if args.runs else None)
    words = None if args.words is None else args.words == "on"
    with L.force_words(words):
        run(out, (i, k), args.warm_only, only, sweep)


def _flipped_or_one_warp(case, cfg):
    return cfg.flip == 1 or (case[0] in WIDE and cfg.num_warps == 1)


def _backward_runs(case, cfg):
    """Runs as long as a thread's 16-byte load: 4 steps, or 8 bf16 ones."""
    return case[0] not in FORWARD and (cfg.flip == 4 or (cfg.flip == 8 and case[3] == "bf16"))


FORWARD = ("eligibility_traces", "prefix_sum")


def traits_of(algorithm: str, truncated: bool = False):
    """The estimator's tile traits (:class:`~paper_repro.kernels._launch.TileTraits`) as its
    call passes them to the heuristic, with or without ``truncated`` episodes; the default for
    Retrace and the bare engine."""
    from paper_repro.kernels import eligibility_traces, gae, lambda_returns, vtrace

    v_trace = vtrace.TILE_TRAITS if truncated else vtrace.TILE_TRAITS_UNTRUNCATED
    return {"gae": gae.TILE_TRAITS, "vtrace": v_trace,
            "lambda_returns": lambda_returns.TILE_TRAITS,
            "discounted_returns": lambda_returns.TILE_TRAITS_NO_VALUES,
            "eligibility_traces": eligibility_traces.TILE_TRAITS,
            "prefix_sum": eligibility_traces.TILE_TRAITS}.get(algorithm, L.TileTraits())


if __name__ == "__main__":
    main()
