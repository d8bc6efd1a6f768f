"""EnvPool's GAE for asynchronous collection (``examples/ppo_atari/gae.py``) with its name,
signature and readings: swap the import and keep the call.

In async mode each ``[T, B]`` slot holds a step of whichever env answered (``env_id``), so an
env's steps are scattered over the buffer. A stable sort by env id makes each env's steps one
contiguous run in time order; the runs are scanned as one row, each ending at its env's last
step in the buffer, which has no successor (bootstrap 0, left out by ``mask``); the results go
back to their slots. No host synchronisation: no per-env lengths are read.
"""
from __future__ import annotations

import torch

from paper_repro.kernels import _launch as L
from paper_repro.kernels.gae import compute_gae as _gae

__all__ = ["compute_gae"]


def compute_gae(gamma, gae_lambda, value, reward, done, env_id, numenv=None):
    """``(returns, advantages, mask)``, each ``[T, B]`` like ``value``.

    Args:
        gamma, gae_lambda: floats.
        value, reward: ``[T, B]`` floating; ``done``: ``[T, B]``, step ends its episode.
        env_id: ``[T, B]`` integer, the env whose step the slot holds (each env at most once
            a row).
        numenv: the number of envs (EnvPool's loop sizes its tables by it; unused here).
    Returns:
        ``returns = advantages + value``; ``mask`` 1 where the step's episode ended or the
        env has a later step in the buffer, 0 at the steps cut short by the buffer's end.
    """
    L.check_tensor("value", value)
    if value.dim() != 2:
        raise ValueError(f"value must be [T, B], got {value.dim()}-d")
    L.check_tensor("reward", reward, like=value)
    L.check_tensor("done", done, like=value, flag=True)
    L.check_tensor("env_id", env_id, like=value, floating=False)
    if env_id.dtype.is_floating_point or env_id.dtype.is_complex or env_id.dtype == torch.bool:
        raise TypeError(f"env_id must be an integer tensor, got {env_id.dtype}")
    gamma, gae_lambda = L.check_scalar("gamma", gamma), L.check_scalar("gae_lambda", gae_lambda)
    ids = env_id.reshape(-1)  # slot order t * B + b: time order within each env
    order = torch.argsort(ids, stable=True)
    sorted_ids = ids[order]
    last = torch.ones_like(sorted_ids, dtype=torch.bool)
    last[:-1] = sorted_ids[1:] != sorted_ids[:-1]
    ended = done.reshape(-1)[order].bool()
    adv_sorted = _gae(reward.reshape(-1)[order][None], value.reshape(-1)[order][None],
                      (ended | last)[None], None, gamma, gae_lambda)[0]
    advantages = torch.empty_like(adv_sorted)
    advantages[order] = adv_sorted
    mask = torch.empty_like(ended)
    mask[order] = ended | ~last
    advantages = advantages.view(value.shape)
    return advantages + value, advantages, mask.view(value.shape).to(value.dtype)
