"""Launch plans: the host work of a repeated call, done once per tensor metadata and scalars.

A public call is keyed by its op, the CPU backend, each tensor argument's type, shape, strides,
dtype, device and requires_grad (or None), and each scalar's value and type (``True == 1.0``
and they hash alike). The first call with a key runs the checks, views its tensors as
``[B, T]`` rows and picks tiles; if it then launched Triton on its arguments' own memory (no
copies), the launch becomes the key's plan. A repeat allocates the outputs and launches on its
own arguments. Data pointers are not keyed: the direct launch keys their alignment. Calls that
validate, force tiles, compile or need gradients neither use nor record plans.
"""
from __future__ import annotations

import operator
import threading

import torch

from paper_repro.kernels import _launch as L

MAX_PLANS = 1024
_PLANS: dict = {}


class _Recording(threading.local):
    key = None  # the key of the public call whose launch is being recorded on this thread


_RECORDING = _Recording()


class Plan:
    """Outputs ``empty_like(args[like], dtype)`` (``dtype`` None: that of ``args[like]``), then
    ``launch`` on the pointers it picks from ``(*args, *outputs)``. ``grad``: an argument
    requires grad (recorded under no_grad), so grad mode needs the registered op."""

    __slots__ = ("launch", "like", "dtype", "n_outputs", "pick", "grad", "present", "spread")

    def __init__(self, launch, like: int, dtype: torch.dtype | None, n_outputs: int,
                 sources: tuple, grad: bool):
        self.launch, self.like, self.dtype, self.n_outputs = launch, like, dtype, n_outputs
        self.pick, self.grad = operator.itemgetter(*sources), grad
        # Each distinct tensor's address is read once (absent arguments repeat an output's).
        distinct = sorted(set(sources))
        self.present = operator.itemgetter(*distinct)
        self.spread = operator.itemgetter(*[distinct.index(s) for s in sources])

    def __call__(self, args: tuple):
        like, dtype = args[self.like], self.dtype
        # without dtype=, empty_like skips its keyword parsing
        out = torch.empty_like(like) if dtype is None else torch.empty_like(like, dtype=dtype)
        outs = (out,) if self.n_outputs == 1 else \
            (out, *[torch.empty_like(out) for _ in range(self.n_outputs - 1)])
        tensors = (*args, *outs)
        if not self.launch.launch_pointers(
                self.spread([t.data_ptr() for t in self.present(tensors)])):
            self.launch(self.pick(tensors))
        return out if self.n_outputs == 1 else outs


def lookup(op: str, tensors: tuple, scalars: tuple, validate=False):
    """``(plan, key)`` of a public call: the plan recorded under this call's key (None if there
    is none or the call needs the registered op), and the key (None: never use a plan)."""
    if validate or L.VALIDATE_ENV or L._FORCED_CONFIG[0] is not None or \
            L._FORCED_PREFETCH[0] is not None or torch.compiler.is_compiling():
        return None, None
    try:
        key = (op, L._CPU_BACKEND[0], *[None if t is None else (
            type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad) for t in tensors],
            *scalars, *map(type, scalars))
        plan = _PLANS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # not plain tensors: the checks say why
        return None, None
    if plan is not None and plan.grad and torch.is_grad_enabled():
        return None, key  # L.needs_dispatch, with requires_grad read off the key
    return plan, key


def recorded(key, forward, *args):
    """``forward(*args)``; the launch it makes through ``launch`` becomes the plan for ``key``
    (the key rides on the thread: ``forward`` is also the registered op's body, whose
    signature is the op's schema)."""
    if key is None:
        return forward(*args)
    _RECORDING.key = key
    try:
        return forward(*args)
    finally:
        _RECORDING.key = None


def launch(job, pointers: tuple, args: tuple, outputs: tuple, order: tuple | None = None):
    """``job(pointers)``, kept as the plan of the call being recorded if it read and wrote the
    arguments' own memory. ``pointers`` are inputs in kernel order (``args[i]``, ``i`` from
    ``order``, default ``args``' order, as views; absent ones replaced by the first output),
    then the ``[B, T]`` rows of ``outputs`` (``L.Output``)."""
    job(pointers)
    key = _RECORDING.key
    if key is None:
        return
    _RECORDING.key = None
    n, inputs = len(args), len(pointers) - len(outputs)
    order = range(inputs) if order is None else order
    if any(a is not None and type(a) is not torch.Tensor for a in args):
        return  # subclasses may override the view ops a plan skips
    if any(not o.is_view or o.rows.data_ptr() != o.tensor.data_ptr() for o in outputs):
        return
    for i, p in zip(order, pointers):
        if args[i] is not None and p.data_ptr() != args[i].data_ptr():
            return  # a copy: the plan would read the argument with the copy's strides
    like = next(i for i, a in enumerate(args) if a is outputs[0].like)
    dtype = outputs[0].tensor.dtype
    sources = (*[n if args[i] is None else i for i in order], *range(n, n + len(outputs)))
    if len(_PLANS) >= MAX_PLANS:  # one entry per shape and scalars: bound it for sweeps
        _PLANS.clear()
    grad = any(a is not None and a.requires_grad for a in args)
    _PLANS[key] = Plan(job, like, None if dtype == args[like].dtype else dtype, len(outputs),
                       sources, grad)

