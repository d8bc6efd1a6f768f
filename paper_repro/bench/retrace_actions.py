"""How Retrace reads its per-action inputs at small shapes: the shipped rule against the loop
over actions unrolled, 64-bit words and the plain loop, beside rl-triton, in one process.

``python -m paper_repro.bench.retrace_actions [--shapes 4096x128 ...] [--out FILE]`` (CUDA
only) writes one row per shape and arm: CUDA-graph device time, fp32 batch-major, and the
largest difference from the shipped arm's outputs (the arms share the math; a race or a bad
variant shows there).
"""
from __future__ import annotations

import argparse
import contextlib

import torch

from paper_repro.bench import timing
from paper_repro.bench.inputs import make_case
from paper_repro.bench.providers import PROVIDERS
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan
from paper_repro.kernels import retrace as R

COLUMNS = ["num_envs", "seq_len", "variant", "device_us", "max_abs_diff"]
SHAPES = ["4096x128", "64x512", "512x128", "128x1024", "512x512", "32768x32", "4096x512",
          "16384x512"]
_SHIPPED = R.unrolled_actions


def _unrolled(A, config, T):
    return A if A <= R.MAX_UNROLLED_ACTIONS else 0


# arm -> (N_ACT rule, words forced: None = the rule)
ARMS = {"shipped": (_SHIPPED, None), "unrolled": (_unrolled, None), "words": (_SHIPPED, True),
        "loop_nowords": (lambda A, config, T: 0, False)}


@contextlib.contextmanager
def arm(name: str):
    """Inside the block, Retrace's launches read their actions as arm ``name`` does; no plan
    recorded under another arm serves them."""
    rule, words = ARMS[name]
    _plan.clear()
    R.unrolled_actions = rule
    try:
        with L.force_words(words):
            yield
    finally:
        R.unrolled_actions = _SHIPPED
        _plan.clear()


def rows(shapes):
    for shape in shapes:
        n, t = (int(v) for v in shape.split("x"))
        case = make_case("retrace", n, t, device="cuda")
        peer = PROVIDERS["rl-triton"].build(case)
        yield {"num_envs": n, "seq_len": t, "variant": "rl-triton",
               "device_us": f"{1e3 * timing.device_ms(peer.call).ms:.3f}", "max_abs_diff": ""}
        shipped = None
        for name in ARMS:
            with arm(name):
                prepared = PROVIDERS["ours"].build(case)
                call = prepared.call
                got = prepared.outputs(call())
                shipped = shipped or got
                diff = max(float((a - b).abs().max()) for a, b in zip(got, shipped))
                us = 1e3 * timing.device_ms(call).ms
            yield {"num_envs": n, "seq_len": t, "variant": name, "device_us": f"{us:.3f}",
                   "max_abs_diff": f"{diff:.3g}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.retrace_actions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=SHAPES)
    parser.add_argument("--out", help="CSV file (default: stdout)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    stream_csv(args.out, COLUMNS, rows(args.shapes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
