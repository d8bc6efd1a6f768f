"""V-trace targets and advantages in one fused backward scan (SPEC.md 1.2; proofs/vtrace.py).

Delta_t = vs_t - V_t:  alpha_t = rho_t (r_t + gamma (1 - term_t) nu_t - V_t),
beta_t = gamma c_t (1 - done_t) with c_t = lambda min(pi/mu, c_bar),  Delta_T = 0.  The
advantage's next target vs_{t+1} is the scanned tile shifted one step in registers (no
store-and-reload round trip). Two compile-time switches serve PufferLib's advantage
(pufferlib_compat): RATIO reads pi/mu itself in place of two log-probabilities, DIFF stores
Delta alone.
"""
from dataclasses import replace
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from paper_repro import coefficients as C
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan as P
from paper_repro.kernels.affine_scan import (
    Launch,
    against_scan_order,
    aligned_layout,
    incoming_carry,
    next_in_time,
    next_tile,
    program_ids,
    row_block,
    segment_chunks,
    segment_sweep,
    step_load,
    store_aggregate,
    store_tile,
    sweep_tile,
    tile_offsets,
)
from paper_repro.kernels.autograd import Spec, register
from paper_repro.kernels.gae import check_flags, next_state_value, step_inputs
from paper_repro.kernels.torch_scan import torch_affine_scan

# Long rows look back: 16-bit ones from five rows (words_probe.csv: 63.7 -> 47.4 us at
# 64x131072 bf16), fp32 ones from one (4x1048576: 62.5 -> 48.8 us, 1x4194304 62.6 -> 57.9);
# the 16-bit look-back capped at 128 registers (registers.csv, 64x131072 and 16x524288 bf16:
# 45.4 -> 42.3 us and 47.3 -> 43.6 against 168 registers uncapped). One-pass time-major rows
# of 128 steps from a block an SM in 4 warps (tn_abound.csv, 1024x128: 3.21 -> 2.89 us).
TILE_TRAITS = L.TileTraits(two_pass_rows=0, cap16=128, time_major_row_warps=4)
# Without truncations fp32 rows of up to 4096 steps walk 1024-step tiles up to four an SM
# (vtrace_walk_rows.csv, H200: 448-528 rows 0.86-0.94x the 512-step walk's time, 512x4096 17.2
# -> 16.0 us; H100 0.92-0.99x); truncated ones 1.13-1.33x, so they keep 512-step tiles from three
# rows an SM: their 1024-step tile holds 157 registers, three programs an SM, against 128
# (sass_walks.csv; capped at 128 it spills and still lost, 1.03-1.07x).
TILE_TRAITS_UNTRUNCATED = replace(TILE_TRAITS, walk_rows32=4)


@triton.jit
def vtrace_inputs(lpt_ptr, lpb_ptr, r_ptr, v_ptr, term_ptr, trunc_ptr, offs, mask, t, row_mask,
                  T, stride_t, HAS_TRUNC: tl.constexpr, FOURS_BELOW: tl.constexpr,
                  FLIP: tl.constexpr, RATIO: tl.constexpr):
    """One tile's log-probabilities (``RATIO``: the ratios, twice), r_t, V_t, V_{t+1} and
    flags, unconverted."""
    lpt = step_load(lpt_ptr, offs, mask, FOURS_BELOW)
    if RATIO:
        lpb = lpt
    else:
        lpb = step_load(lpb_ptr, offs, mask, FOURS_BELOW)
    r, v, v_next, term, trunc = step_inputs(r_ptr, v_ptr, term_ptr, trunc_ptr, offs, mask, t,
                                            row_mask, T, stride_t, HAS_TRUNC, FOURS_BELOW, FLIP)
    return lpt, lpb, r, v, v_next, term, trunc


@triton.jit
def vtrace_fwd_kernel(lpt_ptr, lpb_ptr, v_ptr, r_ptr, term_ptr, trunc_ptr, boot_ptr, last_ptr,
                      out_ptr, adv_ptr, agg_ptr, status_ptr,
                      B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                      gamma, gamma_lo, rho_bar, rho_bar_lo, c_bar, c_bar_lo, trace, trace_lo,
                      HAS_TRUNC: tl.constexpr, HAS_BOOT: tl.constexpr, HAS_LAST: tl.constexpr,
                      RATIO: tl.constexpr, DIFF: tl.constexpr, FOURS_BELOW: tl.constexpr,
                      ACC: tl.constexpr,
                      PHASE: tl.constexpr,
                      BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr,
                      FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    rho_max = tl.cast(rho_bar, ACC) + tl.cast(rho_bar_lo, ACC)
    c_max = tl.cast(c_bar, ACC) + tl.cast(c_bar_lo, ACC)
    g_trace = tl.cast(trace, ACC) + tl.cast(trace_lo, ACC)  # gamma lambda: no extra multiply
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, True, BLOCK_B, True)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, True)
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
        lpt, lpb, r, v, v_next, term, trunc = vtrace_inputs(
            lpt_ptr, lpb_ptr, r_ptr, v_ptr, term_ptr, trunc_ptr, offs, mask, t, row_mask, T,
            stride_t, HAS_TRUNC, FOURS_BELOW, FLIP, RATIO)
        for i in range(n_chunks):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, True, FLIP, against)
            t_n, mask_n, offs_n = next_tile(i, t_begin, seg_len, n_chunks, rows, row_mask, T,
                                            stride_b, stride_t, BLOCK_T, True, FLIP, against)
            if PREFETCH:
                lpt_n, lpb_n, r_n, v_n, v_next_n, term_n, trunc_n = vtrace_inputs(
                    lpt_ptr, lpb_ptr, r_ptr, v_ptr, term_ptr, trunc_ptr, offs_n, mask_n, t_n,
                    row_mask, T, stride_t, HAS_TRUNC, FOURS_BELOW, FLIP, RATIO)
            is_last = (t == T - 1)[None, :]
            if RATIO:  # the ratios themselves (PufferLib's importance)
                ratio = lpt.to(ACC)
            else:
                ratio = tl.exp(lpt.to(ACC) - lpb.to(ACC))
            rho = tl.minimum(ratio, rho_max)
            v_t = v.to(ACC)
            done, cut = term.to(ACC), trunc.to(ACC)
            nu = next_state_value(v_next, boot_ptr, last, offs, mask, t, T, cut,
                                  HAS_BOOT, HAS_LAST, ACC)
            discount = g * (1.0 - done)
            alpha = tl.where(mask, rho * (r.to(ACC) + discount * nu - v_t), 0.0)
            keep = 1.0 - tl.minimum(done + cut, 1.0)
            beta = tl.where(mask, g_trace * tl.minimum(ratio, c_max) * keep, 1.0)
            # runs of 8 interleaved envs keep the carry last: entered first, that tile (at the
            # register cap) spills more and took 1.11x the time (time-major 512x4096, an H100)
            delta, carry, agg_b, carry_in = sweep_tile(
                alpha, beta, carry, agg_b, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, True, FLIP, against, FLIP > -8, sweep)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)) & DIFF:
                store_tile(out_ptr, delta, rows, t, mask, out_stride_b, out_stride_t,
                           FOURS_BELOW)
            elif (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                # Next target: (1 - trunc) vs_{t+1} + trunc b_t inside the window, nu at T-1.
                delta_next = tl.where(is_last, 0.0, (1.0 - cut) * next_in_time(delta, carry_in,
                                                                               BLOCK_T, FLIP))
                adv = alpha + rho * discount * delta_next
                store_tile(out_ptr, (delta + v_t), rows, t, mask, out_stride_b, out_stride_t,
                           FOURS_BELOW)
                store_tile(adv_ptr, adv, rows, t, mask, out_stride_b, out_stride_t,
                           FOURS_BELOW)
            if PREFETCH:
                lpt, lpb, r, v, v_next = lpt_n, lpb_n, r_n, v_n, v_next_n
                term, trunc = term_n, trunc_n
            else:
                lpt, lpb, r, v, v_next, term, trunc = vtrace_inputs(
                    lpt_ptr, lpb_ptr, r_ptr, v_ptr, term_ptr, trunc_ptr, offs_n, mask_n, t_n,
                    row_mask, T, stride_t, HAS_TRUNC, FOURS_BELOW, FLIP, RATIO)
    if PHASE == 1:
        store_aggregate(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b)


def compute_vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None,
                   gamma=0.99, rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None, *,
                   lambda_=1.0, time_dim=-1, validate=False):
    """V-trace targets ``vs_t`` and policy-gradient advantages (Espeholt et al. 2018).

    ``vs_t - V_t = rho_t delta_t + gamma c_t (1 - done_t)(vs_{t+1} - V_{t+1})`` with
    ``rho = min(pi/mu, rho_bar)``, ``c = lambda_ min(pi/mu, c_bar)``.

    Args:
        log_pi_target, log_pi_behavior, values, rewards: ``[..., T, ...]`` floating, time on
            ``time_dim`` (note: values before rewards, as in the paper).
        terminateds, truncateds: step ``t`` ends its episode. Default truncateds: None.
        gamma, rho_bar, c_bar: Default: 0.99, 1.0, 1.0.
        bootstrap_values: V of the true next state, read at truncated steps and at T-1.
        last_value: V(s_T) per row; alternative to ``bootstrap_values[..., -1]``.
        lambda_: scales the traces c (the paper's API has none: 1.0). rlax's ``lambda_``,
            IMPALA's remark 2 and PufferLib's advantage (``paper_repro.pufferlib_compat``).
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
    args = (log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds,
            bootstrap_values, last_value)
    out, key = P.planned("vtrace", args, (gamma, rho_bar, c_bar, lambda_, time_dim), validate)
    if out is not None:
        return out
    L.check_tensor("log_pi_target", log_pi_target)
    for name, x in (("log_pi_behavior", log_pi_behavior), ("values", values),
                    ("rewards", rewards)):
        L.check_tensor(name, x, like=log_pi_target)
    L.check_tensor("terminateds", terminateds, like=rewards, flag=True)
    L.check_tensor("truncateds", truncateds, like=rewards, flag=True, optional=True)
    L.check_tensor("bootstrap_values", bootstrap_values, like=rewards, optional=True)
    axis = L.time_axis(rewards, time_dim)
    L.check_tensor("last_value", last_value, like=rewards, optional=True,
                   shape=lambda: L.batch_shape(rewards, axis))
    if last_value is not None and bootstrap_values is not None:
        raise ValueError("pass last_value or bootstrap_values, not both")
    gamma = L.check_scalar("gamma", gamma)
    rho_bar = L.check_scalar("rho_bar", rho_bar)
    c_bar = L.check_scalar("c_bar", c_bar)
    lambda_ = L.check_scalar("lambda_", lambda_)
    check_flags(validate, axis, terminateds, truncateds, bootstrap_values)
    if L.needs_dispatch(*args):
        return vtrace_op(*args, gamma, rho_bar, c_bar, lambda_, axis)
    return P.recorded(key, _vtrace, *args, gamma, rho_bar, c_bar, lambda_, axis)


def _vtrace(log_pi_target: torch.Tensor, log_pi_behavior: torch.Tensor, values: torch.Tensor,
            rewards: torch.Tensor, terminateds: torch.Tensor, truncateds: Optional[torch.Tensor],
            bootstrap_values: Optional[torch.Tensor], last_value: Optional[torch.Tensor],
            gamma: float, rho_bar: float, c_bar: float, lambda_: float,
            time_dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    out_dtype = L.result_dtype(log_pi_target, log_pi_behavior, values, rewards,
                               bootstrap_values, last_value)
    if rewards.numel() == 0:
        return torch.empty_like(rewards, dtype=out_dtype), torch.empty_like(rewards,
                                                                            dtype=out_dtype)
    rows = L.rows_of(time_dim, log_pi_target=log_pi_target, log_pi_behavior=log_pi_behavior,
                     values=values, rewards=rewards, terminateds=terminateds,
                     truncateds=truncateds, bootstrap_values=bootstrap_values)
    last = L.vector_rows(last_value, rows.B)
    vs_out, adv_out = (L.Output(rewards, time_dim, out_dtype, rows) for _ in range(2))
    if not L.use_triton(rewards):
        named = dict(rows.tensors, last_value=last)
        scalars = dict(gamma=gamma, rho_bar=rho_bar, c_bar=c_bar, lambda_=lambda_)
        coef = _coefficients(named, scalars)
        delta = torch_affine_scan(coef.alpha, coef.beta, coef.carry, True)
        vs, adv = _outputs(delta, named, scalars)
        return vs_out.set(vs), adv_out.set(adv)
    vs, adv = vs_out.rows, adv_out.rows
    t = rows.tensors
    traits = TILE_TRAITS if truncateds is not None else TILE_TRAITS_UNTRUNCATED
    config, fours = L.tile_of(rows, vs.device, vs.element_size(), traits, wide=True)
    # ONE_TILE only for one-row tiles: 4 x 128 and 32 x 32 tiles of one tile ran 10-15 % slower
    # unrolled (data/h200/one_tile_ab.csv), 1 x 512 6 % faster. The compile-time look-back tile
    # likewise, and in fp32 only (look_back_tile_ab.csv, walked against compile-time in turn:
    # time-major 32 x 128 64x131072 0.78x the time, bf16 one-row 0.97x; fp32 one-row 1.00x).
    job = Launch(vtrace_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(vs.dtype), vs.device,
                 L.layout_ints(rows, vs), L.scalar_pairs(gamma, rho_bar, c_bar, gamma * lambda_),
                 (truncateds is not None, bootstrap_values is not None, last is not None, False,
                  False, fours),
                 one_tile=config.BLOCK_B == 1,
                 look_back_tile=config.BLOCK_B == 1 and vs.element_size() != 2)
    pointers = L.pointers(vs, t["log_pi_target"], t["log_pi_behavior"], t["values"],
                          t["rewards"], t["terminateds"], t["truncateds"],
                          t["bootstrap_values"], last, vs, adv)
    P.launch(job, pointers, (log_pi_target, log_pi_behavior, values, rewards, terminateds,
                             truncateds, bootstrap_values, last_value), (vs_out, adv_out))
    return vs_out.result(), adv_out.result()


def vtrace_difference_into(out, ratio, values, rewards, terminateds, next_values, gamma, rho_bar,
                           c_bar, lambda_):
    """``vs - V`` of V-trace with ``lambda_`` written into ``out``, from the importance ratios
    themselves (no log-probabilities, no advantages): one launch of the engine.
    ``out`` and the inputs ``[B, T]`` (any strides); of ``next_values`` (``V_{t+1}``, e.g. a
    view one step on) only the last step is read, as the window's value. The caller checks
    them and that the kernels run here (``L.use_triton``) with nothing to differentiate.
    Returns the launch, for the caller to keep and repeat (``job(difference_pointers(...))``,
    or ``job.launch_pointers`` on addresses), or None where the inputs' strides differ and
    it ran on copies."""
    inputs = (ratio, values, rewards, terminateds, next_values)
    rows = L.rows_of(1, **dict(zip(("ratio", "values", "rewards", "terminateds", "next_values"),
                                   inputs)))
    # no truncations: the walk of up to four rows an SM (its 1024-step tile: 89 registers;
    # puff_walk.csv, H200: 0.87-0.93x the time of three at 448-528 rows x 4096)
    config = L.config_for(rows.B, rows.T, rows.stride, out.device, wide=True,
                          itemsize=out.element_size(), traits=TILE_TRAITS_UNTRUNCATED,
                          inputs=(ratio, values, rewards, terminateds, next_values))
    job = Launch(vtrace_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(out.dtype), out.device,
                 L.layout_ints(rows, out), L.scalar_pairs(gamma, rho_bar, c_bar, gamma * lambda_),
                 (False, True, False, True, True, False), one_tile=config.BLOCK_B == 1,
                 look_back_tile=config.BLOCK_B == 1 and out.element_size() != 2)
    job(difference_pointers(out, *rows.tensors.values()))
    return None if len({x.stride() for x in inputs}) > 1 else job


def difference_pointers(out, ratio, values, rewards, terminateds, next_values):
    """In the kernel's order (tensors, or their addresses); the behaviour log-probabilities,
    truncations, last values and advantages are never touched (``RATIO``, no truncations,
    ``DIFF``)."""
    return (ratio, out, values, rewards, terminateds, out, next_values, out, out, out)


def _coefficients(rows, s):
    return C.vtrace_coefficients(rows["log_pi_target"], rows["log_pi_behavior"], rows["values"],
                                 rows["rewards"], rows["terminateds"], rows["truncateds"],
                                 s["gamma"], s["rho_bar"], s["c_bar"], rows["bootstrap_values"],
                                 rows["last_value"], s["lambda_"])


def _outputs(delta, rows, s):
    """``(vs, advantages)`` from the scanned ``Delta = vs - V`` (torch; differentiable)."""
    acc = delta.dtype
    v, r = rows["values"].to(acc), rows["rewards"].to(acc)
    term = rows["terminateds"].to(acc)
    trunc = torch.zeros_like(v) if rows["truncateds"] is None else rows["truncateds"].to(acc)
    boot = None if rows["bootstrap_values"] is None else rows["bootstrap_values"].to(acc)
    vs = delta + v
    window = C.window_value(v, boot, rows["last_value"])
    rho, _ = C.vtrace_ratios(rows["log_pi_target"], rows["log_pi_behavior"], s["rho_bar"],
                             s["c_bar"], acc)
    next_target = C.window_next(vs, trunc, boot, window)
    return vs, rho * (r + s["gamma"] * (1 - term) * next_target - v)


vtrace_op = register(Spec("vtrace", ("log_pi_target", "log_pi_behavior", "values", "rewards",
                                     "terminateds", "truncateds", "bootstrap_values",
                                     "last_value"), ("gamma", "rho_bar", "c_bar", "lambda_"),
                          _coefficients,
                          per_row=("last_value",), n_outputs=2,
                          state=lambda outs, rows: outs[0] - rows["values"],
                          outputs=_outputs), _vtrace)
