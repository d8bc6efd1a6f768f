"""Providers: every implementation the benchmark can time, each behind an availability check.

A provider turns a :class:`~paper_repro.bench.inputs.Case` into a :class:`Prepared`
call: a zero-argument callable (the timed region), a function mapping its result to
batch-major ``[N, T]`` outputs in the public API's order, and, where the provider
computes a different problem by design (PufferLib), the case its output is gated against.

=====================  ==================================================================
``ours``               ``paper_repro.compute_*`` (Triton on CUDA, torch path on CPU)
``doubling-compiled``  the paper's ``compile(vec)``: ``torch.compile`` of the doubling scan,
                       fresh per shape; backward plain cases get an all-zero
                       ``truncateds`` and bootstrap tensor built outside, as the paper did
``doubling-eager``     the same doubling scan, uncompiled
``assoc-scan-compiled````torch.compile`` of ``torch``'s ``associative_scan`` (fresh per shape)
``loop-gpu``           the uncompiled sequential loop over t (CleanRL style), wall clock
``numpy-cpu``          the sequential loop on the CPU with NumPy arrays, wall clock
``torchrl``            TorchRL's vectorised functional estimators (approximate by design)
``torchrl-loop``       TorchRL's loop estimators
``pufferlib``          PufferLib 3.0.0's CUDA advantage kernel (GAE, plain only)
``rl-triton``          the paper's library, v0.1.3
=====================  ==================================================================
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from paper_repro.baselines import external
from paper_repro.baselines import torch_ops as ops
from paper_repro.bench.inputs import ALGORITHMS, EXTRA_ALGORITHMS, MODULES

_BACKWARD_WITH_TRUNCATIONS = ("gae", "vtrace", "lambda_returns", "discounted_returns")


@dataclass
class Prepared:
    """A ready-to-time call, how to read its outputs, and what to gate them against."""

    call: Callable[[], Any]
    outputs: Callable[[Any], tuple]
    compare_case: Any = None
    compare_cols: int | None = None
    tolerance: tuple | None = None
    note: str = ""
    reset: Callable[[], None] | None = None  # poisons in-place outputs before a re-check


@dataclass
class Provider:
    """One implementation: what it supports, how it is timed, how to prepare a call."""

    name: str
    label: str
    build: Callable[[Any], Prepared]
    algorithms: tuple = ALGORITHMS
    clock: str = "gpu"  # "gpu": CUDA events + device time; "cpu": wall clock only
    input_device: str = "bench"  # "bench" = the benchmark device; "cpu"; "cuda"
    variants: tuple = ("plain", "trunc")
    dtypes: tuple = ("fp32",)
    layouts: tuple = ("NT",)
    max_seq_len: int | None = None
    max_elements: int | None = None
    unavailable: Callable[[], str | None] = field(default=lambda: None)
    graph_capture: bool = True  # False: device time from back-to-back events instead

    def unsupported(self, case):
        """Why this provider does not run ``case`` (``None`` if it does)."""
        if case.algorithm not in self.algorithms:
            return f"{self.name} has no {case.algorithm}"
        for attr, value in (("variants", case.variant), ("dtypes", case.dtype),
                            ("layouts", case.layout)):
            if value not in getattr(self, attr):
                return f"{self.name} does not support {attr[:-1]} {value}"
        return None

    def over_budget(self, case):
        """Why ``case`` is too expensive for this (slow) provider, or ``None``."""
        if self.max_seq_len and case.seq_len > self.max_seq_len:
            return f"skipped: T > {self.max_seq_len} (time budget of {self.name})"
        if self.max_elements and case.num_envs * case.seq_len > self.max_elements:
            return f"skipped: N*T > {self.max_elements} (time budget of {self.name})"
        return None


def _nt_outputs(case):
    def outputs(raw):
        raw = raw if isinstance(raw, tuple) else (raw,)
        return tuple(case.nt(o) for o in raw)
    return outputs


def _ours(case):
    module = importlib.import_module(MODULES.get(case.algorithm, "paper_repro"))
    fn = getattr(module, case.public_name)
    args, kwargs = case.args, case.call_kwargs()
    return Prepared(lambda: fn(*args, **kwargs), _nt_outputs(case))


def _paper_baseline_arguments(fn, case):
    """The paper called every backward plain baseline as its with-truncations version."""
    bound = inspect.signature(fn).bind(*case.args, **case.kwargs)
    arguments = dict(bound.arguments)
    if case.variant == "plain" and case.algorithm in _BACKWARD_WITH_TRUNCATIONS:
        rewards = arguments["rewards"]
        arguments["truncateds"] = torch.zeros_like(rewards)
        arguments["bootstrap_values"] = torch.zeros_like(rewards)
    return arguments


def _doubling(compiled):
    def build(case):
        fn = getattr(ops, f"{case.algorithm}_doubling")
        if not compiled:
            return Prepared(lambda: fn(*case.args, **case.kwargs), _nt_outputs(case))
        arguments = _paper_baseline_arguments(fn, case)
        compiled_fn = ops.compile_fresh(fn)
        return Prepared(lambda: compiled_fn(**arguments), _nt_outputs(case))
    return build


def _assoc_compiled(case):
    fn = ops.compile_fresh(getattr(ops, f"{case.algorithm}_assoc_scan"))
    args, kwargs = case.args, case.kwargs
    return Prepared(lambda: fn(*args, **kwargs), _nt_outputs(case))


def _loop(case):
    fn = getattr(ops, f"{case.algorithm}_loop")
    return Prepared(lambda: fn(*case.args, **case.kwargs), _nt_outputs(case))


def _numpy(case):
    fn = getattr(ops, f"{case.algorithm}_numpy")

    def to_numpy(x):
        return x.detach().cpu().numpy() if torch.is_tensor(x) else x
    args = tuple(to_numpy(a) for a in case.args)
    kwargs = {k: to_numpy(v) for k, v in case.kwargs.items()}

    def outputs(raw):
        raw = raw if isinstance(raw, tuple) else (raw,)
        return tuple(torch.from_numpy(np.asarray(o)) for o in raw)
    return Prepared(lambda: fn(*args, **kwargs), outputs)


def _torchrl(vectorized):
    def build(case):
        call, outputs = external.torchrl_prepare(case, vectorized=vectorized)
        approximate = vectorized and case.algorithm in external.TORCHRL_APPROXIMATE
        tolerance = external.TORCHRL_VEC_TOLERANCE if approximate else None
        note = "gated at rtol=atol=1e-3 (approximate filter)" if approximate else ""
        return Prepared(call, outputs, tolerance=tolerance, note=note)
    return build


def _pufferlib(case):
    if case.algorithm == "puff_advantage":  # its own problem: gated whole, last column kept
        call, advantages = external.pufferlib_puff_prepare(case)
        return Prepared(call, lambda raw: (advantages,),
                        reset=lambda: advantages[:, :-1].fill_(float("nan")))
    call, outputs, compare_case, cols = external.pufferlib_prepare(case)

    def reset():
        outputs(None)[0].fill_(float("nan"))
    return Prepared(call, outputs, compare_case, cols, reset=reset,
                    note="first T-1 columns gated (PufferLib never writes the last)")


def _rl_triton(case):
    call, outputs = external.rl_triton_prepare(case)
    return Prepared(call, outputs)


def _assoc_unavailable():
    return None if ops.ASSOC_SCAN_AVAILABLE else "torch has no associative_scan"


def _cuda_only():
    return None if torch.cuda.is_available() else "needs a CUDA device"


def _compile_unavailable():
    return None if hasattr(torch, "compile") else "torch.compile missing"


PROVIDERS = {p.name: p for p in [
    Provider("ours", "paper_repro", _ours, algorithms=ALGORITHMS + EXTRA_ALGORITHMS,
             dtypes=("fp32", "bf16", "fp16", "fp64"), layouts=("NT", "TN")),
    Provider("doubling-compiled", "compile(doubling scan)", _doubling(True),
             unavailable=_compile_unavailable),
    Provider("doubling-eager", "doubling scan (eager)", _doubling(False)),
    Provider("assoc-scan-compiled", "compile(associative_scan)", _assoc_compiled,
             unavailable=_assoc_unavailable),
    Provider("loop-gpu", "loop over t (uncompiled)", _loop,
             algorithms=ALGORITHMS + ("masked_gae",), clock="cpu", max_seq_len=8192,
             graph_capture=False),
    Provider("numpy-cpu", "NumPy loop (CPU)", _numpy, clock="cpu", input_device="cpu",
             max_elements=1 << 23, max_seq_len=8192),
    Provider("torchrl", "TorchRL (vectorised)", _torchrl(True),
             algorithms=external.TORCHRL_ALGORITHMS, max_elements=1 << 25,
             unavailable=external.torchrl_unavailable, graph_capture=False),
    Provider("torchrl-loop", "TorchRL (loop)", _torchrl(False),
             algorithms=external.TORCHRL_ALGORITHMS, clock="cpu", max_seq_len=8192,
             unavailable=external.torchrl_unavailable),
    Provider("pufferlib", "PufferLib 3.0.0 CUDA", _pufferlib, algorithms=("gae", "puff_advantage"),
             input_device="cuda", variants=("plain",), unavailable=external.pufferlib_unavailable,
             graph_capture=False),
    Provider("rl-triton", "rl-triton 0.1.3", _rl_triton, input_device="cuda",
             unavailable=external.rl_triton_unavailable),
]}
# the paper's comparison set, in table order
DEFAULT_PROVIDERS = ("ours", "doubling-compiled", "assoc-scan-compiled", "loop-gpu",
                     "numpy-cpu", "torchrl", "torchrl-loop", "pufferlib", "rl-triton")
_UNAVAILABLE_CACHE: dict = {}


def unavailable(name):
    """Why provider ``name`` cannot run on this machine (cached), or ``None``."""
    if name not in _UNAVAILABLE_CACHE:
        _UNAVAILABLE_CACHE[name] = PROVIDERS[name].unavailable()
    return _UNAVAILABLE_CACHE[name]
