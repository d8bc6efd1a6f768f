"""PufferLib's advantage, full calls in turn: PufferLib's own CUDA op, ours served by its native
site (the default), ours on the Python repeat (the site hidden), in one process.

``python -m paper_repro.bench.puff_site_ab [--out FILE]`` (CUDA, PufferLib's sources at hand)
writes one row per shape, round and arm: ``full_call_us`` the suites' event-timed call,
``back_to_back_us`` calls in one event pair (the host rate where it exceeds the kernel's), and
the largest difference of each of our arms from PufferLib's advantages.
"""
from __future__ import annotations

import argparse
import sys
import types

import torch

import paper_repro.pufferlib_compat as compat
from paper_repro.baselines import external
from paper_repro.bench import timing
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan

SHAPES = [(n, t) for t in (8, 16, 32, 64) for n in (4096, 32768)] + [(128, 128), (2048, 512)]
SCALARS = (0.99, 0.95, 1.0, 1.0)
COLUMNS = ["round", "num_envs", "seq_len", "arm", "full_call_us", "back_to_back_us",
           "max_abs_err", "site_enlisted"]


def arms(num_envs: int, seq_len: int) -> tuple[dict, dict]:
    """``({arm: call}, {arm: advantages buffer})`` on one set of PufferLib's buffers."""
    g = torch.Generator(device="cuda").manual_seed(num_envs + seq_len)
    values, rewards = (torch.randn(num_envs, seq_len, device="cuda", generator=g)
                       for _ in range(2))
    terminals = (torch.rand(num_envs, seq_len, device="cuda", generator=g) < 0.05).float()
    ratio = torch.rand(num_envs, seq_len, device="cuda", generator=g) + 0.5
    inputs = values, rewards, terminals, ratio
    out = {k: torch.zeros(num_envs, seq_len, device="cuda") for k in ("pufferlib", "site",
                                                                       "python")}
    op = external._pufferlib_op()
    hidden = types.SimpleNamespace(repeat=lambda *a: None, enlist=_plan.enlist)

    def python():
        compat._plan = hidden
        try:
            compat.compute_puff_advantage(*inputs, out["python"], *SCALARS)
        finally:
            compat._plan = _plan
    return {"pufferlib": lambda: op(*inputs, out["pufferlib"], *SCALARS),
            "site": lambda: compat.compute_puff_advantage(*inputs, out["site"], *SCALARS),
            "python": python}, out


def measure(shapes, rounds: int):
    N.module(wait=True)
    print("native:", N.status(), file=sys.stderr)
    for num_envs, seq_len in shapes:
        calls, out = arms(num_envs, seq_len)
        for call in calls.values():
            for _ in range(5):
                call()
        torch.cuda.synchronize()
        err = max((out[k][:, :-1] - out["pufferlib"][:, :-1]).abs().max().item()
                  for k in ("site", "python"))
        enlisted = compat.OP in _plan._SITES
        for rnd in range(rounds):
            full = timing.full_call_interleaved(calls, n_iter=100, trials=5, trial_seconds=0.2)
            for arm, call in calls.items():
                amortized = timing.amortized_ms(call, reps=200, trials=5, trial_seconds=0.2)
                yield dict(round=rnd, num_envs=num_envs, seq_len=seq_len, arm=arm,
                           full_call_us=round(full[arm].ms * 1e3, 2),
                           back_to_back_us=round(amortized.ms * 1e3, 2), max_abs_err=err,
                           site_enlisted=enlisted)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.puff_site_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="puff_site_ab.csv")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 1
    stream_csv(args.out, COLUMNS, measure(SHAPES, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
