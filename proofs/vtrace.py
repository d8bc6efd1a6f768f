"""V-trace (Espeholt et al. 2018, eq. 1): vs_t - V_t = sum_k gamma^(k-t) (prod_{i=t}^{k-1} c_i)
rho_k delta_k is the backward recurrence of SPEC.md 1.2 with the current-step c_t in beta_t."""
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

r, V, b, tau, kappa, rho, c, vs = (
    sp.IndexedBase(name) for name in ("r", "V", "b", "tau", "kappa", "rho", "c", "vs"))
# the same next-state value as GAE: b at a truncation, else V_{t+1}; V_T reads b_{T-1}
NU = kappa[t] * b[t] + (1 - kappa[t]) * V[t + 1]
ALPHA = rho[t] * (r[t] + gamma * (1 - tau[t]) * NU - V[t])
BETA = gamma * c[t] * (1 - tau[t]) * (1 - kappa[t])
CARRY = sp.Integer(0)
# advantages bootstrap from the next target inside the episode; vs_T reads b_{T-1}
ADVANTAGE = rho[t] * (r[t] + gamma * (1 - tau[t]) * (kappa[t] * b[t] + (1 - kappa[t]) * vs[t + 1])
                      - V[t])


def clipped_ratios(log_pi_target, log_pi_behavior, rho_bar, c_bar, lambda_=1):
    """rho_t = min(pi/mu, rho_bar), c_t = lambda min(pi/mu, c_bar) with pi/mu = exp(log pi -
    log mu); IMPALA's lambda (remark 2) only scales the traces."""
    ratio = [sp.exp(a - m) for a, m in zip(log_pi_target, log_pi_behavior, strict=True)]
    return [sp.Min(x, rho_bar) for x in ratio], [lambda_ * sp.Min(x, c_bar) for x in ratio]


def window_data(T: int) -> dict:
    data = {name: window(name, range(T)) for name in ("r", "V", "b", "rho", "c")}
    data["V"][T] = data["b"][T - 1]
    return data | flag_window(T)


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, CARRY


def targets_and_advantages(data: dict):
    T = len(data["r"])
    delta = backward(*coefficients(T, data))
    targets = [delta[s] + data["V"][s] for s in range(T)]
    with_targets = dict(data, vs={**dict(enumerate(targets)), T: data["b"][T - 1]})
    return targets + [instantiate(ADVANTAGE, s, with_targets) for s in range(T)]


def definition(data: dict):
    """Espeholt et al.: vs_t = V_t + sum_{k=t}^{end} gamma^(k-t) (prod_{i=t}^{k-1} c_i) rho_k
    delta_k over t's episode (delta_k as in GAE), and the policy-gradient advantage
    rho_t (r_t + gamma vs_{t+1} - V_t) with vs_{t+1} replaced by the continuation at the end."""
    r_, V_, b_, tau_, kappa_, rho_, c_ = (
        data[name] for name in ("r", "V", "b", "tau", "kappa", "rho", "c"))
    T = len(r_)
    done = [tau_[s] or kappa_[s] for s in range(T)]
    cont = {s: 0 if tau_[s] else b_[s] for s in range(T)}
    targets, advantages = [], []
    for s in range(T):
        end, total, trace = episode_end(s, done), V_[s], 1
        for j in range(s, end + 1):
            nxt = V_[j + 1] if j < end else cont[end]
            total += gamma ** (j - s) * trace * rho_[j] * (r_[j] + gamma * nxt - V_[j])
            trace *= c_[j]
        targets.append(total)
    for s in range(T):
        nxt = targets[s + 1] if episode_end(s, done) > s else cont[s]
        advantages.append(rho_[s] * (r_[s] + gamma * nxt - V_[s]))
    return targets + advantages


def _definition(T: int):
    return matches_on_patterns(T, targets_and_advantages, definition, window_data(T),
                               terminated_truncated(T))


delta, c_f, rho_f = sp.Function("delta"), sp.Function("c"), sp.Function("rho")


def textbook_sum(start):
    return sp.Sum(gamma ** (k - start) * sp.Product(c_f(i), (i, start, k - 1)) * rho_f(k)
                  * delta(k), (k, start, e))


def td_error(nxt):
    return r[t] + gamma * nxt - V[t]


def _induction_step():
    """Inside an episode: the first term is rho_t delta_t (empty product), and every later term
    carries gamma c_t, so the rest is gamma c_t times the sum from t+1."""
    term = textbook_sum(t).function
    ok, head, rest = peel_first(term, t, e)
    ok_c, c_t, tail = peel_product(c_f(i), t, k - 1)
    rest = sp.Sum(rest.function.xreplace({sp.Product(c_f(i), (i, t, k - 1)): c_t * tail}),
                  *rest.limits)
    inside = {tau[t]: 0, kappa[t]: 0}
    beta = BETA.subs(inside).xreplace({c[t]: c_f(t)})
    return (ok and ok_c and head == rho_f(t) * delta(t)
            and sp.simplify(rest - beta * textbook_sum(t + 1)) == 0
            and is_zero(ALPHA.subs(inside) - rho[t] * td_error(V[t + 1])))


def _induction_base(flags: dict, nxt, carry_weight, window_end: bool = False):
    only = textbook_sum(t).subs(e, t).doit()
    alpha = ALPHA.subs(flags)
    alpha = alpha.subs(V[t + 1], b[t]) if window_end else alpha
    return (only == rho_f(t) * delta(t) and is_zero(alpha - rho[t] * td_error(nxt))
            and is_zero(BETA.subs(flags) * carry_weight))


def _spec_examples():
    """SPEC.md 1.2 worked examples; ratios from log-probabilities, exactly."""
    def run(lpt, lpb, vals, rw, trunc, boot, g, bar):
        T = len(rw)
        rho_, c_ = clipped_ratios(lpt, lpb, bar, bar)
        data = {"r": dict(enumerate(rationals(rw))), "V": dict(enumerate(rationals(vals))),
                "b": dict(enumerate(rationals(boot))), "tau": dict.fromkeys(range(T), 0),
                "kappa": dict(enumerate(trunc)), "rho": dict(enumerate(rho_)),
                "c": dict(enumerate(c_))}
        data["V"][T] = data["b"][T - 1]
        return [x.subs(gamma, sp.Rational(g)) for x in targets_and_advantages(data)]

    log = sp.log
    mu = [2, sp.Rational(1, 2), 1, 4]
    cases = [
        (([0, 0], [0, 0], [0, 0], [1, 1], [0, 0], [0, ".5"], "1", 100), [2.5, 1.5, 2.5, 1.5]),
        (([0, 0], [log(2)] * 2, [0, 0], [1, 1], [0, 0], [0, 0], "1", 1), [.75, .5]),
        (([0] * 4, [log(m) for m in mu], [.5] * 4, [1] * 4, [0, 1, 0, 0], [0, 10, 0, 5], ".9", 1),
         [5.25, 10, 2.575, 1.75, 4.75, 9.5, 2.075, 1.25]),
    ]
    # the clipping example fixes only the targets
    return all(all_equal(run(*args)[:len(want)], rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"vtrace.definition[T={T}]", partial(_definition, T),
               f"targets and advantages = Espeholt et al., all 3^{T} flag patterns")
      for T in LENGTHS),
    Identity("vtrace.induction.step", _induction_step,
             "inside an episode Delta_t = rho_t delta_t + gamma c_t Delta_{t+1}"),
    Identity("vtrace.induction.base[terminated]",
             partial(_induction_base, {tau[t]: 1, kappa[t]: 0}, 0, 1),
             "terminated step: Delta_t = rho_t (r_t - V_t)"),
    Identity("vtrace.induction.base[truncated]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 1}, b[t], 1),
             "truncated step: Delta_t = rho_t (r_t + gamma b_t - V_t)"),
    Identity("vtrace.induction.base[window_end]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 0}, b[t], CARRY, True),
             "window end: Delta_{T-1} = rho (r + gamma B - V), carry 0"),
    Identity("vtrace.spec_examples", _spec_examples, "SPEC.md 1.2 worked examples"),
]
