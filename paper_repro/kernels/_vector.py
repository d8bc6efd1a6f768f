"""Loads of 64-bit words in the layout of the addresses given, not the one Triton would choose.

With Triton 3.6, ``tl.load`` of words two apart a step (fp32 Retrace's four actions) gets a
layout of one step a thread, and the tile's runs of steps then reach them through shared
memory: the fp32 walk compiles to 16 layout conversions and 29 block barriers a tile, against
4 and 5 with the words loaded here (data/h200/sass_words.csv). Inline assembly keeps each
thread's own steps: one 16-byte load a step for a word pair. Under the interpreter, which runs
no inline assembly, the same words come from ``tl.load``.
"""
import triton
import triton.language as tl

from paper_repro.kernels._launch import INTERPRETED

ASM_LOADS: tl.constexpr = tl.constexpr(not INTERPRETED)


@triton.jit
def word_pair(ptr, offs, mask):
    """``(ptr[offs], ptr[offs + 1])`` of int64 words, 0 where ``mask`` is false; ``ptr + offs``
    must be 16-byte aligned where ``mask`` holds."""
    if ASM_LOADS:
        first, second = tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $3, 0; mov.b64 $0, 0; mov.b64 $1, 0; "
            "@p ld.global.v2.b64 {$0, $1}, [$2]; }",
            "=l,=l,l,r", [(ptr + offs).to(tl.int64, bitcast=True), mask.to(tl.int32)],
            dtype=(tl.int64, tl.int64), is_pure=True, pack=1)
    else:
        first = tl.load(ptr + offs, mask=mask, other=0)
        second = tl.load(ptr + offs + 1, mask=mask, other=0)
    return first, second


@triton.jit
def word_at(ptr, offs, mask):
    """``ptr[offs]`` of int64 words, 0 where ``mask`` is false (a gather: one 8-byte load a
    thread's element)."""
    if ASM_LOADS:
        word = tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b64 $0, 0; @p ld.global.b64 $0, [$1]; }",
            "=l,l,r", [(ptr + offs).to(tl.int64, bitcast=True), mask.to(tl.int32)],
            dtype=tl.int64, is_pure=True, pack=1)
    else:
        word = tl.load(ptr + offs, mask=mask, other=0)
    return word
