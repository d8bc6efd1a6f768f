"""Shared pieces of the proofs: the Identity record, exact zero tests, the two sequential
recurrences of SPEC.md section 0, symbolic windows and the 0/1 flag patterns they are checked on."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import sympy as sp
from sympy.simplify.simplify import product_mul

LENGTHS = range(1, 7)
# t is the general step in every ALPHA/BETA expression; k, i, e are summation / episode-end indices
t, k, i, e = sp.symbols("t k i e", integer=True)
gamma, lam = sp.symbols("gamma lambda")


@dataclass(frozen=True)
class Identity:
    """A named statement; `check()` returns True when sympy confirms it exactly."""

    name: str
    check: Callable[[], bool]
    statement: str = ""


def is_zero(expr) -> bool:
    """Exact: an expanded polynomial (rational coefficients) is in its unique normal form, so it
    is zero iff it expands to 0; anything else (sums, min, exp) goes through simplify."""
    expanded = sp.expand(expr)
    if expanded == 0:
        return True
    if expanded.is_polynomial(*expanded.free_symbols) and all(
            c.is_Rational for c in sp.Poly(expanded, *expanded.free_symbols).coeffs()):
        return False
    return sp.simplify(expanded) == 0


def all_zero(exprs: Iterable) -> bool:
    return all(is_zero(x) for x in exprs)


def all_equal(lhs: Sequence, rhs: Sequence) -> bool:
    return len(lhs) == len(rhs) and all_zero(a - b for a, b in zip(lhs, rhs, strict=True))


def backward(alpha: Sequence, beta: Sequence, carry):
    """A_t = alpha_t + beta_t * A_{t+1}, A_T = carry (SPEC Appendix A)."""
    out, acc = [None] * len(alpha), carry
    for s in reversed(range(len(alpha))):
        acc = alpha[s] + beta[s] * acc
        out[s] = acc
    return out


def forward(alpha: Sequence, beta: Sequence, seed):
    """A_t = alpha_t + beta_t * A_{t-1}, A_{-1} = seed (SPEC Appendix A)."""
    out, acc = [], seed
    for a, b in zip(alpha, beta, strict=True):
        acc = a + b * acc
        out.append(acc)
    return out


def window(name: str, indices: Iterable[int]) -> dict[int, sp.Symbol]:
    """Concrete symbols name_k for the steps of a window, keyed by step."""
    return {s: sp.Symbol(f"{name}_{s}") for s in indices}


def instantiate(expr, step: int, data: dict):
    """The general-t expression at a concrete step: x[t+j] is read from data['x'][step+j]."""
    concrete = expr.subs(t, step)
    atoms = concrete.atoms(sp.Indexed)
    return concrete.xreplace({a: data[a.base.label.name][int(a.indices[0])] for a in atoms})


def coefficient_lists(T: int, alpha_expr, beta_expr, data: dict):
    return ([instantiate(alpha_expr, s, data) for s in range(T)],
            [instantiate(beta_expr, s, data) for s in range(T)])


def flag_patterns(T: int):
    """Every (terminated, truncated) 0/1 pattern with the two flags mutually exclusive: 3**T."""
    for codes in itertools.product((0, 1, 2), repeat=T):
        yield tuple(int(c == 1) for c in codes), tuple(int(c == 2) for c in codes)


def done_patterns(T: int):
    return itertools.product((0, 1), repeat=T)


def episode_end(s: int, done: Sequence[int]) -> int:
    """The last step of the episode that contains step s: the first flagged step >= s, else T-1."""
    while s < len(done) - 1 and not done[s]:
        s += 1
    return s


def episode_start(s: int, done: Sequence[int]) -> int:
    """The first step of s's episode under "ends at" flags: one past the last flagged step < s."""
    while s > 0 and not done[s - 1]:
        s -= 1
    return s


def specialise(exprs: Sequence, values: dict):
    return [sp.sympify(x).xreplace(values) for x in exprs]


def peel_first(term, lo, hi):
    """Split sum_{k=lo}^{hi} term into (its k=lo term, sum_{k=lo+1}^{hi} term) and say whether
    sympy confirms the split (it merges adjacent sums)."""
    head, rest = sp.Sum(term, (k, lo, lo)), sp.Sum(term, (k, lo + 1, hi))
    ok = sp.simplify(sp.Sum(term, (k, lo, hi)) - head - rest) == 0
    return ok, head.doit(), rest


def peel_last(term, lo, hi):
    """Split sum_{k=lo}^{hi} term into (its k=hi term, sum_{k=lo}^{hi-1} term), checked by sympy."""
    last, rest = sp.Sum(term, (k, hi, hi)), sp.Sum(term, (k, lo, hi - 1))
    ok = sp.simplify(sp.Sum(term, (k, lo, hi)) - last - rest) == 0
    return ok, last.doit(), rest


def peel_product(factor, lo, hi, last: bool = False):
    """prod_{i=lo}^{hi} factor = factor(lo) * prod_{i=lo+1}^{hi} factor (or peel factor(hi) when
    last): sympy merges the adjacent products back into the full one. Returns
    (ok, the peeled factor, the remaining product)."""
    one = sp.Product(factor, (i, hi, hi) if last else (i, lo, lo))
    rest = sp.Product(factor, (i, lo, hi - 1) if last else (i, lo + 1, hi))
    merged = product_mul(rest, one, method=1) if last else product_mul(one, rest, method=1)
    return merged == sp.Product(factor, (i, lo, hi)), one.doit(), rest


def flag_window(T: int, names=("tau", "kappa")) -> dict[str, dict[int, sp.Symbol]]:
    return {name: window(name, range(T)) for name in names}


def matches_on_patterns(T: int, outputs, definition, data: dict, patterns) -> bool:
    """outputs(data) is built once with symbolic flags, then every 0/1 pattern (a dict of flag
    name -> tuple) is substituted and compared exactly with definition(data with those flags)."""
    symbolic = outputs(data)
    for pattern in patterns:
        values = {data[name][s]: v for name, vals in pattern.items() for s, v in enumerate(vals)}
        concrete = dict(data, **{name: dict(enumerate(vals)) for name, vals in pattern.items()})
        if not all_equal(specialise(symbolic, values), definition(concrete)):
            return False
    return True


def terminated_truncated(T: int):
    return ({"tau": tau, "kappa": kappa} for tau, kappa in flag_patterns(T))


def rationals(values) -> list:
    return [sp.Rational(str(v)) for v in values]
