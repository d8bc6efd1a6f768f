"""Time-major probe: a minimal single-pass look-back over ``[T, N]`` tiles held time-first, so
that a warp's lanes lie along the envs and each thread scans its own steps in registers, timed
beside the engine's ``affine_scan`` on the same inputs in both layouts.

    python -m paper_repro.bench.tn_probe --out DIR [--quick]

The question it answers: how much of the time-major gap (``roofline.csv``: 1.4-2.0x the
batch-major time at 512 x 4096 and 64 x 131072) belongs to the look-back's design rather than to
the layout. Each row is one tile ``(BLOCK_T, BLOCK_N, num_warps)`` and look-back window, its
device time (CUDA-graph replay), and its largest difference from the engine's float64 answer.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch
import triton
import triton.language as tl

from paper_repro.bench.inputs import ALGORITHMS
from paper_repro.kernels.affine_scan import combine as _combine
from paper_repro.kernels.affine_scan import combine_right_first

COLUMNS = ["kind", "num_envs", "seq_len", "BLOCK_T", "BLOCK_N", "num_warps", "window",
           "store", "vec", "device_us", "bytes", "pct_copy", "max_abs_diff"]
COPY_GBPS = 4249.0


@triton.jit
def _word(x):
    bits = x.to(tl.int32, bitcast=True)
    return ~tl.where(bits == -1, bits ^ 1, bits)


@triton.jit
def _value(w):
    return (~w).to(tl.float32, bitcast=True)


@triton.jit
def _publish(ptr, value, mask, STORE: tl.constexpr):
    # A word carries its own readiness: a relaxed atomic exchange, or (STORE) an L2 store.
    if STORE:
        tl.store(ptr, _word(value), mask=mask, cache_modifier=".cg")
    else:
        tl.atomic_xchg(ptr, _word(value), mask=mask, sem="relaxed")


@triton.jit
def tn_look_back_kernel(alpha_ptr, beta_ptr, out_ptr, words_ptr, T, N, n_tiles,
                        BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, W: tl.constexpr,
                        STORE: tl.constexpr, VEC: tl.constexpr, SPARSE: tl.constexpr = 1,
                        MAX_ROUNDS: tl.constexpr = 20000):
    """Forward ``A_t = alpha_t + beta_t A_{t-1}``, ``A_{-1} = 0``, on ``[T, N]`` rows-contiguous
    inputs: program ``pid`` owns tile ``pid // n_blocks`` in time of env block
    ``pid % n_blocks`` (launch order is scan order); ``words_ptr``: three zeroed planes of
    ``n_tiles * N`` words (aggregate a, aggregate b, inclusive prefix)."""
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    k = pid // n_blocks
    # VEC envs a vector: a warp's lanes then span 32 * VEC envs, all of a tile's steps in
    # each thread (BLOCK_N = 32 * VEC: no shuffles in the tile's scan)
    envs = tl.max_contiguous((pid % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N), VEC)
    env_mask = envs < N
    t = k * BLOCK_T + tl.arange(0, BLOCK_T)
    mask = (t < T)[:, None] & env_mask[None, :]
    offs = t.to(tl.int64)[:, None] * N + envs[None, :]
    a = tl.load(alpha_ptr + offs, mask=mask, other=0.0)
    b = tl.load(beta_ptr + offs, mask=mask, other=1.0)
    sa, sb = tl.associative_scan((a, b), 0, _combine)
    last = (tl.arange(0, BLOCK_T) == BLOCK_T - 1)[:, None]
    agg_a = tl.sum(tl.where(last, sa, 0.0), axis=0)
    agg_b = tl.sum(tl.where(last, sb, 0.0), axis=0)
    plane = n_tiles * N
    mine = k.to(tl.int64) * N + envs
    _publish(words_ptr + mine, agg_a, env_mask, STORE)
    _publish(words_ptr + plane + mine, agg_b, env_mask, STORE)
    # Walk back from tile k - 1, a window of W tiles a round at one position for the block, to
    # each env's nearest published inclusive prefix.
    acc_a = tl.zeros([BLOCK_N], tl.float32)
    acc_b = acc_a + 1.0
    carry = acc_a
    pos = k - 1
    done = ~env_mask
    j = tl.arange(0, W)
    remaining = tl.sum((~done).to(tl.int32), axis=0)
    rounds = 0
    while (remaining > 0) & (rounds < MAX_ROUNDS):  # a bound, so a bug reads wrong, not hangs
        m = pos - j
        valid = (m >= 0)[:, None]
        look = valid & env_mask[None, :]  # not ~done: a mask constant along 4 envs vectorises
        woffs = m.to(tl.int64)[:, None] * N + envs[None, :]
        wa = tl.load(words_ptr + woffs, mask=look, other=0, volatile=True)
        wb = tl.load(words_ptr + plane + woffs, mask=look, other=0, volatile=True)
        wi = tl.load(words_ptr + 2 * plane + woffs, mask=look, other=0, volatile=True)
        state = tl.where(wi != 0, 2, tl.where((wa != 0) & (wb != 0), 1, 0))
        state = tl.where(valid, state, 2)  # before the first tile: inclusive prefix 0
        stop = tl.min(tl.where(state == 2, j[:, None], W), axis=0)
        unready = tl.min(tl.where(state == 0, j[:, None], W), axis=0)
        found = (stop < unready) & ~done
        # envs not found move on together, as far as the nearest entry any of them lacks
        advance = tl.min(tl.where(found | done, W, unready), axis=0)
        lim = tl.where(found, stop, advance)
        pa, pb = tl.associative_scan((tl.where(valid, _value(wa), 0.0),
                                      tl.where(valid, _value(wb), 1.0)), 0, combine_right_first)
        take = j[:, None] == (lim - 1)[None, :]
        comp_a = tl.sum(tl.where(take, pa, 0.0), axis=0)
        comp_b = tl.sum(tl.where(take, pb, 0.0), axis=0)
        moved = (lim > 0) & ~done
        acc_a, acc_b = (tl.where(moved, acc_a + acc_b * comp_a, acc_a),
                        tl.where(moved, acc_b * comp_b, acc_b))
        incl = tl.sum(tl.where(j[:, None] == stop[None, :],
                               tl.where(valid, _value(wi), 0.0), 0.0), axis=0)
        carry = tl.where(found, acc_a + acc_b * incl, carry)
        done = done | found
        pos = pos - advance
        remaining = tl.sum((~done).to(tl.int32), axis=0)
        rounds += 1
    # SPARSE > 1 (tests): only every SPARSE-th tile publishes its inclusive prefix, so that the
    # interpreter's in-order programs walk several windows back
    keep = env_mask & (tl.zeros_like(envs) + k % SPARSE == 0)
    _publish(words_ptr + 2 * plane + mine, agg_a + agg_b * carry, keep, STORE)
    tl.store(out_ptr + offs, sa + sb * carry[None, :], mask=mask)


def tn_scan(alpha, beta, block_t, block_n, warps, window, store=False, vec=4):
    """The probe's scan of ``[T, N]`` fp32 ``alpha, beta`` (contiguous), forward, zero start."""
    T, N = alpha.shape
    n_tiles = triton.cdiv(T, block_t)
    out = torch.empty_like(alpha)
    words = torch.zeros(3 * n_tiles * N, dtype=torch.int32, device=alpha.device)
    grid = (n_tiles * triton.cdiv(N, block_n),)
    tn_look_back_kernel[grid](alpha, beta, out, words, T, N, n_tiles, BLOCK_T=block_t,
                              BLOCK_N=block_n, W=window, STORE=store, VEC=vec,
                              num_warps=warps)
    return out


def inputs(N, T, device, seed=0):
    """``[T, N]`` alpha ~ N(0, 1) and beta = 0.99 with 2 % episode ends (beta = 0)."""
    g = torch.Generator(device=device).manual_seed(seed)
    alpha = torch.randn(T, N, generator=g, device=device)
    ends = torch.rand(T, N, generator=g, device=device) < 0.02
    beta = torch.where(ends, 0.0, 0.99)
    return alpha, beta


def tiles(N, quick=False) -> list:
    """(BLOCK_T, BLOCK_N, warps, window, store, vec) candidates: a warp's lanes along the envs
    (``vec`` envs a thread), 8-64 values a thread an input; windows of 4-32 tiles; published
    by ``.cg`` stores or (at a window of 16) by atomics, read back by volatile loads."""
    out = []
    for bn, vec, warps in ((32, 1, 1), (64, 2, 1), (128, 4, 1), (256, 4, 2), (64, 1, 2)):
        if bn > max(64, N) or (N <= 64 and bn > 64):
            continue
        for bt in (8, 16, 32, 64, 128):
            if not 8 <= bt * bn // (32 * warps) <= 64:
                continue
            out.append((bt, bn, warps, 16, False, vec))
            for window in ((8, 32) if quick else (4, 8, 16, 32)):
                out.append((bt, bn, warps, window, True, vec))
    return out


# The engine's time-major look-back tiles (BLOCK_B, BLOCK_T, warps, runs, tiles a segment:
# 1 a tile a program, more a segment look-back) and the cases (estimator, N, T, tiles) each
# window A/B times beside the shipped tile: ``--engine-window`` and ``--window-ab``.
ENGINE_TILES = ((32, 32, 1, -8, 1), (16, 32, 1, -4, 1), (32, 64, 2, -8, 1), (32, 128, 4, -8, 1),
                (32, 128, 4, -8, 8))
ENGINE_CASES = tuple((a, N, T, ENGINE_TILES) for N, T in ((512, 4096), (64, 131072))
                     for a in ("prefix_sum", "gae"))
AB_CASES = tuple(case for a in ALGORITHMS for case in
                 ((a, 512, 4096, ((32, 128, 4, -8, 1),)), (a, 64, 131072, ()))
                 if not (a == "retrace" and case[1] == 64))
WINDOW_COLUMNS = ["window", "block_window", "algorithm", "num_envs", "seq_len", "BLOCK_B",
                  "BLOCK_T", "num_warps", "flip", "seg_len", "device_us", "max_abs_diff"]


def engine_window(out: Path, cases=ENGINE_CASES):
    """Each case's shipped tile (BLOCK_B 0) and forced look-back tiles under this process's
    look-back windows (``PAPER_REPRO_LOOKBACK_WINDOW`` sets both), fp32 time-major with float
    flags, each with its largest difference from the shipped tile's float64 answer: rows
    appended to ``out``."""
    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels.affine_scan import BLOCK_WINDOW, WINDOW
    from paper_repro.tuning import device_time_us

    new = not out.exists()
    with open(out, "a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        if new:
            writer.writerow(WINDOW_COLUMNS)
        for a, N, T, tiles in cases:
            _, prep, want = prepared(a, N, T, "fp32", "TN", "float")
            rows = [((0, 0, 0, 0, 0), 0.0, device_time_us(prep.call))]
            for bb, bt, w, flip, k in tiles:
                diff, us = forced_time(prep, want, L.ScanConfig(bb, bt, w, k * bt, True, flip))
                rows.append(((bb, bt, w, flip, k * bt), diff, us))
            for tile, diff, us in rows:
                row = [WINDOW.value, BLOCK_WINDOW.value, a, N, T, *tile, round(us, 3),
                       f"{diff:.3g}"]
                writer.writerow(row)
                print(*row, flush=True)
            f.flush()


def probe_shape(N: int, T: int, quick: bool, emit, device="cuda", cases=None):
    """The engine in both layouts, then every probe tile (``cases``, default ``tiles``), at
    ``[T, N]``: ``emit(row)`` each; device time on CUDA, else wall-clock time."""
    from paper_repro.bench.timing import device_ms, wall_ms
    from paper_repro.kernels.affine_scan import affine_scan

    def timed(call):
        return device_ms(call).ms if device == "cuda" else wall_ms(call, min_calls=1).ms

    alpha, beta = inputs(N, T, device)
    ref = affine_scan(alpha.double(), beta.double(), reverse=False, time_dim=0)
    n_bytes = 3 * alpha.numel() * 4

    def row(kind, ms, out, cfg=(0, 0, 0, 0, 0, 0)):
        diff = float((out.double() - ref).abs().max())
        pct = 100 * n_bytes / (ms * 1e-3) / 1e9 / COPY_GBPS
        emit(dict(zip(COLUMNS, [kind, N, T, *map(int, cfg), round(1e3 * ms, 3), n_bytes,
                                round(pct, 1), f"{diff:.3g}"])))

    nt_a, nt_b = alpha.t().contiguous(), beta.t().contiguous()
    for kind, call in (
            ("engine_TN", lambda: affine_scan(alpha, beta, reverse=False, time_dim=0)),
            ("engine_NT", lambda: affine_scan(nt_a, nt_b, reverse=False, time_dim=1))):
        out = call()
        row(kind, timed(call), out.t() if kind == "engine_NT" else out)
    for cfg in tiles(N, quick) if cases is None else cases:
        try:
            out = tn_scan(alpha, beta, *cfg)
            ms = timed(lambda cfg=cfg: tn_scan(alpha, beta, *cfg))
        except Exception as e:  # noqa: BLE001 -- a tile that fails to compile is a row too
            print("failed", cfg, type(e).__name__, str(e)[:200], flush=True)
            continue
        row("probe", ms, out, cfg)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--shapes", default="512x4096,64x131072,4096x128")
    p.add_argument("--engine-window", action="store_true",
                   help="instead: the engine's time-major look-back tiles under this process's "
                        "PAPER_REPRO_LOOKBACK_WINDOW, appended to OUT/engine_window.csv")
    p.add_argument("--window-ab", action="store_true",
                   help="instead: every estimator's shipped time-major tiles (and a 32 x 128 "
                        "look-back at 512 x 4096) under this process's windows, appended to "
                        "OUT/window_ab.csv")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.engine_window or args.window_ab:
        name, cases = ("window_ab", AB_CASES) if args.window_ab else ("engine_window",
                                                                       ENGINE_CASES)
        engine_window(Path(args.out) / f"{name}.csv", cases)
        return
    with open(Path(args.out) / "tn_probe.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()

        def emit(row):  # rows as they come: a sweep cut short keeps what it timed
            writer.writerow(row)
            f.flush()
            print(*row.values(), flush=True)

        for shape in args.shapes.split(","):
            N, T = map(int, shape.split("x"))
            probe_shape(N, T, args.quick, emit)


if __name__ == "__main__":
    main()
