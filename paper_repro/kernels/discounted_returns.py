"""Discounted returns: the TD(lambda) kernel at lambda = 1 (SPEC.md 1.5).

proofs/discounted_returns.py derives it.

alpha_t = r_t + gamma trunc_t b_t,  beta_t = gamma (1 - done_t),  G_T = b_{T-1}.
"""
from __future__ import annotations

from paper_repro.kernels.lambda_returns import returns


def compute_discounted_returns(rewards, terminateds, truncateds=None, gamma=0.99,
                               bootstrap_values=None, *, time_dim=-1, validate=False):
    """Reward-to-go ``G_t = r_t + gamma (1 - done_t) G_{t+1}`` with truncation bootstraps.

    Args:
        rewards: ``[..., T, ...]`` floating, time on ``time_dim``.
        terminateds, truncateds: step ``t`` ends its episode; a truncated step adds
            ``gamma b_t``. Default truncateds: None.
        gamma: Default: 0.99.
        bootstrap_values: read at truncated steps; its last column is the carry G_T.
        validate: check flag values (synchronises).
    Returns:
        ``G`` shaped like ``rewards``.

    Example:
        >>> import torch
        >>> compute_discounted_returns(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2), gamma=0.9)
        tensor([[2.8000, 2.0000]])
    """
    return returns(rewards, None, terminateds, truncateds, gamma, 1.0, bootstrap_values,
                   time_dim, validate)
