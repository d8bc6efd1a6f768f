"""The closed-form gradients of paper_repro/kernels/adjoints.py. For L = sum_t u_t A_t each input's
gradient is a few elementwise terms of one adjoint g: for the backward scans whose beta holds only
flags (GAE, TD(lambda) and discounted returns) g is the eligibility trace of u,
g_t = u_t + gamma lambda (1 - d_{t-1}) g_{t-1}; for the forward ones (eligibility traces, prefix
sums) the discounted return of u with beta one step later; V-trace's and Retrace's, of both
their outputs, run through their clipped ratios as any functions of the ratio. Flags are free
symbols (soft flags included; the done flag d, which enters beta only, its own symbol), checked
against the derivatives of the unrolled recurrence for T <= 4 (V-trace and Retrace T <= 3)."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs.core import Identity, backward, forward, gamma, is_zero, lam, window

T_MAX = 4


def _symbols(T: int, *names: str):
    return [list(window(n, range(T)).values()) for n in names]


def _trace(u, d, decay):
    """g_t = u_t + decay (1 - d_{t-1}) g_{t-1}, g_{-1} = 0: the eligibility traces of u."""
    return forward(u, [decay * (1 - x) for x in [0, *d[:-1]]], 0)


def _discounted(u, d, decay):
    """g_t = u_t + decay (1 - d_t) g_{t+1}, g_T = 0: the discounted returns of u."""
    return backward(u, [decay * (1 - x) for x in d], 0)


def _matches(loss, claimed: dict) -> bool:
    return all(is_zero(sp.diff(loss, x) - want) for x, want in claimed.items())


def _gae(last_value: bool) -> bool:
    """nu_t = kappa_t b_t + (1 - kappa_t) V_{t+1} (t < T-1), nu_{T-1} = W (last_value, or b_{T-1});
    alpha_t = r_t + gamma (1 - tau_t) nu_t - V_t, beta_t = gamma lambda (1 - d_t). With
    w = gamma (1 - tau) g: dr = g, dV_t = -g_t + (1 - kappa_{t-1}) w_{t-1},
    db_t = kappa_t w_t (t < T-1), dW = w_{T-1}."""
    for T in range(1, T_MAX + 1):
        r, V, b, tau, kappa, d, u = _symbols(T, "r", "V", "b", "tau", "kappa", "d", "u")
        W = sp.Symbol("W") if last_value else b[-1]
        nu = [kappa[s] * b[s] + (1 - kappa[s]) * V[s + 1] for s in range(T - 1)] + [W]
        alpha = [r[s] + gamma * (1 - tau[s]) * nu[s] - V[s] for s in range(T)]
        A = backward(alpha, [gamma * lam * (1 - x) for x in d], 0)
        loss = sum(x * a for x, a in zip(u, A, strict=True))
        g = _trace(u, d, gamma * lam)
        w = [gamma * (1 - tau[s]) * g[s] for s in range(T)]
        claimed = {r[s]: g[s] for s in range(T)}
        claimed |= {V[s]: -g[s] + ((1 - kappa[s - 1]) * w[s - 1] if s else 0) for s in range(T)}
        claimed |= {b[s]: kappa[s] * w[s] for s in range(T - 1)}
        claimed |= {sp.Symbol("W") if last_value else b[-1]: w[-1]}
        if not _matches(loss, claimed):
            return False
    return True


def _following(values, kappa, b, W):
    """kappa_t b_t + (1 - kappa_t) values_{t+1} (t < T-1), W at T-1: the next value."""
    return [kappa[s] * b[s] + (1 - kappa[s]) * values[s + 1] for s in range(len(b) - 1)] + [W]


def _vtrace(last_value: bool) -> bool:
    """D = backward(rho (r + gamma (1 - tau) nu - V), gamma lambda c (1 - d), 0), vs = D + V,
    pg = rho (r + gamma (1 - tau) eta - V), eta the next vs as nu is the next V; rho, c any
    functions of the log-ratio x (the code's clamps of e^x). With on = gamma (1 - tau)(1 - kappa),
    q = rho u_pg, U_t = u_vs_t + on_{t-1} q_{t-1}, g the adjoint of U and p = rho g: dr = p + q,
    dV_t = U_t - p_t - q_t + on_{t-1} p_{t-1}, db_t = kappa_t gamma (1 - tau_t)(p + q)_t,
    dW = gamma (1 - tau)(p + q) at T-1, dx = rho'(x)(g bracket + u_pg bracket_pg) +
    c'(x) gamma lambda (1 - d) g D_{t+1}."""
    rho_f, c_f = sp.Function("rho"), sp.Function("c")
    for T in range(1, T_MAX):
        r, V, b, tau, kappa, d, x, u, w = _symbols(T, "r", "V", "b", "tau", "kappa", "d", "x",
                                                   "u", "w")
        W = sp.Symbol("W") if last_value else b[-1]
        rho, c = [rho_f(y) for y in x], [c_f(y) for y in x]

        nu = _following(V, kappa, b, W)
        bracket = [r[s] + gamma * (1 - tau[s]) * nu[s] - V[s] for s in range(T)]
        beta = [gamma * lam * c[s] * (1 - d[s]) for s in range(T)]
        D = backward([rho[s] * bracket[s] for s in range(T)], beta, 0)
        vs = [D[s] + V[s] for s in range(T)]
        eta = _following(vs, kappa, b, W)
        bracket_pg = [r[s] + gamma * (1 - tau[s]) * eta[s] - V[s] for s in range(T)]
        loss = sum(u[s] * vs[s] + w[s] * rho[s] * bracket_pg[s] for s in range(T))
        on = [gamma * (1 - tau[s]) * (1 - kappa[s]) for s in range(T)]
        q = [rho[s] * w[s] for s in range(T)]
        U = [u[s] + (on[s - 1] * q[s - 1] if s else 0) for s in range(T)]
        g = forward(U, [0, *beta[:-1]], 0)
        p = [rho[s] * g[s] for s in range(T)]
        D_next = [*D[1:], 0]
        claimed = {r[s]: p[s] + q[s] for s in range(T)}
        claimed |= {V[s]: U[s] - p[s] - q[s] + (on[s - 1] * p[s - 1] if s else 0)
                    for s in range(T)}
        claimed |= {b[s]: kappa[s] * gamma * (1 - tau[s]) * (p[s] + q[s]) for s in range(T - 1)}
        claimed |= {sp.Symbol("W") if last_value else b[-1]:
                    gamma * (1 - tau[-1]) * (p[-1] + q[-1])}
        claimed |= {x[s]: sp.diff(rho[s], x[s]) * (g[s] * bracket[s] + w[s] * bracket_pg[s])
                    + sp.diff(c[s], x[s]) * gamma * lam * (1 - d[s]) * g[s] * D_next[s]
                    for s in range(T)}
        if not _matches(loss, claimed):
            return False
    return True


def _retrace(textbook: bool) -> bool:
    """D = backward(r + gamma (1 - tau) E - Q, gamma c_{t+1} (1 - d), 0), Q_ret = D + Q,
    adv = rho (r + gamma (1 - tau) Q_ret_{t+1} - Q) with Q_ret_T = 0, E_t = sum_a w_t(a)
    nq_t(a) (w: pi itself, or the next policy), ratio = pi_t(a_t) / mu_t (a_t = 0 here),
    c = lambda cf(ratio), rho = rf(ratio) for any functions cf, rf (the code's clamps). With
    keep = gamma (1 - tau), h = rho u_adv, U_t = u_ret_t + keep_{t-1} h_{t-1} and g the adjoint of
    U: dr = g + h, dQ = U - g - h, dnq = keep g w, dw = keep g nq, and the ratio's gradient
    rf'(ratio) u_adv bracket + lambda cf'(ratio) gamma (1 - d_{t-1}) g_{t-1} D_t reaches
    pi_t(a_t) divided by mu_t and mu_t times -pi_t(a_t) / mu_t^2; two actions, T <= 3."""
    rf, cf, z = sp.Function("rf"), sp.Function("cf"), sp.Symbol("z")
    A = 2
    for T in range(1, T_MAX):
        r, Q, tau, d, mu, u, w_adv = _symbols(T, "r", "Q", "tau", "d", "mu", "u", "w")
        pi = [[sp.Symbol(f"pi_{s}_{a}") for a in range(A)] for s in range(T)]
        nq = [[sp.Symbol(f"nq_{s}_{a}") for a in range(A)] for s in range(T)]
        weights = [[sp.Symbol(f"npi_{s}_{a}") for a in range(A)] for s in range(T)] \
            if textbook else pi
        ratio = [pi[s][0] / mu[s] for s in range(T)]
        rho = [rf(x) for x in ratio]
        c = [lam * cf(x) for x in ratio] + [0]
        keep = [gamma * (1 - tau[s]) for s in range(T)]
        expect = [sum(weights[s][a] * nq[s][a] for a in range(A)) for s in range(T)]
        beta = [gamma * c[s + 1] * (1 - d[s]) for s in range(T)]
        D = backward([r[s] + keep[s] * expect[s] - Q[s] for s in range(T)], beta, 0)
        q_ret = [D[s] + Q[s] for s in range(T)] + [0]
        bracket = [r[s] + keep[s] * q_ret[s + 1] - Q[s] for s in range(T)]
        loss = sum(u[s] * q_ret[s] + w_adv[s] * rho[s] * bracket[s] for s in range(T))
        h = [rho[s] * w_adv[s] for s in range(T)]
        U = [u[s] + (keep[s - 1] * h[s - 1] if s else 0) for s in range(T)]
        g = forward(U, [0, *beta[:-1]], 0)
        d_ratio = [sp.diff(rf(z), z).subs(z, ratio[s]) * w_adv[s] * bracket[s]
                   + (lam * sp.diff(cf(z), z).subs(z, ratio[s]) * gamma * (1 - d[s - 1])
                      * g[s - 1] * D[s] if s else 0) for s in range(T)]
        claimed = {r[s]: g[s] + h[s] for s in range(T)}
        claimed |= {Q[s]: U[s] - g[s] - h[s] for s in range(T)}
        claimed |= {nq[s][a]: keep[s] * g[s] * weights[s][a] for s in range(T) for a in range(A)}
        claimed |= {mu[s]: -d_ratio[s] * pi[s][0] / mu[s] ** 2 for s in range(T)}
        for s in range(T):
            for a in range(A):
                d_w = keep[s] * g[s] * nq[s][a]
                d_pi = (d_ratio[s] / mu[s] if a == 0 else 0) + (0 if textbook else d_w)
                claimed[pi[s][a]] = d_pi
                if textbook:
                    claimed[weights[s][a]] = d_w
        if not _matches(loss, claimed):
            return False
    return True


def _returns(with_values: bool) -> bool:
    """alpha_t = r_t + gamma (1 - lambda)(1 - d_t) n_t + gamma kappa_t b_t, beta_t = gamma lambda
    (1 - d_t), A_T = b_{T-1} (discounted returns: lambda = 1, no n): dr = g,
    dn = gamma (1 - lambda)(1 - d) g, db_t = gamma kappa_t g_t + [t = T-1] beta_{T-1} g_{T-1}."""
    decay = gamma * lam if with_values else gamma
    for T in range(1, T_MAX + 1):
        r, n, b, kappa, d, u = _symbols(T, "r", "n", "b", "kappa", "d", "u")
        alpha = [r[s] + gamma * kappa[s] * b[s] for s in range(T)]
        if with_values:
            alpha = [a + gamma * (1 - lam) * (1 - d[s]) * n[s] for s, a in enumerate(alpha)]
        beta = [decay * (1 - x) for x in d]
        loss = sum(x * a for x, a in zip(u, backward(alpha, beta, b[-1]), strict=True))
        g = _trace(u, d, decay)
        claimed = {r[s]: g[s] for s in range(T)}
        claimed |= {b[s]: gamma * kappa[s] * g[s] + (beta[-1] * g[-1] if s == T - 1 else 0)
                    for s in range(T)}
        if with_values:
            claimed |= {n[s]: gamma * (1 - lam) * (1 - d[s]) * g[s] for s in range(T)}
        if not _matches(loss, claimed):
            return False
    return True


def _decayed_sum(ends_at: bool) -> bool:
    """z_t = x_t + beta_t z_{t-1}, z_{-1} = S; beta_t = k (1 - d_{t-1}) with d_{-1} = 0 (ends at)
    or 1 - d_t (starts at): g is the backward scan of u with beta_{t+1} (ends at: the discounted
    returns of u, flags d, discount k), dx = g, dS = beta_0 g_0."""
    decay, S = sp.symbols("k S")
    for T in range(1, T_MAX + 1):
        x, d, u = _symbols(T, "x", "d", "u")
        beta = [decay * (1 - p) for p in [0, *d[:-1]]] if ends_at else [1 - p for p in d]
        loss = sum(w * z for w, z in zip(u, forward(x, beta, S), strict=True))
        g = _discounted(u, d, decay) if ends_at else backward(u, [*beta[1:], 0], 0)
        claimed = {x[s]: g[s] for s in range(T)} | {S: beta[0] * g[0]}
        if not _matches(loss, claimed):
            return False
    return True


IDENTITIES = [
    Identity("closed_form.gae", partial(_gae, False),
             "GAE: dr = g, dV, db from w = gamma (1 - tau) g; g the eligibility trace of u"),
    Identity("closed_form.gae_last_value", partial(_gae, True),
             "GAE with last_value: its gradient is w_{T-1}, b_{T-1} gets none"),
    Identity("closed_form.vtrace", partial(_vtrace, False),
             "V-trace, both outputs: dr, dV, db from p = rho g and q = rho u_pg; dx through "
             "rho(x) and c(x); T <= 3"),
    Identity("closed_form.vtrace_last_value", partial(_vtrace, True),
             "V-trace with last_value: its gradient gamma (1 - tau)(p + q) at T-1; T <= 3"),
    Identity("closed_form.retrace", partial(_retrace, False),
             "Retrace, both outputs, same-row expectation: dr, dQ, dnq, dpi through E and the "
             "taken ratio, dmu; T <= 3"),
    Identity("closed_form.retrace_next_policy", partial(_retrace, True),
             "Retrace with the next policy's expectation: its weights' gradient keep g nq"),
    Identity("closed_form.lambda_returns", partial(_returns, True),
             "TD(lambda): dr = g, dn = gamma (1 - lambda)(1 - d) g, db with the carry's term"),
    Identity("closed_form.discounted_returns", partial(_returns, False),
             "discounted returns: TD(lambda) at lambda = 1 without next values"),
    Identity("closed_form.eligibility_traces", partial(_decayed_sum, True),
             "ends-at decayed sums: g = discounted returns of u, dseed = k g_0"),
    Identity("closed_form.prefix_sum_starts_at", partial(_decayed_sum, False),
             "starts-at prefix sums: g = backward scan with 1 - d_{t+1}, dseed = (1 - d_0) g_0"),
]
