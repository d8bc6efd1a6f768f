"""Discounted returns: G_t = sum_{k=t}^{end} gamma^(k-t) r_k + gamma^(end-t+1) (continuation) is
the backward recurrence of SPEC.md 1.5, G_t = r_t + gamma kappa_t b_t + gamma (1-d_t) G_{t+1},
G_T = b_{T-1}."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    backward,
    coefficient_lists,
    e,
    episode_end,
    flag_window,
    gamma,
    is_zero,
    k,
    matches_on_patterns,
    peel_first,
    rationals,
    t,
    terminated_truncated,
    window,
)

r, b, tau, kappa = (sp.IndexedBase(name) for name in ("r", "b", "tau", "kappa"))
ALPHA = r[t] + gamma * kappa[t] * b[t]
BETA = gamma * (1 - tau[t]) * (1 - kappa[t])


def carry(data: dict):
    return data["b"][len(data["r"]) - 1]


def window_data(T: int) -> dict:
    return {name: window(name, range(T)) for name in ("r", "b")} | flag_window(T)


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, carry(data)


def returns(data: dict):
    return backward(*coefficients(len(data["r"]), data))


def definition(data: dict):
    """Textbook: rewards to the end of t's episode, discounted, plus the discounted continuation:
    0 if it terminated, else the supplied b (a truncation's, or the window's V(s_T))."""
    r_, b_, tau_, kappa_ = (data[name] for name in ("r", "b", "tau", "kappa"))
    done = [tau_[s] or kappa_[s] for s in range(len(r_))]
    out = []
    for s in range(len(r_)):
        end = episode_end(s, done)
        cont = 0 if tau_[end] else b_[end]
        out.append(sum(gamma ** (j - s) * r_[j] for j in range(s, end + 1))
                   + gamma ** (end - s + 1) * cont)
    return out


def _definition(T: int):
    return matches_on_patterns(T, returns, definition, window_data(T), terminated_truncated(T))


r_f, C = sp.Function("r"), sp.Symbol("C")


def textbook_sum(start):
    return sp.Sum(gamma ** (k - start) * r_f(k), (k, start, e)) + gamma ** (e - start + 1) * C


def _induction_step():
    """Inside an episode: G_t = r_t + gamma G_{t+1} (peel the first reward, factor gamma)."""
    ok, head, rest = peel_first(gamma ** (k - t) * r_f(k), t, e)
    inside = {tau[t]: 0, kappa[t]: 0}
    return (ok and head == r_f(t)
            and sp.simplify(rest + gamma ** (e - t + 1) * C
                            - BETA.subs(inside) * textbook_sum(t + 1)) == 0
            and is_zero(ALPHA.subs(inside) - r[t]))


def _induction_base(flags: dict, continuation, carry_weight):
    """Last step of an episode: G_t = r_t + gamma (continuation) = alpha_t + beta_t G_{t+1}."""
    only = textbook_sum(t).subs(e, t).doit().subs({r_f(t): r[t], C: continuation})
    return is_zero(ALPHA.subs(flags) + BETA.subs(flags) * carry_weight - only)


def _spec_examples():
    def run(rw, term, trunc, boot, g):
        data = {"r": dict(enumerate(rationals(rw))), "b": dict(enumerate(rationals(boot))),
                "tau": dict(enumerate(term)), "kappa": dict(enumerate(trunc))}
        return [x.subs(gamma, sp.Rational(g)) for x in returns(data)]

    cases = [
        (([1, 2], [0, 0], [0, 0], [0, 0], ".9"), [2.8, 2.0]),
        (([1, 2], [1, 0], [0, 0], [0, 0], ".9"), [1.0, 2.0]),
        (([1, 1, 1], [0] * 3, [0, 1, 0], [0, 7, 4], ".9"), [7.57, 7.3, 4.6]),
    ]
    return all(all_equal(run(*args), rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"discounted_returns.definition[T={T}]", partial(_definition, T),
               f"recurrence = discounted reward sum with continuation, all 3^{T} flag patterns")
      for T in LENGTHS),
    Identity("discounted_returns.induction.step", _induction_step,
             "inside an episode G_t = r_t + gamma G_{t+1}"),
    Identity("discounted_returns.induction.base[terminated]",
             partial(_induction_base, {tau[t]: 1, kappa[t]: 0}, 0, sp.Symbol("G_next")),
             "terminated: G_t = r_t"),
    Identity("discounted_returns.induction.base[truncated]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 1}, b[t], sp.Symbol("G_next")),
             "truncated: G_t = r_t + gamma b_t, the carry cut"),
    Identity("discounted_returns.induction.base[window_end]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 0}, b[t], b[t]),
             "window end: G_{T-1} = r + gamma G_T with G_T = b_{T-1}"),
    Identity("discounted_returns.spec_examples", _spec_examples, "SPEC.md 1.5 worked examples"),
]
