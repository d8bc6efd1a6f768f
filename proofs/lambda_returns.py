"""TD(lambda) returns (Sutton & Barto 2018, eq. 12.3): the lambda-weighted mixture of n-step
returns is the backward recurrence of SPEC.md 1.4, G_t = r_t + gamma (1-lambda)(1-d_t) n_t +
gamma kappa_t b_t + gamma lambda (1-d_t) G_{t+1}, G_T = b_{T-1}."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs import gae
from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    backward,
    coefficient_lists,
    episode_end,
    flag_window,
    gamma,
    instantiate,
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

r, n, b, tau, kappa = (sp.IndexedBase(name) for name in ("r", "n", "b", "tau", "kappa"))
ALPHA = r[t] + gamma * (1 - lam) * (1 - tau[t]) * (1 - kappa[t]) * n[t] + gamma * kappa[t] * b[t]
BETA = gamma * lam * (1 - tau[t]) * (1 - kappa[t])


def carry(data: dict):
    return data["b"][len(data["r"]) - 1]


def window_data(T: int, caller_gives_both: bool = True) -> dict:
    """caller_gives_both: V(s_T) is passed in next_values[-1] and bootstrap_values[-1] alike."""
    data = {name: window(name, range(T)) for name in ("r", "n", "b")}
    if caller_gives_both:
        data["n"][T - 1] = data["b"][T - 1]
    return data | flag_window(T)


def coefficients(T: int, data: dict):
    alpha, beta = coefficient_lists(T, ALPHA, BETA, data)
    return alpha, beta, carry(data)


def returns(data: dict):
    return backward(*coefficients(len(data["r"]), data))


def definition(data: dict):
    """Textbook: G^lambda_t = (1-lambda) sum_{m=1}^{N-1} lambda^(m-1) G^(m)_t
    + lambda^(N-1) G^(N)_t, N the steps left in t's episode; G^(m) bootstraps from
    n_{t+m-1} = V(s_{t+m}), the full return G^(N) from 0 (terminated) or the supplied
    continuation b (truncation or window)."""
    r_, n_, b_, tau_, kappa_ = (data[name] for name in ("r", "n", "b", "tau", "kappa"))
    T = len(r_)
    done = [tau_[s] or kappa_[s] for s in range(T)]
    out = []
    for s in range(T):
        end = episode_end(s, done)
        steps = end - s + 1

        def n_step(m, s=s, end=end, steps=steps):
            boot = n_[s + m - 1] if m < steps else (0 if tau_[end] else b_[end])
            return sum(gamma ** (j - s) * r_[j] for j in range(s, s + m)) + gamma ** m * boot

        mixture = sum((1 - lam) * lam ** (m - 1) * n_step(m) for m in range(1, steps))
        out.append(mixture + lam ** (steps - 1) * n_step(steps))
    return out


def _definition(T: int):
    return matches_on_patterns(T, returns, definition, window_data(T), terminated_truncated(T))


steps = sp.Symbol("N", integer=True)
H, v = sp.Function("H"), sp.Function("v")


def _n_step_recursion():
    """G^(m)_t = sum_{j=t}^{t+m-1} gamma^(j-t) r_j + gamma^m X equals r_t + gamma G^(m-1)_{t+1}
    for m >= 2 (X the value the m-step return bootstraps from, the same for both)."""
    m, X, r_f = sp.Symbol("m", integer=True), sp.Symbol("X"), sp.Function("r")

    def g(start, length):
        rewards = sp.Sum(gamma ** (k - start) * r_f(k), (k, start, start + length - 1))
        return rewards + gamma ** length * X

    ok, head, rest = peel_first(gamma ** (k - t) * r_f(k), t, t + m - 1)
    one_step_on = r_f(t) + gamma * g(t + 1, m - 1)
    return ok and sp.simplify(head + rest + gamma ** m * X - one_step_on) == 0


def _induction_step():
    """With N >= 2 steps left,
    G^lambda_t = r_t + gamma (1-lambda) n_t + gamma lambda G^lambda_{t+1},
    from G^(1)_t = r_t + gamma n_t and G^(m)_t = r_t + gamma G^(m-1)_{t+1}
    (H(m) = G^(m)_{t+1})."""
    rt, nt = sp.symbols("r_t n_t")
    ok, head, rest = peel_first(lam ** (k - 1) * (rt + gamma * H(k - 1)), 1, steps - 1)
    # a 0-step return is the value itself: G^(0)_{t+1} = V(s_{t+1}) = n_t
    head = head.subs(H(0), nt)
    r_part = sp.Sum(lam ** (k - 1) * rt, (k, 2, steps - 1))
    h_part = sp.Sum(lam ** (k - 1) * H(k - 1), (k, 2, steps - 1))
    ok_split = sp.simplify(rest - r_part - gamma * h_part) == 0
    lhs = ((1 - lam) * (head + r_part.doit() + gamma * h_part.change_index(k, k - 1, k))
           + lam ** (steps - 1) * (rt + gamma * H(steps - 1)))
    successor = ((1 - lam) * sp.Sum(lam ** (k - 1) * H(k), (k, 1, steps - 2))
                 + lam ** (steps - 2) * H(steps - 1))
    inside = {tau[t]: 0, kappa[t]: 0, r[t]: rt, n[t]: nt}
    rhs = ALPHA.subs(inside) + BETA.subs(inside) * successor
    return ok and ok_split and sp.simplify(lhs - rhs) == 0


def _induction_base(flags: dict, full_return, window_end: bool = False):
    """One step left: G^lambda_t = G^(1)_t = r_t + gamma (continuation), which is
    alpha_t + beta_t G_T (beta_t = 0 at a boundary; at the window end with
    n_{T-1} = G_T = b_{T-1})."""
    value = ALPHA.subs(flags) + BETA.subs(flags) * (b[t] if window_end else sp.Symbol("G_next"))
    if window_end:
        value = value.subs(n[t], b[t])
    return is_zero(value - full_return)


def _gae_relation():
    """G^lambda_t = A^GAE_t + V_t when n_t = V_{t+1} inside the window and n_{T-1} = b_{T-1}."""
    for T in range(1, 6):
        data = gae.window_data(T)

        def difference(d, T=T):
            lam_data = dict(d, n={s: d["V"][s + 1] for s in range(T)})
            return [a + d["V"][s] - g for s, (a, g) in
                    enumerate(zip(gae.advantages(d), returns(lam_data), strict=True))]

        if not matches_on_patterns(T, difference, lambda d, T=T: [0] * T, data,
                                   terminated_truncated(T)):
            return False
    return True


def _lambda_limits():
    """lambda = 1 gives the discounted return's coefficients; lambda = 0 the one-step TD target."""
    from proofs import discounted_returns as disc
    T = 4
    data = window_data(T, caller_gives_both=False)
    a, be, cy = coefficients(T, data)
    da, db, dc = disc.coefficients(T, {x: data[x] for x in ("r", "b", "tau", "kappa")})
    one = all_equal([x.subs(lam, 1) for x in a + be], da + db) and is_zero(cy - dc)
    one_step = r[t] + gamma * (1 - tau[t]) * (1 - kappa[t]) * n[t] + gamma * kappa[t] * b[t]
    td0 = [instantiate(one_step, s, data) for s in range(T)]
    zero = all_equal([x.subs(lam, 0) for x in returns(data)], td0)
    return one and zero


def _spec_examples():
    """SPEC.md 1.4 worked examples, exactly."""
    def run(rw, nv, term, trunc, boot, g, lmb):
        data = {"r": dict(enumerate(rationals(rw))), "n": dict(enumerate(rationals(nv))),
                "b": dict(enumerate(rationals(boot))), "tau": dict(enumerate(term)),
                "kappa": dict(enumerate(trunc))}
        return [x.subs({gamma: sp.Rational(g), lam: sp.Rational(lmb)}) for x in returns(data)]

    cases = [
        (([1, 2], [3, 4], [0, 0], [0, 0], [0, 0], "1", ".5"), [4.5, 4.0]),
        (([1, 2], [3, 4], [1, 0], [0, 0], [0, 0], "1", ".5"), [1, 4]),
        (([1, 1], [2, 3], [0, 0], [0, 0], [0, 3], ".9", ".8"), [4.024, 3.7]),
        (([1, 1], [2, 3], [0, 0], [0, 0], [0, 0], ".9", ".8"), [2.4688, 1.54]),
        (([1, 1], [2, 0], [0, 0], [0, 0], [0, 3], ".9", ".8"), [3.6352, 3.16]),
        (([1, 1, 1], [2, 9, 4], [0] * 3, [0, 1, 0], [0, 7, 4], ".9", ".5"), [5.185, 7.3, 4.6]),
    ]
    return all(all_equal(run(*args), rationals(want)) for args, want in cases)


IDENTITIES = [
    *(Identity(f"lambda_returns.definition[T={T}]", partial(_definition, T),
               f"recurrence = lambda-mixture of n-step returns, all 3^{T} flag patterns")
      for T in LENGTHS),
    Identity("lambda_returns.induction.n_step_recursion", _n_step_recursion,
             "G^(m)_t = r_t + gamma G^(m-1)_{t+1}"),
    Identity("lambda_returns.induction.step", _induction_step,
             "G^lambda_t = r_t + gamma (1-lambda) n_t + gamma lambda G^lambda_{t+1}, any N >= 2"),
    Identity("lambda_returns.induction.base[terminated]",
             partial(_induction_base, {tau[t]: 1, kappa[t]: 0}, r[t]), "terminated: G_t = r_t"),
    Identity("lambda_returns.induction.base[truncated]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 1}, r[t] + gamma * b[t]),
             "truncated: G_t = r_t + gamma b_t"),
    Identity("lambda_returns.induction.base[window_end]",
             partial(_induction_base, {tau[t]: 0, kappa[t]: 0}, r[t] + gamma * b[t], True),
             "window end: G_{T-1} = r + gamma V(s_T)"),
    Identity("lambda_returns.gae_relation", _gae_relation,
             "lambda-return = GAE advantage + V, T <= 5, all flag patterns"),
    Identity("lambda_returns.lambda_limits", _lambda_limits,
             "lambda = 1: discounted returns; lambda = 0: one-step TD target"),
    Identity("lambda_returns.spec_examples", _spec_examples, "SPEC.md 1.4 worked examples"),
]
