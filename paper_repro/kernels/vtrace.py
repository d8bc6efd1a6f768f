"""V-trace targets and advantages in one fused backward scan (SPEC.md 1.2; proofs/derivations.py).

Delta_t = vs_t - V_t:  alpha_t = rho_t (r_t + gamma (1 - term_t) nu_t - V_t),
beta_t = gamma c_t (1 - done_t),  Delta_T = 0.  The advantage's next target vs_{t+1} is the
scanned tile shifted one step in registers (no store-and-reload round trip).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro import coefficients as C
from paper_repro.kernels import _launch as L
from paper_repro.kernels.affine_scan import (
    chunk_times,
    incoming_carry,
    launch,
    next_in_time,
    row_block,
    scan_tile,
    segment_chunks,
    store_aggregate,
)
from paper_repro.kernels.gae import check_flags
from paper_repro.kernels.torch_scan import torch_affine_scan


@triton.jit
def vtrace_fwd_kernel(lpt_ptr, lpb_ptr, v_ptr, r_ptr, term_ptr, trunc_ptr, boot_ptr, last_ptr,
                      out_ptr, adv_ptr, agg_ptr,
                      B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                      gamma, gamma_lo, rho_bar, rho_bar_lo, c_bar, c_bar_lo,
                      HAS_TRUNC: tl.constexpr, HAS_BOOT: tl.constexpr, HAS_LAST: tl.constexpr,
                      ACC: tl.constexpr, PHASE: tl.constexpr,
                      BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr):
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    rho_max = tl.cast(rho_bar, ACC) + tl.cast(rho_bar_lo, ACC)
    c_max = tl.cast(c_bar, ACC) + tl.cast(c_bar_lo, ACC)
    rows, row_mask = row_block(B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(T, seg_len, BLOCK_T)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, tl.zeros([BLOCK_B], ACC), PHASE,
                           True)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    if HAS_LAST:
        last = tl.load(last_ptr + rows, mask=row_mask, other=0.0).to(ACC)
    for i in range(n_chunks):
        t = chunk_times(i, t_begin, n_chunks, BLOCK_T, True)
        mask = row_mask[:, None] & (t < T)[None, :]
        is_last = (t == T - 1)[None, :]
        offs = rows[:, None] * stride_b + t[None, :] * stride_t
        ratio = tl.exp(tl.load(lpt_ptr + offs, mask=mask, other=0.0).to(ACC)
                       - tl.load(lpb_ptr + offs, mask=mask, other=0.0).to(ACC))
        rho = tl.minimum(ratio, rho_max)
        r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(ACC)
        v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(ACC)
        v_next = tl.load(v_ptr + offs + stride_t, mask=mask & (t + 1 < T)[None, :],
                         other=0.0).to(ACC)
        term = tl.load(term_ptr + offs, mask=mask, other=0).to(ACC)
        if HAS_TRUNC:
            trunc = tl.load(trunc_ptr + offs, mask=mask, other=0).to(ACC)
        else:
            trunc = tl.zeros_like(term)
        nu = (1.0 - trunc) * v_next
        if HAS_BOOT:
            b = tl.load(boot_ptr + offs, mask=mask & ((trunc != 0) | is_last), other=0.0)
            b = b.to(ACC)
            nu = tl.where(is_last, b, nu + trunc * b)
        if HAS_LAST:
            nu = tl.where(is_last, last[:, None], nu)
        discount = g * (1.0 - term)
        alpha = tl.where(mask, rho * (r + discount * nu - v), 0.0)
        beta = tl.where(mask, g * tl.minimum(ratio, c_max) * (1.0 - tl.minimum(term + trunc, 1.0)),
                        1.0)
        carry_in = carry
        delta, carry, b_edge = scan_tile(alpha, beta, carry, BLOCK_T, True)
        agg_b = agg_b * b_edge
        if PHASE != 1:
            # Next target: (1 - trunc) vs_{t+1} + trunc b_t inside the window, nu at T-1.
            delta_next = tl.where(is_last, 0.0, (1.0 - trunc) * next_in_time(delta, carry_in,
                                                                             BLOCK_T))
            adv = alpha + rho * discount * delta_next
            o_offs = rows[:, None] * out_stride_b + t[None, :] * out_stride_t
            tl.store(out_ptr + o_offs, (delta + v).to(out_ptr.dtype.element_ty), mask=mask)
            tl.store(adv_ptr + o_offs, adv.to(adv_ptr.dtype.element_ty), mask=mask)
    if PHASE == 1:
        store_aggregate(agg_ptr, rows, row_mask, B, n_seg, carry, agg_b)


def compute_vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None,
                   gamma=0.99, rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None, *,
                   time_dim=-1, validate=False):
    """V-trace targets ``vs_t`` and policy-gradient advantages (Espeholt et al. 2018).

    ``vs_t - V_t = rho_t delta_t + gamma c_t (1 - done_t)(vs_{t+1} - V_{t+1})`` with
    ``rho = min(pi/mu, rho_bar)``, ``c = min(pi/mu, c_bar)``.

    Args:
        log_pi_target, log_pi_behavior, values, rewards: ``[..., T, ...]`` floating, time on
            ``time_dim`` (note: values before rewards, as in the paper).
        terminateds, truncateds: step ``t`` ends its episode. Default truncateds: None.
        gamma, rho_bar, c_bar: Default: 0.99, 1.0, 1.0.
        bootstrap_values: V of the true next state, read at truncated steps and at T-1.
        last_value: V(s_T) per row; alternative to ``bootstrap_values[..., -1]``.
        validate: check flag values and unread bootstrap values (synchronises).
    Returns:
        ``(vs, advantages)``, each shaped like ``rewards``, where
        ``advantages_t = rho_t (r_t + gamma (1 - term_t) vs_{t+1} - V_t)``.

    Example:
        >>> import torch
        >>> z = torch.zeros(1, 2)
        >>> vs, adv = compute_vtrace(z, z, z, torch.ones(1, 2), z, gamma=1.0,
        ...                          last_value=torch.tensor([0.5]))
        >>> vs
        tensor([[2.5000, 1.5000]])
    """
    L.check_tensor("log_pi_target", log_pi_target)
    for name, x in (("log_pi_behavior", log_pi_behavior), ("values", values),
                    ("rewards", rewards)):
        L.check_tensor(name, x, like=log_pi_target)
    L.check_tensor("terminateds", terminateds, like=rewards, flag=True)
    L.check_tensor("truncateds", truncateds, like=rewards, flag=True, optional=True)
    L.check_tensor("bootstrap_values", bootstrap_values, like=rewards, optional=True)
    axis = L.time_axis(rewards, time_dim)
    L.check_tensor("last_value", last_value, like=rewards, optional=True,
                   shape=L.batch_shape(rewards, axis))
    if last_value is not None and bootstrap_values is not None:
        raise ValueError("pass last_value or bootstrap_values, not both")
    gamma = L.check_scalar("gamma", gamma)
    rho_bar = L.check_scalar("rho_bar", rho_bar)
    c_bar = L.check_scalar("c_bar", c_bar)
    out_dtype = L.result_dtype(rewards, values, log_pi_target, log_pi_behavior,
                               bootstrap_values, last_value)
    if rewards.numel() == 0:
        empty = torch.empty_like(rewards, dtype=out_dtype)
        return empty, empty.clone()
    check_flags(validate, axis, terminateds, truncateds, bootstrap_values)
    rows = L.rows_of(axis, lpt=log_pi_target, lpb=log_pi_behavior, v=values, r=rewards,
                     term=terminateds, trunc=truncateds, boot=bootstrap_values)
    last = L.vector_rows(last_value, rows.B)
    vs_out, adv_out = (L.Output(rewards, axis, out_dtype, rows) for _ in range(2))
    if L.use_triton(rewards):
        vs, adv = vs_out.rows, adv_out.rows
        config = L.config_for(rows.B, rows.T, rows.stride, vs.device, wide=True)
        launch(vtrace_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(out_dtype), vs.device,
               out_ptr=vs, adv_ptr=adv,
               **L.pointer_args(vs, lpt_ptr=rows["lpt"], lpb_ptr=rows["lpb"], v_ptr=rows["v"],
                                r_ptr=rows["r"], term_ptr=rows["term"], trunc_ptr=rows["trunc"],
                                boot_ptr=rows["boot"], last_ptr=last),
               **L.layout_args(rows, vs),
               **L.scalar_args(gamma=gamma, rho_bar=rho_bar, c_bar=c_bar),
               HAS_TRUNC=truncateds is not None, HAS_BOOT=bootstrap_values is not None,
               HAS_LAST=last is not None)
        return vs_out.result(), adv_out.result()
    vs, adv = _vtrace_torch(rows, last, gamma, rho_bar, c_bar)
    return vs_out.set(vs), adv_out.set(adv)


def _vtrace_torch(rows, last, gamma, rho_bar, c_bar):
    coef = C.vtrace_coefficients(rows["lpt"], rows["lpb"], rows["v"], rows["r"], rows["term"],
                                 rows["trunc"], gamma, rho_bar, c_bar, rows["boot"], last)
    acc = coef.alpha.dtype
    v, r = rows["v"].to(acc), rows["r"].to(acc)
    term = rows["term"].to(acc)
    trunc = torch.zeros_like(v) if rows["trunc"] is None else rows["trunc"].to(acc)
    boot = None if rows["boot"] is None else rows["boot"].to(acc)
    vs = torch_affine_scan(coef.alpha, coef.beta, coef.carry, True) + v
    window = C.window_value(v, boot, last)
    rho, _ = C.vtrace_ratios(rows["lpt"], rows["lpb"], rho_bar, c_bar, acc)
    next_target = C.window_next(vs, trunc, boot, window)
    adv = rho * (r + gamma * (1 - term) * next_target - v)
    return vs, adv
