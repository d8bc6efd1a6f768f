"""L2 prefetch hints: a walking program asks for a later tile's bytes while it scans this one,
so their DRAM latency overlaps the scan without holding the values in registers. One thread
issues one bulk request a span (``cp.async.bulk.prefetch.L2``, sm_90's copy engine): requests
a cache line each (``prefetch.global.L2``, replicated across a block's warps) cost the load
pipe more than they saved (Retrace 512x4096: 1.35x the time). A hint changes no value: under
the interpreter, which runs no inline assembly, it is left out.
"""
import functools

import torch
import triton
import triton.language as tl

from paper_repro.kernels._launch import INTERPRETED

HINTS: tl.constexpr = tl.constexpr(not INTERPRETED)


@functools.cache
def bulk_prefetch(device: torch.device) -> bool:
    """Whether ``device`` runs the bulk L2 prefetch: CUDA from sm_90 (the interpreter, which
    leaves hints out, takes any device)."""
    if INTERPRETED:
        return True
    return device.type == "cuda" and torch.version.hip is None and \
        torch.cuda.get_device_capability(device)[0] >= 9


@triton.jit
def _bulk_request(start, size):
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [start, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_span(ptr, start, count):
    """Request into L2 ``ptr[start : start + count]`` (contiguous elements), widened to 16-byte
    bounds, as one bulk request from the block's first thread; nothing where ``count <= 0``."""
    if HINTS:
        size: tl.constexpr = (ptr.dtype.element_ty.primitive_bitwidth + 7) // 8
        lo = (ptr + start).to(tl.int64, bitcast=True)
        hi = lo + tl.maximum(count, 0).to(tl.int64) * size
        lo = lo // 16 * 16
        hi = (hi + 15) // 16 * 16
        _bulk_request(lo, (hi - lo).to(tl.int32))
