"""Where a native site's repeat spends its host time, part by part, on one shape.

``python -m paper_repro.bench.site_parts [--shape 4096x128] [--out FILE]`` (CUDA only) writes
one row per case (fp32 plain variants, both layouts) and part, in microseconds a call, each
the fastest of ``--trials`` loops of ``--calls`` back-to-back calls (synchronised at the end
where they launch):

* ``call``: the public call, served by its op's site (frames, ``repeat``, ``serve``);
* ``repeat``: ``_plan.repeat`` on the call's arguments (its checks and ``serve``);
* ``serve``: the site's C++ call alone: find, checks, device and stream, outputs, launch;
* ``find``: the site's lookup alone (no checks of hooks, device or stream, no launch);
* ``prepare``: the native plan's outputs and parameter block, no launch (``packed``);
* ``device_stream``: torch's current device and raw stream, as ``serve`` asks them.

``serve - find - prepare - device_stream`` is about the driver's launch and the hook check.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import sys

import torch

from paper_repro.bench.host_path import cases, us_per_call
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan

COLUMNS = ["shape", "case", "part", "us"]


def served_call(call):
    """``(op, args, scalars)`` of the call's ``repeat`` once its site serves it, or None."""
    seen, real = [], _plan.repeat

    def spy(*args):
        out = real(*args)
        seen.append((args, out is not None))
        return out
    for _ in range(4):
        call()
    _plan.repeat = spy
    try:
        call()
    finally:
        _plan.repeat = real
    torch.cuda.synchronize()
    if len(seen) != 1 or not seen[0][1]:
        return None
    return seen[0][0][:3]


def parts(call, calls: int, trials: int) -> dict | None:
    """Every part of one case, microseconds a call (None: no site served it)."""
    _plan.clear()
    served = served_call(call)
    if served is None:
        return None
    op, args, scalars = served
    native, site = N.module(), _plan._SITES[op]
    plan = native.lookup(site.args[0], args, scalars)
    sync = torch.cuda.synchronize

    def device_stream():
        return D._raw_stream(D.current_device())
    return {"call": us_per_call(call, calls, trials, sync),
            "repeat": us_per_call(lambda: _plan.repeat(op, args, scalars), calls, trials, sync),
            "serve": us_per_call(lambda: site(args, scalars), calls, trials, sync),
            "find": us_per_call(lambda: native.lookup(site.args[0], args, scalars), calls,
                                trials),
            "prepare": us_per_call(lambda: native.packed(plan.native[1], args), calls, trials),
            "device_stream": us_per_call(device_stream, calls, trials)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.site_parts",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096x128", help="NUM_ENVSxSEQ_LEN")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", help="CSV file (default: stdout)")
    args = parser.parse_args(argv)
    if L.INTERPRETED or not torch.cuda.is_available() or not N.ENABLED:
        parser.error(f"needs a CUDA GPU, TRITON_INTERPRET unset, native plans ({N.status()})")
    if N.module(wait=True) is None:
        parser.error(f"the native module: {N.status()}")
    num_envs, seq_len = (int(n) for n in args.shape.split("x"))
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", newline="")) if args.out else sys.stdout
        writer = csv.DictWriter(out, COLUMNS)
        writer.writeheader()
        for label, call, _ in cases(num_envs, seq_len, "cuda"):
            if "trunc" in label:
                continue
            found = parts(call, args.calls, args.trials)
            if found is None:
                print(f"{label}: no site served it", file=sys.stderr)
                continue
            for part, us in found.items():
                writer.writerow({"shape": args.shape, "case": label, "part": part,
                                 "us": f"{us:.3f}"})
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
