"""L2 prefetch hints: a walking program asks for a later tile's cache lines while it scans
this one, so their DRAM latency overlaps the scan without holding the values in registers
(``prefetch.global.L2``; SASS ``CCTL.E.PF2``). A hint changes no value: under the
interpreter, which runs no inline assembly, it is left out.
"""
import triton
import triton.language as tl

from paper_repro.kernels._launch import INTERPRETED

HINTS: tl.constexpr = tl.constexpr(not INTERPRETED)
LINE: tl.constexpr = tl.constexpr(128)  # bytes of an L2 request, as the loads make them


@triton.jit
def _request_lines(ptrs, want):
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, want.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_span(ptr, start, count, MAX_COUNT: tl.constexpr):
    """Request into L2 every line of ``ptr[start : start + count]`` (contiguous elements,
    ``count`` at most MAX_COUNT), one address a 128-byte line and the span's last element."""
    if HINTS:
        size: tl.constexpr = (ptr.dtype.element_ty.primitive_bitwidth + 7) // 8
        per_line: tl.constexpr = LINE // size
        lines: tl.constexpr = MAX_COUNT * size // LINE
        k = tl.arange(0, 2 * lines if lines > 0 else 2) * per_line
        last = count - 1
        _request_lines(ptr + start + tl.minimum(k, last), k < last + per_line)
