"""GAE's and the λ-returns' closed-form input gradients (``adjoints.gae``, ``adjoints.returns``)
from their adjoint ``g`` in one fused Triton kernel: the value (or next-value) gradient, the
bootstrap values' and the window value's, each step reading its flags and ``g`` one step
earlier, where the same formulas in torch ops take 3-6 launches and as many passes over memory.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from paper_repro.kernels import _launch as L
from paper_repro.kernels._grad_blocks import BLOCK, Work, acc_scalar, block_steps
from paper_repro.kernels.affine_scan import TL_ACC


@triton.jit
def returns_input_grads_kernel(g_ptr, term_ptr, trunc_ptr, dr_ptr, dv_ptr, db_ptr, dlast_ptr,
                               B, T, stride_b, stride_t, work_b, work_t, gamma, gamma_lo, lam,
                               lam_lo, GAE: tl.constexpr, HAS_TRUNC: tl.constexpr,
                               WANT_DR: tl.constexpr, WANT_DV: tl.constexpr,
                               WANT_DB: tl.constexpr,
                               TIME_MAJOR: tl.constexpr, WIDE: tl.constexpr,
                               ACC: tl.constexpr, BLOCK: tl.constexpr):
    """GAE (``GAE``): ``dV_t = -g_t + gamma (1 - term_{t-1})(1 - trunc_{t-1}) g_{t-1}``,
    ``db_t = gamma (1 - term_t) trunc_t g_t`` (at T - 1 ``gamma (1 - term) g``: with bootstrap
    values the window value is ``b_{T-1}``), ``dW = gamma (1 - term_{T-1}) g_{T-1}``. The λ-returns:
    ``dn_t = gamma (1 - lambda)(1 - done_t) g_t``, ``db_t = gamma trunc_t g_t`` plus the carry's
    ``gamma lambda (1 - done_{T-1}) g_{T-1}`` at T - 1."""
    b, t, here = block_steps(B, T, TIME_MAJOR, BLOCK, WIDE)
    before, last = here & (t >= 1), here & (t == T - 1)
    work = b * work_b + t * work_t
    offs = b * stride_b + t * stride_t
    gm, lm = acc_scalar(gamma, gamma_lo, ACC), acc_scalar(lam, lam_lo, ACC)
    adj = tl.load(g_ptr + work, mask=here, other=0.0).to(ACC)
    if WANT_DR:  # the rewards' gradient is g itself, here rounded to their 16-bit dtype
        tl.store(dr_ptr + work, adj, mask=here)
    term = tl.load(term_ptr + offs, mask=here, other=0).to(ACC)
    trunc = tl.zeros_like(term)
    if HAS_TRUNC:
        trunc = tl.load(trunc_ptr + offs, mask=here, other=0).to(ACC)
    if GAE:
        keep = gm * (1.0 - term) * adj
        if WANT_DV:
            term_p = tl.load(term_ptr + offs - stride_t, mask=before, other=0).to(ACC)
            trunc_p = tl.zeros_like(term_p)
            if HAS_TRUNC:
                trunc_p = tl.load(trunc_ptr + offs - stride_t, mask=before, other=0).to(ACC)
            adj_p = tl.load(g_ptr + work - work_t, mask=before, other=0.0).to(ACC)
            tl.store(dv_ptr + work, gm * (1.0 - term_p) * (1.0 - trunc_p) * adj_p - adj,
                     mask=here)
        if WANT_DB:
            tl.store(db_ptr + work, tl.where(t == T - 1, keep, trunc * keep), mask=here)
        tl.store(dlast_ptr + b, keep, mask=last)
    else:
        stays = 1.0 - tl.minimum(term + trunc, 1.0)
        if WANT_DV:
            tl.store(dv_ptr + work, gm * (1.0 - lm) * stays * adj, mask=here)
        if WANT_DB:
            db = gm * trunc * adj + tl.where(t == T - 1, gm * lm * stays * adj, 0.0)
            tl.store(db_ptr + work, db, mask=here)


def gradients(rows, g, s, wanted, gae: bool, lam: float):
    """``{name: gradient}`` of GAE's (``gae``) or the λ-returns' inputs from the adjoint ``g``
    (rows, accumulation dtype; the rewards' gradient is ``g`` itself), ``wanted`` only, each in
    its input's dtype: one launch. ``lam``: the λ-returns' lambda (1 for discounted returns)."""
    term, trunc = rows["terminateds"], rows["truncateds"]
    w = Work(term, g.dtype)
    g = w.dense(g)
    first = "values" if gae else "next_values"
    want_dv, want_db = first in wanted, "bootstrap_values" in wanted
    want_dr = "rewards" in wanted and rows["rewards"].dtype != g.dtype
    dr = w.empty(rows["rewards"].dtype) if want_dr else g
    dv = w.empty(rows[first].dtype) if want_dv else g
    db = w.empty(rows["bootstrap_values"].dtype) if want_db else g
    last = rows["last_value"] if gae else None
    dlast = torch.empty(w.B, dtype=g.dtype if last is None else last.dtype,
                        device=g.device) if gae else g
    returns_input_grads_kernel[w.grid()](
        g, term, term if trunc is None else trunc, dr, dv, db, dlast, w.B, w.T, *term.stride(),
        *g.stride(), *L.scalar_pairs(s["gamma"], lam), GAE=gae, HAS_TRUNC=trunc is not None,
        WANT_DR=want_dr, WANT_DV=want_dv, WANT_DB=want_db, TIME_MAJOR=w.time_major,
        WIDE=w.wide(term),
        ACC=TL_ACC[g.dtype], BLOCK=BLOCK)
    got = {"rewards": dr}
    if want_dv:
        got[first] = dv
    if want_db:
        got["bootstrap_values"] = db
    if gae:
        got["last_value"] = dlast
    return got
