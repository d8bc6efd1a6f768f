"""V-trace's closed-form gradients (``adjoints.vtrace``) in two fused Triton kernels around the
engine's scan: one writes the adjoint's input ``U`` and its beta one step on, the other every
input's gradient from the adjoint ``g``. Each reads its step's inputs and its neighbours' (one
step earlier or later) in one pass, where the same formulas in torch ops take some 55 launches.
Rows are ``[B, T]``: the per-step inputs in their common strides, the work tensors dense in the
same order, each program a block of elements in that order.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro.kernels import _launch as L
from paper_repro.kernels._grad_blocks import BLOCK, Work, acc_scalar, block_steps
from paper_repro.kernels.affine_scan import TL_ACC, scan_rows

# The input-gradient kernel holds some 20 block-wide values: 48 registers on sm_90 at 256
# steps, 187 at 1024 (H200, data/h200/grad_blocks_ab.csv: 512x4096 55.1 -> 52.9 us, 64x131072
# 202.3 -> 194.9; 4096x128 and time-major rows level).
GRADS_BLOCK = 256


@triton.jit
def _step(lpt_ptr, lpb_ptr, term_ptr, trunc_ptr, offs, mask, HAS_TRUNC: tl.constexpr,
          ACC: tl.constexpr):
    """(ratio, term, trunc) of the steps at ``offs``; masked steps read ratio 1, no flags."""
    x = tl.load(lpt_ptr + offs, mask=mask, other=0.0).to(ACC) - \
        tl.load(lpb_ptr + offs, mask=mask, other=0.0).to(ACC)
    term = tl.load(term_ptr + offs, mask=mask, other=0).to(ACC)
    trunc = tl.zeros_like(term)
    if HAS_TRUNC:
        trunc = tl.load(trunc_ptr + offs, mask=mask, other=0).to(ACC)
    return tl.exp(x), term, trunc


@triton.jit
def vtrace_adjoint_inputs_kernel(u_vs_ptr, u_pg_ptr, lpt_ptr, lpb_ptr, term_ptr, trunc_ptr,
                                 U_ptr, beta_ptr, B, T, stride_b, stride_t, work_b, work_t, gamma,
                                 gamma_lo, gl, gl_lo, rho_bar, rho_bar_lo, c_bar, c_bar_lo,
                                 HAS_TRUNC: tl.constexpr, TIME_MAJOR: tl.constexpr,
                                 WIDE: tl.constexpr,
                                 ACC: tl.constexpr, BLOCK: tl.constexpr):
    """``U_t = u_vs_t + on_{t-1} rho_{t-1} u_pg_{t-1}`` and ``beta_{t-1}`` (0 at t = 0), with
    ``on = gamma (1 - term)(1 - trunc)`` and ``beta = gamma lambda c (1 - min(term + trunc, 1))``:
    the forward scan ``g_t = U_t + beta_{t-1} g_{t-1}`` is V-trace's adjoint."""
    b, t, here = block_steps(B, T, TIME_MAJOR, BLOCK, WIDE)
    before = here & (t >= 1)
    work = b * work_b + t * work_t
    prev = b * stride_b + (t - 1) * stride_t
    ratio, term, trunc = _step(lpt_ptr, lpb_ptr, term_ptr, trunc_ptr, prev, before, HAS_TRUNC,
                               ACC)
    g = acc_scalar(gamma, gamma_lo, ACC)
    rho = tl.minimum(ratio, acc_scalar(rho_bar, rho_bar_lo, ACC))
    c = tl.minimum(ratio, acc_scalar(c_bar, c_bar_lo, ACC))
    u_pg = tl.load(u_pg_ptr + work - work_t, mask=before, other=0.0).to(ACC)
    U = tl.load(u_vs_ptr + work, mask=here, other=0.0).to(ACC) + \
        g * (1.0 - term) * (1.0 - trunc) * rho * u_pg
    beta = acc_scalar(gl, gl_lo, ACC) * c * (1.0 - tl.minimum(term + trunc, 1.0))
    tl.store(U_ptr + work, U, mask=here)
    tl.store(beta_ptr + work, tl.where(before, beta, 0.0), mask=here)


@triton.jit
def vtrace_input_grads_kernel(g_ptr, U_ptr, u_pg_ptr, vs_ptr, lpt_ptr, lpb_ptr, v_ptr, r_ptr,
                              term_ptr, trunc_ptr, boot_ptr, window_ptr, dr_ptr, dv_ptr, dx_ptr,
                              dxb_ptr, db_ptr, dw_ptr, B, T, stride_b, stride_t, work_b, work_t,
                              gamma, gamma_lo, gl, gl_lo, rho_bar, rho_bar_lo, c_bar, c_bar_lo,
                              HAS_TRUNC: tl.constexpr, HAS_BOOT: tl.constexpr,
                              WINDOW_FROM_BOOT: tl.constexpr, WANT_DXB: tl.constexpr,
                              TIME_MAJOR: tl.constexpr,
                              WIDE: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    """Every input's gradient from the adjoint ``g`` (``adjoints.vtrace``): ``dr = p + q``,
    ``dV = U - p - q + on_{t-1} p_{t-1}``, ``dx`` of the log-ratio through rho and c, ``db`` at
    truncations (and T-1 where the window value is ``b_{T-1}``), ``dW`` the window value's, with
    ``p = rho g``, ``q = rho u_pg``. The window value is the last value, else ``b_{T-1}``
    (``WINDOW_FROM_BOOT``), else 0; the behaviour log-probabilities' gradient, ``-dx``, is
    written where ``WANT_DXB``."""
    b, t, here = block_steps(B, T, TIME_MAJOR, BLOCK, WIDE)
    before, after = here & (t >= 1), here & (t + 1 < T)
    last = here & (t == T - 1)
    work = b * work_b + t * work_t
    offs = b * stride_b + t * stride_t
    g = acc_scalar(gamma, gamma_lo, ACC)
    rho_max, c_max = acc_scalar(rho_bar, rho_bar_lo, ACC), acc_scalar(c_bar, c_bar_lo, ACC)
    ratio, term, trunc = _step(lpt_ptr, lpb_ptr, term_ptr, trunc_ptr, offs, here, HAS_TRUNC, ACC)
    ratio_p, term_p, trunc_p = _step(lpt_ptr, lpb_ptr, term_ptr, trunc_ptr, offs - stride_t,
                                     before, HAS_TRUNC, ACC)
    adj = tl.load(g_ptr + work, mask=here, other=0.0).to(ACC)
    adj_p = tl.load(g_ptr + work - work_t, mask=before, other=0.0).to(ACC)
    u_pg = tl.load(u_pg_ptr + work, mask=here, other=0.0).to(ACC)
    v = tl.load(v_ptr + offs, mask=here, other=0.0).to(ACC)
    v_n = tl.load(v_ptr + offs + stride_t, mask=after, other=0.0).to(ACC)
    vs_n = tl.load(vs_ptr + work + work_t, mask=after, other=0.0).to(ACC)
    r = tl.load(r_ptr + offs, mask=here, other=0.0).to(ACC)
    keep = g * (1.0 - term)
    p = tl.minimum(ratio, rho_max) * adj
    pq = p + tl.minimum(ratio, rho_max) * u_pg
    on_p = g * (1.0 - term_p) * (1.0 - trunc_p)
    dv = tl.load(U_ptr + work, mask=here, other=0.0).to(ACC) - pq + \
        on_p * tl.minimum(ratio_p, rho_max) * adj_p
    boot = tl.zeros_like(v)
    if HAS_BOOT:
        boot = tl.load(boot_ptr + offs, mask=here & ((trunc != 0) | last), other=0.0).to(ACC)
    window = boot  # at T-1: b_{T-1}, or 0 without bootstrap values
    if not WINDOW_FROM_BOOT:
        window = tl.load(window_ptr + b, mask=last, other=0.0).to(ACC)
    nu = tl.where(last, window, (1.0 - trunc) * v_n + trunc * boot)
    eta = tl.where(last, window, (1.0 - trunc) * vs_n + trunc * boot)
    d_rho = adj * (r + keep * nu - v) + u_pg * (r + keep * eta - v)
    d_c = adj * (vs_n - v_n) * acc_scalar(gl, gl_lo, ACC) * (1.0 - tl.minimum(term + trunc, 1.0))
    dx = ratio * (tl.where(ratio <= rho_max, d_rho, 0.0) + tl.where(ratio <= c_max, d_c, 0.0))
    tl.store(dr_ptr + work, pq, mask=here)
    tl.store(dv_ptr + work, dv, mask=here)
    tl.store(dx_ptr + work, dx, mask=here)
    if WANT_DXB:
        tl.store(dxb_ptr + work, -dx, mask=here)
    at_end = keep * pq
    if HAS_BOOT:
        end = at_end if WINDOW_FROM_BOOT else tl.zeros_like(at_end)
        tl.store(db_ptr + work, tl.where(last, end, trunc * at_end), mask=here)
    tl.store(dw_ptr + b, at_end, mask=last)


def gradients(rows, u_vs, u_pg, vs, s, wanted):
    """``{name: gradient}`` of V-trace's inputs (``[B, T]`` rows of ``L.rows_of``, ``[B]`` for
    the last value), each in its input's dtype, from the upstream gradients ``u_vs``, ``u_pg``
    and the output ``vs`` (rows, any float dtype: the kernels read and accumulate them in
    float32 or float64): two launches and the engine's scan, nothing else. The work tensors are
    dense in the inputs' order (time-major or not); the behaviour log-probabilities' gradient
    is written only where ``wanted``."""
    acc = L.acc_dtype(u_vs.dtype)
    lpt, lpb, v, r, term = (rows[k] for k in ("log_pi_target", "log_pi_behavior", "values",
                                              "rewards", "terminateds"))
    trunc, boot, last = rows["truncateds"], rows["bootstrap_values"], rows["last_value"]
    w = Work(r, acc)  # the per-step rows share r's strides (L.rows_of)
    U, beta = w.empty(), w.empty()
    u_vs, u_pg, vs = w.dense(u_vs), w.dense(u_pg), w.dense(vs)
    layout = (w.B, w.T, *r.stride(), *U.stride())
    scalars = L.scalar_pairs(s["gamma"], s["gamma"] * s["lambda_"], s["rho_bar"], s["c_bar"])
    flags = dict(HAS_TRUNC=trunc is not None, TIME_MAJOR=w.time_major, ACC=TL_ACC[acc],
                 WIDE=w.wide(r, boot))
    vtrace_adjoint_inputs_kernel[w.grid()](u_vs, u_pg, lpt, lpb, term,
                                           term if trunc is None else trunc, U, beta, *layout,
                                           *scalars, BLOCK=BLOCK, **flags)
    g = scan_rows(U, beta, None, False, w.empty())
    # each gradient in its input's dtype, rounded once in the kernel's store
    dr, dv, dx = w.empty(r.dtype), w.empty(v.dtype), w.empty(lpt.dtype)
    want_dxb = "log_pi_behavior" in wanted
    dxb = w.empty(lpb.dtype) if want_dxb else dx
    db = w.empty(boot.dtype) if boot is not None else dr
    dw = torch.empty(w.B, dtype=acc if last is None else last.dtype, device=r.device)
    vtrace_input_grads_kernel[w.grid(GRADS_BLOCK)](
        g, U, u_pg, vs, lpt, lpb, v, r, term, term if trunc is None else trunc,
        v if boot is None else boot, v if last is None else last.contiguous(), dr, dv, dx, dxb,
        db, dw, *layout, *scalars, HAS_BOOT=boot is not None, WINDOW_FROM_BOOT=last is None,
        WANT_DXB=want_dxb, BLOCK=GRADS_BLOCK, **flags)
    got = {"rewards": dr, "values": dv, "log_pi_target": dx, "last_value": dw}
    if want_dxb:
        got["log_pi_behavior"] = dxb
    if boot is not None:
        got["bootstrap_values"] = db
    return got
