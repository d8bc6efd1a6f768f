"""Masked GAE's launches in one process: the public call (the fused kernel, walking whole rows
where ``walks_fast`` says so, else splitting time; repeats served by its plan), the fused
kernel forced in each of its tile walks, and the engine's two scans, device (CUDA-graph replay)
and full calls in turn.

``python -m paper_repro.bench.masked_ab [--out FILE]`` (CUDA) writes one row per case and arm,
with the largest difference between that arm's output and the two scans'. The forced arms
(``lanes``: each tile's lanes latest step first, the values and mask read again one step later;
``runs``: batch-major tiles as runs of one 16-byte load's steps; ``runs_prefetch``: the next
tile's loads in flight while this one is scanned; ``split``: the shipped walk over segments of
time, about ``SPLIT_PROGRAMS`` programs, two launches; time-major ``interleaved``: 16 x 128
tiles in interleaved runs of 4, ``tm{envs}x{steps}w{warps}``: lanes tiles of 16-32 envs, not
prefetched (``p``: walks prefetched); batch-major ``bm{rows}x{steps}w{warps}``: other tiles in
runs, prefetched; time-major ``triton_loads``: the shipped walk, its narrow loads as Triton
vectorises them, not four envs a load) launch the kernel without a plan. ``--shapes
256x32768,...`` keeps those cases only.
"""
from __future__ import annotations

import argparse
import sys
from functools import partial

import torch

from paper_repro.bench import timing
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L
from paper_repro.kernels import masked_gae as MG
from paper_repro.kernels._tiles import triton_cdiv

F32, BF16 = torch.float32, torch.bfloat16
# (envs, steps, layout, dtype): the masked suite's RLHF shapes, then rows of few programs,
# the tile rule's edges, time-major inputs and bf16
CASES = [(64, 1024, "NT", F32), (256, 2048, "NT", F32), (256, 8192, "NT", F32),
         (32, 32768, "NT", F32), (8, 32768, "NT", F32), (1, 32768, "NT", F32),
         (16, 65536, "NT", F32), (4096, 128, "NT", F32), (256, 2048, "TN", F32),
         (4096, 128, "TN", F32), (256, 8192, "NT", BF16), (64, 1024, "NT", BF16),
         (256, 16384, "NT", F32), (256, 32768, "NT", F32), (1024, 256, "TN", F32),
         (4096, 512, "TN", F32), (4, 131072, "NT", F32), (512, 4096, "NT", F32),
         (32768, 32, "TN", F32), (4096, 2048, "TN", F32), (256, 8192, "TN", F32),
         (4, 4096, "NT", F32), (8, 8192, "NT", F32), (64, 16384, "NT", F32),
         (128, 8192, "NT", F32), (256, 32768, "NT", BF16), (4096, 128, "TN", BF16),
         (256, 8192, "TN", BF16), (8192, 64, "TN", F32), (4096, 1024, "TN", F32),
         (1024, 4096, "TN", F32)]
COLUMNS = ["num_envs", "seq_len", "layout", "dtype", "arm", "device_us", "full_call_us",
           "max_abs_diff"]


def forced(args: tuple, axis: int, dtype, flip=None, prefetch=None, split=False,
           gamma=1.0, lambda_=0.95):
    """The fused kernel on ``args`` at ``masked_tile``'s tile, its FLIP and PREFETCH replaced
    where given (time-major lanes tiles keep lanes), walking whole rows or (``split``)
    splitting time for about ``SPLIT_PROGRAMS`` programs, launched without a plan."""
    rows = L.rows_of(axis, rewards=args[0], values=args[1], mask=args[2])
    block_b, block_t, warps, flip0, prefetch0, _ = MG.masked_tile(
        rows.B, rows.T, rows.stride, args[0].element_size())
    if flip0 == 1:
        flip = 1
    seg_tiles = MG.split_tiles(triton_cdiv(rows.T, block_t), triton_cdiv(rows.B, block_b))
    tile = (block_b, block_t, warps, flip0 if flip is None else flip,
            prefetch0 if prefetch is None else prefetch, seg_tiles if split else 0)
    return MG.fused_masked_gae(args, rows, tile, gamma, lambda_, axis, dtype)


def arms(num_envs: int, seq_len: int, layout: str, dtype) -> dict:
    g = torch.Generator(device="cuda").manual_seed(num_envs + seq_len)
    r, v = (torch.randn(num_envs, seq_len, device="cuda", generator=g).to(dtype)
            for _ in range(2))
    m = torch.rand(num_envs, seq_len, device="cuda", generator=g) < 0.7
    last = torch.randn(num_envs, device="cuda", generator=g).to(dtype)
    axis = 1
    if layout == "TN":
        r, v, m = (x.t().contiguous() for x in (r, v, m))
        axis = 0
    args = (r, v, m, last)
    return {"public": lambda: MG.compute_masked_gae(r, v, m, 1.0, 0.95, last, time_dim=axis),
            "lanes": lambda: forced(args, axis, dtype, flip=1, prefetch=False),
            "runs": lambda: forced(args, axis, dtype, prefetch=False),
            "runs_prefetch": lambda: forced(args, axis, dtype, prefetch=True),
            "split": lambda: forced(args, axis, dtype, split=True),
            "two_scans": lambda: MG.two_scans(r, v, m, 1.0, 0.95, last, axis, dtype),
            **({"triton_loads": partial(triton_loads, args, axis, dtype)} if layout == "TN"
               else {}),
            **({name: partial(time_major_tile, args, dtype, *tile)
                for name, tile in TIME_MAJOR_TILES.items()} if layout == "TN" else
               {name: partial(batch_major_tile, args, dtype, *tile)
                for name, tile in BATCH_MAJOR_TILES.items()})}


def triton_loads(args: tuple, axis: int, dtype):
    """The public call's launch (``masked_tile``'s tile, walk and split) with every load as
    Triton vectorises it (``L.force_words(False)``), not four envs a load (``L.four_loads``): a
    bool mask 16 envs a load, 16-bit values 8."""
    rows = L.rows_of(axis, rewards=args[0], values=args[1], mask=args[2])
    tile = MG.masked_tile(rows.B, rows.T, rows.stride, args[0].element_size())
    with L.force_words(False):
        return MG.fused_masked_gae(args, rows, tile, 1.0, 0.95, axis, dtype)


# Batch-major tiles (rows, steps, warps) beside the public call's, where a program streams a
# row of many tiles: wider tiles or more warps keep more bytes in flight an SM
# (data/h100/masked_ab_bm.csv, first round: 2 x 1024 and 1 x 2048 in 8 warps lost to 1 x 2048
# in 4 at every shape, 1 x 1024 in 8 wherever 256 rows were walked; bm1x1024w4 is the tile
# shipped before LONG_WALK_TILE)
BATCH_MAJOR_TILES = {"bm1x1024w4": (1, 1024, 4), "bm1x2048w2": (1, 2048, 2),
                     "bm1x2048w4": (1, 2048, 4), "bm1x4096w4": (1, 4096, 4),
                     "bm1x4096w8": (1, 4096, 8)}


def _walked(rows, block_b: int, block_t: int, time_major: bool) -> tuple:
    """``(block_t, seg_tiles)``: the tile's steps, at most the rows' (a power of two from 16),
    and its segments: whole rows where ``walks_fast`` says this tile's programs walk fast, else
    ``split_tiles``'s."""
    block_t = min(block_t, max(16, 1 << (rows.T - 1).bit_length()))
    tiles, programs = triton_cdiv(rows.T, block_t), triton_cdiv(rows.B, block_b)
    walked = MG.walks_fast(tiles, programs, time_major)
    return block_t, 0 if walked else MG.split_tiles(tiles, programs)


def batch_major_tile(args: tuple, dtype, block_b: int, block_t: int, warps: int):
    """Batch-major rows in ``block_b`` x ``block_t`` tiles in ``warps`` warps, as runs with the
    next tile prefetched, walked or split as ``_walked`` says."""
    rows = L.rows_of(1, rewards=args[0], values=args[1], mask=args[2])
    block_t, seg_tiles = _walked(rows, block_b, block_t, False)
    flip = MG.run_length(block_t, args[0].element_size(), False)
    return MG.fused_masked_gae(args, rows, (block_b, block_t, warps, flip, True, seg_tiles),
                               1.0, 0.95, 1, dtype)


# Time-major tiles (envs, steps, warps, FLIP[, PREFETCH]) beside the public call's: the
# engine's fp32 tile in interleaved runs (the public call's from 128 steps), and lanes tiles
# narrower than the 64 x 16 four-warp tile shipped before 49a9ad5 (tm16x16w1p, walks
# prefetched, is the public call's tile for rows of 128 steps and more before INTERLEAVED_TILE)
TIME_MAJOR_TILES = {"interleaved": MG.INTERLEAVED_TILE, "tm16x16w1": (16, 16, 1, 1),
                    "tm16x16w1p": (16, 16, 1, 1, True), "tm16x32w1": (16, 32, 1, 1),
                    "tm16x64w2": (16, 64, 2, 1), "tm32x16w1": (32, 16, 1, 1),
                    "tm32x32w2": (32, 32, 2, 1)}


def time_major_tile(args: tuple, dtype, block_b: int, block_t: int, warps: int, flip: int,
                    prefetch: bool = False):
    """Time-major ``[T, N]`` rows in ``block_b`` x ``block_t`` tiles (``flip``: 1 lanes latest
    step first, -R interleaved runs of R), walked or split as ``_walked`` says, the next tile
    loaded during this one's scans where ``prefetch`` and walked."""
    rows = L.rows_of(0, rewards=args[0], values=args[1], mask=args[2])
    block_t, seg_tiles = _walked(rows, block_b, block_t, True)
    flip = -max(2, block_t // 32) if flip < 0 else flip
    tile = (block_b, block_t, warps, flip, prefetch and not seg_tiles, seg_tiles)
    return MG.fused_masked_gae(args, rows, tile, 1.0, 0.95, 0, dtype)


def measure(cases):
    for num_envs, seq_len, layout, dtype in cases:
        calls = arms(num_envs, seq_len, layout, dtype)
        want = calls["two_scans"]().float()
        diff = {k: (c().float() - want).abs().max().item() for k, c in calls.items()}
        device = {k: timing.device_ms(c, reps=20, trials=5, trial_seconds=0.15).ms
                  for k, c in calls.items()}
        full = timing.full_call_interleaved(calls, n_iter=50, trials=5, trial_seconds=0.15)
        for arm in calls:
            yield dict(num_envs=num_envs, seq_len=seq_len, layout=layout,
                       dtype=str(dtype).removeprefix("torch."), arm=arm,
                       device_us=round(device[arm] * 1e3, 2),
                       full_call_us=round(full[arm].ms * 1e3, 2), max_abs_diff=diff[arm])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.masked_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="masked_ab.csv")
    parser.add_argument("--layout", choices=["NT", "TN"], default=None,
                        help="only the cases of this layout")
    parser.add_argument("--shapes", default=None,
                        help="only these envs x steps, comma-separated (256x32768,...)")
    args = parser.parse_args(argv)
    shapes = args.shapes.split(",") if args.shapes else None
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 1
    stream_csv(args.out, COLUMNS, measure([c for c in CASES if args.layout in (None, c[2])
                                           and (shapes is None or f"{c[0]}x{c[1]}" in shapes)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
