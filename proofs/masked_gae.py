"""Masked GAE (paper_repro/kernels/masked_gae.py) as two backward recurrences: the value of the
first unmasked step at or after t, X_t = m_t V_t + (1 - m_t) X_{t+1} with X_T = L (the last
value), and the advantage A_t = m_t (r_t + gamma X_{t+1} - V_t) + (m_t gamma lambda + 1 - m_t)
A_{t+1} with A_T = 0. Proved equal to GAE over the unmasked steps alone (masked steps holding the
next unmasked step's advantage) and, for symbolic masks, to verl's loop; and the fused kernel's
walks (tiles from the last, lanes latest step first or runs of ascending steps latest run
first, two forward scans a tile), whole or with time split into segments whose maps are
composed, equal to the two scans."""
from __future__ import annotations

import itertools
from functools import partial

import sympy as sp

from proofs.core import LENGTHS, Identity, all_equal, backward, gamma, lam, window

L = sp.Symbol("L")  # the value past the window


def window_data(T: int) -> dict:
    return {name: window(name, range(T)) for name in ("r", "V", "m")}


def two_scans(data: dict) -> list:
    """The composition the code runs: X by one scan, then A by another."""
    T = len(data["r"])
    r, V, m = (data[name] for name in ("r", "V", "m"))
    X = backward([m[s] * V[s] for s in range(T)], [1 - m[s] for s in range(T)], L)
    nxt = [*X[1:], L]
    alpha = [m[s] * (r[s] + gamma * nxt[s] - V[s]) for s in range(T)]
    beta = [m[s] * gamma * lam + 1 - m[s] for s in range(T)]
    return backward(alpha, beta, 0)


def compressed_gae(data: dict) -> list:
    """Definition: delete the masked steps, run textbook GAE (A = sum of (gamma lambda)^j delta)
    on what is left with L past its end, and give each masked step the advantage of the first
    unmasked step after it (0 if there is none)."""
    T = len(data["r"])
    r, V, m = (data[name] for name in ("r", "V", "m"))
    kept = [s for s in range(T) if m[s]]
    values = [V[s] for s in kept] + [L]
    delta = [r[s] + gamma * values[j + 1] - V[s] for j, s in enumerate(kept)]
    adv = {s: sum((gamma * lam) ** (i - j) * delta[i] for i in range(j, len(kept)))
           for j, s in enumerate(kept)}
    return [adv[s] if m[s] else next((adv[u] for u in kept if u > s), sp.Integer(0))
            for s in range(T)]


def verl_loop(data: dict) -> list:
    """verl's GAE loop (core_algos.compute_gae_advantage_return), its mask kept symbolic."""
    T = len(data["r"])
    r, V, m = (data[name] for name in ("r", "V", "m"))
    next_value, last_gae, out = L, sp.Integer(0), [None] * T
    for s in reversed(range(T)):
        step = r[s] + gamma * next_value - V[s] + gamma * lam * last_gae
        next_value = m[s] * V[s] + (1 - m[s]) * next_value
        last_gae = m[s] * step + (1 - m[s]) * last_gae
        out[s] = last_gae
    return out


def compose(p, q):
    """The fused kernel's ``_compose`` on maps x -> a x + b given as (a, b): p is applied
    first (the later step), then q."""
    return p[0] * q[0], q[0] * p[1] + q[1]


def inclusive(pairs: list) -> list:
    """A forward inclusive scan with ``compose`` (``tl.associative_scan`` along the lanes)."""
    out = [pairs[0]]
    for q in pairs[1:]:
        out.append(compose(out[-1], q))
    return out


def _lanes_tile(data: dict, steps: list, seen, adv, carry_lane: int):
    """One tile of lanes latest step first: a scan of the shifted pairs (1 - m_{t+1},
    m_{t+1} V_{t+1}) (the identity past the row) applied to the carried X gives V'_t =
    X_{t+1}; a scan of (beta_t, alpha_t) applied to the carried A gives the advantages; the
    lane ``carry_lane`` carries both on."""
    T = len(data["r"])
    r, V, m = (data[name] for name in ("r", "V", "m"))
    shifted = [(1 - m[t + 1], m[t + 1] * V[t + 1]) if t + 1 < T else (1, 0) for t in steps]
    nxt = [a * seen + b for a, b in inclusive(shifted)]
    pairs = [(m[t] * gamma * lam + 1 - m[t], m[t] * (r[t] + gamma * x - V[t]))
             for t, x in zip(steps, nxt)]
    advantages = [a * adv + b for a, b in inclusive(pairs)]
    return dict(zip(steps, advantages)), nxt[carry_lane], advantages[carry_lane]


def _runs_scan(pairs: dict, steps: list, run: int, carry):
    """``scan_runs``: columns ``steps`` (runs of ``run`` ascending steps, latest run first),
    pairs[t] = (alpha, beta) with A_t = alpha + beta A_{t+1}. Each run composed latest step
    first, the runs' compositions scanned forward from ``carry``, each step solved from the
    value entering its run. Returns each step's value and the value entering it."""
    runs = [steps[g * run:(g + 1) * run] for g in range(len(steps) // run)]
    whole = []
    for ts in runs:
        a, b = sp.Integer(0), sp.Integer(1)
        for t in reversed(ts):
            a, b = pairs[t][0] + pairs[t][1] * a, pairs[t][1] * b
        whole.append((a, b))
    entering, x = [], carry
    for a, b in whole:
        entering.append(x)
        x = a + b * x
    value, later = {}, {}
    for ts, x in zip(runs, entering):
        for t in reversed(ts):
            later[t] = x
            x = pairs[t][0] + pairs[t][1] * x
            value[t] = x
    return value, later


def _runs_tile(data: dict, steps: list, run: int, seen, adv, leaving: int):
    """One tile held as runs: ``X_t`` scanned from the tile itself, the value entering each
    step its V'_t; padded steps (m = 0) the identity; column ``leaving`` carries both on."""
    T = len(data["r"])
    r, V, m = (data[name] for name in ("r", "V", "m"))
    mask = {t: m[t] if t < T else 0 for t in steps}
    X, nxt = _runs_scan({t: (mask[t] * V[t] if t < T else 0, 1 - mask[t]) for t in steps},
                        steps, run, seen)
    pairs = {t: (mask[t] * (r[t] + gamma * nxt[t] - V[t]) if t < T else 0,
                 mask[t] * gamma * lam + 1 - mask[t]) for t in steps}
    A, _ = _runs_scan(pairs, steps, run, adv)
    return {t: A[t] for t in steps if t < T}, X[steps[leaving]], A[steps[leaving]]


def walk_segment(data: dict, lo: int, hi: int, tile: int, run: int, seen, adv,
                 leaving: int | None = None) -> tuple:
    """``masked_gae_kernel``'s walk of the steps [lo, hi) entered with (``seen``, ``adv``):
    tiles on the grid of ``tile`` steps from ``lo``, the last first (``chunk_times``). ``run``
    0: lanes latest step first (FLIP 1), the carried X being X_{t+1} of the tile's earliest
    step t; else runs of ``run`` ascending steps, column p holding step ``first + (tile // run
    - 1 - p // run) * run + p % run``, the carried X being X_t. ``leaving``: the column carried
    on (the kernel's: the earliest step, tile - run; lanes, tile - 1). Returns (advantages by
    step, X and A leaving)."""
    out, n = {}, -(-(hi - lo) // tile)
    for k in range(n):
        first = lo + (n - 1 - k) * tile
        if run:
            steps = [first + (tile // run - 1 - p // run) * run + p % run for p in range(tile)]
            done, seen, adv = _runs_tile(data, steps, run, seen, adv,
                                         tile - run if leaving is None else leaving)
        else:
            steps = [t for t in (first + tile - 1 - p for p in range(tile)) if t < hi]
            done, seen, adv = _lanes_tile(data, steps, seen, adv,
                                          -1 if leaving is None else leaving)
        out.update(done)
    return out, seen, adv


def fused_tiles(data: dict, tile: int, carry_lane: int = -1) -> list:
    """The one-pass walk in lanes latest step first, carrying on lane ``carry_lane`` of each
    tile's valid steps (the kernel's: -1, the earliest)."""
    T = len(data["r"])
    out, _, _ = walk_segment(data, 0, T, tile, 0, L, sp.Integer(0), carry_lane)
    return [out[t] for t in range(T)]


def runs_walk(data: dict, tile: int, run: int, leaving: int | None = None) -> list:
    """The one-pass walk of batch-major tiles held as runs (FLIP = ``run``)."""
    T = len(data["r"])
    out, _, _ = walk_segment(data, 0, T, tile, run, L, sp.Integer(0), leaving)
    return [out[t] for t in range(T)]


Xi, Ai = sp.symbols("X_in A_in")  # the values entering a segment at its end


def then(p: tuple, q: tuple) -> tuple:
    """The kernel's ``_then``: segment maps X -> s1 X + s0, A -> a1 A + a2 X + a0 as (s0, s1,
    a0, a1, a2); ``p`` (the later segment) applied first, then ``q``."""
    s0, s1, a0, a1, a2 = p
    q0, q1, c0, c1, c2 = q
    return (q1 * s0 + q0, q1 * s1, c1 * a0 + c2 * s0 + c0, c1 * a1, c1 * a2 + c2 * s1)


def split_walk(data: dict, seg_tiles: int, tile: int, run: int) -> list:
    """Time split into segments of ``seg_tiles`` tiles: PHASE 1 walks each segment entered
    with symbols and keeps the five coefficients of what leaves it; PHASE 2 applies the
    later segments' maps, latest first, to (L, 0) and walks its segment from there."""
    T = len(data["r"])
    bounds = [(lo, min(T, lo + seg_tiles * tile)) for lo in range(0, T, seg_tiles * tile)]
    maps = []
    for lo, hi in bounds:
        _, x, a = walk_segment(data, lo, hi, tile, run, Xi, Ai)
        x, a = sp.expand(x), sp.expand(a)
        maps.append((x.subs(Xi, 0), x.coeff(Xi), a.subs({Xi: 0, Ai: 0}), a.coeff(Ai),
                     a.coeff(Xi)))
    out = {}
    for j, (lo, hi) in enumerate(bounds):
        acc = (0, 1, 0, 1, 0)
        for later in reversed(maps[j + 1:]):
            acc = then(acc, later)
        done, _, _ = walk_segment(data, lo, hi, tile, run, acc[1] * L + acc[0],
                                  acc[4] * L + acc[2])
        out.update(done)
    return [out[t] for t in range(T)]


def _runs(T: int) -> bool:
    data = window_data(T)
    want = two_scans(data)
    return all(all_equal(runs_walk(data, tile, run), want)
               for tile in (2, 4, 8) for run in (1, 2, 4) if run <= tile)


def _split(T: int) -> bool:
    data = window_data(T)
    want = two_scans(data)
    return all(all_equal(split_walk(data, seg_tiles, tile, run), want)
               for seg_tiles in (1, 2) for tile in (1, 2) for run in (0, 1, 2) if run <= tile)


def _fused(T: int) -> bool:
    data = window_data(T)
    want = two_scans(data)
    return all(all_equal(fused_tiles(data, tile), want) for tile in range(1, T + 1))


def _definition(T: int) -> bool:
    data = window_data(T)
    symbolic = two_scans(data)
    for mask in itertools.product((0, 1), repeat=T):
        concrete = dict(data, m=dict(enumerate(mask)))
        values = {data["m"][s]: v for s, v in enumerate(mask)}
        if not all_equal([x.xreplace(values) for x in symbolic], compressed_gae(concrete)):
            return False
    return True


def _verl(T: int) -> bool:
    data = window_data(T)
    return all_equal(two_scans(data), verl_loop(data))


def _unmasked_is_gae(T: int) -> bool:
    """Every step unmasked: A_t = r_t + gamma V_{t+1} - V_t + gamma lambda A_{t+1}, V_T = L."""
    data = window_data(T)
    data["m"] = dict.fromkeys(range(T), 1)
    V = [*[data["V"][s] for s in range(T)], L]
    delta = [data["r"][s] + gamma * V[s + 1] - V[s] for s in range(T)]
    return all_equal(two_scans(data), backward(delta, [gamma * lam] * T, 0))


IDENTITIES = [
    *(Identity(f"masked_gae.definition[T={T}]", partial(_definition, T),
               f"two scans = GAE over the unmasked steps, all 2^{T} masks") for T in LENGTHS),
    *(Identity(f"masked_gae.verl_loop[T={T}]", partial(_verl, T),
               "two scans = verl's loop, masks symbolic (a float mask interpolates)")
      for T in LENGTHS),
    Identity("masked_gae.unmasked_is_gae", partial(_unmasked_is_gae, 5),
             "nothing masked: GAE without terminations"),
    *(Identity(f"masked_gae.fused_kernel[T={T}]", partial(_fused, T),
               "the fused kernel's tile walk = the two scans, every tile size, masks symbolic")
      for T in LENGTHS),
    *(Identity(f"masked_gae.split[T={T}]", partial(_split, T),
               "time split into segments: each segment's five-coefficient map, the later maps "
               "composed (the kernel's _then), each segment walked from there = the two scans, "
               "lanes and runs, masks symbolic") for T in LENGTHS),
    *(Identity(f"masked_gae.runs_walk[T={T}]", partial(_runs, T),
               "the fused kernel's walk in runs (tiles of 2-8 steps, runs of 1-4) = the two "
               "scans, masks symbolic") for T in LENGTHS),
]
