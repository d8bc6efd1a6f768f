"""The affine scan in plain torch: the CPU path when Triton kernels are not available.

Vectorised over rows; time is cut into chunks scanned by doubling (log2 C steps), and the
chunk aggregates are scanned recursively, so the depth is O(log T) torch ops.
"""
from __future__ import annotations

import torch

CHUNK = 64


def _inclusive_doubling(a: torch.Tensor, b: torch.Tensor):
    """Forward inclusive scan along the last axis: (a, b) composed left to right."""
    step = 1
    while step < a.shape[-1]:
        a_prev, b_prev = a[..., :-step], b[..., :-step]
        a = torch.cat([a[..., :step], a[..., step:] + b[..., step:] * a_prev], dim=-1)
        b = torch.cat([b[..., :step], b[..., step:] * b_prev], dim=-1)
        step *= 2
    return a, b


def _forward_scan(alpha: torch.Tensor, beta: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    n, T = alpha.shape
    if T <= CHUNK:
        a, b = _inclusive_doubling(alpha, beta)
        return a + b * seed[:, None]
    pad = (-T) % CHUNK
    if pad:
        alpha = torch.cat([alpha, alpha.new_zeros(n, pad)], dim=1)
        beta = torch.cat([beta, beta.new_ones(n, pad)], dim=1)
    a, b = _inclusive_doubling(alpha.reshape(n, -1, CHUNK), beta.reshape(n, -1, CHUNK))
    # Value at each chunk's end, then the value entering each chunk.
    ends = _forward_scan(a[..., -1], b[..., -1], seed)
    entering = torch.cat([seed[:, None], ends[:, :-1]], dim=1)
    out = a + b * entering[..., None]
    return out.reshape(n, -1)[:, :T]


def torch_affine_scan(alpha: torch.Tensor, beta: torch.Tensor, carry: torch.Tensor,
                      reverse: bool) -> torch.Tensor:
    """Solve ``A_t = alpha_t + beta_t A_{t+-1}`` on [N, T] with boundary ``carry`` [N]."""
    if alpha.shape[-1] == 0:
        return alpha.clone()
    if reverse:
        return _forward_scan(alpha.flip(-1), beta.flip(-1), carry).flip(-1)
    return _forward_scan(alpha, beta, carry)
