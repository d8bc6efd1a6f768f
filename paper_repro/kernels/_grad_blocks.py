"""What the fused gradient kernels (``vtrace_grad``, ``retrace_grad``, ``returns_grad``)
share: the block of elements each program takes in the rows' memory order, float32 (hi, lo)
scalars in the accumulation dtype, and dense work tensors in the inputs' order."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro.kernels import _launch as L

BLOCK = 1024


@triton.jit
def acc_scalar(hi, lo, ACC: tl.constexpr):
    return tl.cast(hi, ACC) + tl.cast(lo, ACC)


@triton.jit
def block_steps(B, T, TIME_MAJOR: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """(row, step, in range) of this program's BLOCK elements, taken in the work tensors'
    memory order (time-major: rows fastest) so that every load is coalesced; in 64 bits where
    ``WIDE`` (``Work.wide``), so that no index or offset wraps."""
    start = tl.program_id(0)
    n = B * T
    if WIDE:
        start = start.to(tl.int64)
        n = tl.cast(B, tl.int64) * T
    i = start * BLOCK + tl.arange(0, BLOCK)
    if TIME_MAJOR:
        b, t = i % B, i // B
    else:
        b, t = i // T, i % T
    return b, t, i < n


class Work:
    """Dense ``[B, T]`` tensors of dtype ``acc`` in the order of ``like`` (time-major or not)."""

    def __init__(self, like: torch.Tensor, acc: torch.dtype):
        self.B, self.T = like.shape
        self.acc, self.device = acc, like.device
        self.time_major = L.is_time_major(like.stride())

    def wide(self, *tensors: torch.Tensor) -> bool:
        """The kernels' ``WIDE``: whether ``B * T`` or an element offset of any of ``tensors``
        reaches ``L.OFFSET_LIMIT`` (int32 would wrap)."""
        return self.B * self.T >= L.OFFSET_LIMIT or any(
            sum((n - 1) * abs(s) for n, s in zip(x.shape, x.stride())) >= L.OFFSET_LIMIT
            for x in tensors if x is not None)

    def empty(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Uninitialised, of ``dtype`` (default ``acc``): a kernel storing a gradient in its
        input's dtype rounds as ``.to`` would, with no conversion launch."""
        dtype = dtype or self.acc
        if self.time_major:
            return torch.empty(self.T, self.B, dtype=dtype, device=self.device).t()
        return torch.empty(self.B, self.T, dtype=dtype, device=self.device)

    def dense(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` itself where it already has the work strides, else a dense copy in its dtype."""
        strides = (1, self.B) if self.time_major else (self.T, 1)
        return x if x.stride() == strides else self.empty(x.dtype).copy_(x)

    def grid(self, block: int = BLOCK) -> tuple:
        return (triton.cdiv(self.B * self.T, block),)
