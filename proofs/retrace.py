"""Retrace(lambda) (Munos et al. 2016, eq. 4): Q_ret_t - Q_t = sum_k gamma^(k-t)
(prod_{i=t+1}^{k} c_i) delta_k is the backward recurrence of SPEC.md 1.3, beta_t = gamma c_{t+1}
(1 - d_t) with c_T = 0. E_t stands for the expectation of Q(s_{t+1}, .) under the target policy
(which row of pi weights it is the subject of proofs/retrace_expectation.py)."""
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
    i,
    instantiate,
    is_zero,
    k,
    matches_on_patterns,
    peel_first,
    peel_product,
    rationals,
    t,
    terminated_truncated,
    window,
)

r, Q, E, c, rho, tau, kappa, q_ret = (
    sp.IndexedBase(name) for name in ("r", "Q", "E", "c", "rho", "tau", "kappa", "Q_ret"))
ALPHA = r[t] + gamma * (1 - tau[t]) * E[t] - Q[t]
# the trace weight of the edge t -> t+1 is the next step's c; c_T = 0 ends the window
BETA = gamma * c[t + 1] * (1 - tau[t]) * (1 - kappa[t])
CARRY = sp.Integer(0)
# the paper's advantage: Q_ret_{t+1} gated by termination only, Q_ret_T = 0
ADVANTAGE = rho[t] * (r[t] + gamma * (1 - tau[t]) * q_ret[t + 1] - Q[t])


def primitives(pi, mu, actions, next_q, lambda_, c_bar, rho_bar, next_pi=None):
    """E_t = sum_a pi_t(a) Q(s_{t+1}, a) (row t of pi unless next_pi is given, SPEC 1.3),
    ratio_t = pi_t(a_t) / mu_t, rho_t = min(ratio, rho_bar), c_t = lambda min(ratio, c_bar)."""
    weights = pi if next_pi is None else next_pi
    expect = [sum(w * q for w, q in zip(ws, qs, strict=True)) for ws, qs in zip(weights, next_q,
                                                                              strict=True)]
    ratio = [row[a] / m for row, a, m in zip(pi, actions, mu, strict=True)]
    return expect, [sp.Min(x, rho_bar) for x in ratio], [lambda_ * sp.Min(x, c_bar) for x in ratio]


def window_data(T: int) -> dict:
    data = {name: window(name, range(T)) for name in ("r", "Q", "E", "c", "rho")}
    data["c"][T] = sp.Integer(0)
    return data | flag_window(T)


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, CARRY


def targets_and_advantages(data: dict):
    T = len(data["r"])
    delta = backward(*coefficients(T, data))
    targets = [delta[s] + data["Q"][s] for s in range(T)]
    with_targets = dict(data, Q_ret={**dict(enumerate(targets)), T: sp.Integer(0)})
    return targets + [instantiate(ADVANTAGE, s, with_targets) for s in range(T)]


def definition(data: dict):
    """Munos et al.: Q_ret_t = Q_t + sum_{k=t}^{end} gamma^(k-t) (prod_{i=t+1}^{k} c_i) delta_k over
    t's episode, delta_k = r_k + gamma E_k - Q_k, with no bootstrap if step k terminated."""
    r_, Q_, E_, c_, tau_, kappa_ = (data[name] for name in ("r", "Q", "E", "c", "tau", "kappa"))
    T = len(r_)
    done = [tau_[s] or kappa_[s] for s in range(T)]
    out = []
    for s in range(T):
        end, total, trace = episode_end(s, done), Q_[s], 1
        for j in range(s, end + 1):
            nxt = 0 if (j == end and tau_[end]) else E_[j]
            total += gamma ** (j - s) * trace * (r_[j] + gamma * nxt - Q_[j])
            trace *= c_[j + 1]
        out.append(total)
    return out


def _definition(T: int):
    return matches_on_patterns(T, lambda d: targets_and_advantages(d)[:T], definition,
                               window_data(T), terminated_truncated(T))


delta, c_f = sp.Function("delta"), sp.Function("c")


def textbook_sum(start):
    return sp.Sum(gamma ** (k - start) * sp.Product(c_f(i), (i, start + 1, k)) * delta(k),
                  (k, start, e))


def _induction_step():
    """Inside an episode the first term is delta_t (empty product) and every later one carries
    gamma c_{t+1}: the sum is delta_t + gamma c_{t+1} (the sum from t+1)."""
    ok, head, rest = peel_first(textbook_sum(t).function, t, e)
    ok_c, c_next, tail = peel_product(c_f(i), t + 1, k)
    rest = sp.Sum(rest.function.xreplace({sp.Product(c_f(i), (i, t + 1, k)): c_next * tail}),
                  *rest.limits)
    inside = {tau[t]: 0, kappa[t]: 0}
    beta = BETA.subs(inside).xreplace({c[t + 1]: c_f(t + 1)})
    return (ok and ok_c and head == delta(t)
            and sp.simplify(rest - beta * textbook_sum(t + 1)) == 0
            and is_zero(ALPHA.subs(inside) - (r[t] + gamma * E[t] - Q[t])))


def _induction_base(flags: dict, nxt, window_end: bool = False):
    """At an episode's last step the sum is delta_t alone and beta_t = 0 (at the window end
    because c_T = 0, so even a nonzero carry could not enter)."""
    only = textbook_sum(t).subs(e, t).doit()
    beta = BETA.subs(flags).subs(c[t + 1], 0) if window_end else BETA.subs(flags)
    return (only == delta(t) and is_zero(ALPHA.subs(flags) - (r[t] + gamma * nxt - Q[t]))
            and beta == 0)


def _spec_examples():
    """SPEC.md 1.3 worked examples (targets, advantages), exactly."""
    R = sp.Rational

    def run(pi, mu, qs, next_q, actions, rw, term, trunc, g, lmb=1, c_bar=1, rho_bar=1):
        T = len(rw)
        expect, rho_, c_ = primitives(pi, mu, actions, next_q, R(lmb), R(c_bar), R(rho_bar))
        data = {"r": dict(enumerate(rationals(rw))), "Q": dict(enumerate(rationals(qs))),
                "E": dict(enumerate(expect)), "c": {**dict(enumerate(c_)), T: 0},
                "rho": dict(enumerate(rho_)), "tau": dict(enumerate(term)),
                "kappa": dict(enumerate(trunc))}
        return [x.subs(gamma, R(g)) for x in targets_and_advantages(data)]

    two = ([[R(9, 10), R(1, 10)], [R(2, 10), R(8, 10)]], rationals([.5, .5]), [0, 0],
           [[1, 3], [2, 4]], [0, 1], [1, 1], [0, 0], [0, 0])
    cases = [
        (([[1], [1]], [1, 1], [0, 0], [[2], [3]], [0, 0], [1, 1], [0, 0], [0, 0], "1"),
         [7, 4, 5, 1]),
        (([[1], [1]], [1, 1], [0, 0], [[2], [3]], [0, 0], [1, 1], [1, 0], [0, 0], "1"),
         [1, 4, 1, 1]),
        (([[1], [1]], [R(1, 2)] * 2, [0, 0], [[R(1, 2)]] * 2, [0, 0], [1, 1], [0, 0], [0, 0], "1"),
         [3, 1.5]),
        (([[1], [1]], [1, 1], [0, 0], [[5], [5]], [0, 0], [1, 1], [0, 0], [0, 1], "1"), [12, 6]),
        ((*two, "1"), [6.8, 4.6, 5.6, 1.0]),
        ((*two, ".9", ".5", ".9", "1.5"), [3.7972, 4.24, 7.224, 1.5]),
    ]
    return all(all_equal(run(*args)[:len(want)], rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"retrace.definition[T={T}]", partial(_definition, T),
               f"targets = Munos et al. Retrace, all 3^{T} flag patterns") for T in LENGTHS),
    Identity("retrace.induction.step", _induction_step,
             "inside an episode Delta_t = delta_t + gamma c_{t+1} Delta_{t+1}"),
    Identity("retrace.induction.base[terminated]",
             partial(_induction_base, {tau[t]: 1, kappa[t]: 0}, 0),
             "terminated step: Delta_t = r_t - Q_t"),
    Identity("retrace.induction.base[truncated]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 1}, E[t]),
             "truncated step: Delta_t = r_t + gamma E_t - Q_t, trace cut"),
    Identity("retrace.induction.base[window_end]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 0}, E[t], True),
             "window end: c_T = 0 so beta_{T-1} = 0"),
    Identity("retrace.spec_examples", _spec_examples, "SPEC.md 1.3 worked examples"),
]
