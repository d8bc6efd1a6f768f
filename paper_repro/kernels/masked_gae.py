"""GAE over token sequences whose masked steps pass the carry through: multi-turn RLHF, where
observation or tool-output tokens sit between the policy's own tokens (verl's and NeMo-RL's
masked GAE). Two scans of the engine, no Python loop over time."""
from __future__ import annotations

import torch

from paper_repro.kernels import _launch as L
from paper_repro.kernels.affine_scan import affine_scan


def compute_masked_gae(rewards, values, mask, gamma, lambda_, last_value=None, *, time_dim=-1):
    """Advantages in which steps with ``mask`` 0 are skipped: their reward and value do not
    enter, and both the advantage and the next value pass through them unchanged.

    ``A_t = m_t (r_t + gamma V'_t - V_t + gamma lambda A_{t+1}) + (1 - m_t) A_{t+1}``, ``A_T = 0``,
    where ``V'_t`` is the value of the first unmasked step after ``t`` (``last_value`` past the
    window). ``V'`` is itself a scan, ``X_t = m_t V_t + (1 - m_t) X_{t+1}``, ``X_T =
    last_value``, ``V'_t = X_{t+1}``; both are linear in ``m``, so a float mask interpolates.
    One sequence a row (no episode flags); with every step unmasked this is :func:`compute_gae`
    without terminations, and with zero values and ``lambda_ = 1`` it is the masked discounted
    return (REINFORCE's per-token return over the policy's tokens).

    Args:
        rewards, values: ``[..., T, ...]`` floating, time on ``time_dim``.
        mask: same shape; bool, integer or float, 1 where the step is the policy's.
        gamma, lambda_: discount and trace decay (required: RLHF usually takes gamma = 1).
        last_value: value past the window, batch shape. Default: zeros.
    Returns:
        Advantages shaped like ``rewards``, in the inputs' promoted dtype (fp32 arithmetic for
        16-bit inputs). Masked steps hold the advantage of the next unmasked step.

    Example:
        >>> import torch
        >>> r = torch.tensor([[0.0, 5.0, 1.0]])
        >>> v = torch.tensor([[0.5, 9.0, 0.25]])
        >>> compute_masked_gae(r, v, torch.tensor([[1, 0, 1]]), 1.0, 1.0)
        tensor([[0.5000, 0.7500, 0.7500]])
    """
    L.check_tensor("rewards", rewards)
    L.check_tensor("values", values, like=rewards)
    L.check_tensor("mask", mask, like=rewards, flag=True)
    gamma = L.check_scalar("gamma", gamma)
    lambda_ = L.check_scalar("lambda_", lambda_)
    axis = L.time_axis(rewards, time_dim)
    L.check_tensor("last_value", last_value, like=rewards, optional=True,
                   shape=lambda: L.batch_shape(rewards, axis))
    out_dtype = L.result_dtype(rewards, values, last_value)
    work = L.acc_dtype(out_dtype)
    r, v, m = (x.movedim(axis, -1).to(work) for x in (rewards, values, mask))
    last = None if last_value is None else last_value.to(work)
    if r.shape[-1] == 0:
        return torch.empty_like(rewards, dtype=out_dtype)
    seen = affine_scan(m * v, 1 - m, initial=last)  # X_t: the value of the first unmasked s >= t
    after = seen.new_zeros(seen.shape[:-1]) if last is None else last
    next_value = torch.cat([seen[..., 1:], after.unsqueeze(-1)], -1)
    alpha = m * (r + gamma * next_value - v)
    beta = m * (gamma * lambda_) + (1 - m)
    return affine_scan(alpha, beta).to(out_dtype).movedim(-1, axis)
