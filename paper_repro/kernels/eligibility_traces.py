"""Accumulating eligibility traces as one fused forward scan (SPEC.md 1.6).

proofs/eligibility_traces.py derives it.

alpha_t = g_t,  beta_t = decay (1 - d_{t-1}) with d_{-1} = 0,  z_{-1} = seed.
The episodic prefix sum is the same kernel with decay 1 (and, for ``starts_at``, d_t).
"""
from typing import Optional

import torch
import triton
import triton.language as tl

from paper_repro import coefficients as C
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan as P
from paper_repro.kernels.affine_scan import (
    FIX,
    Launch,
    against_scan_order,
    aligned_layout,
    fix_mask,
    fix_reach,
    incoming_carry,
    neighbour_load,
    next_tile,
    program_ids,
    reach_start,
    row_block,
    segment_chunks,
    segment_sweep,
    step_load,
    store_segment,
    store_tile,
    sweep_tile,
    tile_offsets,
    track_reach,
)
from paper_repro.kernels.autograd import Spec, register
from paper_repro.kernels.torch_scan import torch_affine_scan

DONES = ("dones", "dones2")  # the flags a launch may load four at a time (L.four_loads)
# 16-bit time-major walks in 32-env tiles: by look-back while the programs number under the
# SMs, else in runs (``_tiles.wide_walks16``)
TILE_TRAITS = L.TileTraits(walk16_share=1.0)


@triton.jit
def reset_flags(done_ptr, offs, mask, t, row_mask, T, stride_t, PREVIOUS_DONE: tl.constexpr,
                FLIP: tl.constexpr, FOURS_BELOW: tl.constexpr):
    """One tile's flags that reset the sum entering t, unconverted."""
    if PREVIOUS_DONE:
        # "ends at": the flag at t-1 resets the sum entering step t; batch-major tiles (FLIP >
        # 1, in time order here) take it from the aligned flags' registers.
        if FLIP > 1:
            return neighbour_load(tl.load(done_ptr + offs, mask=mask, other=0), done_ptr, offs,
                                  mask, t, row_mask, T, stride_t, FLIP, False)
        return step_load(done_ptr, offs - stride_t, mask & (t >= 1)[None, :], FOURS_BELOW)
    return step_load(done_ptr, offs, mask, FOURS_BELOW)


@triton.jit
def decayed_inputs(x_ptr, done_ptr, done2_ptr, offs, mask, t, row_mask, T, stride_t,
                   PREVIOUS_DONE: tl.constexpr, FLIP: tl.constexpr, TWO_FLAGS: tl.constexpr,
                   FOURS_BELOW: tl.constexpr, ACC: tl.constexpr):
    """One tile's x_t and the flag that resets the sum entering t (with ``TWO_FLAGS``,
    ``min(done + done2, 1)`` in ``ACC``: the adjoints of GAE and the returns reset where a step
    was terminated or truncated, without a launch to join the two)."""
    x = step_load(x_ptr, offs, mask, FOURS_BELOW)
    d = reset_flags(done_ptr, offs, mask, t, row_mask, T, stride_t, PREVIOUS_DONE, FLIP,
                    FOURS_BELOW)
    if TWO_FLAGS:
        d2 = reset_flags(done2_ptr, offs, mask, t, row_mask, T, stride_t, PREVIOUS_DONE, FLIP,
                         FOURS_BELOW)
        d = tl.minimum(d.to(ACC) + d2.to(ACC), 1.0)
    return x, d


@triton.jit
def decayed_sum_fwd_kernel(x_ptr, done_ptr, done2_ptr, seed_ptr, out_ptr, agg_ptr, status_ptr,
                           B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                           decay, decay_lo,
                           PREVIOUS_DONE: tl.constexpr, HAS_SEED: tl.constexpr,
                           TWO_FLAGS: tl.constexpr, FOURS_BELOW: tl.constexpr,
                           ACC: tl.constexpr, PHASE: tl.constexpr,
                           BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr,
                           PREFETCH: tl.constexpr, FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    k = tl.cast(decay, ACC) + tl.cast(decay_lo, ACC)
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, False, BLOCK_B, True)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    if HAS_SEED:
        carry0 = tl.load(seed_ptr + rows, mask=row_mask, other=0.0).to(ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, False)
    reach = reach_start(t_begin, seg_len, BLOCK_B, False)
    n_loop = n_chunks
    if PHASE == FIX:
        reach, n_loop = fix_reach(agg_ptr, rows, row_mask, B, n_seg, pid_s, t_begin,
                                  n_chunks, carry, BLOCK_T, False, FLIP)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    for sweep in tl.static_range(1 + (PHASE == 4)):
        against = against_scan_order(PHASE, sweep, BLOCK_B)
        carry, agg_b = segment_sweep(sweep, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s,
                                     B, n_seg, carry, agg_b, carry0, False)
        t, mask, offs = tile_offsets(0, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                                     BLOCK_T, False, FLIP, against)
        x, d = decayed_inputs(x_ptr, done_ptr, done2_ptr, offs, mask, t, row_mask, T,
                              stride_t, PREVIOUS_DONE, FLIP, TWO_FLAGS, FOURS_BELOW, ACC)
        for i in range(n_loop):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, False, FLIP, against)
            t_n, mask_n, offs_n = next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T,
                                            stride_b, stride_t, BLOCK_T, False, FLIP, against)
            if PREFETCH:
                x_n, d_n = decayed_inputs(x_ptr, done_ptr, done2_ptr, offs_n, mask_n, t_n,
                                          row_mask, T, stride_t, PREVIOUS_DONE, FLIP,
                                          TWO_FLAGS, FOURS_BELOW, ACC)
            alpha = x.to(ACC)
            beta = tl.where(mask, k * (1.0 - d.to(ACC)), 1.0)
            out, carry, agg_b, _ = sweep_tile(
                alpha, beta, carry, agg_b, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, False, FLIP, against, True, sweep)
            reach = track_reach(reach, agg_b, i, t_begin, n_chunks, BLOCK_T, PHASE, False)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                store_tile(out_ptr, out, rows, t, fix_mask(mask, t, reach, PHASE, False, FLIP),
                           out_stride_b, out_stride_t, FOURS_BELOW)
            if PREFETCH:
                x, d = x_n, d_n
            else:
                x, d = decayed_inputs(x_ptr, done_ptr, done2_ptr, offs_n, mask_n, t_n,
                                      row_mask, T, stride_t, PREVIOUS_DONE, FLIP, TWO_FLAGS,
                                      FOURS_BELOW, ACC)
    store_segment(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b, reach, t_begin, PHASE)


def decayed_sum(name, x, dones, decay, seed_values, previous_done, time_dim, validate):
    """Shared body of eligibility traces and the episodic prefix sum."""
    args = (x, dones, seed_values)
    out, key = P.planned("decayed_sum", args, (decay, previous_done, time_dim), validate)
    if out is not None:
        return out
    L.check_tensor(name, x)
    L.check_tensor("dones", dones, like=x, flag=True)
    axis = L.time_axis(x, time_dim)
    L.check_tensor("seed_values", seed_values, like=x, optional=True,
                   shape=lambda: L.batch_shape(x, axis))
    if L.validation_requested(validate):
        L.check_binary("dones", dones)
    if L.needs_dispatch(*args):
        return decayed_sum_op(*args, decay, float(previous_done), axis)
    return P.recorded(key, _decayed_sum, *args, decay, float(previous_done), axis)


def _decayed_sum(x: torch.Tensor, dones: torch.Tensor, seed_values: Optional[torch.Tensor],
                 decay: float, previous_done: float, time_dim: int) -> torch.Tensor:
    return reset_sum(x, dones, seed_values, decay, previous_done, time_dim)


def reset_sum(x, dones, seed_values, decay: float, previous_done: float, time_dim: int,
              dones2=None, out_dtype=None):
    """The decayed sum of ``x`` reset by ``dones`` or, where given, by ``dones2`` too
    (``min(dones + dones2, 1)``, read in the kernel), in ``out_dtype`` (default ``x``'s and the
    seed's: an adjoint of 16-bit upstream gradients is kept in float32 without a conversion)."""
    out_dtype = out_dtype or L.result_dtype(x, seed_values)
    if x.numel() == 0:
        return torch.empty_like(x, dtype=out_dtype)
    rows = L.rows_of(time_dim, x=x, dones=dones, dones2=dones2)
    seed = L.vector_rows(seed_values, rows.B)
    out = L.Output(x, time_dim, out_dtype, rows)
    if not L.use_triton(x):
        flags = rows["dones"] if dones2 is None else torch.clamp(
            rows["dones"].to(out_dtype) + rows["dones2"].to(out_dtype), max=1.0)
        coef = _coefficients(dict(rows.tensors, dones=flags, seed_values=seed),
                             dict(decay=decay, previous_done=previous_done))
        return out.set(torch_affine_scan(coef.alpha, coef.beta, coef.carry, False))
    o = out.rows
    config, fours = L.tile_of(rows, o.device, o.element_size(), TILE_TRAITS, names=DONES)
    job = Launch(decayed_sum_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(o.dtype), o.device,
                 L.layout_ints(rows, o), L.scalar_pairs(decay),
                 (bool(previous_done), seed is not None, dones2 is not None, fours), fixes=True)
    # without dones2 its pointer is the dones' (never read), so a recorded plan needs no slot
    flags2 = rows["dones"] if dones2 is None else rows["dones2"]
    P.launch(job, L.pointers(o, rows["x"], rows["dones"], flags2, seed, o),
             (x, dones, seed_values), (out,), order=(0, 1, 1, 2))
    return out.result()


def _coefficients(rows, s):
    if s["previous_done"]:
        return C.eligibility_traces_coefficients(rows["x"], rows["dones"], s["decay"], 1.0,
                                                 rows["seed_values"])
    return C.prefix_sum_coefficients(rows["x"], rows["dones"], rows["seed_values"], "starts_at")


decayed_sum_op = register(Spec("decayed_sum", ("x", "dones", "seed_values"),
                               ("decay", "previous_done"), _coefficients, like="x",
                               per_row=("seed_values",), reverse=lambda s: False), _decayed_sum)


def compute_eligibility_traces(gradients, dones, gamma, lambda_, seed_values=None, *,
                               time_dim=-1, validate=False):
    """Accumulating traces ``z_t = g_t + gamma lambda (1 - d_{t-1}) z_{t-1}``, ``z_{-1} = seed``.

    Args:
        gradients: ``[..., T, ...]`` floating, time on ``time_dim``.
        dones: step ``t`` ends its episode (terminated or truncated); the trace resets at
            the first step of the next episode.
        gamma, lambda_: required, as in the paper's API.
        seed_values: incoming trace per row (batch shape), decayed once. Default: zeros.
        validate: check flag values (synchronises).
    Returns:
        ``z`` shaped like ``gradients``.

    Example:
        >>> import torch
        >>> compute_eligibility_traces(torch.tensor([[1.0, 2.0, 3.0]]),
        ...                            torch.tensor([[0.0, 1.0, 0.0]]), 1.0, 0.9)
        tensor([[1.0000, 2.9000, 3.0000]])
    """
    gamma = L.check_scalar("gamma", gamma)
    lambda_ = L.check_scalar("lambda_", lambda_)
    return decayed_sum("gradients", gradients, dones, gamma * lambda_, seed_values, True,
                       time_dim, validate)
