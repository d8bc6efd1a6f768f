"""Retrace's batch-major walks with and without L2 prefetch hints, in one process.

``python -m paper_repro.bench.l2_prefetch_ab [--out FILE] [--rounds R] [--shapes 512x4096,...]
[--algorithm NAME] [--arms hints,none,shipped]``
(CUDA) times each case's shipped tile with PREFETCH on (the next tile in the walk requested
into L2 while this one is scanned; ``retrace.l2_hints`` ships it for 16-bit rows) and off,
the arms in turn each round: device time (CUDA-graph replay; inputs partly in L2 across
repeats) and ``device_cold`` (every call's inputs read from DRAM), with each arm's largest
difference from the shipped call's output (``forced.forced_time``).
"""
from __future__ import annotations

import argparse

from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

# (envs, steps, dtype, variant): rows a program walks, two to sixteen tiles; bf16, truncations
# (fp32 rows of 2048 steps, 512 and 4096 of them, and 512 fp32 rows of 4096 steps, plain and
# truncated, were cases too until they became one tile)
CASES = [(512, 1024, "fp32", "plain"), (512, 8192, "fp32", "plain"),
         (1024, 1024, "fp32", "plain"),
         (512, 4096, "bf16", "plain"), (512, 8192, "bf16", "plain"),
         (512, 8192, "fp32", "trunc"), (512, 1024, "bf16", "plain"),
         (512, 2048, "bf16", "plain"), (1024, 1024, "bf16", "plain"),
         (4096, 2048, "bf16", "plain"), (512, 4096, "bf16", "trunc")]
# The other estimators' one-row walks of 1024-step tiles (4-8 a row), fp32 and bf16: their
# shipped call (``--arms shipped``), timed under a kernel's probe knobs (bf16 512 x 4096 was
# a case until its rows became one tile)
WALKS = [(512, 4096, "fp32", "plain"), (512, 8192, "fp32", "plain"),
         (1024, 4096, "fp32", "plain"), (2048, 4096, "fp32", "plain"),
         (1024, 8192, "bf16", "plain"), (512, 8192, "bf16", "plain")]
ARMS = {"hints": True, "none": False, "shipped": None}
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "variant", "round", "arm",
           "config", "device_us", "device_cold_us", "max_abs_diff"]


def _case_rows(N, T, dtype, variant, rounds, algorithm="retrace", arms=("hints", "none")):
    from paper_repro.bench.forced import arm_rows

    for row in arm_rows(N, T, dtype, variant, rounds,
                        {arm: (lambda a=arm: L.force_prefetch(ARMS[a])) for arm in arms},
                        algorithm):
        del row["layout"]
        yield row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--shapes", default=None, help="keep these NxT cases only")
    p.add_argument("--algorithm", default="retrace")
    p.add_argument("--arms", default="hints,none",
                   help="of hints (PREFETCH forced on), none (off), shipped (the rule)")
    args = p.parse_args(argv)
    keep = set(args.shapes.split(",")) if args.shapes else None
    cases = [c for c in (CASES if args.algorithm == "retrace" else WALKS)
             if keep is None or f"{c[0]}x{c[1]}" in keep]
    arms = args.arms.split(",")
    rows = (row for c in cases for row in _case_rows(*c, args.rounds, args.algorithm, arms))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
