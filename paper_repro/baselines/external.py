"""Import-guarded adapters for the peers the benchmark compares against (used only by bench).

Each adapter maps our semantics (SPEC.md) onto the peer's input conventions *outside* the
timed call and returns a zero-argument callable plus a function that turns its raw result
into batch-major ``[N, T]`` outputs in our order. Peers:

* TorchRL (``torchrl.objectives.value.functional``, layout ``[N, T, 1]``, bool flags):
  GAE, TD(lambda), V-trace, discounted returns; vectorised or loop versions.
* PufferLib 3.0.0's CUDA advantage kernel, compiled at run time with
  ``torch.utils.cpp_extension.load`` from the sdist's own sources, found in
  ``$PAPER_REPRO_PUFFERLIB_SRC`` (default ``.ext/pufferlib``: ``pufferlib.cpp`` and
  ``pufferlib.cu``). GAE only, plain path (PAPER.md 4.6).
* rl-triton v0.1.3 (the paper's library), imported from ``$PAPER_REPRO_RL_TRITON_SRC``
  (default ``.ext/rl-triton/src``). Same names and signatures as ours; CUDA, fp32, [N, T].

Availability functions return ``None`` when the peer can run, else the reason it cannot.
"""
from __future__ import annotations

import functools
import importlib
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from paper_repro.paths import ROOT

PUFFERLIB_SRC = Path(os.environ.get("PAPER_REPRO_PUFFERLIB_SRC", ROOT / ".ext" / "pufferlib"))
RL_TRITON_SRC = Path(os.environ.get("PAPER_REPRO_RL_TRITON_SRC",
                                    ROOT / ".ext" / "rl-triton" / "src"))
TORCHRL_ALGORITHMS = ("gae", "vtrace", "lambda_returns", "discounted_returns")
# TorchRL's vectorised GAE / TD(lambda) convolve with a geometric filter cut at 1e-7
TORCHRL_VEC_TOLERANCE = (1e-3, 1e-3)
TORCHRL_APPROXIMATE = ("gae", "lambda_returns")


# ---- TorchRL ------------------------------------------------------------------------------

def torchrl_unavailable():
    try:
        importlib.import_module("torchrl.objectives.value.functional")
    except Exception as exc:  # ImportError, or a broken optional dependency
        return f"torchrl not importable: {exc!r}"[:200]
    return None


def _col(x):
    return x.unsqueeze(-1)


def _flags(case):
    """(terminated, done) as bool ``[N, T]`` plus the truncation flags (float, or None)."""
    args, kwargs = case.nt_args()
    names = {"gae": 2, "vtrace": 4, "lambda_returns": 2, "discounted_returns": 1}
    term = args[names[case.algorithm]]
    trunc = args[names[case.algorithm] + 1]
    terminated = term != 0
    done = terminated if trunc is None else terminated | (trunc != 0)
    return terminated, done, trunc, kwargs.get("bootstrap_values")


def _next_value(values_next, trunc, boot):
    """Value of s_{t+1} as TorchRL reads it: b_t at truncations and at T-1 (0 if absent)."""
    shifted = F.pad(values_next[:, 1:], (0, 1))
    if boot is None:
        return shifted if trunc is None else shifted * (trunc == 0)
    read_boot = F.pad((trunc if trunc is not None else torch.zeros_like(boot))[:, :-1] != 0,
                      (0, 1), value=True)
    return torch.where(read_boot, boot, shifted)


def torchrl_prepare(case, vectorized=True):
    """(call, outputs) running TorchRL's estimator for ``case`` (fp32, [N, T] semantics)."""
    fn = importlib.import_module("torchrl.objectives.value.functional")
    args, _ = case.nt_args()
    terminated, done, trunc, boot = _flags(case)
    gamma = float(args[{"gae": 4, "vtrace": 6, "lambda_returns": 4,
                        "discounted_returns": 3}[case.algorithm]])
    term3, done3 = _col(terminated), _col(done)
    if case.algorithm == "gae":
        rewards, values, lam = args[0], args[1], float(args[5])
        nxt = _next_value(values, trunc, boot)
        est = fn.vec_generalized_advantage_estimate if vectorized else \
            fn.generalized_advantage_estimate
        v3, n3, r3 = _col(values), _col(nxt), _col(rewards)
        return (lambda: est(gamma, lam, v3, n3, r3, done3, term3, time_dim=-2),
                lambda raw: (raw[0].squeeze(-1),))
    if case.algorithm == "vtrace":
        lpt, lpb, values, rewards = args[0], args[1], args[2], args[3]
        nxt = _next_value(values, trunc, boot)
        t3 = tuple(_col(x) for x in (lpt, lpb, values, nxt, rewards))
        return (lambda: fn.vtrace_advantage_estimate(gamma, *t3, done3, term3, 1.0, 1.0,
                                                     time_dim=-2),
                lambda raw: (raw[1].squeeze(-1), raw[0].squeeze(-1)))
    if case.algorithm == "lambda_returns":
        rewards, next_values, lam = args[0], args[1], float(args[5])
        # our window end mixes (1 - lam) n_{T-1} with lam * b_{T-1}; TorchRL bootstraps fully
        b = torch.zeros_like(next_values) if boot is None else boot
        t_flag = torch.zeros_like(b) if trunc is None else trunc
        tail = (1 - lam) * next_values[:, -1:] + lam * b[:, -1:]
        mixed = torch.cat([next_values[:, :-1], tail], dim=1)
        nxt = torch.where(t_flag != 0, b, mixed)
        est = fn.vec_td_lambda_return_estimate if vectorized else fn.td_lambda_return_estimate
        n3, r3 = _col(nxt), _col(rewards)
        return (lambda: est(gamma, lam, n3, r3, done3, term3, time_dim=-2),
                lambda raw: (raw.squeeze(-1),))
    rewards = args[0]
    r3 = _col(rewards)
    if vectorized and trunc is None and boot is None:
        return (lambda: fn.reward2go(r3, done3, gamma, time_dim=-2),
                lambda raw: (raw.squeeze(-1),))
    nxt = _next_value(torch.zeros_like(rewards), trunc, boot)
    est = fn.vec_td1_return_estimate if vectorized else fn.td1_return_estimate
    n3 = _col(nxt)
    return (lambda: est(gamma, n3, r3, done3, term3, time_dim=-2),
            lambda raw: (raw.squeeze(-1),))


# ---- PufferLib ----------------------------------------------------------------------------

def pufferlib_unavailable():
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    missing = [n for n in ("pufferlib.cpp", "pufferlib.cu") if not (PUFFERLIB_SRC / n).exists()]
    if missing:
        return f"PufferLib sources {missing} not found in {PUFFERLIB_SRC}"
    if shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        return "nvcc not found (needed to compile PufferLib's kernel)"
    try:
        _pufferlib_op()
    except Exception as exc:
        return f"PufferLib kernel build failed: {exc!r}"[:300]
    return None


@functools.lru_cache(maxsize=1)
def _pufferlib_op():
    from torch.utils.cpp_extension import load
    load(name="pufferlib_advantage", is_python_module=False, verbose=False,
         sources=[str(PUFFERLIB_SRC / "pufferlib.cpp"), str(PUFFERLIB_SRC / "pufferlib.cu")],
         extra_cuda_cflags=["-O3"])
    return torch.ops.pufferlib.compute_puff_advantage


def pufferlib_reference_op():
    """PufferLib's ``compute_puff_advantage`` op (its CPU loop; CUDA too where built), or the
    reason it cannot be had: ``(op, None)`` or ``(None, reason)``. Without CUDA only
    ``pufferlib.cpp`` is compiled (one registration of the ``pufferlib`` library a process)."""
    if torch.cuda.is_available():
        reason = pufferlib_unavailable()
        return (None, reason) if reason else (_pufferlib_op(), None)
    if not (PUFFERLIB_SRC / "pufferlib.cpp").exists():
        return None, f"pufferlib.cpp not found in {PUFFERLIB_SRC}"
    try:
        return _pufferlib_cpu_op(), None
    except Exception as exc:
        return None, f"PufferLib CPU build failed: {exc!r}"[:300]


@functools.lru_cache(maxsize=1)
def _pufferlib_cpu_op():
    from torch.utils.cpp_extension import load
    load(name="pufferlib_advantage_cpu", is_python_module=False, verbose=False,
         sources=[str(PUFFERLIB_SRC / "pufferlib.cpp")])
    return torch.ops.pufferlib.compute_puff_advantage


def pufferlib_prepare(case):
    """(call, outputs, compare_case, compare_cols) for PufferLib's advantage kernel.

    PufferLib reads the reward and done of step t at index t+1 and never writes the last
    column, so rewards/dones are shifted one slot right here (untimed); its first T-1
    columns equal our GAE on the first T-1 steps bootstrapped with V(s_{T-1}).
    """
    from dataclasses import replace

    op = _pufferlib_op()
    rewards, values, terminateds = (x.contiguous() for x in case.args[:3])
    gamma, lam = float(case.args[4]), float(case.args[5])
    shifted_rewards = F.pad(rewards[:, :-1], (1, 0)).contiguous()
    shifted_dones = F.pad(terminateds[:, :-1], (1, 0)).contiguous()
    importance = torch.ones_like(values)
    advantages = torch.zeros_like(values)

    def call():
        op(values, shifted_rewards, shifted_dones, importance, advantages, gamma, lam, 1.0, 1.0)
        return advantages

    seq = case.seq_len - 1
    compare_case = replace(case, seq_len=seq,
                           args=(rewards[:, :seq], values[:, :seq], terminateds[:, :seq], None,
                                 gamma, lam),
                           kwargs={"last_value": values[:, seq]})
    return call, (lambda raw: (advantages,)), compare_case, seq


def pufferlib_puff_prepare(case):
    """``(call, advantages)``: PufferLib's op on the case's own rows (its layout), ratios and
    clips, into an advantages buffer of its own (zeros, as PufferLib's trainer passes)."""
    op = _pufferlib_op()
    values, rewards, terminals, ratio = (x.contiguous() for x in case.args[:4])
    advantages = torch.zeros_like(values)
    scalars = tuple(float(x) for x in case.args[5:9])

    def call():
        op(values, rewards, terminals, ratio, advantages, *scalars)
        return advantages
    return call, advantages


# ---- rl-triton ----------------------------------------------------------------------------

def rl_triton_unavailable():
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    try:
        rl_triton_module()
    except Exception as exc:
        return f"rl_triton not importable from {RL_TRITON_SRC}: {exc!r}"[:300]
    return None


@functools.lru_cache(maxsize=1)
def rl_triton_module():
    path = str(RL_TRITON_SRC)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("rl_triton")


def rl_triton_prepare(case):
    """(call, outputs) calling rl-triton's function of the same name as ours."""
    fn = getattr(rl_triton_module(), case.public_name)
    args, kwargs = case.args, dict(case.kwargs)

    def outputs(raw):
        return tuple(raw) if isinstance(raw, tuple) else (raw,)
    return (lambda: fn(*args, **kwargs)), outputs
