"""Generalized Advantage Estimation as one fused backward scan (SPEC.md 1.1; proofs/gae.py).

alpha_t = r_t + gamma (1 - term_t) nu_t - V_t,  beta_t = gamma lambda (1 - done_t),  A_T = 0,
nu_t = (1 - trunc_t) V_{t+1} + trunc_t b_t for t < T-1 and the window value at T-1.
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
from paper_repro.kernels.torch_scan import torch_affine_scan

# Long rows: no fp32 rows take two passes (split_rows.csv, split-long, one-warp 512-step
# look-back tiles: 1x4194304 0.87x the two passes' time, 4x1048576 0.96x that of 2048-step
# look-back tiles), and from five rows fp32 looks back in those tiles too, once programs took
# the launch index (order_tiles.csv, 64x131072: 37.8 against 39.7 us in two capped warps); the
# 16-bit look-back capped at 128 registers (registers.csv, 64x131072 and 16x524288 bf16: 27.4
# -> 24.5 us and 28.2 -> 25.7 against 168 registers uncapped). Time-major: the look-back at every
# size, its inputs too many for two passes in L2 (tn_sweep.csv, 512x8192 34.7 -> 26.7 us), in
# 128-step tiles (tn_variants.csv, 256-step ones: 1024x8192 1.16x the time); one-pass
# time-major rows of 128 steps from a block an SM in 4 warps (tn_abound.csv, 1024x128: 2.69
# -> 2.49 us, 2048x128 3.01 -> 2.85). 16-bit time-major walks in 32-env tiles: by look-back
# under half the SMs, else in runs (``_tiles.wide_walks16``).
TILE_TRAITS = L.TileTraits(two_pass_rows=0, cap16=128, warps32=1, look_back_steps32=512,
                           time_major_two_pass=(0, 0), time_major_look_back_steps=128,
                           time_major_row_warps=4, walk16_share=0.5)


@triton.jit
def next_state_value(v_next, boot_ptr, last, offs, mask, t, T, trunc,
                     HAS_BOOT: tl.constexpr, HAS_LAST: tl.constexpr, ACC: tl.constexpr):
    """nu_t: V_{t+1} inside an episode, b_t at truncations, the window value at T-1."""
    is_last = (t == T - 1)[None, :]
    nu = (1.0 - trunc) * v_next.to(ACC)
    if HAS_BOOT:
        # Bootstrap values are read only where they are used: truncations and T-1.
        b = tl.load(boot_ptr + offs, mask=mask & ((trunc != 0) | is_last), other=0.0).to(ACC)
        nu = tl.where(is_last, b, nu + trunc * b)
    if HAS_LAST:
        nu = tl.where(is_last, last[:, None], nu)
    return nu


@triton.jit
def step_inputs(r_ptr, v_ptr, term_ptr, trunc_ptr, offs, mask, t, row_mask, T, stride_t,
                HAS_TRUNC: tl.constexpr, FOURS_BELOW: tl.constexpr, FLIP: tl.constexpr):
    """One tile's r_t, V_t, V_{t+1} and flags as stored (unconverted: no wait on the loads)."""
    r = step_load(r_ptr, offs, mask, FOURS_BELOW)
    v = step_load(v_ptr, offs, mask, FOURS_BELOW)
    if FLIP > 1:  # runs of ascending steps: V_{t+1} from V_t's registers
        v_next = neighbour_load(v, v_ptr, offs, mask, t, row_mask, T, stride_t, FLIP, True)
    else:
        v_next = step_load(v_ptr, offs + stride_t, mask & (t + 1 < T)[None, :], FOURS_BELOW)
    term, trunc = raw_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC, FOURS_BELOW)
    return r, v, v_next, term, trunc


@triton.jit
def gae_fwd_kernel(r_ptr, v_ptr, term_ptr, trunc_ptr, boot_ptr, last_ptr, out_ptr, agg_ptr,
                   status_ptr, B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                   gamma, gamma_lo, lam, lam_lo,
                   HAS_TRUNC: tl.constexpr, HAS_BOOT: tl.constexpr, HAS_LAST: tl.constexpr,
                   FOURS_BELOW: tl.constexpr, ACC: tl.constexpr, PHASE: tl.constexpr,
                   BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr,
                   FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    gl = g * (tl.cast(lam, ACC) + tl.cast(lam_lo, ACC))
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, True, BLOCK_B, True)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, True)
    reach = reach_start(t_begin, seg_len, BLOCK_B, True)
    n_loop = n_chunks
    if PHASE == FIX:
        reach, n_loop = fix_reach(agg_ptr, rows, row_mask, B, n_seg, pid_s, t_begin,
                                  n_chunks, carry, BLOCK_T, True, FLIP)
    last = tl.zeros([BLOCK_B], ACC)
    if HAS_LAST:
        last = tl.load(last_ptr + rows, mask=row_mask, other=0.0).to(ACC)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    for sweep in tl.static_range(1 + (PHASE == 4)):
        against = against_scan_order(PHASE, sweep, BLOCK_B)
        carry, agg_b = segment_sweep(sweep, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s,
                                     B, n_seg, carry, agg_b, carry0, True)
        t, mask, offs = tile_offsets(0, t_begin, n_chunks, rows, row_mask, T, stride_b, stride_t,
                                     BLOCK_T, True, FLIP, against)
        r, v, v_next, term, trunc = step_inputs(r_ptr, v_ptr, term_ptr, trunc_ptr, offs, mask, t,
                                                row_mask, T, stride_t, HAS_TRUNC, FOURS_BELOW, FLIP)
        for i in range(n_loop):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, True, FLIP, against)
            t_n, mask_n, offs_n = next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T,
                                            stride_b, stride_t, BLOCK_T, True, FLIP, against)
            if PREFETCH:
                r_n, v_n, v_next_n, term_n, trunc_n = step_inputs(
                    r_ptr, v_ptr, term_ptr, trunc_ptr, offs_n, mask_n, t_n, row_mask, T,
                    stride_t, HAS_TRUNC, FOURS_BELOW, FLIP)
            done, cut = term.to(ACC), trunc.to(ACC)
            nu = next_state_value(v_next, boot_ptr, last, offs, mask, t, T, cut,
                                  HAS_BOOT, HAS_LAST, ACC)
            alpha = tl.where(mask, r.to(ACC) + g * (1.0 - done) * nu - v.to(ACC), 0.0)
            beta = tl.where(mask, gl * (1.0 - tl.minimum(done + cut, 1.0)), 1.0)
            out, carry, agg_b, _ = sweep_tile(
                alpha, beta, carry, agg_b, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, True, FLIP, against, True, sweep)
            reach = track_reach(reach, agg_b, i, t_begin, n_chunks, BLOCK_T, PHASE, True)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                store_tile(out_ptr, out, rows, t, fix_mask(mask, t, reach, PHASE, True, FLIP),
                           out_stride_b, out_stride_t, FOURS_BELOW)
            if PREFETCH:
                r, v, v_next, term, trunc = r_n, v_n, v_next_n, term_n, trunc_n
            else:
                r, v, v_next, term, trunc = step_inputs(
                    r_ptr, v_ptr, term_ptr, trunc_ptr, offs_n, mask_n, t_n, row_mask, T,
                    stride_t, HAS_TRUNC, FOURS_BELOW, FLIP)
    store_segment(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b, reach, t_begin, PHASE)


def check_stray_bootstrap(bootstrap_values, truncateds, axis):
    """validate=True: bootstrap values must be zero where nothing reads them."""
    if bootstrap_values is None:
        return
    b = bootstrap_values.movedim(axis, -1)[..., :-1]
    unread = b != 0
    if truncateds is not None:
        unread &= truncateds.movedim(axis, -1)[..., :-1] == 0
    if bool(unread.any()):
        raise ValueError("bootstrap_values is nonzero at a step that is neither truncated nor "
                         "the last one; such values are never read (validate=True)")


def check_flags(validate, axis, terminateds, truncateds=None, bootstrap_values=None):
    if not L.validation_requested(validate):
        return
    L.check_binary("terminateds", terminateds)
    L.check_binary("truncateds", truncateds)
    L.check_exclusive(terminateds, truncateds)
    check_stray_bootstrap(bootstrap_values, truncateds, axis)


def compute_gae(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                bootstrap_values=None, last_value=None, *, time_dim=-1, validate=False):
    """Generalized advantage estimates ``A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}``.

    Args:
        rewards, values: ``[..., T, ...]`` floating, time on ``time_dim``; ``values`` is V(s_t).
        terminateds, truncateds: step ``t`` ends its episode (bool, integer or float);
            truncated steps bootstrap from ``bootstrap_values``. Default truncateds: None. A
            float in [0, 1] weights the successor by ``1 - flag``: a per-step discount
            ``gamma * c_t`` is ``terminateds = 1 - c_t`` (every estimator is linear in its flags).
        gamma, lambda_: discount and trace decay. Default: 0.99, 0.95.
        bootstrap_values: V of the true next state, read at truncated steps and at T-1.
        last_value: V(s_T) per row (batch shape); alternative to ``bootstrap_values[..., -1]``.
        validate: check flag values and unread bootstrap values (synchronises).
    Returns:
        advantages shaped like ``rewards`` (returns are ``advantages + values``).

    Example:
        >>> import torch
        >>> r = torch.tensor([[1.0, 2.0, 3.0]])
        >>> compute_gae(r, torch.zeros(1, 3), torch.zeros(1, 3), gamma=1.0, lambda_=1.0,
        ...             last_value=torch.tensor([2.0]))
        tensor([[8., 7., 5.]])
    """
    args = (rewards, values, terminateds, truncateds, bootstrap_values, last_value)
    out, key = P.planned("gae", args, (gamma, lambda_, time_dim), validate)
    if out is not None:
        return out
    L.check_tensor("rewards", rewards)
    L.check_tensor("values", values, like=rewards)
    L.check_tensor("terminateds", terminateds, like=rewards, flag=True)
    L.check_tensor("truncateds", truncateds, like=rewards, flag=True, optional=True)
    L.check_tensor("bootstrap_values", bootstrap_values, like=rewards, optional=True)
    axis = L.time_axis(rewards, time_dim)
    L.check_tensor("last_value", last_value, like=rewards, optional=True,
                   shape=lambda: L.batch_shape(rewards, axis))
    if last_value is not None and bootstrap_values is not None:
        raise ValueError("pass last_value or bootstrap_values, not both")
    gamma = L.check_scalar("gamma", gamma)
    lambda_ = L.check_scalar("lambda_", lambda_)
    check_flags(validate, axis, terminateds, truncateds, bootstrap_values)
    if L.needs_dispatch(*args):
        return gae_op(*args, gamma, lambda_, axis)
    return P.recorded(key, _gae, *args, gamma, lambda_, axis)


def _gae(rewards: torch.Tensor, values: torch.Tensor, terminateds: torch.Tensor,
         truncateds: Optional[torch.Tensor], bootstrap_values: Optional[torch.Tensor],
         last_value: Optional[torch.Tensor], gamma: float, lambda_: float,
         time_dim: int) -> torch.Tensor:
    out_dtype = L.result_dtype(rewards, values, bootstrap_values, last_value)
    if rewards.numel() == 0:
        return torch.empty_like(rewards, dtype=out_dtype)
    rows = L.rows_of(time_dim, rewards=rewards, values=values, terminateds=terminateds,
                     truncateds=truncateds, bootstrap_values=bootstrap_values)
    last = L.vector_rows(last_value, rows.B)
    out = L.Output(rewards, time_dim, out_dtype, rows)
    if not L.use_triton(rewards):
        coef = _coefficients(dict(rows.tensors, last_value=last), dict(gamma=gamma,
                                                                        lambda_=lambda_))
        return out.set(torch_affine_scan(coef.alpha, coef.beta, coef.carry, True))
    o = out.rows
    t = rows.tensors
    config, fours = L.tile_of(rows, o.device, o.element_size(), TILE_TRAITS)
    # 16-bit rows' one-tile look-back walked: compile-time, bf16 64x131072 took 1.08x the time
    # (look_back_tile_ab.csv, in turn: 23.8 us against 22.0 walked; fp32 1.00x).
    job = Launch(gae_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(o.dtype), o.device,
                 L.layout_ints(rows, o), L.scalar_pairs(gamma, lambda_),
                 (truncateds is not None, bootstrap_values is not None, last is not None, fours),
                 look_back_tile=o.element_size() != 2, fixes=True)
    pointers = L.pointers(o, t["rewards"], t["values"], t["terminateds"], t["truncateds"],
                          t["bootstrap_values"], last, o)
    P.launch(job, pointers, (rewards, values, terminateds, truncateds, bootstrap_values,
                             last_value), (out,))
    return out.result()


def _coefficients(rows, s):
    return C.gae_coefficients(rows["rewards"], rows["values"], rows["terminateds"],
                              rows["truncateds"], s["gamma"], s["lambda_"],
                              rows["bootstrap_values"], rows["last_value"])


gae_op = register(Spec("gae", ("rewards", "values", "terminateds", "truncateds",
                               "bootstrap_values", "last_value"), ("gamma", "lambda_"),
                       _coefficients, per_row=("last_value",)), _gae)
