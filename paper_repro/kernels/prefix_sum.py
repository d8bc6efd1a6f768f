"""Episodic prefix sum: the decayed-sum kernel with decay 1 (SPEC.md 1.7; proofs/prefix_sum.py).

ends_at: beta_t = 1 - d_{t-1};  starts_at: beta_t = 1 - d_t;  C_{-1} = seed.
"""
from __future__ import annotations

from paper_repro.kernels.eligibility_traces import decayed_sum

BOUNDARIES = ("ends_at", "starts_at")


def compute_episodic_prefix_sum(inputs, dones, seed_values=None, boundary="ends_at", *,
                                time_dim=-1, validate=False):
    """Running sum that restarts at episode boundaries: ``C_t = x_t + (1 - d) C_{t-1}``.

    Args:
        inputs: ``[..., T, ...]`` floating, time on ``time_dim``.
        dones: bool, integer or float flags, same shape.
        seed_values: incoming sum per row (batch shape). Default: zeros.
        boundary: ``"ends_at"`` (a flag marks an episode's last step; the sum restarts at
            t+1, the RL convention) or ``"starts_at"`` (a flag marks a segment's first step,
            sequence packing; a flag at t = 0 drops the seed). Default: ``"ends_at"``.
        validate: check flag values (synchronises).
    Returns:
        ``C`` shaped like ``inputs``.

    Example:
        >>> import torch
        >>> x, d = torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([[1.0, 0.0, 1.0, 0.0]])
        >>> compute_episodic_prefix_sum(x, d, torch.tensor([10.0]))
        tensor([[11.,  2.,  5.,  4.]])
    """
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be 'ends_at' or 'starts_at', got {boundary!r}")
    return decayed_sum("inputs", inputs, dones, 1.0, seed_values, boundary == "ends_at",
                       time_dim, validate)
