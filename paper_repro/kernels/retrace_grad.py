"""Retrace's closed-form gradients (``adjoints.retrace``) in two fused Triton kernels around the
engine's scan: one writes the adjoint's input ``U`` and its beta one step on, the other every
input's gradient from the adjoint ``g``, the per-action ones included. Each reads its step's
inputs and its neighbours' (one step earlier or later) in one pass, where the same formulas in
torch ops take some 50 launches. Rows are ``[B, T]`` (per-action inputs ``[B, T, A]``, any
strides); the work tensors are dense in the per-step inputs' order, each program a block of
steps in that order (``_grad_blocks``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro.kernels import _launch as L
from paper_repro.kernels._grad_blocks import BLOCK, Work, acc_scalar, block_steps
from paper_repro.kernels.affine_scan import TL_ACC, scan_rows

# The gradients' kernel, 2 steps a thread and 4 actions (one 16-byte load of fp32) at a time:
# 72-80 registers, no spills, at any A (sm_90, triton 3.6; 8 at a time 125-168; 1024 steps and
# all of 8 actions at once: 255 and spills).
GRADS_BLOCK, A_CHUNK = 256, 4


@triton.jit
def _taken(pi_ptr, mu_ptr, act_ptr, b, t, offs, mask, A, pi_b, pi_t, pi_a, ACC: tl.constexpr):
    """(taken action, pi(a_t|s_t), mu_t) at ``offs``; an out-of-range action reads pi 0, as
    the forward kernel's (ratio 0); masked steps read mu 1."""
    act = tl.load(act_ptr + offs, mask=mask, other=0)
    ok = mask & (act >= 0) & (act < A)
    p = tl.load(pi_ptr + b * pi_b + t * pi_t + act * pi_a, mask=ok, other=0.0).to(ACC)
    mu = tl.load(mu_ptr + offs, mask=mask, other=1.0).to(ACC)
    return act, p, mu


@triton.jit
def _stays(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC: tl.constexpr, ACC: tl.constexpr):
    """(term, 1 - min(term + trunc, 1)) at ``offs``: masked steps read no flags."""
    term = tl.load(term_ptr + offs, mask=mask, other=0).to(ACC)
    done = term
    if HAS_TRUNC:
        done = tl.minimum(term + tl.load(trunc_ptr + offs, mask=mask, other=0).to(ACC), 1.0)
    return term, 1.0 - done


@triton.jit
def retrace_adjoint_inputs_kernel(u_ret_ptr, u_adv_ptr, pi_ptr, mu_ptr, act_ptr, term_ptr,
                                  trunc_ptr, U_ptr, beta_ptr, B, T, A, stride_b, stride_t, pi_b,
                                  pi_t, pi_a, work_b, work_t, gamma, gamma_lo, gl, gl_lo,
                                  rho_bar, rho_bar_lo, c_bar, c_bar_lo,
                                  HAS_TRUNC: tl.constexpr, TIME_MAJOR: tl.constexpr,
                                  WIDE: tl.constexpr,
                                  ACC: tl.constexpr, BLOCK: tl.constexpr):
    """``U_t = u_ret_t + gamma (1 - term_{t-1}) rho_{t-1} u_adv_{t-1}`` and the adjoint's beta
    ``gamma lambda min(ratio_t, c_bar)(1 - done_{t-1})`` (0 at t = 0): the forward scan
    ``g_t = U_t + beta_t g_{t-1}`` is Retrace's adjoint."""
    b, t, here = block_steps(B, T, TIME_MAJOR, BLOCK, WIDE)
    before = here & (t >= 1)
    work = b * work_b + t * work_t
    offs = b * stride_b + t * stride_t
    _, p, mu = _taken(pi_ptr, mu_ptr, act_ptr, b, t, offs, here, A, pi_b, pi_t, pi_a, ACC)
    _, p_p, mu_p = _taken(pi_ptr, mu_ptr, act_ptr, b, t - 1, offs - stride_t, before, A, pi_b,
                          pi_t, pi_a, ACC)
    term_p, stays_p = _stays(term_ptr, trunc_ptr, offs - stride_t, before, HAS_TRUNC, ACC)
    rho_p = tl.minimum(p_p / mu_p, acc_scalar(rho_bar, rho_bar_lo, ACC))
    u_adv_p = tl.load(u_adv_ptr + work - work_t, mask=before, other=0.0).to(ACC)
    U = tl.load(u_ret_ptr + work, mask=here, other=0.0).to(ACC) + \
        acc_scalar(gamma, gamma_lo, ACC) * (1.0 - term_p) * rho_p * u_adv_p
    beta = acc_scalar(gl, gl_lo, ACC) * tl.minimum(p / mu, acc_scalar(c_bar, c_bar_lo, ACC)) * \
        stays_p
    tl.store(U_ptr + work, U, mask=here)
    tl.store(beta_ptr + work, tl.where(before, beta, 0.0), mask=here)


@triton.jit
def retrace_input_grads_kernel(g_ptr, U_ptr, u_adv_ptr, q_ret_ptr, pi_ptr, npi_ptr, nq_ptr,
                               mu_ptr, act_ptr, q_ptr, r_ptr, term_ptr, trunc_ptr, dr_ptr, dq_ptr,
                               dmu_ptr, dpi_ptr, dnpi_ptr, dnq_ptr, B, T, A, stride_b, stride_t,
                               pi_b, pi_t, pi_a, npi_b, npi_t, npi_a, nq_b, nq_t, nq_a, work_b,
                               work_t, gamma, gamma_lo, gl, gl_lo, rho_bar, rho_bar_lo, c_bar,
                               c_bar_lo, HAS_TRUNC: tl.constexpr, HAS_NPI: tl.constexpr,
                               PER_ACTION: tl.constexpr, TIME_MAJOR: tl.constexpr,
                               WIDE: tl.constexpr,
                               ACC: tl.constexpr, A_CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Every input's gradient from the adjoint ``g`` (``adjoints.retrace``): ``dr = g + h``,
    ``dQ = U - g - h`` with ``h = rho u_adv``; the ratio's from ``rho`` and from ``c`` one step
    on, to the taken action's probability and to ``mu``; with PER_ACTION, the expectation's
    ``gamma (1 - term) g`` spread over the actions (dense ``[B, T, A]`` outputs in the work
    order, actions fastest)."""
    b, t, here = block_steps(B, T, TIME_MAJOR, BLOCK, WIDE)
    before, after = here & (t >= 1), here & (t + 1 < T)
    work = b * work_b + t * work_t
    offs = b * stride_b + t * stride_t
    g = acc_scalar(gamma, gamma_lo, ACC)
    rho_max, c_max = acc_scalar(rho_bar, rho_bar_lo, ACC), acc_scalar(c_bar, c_bar_lo, ACC)
    act, p, mu = _taken(pi_ptr, mu_ptr, act_ptr, b, t, offs, here, A, pi_b, pi_t, pi_a, ACC)
    ratio = p / mu
    term, _ = _stays(term_ptr, trunc_ptr, offs, here, HAS_TRUNC, ACC)
    _, stays_p = _stays(term_ptr, trunc_ptr, offs - stride_t, before, HAS_TRUNC, ACC)
    adj = tl.load(g_ptr + work, mask=here, other=0.0).to(ACC)
    adj_p = tl.load(g_ptr + work - work_t, mask=before, other=0.0).to(ACC)
    u_adv = tl.load(u_adv_ptr + work, mask=here, other=0.0).to(ACC)
    q = tl.load(q_ptr + offs, mask=here, other=0.0).to(ACC)
    q_ret = tl.load(q_ret_ptr + work, mask=here, other=0.0).to(ACC)
    q_ret_n = tl.load(q_ret_ptr + work + work_t, mask=after, other=0.0).to(ACC)
    r = tl.load(r_ptr + offs, mask=here, other=0.0).to(ACC)
    keep = g * (1.0 - term)
    h = tl.minimum(ratio, rho_max) * u_adv
    tl.store(dr_ptr + work, adj + h, mask=here)
    tl.store(dq_ptr + work, tl.load(U_ptr + work, mask=here, other=0.0).to(ACC) - adj - h,
             mask=here)
    d_c = acc_scalar(gl, gl_lo, ACC) * adj_p * (q_ret - q) * stays_p
    d_ratio = tl.where(ratio <= rho_max, u_adv * (r + keep * q_ret_n - q), 0.0) + \
        tl.where(before & (ratio <= c_max), d_c, 0.0)
    tl.store(dmu_ptr + work, -d_ratio * p / (mu * mu), mask=here)
    if PER_ACTION:
        _action_grads(pi_ptr, npi_ptr, nq_ptr, dpi_ptr, dnpi_ptr, dnq_ptr, b, t, here, act, A,
                      pi_b, pi_t, pi_a, npi_b, npi_t, npi_a, nq_b, nq_t, nq_a, work_b, work_t,
                      keep * adj, d_ratio / mu, HAS_NPI, ACC, A_CHUNK)


@triton.jit
def _action_grads(pi_ptr, npi_ptr, nq_ptr, dpi_ptr, dnpi_ptr, dnq_ptr, b, t, here, act, A, pi_b,
                  pi_t, pi_a, npi_b, npi_t, npi_a, nq_b, nq_t, nq_a, work_b, work_t, d_expect,
                  d_taken, HAS_NPI: tl.constexpr, ACC: tl.constexpr, A_CHUNK: tl.constexpr):
    """The per-action gradients, A_CHUNK actions at a time (registers stay bounded for any A):
    the expectation's ``d_expect`` spread over the actions by the weights (``npi``, else
    ``pi``) and the next Q-values, and ``d_taken`` to the taken action's probability."""
    row, step = b[:, None], t[:, None]
    out_base = (row * work_b + step * work_t) * A
    d_expect, d_taken = d_expect[:, None], d_taken[:, None]
    for a0 in range(0, A, A_CHUNK):
        a = a0 + tl.arange(0, A_CHUNK)[None, :]
        on = here[:, None] & (a < A)
        out = out_base + a
        nq = tl.load(nq_ptr + row * nq_b + step * nq_t + a * nq_a, mask=on, other=0.0).to(ACC)
        if HAS_NPI:
            npi = tl.load(npi_ptr + row * npi_b + step * npi_t + a * npi_a, mask=on,
                          other=0.0).to(ACC)
            tl.store(dnq_ptr + out, d_expect * npi, mask=on)
            tl.store(dnpi_ptr + out, d_expect * nq, mask=on)
            d_pi = tl.zeros_like(nq)
        else:
            pi = tl.load(pi_ptr + row * pi_b + step * pi_t + a * pi_a, mask=on, other=0.0)
            tl.store(dnq_ptr + out, d_expect * pi.to(ACC), mask=on)
            d_pi = d_expect * nq
        d_pi += tl.where(a == act[:, None], d_taken, 0.0)
        tl.store(dpi_ptr + out, d_pi, mask=on)


def gradients(rows, u_ret, u_adv, q_ret, s, wanted):
    """``{name: gradient}`` of Retrace's inputs (``[B, T]`` rows, per-action ``[B, T, A]``)
    from the upstream gradients ``u_ret``, ``u_adv`` and the output ``q_ret`` (rows, any float
    dtype: read and accumulated in float32 or float64), each in its input's dtype: two launches
    and the engine's scan. The per-action gradients are formed only where one of them is
    ``wanted``."""
    acc = L.acc_dtype(u_ret.dtype)
    pi, npi, nq = (rows[k] for k in ("action_probs_target", "next_action_probs_target",
                                     "next_q_values_all"))
    mu, act, q, r, term, trunc = (rows[k] for k in (
        "action_probs_behavior", "actions", "q_values", "rewards", "terminateds", "truncateds"))
    A = pi.shape[-1]
    w = Work(r, acc)  # the per-step rows share r's strides (L.rows_of)
    U, beta = w.empty(), w.empty()
    u_ret, u_adv, q_ret = w.dense(u_ret), w.dense(u_adv), w.dense(q_ret)
    sizes = (w.B, w.T, A, *r.stride())
    scalars = L.scalar_pairs(s["gamma"], s["gamma"] * s["lambda_"], s["rho_bar"], s["c_bar"])
    flags = dict(HAS_TRUNC=trunc is not None, TIME_MAJOR=w.time_major, ACC=TL_ACC[acc],
                 WIDE=w.wide(r, pi, npi, nq, q))
    trunc = term if trunc is None else trunc
    retrace_adjoint_inputs_kernel[w.grid()](u_ret, u_adv, pi, mu, act, term, trunc, U, beta,
                                            *sizes, *pi.stride(), *U.stride(), *scalars,
                                            BLOCK=BLOCK, **flags)
    g = scan_rows(U, beta, None, False, w.empty())
    per_action = bool(wanted & {"action_probs_target", "next_action_probs_target",
                                "next_q_values_all"})
    # each gradient in its input's dtype, rounded once in the kernel's store
    dr, dq, dmu = w.empty(r.dtype), w.empty(q.dtype), w.empty(mu.dtype)

    def per_action_rows(x):  # [B, T, A] with the actions fastest, the steps in the work order
        if not per_action or x is None:
            return dr
        shape = (w.T, w.B, A) if w.time_major else (w.B, w.T, A)
        out = torch.empty(shape, dtype=x.dtype, device=r.device)
        return out.transpose(0, 1) if w.time_major else out

    dpi, dnq, dnpi = per_action_rows(pi), per_action_rows(nq), per_action_rows(npi)
    weights = pi if npi is None else npi
    retrace_input_grads_kernel[w.grid(GRADS_BLOCK)](
        g, U, u_adv, q_ret, pi, weights, nq, mu, act, q, r, term, trunc, dr, dq, dmu, dpi, dnpi,
        dnq, *sizes, *pi.stride(), *weights.stride(), *nq.stride(), *U.stride(), *scalars,
        HAS_NPI=npi is not None, PER_ACTION=per_action,
        A_CHUNK=min(A_CHUNK, triton.next_power_of_2(A)), BLOCK=GRADS_BLOCK, **flags)
    got = {"rewards": dr, "q_values": dq, "action_probs_behavior": dmu}
    if per_action:
        got.update(action_probs_target=dpi, next_q_values_all=dnq)
        if npi is not None:
            got["next_action_probs_target"] = dnpi
    return got
