"""Rows too long for their segments: two passes under each cap on the segments a row
(``_tiles.MAX_SEGMENTS``), the shipped tile forced at each.

``python -m paper_repro.bench.long_segments_ab [--out FILE] [--shapes 1x67108864,...]
[--algorithms prefix_sum,...] [--caps 1024,65535,256] [--rounds 2]``

(CUDA) Per estimator and shape, batch-major fp32 (float flags) or, for ``gae``, bf16 (bool
flags; fp32 GAE looks back instead): the shipped tile under each cap in turn, the order
reversed every other round. A second-pass program composes the aggregates of every segment
before its own, so the passes' extra work grows with the square of the segments: 65535 (CUDA's
grid limit, the cap before) lets a row of 2**26 steps take 8192 segments of 8192 steps. Device
time by CUDA-graph replay (minimum of two) and the largest difference from the shipped call's
output.
"""
from __future__ import annotations

import argparse
import contextlib

from paper_repro.bench.results import stream_csv
from paper_repro.bench.tile_ab import shipped_config
from paper_repro.kernels import _tiles

SHAPES = "1x4194304,1x16777216,1x67108864,4x16777216"
ALGORITHMS = "prefix_sum,discounted_returns,gae"
CAPS = "1024,65535,256"
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "round", "cap", "segments", "seg_len",
           "device_us", "max_abs_diff"]


@contextlib.contextmanager
def segment_cap(cap: int):
    """``_tiles.MAX_SEGMENTS`` set to ``cap`` inside."""
    before, _tiles.MAX_SEGMENTS = _tiles.MAX_SEGMENTS, cap
    try:
        yield
    finally:
        _tiles.MAX_SEGMENTS = before


def _rows(algorithm, N, T, caps, rounds):
    from paper_repro.bench.forced import forced_time, prepared

    dtype, flags = ("bf16", "bool") if algorithm == "gae" else ("fp32", "float")
    case, prep, want = prepared(algorithm, N, T, dtype, "NT", flags)
    config = shipped_config(algorithm, N, T, case.args[0].device, 2 if dtype == "bf16" else 4)
    for r in range(rounds):
        for cap in caps if r % 2 == 0 else caps[::-1]:
            with segment_cap(cap):
                fitted = _tiles.fit_segments(config, T)
                diff, us = forced_time(prep, want, config, repeats=2)
            yield {"algorithm": algorithm, "num_envs": N, "seq_len": T, "dtype": dtype,
                   "round": r, "cap": cap, "segments": fitted.grid(N, T)[1],
                   "seg_len": fitted.seg_len, "device_us": round(us, 3),
                   "max_abs_diff": f"{diff:.3g}"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--algorithms", default=ALGORITHMS)
    p.add_argument("--caps", default=CAPS)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    caps = [int(c) for c in args.caps.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = (row for N, T in shapes for a in args.algorithms.split(",")
            for row in _rows(a, N, T, caps, args.rounds))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
