"""Host time of a repeated public call with the kernel launch replaced by a no-op.

``python -m paper_repro.bench.host_path [--shape 4096x128] [--calls 2000] [--launch]``
prints, per op and case, microseconds per call of our own Python host work (the launch is
stubbed, so the compiled kernel's launcher and the device are not timed): without launch plans
(every call checks, lays out and picks tiles), with them (repeats reuse the first call's plan),
and a floor: a call that only looks a plan up by tensor metadata, allocates the outputs and
packs the pointers. ``--launch`` (CUDA only) adds the wall time per call with the real launch,
without and with plans. Runs on any machine (CPU tensors when no GPU is present;
TRITON_INTERPRET must be unset there).
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch

import paper_repro as P
from paper_repro import pufferlib_compat
from paper_repro.bench.inputs import ALGORITHMS, TRUNCATION_ALGORITHMS, make_case
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan, retrace


@contextlib.contextmanager
def stubbed_launch(device: str):
    """Every op takes its Triton path and launches nothing (plans made inside never go
    native: the native repeat launches through the driver, past these stubs)."""
    saved = D.run, D.run_bound, D.launch_pointers, L.use_triton, retrace._check_values
    saved_native, N.ENABLED = N.ENABLED, False
    D.run = D.run_bound = lambda *args, **kwargs: None
    D.launch_pointers = lambda *args: True  # a plan's repeat: launched
    L.use_triton = lambda x: True
    if device == "cpu":  # Retrace reads values only for CPU tensors: not the GPU's host path
        retrace._check_values = lambda *args: None
    try:
        yield
    finally:
        D.run, D.run_bound, D.launch_pointers, L.use_triton, retrace._check_values = saved
        N.ENABLED = saved_native


class _Forgetful(dict):
    """A launch cache that keeps nothing."""

    def __setitem__(self, key, value):
        pass


@contextlib.contextmanager
def without_plans():
    """Every call takes the full host path (no plan is looked up or recorded; PufferLib's
    advantage keeps no repeat)."""
    saved = _plan.lookup, _plan.repeat, pufferlib_compat._REPEATS
    _plan.lookup, _plan.repeat = (lambda *args: (None, None)), (lambda *args: None)
    pufferlib_compat._REPEATS = _Forgetful()
    try:
        yield
    finally:
        _plan.lookup, _plan.repeat, pufferlib_compat._REPEATS = saved


def us_per_call(call, calls: int, trials: int, sync=lambda: None) -> float:
    """The fastest of ``trials`` loops of ``calls`` calls, in microseconds per call."""
    call()
    sync()
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def floor_call(tensors, n_outputs: int):
    """A lookup keyed by every tensor's metadata, the one or two outputs, the pointers packed."""
    plans = {}
    like = tensors[0]

    def one():
        plans.get(tuple([(t.shape, t.stride(), t.dtype, t.device) for t in tensors]))
        return (*tensors, torch.empty_like(like))

    def two():
        plans.get(tuple([(t.shape, t.stride(), t.dtype, t.device) for t in tensors]))
        return (*tensors, torch.empty_like(like), torch.empty_like(like))
    return one if n_outputs == 1 else two


def cases(num_envs: int, seq_len: int, device: str):
    """(label, call, tensors) for every op: plain and truncated variants, both layouts; the
    bare engine, PufferLib's advantage (its repeat on addresses counted as its plan) and masked
    GAE (its fused launch's plan)."""
    for algorithm in ALGORITHMS:
        variants = ("plain", "trunc") if algorithm in TRUNCATION_ALGORITHMS else ("plain",)
        for variant in variants:
            for layout in ("NT", "TN"):
                case = make_case(algorithm, num_envs, seq_len, variant, layout=layout,
                                 device=device)
                fn, kwargs = getattr(P, case.public_name), case.call_kwargs()
                tensors = [a for a in (*case.args, *kwargs.values()) if torch.is_tensor(a)]
                yield (f"{algorithm} {variant} {layout}",
                       lambda fn=fn, c=case, k=kwargs: fn(*c.args, **k), tensors)
    alpha = torch.randn(num_envs, seq_len, device=device)
    beta = torch.rand(num_envs, seq_len, device=device)
    yield "affine_scan NT", lambda: P.affine_scan(alpha, beta), [alpha, beta]
    puff = [torch.randn(num_envs, seq_len, device=device) for _ in range(5)]
    puff[2] = puff[2] > 1.5  # terminals
    yield ("puff_advantage NT",
           lambda: pufferlib_compat.compute_puff_advantage(*puff, 0.99, 0.95, 1.0, 1.0), puff)
    masked = [torch.randn(num_envs, seq_len, device=device) for _ in range(2)]
    masked.append(torch.rand(num_envs, seq_len, device=device) < 0.7)
    yield ("masked_gae NT", lambda: P.compute_masked_gae(*masked, 1.0, 0.95), masked)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.host_path",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096x128", help="NUM_ENVSxSEQ_LEN")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--launch", action="store_true",
                        help="also time the calls with their real launch (CUDA)")
    args = parser.parse_args(argv)
    if L.INTERPRETED:
        parser.error("unset TRITON_INTERPRET: the interpreter is not the host path")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.launch and device != "cuda":
        parser.error("--launch needs a CUDA GPU")
    num_envs, seq_len = (int(n) for n in args.shape.lower().split("x"))
    print(f"host us/call, {num_envs}x{seq_len} fp32 on {device}, launch stubbed, "
          f"best of {args.trials} x {args.calls} calls")
    launched = f" {'launched':>9s} {'+ plan':>8s}" if args.launch else ""
    print(f"{'case':28s} {'no plan':>8s} {'plan':>8s} {'floor':>8s}{launched}")
    for label, call, tensors in cases(num_envs, seq_len, device):
        with stubbed_launch(device):
            with without_plans():
                full_us = us_per_call(call, args.calls, args.trials)
            plan_us = us_per_call(call, args.calls, args.trials)
            result = call()
            n_outputs = len(result) if isinstance(result, tuple) else 1
            floor_us = us_per_call(floor_call(tensors, n_outputs), args.calls, args.trials)
        row = f"{label:28s} {full_us:8.2f} {plan_us:8.2f} {floor_us:8.2f}"
        if args.launch:
            sync = torch.cuda.synchronize
            with without_plans():
                full_us = us_per_call(call, args.calls, args.trials, sync)
            row += f" {full_us:9.2f} {us_per_call(call, args.calls, args.trials, sync):8.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
