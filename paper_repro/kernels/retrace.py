"""Retrace(lambda) targets and advantages in one fused backward scan (SPEC.md 1.3).

Delta_t = Q_ret_t - Q_t:  alpha_t = r_t + gamma (1 - term_t) E_t - Q_t,
beta_t = gamma c_{t+1} (1 - done_t) with c_T = 0,  Delta_T = 0.  E_t is the expectation of
Q(s_{t+1}, .) under the row-t policy (the paper's reading) or under ``next_action_probs_target``
(textbook Retrace); proofs/retrace_expectation.py compares them. No [T, A] tile is held: the
actions axis is reduced one action at a time (up to eight actions unrolled where a program
walks a row of several tiles: ``unrolled_actions``), so there is no register cliff in T.
Where the layout allows, the per-action inputs are read as 64-bit words of two fp32 or four
16-bit actions in the tile's own layout (``action_reads``; docs/engine.md), in batch-major
tiles by inline assembly (``word_loads``, ``_vector.py``).
(Reading [B, T, A] blocks at once was measured 7-14 % slower at T >= 512 on the H200, and a
step's actions as one vector load, reordered in registers to the tile's runs, 1.25-1.74x slower
at every batch-major shape: data/h200/retrace_packed_ab.csv.)
"""
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from paper_repro import coefficients as C
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan as P
from paper_repro.kernels._hints import bulk_prefetch, prefetch_span
from paper_repro.kernels._vector import word_at, word_pair
from paper_repro.kernels.affine_scan import (
    Launch,
    against_scan_order,
    aligned_layout,
    incoming_carry,
    load_flags,
    neighbour,
    neighbour_load,
    next_in_time,
    program_ids,
    row_block,
    segment_chunks,
    segment_sweep,
    store_aggregate,
    store_tile,
    sweep_tile,
    tile_offsets,
)
from paper_repro.kernels.autograd import Spec, register
from paper_repro.kernels.gae import check_flags
from paper_repro.kernels.torch_scan import torch_affine_scan


@triton.jit
def _taken_ratio(pi_ptr, mu_ptr, act_ptr, offs, offs3, mask, A, stride3_a, ACC: tl.constexpr):
    """pi(a_t|s_t) / mu(a_t|s_t); out-of-range actions read nothing and give 0."""
    act = tl.load(act_ptr + offs, mask=mask, other=0)
    ok = mask & (act >= 0) & (act < A)
    p = tl.load(pi_ptr + offs3 + act * stride3_a, mask=ok, other=0.0).to(ACC)
    mu = tl.load(mu_ptr + offs, mask=mask, other=1.0).to(ACC)
    return p / mu


@triton.jit
def _unrolled_actions(pi_ptr, npi_ptr, nq_ptr, mu_ptr, act_ptr, offs, offs3, mask, stride3_a,
                      HAS_NEXT_PI: tl.constexpr, N_ACT: tl.constexpr, ACC: tl.constexpr):
    """(E_t, pi(a_t|s_t) / mu(a_t|s_t)) for N_ACT actions known at compile time: every load is
    issued at once, and the taken action's probability is picked from the loaded ones instead
    of gathered after the actions arrive (out-of-range actions pick nothing: ratio 0)."""
    act = tl.load(act_ptr + offs, mask=mask, other=0)
    mu = tl.load(mu_ptr + offs, mask=mask, other=1.0).to(ACC)
    expect = tl.zeros(offs.shape, ACC)
    taken = tl.zeros(offs.shape, ACC)
    for a in tl.static_range(N_ACT):
        offs_a = offs3 + a * stride3_a
        p = tl.load(pi_ptr + offs_a, mask=mask, other=0.0).to(ACC)
        nq = tl.load(nq_ptr + offs_a, mask=mask, other=0.0).to(ACC)
        if HAS_NEXT_PI:
            w = tl.load(npi_ptr + offs_a, mask=mask, other=0.0).to(ACC)
        else:
            w = p
        expect += w * nq
        taken += tl.where(act == a, p, 0.0)
    return expect, taken / mu


@triton.jit
def _word_value(w, shift, PACK: tl.constexpr, VAL: tl.constexpr, ACC: tl.constexpr):
    """The value ``shift`` bits into the 64-bit words ``w``, each packing PACK values of type
    VAL (little-endian: a step's action k * PACK + j lies 64 // PACK * j bits in word k)."""
    bits = w >> shift
    if PACK == 2:
        x = bits.to(tl.int32).to(tl.float32, bitcast=True)
    else:
        x = bits.to(tl.int16).to(VAL, bitcast=True)
    return x.to(ACC)


@triton.jit
def _packed_taken_ratio(pi_w, mu_ptr, act_ptr, offs, offs3, mask, A, PACK: tl.constexpr,
                        VAL: tl.constexpr, ACC: tl.constexpr, WORDS: tl.constexpr):
    """``_taken_ratio`` reading the taken action's word (``offs3`` in words)."""
    act = tl.load(act_ptr + offs, mask=mask, other=0)
    ok = mask & (act >= 0) & (act < A)
    w = _word(pi_w, offs3 + act // PACK, ok, WORDS)
    p = _word_value(w, (act % PACK) * (64 // PACK), PACK, VAL, ACC)
    mu = tl.load(mu_ptr + offs, mask=mask, other=1.0).to(ACC)
    return p / mu


@triton.jit
def _word(ptr, offs, mask, WORDS: tl.constexpr):
    """One 64-bit word a step: in the steps' own layout where WORDS > 0 (``_vector``)."""
    if WORDS > 0:
        w = word_at(ptr, offs, mask)
    else:
        w = tl.load(ptr + offs, mask=mask, other=0)
    return w


@triton.jit
def _packed_actions(pi_w, npi_w, nq_w, mu_ptr, act_ptr, offs, offs3, mask, A,
                    HAS_NEXT_PI: tl.constexpr, N_ACT: tl.constexpr, PACK: tl.constexpr,
                    VAL: tl.constexpr, ACC: tl.constexpr, WORDS: tl.constexpr):
    """``_unrolled_actions`` from 64-bit words of PACK actions (``offs3`` in words): a step's
    A actions are A / PACK loads, along time as contiguous as the tile's other inputs, where
    per-action loads stride over the actions axis (one 2- or 4-byte value a load). WORDS: how
    (``word_loads``): 0 ``tl.load``, 1 a word a load and 2 a pair a load in the steps' layout."""
    act = tl.load(act_ptr + offs, mask=mask, other=0)
    mu = tl.load(mu_ptr + offs, mask=mask, other=1.0).to(ACC)
    expect = tl.zeros(offs.shape, ACC)
    taken = tl.zeros(offs.shape, ACC)
    STEP: tl.constexpr = 2 if WORDS == 2 else 1
    if N_ACT > 0:
        for k in tl.static_range(0, N_ACT // PACK, STEP):
            expect, taken = _word_terms(pi_w, npi_w, nq_w, offs3, mask, act, k, expect, taken,
                                        HAS_NEXT_PI, PACK, VAL, ACC, WORDS)
    else:
        for k in range(0, A // PACK, STEP):
            expect, taken = _word_terms(pi_w, npi_w, nq_w, offs3, mask, act, k, expect, taken,
                                        HAS_NEXT_PI, PACK, VAL, ACC, WORDS)
    return expect, taken / mu


@triton.jit
def _word_terms(pi_w, npi_w, nq_w, offs3, mask, act, k, expect, taken,
                HAS_NEXT_PI: tl.constexpr, PACK: tl.constexpr, VAL: tl.constexpr,
                ACC: tl.constexpr, WORDS: tl.constexpr):
    """``(expect, taken)`` plus word k's PACK actions (WORDS 2: words k and k + 1's, each
    pair one 16-byte load)."""
    if WORDS == 2:
        wp, wp2 = word_pair(pi_w, offs3 + k, mask)
        wq, wq2 = word_pair(nq_w, offs3 + k, mask)
        if HAS_NEXT_PI:
            ww, ww2 = word_pair(npi_w, offs3 + k, mask)
        else:
            ww, ww2 = wp, wp2
        expect, taken = _word_values(wp, ww, wq, act, k, expect, taken, PACK, VAL, ACC)
        expect, taken = _word_values(wp2, ww2, wq2, act, k + 1, expect, taken, PACK, VAL, ACC)
    else:
        wp = _word(pi_w, offs3 + k, mask, WORDS)
        wq = _word(nq_w, offs3 + k, mask, WORDS)
        if HAS_NEXT_PI:
            ww = _word(npi_w, offs3 + k, mask, WORDS)
        else:
            ww = wp
        expect, taken = _word_values(wp, ww, wq, act, k, expect, taken, PACK, VAL, ACC)
    return expect, taken


@triton.jit
def _word_values(wp, ww, wq, act, k, expect, taken, PACK: tl.constexpr, VAL: tl.constexpr,
                 ACC: tl.constexpr):
    """``(expect, taken)`` plus the PACK actions of word k, read from its loaded words."""
    for j in tl.static_range(PACK):
        p = _word_value(wp, 64 // PACK * j, PACK, VAL, ACC)
        expect += _word_value(ww, 64 // PACK * j, PACK, VAL, ACC) * \
            _word_value(wq, 64 // PACK * j, PACK, VAL, ACC)
        taken += tl.where(act == k * PACK + j, p, 0.0)
    return expect, taken


@triton.jit
def _step_ratio(pi_ptr, mu_ptr, act_ptr, offs, offs3, mask, A, stride3_a, PACK: tl.constexpr,
                VAL: tl.constexpr, ACC: tl.constexpr, WORDS: tl.constexpr):
    """pi(a|s) / mu(a|s) of the taken actions at ``offs``, per action or from words."""
    if PACK > 0:
        ratio = _packed_taken_ratio(pi_ptr.to(tl.pointer_type(tl.int64), bitcast=True), mu_ptr,
                                    act_ptr, offs, offs3, mask, A, PACK, VAL, ACC, WORDS)
    else:
        ratio = _taken_ratio(pi_ptr, mu_ptr, act_ptr, offs, offs3, mask, A, stride3_a, ACC)
    return ratio


@triton.jit
def _prefetch_steps(mu_ptr, q_ptr, act_ptr, r_ptr, term_ptr, trunc_ptr, at, count,
                    HAS_TRUNC: tl.constexpr):
    """Request into L2 ``count`` steps from ``at`` of a batch-major row's per-step inputs (the
    actions, whose gathers wait on them, among them); the per-action words are left to their
    loads (bf16 512x4096: 36.3 us with them requested too, 33.9 without)."""
    prefetch_span(mu_ptr, at, count)
    prefetch_span(q_ptr, at, count)
    prefetch_span(act_ptr, at, count)
    prefetch_span(r_ptr, at, count)
    prefetch_span(term_ptr, at, count)
    if HAS_TRUNC:
        prefetch_span(trunc_ptr, at, count)


@triton.jit
def retrace_fwd_kernel(pi_ptr, npi_ptr, nq_ptr, mu_ptr, q_ptr, act_ptr, r_ptr, term_ptr,
                       trunc_ptr, out_ptr, adv_ptr, agg_ptr, status_ptr,
                       B, T, n_seg, seg_len, stride_b, stride_t, out_stride_b, out_stride_t,
                       A, stride3_b, stride3_t, stride3_a,
                       gamma, gamma_lo, lam, lam_lo, c_bar, c_bar_lo, rho_bar, rho_bar_lo,
                       HAS_NEXT_PI: tl.constexpr, HAS_TRUNC: tl.constexpr,
                       N_ACT: tl.constexpr, PACK: tl.constexpr, VAL: tl.constexpr,
                       WORDS: tl.constexpr, FOURS_BELOW: tl.constexpr, ACC: tl.constexpr,
                       PHASE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_T: tl.constexpr,
                       PREFETCH: tl.constexpr, FLIP: tl.constexpr, ALIGN: tl.constexpr):
    B, T, stride_b, stride_t, out_stride_b, out_stride_t = aligned_layout(
        B, T, stride_b, stride_t, out_stride_b, out_stride_t, ALIGN)
    if ALIGN == 1:  # L.WIDE_OFFSETS: the per-action step stride in 64 bits too
        stride3_t = tl.cast(stride3_t, tl.int64)
    # PREFETCH (``l2_hints``): the next tile is requested into L2, not loaded (the per-action
    # gathers depend on the loaded actions). PACK > 0: the per-action inputs are read as
    # 64-bit words of PACK values of type VAL, their strides (``stride3_*``) counted in words,
    # N_ACT actions a step.
    g = tl.cast(gamma, ACC) + tl.cast(gamma_lo, ACC)
    lam_ = tl.cast(lam, ACC) + tl.cast(lam_lo, ACC)
    c_max = tl.cast(c_bar, ACC) + tl.cast(c_bar_lo, ACC)
    rho_max = tl.cast(rho_bar, ACC) + tl.cast(rho_bar_lo, ACC)
    # Look-back programs by ticket: in launch order bf16 64 x 131072 took 1.15x the time, fp32
    # 0.99-1.04x (data/h200/launch_order.csv).
    pid_b, pid_s = program_ids(agg_ptr, B, n_seg, PHASE, True, BLOCK_B, False)
    rows, row_mask = row_block(pid_b, B, BLOCK_B)
    t_begin, n_chunks = segment_chunks(pid_s, T, seg_len, BLOCK_T, PHASE)
    carry0 = tl.zeros([BLOCK_B], ACC)
    carry = incoming_carry(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry0, PHASE, True)
    agg_b = tl.full([BLOCK_B], 1.0, ACC)
    for sweep in tl.static_range(1 + (PHASE == 4)):
        against = against_scan_order(PHASE, sweep, BLOCK_B)
        carry, agg_b = segment_sweep(sweep, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s,
                                     B, n_seg, carry, agg_b, carry0, True)
        for i in range(n_chunks):
            t, mask, offs = tile_offsets(i, t_begin, n_chunks, rows, row_mask, T, stride_b,
                                         stride_t, BLOCK_T, True, FLIP, against)
            if PREFETCH:  # noqa: SIM102 (constexpr) the next tile in the walk
                if i + 1 < n_chunks:
                    j = tl.where(against, n_chunks - 2 - i, i + 1)
                    first = t_begin + (n_chunks - 1 - j) * BLOCK_T
                    _prefetch_steps(mu_ptr, q_ptr, act_ptr, r_ptr, term_ptr, trunc_ptr,
                                    pid_b * stride_b + first, tl.minimum(BLOCK_T, T - first),
                                    HAS_TRUNC)
            next_mask = mask & (t + 1 < T)[None, :]
            offs3 = rows[:, None] * stride3_b + t[None, :] * stride3_t
            if PACK > 0:
                expect, ratio = _packed_actions(
                    pi_ptr.to(tl.pointer_type(tl.int64), bitcast=True),
                    npi_ptr.to(tl.pointer_type(tl.int64), bitcast=True),
                    nq_ptr.to(tl.pointer_type(tl.int64), bitcast=True), mu_ptr, act_ptr, offs,
                    offs3, mask, A, HAS_NEXT_PI, N_ACT, PACK, VAL, ACC, WORDS)
            elif N_ACT > 0:
                expect, ratio = _unrolled_actions(pi_ptr, npi_ptr, nq_ptr, mu_ptr, act_ptr, offs,
                                                  offs3, mask, stride3_a, HAS_NEXT_PI, N_ACT,
                                                  ACC)
            else:
                expect = tl.zeros([BLOCK_B, BLOCK_T], ACC)
                for a in range(A):
                    nq = tl.load(nq_ptr + offs3 + a * stride3_a, mask=mask, other=0.0).to(ACC)
                    if HAS_NEXT_PI:
                        w = tl.load(npi_ptr + offs3 + a * stride3_a, mask=mask,
                                    other=0.0).to(ACC)
                    else:
                        w = tl.load(pi_ptr + offs3 + a * stride3_a, mask=mask, other=0.0).to(ACC)
                    expect += w * nq
                ratio = _taken_ratio(pi_ptr, mu_ptr, act_ptr, offs, offs3, mask, A, stride3_a,
                                     ACC)
            if FLIP > 1:  # runs: the ratio at t+1 is the tile's own, or the next run's
                far = _step_ratio(pi_ptr, mu_ptr, act_ptr, offs + FLIP * stride_t,
                                  offs3 + FLIP * stride3_t, mask & (t + FLIP < T)[None, :], A,
                                  stride3_a, PACK, VAL, ACC, WORDS)
                ratio_next = neighbour(ratio, far, FLIP, True)
            else:
                ratio_next = _step_ratio(pi_ptr, mu_ptr, act_ptr, offs + stride_t,
                                         offs3 + stride3_t, next_mask, A, stride3_a, PACK, VAL,
                                         ACC, WORDS)
            c_next = tl.where(next_mask, lam_ * tl.minimum(ratio_next, c_max), 0.0)
            r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(ACC)
            q_raw = tl.load(q_ptr + offs, mask=mask, other=0.0)
            q = q_raw.to(ACC)
            term, trunc = load_flags(term_ptr, trunc_ptr, offs, mask, HAS_TRUNC, ACC,
                                     FOURS_BELOW)
            discount = g * (1.0 - term)
            alpha = tl.where(mask, r + discount * expect - q, 0.0)
            beta = tl.where(mask, g * c_next * (1.0 - tl.minimum(term + trunc, 1.0)), 1.0)
            # batch-major tiles of 128 steps (one run a thread) keep the carry last: entered
            # first, bf16 4096x128 took 1.08x the time (an H100, carry_retrace.csv)
            delta, carry, agg_b, carry_in = sweep_tile(
                alpha, beta, carry, agg_b, agg_ptr, status_ptr, rows, row_mask, pid_b, pid_s, B,
                n_seg, PHASE, BLOCK_T, True, FLIP, against, (FLIP < 0) | (BLOCK_T != 128),
                sweep)
            if (PHASE != 1) & ((PHASE != 4) | (sweep == 1)):  # not when reducing
                # Q_ret_{t+1} (0 at T-1; across a truncation the next episode's, as the paper).
                if FLIP > 1:
                    q_next = neighbour_load(q_raw, q_ptr, offs, mask, t, row_mask, T, stride_t,
                                            FLIP, True).to(ACC)
                else:
                    q_next = tl.load(q_ptr + offs + stride_t, mask=next_mask, other=0.0).to(ACC)
                q_ret_next = next_in_time(delta, carry_in, BLOCK_T, FLIP) + q_next
                adv = tl.minimum(ratio, rho_max) * (r + discount * q_ret_next - q)
                store_tile(out_ptr, (delta + q), rows, t, mask, out_stride_b, out_stride_t)
                store_tile(adv_ptr, adv, rows, t, mask, out_stride_b, out_stride_t)
    if PHASE == 1:
        store_aggregate(agg_ptr, rows, row_mask, B, n_seg, pid_s, carry, agg_b)


# Up to this many actions the action loop may unroll (one compiled kernel per count).
MAX_UNROLLED_ACTIONS = 8


def unrolled_actions(A: int, config: L.ScanConfig, T: int) -> int:
    """retrace_fwd_kernel's N_ACT: A (the loop over actions unrolled) where a program walks a
    whole row of several tiles in one pass (512x4096: 56.6 -> 51.3 us, bf16 48.2 -> 43.3);
    0 (the loop) elsewhere, where unrolling lost (4096x128 bf16 6.9 -> 8.1 us, 32768x32 21.3 ->
    23.0, the look-back at 64x131072 249 -> 333, bf16 two passes at 512x4096 67 -> 83)."""
    walks = not config.single_pass and config.seg_len >= max(T, 2 * config.BLOCK_T)
    return A if walks and A <= MAX_UNROLLED_ACTIONS else 0


# retrace_fwd_kernel's input pointers as indices of compute_retrace's tensor arguments
KERNEL_ORDER = (0, 8, 3, 1, 2, 4, 5, 6, 7)
# The per-action inputs among them (read as 64-bit words where ``packing`` allows).
PER_ACTION = (0, 3, 8)
# Values a 64-bit word packs, and their Triton type, by dtype.
PACKS = {torch.float32: (2, tl.float32), torch.bfloat16: (4, tl.bfloat16),
         torch.float16: (4, tl.float16)}
MAX_WORDS = 8  # words a step beyond which the per-action path is kept (one kernel per count)


def packing(per_action, stride3) -> tuple:
    """``(PACK, VAL)``: read the ``[B, T, A]`` per-action tensors (one dtype, one stride
    triple ``stride3``) as 64-bit words of PACK values of type VAL, or ``(0, tl.float32)``
    where their layout does not allow it: the actions axis not contiguous, A or a stride not a
    multiple of PACK, a tensor not 8-byte aligned, more than MAX_WORDS words a step."""
    dtype = per_action[0].dtype
    pack, val = PACKS.get(dtype, (0, tl.float32))
    A = per_action[0].shape[-1]
    if not pack or any(x.dtype != dtype or x.data_ptr() % 8 for x in per_action) or \
            stride3[2] != 1 or A % pack or A // pack > MAX_WORDS or \
            stride3[0] % pack or stride3[1] % pack:
        return 0, tl.float32
    return pack, val


def action_reads(per_action, stride3, config: L.ScanConfig, T: int, time_major: bool):
    """``(PACK, VAL, N_ACT, WORDS, stride3)`` of retrace_fwd_kernel: words (``packing``)
    wherever allowed but in batch-major programs holding their row in one tile where they are
    read by ``tl.load``, all of a step's words at once in batch-major tiles, else as
    ``unrolled_actions`` says; WORDS as ``word_loads`` says. Measured on the H200
    (retrace_words_ab.csv, against per-action loads): look-back 64x131072 bf16 167 -> 119 us,
    fp32 186 -> 169, walking 512x4096 bf16 37.2 -> 33.7, time-major 64x131072 312 -> 256 and
    4096x128 15.8 -> 11.4; one-tile rows lost (4096x512 39.4 -> 42.9, 32768x32 20.6 -> 22.9),
    a loop over the words lost in batch-major look-back (1.12-1.39x). ``L.force_words`` sets
    where words are read, ``L.force_word_loads`` how (probes)."""
    A = per_action[0].shape[-1]
    forced = L._FORCED_WORDS[0]
    wanted = (time_major or _assembled(time_major) or config.BLOCK_T < T) if forced is None \
        else forced
    pack, val = packing(per_action, stride3) if wanted else (0, tl.float32)
    if not pack:
        return 0, val, unrolled_actions(A, config, T), 0, stride3
    words = (stride3[0] // pack, stride3[1] // pack, 1)
    n_act = unrolled_actions(A, config, T) if time_major else A
    return pack, val, n_act, word_loads(per_action, words, time_major, A // pack), words


def word_loads(per_action, words, time_major: bool, per_step: int) -> int:
    """retrace_fwd_kernel's WORDS, how ``per_step`` words a step (strides ``words``) are read:
    in batch-major tiles by inline assembly in the steps' own layout (``_vector``), a pair a
    load where ``per_step`` is even and every pair 16-byte aligned (2), else a word a load (1);
    in time-major tiles, whose envs lie along the words, by ``tl.load`` (0). The sm_90 compile
    of the fp32 512x4096 walk, ``tl.load`` -> pairs: 16 -> 4 layout conversions, 29 -> 5 block
    barriers, 968 -> 608 instructions, 111 -> 64 registers. Measured on the H200
    (data/h200/word_loads_ab.csv): 0.70-0.95x the time of ``tl.load`` at every batch-major
    shape (bf16 64x131072 121 -> 93 us, fp32 4096x2048 155 -> 142, 512x4096 44.3 -> 42.2).
    On an H100 fp32 1-2-warp tiles of 128-256 steps took 1.01-1.06x (data/h100)."""
    if not _assembled(time_major):
        return 0
    pairs = per_step % 2 == 0 and words[0] % 2 == 0 and words[1] % 2 == 0 and \
        all(x.data_ptr() % 16 == 0 for x in per_action)
    return 1 if L._FORCED_WORD_LOADS[0] == 1 or not pairs else 2


def _assembled(time_major: bool) -> bool:
    """Whether the words are read by inline assembly: batch-major tiles, unless
    ``L.force_word_loads(0)``."""
    return not time_major and L._FORCED_WORD_LOADS[0] != 0


def l2_hints(config: L.ScanConfig, time_major: bool, itemsize: int, device) -> bool:
    """Whether a walk requests its next tile's per-step inputs into L2 (PREFETCH, where
    ``L.prefetch`` says it walks): batch-major one-row blocks of 16-bit values, and of fp32
    ones where 4 warps walk 4 tiles or more. On the H200 (data/h200/l2_prefetch_ab.csv, the
    words read by assembly): bf16 512x4096 31.2 -> 26.6 us, 512x8192 59.2 -> 49.1; fp32
    512x4096 42.2 -> 40.7, 512x8192 80.8 -> 76.9, but two-tile rows 0.97-1.03x and 2-warp
    walks 1.03-1.06x (4096x2048 155 -> 165). On an H100 fp32 lost before the words were read
    by assembly (data/h100: 512x4096 55.5 -> 65.4 us at 111 registers)."""
    wide = itemsize == 2 or (config.num_warps >= 4 and config.seg_len >= 4 * config.BLOCK_T)
    return not time_major and config.BLOCK_B == 1 and wide and bulk_prefetch(device)


def _check_values(action_probs_behavior, actions, num_actions):
    if bool((action_probs_behavior <= 0).any()):
        raise ValueError("action_probs_behavior must be > 0 everywhere")
    if bool(((actions < 0) | (actions >= num_actions)).any()):
        raise ValueError(f"actions must lie in [0, {num_actions}), the size of the last axis "
                         "of action_probs_target")


def compute_retrace(action_probs_target, action_probs_behavior, q_values, next_q_values_all,
                    actions, rewards, terminateds, truncateds, gamma, lambda_=1.0, c_bar=1.0,
                    rho_bar=1.0, *, next_action_probs_target=None, time_dim=-1, validate=False):
    """Retrace(lambda) targets ``Q_ret`` and advantages (Munos et al. 2016, the paper's numerics).

    ``Q_ret_t - Q_t = r_t + gamma (1-term_t) E_t - Q_t + gamma c_{t+1} (1-done_t)(Q_ret_{t+1} -
    Q_{t+1})`` with ``c = lambda min(pi/mu, c_bar)`` and ``E_t = sum_a w_t(a) Q(s_{t+1}, a)``.

    Args:
        action_probs_target: ``[..., T, A]`` pi(.|s_t); the weights w_t of E_t by default.
        action_probs_behavior, q_values: ``[..., T]`` mu(a_t|s_t) and Q(s_t, a_t), time on
            ``time_dim``.
        next_q_values_all: ``[..., T, A]`` Q(s_{t+1}, .) (zeros past a termination).
        actions: ``[..., T]`` integer actions a_t in [0, A).
        rewards, terminateds, truncateds: per-step rewards and flags (truncateds may be None).
        gamma: discount (required, as in the paper). lambda_, c_bar, rho_bar: Default 1.0.
        next_action_probs_target: ``[..., T, A]`` pi(.|s_{t+1}): textbook expectation.
        validate: check flags, probabilities and action range (synchronises; always on CPU).
    Returns:
        ``(q_ret, advantages)`` shaped like ``rewards``, with
        ``advantages_t = min(pi/mu, rho_bar)(r_t + gamma (1-term_t) Q_ret_{t+1} - Q_t)``,
        ``Q_ret_T := 0``.
    """
    args = (action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions,
            rewards, terminateds, truncateds, next_action_probs_target)
    scalars = (gamma, lambda_, c_bar, rho_bar, time_dim)
    out = P.repeat("retrace", args, scalars, validate)
    if out is not None:  # a native plan served it
        return out
    plan, key = P.lookup("retrace", args, scalars, validate)
    if plan is not None:
        if not rewards.is_cuda:  # as _retrace: values are checked on the CPU
            _check_values(action_probs_behavior, actions, action_probs_target.shape[-1])
        return plan(args)
    L.check_tensor("rewards", rewards)
    for name, x in (("action_probs_behavior", action_probs_behavior), ("q_values", q_values)):
        L.check_tensor(name, x, like=rewards)
    L.check_tensor("actions", actions, like=rewards, floating=False)
    if actions.dtype.is_floating_point or actions.dtype == torch.bool or actions.is_complex():
        raise TypeError(f"actions must be an integer tensor, got {actions.dtype}")
    L.check_tensor("terminateds", terminateds, like=rewards, flag=True)
    L.check_tensor("truncateds", truncateds, like=rewards, flag=True, optional=True)
    L.check_tensor("action_probs_target", action_probs_target)
    if action_probs_target.dim() != rewards.dim() + 1 or \
            action_probs_target.shape[:-1] != rewards.shape:
        raise ValueError(f"action_probs_target must have shape {tuple(rewards.shape)} + (A,), "
                         f"got {tuple(action_probs_target.shape)}")
    L.check_tensor("next_q_values_all", next_q_values_all, like=action_probs_target)
    L.check_tensor("next_action_probs_target", next_action_probs_target,
                   like=action_probs_target, optional=True)
    axis = L.time_axis(rewards, time_dim)
    gamma, lambda_ = L.check_scalar("gamma", gamma), L.check_scalar("lambda_", lambda_)
    c_bar, rho_bar = L.check_scalar("c_bar", c_bar), L.check_scalar("rho_bar", rho_bar)
    if L.validation_requested(validate):
        _check_values(action_probs_behavior, actions, action_probs_target.shape[-1])
    check_flags(validate, axis, terminateds, truncateds)
    if L.needs_dispatch(*args):
        return retrace_op(*args, gamma, lambda_, c_bar, rho_bar, axis)
    return P.recorded(key, _retrace, *args, gamma, lambda_, c_bar, rho_bar, axis)


def _retrace(action_probs_target: torch.Tensor, action_probs_behavior: torch.Tensor,
             q_values: torch.Tensor, next_q_values_all: torch.Tensor, actions: torch.Tensor,
             rewards: torch.Tensor, terminateds: torch.Tensor, truncateds: Optional[torch.Tensor],
             next_action_probs_target: Optional[torch.Tensor], gamma: float, lambda_: float,
             c_bar: float, rho_bar: float, time_dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
    out_dtype = L.result_dtype(action_probs_target, action_probs_behavior, q_values,
                               next_q_values_all, rewards, next_action_probs_target)
    if rewards.numel() == 0:
        return torch.empty_like(rewards, dtype=out_dtype), torch.empty_like(rewards,
                                                                            dtype=out_dtype)
    if not rewards.is_cuda:
        # Reading values costs nothing on the CPU: bad actions or probabilities always raise.
        _check_values(action_probs_behavior, actions, action_probs_target.shape[-1])
    rows = L.rows_of(time_dim, action_probs_behavior=action_probs_behavior, q_values=q_values,
                     actions=actions, rewards=rewards, terminateds=terminateds,
                     truncateds=truncateds)
    three = [L.action_rows(x, time_dim) if x is not None else None
             for x in (action_probs_target, next_q_values_all, next_action_probs_target)]
    present, stride3 = L.common_strides([x for x in three if x is not None])
    named = dict(rows.tensors, action_probs_target=present[0], next_q_values_all=present[1],
                 next_action_probs_target=present[2] if len(present) > 2 else None)
    q_out, adv_out = (L.Output(rewards, time_dim, out_dtype, rows) for _ in range(2))
    scalars = dict(gamma=gamma, lambda_=lambda_, c_bar=c_bar, rho_bar=rho_bar)
    if not L.use_triton(rewards):
        coef = _coefficients(named, scalars)
        delta = torch_affine_scan(coef.alpha, coef.beta, coef.carry, True)
        q_ret, adv = _outputs(delta, named, scalars)
        return q_out.set(q_ret), adv_out.set(adv)
    q_ret, adv = q_out.rows, adv_out.rows
    config, fours = L.tile_of(rows, q_ret.device, q_ret.element_size(), wide=True,
                              retrace=True, extra=present, values=False)
    t = rows.tensors
    A = present[0].shape[-1]
    pack, val, n_act, words, stride3 = action_reads(present, stride3, config, rows.T,
                                                    rows.time_major)
    job = Launch(retrace_fwd_kernel, config, rows.B, rows.T, L.acc_dtype(q_ret.dtype),
                 q_ret.device, (*L.layout_ints(rows, q_ret), A, *stride3),
                 L.scalar_pairs(gamma, lambda_, c_bar, rho_bar),
                 (next_action_probs_target is not None, truncateds is not None, n_act, pack,
                  val, words, fours),
                 prefetch=l2_hints(config, rows.time_major, q_ret.element_size(), q_ret.device),
                 time_strides=stride3[1:2])
    pointers = L.pointers(q_ret, named["action_probs_target"], named["next_action_probs_target"],
                          named["next_q_values_all"], t["action_probs_behavior"], t["q_values"],
                          t["actions"], t["rewards"], t["terminateds"], t["truncateds"], q_ret,
                          adv)
    P.launch(job, pointers, (action_probs_target, action_probs_behavior, q_values,
                             next_q_values_all, actions, rewards, terminateds, truncateds,
                             next_action_probs_target), (q_out, adv_out), KERNEL_ORDER,
             words=PER_ACTION if pack else (), word_bytes=16 if words == 2 else 8)
    return q_out.result(), adv_out.result()


def _coefficients(rows, s):
    return C.retrace_coefficients(rows["action_probs_target"], rows["action_probs_behavior"],
                                  rows["q_values"], rows["next_q_values_all"], rows["actions"],
                                  rows["rewards"], rows["terminateds"], rows["truncateds"],
                                  s["gamma"], s["lambda_"], s["c_bar"], s["rho_bar"],
                                  rows["next_action_probs_target"])


def _outputs(delta, rows, s):
    """``(q_ret, advantages)`` from the scanned ``Delta = Q_ret - Q`` (torch; differentiable)."""
    acc = delta.dtype
    q, r = rows["q_values"].to(acc), rows["rewards"].to(acc)
    term = rows["terminateds"].to(acc)
    q_ret = delta + q
    q_ret_next = torch.cat([q_ret[:, 1:], torch.zeros_like(q_ret[:, :1])], dim=1)
    ratio = C.retrace_ratio(rows["action_probs_target"], rows["action_probs_behavior"],
                            rows["actions"], acc)
    return q_ret, torch.clamp(ratio, max=s["rho_bar"]) * (r + s["gamma"] * (1 - term) *
                                                          q_ret_next - q)


retrace_op = register(Spec("retrace", ("action_probs_target", "action_probs_behavior",
                                       "q_values", "next_q_values_all", "actions", "rewards",
                                       "terminateds", "truncateds", "next_action_probs_target"),
                           ("gamma", "lambda_", "c_bar", "rho_bar"), _coefficients,
                           per_action=("action_probs_target", "next_q_values_all",
                                       "next_action_probs_target"), n_outputs=2,
                           state=lambda outs, rows: outs[0] - rows["q_values"],
                           outputs=_outputs), _retrace)
