"""GAE (Schulman et al. 2016, eq. 16): the discounted sum of TD errors inside an episode is the
backward recurrence of SPEC.md 1.1, A_t = delta_t + gamma*lambda*(1 - d_t)*A_{t+1}, A_T = 0."""
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
    lam,
    matches_on_patterns,
    peel_first,
    rationals,
    t,
    terminated_truncated,
    window,
)

r, V, b, tau, kappa = (sp.IndexedBase(name) for name in ("r", "V", "b", "tau", "kappa"))
# next-state value: the supplied bootstrap at a truncation, else V(s_{t+1}); V_T reads b_{T-1}
NU = kappa[t] * b[t] + (1 - kappa[t]) * V[t + 1]
ALPHA = r[t] + gamma * (1 - tau[t]) * NU - V[t]
# (1 - tau)(1 - kappa) = 1 - min(tau + kappa, 1) for 0/1 flags
BETA = gamma * lam * (1 - tau[t]) * (1 - kappa[t])
CARRY = sp.Integer(0)


def window_data(T: int) -> dict:
    data = {"r": window("r", range(T)), "V": window("V", range(T)), "b": window("b", range(T))}
    # the window bootstrap B (last_value or b_{T-1}) stands where V_T would be read
    data["V"][T] = data["b"][T - 1]
    return data | flag_window(T)


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, CARRY


def advantages(data: dict):
    return backward(*coefficients(len(data["r"]), data))


def definition(data: dict):
    """Textbook: A_t = sum_{k=t}^{end} (gamma lambda)^(k-t) delta_k over t's episode, where delta_k
    bootstraps from V_{k+1} inside the episode and, at its last step, from 0 if it terminated,
    else from the supplied continuation b (a truncation's, or the window's V(s_T))."""
    r_, V_, b_, tau_, kappa_ = (data[name] for name in ("r", "V", "b", "tau", "kappa"))
    T = len(r_)
    done = [tau_[s] or kappa_[s] for s in range(T)]
    out = []
    for s in range(T):
        end, total = episode_end(s, done), 0
        for j in range(s, end + 1):
            nxt = V_[j + 1] if j < end else (0 if tau_[end] else b_[end])
            total += (gamma * lam) ** (j - s) * (r_[j] + gamma * nxt - V_[j])
        out.append(total)
    return out


def _definition(T: int):
    return matches_on_patterns(T, advantages, definition, window_data(T), terminated_truncated(T))


delta = sp.Function("delta")
W = gamma * lam


def textbook_sum(start):
    """sum_{k=start}^{e} (gamma lambda)^(k-start) delta_k, e the last step of the episode."""
    return sp.Sum(W ** (k - start) * delta(k), (k, start, e))


def td_error(nxt):
    return r[t] + gamma * nxt - V[t]


def _induction_step():
    """Inside an episode (d_t = 0): the sum is delta_t + gamma*lambda*(the sum from t+1), and
    delta_t with nu_t = V_{t+1} is alpha_t, gamma*lambda is beta_t."""
    ok, head, rest = peel_first(W ** (k - t) * delta(k), t, e)
    inside = {tau[t]: 0, kappa[t]: 0}
    return (ok and head == delta(t)
            and sp.simplify(rest - BETA.subs(inside) * textbook_sum(t + 1)) == 0
            and is_zero(ALPHA.subs(inside) - td_error(V[t + 1])))


def _induction_base(flags: dict, nxt, carry_weight, window_end: bool = False):
    """At an episode's last step e = t the sum is delta_t alone; alpha_t is that TD error and the
    carry is switched off (beta_t = 0), or is A_T = 0 at the window end."""
    only = textbook_sum(t).subs(e, t).doit()
    alpha = ALPHA.subs(flags).subs(V[t + 1], b[t]) if window_end else ALPHA.subs(flags)
    return only == delta(t) and is_zero(alpha - td_error(nxt)) and is_zero(
        BETA.subs(flags) * carry_weight)


def _spec_examples():
    """The worked examples of SPEC.md 1.1, in exact rationals."""
    def run(rw, vals, term, trunc, boot, g, lmb):
        T = len(rw)
        data = {"r": dict(enumerate(rationals(rw))), "V": dict(enumerate(rationals(vals))),
                "b": dict(enumerate(rationals(boot))), "tau": dict(enumerate(term)),
                "kappa": dict(enumerate(trunc))}
        data["V"][T] = data["b"][T - 1]
        return [x.subs({gamma: sp.Rational(g), lam: sp.Rational(lmb)}) for x in advantages(data)]

    cases = [
        (([1, 2, 3], [0] * 3, [0] * 3, [0] * 3, [0, 0, 2], "1", "1"), [8, 7, 5]),
        (([1] * 4, [.5] * 4, [0] * 4, [0, 1, 0, 0], [0, 10, 0, 5], ".9", ".8"),
         [7.79, 9.5, 4.55, 5.0]),
        (([1] * 4, [.5] * 4, [0, 0, 1, 0], [0, 1, 0, 0], [0, 10, 0, 5], ".9", ".8"),
         [7.79, 9.5, 0.5, 5.0]),
        (([1, 2], [.5, .5], [0, 1], [0, 0], [0, 7], ".9", ".8"), [2.03, 1.5]),
        (([1, 2, 3], [0] * 3, [0, 1, 0], [0] * 3, [0] * 3, "1", "1"), [3, 2, 3]),
    ]
    return all(all_equal(run(*args), rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"gae.definition[T={T}]", partial(_definition, T),
               f"recurrence = discounted sum of TD errors, all 3^{T} flag patterns")
      for T in LENGTHS),
    Identity("gae.induction.step", _induction_step,
             "inside an episode A_t = delta_t + gamma lambda A_{t+1}"),
    Identity("gae.induction.base[terminated]",
             partial(_induction_base, {tau[t]: 1, kappa[t]: 0}, 0, 1),
             "terminated step: A_t = r_t - V_t, trace cut"),
    Identity("gae.induction.base[truncated]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 1}, b[t], 1),
             "truncated step: A_t = r_t + gamma b_t - V_t, trace cut"),
    Identity("gae.induction.base[window_end]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 0}, b[t], CARRY, True),
             "window end: A_{T-1} = r + gamma B - V, carry A_T = 0"),
    Identity("gae.spec_examples", _spec_examples, "SPEC.md 1.1 worked examples"),
]
