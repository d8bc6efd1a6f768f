"""Accumulating eligibility traces (Sutton & Barto 2018, eq. 12.5): z_t = sum over t's episode of
(gamma lambda)^(t-k) g_k (plus the decayed seed in the first episode) is the forward recurrence of
SPEC.md 1.6, z_t = g_t + gamma lambda (1 - d_{t-1}) z_{t-1}, z_{-1} = seed."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    coefficient_lists,
    done_patterns,
    episode_start,
    forward,
    gamma,
    is_zero,
    k,
    lam,
    matches_on_patterns,
    peel_last,
    rationals,
    t,
    window,
)

g, d = sp.IndexedBase("g"), sp.IndexedBase("d")
ALPHA = g[t]
# "ends at" flags: d_{t-1} = 1 makes t the first step of a new episode; d_{-1} = 0
BETA = gamma * lam * (1 - d[t - 1])
SEED = sp.Symbol("z_{-1}")


def window_data(T: int) -> dict:
    return {"g": window("g", range(T)), "d": {**window("d", range(T)), -1: sp.Integer(0)},
            "seed": SEED}


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, data["seed"]


def traces(data: dict):
    return forward(*coefficients(len(data["g"]), data))


def definition(data: dict):
    """Textbook: z_t = sum_{k=start}^{t} (gamma lambda)^(t-k) g_k, start the first step of t's
    episode; the window's first episode also holds the seed, decayed (gamma lambda)^(t+1)."""
    g_, d_, seed = data["g"], data["d"], data["seed"]
    out = []
    for s in range(len(g_)):
        start = episode_start(s, d_)
        total = sum((gamma * lam) ** (s - j) * g_[j] for j in range(start, s + 1))
        out.append(total + (gamma * lam) ** (s + 1) * seed * int(start == 0))
    return out


def _definition(T: int):
    patterns = ({"d": p} for p in done_patterns(T))
    return matches_on_patterns(T, traces, definition, window_data(T), patterns)


g_f, start, z_in = sp.Function("g"), sp.Symbol("s", integer=True), sp.Symbol("z_in")
W = gamma * lam


def textbook_sum(end):
    """z over the episode begun at s: sum_{k=s}^{end} W^(end-k) g_k + W^(end-s+1) z_in, with z_in
    the seed for the window's first episode and 0 for an episode begun inside the window."""
    return sp.Sum(W ** (end - k) * g_f(k), (k, start, end)) + W ** (end - start + 1) * z_in


def _induction_step():
    """Past an episode's first step (d_{t-1} = 0): z_t = g_t + gamma lambda z_{t-1}."""
    ok, last, rest = peel_last(W ** (t - k) * g_f(k), start, t)
    beta = BETA.subs(d[t - 1], 0)
    return (ok and last == g_f(t)
            and sp.simplify(rest + W ** (t - start + 1) * z_in - beta * textbook_sum(t - 1)) == 0)


def _induction_base():
    """At an episode's first step s the sum is g_s + gamma lambda z_in: inside the window
    d_{s-1} = 1 and z_in = 0 make it alpha_s + 0 * z_{s-1}; at s = 0, d_{-1} = 0 and z_in = seed
    make it g_0 + gamma lambda seed."""
    first = textbook_sum(start).doit().subs(g_f(start), g[start])
    recurrence = ALPHA + BETA * sp.Symbol("z_prev")
    inside = first.subs(z_in, 0) - recurrence.subs(d[t - 1], 1).subs(t, start)
    window_start = first.subs(z_in, SEED).subs(start, 0) - (ALPHA + BETA * SEED).subs(
        d[t - 1], 0).subs(t, 0)
    return is_zero(inside) and is_zero(window_start)


def _spec_examples():
    def run(grads, dones, gm, lm, seed=0):
        data = {"g": dict(enumerate(rationals(grads))), "d": {**dict(enumerate(dones)), -1: 0},
                "seed": sp.Rational(seed)}
        return [x.subs({gamma: sp.Rational(gm), lam: sp.Rational(lm)}) for x in traces(data)]

    cases = [
        (([1, 2, 3], [0, 1, 0], "1", ".9"), [1, 2.9, 3.0]),
        (([1, 2], [0, 0], "1", "1", 2), [3, 5]),
        (([1, 1, 1], [0, 1, 0], ".9", ".5", 2), [1.9, 1.855, 1.0]),
    ]
    return all(all_equal(run(*args), rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"eligibility_traces.definition[T={T}]", partial(_definition, T),
               f"forward recurrence = accumulating trace, all 2^{T} done patterns")
      for T in LENGTHS),
    Identity("eligibility_traces.induction.step", _induction_step,
             "inside an episode z_t = g_t + gamma lambda z_{t-1}"),
    Identity("eligibility_traces.induction.base", _induction_base,
             "an episode's first step: z_t = g_t; the window's: z_0 = g_0 + gamma lambda seed"),
    Identity("eligibility_traces.spec_examples", _spec_examples, "SPEC.md 1.6 worked examples"),
]
