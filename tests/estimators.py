"""The seven estimators as uniform test cases: random inputs (PAPER.md 4.2), a call through any
module with the public names (``paper_repro`` or ``reference``), and layout transforms."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

NUM_ACTIONS = 4


def make_inputs(N, T, *, dtype=torch.float32, flag_dtype=torch.float32, device="cpu", seed=0,
                truncations=True):
    """Every tensor any estimator reads, ``[N, T]`` (``[N, T, A]`` for action tensors)."""
    g = torch.Generator().manual_seed(seed)

    def randn(*s):
        return torch.randn(*s, generator=g)

    def rand(*s):
        return torch.rand(*s, generator=g)

    term = rand(N, T) < 0.05
    trunc = (rand(N, T) < 0.05) & ~term if truncations else torch.zeros(N, T, dtype=torch.bool)
    boot = rand(N, T) * trunc
    boot[:, -1] = rand(N)
    d = dict(
        r=randn(N, T), v=randn(N, T), n=randn(N, T), lpt=-rand(N, T), lpb=-rand(N, T),
        boot=boot, pi=torch.softmax(randn(N, T, NUM_ACTIONS), -1),
        npi=torch.softmax(randn(N, T, NUM_ACTIONS), -1), nq=randn(N, T, NUM_ACTIONS),
        mu=rand(N, T) * 0.8 + 0.1, last=randn(N), seed=randn(N),
    )
    out = {k: x.to(device=device, dtype=dtype) for k, x in d.items()}
    out["act"] = torch.randint(0, NUM_ACTIONS, (N, T), generator=g).to(device)
    out["term"] = term.to(device=device, dtype=flag_dtype)
    out["trunc"] = trunc.to(device=device, dtype=flag_dtype) if truncations else None
    return out


@dataclass
class Estimator:
    name: str
    kernel: str  # the Triton kernel it launches; estimators sharing one differ in constexprs
    call: object  # (module, inputs, **kw) -> tensor or tuple
    per_row: tuple = field(default=())


def _gae(m, d, **kw):
    return m.compute_gae(d["r"], d["v"], d["term"], d["trunc"], 0.99, 0.95, d["boot"], **kw)


def _gae_last(m, d, **kw):
    return m.compute_gae(d["r"], d["v"], d["term"], d["trunc"], 0.99, 0.95, None, d["last"], **kw)


def _vtrace(m, d, **kw):
    return m.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"], d["trunc"], 0.99,
                            1.0, 1.0, d["boot"], **kw)


def _vtrace_clip(m, d, **kw):
    return m.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"], d["trunc"], 0.9,
                            0.8, 0.5, None, d["last"], lambda_=0.9, **kw)


def _retrace(m, d, **kw):
    return m.compute_retrace(d["pi"], d["mu"], d["v"], d["nq"], d["act"], d["r"], d["term"],
                             d["trunc"], 0.99, 0.9, 0.8, 1.2, **kw)


def _retrace_next_pi(m, d, **kw):
    return m.compute_retrace(d["pi"], d["mu"], d["v"], d["nq"], d["act"], d["r"], d["term"],
                             d["trunc"], 0.99, 0.95, 1.0, 1.0, next_action_probs_target=d["npi"],
                             **kw)


def _lambda(m, d, **kw):
    return m.compute_lambda_returns(d["r"], d["n"], d["term"], d["trunc"], 0.99, 0.95, d["boot"],
                                    **kw)


def _discounted(m, d, **kw):
    return m.compute_discounted_returns(d["r"], d["term"], d["trunc"], 0.99, d["boot"], **kw)


def _elig(m, d, **kw):
    return m.compute_eligibility_traces(d["r"], d["term"], 0.99, 0.9, d["seed"], **kw)


def _prefix_ends(m, d, **kw):
    return m.compute_episodic_prefix_sum(d["r"], d["term"], d["seed"], "ends_at", **kw)


def _prefix_starts(m, d, **kw):
    return m.compute_episodic_prefix_sum(d["r"], d["term"], d["seed"], "starts_at", **kw)


ESTIMATORS = [
    Estimator("gae", "gae", _gae),
    Estimator("gae_last_value", "gae", _gae_last, ("last",)),
    Estimator("vtrace", "vtrace", _vtrace),
    Estimator("vtrace_clip_lambda_last_value", "vtrace", _vtrace_clip, ("last",)),
    Estimator("retrace", "retrace", _retrace),
    Estimator("retrace_next_policy", "retrace", _retrace_next_pi),
    Estimator("lambda_returns", "returns", _lambda),
    Estimator("discounted_returns", "returns", _discounted),
    Estimator("eligibility_traces", "decayed_sum", _elig, ("seed",)),
    Estimator("prefix_sum_ends_at", "decayed_sum", _prefix_ends, ("seed",)),
    Estimator("prefix_sum_starts_at", "decayed_sum", _prefix_starts, ("seed",)),
]
BY_NAME = {e.name: e for e in ESTIMATORS}


def every_kernel(cases, ids, kernels=None):
    """``(est, *case)`` params for a test over ``cases`` (tuples, named by ``ids``). The GPU runs
    every estimator on every case; the interpreter, whose cost is per program and per op, runs
    each case once per kernel (``kernels(case)``: which; default all), that kernel's estimators
    in turn from case to case, shifted by one each round so that none keeps to one value of an
    inner axis; each still meets several cases."""
    params = []
    for i, (case, name) in enumerate(zip(cases, ids)):
        if torch.cuda.is_available():
            chosen = ESTIMATORS
        else:
            wanted = kernels(case) if kernels else {e.kernel for e in ESTIMATORS}
            chosen = []
            for k in sorted(wanted):
                variants = [e for e in ESTIMATORS if e.kernel == k]
                chosen.append(variants[(i + i // len(variants)) % len(variants)])
        params += [pytest.param(e, *case, id=f"{e.name}-{name}") for e in chosen]
    return params

STEP_KEYS = ("r", "v", "n", "lpt", "lpb", "boot", "mu", "act", "term", "trunc")
ACTION_KEYS = ("pi", "npi", "nq")
ROW_KEYS = ("last", "seed")


class Layout:
    """Re-lays ``[N, T]`` inputs in memory; ``back`` maps an output to ``[N, T]``."""

    def __init__(self, name, step, action, row, back, time_dim):
        self.name, self.step, self.action, self.row = name, step, action, row
        self.back, self.time_dim = back, time_dim

    def apply(self, d):
        out = {}
        for k, x in d.items():
            if x is None:
                out[k] = None
            elif k in ACTION_KEYS:
                out[k] = self.action(x)
            elif k in ROW_KEYS:
                out[k] = self.row(x)
            else:
                out[k] = self.step(x)
        return out


def _split(n):
    return 2 if n % 2 == 0 else 1


LAYOUTS = [
    Layout("batch_major", lambda x: x, lambda x: x, lambda x: x, lambda y: y, -1),
    Layout("time_major", lambda x: x.t().contiguous(), lambda x: x.transpose(0, 1).contiguous(),
           lambda x: x, lambda y: y.t(), 0),
    Layout("batch_axes", lambda x: x.reshape(_split(x.shape[0]), -1, x.shape[1]),
           lambda x: x.reshape(_split(x.shape[0]), -1, *x.shape[1:]),
           lambda x: x.reshape(_split(x.shape[0]), -1),
           lambda y: y.reshape(-1, y.shape[-1]), -1),
    Layout("time_between_batch_axes",
           lambda x: x.reshape(_split(x.shape[0]), -1, x.shape[1]).transpose(1, 2).contiguous(),
           lambda x: x.reshape(_split(x.shape[0]), -1, *x.shape[1:]).transpose(1, 2).contiguous(),
           lambda x: x.reshape(_split(x.shape[0]), -1),
           lambda y: y.transpose(1, 2).reshape(-1, y.shape[1]), 1),
    Layout("strided", lambda x: torch.stack([x, x], -1)[..., 0],
           lambda x: torch.cat([x, x], -1)[..., : x.shape[-1]],
           lambda x: torch.stack([x, x], -1)[..., 1], lambda y: y, -1),
]


def outputs(result):
    return result if isinstance(result, tuple) else (result,)
