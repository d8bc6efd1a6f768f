"""The engine: one tiled affine scan that every estimator builds on (proofs/scan_operator.py).

Each program owns ``BLOCK_B`` rows and walks a segment of time in tiles of ``BLOCK_T``,
scanning each tile with ``tl.associative_scan`` and carrying the boundary value to the next
tile, so any T is one pass. With too few rows to fill the GPU, time is cut into segments:
PHASE 1 stores each segment's aggregate ``(a, b)``, PHASE 2 composes the later segments'
aggregates into its incoming carry and scans (reduce-then-scan). PHASE 0 is the one-pass case,
PHASE 5 (``ONE_TILE``) the one-pass case whose every program holds one tile: no loop, no carry
out, no next tile.
PHASE 3 is the single-pass split: one tile per program, programs numbered in scan order (by
launch index on CUDA, by a ticket counter elsewhere: ``IN_LAUNCH_ORDER``); each publishes its
tile's aggregate, then looks back over its predecessors' published aggregates (a window at a
time) to the nearest inclusive prefix (decoupled look-back), so the inputs are read once.
PHASE 4 looks back over segments of several tiles: a program sweeps its segment twice,
reducing, then (after the look-back) scanning and storing, so its second read of the inputs
follows the first closely. PHASE 6 (``WALKED_LOOK_BACK``) is PHASE 3 with its one tile walked
as a runtime-length segment, for the tiles that scheduled worse unrolled. PHASE 7 and 8
(``SCAN_LOCAL``, ``FIX``) scan, then fix: see below.

With ``PREFETCH`` (several tiles per program, few warps) the next tile's inputs are loaded
before this tile is scanned, so its memory latency overlaps the scan: 5-17 % off the long-row
shapes on the H200 (data/h200/prefetch_probe.csv); without it they are loaded after this
tile's store. Loaded values stay unconverted until used, since converting them would wait for
the loads.

Conventions (SPEC.md section 0): backward ``A_t = alpha_t + beta_t A_{t+1}`` with ``A_T = carry``;
forward ``A_t = alpha_t + beta_t A_{t-1}`` with ``A_{-1} = seed``. Padded lanes are the
identity ``(0, 1)``. Estimator kernels reuse the jit helpers below in the same loop shape.
"""
import os
from dataclasses import replace
from typing import Optional

import torch
import triton
import triton.language as tl

from paper_repro.coefficients import Coefficients
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan as P
from paper_repro.kernels._links import links
from paper_repro.kernels.torch_scan import torch_affine_scan

TL_ACC = {torch.float32: tl.float32, torch.float64: tl.float64}
WORDS = {torch.float32: torch.int32, torch.float64: torch.int64}  # look-back scratch words


def _in_launch_order() -> bool:
    """Whether look-back programs take their place from the launch index. CUDA dispatches a
    grid's blocks in increasing index, so a program's predecessors have all started (CUB's
    single-pass scan rests on the same order). Elsewhere (ROCm), or with
    ``PAPER_REPRO_LOOKBACK_TICKETS=1``, a ticket from an atomic counter gives that order
    whatever the dispatch, one atomic's latency later in each program's life."""
    return torch.version.hip is None and os.environ.get("PAPER_REPRO_LOOKBACK_TICKETS") != "1"


@triton.jit
def combine(a_l, b_l, a_r, b_r):
    # (a_l, b_l) is applied first (nearer the carry), then (a_r, b_r).
    return a_r + b_r * a_l, b_l * b_r


@triton.jit
def combine_right_first(a_l, b_l, a_r, b_r):
    # The opposite order: a forward scan composes f_0(f_1(...f_j)), entry 0 applied last,
    # without the lane reversals of Triton's reverse scan.
    return combine(a_r, b_r, a_l, b_l)


# Predecessors a look-back inspects at once: 32 for one-row blocks (64 and 128: 1.00-1.30x the
# time at the long rows, data/h200/row_window.csv); 8 for wider row blocks,
# whose window of [W, BLOCK_B] words a thread holds in registers (time-major 512 x 4096,
# 32 x 128 look-back tiles: prefix sum 13.6 -> 10.5 us, GAE 15.3 -> 12.7; data/h200/
# engine_window.csv). PAPER_REPRO_LOOKBACK_WINDOW sets both for an A/B (a power of two),
# PAPER_REPRO_LOOKBACK_ROW_WINDOW the one-row window alone.
_WINDOW_ENV = os.environ.get("PAPER_REPRO_LOOKBACK_WINDOW")
WINDOW: tl.constexpr = tl.constexpr(
    int(os.environ.get("PAPER_REPRO_LOOKBACK_ROW_WINDOW") or _WINDOW_ENV or 32))
BLOCK_WINDOW: tl.constexpr = tl.constexpr(int(_WINDOW_ENV or 8))
# Look-back programs in launch-index order (True) or by ticket (False); tests run both.
IN_LAUNCH_ORDER: tl.constexpr = tl.constexpr(_in_launch_order())
# Reducing sweeps may take their segment's tiles against scan order (``against_scan_order``);
# PAPER_REPRO_REDUCE_IN_ORDER=1 keeps scan order everywhere (the A/B's other arm).
REDUCE_AGAINST_ORDER: tl.constexpr = tl.constexpr(
    os.environ.get("PAPER_REPRO_REDUCE_IN_ORDER") != "1")
# The second of two passes may take its segments last first, to start on those the first pass
# read last; it lost (1.09-1.15x the time at 1 x 4194304 and 4 x 1048576, data/h100/
# segwindow.csv), and PAPER_REPRO_SECOND_PASS_LAST_FIRST=1 keeps that A/B's arm.
SECOND_PASS_LAST_FIRST: tl.constexpr = tl.constexpr(
    os.environ.get("PAPER_REPRO_SECOND_PASS_LAST_FIRST") == "1")
# One pass, one tile a program (T <= BLOCK_T): the sweep is unrolled once, so the outgoing
# carry and the next tile's loads, dead there, leave the kernel (sm_90 GAE 1 x 512: fewer
# instructions and block barriers, data/h200/sass_counts.csv). The one-tile look-back (PHASE
# 3) takes the same single tile.
ONE_TILE: tl.constexpr = tl.constexpr(5)
# PHASE 3 walking its tile as a segment of runtime length: the returns kernel's one-warp
# look-back tile of 1024 steps ran TD(lambda) 9-13 % slower unrolled despite fewer registers,
# discounted returns no faster (data/h200/one_tile_ab.csv); GAE's 16-bit rows and V-trace's
# several-row and 16-bit tiles likewise (look_back_tile_ab.csv, docs/engine.md).
WALKED_LOOK_BACK: tl.constexpr = tl.constexpr(6)
# Tiles held as runs of up to 8 steps enter each run with the carry applied (it is known
# before the runs are solved): one multiply-add a step, not the three of xa + xb * carry
# (data/h200/sass_carry.csv; time-major GAE 512x4096 0.87x the time on an H100,
# data/h100/carry_first_ab.csv). Runs of 16 keep the carry last (1.05x), and so do the tiles
# whose kernel passes CARRY_FIRST false (V-trace's interleaved runs of 8, Retrace's batch-major
# 128-step tiles). The A/B's arms:
# PAPER_REPRO_RUNS_CARRY_FIRST=0 carry last everywhere, =1 first everywhere, unset the rule.
RUNS_CARRY_FIRST: tl.constexpr = tl.constexpr(
    {"0": 0, "1": 1}.get(os.environ.get("PAPER_REPRO_RUNS_CARRY_FIRST", ""), -1))
# Two passes that scan, then fix (``ScanConfig.fix_steps``, forced tiles only): the first scans
# each segment from a zero carry and stores the tiles after the segment's coefficient product
# turns zero (in scan order), which no carry reaches; the second rescans, with the true carry,
# only the steps before them, in tiles of its own. With early terminations the inputs are read
# about once, yet it lost to the shipped splits on an H100 (data/h100/fix_ab.csv: a first pass
# that scans and stores from DRAM streams slower than a reduce and a scan from L2).
SCAN_LOCAL: tl.constexpr = tl.constexpr(7)
FIX: tl.constexpr = tl.constexpr(8)
# Aggregates a fixing program composes in one round (its segment's predecessors in a row)
FIX_WINDOW: tl.constexpr = tl.constexpr(512)
# Publish every tile's inclusive prefix; tests turn it off (interpreter) so that each look-back
# walks past the first tile across several windows, which in-order execution never does.
SHORTCUT: tl.constexpr = tl.constexpr(True)


@triton.jit
def clear_spare(spare_ptr, B, n_seg, BLOCK_B: tl.constexpr):
    """Zero this program's share of the first ``1 + 3 B n_seg`` words of ``spare_ptr``, the
    scratch the previous look-back on this stream read, so that the next finds it zero
    (``_links.py``): ``4 BLOCK_B`` words a program cover them with no division. Kept in L2
    (``evict_last``) through the call's streaming in between, so that the next call publishes
    and polls there: 0.90-0.97x the time of a fill each call at most look-back shapes, against
    0.93-1.03x without the hint (data/h200/links_ab.csv)."""
    span: tl.constexpr = 4 * BLOCK_B
    offs = tl.program_id(0) * span + tl.arange(0, span)
    tl.store(spare_ptr + offs, tl.zeros([span], spare_ptr.dtype.element_ty),
             mask=offs < 1 + 3 * B * n_seg, eviction_policy="evict_last")


@triton.jit
def program_ids(status_ptr, B, n_seg, PHASE: tl.constexpr, REVERSE: tl.constexpr,
                BLOCK_B: tl.constexpr, LAUNCH_ORDER: tl.constexpr):
    """(row block, time segment) of this program. PHASE 3 and 4 number programs in scan order,
    so that every program a running one waits on has already started: by launch index where
    the dispatch follows it (``IN_LAUNCH_ORDER``) and the kernel asks for it
    (``LAUNCH_ORDER``), else by a ticket (the first word of ``status_ptr``)."""
    if (PHASE == WALKED_LOOK_BACK) | (PHASE == 3) | (PHASE == 4):
        # Nested static branches (an ``and`` of constexprs is not static in every Triton).
        if LAUNCH_ORDER:
            if IN_LAUNCH_ORDER:
                # no atomic before the tile's loads: 0.86-0.98x the ticket's time at 64 x
                # 131072 and 16 x 524288 (TD(lambda) fp32 64 x 131072 1.02x; Retrace, which
                # lost, keeps the ticket: data/h200/launch_order.csv)
                ticket = tl.program_id(0)
            else:
                ticket = tl.atomic_add(status_ptr, 1, sem="relaxed")
        else:
            # relaxed: the ticket only orders programs; published words carry their readiness
            ticket = tl.atomic_add(status_ptr, 1, sem="relaxed")
        n_rb = tl.cdiv(B, BLOCK_B)
        pid_b = ticket % n_rb
        order = ticket // n_rb
        if REVERSE:
            pid_s = n_seg - 1 - order
        else:
            pid_s = order
    else:
        pid_b = tl.program_id(0)
        pid_s = tl.program_id(1)
        if PHASE == 2:  # noqa: SIM102 (static branches)
            if SECOND_PASS_LAST_FIRST:
                pid_s = n_seg - 1 - pid_s
    return pid_b, pid_s


@triton.jit
def row_block(pid_b, B, BLOCK_B: tl.constexpr):
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    return rows.to(tl.int64), rows < B


@triton.jit
def aligned_layout(B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN: tl.constexpr):
    """The layout's ints, with the host's word that the contiguous axis's extent and the other
    strides are multiples of ``|ALIGN|`` (``L.alignment``; 0: no word): ``ALIGN > 1`` batch-major
    (T, ``stride_b``, ``out_stride_b``), ``ALIGN < -1`` time-major (B, ``stride_t``,
    ``out_stride_t``). Triton only knows multiples of 16, so rows of 100 steps otherwise load one
    value at a time; ``x // A * A`` is ``x`` here, and tells the compiler. ``ALIGN == 1``
    (``L.WIDE_OFFSETS``): the step strides in 64 bits, so that ``t * stride_t`` cannot wrap."""
    if ALIGN == 1:
        stride_t = tl.cast(stride_t, tl.int64)
        out_stride_t = tl.cast(out_stride_t, tl.int64)
    if ALIGN > 1:
        T = T // ALIGN * ALIGN
        stride_b = stride_b // ALIGN * ALIGN
        out_stride_b = out_stride_b // ALIGN * ALIGN
    if ALIGN < -1:
        A: tl.constexpr = -ALIGN
        B = B // A * A
        stride_t = stride_t // A * A
        out_stride_t = out_stride_t // A * A
    return B, T, stride_b, stride_t, out_stride_b, out_stride_t


@triton.jit
def segment_chunks(pid_s, T, seg_len, BLOCK_T: tl.constexpr, PHASE: tl.constexpr):
    """(first step, tiles) of this program's segment; a compile-time 1 tile under ONE_TILE and
    in the one-tile look-back (PHASE 3, whose segment is its tile)."""
    t_begin = pid_s * seg_len
    if (PHASE == ONE_TILE) | (PHASE == 3):
        n_chunks = 1
    else:
        n_chunks = tl.cdiv(tl.minimum(T, t_begin + seg_len) - t_begin, BLOCK_T)
    return t_begin, n_chunks


@triton.jit
def chunk_times(i, t_begin, n_chunks, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr,
                FLIP: tl.constexpr, against):
    """Times of the i-th tile's columns. Backward scans with ``FLIP = R > 0`` hold the tile as
    runs of R ascending steps, latest run first, so that a forward scan runs backward in time:
    Triton's reverse scan reverses lanes and warps around a forward one. R = 1 is the latest
    step first, which cannot be vectorised along time; R = 4 keeps 128-bit loads. ``FLIP = -R``
    interleaves the runs, for tiles whose threads hold every G-th column (time-major).
    ``against``: the i-th tile against scan order (``against_scan_order``)."""
    i = tl.where(against, n_chunks - 1 - i, i)
    p = tl.arange(0, BLOCK_T)
    if REVERSE:
        first = t_begin + (n_chunks - 1 - i) * BLOCK_T
        if FLIP == 1:
            return first + BLOCK_T - 1 - p
        if FLIP > 1:
            return first + (BLOCK_T // FLIP - 1 - p // FLIP) * FLIP + p % FLIP
        if FLIP < 0:  # runs of -FLIP steps interleaved: column k * G + g is run g's step k
            G: tl.constexpr = BLOCK_T // -FLIP
            return first + (G - 1 - p % G) * -FLIP + p // G
        return first + p
    if FLIP < 0:  # forward: interleaved runs in time order, column k * G + g run g's step k
        G_F: tl.constexpr = BLOCK_T // -FLIP
        return t_begin + i * BLOCK_T + (p % G_F) * -FLIP + p // G_F
    return t_begin + i * BLOCK_T + p


@triton.jit
def tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                 BLOCK_T: tl.constexpr, REVERSE: tl.constexpr, FLIP: tl.constexpr,
                 against):
    """The i-th tile of this program's segment: times, mask and offsets [BLOCK_B, BLOCK_T]."""
    t = chunk_times(i, t_begin, n_chunks, BLOCK_T, REVERSE, FLIP, against)
    mask = row_mask[:, None] & (t < T)[None, :]
    return t, mask, rows[:, None] * stride_b + t[None, :] * stride_t


@triton.jit
def next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T, stride_b, stride_t,
              BLOCK_T: tl.constexpr, REVERSE: tl.constexpr, FLIP: tl.constexpr,
              against):
    """The (i+1)-th tile, masked off once past this program's segment (nothing is read)."""
    t, mask, offs = tile_offsets(i + 1, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                                 BLOCK_T, REVERSE, FLIP, against)
    inside = (t >= t_begin) & (t < t_begin + seg_len)
    return t, mask & inside[None, :], offs


@triton.jit
def store_tile(ptr, value, rows, t, mask, stride_b, stride_t, FOURS_BELOW: tl.constexpr = 0):
    """Store a tile as ``ptr``'s dtype; narrower than ``FOURS_BELOW`` bits four envs a store
    (``four_runs``), in the layout of a tile that loads four envs a load."""
    if ptr.dtype.element_ty.primitive_bitwidth < FOURS_BELOW:
        offs = four_runs(rows[:, None] * stride_b + t[None, :] * stride_t)
        tl.store(ptr + offs, value.to(ptr.dtype.element_ty), mask=mask)
    else:  # the pointer stepped twice, as before: other code (sm_90, V-trace: +3 % instructions)
        tl.store(ptr + rows[:, None] * stride_b + t[None, :] * stride_t,
                 value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def load_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC: tl.constexpr, ACC: tl.constexpr,
               FOURS_BELOW: tl.constexpr = 0):
    """(terminated, truncated) tiles as ACC floats; no truncations reads nothing."""
    term, trunc = raw_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC, FOURS_BELOW)
    return term.to(ACC), trunc.to(ACC)


@triton.jit
def four_runs(offs):
    """``offs`` itself, told to the compiler as runs of four envs (time-major rows of multiples
    of four envs, ``L.four_loads``): a load of values narrower than 4 bytes then takes four envs,
    as an fp32 tile holds them a thread, where the compiler would vectorise it wider (16 bytes:
    16 flags or 8 bf16 envs a thread) and lay the whole tile out for it (sm_90: up to 5.7x the
    instructions, and spills). fp32 loads keep their own offsets: runs of four there spilled
    under Triton 3.9."""
    return offs // 4 * 4 + offs % 4


@triton.jit
def step_load(ptr, offs, mask, FOURS_BELOW: tl.constexpr, OTHER: tl.constexpr = 0):
    """A tile of per-step values as stored (``OTHER`` where masked); those narrower than
    ``FOURS_BELOW`` bits (0: none) four envs a load (``four_runs``)."""
    if ptr.dtype.element_ty.primitive_bitwidth < FOURS_BELOW:
        return tl.load(ptr + four_runs(offs), mask=mask, other=OTHER)
    return tl.load(ptr + offs, mask=mask, other=OTHER)


@triton.jit
def raw_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC: tl.constexpr,
              FOURS_BELOW: tl.constexpr = 0):
    """(terminated, truncated) tiles as stored (no conversion, so no wait on the load)."""
    term = step_load(term_ptr, offs, mask, FOURS_BELOW)
    if HAS_TRUNC:
        trunc = step_load(trunc_ptr, offs, mask, FOURS_BELOW)
    else:
        trunc = tl.zeros_like(term)
    return term, trunc


@triton.jit
def column(x, col, BLOCK_T: tl.constexpr):
    cols = tl.arange(0, BLOCK_T)
    return tl.sum(tl.where(cols[None, :] == col, x, 0.0), axis=1)


@triton.jit
def scan_tile(alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B, n_seg,
              PHASE: tl.constexpr, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr,
              FLIP: tl.constexpr, CARRY_FIRST: tl.constexpr):
    """Scan a [BLOCK_B, BLOCK_T] tile entered with ``carry`` (PHASE 3: the carry is found by
    look-back, and ``carry`` is the boundary value). Returns (out, outgoing carry, the tile's
    beta product, incoming carry; with FLIP > 1, ``out`` one step later in time instead).
    ``CARRY_FIRST``: see ``scan_runs``."""
    # Nested static branches: boolean operators on constexprs are not constexprs in every
    # Triton version; one return, since Triton 3.6 checks every return's type.
    if REVERSE:
        if FLIP > 1:
            out, carry_out, b_edge, carry_in = scan_runs(
                alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, FLIP, False, True, CARRY_FIRST)
        elif FLIP < 0:
            out, carry_out, b_edge, carry_in = scan_runs(
                alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, -FLIP, True, True, CARRY_FIRST)
        else:
            out, carry_out, b_edge, carry_in = scan_in_order(
                alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, REVERSE, FLIP)
    elif FLIP < 0:
        out, carry_out, b_edge, carry_in = scan_runs(
            alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B, n_seg,
            PHASE, BLOCK_T, -FLIP, True, False, CARRY_FIRST)
    else:
        out, carry_out, b_edge, carry_in = scan_in_order(
            alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B, n_seg,
            PHASE, BLOCK_T, REVERSE, FLIP)
    return out, carry_out, b_edge, carry_in


@triton.jit
def against_scan_order(PHASE: tl.constexpr, SWEEP: tl.constexpr, BLOCK_B: tl.constexpr):
    """Whether this sweep takes its segment's tiles against scan order: it only reduces, so the
    scan that follows starts on the tiles read last. The segment look-back's first sweep
    (time-major 64 x 131072: GAE 0.92x the time, TD(lambda) 0.96x, the others 1.01x) and the
    two passes' first over one-row blocks (4 x 1048576: 0.92-0.96x; 1 x 4194304, fp32 and bf16,
    0.99-1.01x), not wider row blocks (time-major 512 x 4096: 1.01-1.05x, V-trace 0.97x;
    data/h200/reduce_order.csv)."""
    return REDUCE_AGAINST_ORDER & (((PHASE == 1) & (BLOCK_B == 1)) |
                                   ((PHASE == 4) & (SWEEP == 0)))


@triton.jit
def sweep_tile(alpha, beta, carry, agg_b, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
               n_seg, PHASE: tl.constexpr, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr,
               FLIP: tl.constexpr, against, CARRY_FIRST: tl.constexpr, SWEEP: tl.constexpr):
    """``scan_tile`` as one step of sweep ``SWEEP`` over the segment: returns (out, the sweep's
    carry and edge product after the tile, incoming carry). A sweep that only reduces (the
    first of two passes, the segment look-back's first sweep) composes the tile's maps and
    solves no step: its ``out`` and incoming carry are placeholders. A sweep ``against`` scan
    order composes each tile's own aggregate beyond those it holds, ``carry + agg_b * a``."""
    if (PHASE == 1) | ((PHASE == 4) & (SWEEP == 0)):
        tile_a, b_edge = reduce_tile(alpha, beta, BLOCK_T, REVERSE, FLIP)
        carry_out = tile_a + b_edge * tl.where(against, 0.0, carry)
        out = alpha
        if REVERSE & (FLIP > 1):
            carry_in = alpha  # scan_runs' shifted tile
        else:
            carry_in = carry
    else:
        out, carry_out, b_edge, carry_in = scan_tile(
            alpha, beta, tl.where(against, 0.0, carry), link_ptr, status_ptr, rows, row_mask,
            pid_b, pid_s, B, n_seg, PHASE, BLOCK_T, REVERSE, FLIP, CARRY_FIRST)
    return out, tl.where(against, carry + agg_b * carry_out, carry_out), agg_b * b_edge, carry_in


@triton.jit
def reduce_tile(alpha, beta, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr, FLIP: tl.constexpr):
    """The maps of a [BLOCK_B, BLOCK_T] tile composed in scan order, ``(a, b)`` per row (the
    tile takes carry c to a + b c), laid out as ``scan_tile`` takes them. Runs are composed
    in each thread's registers and only their aggregates scanned: half the values the scan of
    runs carries, and no step solved."""
    if (FLIP < 0) | (REVERSE & (FLIP > 1)):
        R: tl.constexpr = -FLIP if FLIP < 0 else FLIP
        _, _, ga, gb = run_aggregates(alpha, beta, BLOCK_T, R, FLIP < 0, REVERSE)
        ia, ib = tl.associative_scan((ga, gb), 1, combine)
        last = (tl.arange(0, BLOCK_T // R) == BLOCK_T // R - 1)[None, :]
        tile_a = tl.sum(tl.where(last, ia, 0.0), axis=1)
        tile_b = tl.sum(tl.where(last, ib, 0.0), axis=1)
    else:
        a, b, edge = in_order_prefixes(alpha, beta, BLOCK_T, REVERSE, FLIP)
        tile_a = column(a, edge, BLOCK_T)
        tile_b = column(b, edge, BLOCK_T)
    return tile_a, tile_b


@triton.jit
def in_order_prefixes(alpha, beta, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr,
                      FLIP: tl.constexpr):
    """Inclusive prefixes ``(a, b)`` of a tile in time order, or latest step first (FLIP = 1),
    taken in scan order, and the column where they end."""
    if REVERSE & (FLIP != 1):
        a, b = tl.associative_scan((alpha, beta), 1, combine, reverse=True)
        edge: tl.constexpr = 0
    else:
        a, b = tl.associative_scan((alpha, beta), 1, combine)
        edge: tl.constexpr = BLOCK_T - 1
    return a, b, edge


@triton.jit
def scan_in_order(alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                  n_seg, PHASE: tl.constexpr, BLOCK_T: tl.constexpr, REVERSE: tl.constexpr,
                  FLIP: tl.constexpr):
    """``scan_tile`` for tiles in time order, or latest step first (FLIP = 1)."""
    a, b, edge = in_order_prefixes(alpha, beta, BLOCK_T, REVERSE, FLIP)
    b_edge = column(b, edge, BLOCK_T)
    if (PHASE == WALKED_LOOK_BACK) | (PHASE == 3):
        carry = look_back(link_ptr, status_ptr, rows, row_mask, pid_s, B, n_seg,
                          column(a, edge, BLOCK_T), b_edge, carry, REVERSE)
    # The outgoing carry is a column of ``out``, one reduction on the loop's serial path. From
    # the tile's aggregate instead, it takes two reductions off that path: slower on the H200
    # (time-major 4096x128 eligibility traces 4.1 -> 5.0 us, 512x4096 prefix sum 6.1 -> 6.4).
    out = a + b * carry[:, None]
    return out, column(out, edge, BLOCK_T), b_edge, carry


@triton.jit
def run_step(x, k: tl.constexpr, R: tl.constexpr):
    """Step k of every run of a [BLOCK_B, G, R] tile as [BLOCK_B, G] (one thread's registers),
    in ``x``'s own dtype (flags stay flags)."""
    r = tl.arange(0, R)[None, None, :]
    return tl.sum(tl.where(r == k, x, tl.zeros_like(x)), axis=2).to(x.dtype)


@triton.jit
def neighbour_load(x, ptr, offs, mask, t, row_mask, T, stride_t, R: tl.constexpr,
                   LATER: tl.constexpr):
    """``ptr``'s tile one step later (``LATER``) or earlier in time than ``x``, 0 outside [0,
    T): ``x`` is ``ptr``'s tile at ``offs`` (times ``t``, loaded under ``mask`` with other=0),
    whose columns are runs of R ascending steps, R of them 16 bytes. A load one element off
    16-byte alignment cannot be vectorised (64x131072 prefix sums: 38.3 us with the flag at
    t-1, 34.4 with the flag at t); the tile one run away can (``neighbour``)."""
    if LATER:
        far = tl.load(ptr + offs + R * stride_t, mask=mask & (t + R < T)[None, :], other=0)
    else:
        # a run's first step may be in [0, T) while its last is not: row mask and bounds
        # instead of ``mask`` wherever t >= T
        near = (mask | (t >= T)[None, :]) & row_mask[:, None]
        far = tl.load(ptr + offs - R * stride_t, mask=near & ((t >= R) & (t - R < T))[None, :],
                      other=0)
    return neighbour(x, far, R, LATER)


@triton.jit
def neighbour(x, far, R: tl.constexpr, LATER: tl.constexpr):
    """A tile whose columns are runs of R ascending steps, one step later (``LATER``) or
    earlier in time: inside a run from ``x``'s own registers, at the run's edge from ``far``,
    the tile one run later (earlier), which shares ``x``'s layout."""
    BB: tl.constexpr = x.shape[0]
    G: tl.constexpr = x.shape[1] // R
    y = tl.reshape(x, [BB, G, R])
    z = tl.reshape(far, [BB, G, R])
    r = tl.arange(0, R)[None, None, :]
    out = tl.zeros_like(y)
    for k in tl.static_range(R):
        if LATER:
            if k == R - 1:
                step = run_step(z, 0, R)
            else:
                step = run_step(y, k + 1, R)
        else:
            if k == 0:
                step = run_step(z, R - 1, R)
            else:
                step = run_step(y, k - 1, R)
        out = tl.where(r == k, step[:, :, None], out)
    return tl.reshape(out, [BB, G * R])


@triton.jit
def combine_pair(ea_l, eb_l, ia_l, ib_l, ea_r, eb_r, ia_r, ib_r):
    # Exclusive and inclusive prefixes in one forward scan: a span's exclusive prefix is its
    # left part's inclusive one, then the right part's exclusive one (``combine`` written out:
    # the interpreter pays for every nested call, once per element).
    return ea_r + eb_r * ia_l, ib_l * eb_r, ia_r + ib_r * ia_l, ib_l * ib_r


@triton.jit
def scan_runs(alpha, beta, carry, link_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B, n_seg,
              PHASE: tl.constexpr, BLOCK_T: tl.constexpr, R: tl.constexpr,
              INTERLEAVED: tl.constexpr, REVERSE: tl.constexpr, CARRY_FIRST: tl.constexpr):
    """Scan of a tile held as runs of R ascending steps (backward: latest run first; forward:
    interleaved runs in time order): each thread composes its runs in registers, a forward
    scan across runs gives every run its incoming value, and the steps are then solved inside
    the thread in scan order. Runs of up to 8 steps are entered with the carry applied where
    the kernel passes ``CARRY_FIRST`` (``RUNS_CARRY_FIRST`` forces either way)."""
    G: tl.constexpr = BLOCK_T // R
    a, b, ga, gb = run_aggregates(alpha, beta, BLOCK_T, R, INTERLEAVED, REVERSE)
    ea, eb, ia, ib = tl.associative_scan((tl.zeros_like(ga), tl.zeros_like(gb) + 1.0, ga, gb), 1,
                                        combine_pair)
    last = (tl.arange(0, G) == G - 1)[None, :]
    agg_b = tl.sum(tl.where(last, ib, 0.0), axis=1)
    if (PHASE == WALKED_LOOK_BACK) | (PHASE == 3):
        carry = look_back(link_ptr, status_ptr, rows, row_mask, pid_s, B, n_seg,
                          tl.sum(tl.where(last, ia, 0.0), axis=1), agg_b, carry, REVERSE)
    FIRST: tl.constexpr = (RUNS_CARRY_FIRST == 1) | ((RUNS_CARRY_FIRST == -1) & CARRY_FIRST &
                                                     (R <= 8))
    if FIRST:
        out, later = solve_runs(a, b, ea + eb * carry[:, None], R, INTERLEAVED, REVERSE)
    else:
        out, later = solve_runs_carry_last(a, b, ea, eb, carry, R, INTERLEAVED, REVERSE)
    # The column whose value leaves the tile: the earliest step (backward), the latest
    # (forward; column BLOCK_T - 1 in either run order).
    if REVERSE:
        if INTERLEAVED:
            leaving = G - 1
        else:
            leaving = BLOCK_T - R
    else:
        leaving = BLOCK_T - 1
    return out, column(out, leaving, BLOCK_T), agg_b, later


@triton.jit
def run_aggregates(alpha, beta, BLOCK_T: tl.constexpr, R: tl.constexpr,
                   INTERLEAVED: tl.constexpr, REVERSE: tl.constexpr):
    """A tile's maps as [BLOCK_B, G, R] runs ``(a, b)`` and each run's maps composed in scan
    order in its thread's registers, ``(ga, gb)`` [BLOCK_B, G]."""
    BB: tl.constexpr = alpha.shape[0]
    G: tl.constexpr = BLOCK_T // R
    if INTERLEAVED:
        a = tl.permute(tl.reshape(alpha, [BB, R, G]), (0, 2, 1))
        b = tl.permute(tl.reshape(beta, [BB, R, G]), (0, 2, 1))
    else:
        a = tl.reshape(alpha, [BB, G, R])
        b = tl.reshape(beta, [BB, G, R])
    if REVERSE:
        ga = run_step(a, R - 1, R)
        gb = run_step(b, R - 1, R)
        for k in tl.static_range(R - 2, -1, -1):
            ga, gb = combine(ga, gb, run_step(a, k, R), run_step(b, k, R))
    else:
        ga = run_step(a, 0, R)
        gb = run_step(b, 0, R)
        for k in tl.static_range(1, R):
            ga, gb = combine(ga, gb, run_step(a, k, R), run_step(b, k, R))
    return a, b, ga, gb


@triton.jit
def runs_tile(x, INTERLEAVED: tl.constexpr):
    """A [BLOCK_B, G, R] tile of runs back in the [BLOCK_B, BLOCK_T] tile's column order."""
    if INTERLEAVED:
        x = tl.permute(x, (0, 2, 1))
    return tl.reshape(x, [x.shape[0], x.shape[1] * x.shape[2]])


@triton.jit
def solve_runs(a, b, x, R: tl.constexpr, INTERLEAVED: tl.constexpr, REVERSE: tl.constexpr):
    """Each step of the [BLOCK_B, G, R] runs of maps ``(a, b)`` solved in scan order from ``x``,
    the value entering each run, carry applied: (out, the value entering each step)."""
    r = tl.arange(0, R)[None, None, :]
    out = tl.zeros_like(a)
    if REVERSE:
        later = out
        for k in tl.static_range(R - 1, -1, -1):
            later = tl.where(r == k, x[:, :, None], later)
            x = run_step(a, k, R) + run_step(b, k, R) * x
            out = tl.where(r == k, x[:, :, None], out)
    else:
        for k in tl.static_range(0, R):
            x = run_step(a, k, R) + run_step(b, k, R) * x
            out = tl.where(r == k, x[:, :, None], out)
        later = out  # forward scans use no shifted tile
    return runs_tile(out, INTERLEAVED), runs_tile(later, INTERLEAVED)


@triton.jit
def solve_runs_carry_last(a, b, ea, eb, carry, R: tl.constexpr, INTERLEAVED: tl.constexpr,
                          REVERSE: tl.constexpr):
    """``solve_runs`` with each step solved as xa + xb * carry on the [BLOCK_B, BLOCK_T] tile,
    as scan_in_order applies it."""
    r = tl.arange(0, R)[None, None, :]
    xa, xb = ea, eb  # the value entering each run
    out_a = tl.zeros_like(a)
    out_b = out_a
    if REVERSE:
        later_a = out_a
        later_b = out_a
        for k in tl.static_range(R - 1, -1, -1):
            later_a = tl.where(r == k, xa[:, :, None], later_a)
            later_b = tl.where(r == k, xb[:, :, None], later_b)
            b_k = run_step(b, k, R)
            xa = run_step(a, k, R) + b_k * xa
            xb = b_k * xb
            out_a = tl.where(r == k, xa[:, :, None], out_a)
            out_b = tl.where(r == k, xb[:, :, None], out_b)
    else:
        for k in tl.static_range(0, R):
            b_k = run_step(b, k, R)
            xa = run_step(a, k, R) + b_k * xa
            xb = b_k * xb
            out_a = tl.where(r == k, xa[:, :, None], out_a)
            out_b = tl.where(r == k, xb[:, :, None], out_b)
        later_a = out_a  # forward scans use no shifted tile
        later_b = out_b
    out = runs_tile(out_a, INTERLEAVED) + runs_tile(out_b, INTERLEAVED) * carry[:, None]
    later = runs_tile(later_a, INTERLEAVED) + runs_tile(later_b, INTERLEAVED) * carry[:, None]
    return out, later


@triton.jit
def after_window(acc_a, acc_b, a, b):
    """``acc`` composed with a [W, BLOCK_B] window of maps, entry 0 applied last (nearest the
    tile): f_0(f_1(...f_{W-1})) by a forward scan of the opposite order."""
    wa, wb = tl.associative_scan((a, b), 0, combine_right_first)
    whole = (tl.arange(0, a.shape[0]) == a.shape[0] - 1)[:, None]
    return (acc_a + acc_b * tl.sum(tl.where(whole, wa, 0.0), axis=0),
            acc_b * tl.sum(tl.where(whole, wb, 0.0), axis=0))


@triton.jit
def as_word(value):
    """``value``'s bits complemented, so that a zeroed scratch word reads as unpublished; the
    one NaN whose complement is zero becomes another NaN."""
    if value.dtype == tl.float64:
        bits = value.to(tl.int64, bitcast=True)
    else:
        bits = value.to(tl.int32, bitcast=True)
    return ~tl.where(bits == -1, bits ^ 1, bits)


@triton.jit
def from_word(word):
    if word.dtype == tl.int64:
        value = (~word).to(tl.float64, bitcast=True)
    else:
        value = (~word).to(tl.float32, bitcast=True)
    return value


@triton.jit
def publish(ptr, value, mask):
    # One relaxed atomic word a value: its readiness travels with it, so no flag, fence or
    # block barrier orders it after anything.
    tl.atomic_xchg(ptr, as_word(value), mask=mask, sem="relaxed")


@triton.jit
def read_words(ptr, plane, offs, mask):
    """The (aggregate a, aggregate b, inclusive prefix) words at ``offs``, zero if unpublished."""
    a = tl.load(ptr + offs, mask=mask, other=0, volatile=True)
    b = tl.load(ptr + plane + offs, mask=mask, other=0, volatile=True)
    inclusive = tl.load(ptr + 2 * plane + offs, mask=mask, other=0, volatile=True)
    return a, b, inclusive


@triton.jit
def window_state(a, b, inclusive, look, j, done, W: tl.constexpr):
    """Per row: the nearest window entry with an inclusive prefix (W, the window's size, if
    none; rows done or entries before the first tile count as one), and whether every entry
    before it has its aggregate."""
    state = tl.where(inclusive != 0, 2, tl.where((a != 0) & (b != 0), 1, 0))
    state = tl.where(look & ~done[None, :], state, 2)
    stop = tl.min(tl.where(state == 2, j[:, None], W), axis=0)
    first_unready = tl.min(tl.where(state == 0, j[:, None], W), axis=0)
    return stop, tl.min(first_unready - stop, axis=0) < 0


@triton.jit
def segment_sweep(SWEEP: tl.constexpr, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                  n_seg, carry, agg_b, carry0, REV: tl.constexpr):
    """``(carry, agg_b)`` a sweep over the segment starts from. PHASE 4 sweeps its segment twice:
    the first reduces it (every other phase's only sweep: both unchanged); the second starts
    from the carry looked back from its predecessors, with a fresh edge product."""
    if SWEEP == 1:
        carry = look_back(agg_ptr, status_ptr, rows, row_mask, pid_s, B, n_seg, carry, agg_b,
                          carry0, REV)
        agg_b = tl.zeros_like(agg_b) + 1.0
    return carry, agg_b


@triton.jit
def look_back(link_ptr, spare_ptr, rows, row_mask, pid_s, B, n_seg, agg_a, agg_b, carry0,
              REVERSE: tl.constexpr):
    """PHASE 3: publish this tile's aggregate, compose the predecessors' aggregates back to the
    nearest published inclusive prefix (``carry0`` before the first tile), publish this tile's
    inclusive prefix and return its incoming carry. ``link_ptr`` is the zeroed scratch: the
    ticket counter, then three planes of words (``link_offsets``; aggregate a, aggregate b,
    inclusive prefix), each a value published by ``publish`` or zero; ``spare_ptr`` is the
    scratch the previous look-back read (``clear_spare``)."""
    plane = B * n_seg
    words = link_ptr + 1
    mine = link_offsets(rows, pid_s, B, n_seg, rows.shape[0])
    publish(words + mine, agg_a, row_mask)
    publish(words + plane + mine, agg_b, row_mask)
    if REVERSE:
        k = n_seg - 2 - pid_s
    else:
        k = pid_s - 1
    acc_a = tl.zeros_like(agg_a)  # not agg_a * 0: a NaN would reach every later tile
    acc_b = acc_a + 1.0
    done = ~row_mask
    W: tl.constexpr = WINDOW if rows.shape[0] == 1 else BLOCK_WINDOW
    j = tl.arange(0, W)
    while k >= 0:
        # Window entry j is the predecessor k - j (nearest first), per row; entries before the
        # first tile stand for a virtual tile whose inclusive prefix is the boundary.
        valid = k - j >= 0
        if REVERSE:
            seg = n_seg - 1 - (k - j)
        else:
            seg = k - j
        offs = link_offsets(rows[None, :], seg[:, None], B, n_seg, rows.shape[0])
        look = valid[:, None] & row_mask[None, :]
        a, b, inclusive = read_words(words, plane, offs, look & ~done[None, :])
        stop, waiting = window_state(a, b, inclusive, look, j, done, W)
        while waiting:
            a, b, inclusive = read_words(words, plane, offs, look & ~done[None, :])
            stop, waiting = window_state(a, b, inclusive, look, j, done, W)
        before = (j[:, None] < stop[None, :]) & ~done[None, :]
        at = (j[:, None] == stop[None, :]) & ~done[None, :]
        inclusive = tl.where(look, from_word(inclusive), carry0[None, :])
        a = tl.where(at, inclusive, tl.where(before, from_word(a), 0.0))
        b = tl.where(at, 0.0, tl.where(before, from_word(b), 1.0))
        acc_a, acc_b = after_window(acc_a, acc_b, a, b)
        done = done | (stop < W)
        k = tl.where(tl.min(done.to(tl.int32), axis=0) == 1, -1, k - W)
    carry = acc_a + acc_b * carry0
    if SHORTCUT:
        publish(words + 2 * plane + mine, agg_a + agg_b * carry, row_mask)
    clear_spare(spare_ptr, B, n_seg, rows.shape[0])  # after the publish: off successors' path
    return carry


@triton.jit
def next_in_time(out, carry_in, BLOCK_T: tl.constexpr, FLIP: tl.constexpr):
    """``out`` shifted one step later in time (backward scans); the latest step of the tile
    takes ``carry_in``, the fourth value ``scan_tile`` returned (with FLIP > 1, that value is
    the shifted tile already)."""
    # scan_runs solved the shifted tile with the tile itself (separate static branches: an
    # ``or`` of constexprs is not static in every Triton version)
    if FLIP > 1:  # noqa: SIM114
        shifted = carry_in
    elif FLIP < 0:
        shifted = carry_in
    else:
        cols = tl.arange(0, BLOCK_T)
        if FLIP == 1:  # columns run latest step first
            later, latest = tl.maximum(cols - 1, 0), 0
        else:
            later, latest = tl.minimum(cols + 1, BLOCK_T - 1), BLOCK_T - 1
        shifted = tl.gather(out, tl.broadcast_to(later[None, :], out.shape), 1)
        shifted = tl.where(cols[None, :] == latest, carry_in[:, None], shifted)
    return shifted


@triton.jit
def incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE: tl.constexpr,
                   REVERSE: tl.constexpr):
    """The carry entering this program's segment: compose the aggregates of the segments
    between it and the boundary (PHASE 2), a window of them at a time, so that the loads are
    in flight together instead of one after another; zero when reducing (PHASE 1, 4,
    SCAN_LOCAL); FIX composes as PHASE 2."""
    if PHASE == 1:  # noqa: SIM114 (static branches)
        carry = tl.zeros_like(carry0)
    elif PHASE == 4:  # noqa: SIM114 (its first sweep reduces)
        carry = tl.zeros_like(carry0)
    elif PHASE == SCAN_LOCAL:  # scans from a zero carry
        carry = tl.zeros_like(carry0)
    else:
        carry = carry0
    if (PHASE == FIX) | (PHASE == 2):
        if REVERSE:
            count = n_seg - 1 - pid_s
        else:
            count = pid_s
        acc_a = tl.zeros_like(carry0)
        acc_b = acc_a + 1.0
        # At most 256 aggregates a window: wider row blocks scan across lanes (sm_90, the
        # time-major 32 x 16 two-pass tile: 152 shuffles 8 at a time, 296 at 32).
        BB: tl.constexpr = rows.shape[0]
        W: tl.constexpr = 256 // BB if BB > 8 else (FIX_WINDOW if PHASE == FIX else 32)
        j = tl.arange(0, W)
        for w in range(0, count, W):
            # Window entry j is the segment w + j away, nearest first; applied last.
            valid = (w + j < count)[:, None] & row_mask[None, :]
            if REVERSE:
                seg = pid_s + 1 + w + j
            else:
                seg = pid_s - 1 - w - j
            offs = link_offsets(rows[None, :], seg[:, None], B, n_seg, rows.shape[0])
            a = tl.load(agg_ptr + offs, mask=valid, other=0.0)
            b = tl.load(agg_ptr + B * n_seg + offs, mask=valid, other=1.0)
            acc_a, acc_b = after_window(acc_a, acc_b, a, b)
        carry = acc_a + acc_b * carry0
    return carry


@triton.jit
def link_offsets(rows, seg, B, n_seg, BB: tl.constexpr):
    """Where the aggregates of ``rows`` (a block of BB) for segment ``seg`` lie in a plane of
    ``B * n_seg``. Row blocks hold rows contiguous, so that a time-major window of predecessors
    is scanned in each thread's registers (sm_90, 128x16 look-back tile: 665 -> 41 shuffles);
    one-row blocks keep a row's segments contiguous, a window then being one or two cache
    lines."""
    if BB == 1:
        offs = rows * n_seg + seg
    else:
        offs = seg * B + rows
    return offs


@triton.jit
def store_aggregate(agg_ptr, rows, row_mask, B, n_seg, pid_s, agg_a, agg_b):
    mine = link_offsets(rows, pid_s, B, n_seg, rows.shape[0])
    tl.store(agg_ptr + mine, agg_a, mask=row_mask)
    tl.store(agg_ptr + B * n_seg + mine, agg_b, mask=row_mask)


@triton.jit
def store_segment(agg_ptr, rows, row_mask, B, n_seg, pid_s, agg_a, agg_b, reach, t_begin,
                  PHASE: tl.constexpr):
    """After a reducing pass (PHASE 1, SCAN_LOCAL): the segment's aggregate and, scanning
    locally, where each row stored from (``reach``), as an offset from the segment's first step
    (a third plane)."""
    if (PHASE == SCAN_LOCAL) | (PHASE == 1):
        store_aggregate(agg_ptr, rows, row_mask, B, n_seg, pid_s, agg_a, agg_b)
    if PHASE == SCAN_LOCAL:
        mine = link_offsets(rows, pid_s, B, n_seg, rows.shape[0])
        tl.store(agg_ptr + 2 * B * n_seg + mine, (reach - t_begin).to(agg_a.dtype),
                 mask=row_mask)


@triton.jit
def reach_start(t_begin, seg_len, BLOCK_B: tl.constexpr, REVERSE: tl.constexpr):
    """Where each row's first pass stores from (SCAN_LOCAL), nothing yet: the step just past
    the segment's far end in scan order."""
    if REVERSE:
        reach = tl.zeros([BLOCK_B], tl.int32) + (t_begin - 1)
    else:
        reach = tl.zeros([BLOCK_B], tl.int32) + (t_begin + seg_len)
    return reach


@triton.jit
def track_reach(reach, agg_b, i, t_begin, n_chunks, BLOCK_T: tl.constexpr, PHASE: tl.constexpr,
                REVERSE: tl.constexpr):
    """SCAN_LOCAL: ``reach`` moved past the i-th tile in scan order, per row, once the
    segment's coefficient product through it (``agg_b``) is zero: a coefficient was, or the
    product fell below the dtype's least value, so no carry changes a later step. Whole tiles,
    and no reduction of the tile on the loop's path."""
    if PHASE == SCAN_LOCAL:
        zero = agg_b == 0.0
        if REVERSE:
            before = t_begin + (n_chunks - 1 - i) * BLOCK_T - 1
            reach = tl.maximum(reach, tl.where(zero, before, -1))
        else:
            after = t_begin + (i + 1) * BLOCK_T
            reach = tl.minimum(reach, tl.where(zero, after, 2147483647))
    return reach


@triton.jit
def fix_mask(mask, t, reach, PHASE: tl.constexpr, REVERSE: tl.constexpr, FLIP: tl.constexpr):
    """The steps a pass stores: SCAN_LOCAL those its zero carry cannot have changed (from
    ``reach`` on in scan order), FIX the others; every step in the other phases. Whole runs
    of V steps at a time, so that stores stay vectorised (``V`` divides the segment)."""
    V: tl.constexpr = FLIP if FLIP > 1 else (8 if FLIP == 0 else 1)
    run = t[None, :] // V * V
    if REVERSE:
        last_kept = reach[:, None] - (V - 1)  # a run is the carry's if it holds a later step
    else:
        last_kept = reach[:, None]
    if PHASE == SCAN_LOCAL:
        if REVERSE:
            mask = mask & (run <= last_kept)
        else:
            mask = mask & (run >= last_kept)
    if PHASE == FIX:
        if REVERSE:
            mask = mask & (run > last_kept)
        else:
            mask = mask & (run < last_kept)
    return mask


@triton.jit
def fix_reach(agg_ptr, rows, row_mask, B, n_seg, pid_s, t_begin, n_chunks, carry,
              BLOCK_T: tl.constexpr, REVERSE: tl.constexpr, FLIP: tl.constexpr):
    """FIX: (where each row's first pass stored from, the tiles to rescan in scan order). A row
    whose carry is not finite rescans its segment whole, as the scan would spread it there."""
    mine = link_offsets(rows, pid_s, B, n_seg, rows.shape[0])
    stored = tl.load(agg_ptr + 2 * B * n_seg + mine, mask=row_mask, other=0.0)
    reach = t_begin + stored.to(tl.int32)
    finite = tl.abs(carry) < float("inf")
    end = t_begin + n_chunks * BLOCK_T
    V: tl.constexpr = FLIP if FLIP > 1 else (8 if FLIP == 0 else 1)  # as fix_mask's runs
    if REVERSE:
        reach = tl.where(row_mask, tl.where(finite, reach, t_begin - 1), end)
        first = (tl.min(reach, axis=0) + 1) // V * V  # the earliest step fix_mask keeps
        n_fix = tl.minimum(tl.maximum(n_chunks - (first - t_begin) // BLOCK_T, 0), n_chunks)
    else:
        reach = tl.where(row_mask, tl.where(finite, reach, end), t_begin)
        past = tl.cdiv(tl.max(reach, axis=0), V) * V  # past the latest step it keeps
        n_fix = tl.minimum(tl.cdiv(past - t_begin, BLOCK_T), n_chunks)
    return reach, n_fix


@triton.jit
def affine_scan_kernel(alpha_ptr, beta_ptr, init_ptr, out_ptr, agg_ptr, status_ptr,
                       B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                       HAS_INIT: tl.constexpr, REVERSE: tl.constexpr,
                       FOURS_BELOW: tl.constexpr, ACC: tl.constexpr,
                       PHASE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr,
                       PREFETCH: tl.constexpr, FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, REVERSE, BLOCK_B, True)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    if HAS_INIT:
        carry0 = tl.load(init_ptr + rows, mask=row_mask, other=0.0).to(ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, REVERSE)
    reach = reach_start(t_begin, seg_len, BLOCK_B, REVERSE)
    n_loop = n_chunks
    if PHASE == FIX:
        reach, n_loop = fix_reach(agg_ptr, rows, row_mask, B, n_seg, pid_s, t_begin, n_chunks,
                                  carry, BLOCK_T, REVERSE, FLIP)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    for sweep in tl.static_range(1 + (PHASE == 4)):
        against = against_scan_order(PHASE, sweep, BLOCK_B)
        carry, agg_b = segment_sweep(sweep, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s,
                                     B, n_seg, carry, agg_b, carry0, REVERSE)
        t, mask, offs = tile_offsets(0, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                                     BLOCK_T, REVERSE, FLIP, against)
        alpha = step_load(alpha_ptr, offs, mask, FOURS_BELOW, 0.0)
        beta = step_load(beta_ptr, offs, mask, FOURS_BELOW, 1.0)
        for i in range(n_loop):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, REVERSE, FLIP, against)
            t_n, mask_n, offs_n = next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T,
                                            stride_b, stride_t, BLOCK_T, REVERSE, FLIP, against)
            if PREFETCH:
                alpha_n = step_load(alpha_ptr, offs_n, mask_n, FOURS_BELOW, 0.0)
                beta_n = step_load(beta_ptr, offs_n, mask_n, FOURS_BELOW, 1.0)
            out, carry, agg_b, _ = sweep_tile(
                alpha.to(ACC), beta.to(ACC), carry, agg_b, agg_ptr, status_ptr, rows, row_mask,
                pid_b, pid_s, B, n_seg, PHASE, BLOCK_T, REVERSE, FLIP, against, True, sweep)
            reach = track_reach(reach, agg_b, i, t_begin, n_chunks, BLOCK_T, PHASE, REVERSE)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                store_tile(out_ptr, out, rows, t, fix_mask(mask, t, reach, PHASE, REVERSE, FLIP),
                           out_stride_b, out_stride_t, FOURS_BELOW)
            if PREFETCH:
                alpha, beta = alpha_n, beta_n
            else:
                alpha = step_load(alpha_ptr, offs_n, mask_n, FOURS_BELOW, 0.0)
                beta = step_load(beta_ptr, offs_n, mask_n, FOURS_BELOW, 1.0)
    store_segment(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b, reach, t_begin, PHASE)


class Launch:
    """An engine-shaped kernel launch with everything but the pointers fixed: one pass,
    reduce-then-scan over time segments, or the single-pass look-back (``config.single_pass``:
    one tile a program, or a segment of tiles swept twice). A launch plan (``_plan.py``) keeps
    it for repeats.

    Engine kernels take, in order: ``pointers`` (inputs, then outputs), ``agg_ptr, status_ptr,
    B, T, n_seg, seg_len``, ``ints`` (strides, ...), ``scalars`` (float32 hi/lo pairs),
    ``flags`` (constexprs), ``ACC, PHASE, BLOCK_B, BLOCK_T, PREFETCH, FLIP, ALIGN``. Positional,
    so no per-call dicts. A look-back's ``agg_ptr`` is its scratch words and ``status_ptr`` the
    spare its programs zero (``_links.py``). ``one_tile``: one-pass programs of one tile take
    ONE_TILE (else the walk, PHASE 0); ``look_back_tile``: the one-tile look-back takes its
    compile-time tile (PHASE 3, else ``WALKED_LOOK_BACK``); ``prefetch``: the kernel's own
    rule for PREFETCH (``L.prefetch``'s ``allowed``); ``fixes``: the kernel takes SCAN_LOCAL and
    FIX, so that a tile of ``fix_steps`` runs its two passes so; ``time_strides``: the kernel's
    step strides beyond the layout's (``L.alignment``)."""

    __slots__ = ("kernel", "grid", "num_warps", "B", "acc", "device", "cuda_index", "middle",
                 "tile", "one_pass", "single_pass", "launchers", "grid3", "maxnreg", "fix")
    # single_pass: the look-back's PHASE (3 or 6: a tile a program; 4: a segment of tiles
    # swept twice, reduce then scan), or 0 for none.

    def __init__(self, kernel, config: L.ScanConfig, B: int, T: int, acc: torch.dtype, device,
                 ints: tuple, scalars: tuple = (), flags: tuple = (), one_tile: bool = True,
                 look_back_tile: bool = True, prefetch: bool = True, fixes: bool = False,
                 time_strides: tuple = ()):
        self.kernel, self.num_warps, self.B, self.acc, self.device = (
            kernel, config.num_warps, B, acc, device)
        self.maxnreg = config.max_registers
        self.cuda_index = device.index if device.type == "cuda" else None
        config = L.fit_segments(config, T)
        self.grid = config.grid(B, T)
        self.grid3 = (*self.grid, 1)
        self.middle = (B, T, self.grid[1], config.seg_len, *ints, *scalars, *flags, TL_ACC[acc])
        self.tile = (config.BLOCK_B, config.BLOCK_T, L.prefetch(config, prefetch),
                     int(config.flip), L.alignment(B, T, ints[:4], time_strides))
        phase = ONE_TILE if one_tile and T <= config.BLOCK_T else 0
        self.one_pass = (*self.middle, phase, *self.tile) if self.grid[1] == 1 else None
        self.single_pass = 0
        if config.single_pass and self.one_pass is None:
            one = 3 if look_back_tile else WALKED_LOOK_BACK
            self.single_pass = one if config.seg_len == config.BLOCK_T else 4
        self.launchers = {}  # one-pass direct launchers by device and pointer alignment
        for name in ("BLOCK_T", "fix_steps"):
            steps = getattr(config, name)
            if abs(config.flip) > 1 and steps % abs(config.flip):
                raise ValueError(f"runs of {abs(config.flip)} steps must divide {name}={steps}")
        # the second of two passes that scan, then fix: (warps, tile)
        self.fix = None
        if fixes and config.fix_steps and not config.single_pass and self.one_pass is None:
            fixing = replace(config, BLOCK_T=config.fix_steps, num_warps=config.fix_warps)
            self.fix = (config.fix_warps, (config.BLOCK_B, config.fix_steps,
                                           L.prefetch(fixing, prefetch), *self.tile[3:]))

    def __call__(self, pointers: tuple):
        if self.cuda_index is not None and self.cuda_index != D.current_device():
            with torch.cuda.device(self.device):  # Triton launches on the current device
                return self(pointers)
        kernel, grid, w, n = self.kernel, self.grid, self.num_warps, len(pointers) + 2
        if self.one_pass is not None:  # agg_ptr and status_ptr are never touched
            D.run_bound(self.launchers, kernel, grid, w,
                        (*pointers, pointers[-1], pointers[-1], *self.one_pass), n, self.maxnreg)
            return
        if self.single_pass:
            # A ticket counter, then aggregates a and b and inclusive prefixes as published
            # words (look_back), zero until published; the programs zero the spare.
            with links(self.device, WORDS[self.acc], 1 + 3 * self.B * grid[1]) as (words,
                                                                                  spare):
                D.run(kernel, (grid[0] * grid[1],), w, (*pointers, words, spare, *self.middle,
                                                        self.single_pass, *self.tile), n,
                      self.maxnreg)
            return
        agg = torch.empty((2 + (self.fix is not None), self.B * grid[1]), dtype=self.acc,
                          device=self.device)
        if self.fix is not None:
            D.run(kernel, grid, w, (*pointers, agg, agg, *self.middle, SCAN_LOCAL, *self.tile),
                  n, self.maxnreg)
            D.run(kernel, grid, self.fix[0], (*pointers, agg, agg, *self.middle, FIX,
                                              *self.fix[1]), n, self.maxnreg)
            return
        D.run(kernel, grid, w, (*pointers, agg, agg, *self.middle, 1, *self.tile), n, self.maxnreg)
        D.run(kernel, grid, w, (*pointers, agg, agg, *self.middle, 2, *self.tile), n, self.maxnreg)

    def launch_pointers(self, pointers: tuple) -> bool:
        """A repeated one-pass launch on the tensors' addresses (``pointers``, ints, in the
        order ``__call__`` takes the tensors). False, launching nothing, where it must go
        through ``__call__``: a first launch, a split, another device."""
        if self.one_pass is None:
            return False
        return D.launch_pointers(self.launchers, self.grid3, L.with_unread_scratch(pointers),
                                 self.one_pass)

    def launch_values(self, pointers: tuple):
        """``(compiled kernel, grid, every parameter)`` of the one-pass launch that
        ``launch_pointers`` makes on ``pointers``; None where it makes none yet."""
        if self.one_pass is None:
            return None
        pointers = L.with_unread_scratch(pointers)
        compiled = D.compiled_for(self.launchers, pointers)
        return None if compiled is None else (compiled, self.grid3, (*pointers, *self.one_pass))


def scan_rows(alpha, beta, initial, reverse: bool, out: torch.Tensor) -> torch.Tensor:
    """Scan ``[B, T]`` coefficients (any strides) with an optional ``[B]`` boundary into the
    ``[B, T]`` tensor ``out``."""
    B, T = alpha.shape
    acc = L.acc_dtype(out.dtype)
    if not L.use_triton(alpha):
        carry = alpha.new_zeros(B, dtype=acc) if initial is None else initial.to(acc)
        return out.copy_(torch_affine_scan(alpha.to(acc), beta.to(acc), carry, reverse))
    job, pointers = scan_launch(alpha, beta, initial, reverse, out)
    job(pointers)
    return out


def scan_launch(alpha, beta, initial, reverse: bool, out: torch.Tensor):
    """``scan_rows``' Triton launch and its pointers."""
    B, T = alpha.shape
    (alpha, beta), stride = L.common_strides([alpha, beta])
    rows = L.Rows(B, T, stride, dict(alpha=alpha, beta=beta))
    config, fours = L.tile_of(rows, alpha.device, out.element_size(), names=())
    job = Launch(affine_scan_kernel, config, B, T, L.acc_dtype(out.dtype), alpha.device,
                 (*stride, *out.stride()), flags=(initial is not None, reverse, fours),
                 fixes=True)
    return job, L.pointers(out, alpha, beta, initial, out)


def affine_scan(alpha, beta, *, reverse=True, initial=None, time_dim=-1):
    """Solve the first-order linear recurrence along ``time_dim``.

    ``reverse=True``: ``A_t = alpha_t + beta_t * A_{t+1}`` with ``A_T = initial``;
    ``reverse=False``: ``A_t = alpha_t + beta_t * A_{t-1}`` with ``A_{-1} = initial``.

    Args:
        alpha, beta: ``[..., T, ...]`` floating tensors of one shape, time on ``time_dim``.
        initial: boundary value, shape of ``alpha`` without the time axis. Default: zeros.
    Returns:
        ``A``, shaped like ``alpha``, in the promoted floating dtype (fp32 accumulation
        for half types, fp64 stays fp64).

    Example:
        >>> import torch
        >>> affine_scan(torch.ones(1, 3), torch.full((1, 3), 0.5))
        tensor([[1.7500, 1.5000, 1.0000]])
    """
    args = (alpha, beta, initial)
    out, key = P.planned("affine_scan", args, (reverse, time_dim))
    if out is not None:
        return out
    L.check_tensor("alpha", alpha)
    L.check_tensor("beta", beta, like=alpha)
    if not isinstance(reverse, bool):
        raise TypeError(f"reverse must be a bool, got {type(reverse).__name__}")
    axis = L.time_axis(alpha, time_dim)
    batch = alpha.movedim(axis, -1).shape[:-1]
    L.check_tensor("initial", initial, like=alpha, shape=batch, optional=True)
    if L.needs_dispatch(*args):
        return affine_scan_op(*args, float(reverse), axis)
    return P.recorded(key, _affine_scan, *args, float(reverse), axis)


def _affine_scan(alpha: torch.Tensor, beta: torch.Tensor, initial: Optional[torch.Tensor],
                 reverse: float, time_dim: int) -> torch.Tensor:
    out_dtype = L.result_dtype(alpha, beta, initial)
    if alpha.numel() == 0:
        return torch.empty_like(alpha, dtype=out_dtype)
    rows = L.rows_of(time_dim, alpha=alpha, beta=beta)
    out = L.Output(alpha, time_dim, out_dtype, rows)
    scan = rows["alpha"], rows["beta"], L.vector_rows(initial, rows.B), bool(reverse), out.rows
    if not L.use_triton(alpha):
        scan_rows(*scan)
    else:
        P.launch(*scan_launch(*scan), (alpha, beta, initial), (out,))
    return out.result()


def _coefficients(rows, s):
    alpha, beta = rows["alpha"], rows["beta"]
    acc = L.acc_dtype(L.result_dtype(alpha, beta, rows["initial"]))
    carry = alpha.new_zeros(alpha.shape[0], dtype=acc) if rows["initial"] is None else \
        rows["initial"].to(acc)
    return Coefficients(alpha.to(acc), beta.to(acc), carry, bool(s["reverse"]))


def _register():
    from paper_repro.kernels.autograd import Spec, register

    return register(Spec("affine_scan", ("alpha", "beta", "initial"), ("reverse",),
                         _coefficients, like="alpha", per_row=("initial",),
                         reverse=lambda s: bool(s["reverse"])), _affine_scan)


affine_scan_op = _register()
