"""Rows whose length (batch-major) or batch (time-major) is not a multiple of 16: each
estimator's shipped call with the kernels told the layout's alignment (``_launch.alignment``)
and without (``force_alignment(False)``), on the same inputs, both gated against the float64
reference.

    python -m paper_repro.bench.align_probe --out DIR [--quick]

Triton specialises integers on multiples of 16 only, so a 100-step row (400 bytes, 16-byte
aligned) otherwise loads one value at a time: ``bench.sass`` counts 4x the loads and none of
128 bits. Shapes of 16-multiples are the control (``align`` 0: the same kernel both ways).
"""
from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from paper_repro.bench.inputs import ALGORITHMS

COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "layout", "align", "hinted_us",
           "unhinted_us", "ratio", "gate_ok", "max_abs_err", "max_abs_err_unhinted", "commit"]
# (N, T, dtype, layout): episode lengths of 100, 200 and 1000 steps, short rows of 8 and 20,
# long rows of 4000 and 10000, time-major batches of 100, 1000 and 4100 envs, a bf16 row, and
# 16-multiples beside them
SHAPES = ((4096, 100, "fp32", "NT"), (4096, 96, "fp32", "NT"), (4096, 200, "fp32", "NT"),
          (4096, 1000, "fp32", "NT"), (1024, 1000, "fp32", "NT"), (512, 4000, "fp32", "NT"),
          (256, 10000, "fp32", "NT"), (32768, 20, "fp32", "NT"), (32768, 8, "fp32", "NT"),
          (4096, 8, "fp32", "NT"), (4096, 1000, "bf16", "NT"), (1000, 1000, "fp32", "TN"),
          (4100, 128, "fp32", "TN"), (100, 4096, "fp32", "TN"))
QUICK_SHAPES = ((4096, 100, "fp32", "NT"), (1000, 1000, "fp32", "TN"))


def measure(algorithm: str, N: int, T: int, dtype: str, layout: str, commit: str = "",
            device: str = "cuda", timer=None) -> dict:
    """One CSV row: device us with and without the alignment word, and each one's gate
    (``timer``: a call's us, by default CUDA-graph device time)."""
    import torch

    from paper_repro.bench import gate as G
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours
    from paper_repro.kernels import _launch as L
    from paper_repro.tuning import device_time_us

    timer = timer or device_time_us
    case = make_case(algorithm, N, T, "plain", dtype, layout, "float", device=device)
    prep = _ours(case)
    layout_ints = (T, 1, T, 1) if layout == "NT" else (1, N, 1, N)  # contiguous inputs
    expected = G.expected_outputs(case)
    out_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    result = {}
    for hinted in (True, False):
        with L.force_alignment(None if hinted else False):
            gate = G.compare(expected, prep.outputs(prep.call()), out_dtype)
            us = min(timer(prep.call) for _ in range(3))
        result[hinted] = gate, us
    (gate, us), (gate_off, us_off) = result[True], result[False]
    return dict(zip(COLUMNS, [algorithm, N, T, dtype, layout, L.alignment(N, T, layout_ints),
                              round(us, 3), round(us_off, 3), round(us / us_off, 3),
                              int(gate.ok and gate_off.ok), f"{gate.max_abs_err:.3g}",
                              f"{gate_off.max_abs_err:.3g}", commit]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("align_probe needs a CUDA GPU")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = os.environ.get("PAPER_REPRO_GIT_COMMIT", "")
    with open(out / "align_probe.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        for N, T, dtype, layout in QUICK_SHAPES if args.quick else SHAPES:
            for a in ALGORITHMS:
                row = measure(a, N, T, dtype, layout, commit)
                writer.writerow(row)
                f.flush()
                print(" ".join(str(v) for v in row.values()), flush=True)


if __name__ == "__main__":
    main()
