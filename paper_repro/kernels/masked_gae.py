"""GAE over token sequences whose masked steps pass the carry through: multi-turn RLHF, where
observation or tool-output tokens sit between the policy's own tokens (verl's and NeMo-RL's
masked GAE). One fused Triton scan of the two-value recurrence where the kernels run and no
gradient is needed; two scans of the engine otherwise. No Python loop over time."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan as P
from paper_repro.kernels._tiles import _pow2, run_length, triton_cdiv
from paper_repro.kernels.affine_scan import (
    TL_ACC,
    affine_scan,
    column,
    next_tile,
    row_block,
    scan_runs,
    segment_chunks,
    step_load,
    store_tile,
    tile_offsets,
)

# A program walks its rows' tiles one after another, waiting on each where programs are few
# (data/h200/masked_ab.csv: 32 x 32768, 32 programs of 32 tiles, walked in 33.5 us, split in
# 14.1; 256 x 32768, 256 programs, walked in 56, split in 88). Rows of up to FEW_TILES tiles,
# up to MAX_TILES from SOME_PROGRAMS programs (time-major 16-step tiles: TIME_MAJOR_MAX_TILES;
# 4096 x 512 in 64 x 16 tiles, 64 programs of 32, walked in 0.83x the split's time) and any
# number from MANY_PROGRAMS are walked whole; the others split time.
FEW_TILES, MAX_TILES, SOME_PROGRAMS, MANY_PROGRAMS = 8, 16, 64, 256
TIME_MAJOR_MAX_TILES = 32
# (envs, steps), one warp: 64 bytes a step's load and programs enough to fill the GPU
# (data/h100/masked_ab_tn.csv: 0.40-0.85x the time of 64 x 16 tiles in 4 warps, 4096 x 128
# 8.4 us against 17.6, 256 x 2048 split 17.4 against 43.2; 32768 x 32 0.66x)
TIME_MAJOR_TILE = (16, 16)
# (envs, steps, warps, FLIP) of time-major rows of at least its steps: the engine's fp32 tile,
# interleaved runs of 4, the next value from the scan, not read again (data/h100/
# masked_interleaved_ab.csv: 0.37-0.89x the 16 x 16 lanes tile's time, 4096 x 2048 139 -> 52
# us, 4096 x 128 6.6 -> 4.0; masked_fours_ab*.csv: 32-step rows 5x it)
INTERLEAVED_TILE = (16, 128, 4, -4)
PREFETCH = True  # the next tile's loads in flight during this one's scans (masked_tile: where)
# Interleaved walks of at least this many tiles prefetch too (data/h100/masked_prefetch_ab.csv:
# 0.77-0.85x at 8-32 tiles, 4096 x 2048 51.9 -> 43.1 us; 1.02-1.12x at 1-4 tiles)
INTERLEAVED_PREFETCH_TILES = 8
# (steps, warps) of batch-major rows of at least LONG_WALK_TILES 1024-step tiles walked one a
# program by fewer than two programs an SM (AN_SM: the H100's and H200's SMs), and by at most
# one: more bytes in flight a program (data/h100/masked_ab_bm2.csv, against 1024 steps in 4
# warps: 256 x 32768 58.4 -> 47.5 us, 256 x 8192 11.7 -> 10.0; 64 x 16384 18.2 -> 11.2, 8 x
# 8192 9.5 -> 6.2; 4096 steps in 8 warps lost from 256 rows, 2048 in 2 lost, and 4096 in 4,
# which spills: data/h200/sass_masked.csv)
LONG_WALK_TILES, AN_SM = 4, 132
LONG_WALK_TILE, LONGER_WALK_TILE = (2048, 4), (4096, 8)
SPLIT_PROGRAMS = 512  # rows split in time: segments enough for ~4 programs an SM


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
    args = (rewards, values, mask, last_value)
    out, key = P.planned("masked_gae", args, (gamma, lambda_, time_dim))
    if out is not None:  # a repeat of the fused launch's metadata and scalars
        return out
    L.check_tensor("rewards", rewards)
    L.check_tensor("values", values, like=rewards)
    L.check_tensor("mask", mask, like=rewards, flag=True)
    gamma = L.check_scalar("gamma", gamma)
    lambda_ = L.check_scalar("lambda_", lambda_)
    axis = L.time_axis(rewards, time_dim)
    L.check_tensor("last_value", last_value, like=rewards, optional=True,
                   shape=lambda: L.batch_shape(rewards, axis))
    out_dtype = L.result_dtype(rewards, values, last_value)
    if rewards.shape[axis] == 0:
        return torch.empty_like(rewards, dtype=out_dtype)
    if not L.needs_dispatch(rewards, values, mask, last_value) and L.use_triton(rewards):
        rows = L.rows_of(axis, rewards=rewards, values=values, mask=mask)
        tile = masked_tile(rows.B, rows.T, rows.stride, rewards.element_size(),
                           L.acc_dtype(out_dtype).itemsize, loads_as_fp32(rows, out_dtype.itemsize))
        return P.recorded(key, fused_masked_gae, args, rows, tile, gamma, lambda_, axis,
                          out_dtype)
    return two_scans(rewards, values, mask, gamma, lambda_, last_value, axis, out_dtype)


def walks_fast(tiles: int, programs: int, time_major: bool = False) -> bool:
    """Whether the programs walking ``tiles`` tiles each beat splitting time: rows of few
    tiles, or programs enough to stream rather than wait on each tile (``masked_ab.csv``)."""
    most = TIME_MAJOR_MAX_TILES if time_major else MAX_TILES
    return tiles <= FEW_TILES or programs >= MANY_PROGRAMS or \
        (tiles <= most and programs >= SOME_PROGRAMS)


def two_scans(rewards, values, mask, gamma, lambda_, last_value, axis, out_dtype):
    """The engine's path (differentiable): ``X`` by one scan, then the advantages by another."""
    work = L.acc_dtype(out_dtype)
    r, v, m = (x.movedim(axis, -1).to(work) for x in (rewards, values, mask))
    last = None if last_value is None else last_value.to(work)
    seen = affine_scan(m * v, 1 - m, initial=last)  # X_t: the value of the first unmasked s >= t
    after = seen.new_zeros(seen.shape[:-1]) if last is None else last
    next_value = torch.cat([seen[..., 1:], after.unsqueeze(-1)], -1)
    alpha = m * (r + gamma * next_value - v)
    beta = m * (gamma * lambda_) + (1 - m)
    return affine_scan(alpha, beta).to(out_dtype).movedim(-1, axis)


def fused_masked_gae(args: tuple, rows, tile: tuple, gamma, lambda_, axis, out_dtype):
    """One launch on ``rows`` (``L.rows_of`` of rewards, values and mask of ``args``) in
    ``tile`` (``masked_tile``), two where it splits time: both recurrences scanned together,
    the output laid out like the rewards. The launch is the plan of the call being recorded,
    if any (``_plan.launch``)."""
    out = L.Output(args[0], axis, out_dtype, rows)
    last = L.vector_rows(args[3], rows.B)
    block_b, block_t, warps, flip, prefetch, seg_tiles = tile
    seg_len = seg_tiles * block_t if seg_tiles else triton_cdiv(rows.T, block_t) * block_t
    acc = L.acc_dtype(out_dtype)
    # time-major: a bool mask, bf16 values, 16-bit rows four envs at a time (the fp32 layout)
    fours = L.four_loads(rows, out.rows.element_size(), names=("mask",))
    job = MaskedLaunch(triton_cdiv(rows.B, block_b), triton_cdiv(rows.T, seg_len), warps,
                       args[0].device, acc, (
                           rows.B, rows.T, triton_cdiv(rows.T, seg_len), seg_len, *rows.stride,
                           *out.rows.stride(), *L.scalar_pairs(gamma, gamma * lambda_),
                           last is not None, TL_ACC[acc]),
                       (block_b, block_t, flip, prefetch, fours,
                        L.wide_offsets(rows.T, (rows.stride[1], out.rows.stride(1)))))
    t = rows.tensors
    P.launch(job, (t["rewards"], t["values"], t["mask"], out.rows if last is None else last,
                   out.rows), args, (out,))
    return out.result()


class MaskedLaunch:
    """The fused launch in the engine's plan protocol (``affine_scan.Launch``): called on its
    pointers (the inputs' and the output's rows, the last value or the output in its place),
    or repeated on their addresses where it is one pass. The kernel's other parameters are
    ``head``, its PHASE, then ``tail``; with ``n_seg`` > 1 segments a row, PHASE 1 stores the
    segments' maps in a scratch of five ``[B, n_seg]`` planes and PHASE 2 scans."""

    def __init__(self, programs: int, n_seg: int, num_warps: int, device, acc, head: tuple,
                 tail: tuple):
        self.grid3, self.num_warps, self.device, self.acc = (programs, n_seg, 1), num_warps, \
            device, acc
        self.head, self.tail = head, tail
        self.rest = (*head, 0, *tail) if n_seg == 1 else None  # the one-pass launch's
        self.cuda_index = device.index if device.type == "cuda" else None
        self.launchers = {}  # direct launchers by device and pointer alignment
        self.phases = ({}, {})  # the split's, PHASE 1 and 2

    def __call__(self, pointers: tuple):
        if self.cuda_index is not None and self.cuda_index != D.current_device():
            with torch.cuda.device(self.device):  # Triton launches on the current device
                return self(pointers)
        n = len(pointers) + 2
        if self.rest is not None:
            D.run_bound(self.launchers, masked_gae_kernel, self.grid3[:1], self.num_warps,
                        (*L.with_unread_scratch(pointers), *self.rest), n)
            return
        n_seg = self.grid3[1]
        agg = torch.empty(5 * self.head[0] * n_seg, dtype=self.acc, device=self.device)
        for phase, launchers in zip((1, 2), self.phases):
            D.run_bound(launchers, masked_gae_kernel, self.grid3[:2], self.num_warps,
                        (*pointers, agg, agg, *self.head, phase, *self.tail), n)

    def launch_pointers(self, pointers: tuple) -> bool:
        """A repeat on the tensors' addresses; False where it must go through ``__call__``
        (a first launch, a split)."""
        if self.rest is None:
            return False
        return D.launch_pointers(self.launchers, self.grid3, L.with_unread_scratch(pointers),
                                 self.rest)

    def launch_values(self, pointers: tuple):
        """``(compiled kernel, grid, every parameter)`` of ``launch_pointers``' launch."""
        if self.rest is None:
            return None
        pointers = L.with_unread_scratch(pointers)
        compiled = D.compiled_for(self.launchers, pointers)
        return None if compiled is None else (compiled, self.grid3, (*pointers, *self.rest))


def loads_as_fp32(rows, out_itemsize: int) -> bool:
    """Whether every load and store of a launch on ``rows`` lies as fp32's: 4-byte elements,
    or narrower ones four envs a load (``L.four_loads``)."""
    if L.four_loads(rows, out_itemsize, names=("mask",)):
        return True
    return out_itemsize == 4 and all(x.element_size() == 4 for x in rows.tensors.values()
                                     if x is not None)


def masked_tile(B: int, T: int, stride: tuple, itemsize: int = 4, acc_bytes: int = 4,
                fp32_layout: bool = True) -> tuple:
    """``(BLOCK_B, BLOCK_T, num_warps, FLIP, PREFETCH, seg_tiles)``: time-major rows in tiles
    across the envs, in interleaved runs (``INTERLEAVED_TILE``) where ``fp32_layout``
    (``loads_as_fp32``: Triton's narrow loads took that tile 8-20x the time, data/h100/
    masked_interleaved_ab.csv, ``triton_loads``) or, rows shorter than its steps or loads laid
    out otherwise, lanes latest step first; others walk up to 1024 steps a tile (2048 or 4096
    where fewer than two programs an SM walk long rows and ``acc_bytes``, the scans' float, is
    4), as runs of one 16-byte load's steps (``itemsize``: bytes of a reward), as
    many rows a program as keep ~2 programs an SM busy. The next tile is loaded while this one
    is scanned, but in time-major splits and interleaved walks of fewer than
    INTERLEAVED_PREFETCH_TILES tiles. Rows whose programs would not walk fast (``walks_fast``)
    split time into segments of ``seg_tiles`` tiles (0: one segment a row), about
    SPLIT_PROGRAMS programs in all."""
    time_major = L.is_time_major(stride)
    if time_major and fp32_layout and INTERLEAVED_TILE[1] <= T:
        block_b, block_t, warps, flip = INTERLEAVED_TILE
        block_b = min(block_b, _pow2(B))
    elif time_major:
        block_b, block_t = TIME_MAJOR_TILE
        block_b = min(block_b, _pow2(B))
        warps, flip = 1, 1
    else:
        block_t = max(16, min(_pow2(T), 1024))
        block_b = max(1, min(_pow2(B), 2048 // block_t))
        while block_b > 1 and triton_cdiv(B, block_b) < 2 * AN_SM:
            block_b //= 2
        warps = max(1, min(8, block_b * block_t // 256))
        flip = run_length(block_t, itemsize, False)
    tiles, programs = triton_cdiv(T, block_t), triton_cdiv(B, block_b)
    seg_tiles = 0 if walks_fast(tiles, programs, time_major) else split_tiles(tiles, programs)
    # time-major lanes walks prefetch too (data/h100/masked_ab_walk.csv: 0.89-0.96x the time,
    # 4096 x 512 29.1 -> 26.0 us), interleaved ones from INTERLEAVED_PREFETCH_TILES; split ones
    # were not timed with it
    prefetch = PREFETCH and not (time_major and (
        seg_tiles or (flip != 1 and tiles < INTERLEAVED_PREFETCH_TILES)))
    # fp64 scans keep 1024 steps: wider tiles spill there (data/h200/sass_masked.csv)
    if not (time_major or seg_tiles) and tiles >= LONG_WALK_TILES and programs < 2 * AN_SM \
            and acc_bytes <= 4:
        block_t, warps = LONGER_WALK_TILE if programs <= AN_SM else LONG_WALK_TILE
    return block_b, block_t, warps, flip, prefetch, seg_tiles


def split_tiles(tiles: int, programs: int) -> int:
    """Tiles a segment where ``programs`` row blocks of ``tiles`` tiles split time: about
    SPLIT_PROGRAMS programs in all."""
    return triton_cdiv(tiles, max(1, SPLIT_PROGRAMS // programs))


@triton.jit
def _compose(a_l, b_l, a_r, b_r):
    # x -> a x + b; (a_l, b_l), the later step's, is applied first
    return a_l * a_r, a_r * b_l + b_r


@triton.jit
def _load_tile(r_ptr, v_ptr, m_ptr, at, ok, ahead, stride_t, FLIP: tl.constexpr,
               FOURS_BELOW: tl.constexpr):
    """The tile's rewards, values and mask as stored (narrower than ``FOURS_BELOW`` bits four
    envs a load); lanes latest step first (``FLIP`` 1) also the values and mask one step later
    (runs take them from the scan instead)."""
    r = step_load(r_ptr, at, ok, FOURS_BELOW, 0.0)
    v = step_load(v_ptr, at, ok, FOURS_BELOW, 0.0)
    m = step_load(m_ptr, at, ok, FOURS_BELOW)
    if FLIP == 1:
        v1 = step_load(v_ptr + stride_t, at, ahead, FOURS_BELOW, 0.0)
        m1 = step_load(m_ptr + stride_t, at, ahead, FOURS_BELOW)
    else:
        v1 = v
        m1 = m
    return r, v, m, v1, m1


@triton.jit
def _scan_tile(alpha, beta, carry, rows, row_ok, pid, B, BLOCK_T: tl.constexpr,
               FLIP: tl.constexpr):
    """``(values, carry, next)``: the backward scan ``y_t = alpha_t + beta_t y_{t+1}`` of the
    tile entered with ``carry``, the value leaving at its earliest column, and the values one
    step later in time. Runs (``FLIP`` > 1; -R interleaved) take those from ``scan_runs``
    (no look-back here: its link pointers are never read). Lanes latest step first (1) return
    the values again: their X scan runs on the inputs one step later, so its values are
    ``X_{t+1}`` already."""
    if FLIP > 1:
        out, carry_out, _, later = scan_runs(alpha, beta, carry, rows, rows, rows, row_ok, pid,
                                             0, B, 1, 0, BLOCK_T, FLIP, False, True, True)
    elif FLIP < 0:  # interleaved runs (time-major)
        out, carry_out, _, later = scan_runs(alpha, beta, carry, rows, rows, rows, row_ok, pid,
                                             0, B, 1, 0, BLOCK_T, -FLIP, True, True, True)
    else:
        keep, take = tl.associative_scan((beta, alpha), 1, _compose)
        out = keep * carry[:, None] + take
        carry_out = column(out, BLOCK_T - 1, BLOCK_T)
        later = out
    return out, carry_out, later


@triton.jit
def _then(s0, s1, a0, a1, a2, q0, q1, c0, c1, c2):
    # Segment maps X -> s1 X + s0, A -> a1 A + a2 X + a0 (X, A entering at the segment's end);
    # the left one is applied first (the later segment), then the right one.
    return (q1 * s0 + q0, q1 * s1, c1 * a0 + c2 * s0 + c0, c1 * a1, c1 * a2 + c2 * s1)


@triton.jit
def _times(x, y):
    return x * y


@triton.jit
def _entering(agg_ptr, rows, row_ok, B, n_seg, pid_s, last, ACC: tl.constexpr,
              BLOCK_B: tl.constexpr):
    """``(X, A)`` entering this segment at its end (PHASE 2): the later segments' maps
    (PHASE 1's ``agg_ptr``, five planes of ``[B, n_seg]``), latest first, applied to
    ``(last, 0)``, a window of 32 at a time so their loads are in flight together."""
    W: tl.constexpr = 32
    i = tl.arange(0, W)
    plane = B * n_seg
    one = tl.full([BLOCK_B], 1.0, ACC)
    zero = tl.zeros([BLOCK_B], ACC)
    s0, s1, a0, a1, a2 = zero, one, zero, one, zero
    count = n_seg - 1 - pid_s
    for w in range(0, count, W):
        here = (w + i < count)[:, None] & row_ok[None, :]
        at = agg_ptr + rows[None, :] * n_seg + (n_seg - 1 - w - i)[:, None]
        q0 = tl.load(at, mask=here, other=0.0)
        q1 = tl.load(at + plane, mask=here, other=1.0)
        c0 = tl.load(at + 2 * plane, mask=here, other=0.0)
        c1 = tl.load(at + 3 * plane, mask=here, other=1.0)
        c2 = tl.load(at + 4 * plane, mask=here, other=0.0)
        q0, q1, c0, c1, c2 = tl.associative_scan((q0, q1, c0, c1, c2), 0, _then)
        whole = (i == W - 1)[:, None]
        s0, s1, a0, a1, a2 = _then(s0, s1, a0, a1, a2, tl.sum(tl.where(whole, q0, 0.0), 0),
                                   tl.sum(tl.where(whole, q1, 0.0), 0),
                                   tl.sum(tl.where(whole, c0, 0.0), 0),
                                   tl.sum(tl.where(whole, c1, 0.0), 0),
                                   tl.sum(tl.where(whole, c2, 0.0), 0))
    return s1 * last + s0, a2 * last + a0


@triton.jit
def masked_gae_kernel(r_ptr, v_ptr, m_ptr, last_ptr, out_ptr, agg_ptr, status_ptr, B, T,
                      n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t, gamma,
                      gamma_lo, decay, decay_lo,
                      HAS_LAST: tl.constexpr, ACC: tl.constexpr, PHASE: tl.constexpr,
                      BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr, FLIP: tl.constexpr,
                      PREFETCH: tl.constexpr, FOURS_BELOW: tl.constexpr, WIDE: tl.constexpr):
    """Rows ``[B, T]``, each program's segment of ``seg_len`` steps walked from its last tile
    to its first: ``X`` (the next unmasked value, carried as ``seen``), then the advantages
    (carried as ``adv``), each by a forward scan that runs backward in time. ``FLIP`` > 1: the
    tile as runs of FLIP ascending steps, latest run first (the engine's ``scan_runs``; loads
    stay vectorised, ``X_{t+1}`` comes from the scan); -R: runs of R interleaved (time-major
    tiles, whose threads hold every G-th column); 1: lanes latest step first, ``X_{t+1}``
    scanned from the inputs one step later. ``PREFETCH`` loads the next tile before this one
    is scanned. PHASE 0: one segment a row. With time split (grid ``[row blocks, n_seg]``),
    PHASE 1 stores each segment's map of the values entering its end (``_then``) in
    ``agg_ptr``, and PHASE 2 applies the later segments' maps, then walks its own. ``WIDE``
    (``L.wide_offsets``): the step strides in 64 bits."""
    if WIDE:
        stride_t = tl.cast(stride_t, tl.int64)
        out_stride_t = tl.cast(out_stride_t, tl.int64)
    pid = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows, row_ok = row_block(pid, B, BLOCK_B)
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    gl = tl.cast(decay, ACC) + tl.cast(decay_lo, ACC)
    seen = tl.zeros([BLOCK_B], ACC)
    if HAS_LAST:
        seen = tl.load(last_ptr + rows, mask=row_ok, other=0.0).to(ACC)
    adv = tl.zeros([BLOCK_B], ACC)
    # PHASE 1 carries the map's coefficients: X = seen + seen_x X_in,
    # A = adv + adv_a A_in + adv_x X_in
    seen_x = tl.full([BLOCK_B], 1.0, ACC)
    adv_a = seen_x
    adv_x = adv
    if PHASE == 1:
        seen = adv
    if PHASE == 2:
        seen, adv = _entering(agg_ptr, rows, row_ok, B, n_seg, pid_s, seen, ACC, BLOCK_B)
    t_begin, n_tiles = segment_chunks(pid_s, T, seg_len, BLOCK_T, 0)
    t, ok, at = tile_offsets(0, t_begin, n_tiles, rows, row_ok, T, stride_b, stride_t, BLOCK_T,
                             True, FLIP, False)
    r, v, m, v1, m1 = _load_tile(r_ptr, v_ptr, m_ptr, at, ok, ok & (t + 1 < T)[None, :],
                                 stride_t, FLIP, FOURS_BELOW)
    for k in range(n_tiles):
        t, ok, at = tile_offsets(k, t_begin, n_tiles, rows, row_ok, T, stride_b, stride_t,
                                 BLOCK_T, True, FLIP, False)
        t_n, ok_n, at_n = next_tile(k, t_begin, seg_len, n_tiles, rows, row_ok, T, stride_b,
                                    stride_t, BLOCK_T, True, FLIP, False)
        if PREFETCH:
            r_n, v_n, m_n, v1_n, m1_n = _load_tile(r_ptr, v_ptr, m_ptr, at_n, ok_n,
                                                   ok_n & (t_n + 1 < T)[None, :], stride_t, FLIP,
                                                   FOURS_BELOW)
        rf, vf, mf = r.to(ACC), v.to(ACC), m.to(ACC)
        if FLIP != 1:  # X_t from the tile; the next unmasked value is its shifted tile
            keep = 1.0 - mf
            take = mf * vf
        else:  # V'_t = X_{t+1} = m_{t+1} V_{t+1} + (1 - m_{t+1}) X_{t+2}
            m1f = m1.to(ACC)
            keep = 1.0 - m1f
            take = m1f * v1.to(ACC)
        _, seen_out, nxt = _scan_tile(take, keep, seen, rows, row_ok, pid, B, BLOCK_T, FLIP)
        # padded steps hold m = 0: the identity (alpha 0, beta 1) in both scans
        alpha = mf * (rf + g * nxt - vf)
        beta = mf * gl + 1.0 - mf
        out, adv, _ = _scan_tile(alpha, beta, adv, rows, row_ok, pid, B, BLOCK_T, FLIP)
        if PHASE == 1:  # the same scans of the coefficients of X_in; A_in's is a product
            _, seen_x, nxt_x = _scan_tile(tl.zeros_like(take), keep, seen_x, rows, row_ok, pid,
                                          B, BLOCK_T, FLIP)
            _, adv_x, _ = _scan_tile(mf * g * nxt_x, beta, adv_x, rows, row_ok, pid, B,
                                     BLOCK_T, FLIP)
            adv_a = adv_a * tl.reduce(beta, 1, _times)
        else:
            store_tile(out_ptr, out, rows, t, ok, out_stride_b, out_stride_t, FOURS_BELOW)
        seen = seen_out
        if PREFETCH:
            r, v, m, v1, m1 = r_n, v_n, m_n, v1_n, m1_n
        else:
            r, v, m, v1, m1 = _load_tile(r_ptr, v_ptr, m_ptr, at_n, ok_n,
                                         ok_n & (t_n + 1 < T)[None, :], stride_t, FLIP,
                                         FOURS_BELOW)
    if PHASE == 1:
        mine = agg_ptr + rows * n_seg + pid_s
        plane = B * n_seg
        tl.store(mine, seen, mask=row_ok)
        tl.store(mine + plane, seen_x, mask=row_ok)
        tl.store(mine + 2 * plane, adv, mask=row_ok)
        tl.store(mine + 3 * plane, adv_a, mask=row_ok)
        tl.store(mine + 4 * plane, adv_x, mask=row_ok)
