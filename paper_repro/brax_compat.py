"""Brax's PPO advantage (``brax.training.agents.ppo.losses.compute_gae``) with its name,
signature and readings, for its PyTorch ports: swap the import and keep the call.

Brax drops a truncated step: its TD error and trace are masked, so the step before it
bootstraps from the truncated step's own value, and the step's target is its value and its
advantage zero. Brax's advantage is V-trace's with ratios of one: ``r_t + gamma (1 - term_t)
vs_{t+1} - V_t``, the trace decaying by lambda. So it is our V-trace with ``lambda_`` and
each truncation moved one step earlier (docs/conventions.md), then the truncated steps set.
"""
from __future__ import annotations

import torch

from paper_repro.kernels import _launch as L
from paper_repro.kernels.vtrace import compute_vtrace

__all__ = ["compute_gae"]


def compute_gae(truncation, termination, rewards, values, bootstrap_value, lambda_=1.0,
                discount=0.99):
    """``(vs, advantages)``, each ``[T, B]`` like ``rewards``.

    Args:
        truncation, termination: ``[T, B]``, 1 where step ``t`` ends its episode by a time
            limit (Brax: never both); bool, integer or floating.
        rewards, values: ``[T, B]`` floating; ``values[t] = V(s_t)``.
        bootstrap_value: ``[B]``, ``V(s_T)``.
        lambda_, discount: floats.
    """
    L.check_tensor("rewards", rewards)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [T, B], got {rewards.dim()}-d")
    L.check_tensor("values", values, like=rewards)
    for name, x in (("truncation", truncation), ("termination", termination)):
        L.check_tensor(name, x, like=rewards, flag=True)
    L.check_tensor("bootstrap_value", bootstrap_value, like=rewards, shape=rewards.shape[1:])
    lambda_, discount = L.check_scalar("lambda_", lambda_), L.check_scalar("discount", discount)
    cut = truncation.to(values.dtype)
    # the step before a truncation ends the episode there, bootstrapping from V(s_t)
    earlier = torch.cat([cut[1:], torch.zeros_like(cut[:1])])
    next_values = torch.cat([values[1:], bootstrap_value[None].to(values.dtype)])
    same = torch.zeros_like(values)  # ratios of one
    vs, advantages = compute_vtrace(same, same, values, rewards, termination, earlier, discount,
                                    1.0, 1.0, next_values, lambda_=lambda_, time_dim=0)
    kept = 1 - cut
    return vs * kept + values * cut, advantages * kept
