"""The backward pass of the seven estimators: their closed-form gradients (``kernels/adjoints.py``)
against the general rule (the chain through ``coefficients.py``), in one process.

``python -m paper_repro.bench.backward [--out FILE] [--shapes 4096x128,...] [--dtypes fp32,bf16]
[--layouts NT,TN] [--algorithms gae,...] [--rounds 2]``

Per estimator, shape, dtype, layout and arm: the kernels one backward launches and their
device time (profiler), the wall time of a synchronised backward, its minimal traffic (the
upstream gradient and flags read, each input's gradient written) and that traffic's floor at
the copy bandwidth, and the largest difference from the other arm's gradients. The gradient is
taken w.r.t. every floating input but the flags. Runs on the CPU too (wall time only).
"""
from __future__ import annotations

import argparse
import contextlib
import inspect

import torch

from paper_repro.bench.results import stream_csv
from paper_repro.bench.roofline import floor_ms

ALGORITHMS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
              "eligibility_traces", "prefix_sum")
SHAPES = [(4096, 128), (16384, 64), (512, 4096), (64, 131072), (32768, 32)]
NOT_DIFFERENTIATED = ("terminated", "truncated", "dones", "actions")
ARMS = ("closed", "general")
WALL_SECONDS = 0.5  # timed per arm and case
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "layout", "round", "arm", "kernels",
           "device_us", "wall_us", "min_bytes", "floor_us", "max_abs_diff"]


@contextlib.contextmanager
def arm(name: str):
    """The closed-form rule (``closed``) or the general one (``general``) for every op."""
    from paper_repro.kernels import adjoints

    saved, adjoints.ENABLED = adjoints.ENABLED, name == "closed"
    try:
        yield
    finally:
        adjoints.ENABLED = saved


def backward_call(case):
    """``(call, leaves, read)``: ``call()`` returns the gradients of one backward of ``case``'s
    outputs (fixed random upstream gradients, the graph kept) w.r.t. ``leaves``, its floating
    inputs but the flags; ``read``: the upstream gradients and the flags."""
    import paper_repro as P

    fn = getattr(P, case.public_name)
    names = list(inspect.signature(fn).parameters)
    args, leaves, flags = [], [], []
    for name, a in zip(names, case.args):
        if torch.is_tensor(a) and a.is_floating_point() and \
                not any(f in name for f in NOT_DIFFERENTIATED):
            a = a.detach().clone().requires_grad_()
            leaves.append(a)
        elif torch.is_tensor(a):
            flags.append(a)
        args.append(a)
    outs = fn(*args, **case.call_kwargs())
    outs = outs if isinstance(outs, tuple) else (outs,)
    upstream = [torch.randn_like(o) for o in outs]
    return (lambda: torch.autograd.grad(outs, leaves, upstream, retain_graph=True)), leaves, \
        [*upstream, *flags]


def min_bytes(leaves, read) -> int:
    return sum(x.numel() * x.element_size() for x in (*leaves, *read))


def _timed(call, device: str):
    from paper_repro.bench.timing import profile_kernels, wall_ms

    wall = 1e3 * wall_ms(call, device, min_seconds=WALL_SECONDS).ms
    if device != "cuda":
        return None, None, wall
    timing = profile_kernels(call)
    return timing.launches, 1e3 * timing.ms, wall


def rows(shapes, dtypes, layouts, rounds, device, algorithms=ALGORITHMS):
    from paper_repro.bench.inputs import make_case

    for algorithm in algorithms:
        for N, T in shapes:
            for dtype in dtypes:
                for layout in layouts:
                    case = make_case(algorithm, N, T, "plain", dtype, layout, device=device)
                    call, leaves, read = backward_call(case)
                    n_bytes = min_bytes(leaves, read)
                    grads = {}
                    for name in ARMS:
                        with arm(name):
                            grads[name] = call()
                    diff = max(float((a.double() - b.double()).abs().max())
                               for a, b in zip(*grads.values()))
                    for r in range(rounds):
                        for name in ARMS if r % 2 == 0 else ARMS[::-1]:
                            with arm(name):
                                kernels, device_us, wall_us = _timed(call, device)
                            yield {"algorithm": algorithm, "num_envs": N, "seq_len": T,
                                   "dtype": dtype, "layout": layout, "round": r, "arm": name,
                                   "kernels": kernels, "device_us": device_us,
                                   "wall_us": wall_us, "min_bytes": n_bytes,
                                   "floor_us": 1e3 * floor_ms(n_bytes), "max_abs_diff": diff}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=",".join(f"{n}x{t}" for n, t in SHAPES))
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--layouts", default="NT,TN")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS))
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    stream_csv(args.out, COLUMNS, rows(shapes, args.dtypes.split(","), args.layouts.split(","),
                                       args.rounds, device, args.algorithms.split(",")))


if __name__ == "__main__":
    main()
