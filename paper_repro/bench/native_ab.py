"""A plan's repeat in C++ (``kernels/_native.py``) against the Python repeat, in one process.

``python -m paper_repro.bench.native_ab [--shapes 4096x128 ...] [--rounds 3] [--out FILE]``
(CUDA only) writes one row per shape, case, round and arm, fp32 plain variants of every op in
both layouts. Arms: ``python`` makes plans that never go native; ``native`` plans that do once
the module is loaded, found by the Python lookup; ``site`` native plans found and launched by
their op's site in one C++ call (the default path). Arms rotate within a round. Before any
timing each case is gated: every arm's outputs must equal the Python arm's bit for bit (the
same compiled kernel), and the native arms' plans must have gone native (``native`` = 1).

* ``launched_us``: back-to-back calls, wall time a call (the host rate);
* ``full_call_us``: the suites' event-timed call (``timing.full_call_ms``).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from paper_repro.bench import timing
from paper_repro.bench.host_path import cases, us_per_call
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan

COLUMNS = ["shape", "case", "round", "arm", "native", "launched_us", "full_call_us"]
ARMS = ("python", "native", "site")
_REPEAT = _plan.repeat
SHAPES = ["4096x128", "4096x8", "32768x8", "4096x32", "32768x32"]


def arm(name: str) -> None:
    """Plans made from now on go native (or never) and are served by sites (or not); no plan
    is kept from before."""
    N.ENABLED = name != "python"
    _plan.repeat = _REPEAT if name == "site" else (lambda *args: None)
    _plan.clear()


def outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def warmed(call, name: str):
    """The arm's outputs once its plan is recorded, launched directly and (native arms) made
    native; and whether a plan of the case went native (``site``: joined a site)."""
    arm(name)
    for _ in range(4):
        result = call()
    torch.cuda.synchronize()
    went = any(p.native for plans in _plan._PLANS.values() for p in plans)
    return outputs(result), went and (name != "site" or bool(_plan._SITES))


def gate(call) -> bool:
    python, _ = warmed(call, "python")
    ok = True
    for name in ARMS[1:]:
        got, went = warmed(call, name)
        ok = ok and went and all(torch.equal(a, b) for a, b in zip(python, got))
    return ok


def rows(shapes: list, rounds: int, calls: int):
    for shape in shapes:
        num_envs, seq_len = (int(n) for n in shape.split("x"))
        for label, call, _ in cases(num_envs, seq_len, "cuda"):
            if "trunc" in label:
                continue
            ok = gate(call)
            for r in range(rounds):
                for name in ARMS[r % 3:] + ARMS[:r % 3]:
                    _, went = warmed(call, name)
                    launched = us_per_call(call, calls, 5, torch.cuda.synchronize)
                    full = 1e3 * timing.full_call_ms(call, n_iter=200).ms
                    yield {"shape": shape, "case": label, "round": r, "arm": name,
                           "native": int(went and ok), "launched_us": f"{launched:.2f}",
                           "full_call_us": f"{full:.2f}"}
    arm("site")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.native_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=SHAPES, help="NUM_ENVSxSEQ_LEN")
    parser.add_argument("--rounds", type=int, default=3)
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
    stream_csv(args.out, COLUMNS, rows(args.shapes, args.rounds, args.calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
