"""Device times of the shipped tiles at a few shapes, one CSV line each: run it under two
source trees (``PYTHONPATH``) to compare kernel versions on the same GPU, alternating.

    python -m paper_repro.bench.shipped_times LABEL [split] >> times.csv

Lines: ``label, algorithm, num_envs, seq_len, layout, device_us`` (fp32, min of 3 CUDA-graph
timings). ``split``: the shapes whose launches split time (two passes or look-back) instead.
``data/h200/carry_ab.csv`` and ``agg_ab.csv`` came from this.
"""
from __future__ import annotations

import sys

CASES = [("eligibility_traces", 4096, 128, "TN"), ("prefix_sum", 4096, 128, "TN"),
         ("gae", 4096, 128, "TN"), ("eligibility_traces", 4096, 128, "NT"),
         ("gae", 4096, 128, "NT"), ("prefix_sum", 512, 4096, "NT"), ("gae", 512, 4096, "NT"),
         ("discounted_returns", 512, 4096, "TN"), ("gae", 32768, 32, "TN"),
         ("gae", 32768, 32, "NT"), ("lambda_returns", 512, 4096, "NT"),
         ("retrace", 512, 4096, "NT"), ("retrace", 4096, 512, "NT"), ("retrace", 32768, 32, "NT"),
         ("retrace", 4096, 128, "NT"), ("retrace", 64, 512, "NT"), ("vtrace", 4096, 128, "NT")]

SPLIT_CASES = [("gae", 64, 131072, "NT"), ("discounted_returns", 64, 131072, "NT"),
               ("vtrace", 64, 131072, "NT"), ("gae", 16, 524288, "NT"),
               ("discounted_returns", 4, 1048576, "NT"), ("gae", 1, 4194304, "NT"),
               ("gae", 512, 4096, "TN"), ("discounted_returns", 512, 4096, "TN"),
               ("gae", 64, 131072, "TN"), ("vtrace", 512, 4096, "TN"),
               ("retrace", 64, 131072, "NT")]


def main(argv=None):
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours
    from paper_repro.tuning import device_time_us

    args = argv or sys.argv[1:] or ["run"]
    label, cases = args[0], SPLIT_CASES if args[1:] == ["split"] else CASES
    for a, n, t, layout in cases:
        prep = _ours(make_case(a, n, t, "plain", "fp32", layout, "float", device="cuda"))
        prep.call()
        us = min(device_time_us(prep.call) for _ in range(3))
        print(f"{label},{a},{n},{t},{layout},{us:.3f}", flush=True)


if __name__ == "__main__":
    main()
