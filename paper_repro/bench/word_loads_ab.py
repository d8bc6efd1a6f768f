"""Retrace's batch-major calls with their per-action words read by ``tl.load`` or by inline
assembly in the steps' own layout (``kernels/_vector.py``), in one process.

``python -m paper_repro.bench.word_loads_ab [--out FILE] [--rounds R] [--shapes 512x4096,...]
[--dtypes fp32,bf16] [--arms tl,word,pairs,shipped]``
(CUDA) times each case's shipped tile under each arm (``L.force_word_loads``): ``tl`` as
before the assembly (one-tile rows per action), ``word`` a word a load, ``pairs`` a 16-byte
pair a load where aligned, ``shipped`` the rule; columns as ``forced.arm_rows``.
"""
from __future__ import annotations

import argparse

from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

# (envs, steps, variant): walks of 2-16 tiles, one-tile rows, the few long rows' look-back
SHAPES = [(512, 1024, "plain"), (512, 4096, "plain"), (512, 8192, "plain"),
          (1024, 1024, "plain"), (4096, 2048, "plain"), (512, 4096, "trunc"),
          (4096, 128, "plain"), (4096, 512, "plain"), (32768, 32, "plain"),
          (32768, 16, "plain"), (64, 131072, "plain")]
ARMS = {"tl": 0, "word": 1, "pairs": 2, "shipped": None}
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "layout", "variant", "round", "arm",
           "config", "device_us", "device_cold_us", "max_abs_diff"]


def main(argv=None):
    from paper_repro.bench.forced import arm_rows

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--shapes", default=None, help="keep these NxT cases only")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--arms", default="tl,pairs", help="of " + ", ".join(ARMS))
    args = p.parse_args(argv)
    keep = set(args.shapes.split(",")) if args.shapes else None
    arms = {a: (lambda a=a: L.force_word_loads(ARMS[a])) for a in args.arms.split(",")}
    rows = (row for dtype in args.dtypes.split(",") for N, T, variant in SHAPES
            if keep is None or f"{N}x{T}" in keep
            for row in arm_rows(N, T, dtype, variant, args.rounds, arms))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
