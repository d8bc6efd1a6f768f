"""A plan's repeat in C++ (``kernels/_native.py``) against the Python repeat, in one process.

``python -m paper_repro.bench.native_ab [--shapes 4096x128 ...] [--rounds 3] [--out FILE]``
(CUDA only) writes one row per shape, case, round and arm, fp32 plain variants of every op in
both layouts: ``python`` makes plans that never go native, ``native`` plans that do once the
module is loaded. Arms alternate within a round. Before any timing each case is gated: the
native arm's outputs must equal the Python arm's bit for bit (the same compiled kernel) and
its plan must have gone native (``native`` = 1).

* ``launched_us``: back-to-back calls, wall time a call (the host rate);
* ``full_call_us``: the suites' event-timed call (``timing.full_call_ms``).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time

import torch

from paper_repro.bench import timing
from paper_repro.bench.host_path import cases, us_per_call
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan

COLUMNS = ["shape", "case", "round", "arm", "native", "launched_us", "full_call_us"]
SHAPES = ["4096x128", "4096x8", "32768x8", "4096x32", "32768x32"]


def arm(native: bool) -> None:
    """Plans made from now on go native (or never); no plan is kept from before."""
    N.ENABLED = native
    _plan._PLANS.clear()


def outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def warmed(call, native: bool):
    """The arm's outputs once its plan is recorded, launched directly and (native) made native;
    and whether a plan of the case went native."""
    arm(native)
    for _ in range(4):
        result = call()
    torch.cuda.synchronize()
    went = any(p.native for plans in _plan._PLANS.values() for p in plans)
    return outputs(result), went


def gate(call) -> bool:
    python, _ = warmed(call, False)
    native, went = warmed(call, True)
    same = all(torch.equal(a, b) for a, b in zip(python, native))
    return same and went


def rows(shapes: list, rounds: int, calls: int):
    for shape in shapes:
        num_envs, seq_len = (int(n) for n in shape.split("x"))
        for label, call, _ in cases(num_envs, seq_len, "cuda"):
            if "trunc" in label:
                continue
            ok = gate(call)
            for r in range(rounds):
                for native in (r % 2 == 1, r % 2 == 0):
                    _, went = warmed(call, native)
                    launched = us_per_call(call, calls, 5, torch.cuda.synchronize)
                    full = 1e3 * timing.full_call_ms(call, n_iter=200).ms
                    yield {"shape": shape, "case": label, "round": r,
                           "arm": "native" if native else "python",
                           "native": int(went and ok), "launched_us": f"{launched:.2f}",
                           "full_call_us": f"{full:.2f}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.native_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=SHAPES, help="NUM_ENVSxSEQ_LEN")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--out", help="CSV file (default: stdout)")
    args = parser.parse_args(argv)
    if L.INTERPRETED or not torch.cuda.is_available():
        parser.error("needs a CUDA GPU and TRITON_INTERPRET unset")
    if not N.ENABLED:
        parser.error(f"the native path is {N.status()}")
    start = time.perf_counter()
    if N.module(wait=True) is None:
        parser.error(f"the native module: {N.status()}")
    print(f"native module ready in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", newline="")) if args.out else sys.stdout
        writer = csv.DictWriter(out, COLUMNS)
        writer.writeheader()
        for row in rows(args.shapes, args.rounds, args.calls):
            writer.writerow(row)
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
