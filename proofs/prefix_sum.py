"""Episodic prefix sums: the running sum of x since the current episode (or segment) began is the
forward recurrence of SPEC.md 1.7, C_t = x_t + beta_t C_{t-1}, C_{-1} = seed, with
beta_t = 1 - d_{t-1} ("ends_at": d flags an episode's last step) or 1 - d_t ("starts_at": d flags a
segment's first step)."""
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
    is_zero,
    k,
    matches_on_patterns,
    peel_last,
    rationals,
    t,
    window,
)

x, d = sp.IndexedBase("x"), sp.IndexedBase("d")
ALPHA = x[t]
BETA = {"ends_at": 1 - d[t - 1], "starts_at": 1 - d[t]}
SEED = sp.Symbol("C_{-1}")


def window_data(T: int) -> dict:
    return {"x": window("x", range(T)), "d": {**window("d", range(T)), -1: sp.Integer(0)},
            "seed": SEED}


def coefficients(T: int, data: dict, boundary: str):
    alpha, beta = coefficient_lists(T, ALPHA, BETA[boundary], data)
    return alpha, beta, data["seed"]


def sums(data: dict, boundary: str):
    return forward(*coefficients(len(data["x"]), data, boundary))


def segment_start(s: int, d_) -> int | None:
    """starts_at: the last flagged step <= s, or None when no segment start is flagged yet."""
    while s >= 0 and not d_[s]:
        s -= 1
    return s if s >= 0 else None


def definition(data: dict, boundary: str):
    """Textbook: x summed from the first step of t's episode (ends_at) or segment (starts_at) to
    t; the seed counts only while no boundary separates t from the window's start."""
    x_, d_, seed = data["x"], data["d"], data["seed"]
    out = []
    for s in range(len(x_)):
        if boundary == "ends_at":
            first = episode_start(s, d_)
            open_from_start = first == 0
        else:
            first = segment_start(s, d_)
            open_from_start = first is None
            first = 0 if first is None else first
        out.append(sum(x_[j] for j in range(first, s + 1)) + seed * int(open_from_start))
    return out


def _definition(T: int, boundary: str):
    patterns = ({"d": p} for p in done_patterns(T))
    return matches_on_patterns(T, partial(sums, boundary=boundary),
                               partial(definition, boundary=boundary), window_data(T), patterns)


x_f, start, c_in = sp.Function("x"), sp.Symbol("s", integer=True), sp.Symbol("C_in")


def textbook_sum(end):
    """x summed over [s, end] plus C_in: the seed when the window's first episode or segment
    carries it, else 0."""
    return sp.Sum(x_f(k), (k, start, end)) + c_in


def _induction_step(boundary: str):
    """Past the first step of an episode (segment), C_t = x_t + C_{t-1} and beta_t = 1."""
    ok, last, rest = peel_last(x_f(k), start, t)
    beta = BETA[boundary].subs({d[t - 1]: 0, d[t]: 0})
    return ok and last == x_f(t) and beta == 1 and sp.simplify(
        rest + c_in - beta * textbook_sum(t - 1)) == 0


def _induction_base(boundary: str):
    """An episode's (segment's) first step s: C_s = x_s, the flag making beta_s = 0; the window's
    first step with no flag at its start: C_0 = x_0 + seed."""
    first = textbook_sum(start).doit().subs(x_f(start), x[start])
    flag = {d[t - 1]: 1} if boundary == "ends_at" else {d[t]: 1}
    no_flag = {d[t - 1]: 0, d[t]: 0}
    recurrence = ALPHA + BETA[boundary] * sp.Symbol("C_prev")
    inside = first.subs(c_in, 0) - recurrence.subs(flag).subs(t, start)
    at_start = first.subs(c_in, SEED).subs(start, 0) - (ALPHA + BETA[boundary] * SEED).subs(
        no_flag).subs(t, 0)
    return is_zero(inside) and is_zero(at_start)


def _spec_examples():
    def run(xs, dones, seed, boundary):
        data = {"x": dict(enumerate(rationals(xs))), "d": {**dict(enumerate(dones)), -1: 0},
                "seed": sp.Integer(seed)}
        return sums(data, boundary)

    cases = [
        (([1, 2, 3, 4], [1, 0, 1, 0], 10, "ends_at"), [11, 2, 5, 4]),
        (([1, 2, 3, 4], [1, 0, 1, 0], 10, "starts_at"), [1, 3, 3, 7]),
        (([1, 2, 3, 4], [0, 0, 1, 0], 0, "ends_at"), [1, 3, 6, 4]),
        (([1, 2, 3, 4], [0, 0, 1, 0], 0, "starts_at"), [1, 3, 3, 7]),
        (([1, 2, 3, 4], [1] * 4, 0, "ends_at"), [1, 2, 3, 4]),
        (([1, 2, 3, 4], [1] * 4, 0, "starts_at"), [1, 2, 3, 4]),
        (([1, 2], [1, 0], 10, "ends_at"), [11, 2]),
        (([1, 2], [1, 0], 10, "starts_at"), [1, 3]),
    ]
    return all(all_equal(run(*args), rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"prefix_sum.definition[{boundary},T={T}]", partial(_definition, T, boundary),
               f"forward recurrence = sum since the {boundary} boundary, all 2^{T} patterns")
      for boundary in ("ends_at", "starts_at") for T in LENGTHS),
    *(Identity(f"prefix_sum.induction.step[{boundary}]", partial(_induction_step, boundary),
               "inside an episode C_t = x_t + C_{t-1}") for boundary in ("ends_at", "starts_at")),
    *(Identity(f"prefix_sum.induction.base[{boundary}]", partial(_induction_base, boundary),
               "first step: C_s = x_s; window start: C_0 = x_0 + seed")
      for boundary in ("ends_at", "starts_at")),
    Identity("prefix_sum.spec_examples", _spec_examples, "SPEC.md 1.7 and B-3 worked examples"),
]
