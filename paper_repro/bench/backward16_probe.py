"""16-bit backward scans against forward ones: the shipped batch-major tile and variants of it.

``python -m paper_repro.bench.backward16_probe [--out FILE] [--shapes 64x131072,512x4096]
[--algorithms discounted_returns,prefix_sum] [--rounds 2]``

(CUDA) At the same bytes, bf16 discounted returns (a backward scan) took 1.2x the prefix sum's
time (a forward one) where fp32 took the same. Per estimator and shape, bf16 (bool flags, as
the roofline's cells): the shipped tile and, forced through ``L.force_config``, its runs
(``flip``) of 1, 4 and 0, no register cap, half and twice the steps of a look-back tile (twice
in twice the warps), half the warps of a one-tile row, twice the warps; then fp32's shipped
tile. The arms in turn each round, reversed every
other round; each the minimum of two device times by CUDA-graph replay
(``forced.forced_time``), with its largest difference from the shipped output.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

SHAPES = "64x131072,512x4096"
ALGORITHMS = "discounted_returns,prefix_sum"
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "arm", "round", "BLOCK_T", "num_warps",
           "flip", "max_registers", "device_us", "max_abs_diff"]


def arms(shipped: L.ScanConfig) -> dict:
    """Name -> tile: the shipped one and its variants (``__doc__``)."""
    out = {"shipped": shipped, "flip1": replace(shipped, flip=1),
           "flip4": replace(shipped, flip=4), "flip0": replace(shipped, flip=0),
           "uncapped": replace(shipped, max_registers=0)}
    steps, warps = shipped.BLOCK_T, shipped.num_warps
    if shipped.single_pass:  # a tile a program: its steps are its segment
        out["half_steps"] = replace(shipped, BLOCK_T=steps // 2, seg_len=steps // 2)
        out["twice_steps"] = replace(shipped, BLOCK_T=2 * steps, seg_len=2 * steps,
                                     num_warps=2 * warps)
    else:
        out["half_warps"] = replace(shipped, num_warps=max(1, warps // 2))
    out["twice_warps"] = replace(shipped, num_warps=2 * warps)
    return out


def _case_rows(algorithm: str, N: int, T: int, rounds: int):
    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.bench.tile_ab import shipped_config

    for dtype, flags, itemsize in (("bf16", "bool", 2), ("fp32", "float", 4)):
        case, prep, want = prepared(algorithm, N, T, dtype, "NT", flags)
        shipped = shipped_config(algorithm, N, T, case.args[0].device, itemsize)
        tiles = arms(shipped) if dtype == "bf16" else {"shipped": shipped}
        for r in range(rounds):
            for name in (list(tiles) if r % 2 == 0 else list(tiles)[::-1]):
                c = tiles[name]
                diff, us = forced_time(prep, want, c, repeats=2)
                yield dict(algorithm=algorithm, num_envs=N, seq_len=T, dtype=dtype, arm=name,
                           round=r, BLOCK_T=c.BLOCK_T, num_warps=c.num_warps, flip=c.flip,
                           max_registers=c.max_registers, device_us=round(us, 3),
                           max_abs_diff=f"{diff:.3g}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--algorithms", default=ALGORITHMS)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = (row for N, T in shapes for a in args.algorithms.split(",")
            for row in _case_rows(a, N, T, args.rounds))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
