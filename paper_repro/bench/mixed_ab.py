"""Time-major calls fed 16-bit values and fp32 rewards (fp32 outputs): the shipped tile, laid
out for the 16-bit loads (``_launch.half_loads``), against the fp32 outputs' tile.

``python -m paper_repro.bench.mixed_ab [--out FILE] [--shapes 4096x128,...]
[--algorithms gae,...] [--rounds 2]``

(CUDA) Per estimator and shape, time-major: values, next values, log-probabilities and
eligibility traces' gradients in bf16, rewards (and the traces' seed) in fp32. The arms in turn
each round, the order reversed every other round: ``shipped``, ``fp32_tile`` (the tile the fp32
output alone chooses, forced through ``L.force_config``), ``all_fp32`` and ``all_bf16`` (every
input and the output in one dtype, for scale); device time by CUDA-graph replay, minimum of
two, and the largest difference from the shipped call's output (all_bf16: its own rounding).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
from dataclasses import replace

import torch

from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

SHAPES = "4096x128,32768x32,2048x1024,512x4096,64x131072"
ALGORITHMS = "gae,lambda_returns,vtrace,eligibility_traces"
COLUMNS = ["algorithm", "num_envs", "seq_len", "layout", "round", "arm", "config", "device_us",
           "max_abs_diff"]
HALF = {"values", "next_values", "log_pi_target", "log_pi_behavior", "gradients"}


def mixed_case(case):
    """``case`` with its ``HALF`` arguments in bf16 (and an fp32 seed for eligibility traces,
    so that the output stays fp32)."""
    from paper_repro.bench.providers import MODULES

    fn = getattr(importlib.import_module(MODULES.get(case.algorithm, "paper_repro")),
                 case.public_name)
    names = list(inspect.signature(fn).parameters)
    args = tuple(x.to(torch.bfloat16) if names[i] in HALF else x for i, x in enumerate(case.args))
    kwargs = dict(case.kwargs)
    if "seed_values" in names:
        kwargs["seed_values"] = torch.zeros(case.num_envs, device=case.args[0].device)
    return replace(case, args=args, kwargs=kwargs)


def long_rows(algorithm: str):
    """The estimator's tiles for rows too few to fill the GPU, as its call passes them."""
    from paper_repro.kernels import gae, lambda_returns, vtrace

    module = {"gae": gae, "vtrace": vtrace, "lambda_returns": lambda_returns}.get(algorithm)
    return module.LONG_ROWS if module else L.LongRows()


def _rows(algorithm, N, T, rounds):
    from paper_repro.bench.forced import forced_time
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours

    case = make_case(algorithm, N, T, "plain", "fp32", "TN", "float", device="cuda")
    mixed = mixed_case(case)
    prep, fp32 = _ours(mixed), _ours(case)
    bf16 = _ours(make_case(algorithm, N, T, "plain", "bf16", "TN", "float", device="cuda"))
    want = [y.double() for y in prep.outputs(prep.call())]

    def tile(itemsize, inputs=()):
        return L.config_for(N, T, (1, N), case.args[0].device, wide=algorithm == "vtrace",
                            itemsize=itemsize, long_rows=long_rows(algorithm), inputs=inputs)

    config = tile(4)
    arms = {"shipped": (prep, None, tile(4, [x for x in mixed.args if torch.is_tensor(x)])),
            "fp32_tile": (prep, config, config), "all_fp32": (fp32, None, config),
            "all_bf16": (bf16, None, tile(2))}
    for r in range(rounds):
        for arm in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            p, forced, shown = arms[arm]
            diff, us = forced_time(p, want, forced, repeats=2)
            yield {"algorithm": algorithm, "num_envs": N, "seq_len": T, "layout": "TN",
                   "round": r, "arm": arm,
                   "config": f"{shown.BLOCK_B}x{shown.BLOCK_T}w{shown.num_warps}/{shown.flip}",
                   "device_us": round(us, 3), "max_abs_diff": f"{diff:.3g}"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--algorithms", default=ALGORITHMS)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = (row for N, T in shapes for a in args.algorithms.split(",")
            for row in _rows(a, N, T, args.rounds))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
