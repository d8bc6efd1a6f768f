"""16-bit time-major tiles in interleaved runs (shipped, ``_tiles._runs16``) against the same
tiles latest step first, as they were before (a 16-byte load holds 8 envs here).

``python -m paper_repro.bench.tn16_ab [--out FILE] [--shapes 4096x128,...]
[--algorithms gae,...] [--inputs bf16,bool_flags] [--rounds 2]``

(CUDA) Per estimator, shape and input set, time-major: ``bf16`` (every input bf16) or
``bool_flags`` (fp32 values, bool flags: the 16-bit tile by ``_launch.narrow_loads``, latest
step first). The arms in turn each round, the order reversed every other round: ``shipped``
and the other of ``interleaved`` (its tile with ``flip = -R``, R = the steps a thread holds)
and ``latest_first`` (``flip = 1``), forced through ``L.force_config``; device time by
CUDA-graph replay, minimum of two, and the largest difference from the shipped call's output.
Tiles whose threads hold one step, and the look-back's, are skipped.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from paper_repro.bench.mixed_ab import long_rows
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

SHAPES = "4096x128,32768x32,2048x1024,512x4096,64x131072"
ALGORITHMS = "gae,discounted_returns,eligibility_traces,vtrace"
INPUTS = "bf16,bool_flags"
COLUMNS = ["algorithm", "num_envs", "seq_len", "layout", "inputs", "round", "arm", "config",
           "device_us", "max_abs_diff"]


def interleaved_runs(config: L.ScanConfig) -> int:
    """R, the steps a thread of a 16-bit time-major tile holds (8 envs a 16-byte load)."""
    return config.BLOCK_T * config.BLOCK_B // (256 * config.num_warps)


def _rows(algorithm, N, T, inputs, rounds):
    from paper_repro.bench.forced import forced_time, prepared

    dtype, flags = ("bf16", "float") if inputs == "bf16" else ("fp32", "bool")
    case, prep, want = prepared(algorithm, N, T, dtype, "TN", flags)
    shipped = L.config_for(N, T, (1, N), case.args[0].device, wide=algorithm == "vtrace",
                           itemsize=4 if flags == "bool" else 2, long_rows=long_rows(algorithm),
                           inputs=[x for x in case.args if torch.is_tensor(x)])
    R = interleaved_runs(shipped)
    if R < 2 or shipped.BLOCK_T % R or shipped.single_pass:
        return
    other = ("interleaved", replace(shipped, flip=-R)) if shipped.flip == 1 else \
        ("latest_first", replace(shipped, flip=1))
    arms = {"shipped": None, other[0]: other[1]}
    for r in range(rounds):
        for arm in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            diff, us = forced_time(prep, want, arms[arm], repeats=2)
            shown = arms[arm] or shipped
            yield {"algorithm": algorithm, "num_envs": N, "seq_len": T, "layout": "TN",
                   "inputs": inputs, "round": r, "arm": arm,
                   "config": f"{shown.BLOCK_B}x{shown.BLOCK_T}w{shown.num_warps}/{int(shown.flip)}",
                   "device_us": round(us, 3), "max_abs_diff": f"{diff:.3g}"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--algorithms", default=ALGORITHMS)
    p.add_argument("--inputs", default=INPUTS)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = (row for N, T in shapes for a in args.algorithms.split(",")
            for inputs in args.inputs.split(",") for row in _rows(a, N, T, inputs, args.rounds))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
