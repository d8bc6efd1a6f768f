"""TD(lambda) returns as one fused backward scan (SPEC.md 1.4; proofs/lambda_returns.py).

alpha_t = r_t + gamma (1 - lambda)(1 - done_t) n_t + gamma trunc_t b_t,
beta_t = gamma lambda (1 - done_t),  G_T = b_{T-1} (0 without bootstrap values).
Discounted returns are the same kernel at lambda = 1 without next values.
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
    next_tile,
    program_ids,
    raw_flags,
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
from paper_repro.kernels.gae import check_flags
from paper_repro.kernels.torch_scan import torch_affine_scan

# Long rows of TD(lambda): no fp32 rows take two passes, as GAE (split_rows.csv, split-check);
# the fp32 look-back in one warp uncapped once programs took the launch index (order_tiles.csv,
# 64x131072: 37.2 against 40.6 us in two capped warps); its 16-bit look-back stays uncapped
# (registers.csv: 1.03x the time capped at 128); time-major, the look-back at every size, as GAE
# (tn_sweep.csv, 1024x4096 32.1 -> 27.0 us). Both: 16-bit time-major walks in 32-env tiles, by
# look-back under half the SMs, else in runs (``_tiles.wide_walks16``); batch-major rows of 512
# steps in 4 warps up to 32 rows an SM (H100, tile_512*.csv: 256-4096 rows 0.82-0.94x the time
# of 2).
TILE_TRAITS = L.TileTraits(two_pass_rows=0, warps32=1, time_major_two_pass=(0, 0),
                           walk16_share=0.5, warps512=4)
# Of the discounted returns: two passes up to four fp32 rows (split-long, 1x4194304 in one-warp
# 512-step look-back tiles: 1.12x the time), in 1024-step tiles (split-tile, 2048-step tiles:
# 4x1048576 1.16x, 1x4194304 1.08x); the fp32 look-back in one warp (split-long, 16x262144 to
# 16x524288: 0.91-0.95x the time of two capped warps); the 16-bit look-back capped at 128
# registers (registers.csv, 64x131072 and 16x524288 bf16: 20.9 -> 20.1 us against 168).
TILE_TRAITS_NO_VALUES = L.TileTraits(two_pass_rows=4, cap16=128, warps32=1,
                                     two_pass_steps32=1024, walk16_share=0.5, warps512=4)


@triton.jit
def returns_inputs(r_ptr, next_ptr, term_ptr, trunc_ptr, offs, mask, HAS_NEXT: tl.constexpr,
                   HAS_TRUNC: tl.constexpr, FOURS_BELOW: tl.constexpr):
    """One tile's rewards, next values (or rewards again: unused) and flags, unconverted."""
    r = step_load(r_ptr, offs, mask, FOURS_BELOW)
    n = r
    if HAS_NEXT:
        n = step_load(next_ptr, offs, mask, FOURS_BELOW)
    term, trunc = raw_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC, FOURS_BELOW)
    return r, n, term, trunc


@triton.jit
def returns_fwd_kernel(r_ptr, next_ptr, term_ptr, trunc_ptr, boot_ptr, out_ptr, agg_ptr, status_ptr,
                       B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                       gamma, gamma_lo, lam, lam_lo,
                       HAS_NEXT: tl.constexpr, HAS_TRUNC: tl.constexpr, HAS_BOOT: tl.constexpr,
                       RAW_DONE: tl.constexpr, FOURS_BELOW: tl.constexpr, ACC: tl.constexpr,
                       PHASE: tl.constexpr,
                       BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr,
                       FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    lam_ = tl.cast(lam, ACC) + tl.cast(lam_lo, ACC)
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, True, BLOCK_B, True)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    if HAS_BOOT:
        carry0 = tl.load(boot_ptr + rows * stride_b + (T - 1) * stride_t, mask=row_mask,
                         other=0.0).to(ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, True)
    reach = reach_start(t_begin, seg_len, BLOCK_B, True)
    n_loop = n_chunks
    if PHASE == FIX:
        reach, n_loop = fix_reach(agg_ptr, rows, row_mask, B, n_seg, pid_s, t_begin,
                                  n_chunks, carry, BLOCK_T, True, FLIP)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    for sweep in tl.static_range(1 + (PHASE == 4)):
        against = against_scan_order(PHASE, sweep, BLOCK_B)
        carry, agg_b = segment_sweep(sweep, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s,
                                     B, n_seg, carry, agg_b, carry0, True)
        t, mask, offs = tile_offsets(0, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                                     BLOCK_T, True, FLIP, against)
        r, n, term, trunc = returns_inputs(r_ptr, next_ptr, term_ptr, trunc_ptr, offs, mask,
                                           HAS_NEXT, HAS_TRUNC, FOURS_BELOW)
        for i in range(n_loop):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, True, FLIP, against)
            t_n, mask_n, offs_n = next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T,
                                            stride_b, stride_t, BLOCK_T, True, FLIP, against)
            if PREFETCH:
                r_n, n_n, term_n, trunc_n = returns_inputs(r_ptr, next_ptr, term_ptr, trunc_ptr,
                                                           offs_n, mask_n, HAS_NEXT, HAS_TRUNC,
                                                           FOURS_BELOW)
            done, cut = term.to(ACC), trunc.to(ACC)
            if RAW_DONE:  # the decayed sums' adjoint: beta = gamma (1 - d), d as given
                keep = 1.0 - done
            else:
                keep = 1.0 - tl.minimum(done + cut, 1.0)
            alpha = r.to(ACC)
            if HAS_NEXT:
                alpha += g * (1.0 - lam_) * keep * n.to(ACC)
            if HAS_BOOT and HAS_TRUNC:
                b = tl.load(boot_ptr + offs, mask=mask & (cut != 0), other=0.0).to(ACC)
                alpha += g * cut * b
            alpha = tl.where(mask, alpha, 0.0)
            beta = tl.where(mask, g * lam_ * keep, 1.0)
            out, carry, agg_b, _ = sweep_tile(
                alpha, beta, carry, agg_b, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, True, FLIP, against, True, sweep)
            reach = track_reach(reach, agg_b, i, t_begin, n_chunks, BLOCK_T, PHASE, True)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                store_tile(out_ptr, out, rows, t, fix_mask(mask, t, reach, PHASE, True, FLIP),
                           out_stride_b, out_stride_t, FOURS_BELOW)
            if PREFETCH:
                r, n, term, trunc = r_n, n_n, term_n, trunc_n
            else:
                r, n, term, trunc = returns_inputs(r_ptr, next_ptr, term_ptr, trunc_ptr, offs_n,
                                                   mask_n, HAS_NEXT, HAS_TRUNC, FOURS_BELOW)
    store_segment(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b, reach, t_begin, PHASE)


def returns(rewards, next_values, terminateds, truncateds, gamma, lambda_, bootstrap_values,
            time_dim, validate):
    """Shared body of ``compute_lambda_returns`` and ``compute_discounted_returns``."""
    args = (rewards, next_values, terminateds, truncateds, bootstrap_values)
    out, key = P.planned("returns", args, (gamma, lambda_, time_dim), validate)
    if out is not None:
        return out
    L.check_tensor("rewards", rewards)
    L.check_tensor("next_values", next_values, like=rewards, optional=True)
    L.check_tensor("terminateds", terminateds, like=rewards, flag=True)
    L.check_tensor("truncateds", truncateds, like=rewards, flag=True, optional=True)
    L.check_tensor("bootstrap_values", bootstrap_values, like=rewards, optional=True)
    axis = L.time_axis(rewards, time_dim)
    gamma = L.check_scalar("gamma", gamma)
    lambda_ = L.check_scalar("lambda_", lambda_)
    check_flags(validate, axis, terminateds, truncateds, bootstrap_values)
    if L.needs_dispatch(*args):
        return returns_op(*args, gamma, lambda_, axis)
    return P.recorded(key, _returns, *args, gamma, lambda_, axis)


def _returns(rewards: torch.Tensor, next_values: Optional[torch.Tensor],
             terminateds: torch.Tensor, truncateds: Optional[torch.Tensor],
             bootstrap_values: Optional[torch.Tensor], gamma: float, lambda_: float,
             time_dim: int) -> torch.Tensor:
    return returns_rows(rewards, next_values, terminateds, truncateds, bootstrap_values, gamma,
                        lambda_, time_dim)


def decayed_returns(x, dones, decay: float, out_dtype) -> torch.Tensor:
    """``g_t = x_t + decay (1 - d_t) g_{t+1}`` of ``[B, T]`` rows, ``d`` as given (no clamp to
    [0, 1]), in ``out_dtype``: the eligibility traces' and prefix sums' adjoint in one launch."""
    return returns_rows(x, None, dones, None, None, decay, 1.0, -1, raw_done=True,
                        out_dtype=out_dtype)


def returns_rows(rewards, next_values, terminateds, truncateds, bootstrap_values, gamma: float,
                 lambda_: float, time_dim: int, raw_done: bool = False, out_dtype=None):
    """The returns' launch; ``raw_done``: beta from the terminations unclamped (no truncations),
    ``out_dtype``: default the values' promoted dtype."""
    out_dtype = out_dtype or L.result_dtype(rewards, next_values, bootstrap_values)
    if rewards.numel() == 0:
        return torch.empty_like(rewards, dtype=out_dtype)
    rows = L.rows_of(time_dim, rewards=rewards, next_values=next_values,
                     terminateds=terminateds, truncateds=truncateds,
                     bootstrap_values=bootstrap_values)
    out = L.Output(rewards, time_dim, out_dtype, rows)
    if not L.use_triton(rewards):
        coef = _coefficients(rows.tensors, dict(gamma=gamma, lambda_=lambda_))
        if raw_done:
            coef = coef._replace(beta=gamma * (1 - rows["terminateds"].to(coef.alpha.dtype)))
        return out.set(torch_affine_scan(coef.alpha, coef.beta, coef.carry, True))
    o = out.rows
    no_values = next_values is None
    t = rows.tensors
    config, fours = L.tile_of(rows, o.device, o.element_size(),
                              TILE_TRAITS_NO_VALUES if no_values else TILE_TRAITS)
    job = Launch(returns_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(o.dtype), o.device,
                 L.layout_ints(rows, o), L.scalar_pairs(gamma, lambda_),
                 (next_values is not None, truncateds is not None, bootstrap_values is not None,
                  raw_done, fours),
                 look_back_tile=False, fixes=True)
    pointers = L.pointers(o, t["rewards"], t["next_values"], t["terminateds"], t["truncateds"],
                          t["bootstrap_values"], o)
    P.launch(job, pointers, (rewards, next_values, terminateds, truncateds, bootstrap_values),
             (out,))
    return out.result()


def _coefficients(rows, s):
    if rows["next_values"] is None:
        return C.discounted_returns_coefficients(rows["rewards"], rows["terminateds"],
                                                 rows["truncateds"], s["gamma"],
                                                 rows["bootstrap_values"])
    return C.lambda_returns_coefficients(rows["rewards"], rows["next_values"],
                                         rows["terminateds"], rows["truncateds"], s["gamma"],
                                         s["lambda_"], rows["bootstrap_values"])


returns_op = register(Spec("returns", ("rewards", "next_values", "terminateds", "truncateds",
                                       "bootstrap_values"), ("gamma", "lambda_"), _coefficients),
                      _returns)


def compute_lambda_returns(rewards, next_values, terminateds, truncateds=None, gamma=0.99,
                           lambda_=0.95, bootstrap_values=None, *, time_dim=-1, validate=False):
    """TD(lambda) targets ``G_t = r_t + gamma (1-d_t)((1-lambda) n_t + lambda G_{t+1})``.

    Args:
        rewards: ``[..., T, ...]`` floating, time on ``time_dim``.
        next_values: V(s_{t+1}) for every t, T-1 included; same shape.
        terminateds, truncateds: step ``t`` ends its episode; truncated steps take
            ``r_t + gamma b_t``. Default truncateds: None.
        gamma, lambda_: Default: 0.99, 0.95.
        bootstrap_values: read at truncated steps; its last column is the carry G_T.
            For ``r + gamma V(s_T)`` at a continuing window end give V(s_T) both here and
            in ``next_values[..., -1]`` (the paper's convention).
        validate: check flag values (synchronises).
    Returns:
        ``G`` shaped like ``rewards``.

    Example:
        >>> import torch
        >>> compute_lambda_returns(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0]]),
        ...                        torch.zeros(1, 2), gamma=1.0, lambda_=0.5)
        tensor([[4.5000, 4.0000]])
    """
    if next_values is None:
        raise TypeError("next_values must be a torch.Tensor, got None")
    return returns(rewards, next_values, terminateds, truncateds, gamma, lambda_,
                   bootstrap_values, time_dim, validate)
