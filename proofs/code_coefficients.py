"""Tied to the code: paper_repro.coefficients, run on random float64 inputs, must give the
symbolic alpha, beta and carry of proofs/<estimator>.py with the same numbers substituted.

The package computes in float64, so agreement is to a relative 1e-13 (a few hundred rounding
steps); any drift of a coefficient (a dropped factor, a shifted index, a wrong flag) is far
outside it. Every float is turned into the exact rational it stands for before substitution."""
from __future__ import annotations

import importlib
from functools import partial

import sympy as sp

from proofs import (
    discounted_returns,
    eligibility_traces,
    gae,
    lambda_returns,
    prefix_sum,
    retrace,
    vtrace,
)
from proofs.core import Identity, gamma, lam

N, T, ACTIONS = 4, 5, 3
GAMMA, LAMBDA, RHO_BAR, C_BAR = 0.9, 0.8, 1.2, 0.9
RTOL = 1e-13
# each row ends differently: continuing, terminated, truncated, continuing after a truncation
TERMINATED = [[0, 0, 0, 1, 0], [1, 0, 0, 0, 1], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]]
TRUNCATED = [[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 1, 0, 0]]
DONES = [[0, 1, 0, 0, 1], [1, 0, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]]


def package():
    """Looked up on every check, so a patched module is what gets checked."""
    return importlib.import_module("paper_repro.coefficients")


def exact(x) -> sp.Rational:
    return sp.Rational(float(x))


def inputs(seed: int = 0):
    import torch

    gen = torch.Generator().manual_seed(seed)

    def uniform(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64)

    probs = uniform(0.1, 1.0, N, T, ACTIONS)
    return {
        "r": uniform(-2, 2, N, T), "V": uniform(-2, 2, N, T), "b": uniform(-2, 2, N, T),
        "n": uniform(-2, 2, N, T), "last": uniform(-2, 2, N), "seed": uniform(-2, 2, N),
        "lpt": uniform(-1.5, 0, N, T), "lpb": uniform(-1.5, 0, N, T),
        "pi": probs / probs.sum(-1, keepdim=True),
        "pi_next": torch.roll(probs / probs.sum(-1, keepdim=True), 1, dims=1),
        "mu": uniform(0.2, 1.0, N, T), "Q": uniform(-2, 2, N, T),
        "next_q": uniform(-2, 2, N, T, ACTIONS),
        "actions": torch.randint(0, ACTIONS, (N, T), generator=gen),
        "tau": torch.tensor(TERMINATED, dtype=torch.float64),
        "kappa": torch.tensor(TRUNCATED, dtype=torch.float64),
        "d": torch.tensor(DONES, dtype=torch.float64),
    }


def agrees(got, want_rows, reverse: bool) -> bool:
    """want_rows: per row (alpha list, beta list, carry), exact sympy numbers."""
    if bool(got.reverse) is not reverse or tuple(got.alpha.shape) != (N, T):
        return False
    carry = [0.0] * N if got.carry is None else got.carry.tolist()
    for row, (alpha, beta, cy) in enumerate(want_rows):
        pairs = list(zip(got.alpha[row].tolist(), alpha, strict=True))
        pairs += list(zip(got.beta[row].tolist(), beta, strict=True)) + [(carry[row], cy)]
        for value, want in pairs:
            want = float(sp.N(want, 30))
            if abs(value - want) > RTOL * (1 + abs(want)):
                return False
    return True


def substituted(module, data_of_row, window_data=None, **coefficient_kwargs):
    """The module's symbolic coefficients (window symbols), then the row's numbers put in."""
    rows = []
    for row in range(N):
        symbolic = (window_data or module.window_data)(T)
        alpha, beta, carry = module.coefficients(T, symbolic, **coefficient_kwargs)
        values = {gamma: exact(GAMMA), lam: exact(LAMBDA)}
        for name, numbers in data_of_row(row).items():
            if not isinstance(symbolic[name], dict):
                values[symbolic[name]] = numbers
                continue
            for s, sym in symbolic[name].items():
                if isinstance(sym, sp.Symbol) and s in numbers:
                    values[sym] = numbers[s]
        rows.append(([a.xreplace(values) for a in alpha], [b.xreplace(values) for b in beta],
                     sp.sympify(carry).xreplace(values)))
    return rows


def series(tensor, row) -> dict:
    return dict(enumerate(exact(x) for x in tensor[row].tolist()))


def _flags(x, row, truncations: bool):
    kappa = series(x["kappa"], row) if truncations else dict.fromkeys(range(T), 0)
    return {"tau": series(x["tau"], row), "kappa": kappa}


def _boot(x, row, mode: str):
    """What the window's bootstrap entries hold: none, last_value only, or every column."""
    if mode == "none":
        return dict.fromkeys(range(T), 0)
    if mode == "last_value":
        return {**dict.fromkeys(range(T - 1), 0), T - 1: exact(x["last"][row])}
    return series(x["b"], row)


def _gae(truncations: bool, mode: str, bool_flags: bool = False):
    x = inputs()
    flag = (lambda f: f.bool()) if bool_flags else (lambda f: f)
    got = package().gae_coefficients(
        x["r"], x["V"], flag(x["tau"]), flag(x["kappa"]) if truncations else None, GAMMA, LAMBDA,
        bootstrap_values=x["b"] if mode == "all" else None,
        last_value=x["last"] if mode == "last_value" else None)

    def row_data(row):
        return {"r": series(x["r"], row), "V": series(x["V"], row), "b": _boot(x, row, mode),
                **_flags(x, row, truncations)}
    return agrees(got, substituted(gae, row_data), True)


def _vtrace(truncations: bool, mode: str, trace: float = 1.0):
    x = inputs()
    got = package().vtrace_coefficients(
        x["lpt"], x["lpb"], x["V"], x["r"], x["tau"], x["kappa"] if truncations else None, GAMMA,
        RHO_BAR, C_BAR, bootstrap_values=x["b"] if mode == "all" else None,
        last_value=x["last"] if mode == "last_value" else None, lambda_=trace)

    def row_data(row):
        rho, c = vtrace.clipped_ratios([exact(v) for v in x["lpt"][row].tolist()],
                                       [exact(v) for v in x["lpb"][row].tolist()],
                                       exact(RHO_BAR), exact(C_BAR), exact(trace))
        return {"r": series(x["r"], row), "V": series(x["V"], row), "b": _boot(x, row, mode),
                "rho": dict(enumerate(rho)), "c": dict(enumerate(c)), **_flags(x, row, truncations)}
    return agrees(got, substituted(vtrace, row_data), True)


def _retrace(textbook: bool):
    x = inputs()
    got = package().retrace_coefficients(
        x["pi"], x["mu"], x["Q"], x["next_q"], x["actions"], x["r"], x["tau"], x["kappa"], GAMMA,
        LAMBDA, C_BAR, RHO_BAR, **({"next_action_probs_target": x["pi_next"]} if textbook else {}))

    def row_data(row):
        def table(name):
            return [[exact(v) for v in step] for step in x[name][row].tolist()]
        expect, _, c = retrace.primitives(
            table("pi"), [exact(v) for v in x["mu"][row].tolist()], x["actions"][row].tolist(),
            table("next_q"), exact(LAMBDA), exact(C_BAR), exact(RHO_BAR),
            table("pi_next") if textbook else None)
        return {"r": series(x["r"], row), "Q": series(x["Q"], row),
                "E": dict(enumerate(expect)), "c": dict(enumerate(c)), **_flags(x, row, True)}
    return agrees(got, substituted(retrace, row_data), True)


def _returns(module, truncations: bool, with_boot: bool):
    x = inputs()
    boot = x["b"] if with_boot else None
    trunc = x["kappa"] if truncations else None
    if module is discounted_returns:
        got = package().discounted_returns_coefficients(x["r"], x["tau"], trunc, GAMMA, boot)
        window_data = None
    else:
        got = package().lambda_returns_coefficients(x["r"], x["n"], x["tau"], trunc, GAMMA,
                                                    LAMBDA, boot)
        # the API's next_values[-1] is independent of bootstrap_values[-1]
        window_data = partial(lambda_returns.window_data, caller_gives_both=False)

    def row_data(row):
        data = {"r": series(x["r"], row), "b": _boot(x, row, "all" if with_boot else "none"),
                **_flags(x, row, truncations)}
        if module is lambda_returns:
            data["n"] = series(x["n"], row)
        return data
    return agrees(got, substituted(module, row_data, window_data), True)


def _eligibility(with_seed: bool):
    x = inputs()
    got = package().eligibility_traces_coefficients(
        x["r"], x["d"], GAMMA, LAMBDA, x["seed"] if with_seed else None)

    def row_data(row):
        return {"g": series(x["r"], row), "d": series(x["d"], row),
                "seed": exact(x["seed"][row]) if with_seed else sp.Integer(0)}
    return agrees(got, substituted(eligibility_traces, row_data), False)


def _prefix(boundary: str, with_seed: bool):
    x = inputs()
    got = package().prefix_sum_coefficients(x["r"], x["d"], x["seed"] if with_seed else None,
                                            boundary=boundary)

    def row_data(row):
        return {"x": series(x["r"], row), "d": series(x["d"], row),
                "seed": exact(x["seed"][row]) if with_seed else sp.Integer(0)}
    return agrees(got, substituted(prefix_sum, row_data, boundary=boundary), False)


IDENTITIES = [
    Identity("code.gae[plain]", partial(_gae, False, "none"), "no truncations, no bootstrap"),
    Identity("code.gae[last_value]", partial(_gae, False, "last_value"), "window value L"),
    Identity("code.gae[bootstrap_values]", partial(_gae, False, "all"),
             "no truncations: only b_{T-1} is read"),
    Identity("code.gae[truncations]", partial(_gae, True, "all"),
             "b read at truncations and T-1 only (stray entries ignored)"),
    Identity("code.gae[truncations,no_bootstrap]", partial(_gae, True, "none"),
             "truncation with no bootstrap: zero continuation"),
    Identity("code.gae[bool_flags]", partial(_gae, True, "all", True), "bool flags"),
    Identity("code.vtrace[plain]", partial(_vtrace, False, "none"), "clipped rho and c"),
    Identity("code.vtrace[last_value]", partial(_vtrace, False, "last_value"), "window value L"),
    Identity("code.vtrace[bootstrap_values]", partial(_vtrace, False, "all"), "only b_{T-1}"),
    Identity("code.vtrace[truncations]", partial(_vtrace, True, "all"), "strays ignored"),
    Identity("code.vtrace[truncations,last_value]", partial(_vtrace, True, "last_value"),
             "last_value together with truncations"),
    Identity("code.vtrace[lambda]", partial(_vtrace, True, "all", LAMBDA),
             "lambda_ scales the traces c, not rho"),
    Identity("code.retrace[paper_row]", partial(_retrace, False), "same-row expectation"),
    Identity("code.retrace[next_row]", partial(_retrace, True),
             "next_action_probs_target: the textbook expectation"),
    Identity("code.lambda_returns[plain]", partial(_returns, lambda_returns, False, False), ""),
    Identity("code.lambda_returns[bootstrap_values]",
             partial(_returns, lambda_returns, False, True), "carry b_{T-1}, interior b unread"),
    Identity("code.lambda_returns[truncations]", partial(_returns, lambda_returns, True, True),
             "gamma kappa b in alpha, strays unread"),
    Identity("code.lambda_returns[truncations,no_bootstrap]",
             partial(_returns, lambda_returns, True, False), ""),
    Identity("code.discounted_returns[plain]",
             partial(_returns, discounted_returns, False, False), ""),
    Identity("code.discounted_returns[bootstrap_values]",
             partial(_returns, discounted_returns, False, True), "carry b_{T-1}"),
    Identity("code.discounted_returns[truncations]",
             partial(_returns, discounted_returns, True, True), "gamma kappa b in alpha"),
    Identity("code.discounted_returns[truncations,no_bootstrap]",
             partial(_returns, discounted_returns, True, False), ""),
    Identity("code.eligibility_traces[no_seed]", partial(_eligibility, False), ""),
    Identity("code.eligibility_traces[seed]", partial(_eligibility, True), "seed decayed once"),
    *(Identity(f"code.prefix_sum[{boundary},{'seed' if seed else 'no_seed'}]",
               partial(_prefix, boundary, seed), "") for boundary in ("ends_at", "starts_at")
      for seed in (False, True)),
]
