"""The paper's Retrace expectation (SPEC.md 1.3, 8.1): E_t = sum_a pi_t(a) Q(s_{t+1}, a) weights
the next state's Q by the target policy of row t; Munos et al. weight it by pi_{t+1}, the policy
at s_{t+1}. Here: exactly how the two differ, when they coincide, and what it does to Q_ret."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs import retrace
from proofs.core import Identity, all_equal, backward, gamma, is_zero, rationals, window

ACTIONS = (2, 3, 4)


def rows(A: int):
    """Two target-policy rows (pi_t, pi_{t+1}), each summing to 1, and Q(s_{t+1}, .)."""
    now, nxt = (list(window(name, range(A - 1)).values()) for name in ("pi_t", "pi_next"))
    now.append(1 - sum(now))
    nxt.append(1 - sum(nxt))
    return now, nxt, list(window("Qn", range(A)).values())


def expectation(weights, q):
    return sum(w * v for w, v in zip(weights, q, strict=True))


def _difference(A: int):
    """E_paper - E_textbook = sum_a (pi_t(a) - pi_{t+1}(a)) Q(s_{t+1}, a), which is NOT zero in
    general; shifting Q(s_{t+1}, .) by any constant leaves it unchanged (sum_a of the policy gap
    is 0), so only how Q varies across actions matters."""
    now, nxt, q = rows(A)
    gap = expectation(now, q) - expectation(nxt, q)
    shift = sp.Symbol("c")
    return (is_zero(gap - sum((p - m) * v for p, m, v in zip(now, nxt, q, strict=True)))
            and not is_zero(gap)
            and is_zero(gap - (expectation(now, [v + shift for v in q])
                               - expectation(nxt, [v + shift for v in q]))))


def _coincide(A: int, case: str):
    """They coincide when pi_t = pi_{t+1}, or when Q(s_{t+1}, .) is constant over actions."""
    now, nxt, q = rows(A)
    if case == "same_policy":
        nxt = now
    else:
        q = [sp.Symbol("q")] * A
    return is_zero(expectation(now, q) - expectation(nxt, q))


def _terminated():
    """At a terminated step alpha_t has (1 - tau_t) E_t, so neither expectation is used."""
    r, Q, Ep, Et = sp.symbols("r Q E_paper E_textbook")
    def alpha(E):
        return retrace.ALPHA.subs({retrace.tau[retrace.t]: 1}).xreplace(
            {retrace.r[retrace.t]: r, retrace.Q[retrace.t]: Q, retrace.E[retrace.t]: E})
    return is_zero(alpha(Ep) - alpha(Et))


def _effect_on_targets():
    """Q_ret is linear in alpha, so the two readings' targets differ by the same Retrace scan run
    on gamma (1 - tau_t)(E_paper_t - E_textbook_t), flags symbolic, T <= 5."""
    for T in range(1, 6):
        data = retrace.window_data(T)
        alt = window("Etext", range(T))
        paper = retrace.targets_and_advantages(data)[:T]
        textbook = retrace.targets_and_advantages(dict(data, E=alt))[:T]
        _, beta, _ = retrace.coefficients(T, data)
        gap = [gamma * (1 - data["tau"][s]) * (data["E"][s] - alt[s]) for s in range(T)]
        if not all_equal([p - x for p, x in zip(paper, textbook, strict=True)],
                         backward(gap, beta, 0)):
            return False
    return True


def _spec_example():
    """SPEC.md 1.3: pi_0 = [.9, .1], pi_1 = [.2, .8], Q(s_1, .) = [1, 3], Q(s_2, .) = [2, 4], ...:
    the paper's targets are [6.8, 4.6]; weighting E_0 by pi_1 gives Q_ret_0 = 8.2."""
    R = sp.Rational
    pi = [[R(9, 10), R(1, 10)], [R(2, 10), R(8, 10)]]
    next_q = [[1, 3], [2, 4]]
    outs = []
    for next_pi in (None, [pi[1], pi[1]]):
        expect, rho, c = retrace.primitives(pi, [R(1, 2)] * 2, [0, 1], next_q, 1, 1, 1, next_pi)
        data = {"r": {0: 1, 1: 1}, "Q": {0: 0, 1: 0}, "E": dict(enumerate(expect)),
                "c": {0: c[0], 1: c[1], 2: 0}, "rho": dict(enumerate(rho)),
                "tau": {0: 0, 1: 0}, "kappa": {0: 0, 1: 0}}
        outs.append([x.subs(gamma, 1) for x in retrace.targets_and_advantages(data)[:1]])
    return all_equal(outs[0], rationals([6.8])) and all_equal(outs[1], rationals([8.2]))


IDENTITIES = [
    *(Identity(f"retrace_expectation.difference[A={A}]", partial(_difference, A),
               "E_paper - E_textbook = sum_a (pi_t - pi_{t+1})(a) Q(s_{t+1}, a), not 0 in general")
      for A in ACTIONS),
    *(Identity(f"retrace_expectation.coincide[{case},A={A}]", partial(_coincide, A, case),
               "equal when pi_t = pi_{t+1} or Q(s_{t+1}, .) is constant")
      for case in ("same_policy", "constant_q") for A in ACTIONS),
    Identity("retrace_expectation.coincide[terminated]", _terminated,
             "a terminated step uses neither"),
    Identity("retrace_expectation.effect_on_targets", _effect_on_targets,
             "Q_ret gap = Retrace scan of gamma (1 - tau) (E_paper - E_textbook)"),
    Identity("retrace_expectation.spec_example", _spec_example,
             "6.8 with the paper's row, 8.2 with pi_1"),
]
