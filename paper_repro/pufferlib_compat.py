"""PufferLib's advantage (``pufferlib.pufferl.compute_puff_advantage``, 3.0) with its name,
signature and readings: swap the import and keep the call.

PufferLib stores ``[segments, horizon]`` rows whose reward and terminal of step ``t`` sit at
``t + 1``, mixes GAE with V-trace's clipped importance weights, and never writes the last
column. That is our V-trace with ``lambda_`` over the first ``horizon - 1`` steps, rewards and
terminals read one slot later, bootstrapped from ``values[:, -1]`` (docs/conventions.md); where
the kernels run and nothing needs a gradient, one launch that reads the ratios as they are
and writes ``vs - V`` straight into ``advantages``:

    A_t = rho_t delta_t + gamma lambda c_t (1 - terminals[t+1]) A_{t+1},
    delta_t = rewards[t+1] + gamma (1 - terminals[t+1]) values[t+1] - values[t],

``rho_t = min(ratio_t, rho_clip)``, ``c_t = min(ratio_t, c_clip)``, ``A_{horizon-1}`` unwritten.
"""
from __future__ import annotations

import torch

from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan
from paper_repro.kernels.vtrace import compute_vtrace, difference_pointers, vtrace_difference_into

__all__ = ["compute_puff_advantage"]

OP = "pufferlib_advantage"  # its site: repeats served in C++ before any check (``_plan.repeat``)


class _Repeat:
    """A kept launch and whether a native plan serves its repeats (None: not tried yet)."""
    __slots__ = ("job", "native")

    def __init__(self, job):
        self.job, self.native = job, None if N.ENABLED else False


# Launches by the whole buffers' metadata and the scalars: a one-pass repeat launches on the
# addresses, with no views made (seven views cost more than the rest of the call's host work).
_REPEATS: dict = {}


def compute_puff_advantage(values, rewards, terminals, ratio, advantages, gamma, gae_lambda,
                           vtrace_rho_clip, vtrace_c_clip):
    """Writes PufferLib's advantages into ``advantages[:, :-1]`` and returns ``advantages``.

    Args:
        values, rewards, terminals, ratio, advantages: ``[segments, horizon]``; ``terminals``
            bool, integer or floating, the others floating. ``ratio`` is the importance weight
            ``pi/mu`` of each step (ones for plain GAE).
        gamma, gae_lambda, vtrace_rho_clip, vtrace_c_clip: floats.
    Returns:
        ``advantages``, its last column as it was (PufferLib never writes it).
    """
    tensors = values, rewards, terminals, ratio, advantages
    given = gamma, gae_lambda, vtrace_rho_clip, vtrace_c_clip
    served = _plan.repeat(OP, tensors, given)
    if served is not None:
        return served
    L.check_tensor("values", values)
    if values.dim() != 2:
        raise ValueError(f"values must be [segments, horizon], got {values.dim()}-d")
    for name, x in (("rewards", rewards), ("ratio", ratio), ("advantages", advantages)):
        L.check_tensor(name, x, like=values)
    L.check_tensor("terminals", terminals, like=values, flag=True)
    gamma, gae_lambda, vtrace_rho_clip, vtrace_c_clip = (
        L.check_scalar(name, x) for name, x in (
            ("gamma", gamma), ("gae_lambda", gae_lambda), ("vtrace_rho_clip", vtrace_rho_clip),
            ("vtrace_c_clip", vtrace_c_clip)))
    if values.shape[1] < 2:
        return advantages  # PufferLib's loop starts at horizon - 2: nothing to write
    scalars = gamma, vtrace_rho_clip, vtrace_c_clip, gae_lambda
    if _one_launch(values, rewards, ratio, advantages):
        _launch(tensors, scalars, given)
        return advantages
    # the ratio enters as log pi - log mu with log mu = 0; a ratio of 1 stays exactly 1
    before = values[:, :-1]
    vs, _ = compute_vtrace(ratio[:, :-1].log(), torch.zeros_like(before), before, rewards[:, 1:],
                           terminals[:, 1:], None, gamma, vtrace_rho_clip, vtrace_c_clip,
                           last_value=values[:, -1], lambda_=gae_lambda)
    advantages[:, :-1] = vs - before
    return advantages


def _launch(tensors: tuple, scalars: tuple, given: tuple) -> None:
    """The one launch, kept for repeats (but under ``L.force_*``): on the addresses where the
    launch is one pass and compiled for their alignment, else on the views. The first direct
    repeat of a launch makes it native where it can, and its op's site then serves calls like
    it."""
    if L.forced():  # a forced tile or switch: launched afresh, never kept
        vtrace_difference_into(*_views(*tensors), *scalars)
        return
    key = (tensors[0].shape, tensors[0].dtype, tensors[2].dtype, tensors[0].device, *scalars,
           *[x.stride() for x in tensors])
    kept = _REPEATS.get(key)
    if kept is not None:
        addresses = _addresses(*tensors)
        if not kept.job.launch_pointers(addresses):
            kept.job(difference_pointers(*_views(*tensors)))
        elif kept.native is None and N.module() is not None:
            kept.native = _go_native(kept.job, tensors, addresses, given)
        return
    job = vtrace_difference_into(*_views(*tensors), *scalars)
    if job is not None:
        if len(_REPEATS) >= 64:
            _REPEATS.clear()
        _REPEATS[key] = _Repeat(job)


def _go_native(job, tensors: tuple, addresses: tuple, given: tuple) -> bool:
    """Enlist the direct launch just made on ``addresses`` in the op's site: a native plan of
    no outputs, its pointers the buffers' addresses shifted as ``_sources`` says. Scalars of
    other types than float and int (numpy's, tensors) stay on this path."""
    launched = job.launch_values(addresses)
    if launched is None or any(type(x) not in (float, int) for x in given):
        return False
    compiled, grid, values = launched
    sources, shifts = zip(*L.with_unread_scratch(_sources(*tensors)))
    plan = N.make_plan(compiled, grid, values, sources, len(tensors), len(tensors) - 1, None, 0,
                       D.current_device(), shifts)
    if plan is None:
        return False
    grad = any(x.requires_grad for x in tensors)
    _plan.enlist(OP, tensors, given, grad, (), job, plan)
    return True


def _views(values, rewards, terminals, ratio, advantages) -> tuple:
    """``vtrace_difference_into``'s tensors: each step's own columns, the next step's one on."""
    return (advantages[:, :-1], ratio[:, :-1], values[:, :-1], rewards[:, 1:], terminals[:, 1:],
            values[:, 1:])


def _sources(values, rewards, terminals, ratio, advantages) -> tuple:
    """The launch's pointers as ``(argument index, byte shift)``: the steps' own columns, the
    next step's one column on."""
    def next_step(index, x):
        return index, x.stride(1) * x.element_size()

    return difference_pointers((4, 0), (3, 0), (0, 0), next_step(1, rewards),
                               next_step(2, terminals), next_step(0, values))


def _addresses(*tensors) -> tuple:
    """The launch's pointers as addresses (``_sources``)."""
    return tuple(tensors[i].data_ptr() + shift for i, shift in _sources(*tensors))


def _one_launch(values, rewards, ratio, advantages) -> bool:
    """The kernel can read the ratios and write ``advantages`` itself: the kernels run here,
    one dtype throughout, nothing to differentiate or trace (else V-trace's public call)."""
    return (not L.needs_dispatch(values, rewards, ratio, advantages) and L.use_triton(values)
            and values.dtype == rewards.dtype == ratio.dtype == advantages.dtype)
