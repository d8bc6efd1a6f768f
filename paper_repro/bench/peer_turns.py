"""Ours and one peer's device time at chosen cells, timed in turn in one process.

``python -m paper_repro.bench.peer_turns [--peer rl-triton] [--cells gae:512x128 ...]
[--rounds 3] [--out FILE]`` (CUDA only) writes one row per cell, round and implementation:
CUDA-graph device time (``timing.device_ms``), fp32 plain batch-major inputs with float flags.
Rounds alternate which implementation goes first, so neither always meets the GPU just after
the other's work. Before any timing both outputs pass the float64 gate of the suites.

The default cells are the suites' small ones where the peer's device time was at or below ours
(kernels of 1.6-3.5 us).
"""
from __future__ import annotations

import argparse

import torch

from paper_repro.bench import gate, timing
from paper_repro.bench.inputs import make_case
from paper_repro.bench.providers import PROVIDERS
from paper_repro.bench.results import stream_csv

COLUMNS = ["algorithm", "num_envs", "seq_len", "round", "implementation", "device_us"]
CELLS = ["eligibility_traces:64x512", "retrace:64x512", "retrace:512x128",
         "discounted_returns:512x128", "prefix_sum:512x512", "prefix_sum:64x512",
         "eligibility_traces:512x512", "prefix_sum:128x1024", "gae:512x128",
         "eligibility_traces:512x128", "gae:512x512", "retrace:4096x128"]


def parse_cell(text: str) -> tuple[str, int, int]:
    """``"gae:512x128"`` -> ``("gae", 512, 128)``."""
    try:
        algorithm, shape = text.split(":")
        n, t = (int(v) for v in shape.split("x"))
    except ValueError:
        raise ValueError(f"cell must read ALGORITHM:NxT, got {text!r}") from None
    return algorithm, n, t


def gated_call(name: str, case, expected):
    """The provider's ready call on ``case``, after its outputs pass the float64 gate."""
    prepared = PROVIDERS[name].build(case)
    outputs = prepared.outputs(prepared.call())
    if prepared.compare_case is not None:  # a peer computing another problem (PufferLib)
        expected = gate.expected_outputs(prepared.compare_case)
        outputs = tuple(o[:, :prepared.compare_cols] for o in outputs)
    result = gate.compare(expected, outputs, tolerance=prepared.tolerance)
    if not result.ok:
        raise RuntimeError(f"{name} failed the gate at {case}: {result.message}")
    return prepared.call


def rows(cells, peer: str, rounds: int):
    for algorithm, n, t in cells:
        case = make_case(algorithm, n, t, device="cuda")
        expected = gate.expected_outputs(case)
        calls = {name: gated_call(name, case, expected) for name in ("ours", peer)}
        for r in range(rounds):
            for name in (("ours", peer) if r % 2 == 0 else (peer, "ours")):
                us = 1e3 * timing.device_ms(calls[name]).ms
                yield {"algorithm": algorithm, "num_envs": n, "seq_len": t, "round": r,
                       "implementation": name, "device_us": f"{us:.3f}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.peer_turns",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--peer", default="rl-triton", choices=sorted(set(PROVIDERS) - {"ours"}))
    parser.add_argument("--cells", nargs="+", default=CELLS, help="ALGORITHM:NxT each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="CSV file (default: stdout)")
    args = parser.parse_args(argv)
    try:
        cells = [parse_cell(c) for c in args.cells]
    except ValueError as err:
        parser.error(str(err))
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    stream_csv(args.out, COLUMNS, rows(cells, args.peer, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
