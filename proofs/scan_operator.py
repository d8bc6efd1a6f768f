"""The scan operator (SPEC section 0): pairs (alpha, beta) are affine maps x -> alpha + beta*x;
combining them is composition, which is associative with identity (0, 1), so any bracketing,
any chunking with a carried boundary value, and the chunk-aggregate route all give the
sequential recurrence."""
from __future__ import annotations

import itertools
from functools import partial

import sympy as sp

from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    backward,
    forward,
    i,
    is_zero,
    k,
    peel_last,
    peel_product,
    window,
)

IDENTITY = (sp.Integer(0), sp.Integer(1))
x = sp.Symbol("x")


def combine(p, q):
    """P is applied first (nearer the carry), Q after it:
    (alpha_Q + beta_Q alpha_P, beta_P beta_Q)."""
    return (q[0] + q[1] * p[0], p[1] * q[1])


def apply(pair, carry):
    return pair[0] + pair[1] * carry


def elements(T: int):
    alphas, betas = window("alpha", range(T)), window("beta", range(T))
    return [(alphas[s], betas[s]) for s in range(T)]


def scan(elems, carry):
    """Inclusive scan in the given order, then out = alpha_acc + beta_prod * carry per position."""
    acc, out = IDENTITY, []
    for el in elems:
        acc = combine(acc, el)
        out.append(apply(acc, carry))
    return out


def compositions(T: int):
    """Every split of range(T) into contiguous non-empty chunks (2**(T-1) of them)."""
    for cuts in itertools.product((False, True), repeat=T - 1):
        bounds = [0] + [s + 1 for s, cut in enumerate(cuts) if cut] + [T]
        yield [list(range(a, b)) for a, b in itertools.pairwise(bounds)]


def chunked(elems, carry, chunks, reverse: bool):
    """The engine's tile loop: scan each chunk, apply the carry, pass the chunk's last output on."""
    out = [None] * len(elems)
    for chunk in (reversed(chunks) if reverse else chunks):
        order = list(reversed(chunk)) if reverse else chunk
        values = scan([elems[s] for s in order], carry)
        for s, v in zip(order, values, strict=True):
            out[s] = v
        carry = values[-1]
    return out


def chunk_aggregates(elems, carry, chunks, reverse: bool):
    """Reduce-then-scan: each chunk's total is combined into the carry the next chunk sees."""
    out, walk = [None] * len(elems), list(reversed(chunks)) if reverse else chunks
    prefix = IDENTITY
    for chunk in walk:
        order = list(reversed(chunk)) if reverse else chunk
        incoming = apply(prefix, carry)
        for s, v in zip(order, scan([elems[s] for s in order], incoming), strict=True):
            out[s] = v
        total = IDENTITY
        for s in order:
            total = combine(total, elems[s])
        prefix = combine(prefix, total)
    return out


def bracketings(elems):
    """Every full binary bracketing of the left-to-right combine of elems (Catalan many)."""
    if len(elems) == 1:
        yield elems[0]
        return
    for split in range(1, len(elems)):
        for left in bracketings(elems[:split]):
            for right in bracketings(elems[split:]):
                yield combine(left, right)


def sequential(elems, carry, reverse: bool):
    alpha, beta = [a for a, _ in elems], [b for _, b in elems]
    return backward(alpha, beta, carry) if reverse else forward(alpha, beta, carry)


def _composition():
    p, q = elements(2)
    return is_zero(apply(combine(p, q), x) - apply(q, apply(p, x)))


def _associative():
    a, b, c = elements(3)
    return all_equal(combine(combine(a, b), c), combine(a, combine(b, c)))


def _identity_element():
    (p,) = elements(1)
    return all_equal(combine(IDENTITY, p), p) and all_equal(combine(p, IDENTITY), p)


def _any_bracketing():
    for T in LENGTHS:
        elems = elements(T)
        fold = scan(elems, x)[-1]
        if not all(is_zero(apply(tree, x) - fold) for tree in bracketings(elems)):
            return False
    return True


def _inclusive_scan(reverse: bool):
    for T in LENGTHS:
        elems = elements(T)
        order = list(reversed(range(T))) if reverse else list(range(T))
        by_step = dict(zip(order, scan([elems[s] for s in order], x), strict=True))
        if not all_equal([by_step[s] for s in range(T)], sequential(elems, x, reverse)):
            return False
    return True


def _chunked(engine, reverse: bool):
    for T in LENGTHS:
        elems, want = elements(T), sequential(elements(T), x, reverse)
        for chunks in compositions(T):
            if not all_equal(engine(elems, x, chunks, reverse), want):
                return False
    return True


n = sp.Symbol("n", integer=True, positive=True)
a_f, b_f = sp.Function("alpha"), sp.Function("beta")


def closed_form(m):
    """The inclusive-scan prefix after m elements, by formula:
    (sum_k alpha_k prod_{i=k+1}^{m} beta_i, prod_{i=1}^{m} beta_i)."""
    return (sp.Sum(a_f(k) * sp.Product(b_f(i), (i, k + 1, m)), (k, 1, m)),
            sp.Product(b_f(i), (i, 1, m)))


def _induction_prefix():
    """Closed form at n combined with element n+1 is the closed form at n+1, for every n."""
    s_now, p_now = closed_form(n)
    s_next, p_next = closed_form(n + 1)
    step = combine((s_now, p_now), (a_f(n + 1), b_f(n + 1)))
    # the k = n+1 term has an empty product; every other product ends with the factor beta_{n+1}
    ok_sum, last_term, rest = peel_last(s_next.function, 1, n + 1)
    ok_in, factor, shorter = peel_product(b_f(i), k + 1, n + 1, last=True)
    rest = sp.Sum(rest.function.xreplace({sp.Product(b_f(i), (i, k + 1, n + 1)): shorter * factor}),
                  *rest.limits)
    ok_p, factor_p, shorter_p = peel_product(b_f(i), 1, n + 1, last=True)
    return (ok_sum and ok_in and ok_p and shorter_p == p_now
            and sp.simplify(step[0] - (last_term + sp.simplify(rest))) == 0
            and sp.simplify(step[1] - shorter_p * factor_p) == 0)


def _induction_carry():
    """With the carry x applied, one more element extends the recurrence by one step:
    if out_m = S_m + P_m x then out_{m+1} = alpha_{m+1} + beta_{m+1} out_m, so each chunk, started
    from the exact boundary value, reproduces the sequential values and hands on an exact carry."""
    s_m, p_m, al, be = sp.symbols("S_m P_m alpha_next beta_next")
    nxt = combine((s_m, p_m), (al, be))
    return is_zero(apply(nxt, x) - (al + be * apply((s_m, p_m), x)))


IDENTITIES = [
    Identity("scan.combine_is_composition", _composition,
             "(alpha_Q + beta_Q alpha_P, beta_P beta_Q) is the map Q after P"),
    Identity("scan.associative", _associative, "combine is associative"),
    Identity("scan.identity_element", _identity_element, "(0, 1) is a two-sided identity"),
    Identity("scan.any_bracketing", _any_bracketing,
             "every bracketing of T <= 6 elements gives the same pair"),
    Identity("scan.inclusive_scan[backward]", partial(_inclusive_scan, True),
             "reversed inclusive scan + carry = backward recurrence, T <= 6"),
    Identity("scan.inclusive_scan[forward]", partial(_inclusive_scan, False),
             "inclusive scan + seed = forward recurrence, T <= 6"),
    Identity("scan.chunked_carry[backward]", partial(_chunked, chunked, True),
             "every chunk split with a carried boundary value, T <= 6"),
    Identity("scan.chunked_carry[forward]", partial(_chunked, chunked, False),
             "every chunk split with a carried boundary value, T <= 6"),
    Identity("scan.chunk_aggregates[backward]", partial(_chunked, chunk_aggregates, True),
             "reduce-then-scan over every chunk split, T <= 6"),
    Identity("scan.chunk_aggregates[forward]", partial(_chunked, chunk_aggregates, False),
             "reduce-then-scan over every chunk split, T <= 6"),
    Identity("scan.induction.prefix_closed_form", _induction_prefix,
             "the scan prefix equals its closed form for every length n"),
    Identity("scan.induction.carry_step", _induction_carry,
             "one more element extends the carried recurrence by one step"),
]
