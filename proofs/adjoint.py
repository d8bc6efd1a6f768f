"""The backward rule (ARCHITECTURE.md 5): for L = sum_t u_t A_t, the gradient of a backward scan is
the forward scan of u with beta shifted one step, g_t = u_t + beta_{t-1} g_{t-1}; then
dL/dalpha_t = g_t, dL/dbeta_t = g_t A_{t+1}, dL/dcarry = beta_{T-1} g_{T-1}. Forward scans mirror
it. The forward mode: the tangent of a scan is the scan, with the same beta, of
dalpha_t + dbeta_t A_{t+-1} from the boundary's tangent. Checked by differentiating the unrolled
recurrence."""
from __future__ import annotations

from functools import partial

import sympy as sp

from proofs import eligibility_traces, gae, lambda_returns
from proofs.core import LENGTHS, Identity, backward, forward, gamma, is_zero, lam, window


def _scan_adjoint(reverse: bool):
    for T in LENGTHS:
        alpha, beta, u = (list(window(n, range(T)).values()) for n in ("alpha", "beta", "u"))
        boundary = sp.Symbol("carry" if reverse else "seed")
        if reverse:
            A = backward(alpha, beta, boundary)
            # the opposite-direction scan: beta_{t-1} weighs the edge into t, none into t = 0
            g = forward(u, [0, *beta[:-1]], 0)
            neighbour = [*A[1:], boundary]
            d_boundary = beta[-1] * g[-1]
        else:
            A = forward(alpha, beta, boundary)
            g = backward(u, [*beta[1:], 0], 0)
            neighbour = [boundary, *A[:-1]]
            d_boundary = beta[0] * g[0]
        loss = sum(w * a for w, a in zip(u, A, strict=True))
        for s in range(T):
            if not (is_zero(sp.diff(loss, alpha[s]) - g[s])
                    and is_zero(sp.diff(loss, beta[s]) - g[s] * neighbour[s])):
                return False
        if not is_zero(sp.diff(loss, boundary) - d_boundary):
            return False
    return True


def _scan_tangent(reverse: bool):
    """d/de of scan(alpha + e dalpha, beta + e dbeta, boundary + e dboundary) at e = 0."""
    e = sp.Symbol("epsilon")
    for T in LENGTHS:
        alpha, beta, da, db = (list(window(n, range(T)).values())
                               for n in ("alpha", "beta", "dalpha", "dbeta"))
        boundary, d_boundary = sp.symbols("boundary dboundary")
        scan = backward if reverse else forward
        A = scan(alpha, beta, boundary)
        moved = scan([a + e * x for a, x in zip(alpha, da)], [b + e * x for b, x in zip(beta, db)],
                     boundary + e * d_boundary)
        neighbour = [*A[1:], boundary] if reverse else [boundary, *A[:-1]]
        tangent = scan([x + y * n for x, y, n in zip(da, db, neighbour)], beta, d_boundary)
        if not all(is_zero(sp.diff(m, e).subs(e, 0) - t) for m, t in zip(moved, tangent)):
            return False
    return True


def _chain(name: str):
    """Through the coefficients: dL/dx = sum_t g_t dalpha_t/dx + g_t A_{t+-1} dbeta_t/dx +
    (d boundary) dcarry/dx for every input x (rewards, values, bootstraps, gamma, lambda, seed),
    which is how the backward pass reuses the scan and then works elementwise."""
    for T in range(1, 4):
        if name == "gae":
            data = gae.window_data(T)
            alpha, beta, boundary = gae.coefficients(T, data)
        elif name == "lambda_returns":
            data = lambda_returns.window_data(T, caller_gives_both=False)
            alpha, beta, boundary = lambda_returns.coefficients(T, data)
        else:
            data = eligibility_traces.window_data(T)
            alpha, beta, boundary = eligibility_traces.coefficients(T, data)
        reverse = name != "eligibility_traces"
        u = list(window("u", range(T)).values())
        if reverse:
            A, g = backward(alpha, beta, boundary), forward(u, [0, *beta[:-1]], 0)
            neighbour, d_boundary = [*A[1:], boundary], beta[-1] * g[-1]
        else:
            A, g = forward(alpha, beta, boundary), backward(u, [*beta[1:], 0], 0)
            neighbour, d_boundary = [boundary, *A[:-1]], beta[0] * g[0]
        loss = sum(w * a for w, a in zip(u, A, strict=True))
        # every floating input; flags stay symbolic but are not differentiated
        floats = [seq for key, seq in data.items() if key not in ("tau", "kappa", "d")]
        inputs = {s for seq in floats if isinstance(seq, dict) for s in seq.values()
                  if isinstance(s, sp.Symbol)} | {gamma, lam} | sp.sympify(boundary).free_symbols
        for x in inputs:
            rule = sum(g[s] * (sp.diff(alpha[s], x) + neighbour[s] * sp.diff(beta[s], x))
                       for s in range(T)) + d_boundary * sp.diff(boundary, x)
            if not is_zero(sp.diff(loss, x) - rule):
                return False
    return True


IDENTITIES = [
    Identity("adjoint.backward_scan", partial(_scan_adjoint, True),
             "g = forward scan of u, beta_{t-1}; dalpha = g, dbeta = g A_{t+1}, dcarry; T <= 6"),
    Identity("adjoint.forward_scan", partial(_scan_adjoint, False),
             "g = backward scan of u, beta_{t+1}; dalpha = g, dbeta = g A_{t-1}, dseed; T <= 6"),
    Identity("adjoint.backward_scan_tangent", partial(_scan_tangent, True),
             "forward mode: dA = backward scan of dalpha + dbeta A_{t+1}, same beta; T <= 6"),
    Identity("adjoint.forward_scan_tangent", partial(_scan_tangent, False),
             "forward mode: dA = forward scan of dalpha + dbeta A_{t-1}, same beta; T <= 6"),
    *(Identity(f"adjoint.chain[{name}]", partial(_chain, name),
               "input gradients = the scan adjoint chained through the coefficients, T <= 3")
      for name in ("gae", "lambda_returns", "eligibility_traces")),
]
