"""Boundary theorems (SPEC.md 0.1, 1.x, 6.2): what terminations, truncations, the window end and the
seed of a forward scan may and may not do. Flags not under test stay symbolic, so each statement
holds for every value of them."""
from __future__ import annotations

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
from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    backward,
    gamma,
    is_zero,
    lam,
    matches_on_patterns,
    rationals,
    terminated_truncated,
)


def _retrace_targets(data):
    return retrace.targets_and_advantages(data)[:len(data["r"])]


# name: (module, window data, outputs, what a flagged step itself must ignore,
#        (its one-step bootstrap, that bootstrap's weight))
BACKWARD = {
    "gae": (gae, gae.window_data, gae.advantages,
            {"terminated": ("b",), "truncated": ()}, ("b", lambda d, m: gamma)),
    "vtrace": (vtrace, vtrace.window_data, vtrace.targets_and_advantages,
               {"terminated": ("b",), "truncated": ()}, ("b", lambda d, m: gamma * d["rho"][m])),
    "retrace": (retrace, retrace.window_data, _retrace_targets,
                {"terminated": ("E",), "truncated": ()}, ("E", lambda d, m: gamma)),
    "lambda_returns": (lambda_returns, partial(lambda_returns.window_data, caller_gives_both=False),
                       lambda_returns.returns, {"terminated": ("b", "n"), "truncated": ("n",)},
                       ("b", lambda d, m: gamma)),
    "discounted_returns": (discounted_returns, discounted_returns.window_data,
                           discounted_returns.returns, {"terminated": ("b",), "truncated": ()},
                           ("b", lambda d, m: gamma)),
}
FLAGS = {"terminated": (1, 0), "truncated": (0, 1)}


def flagged_window(name: str, T: int, m: int, kind: str) -> dict:
    data = BACKWARD[name][1](T)
    data["tau"][m], data["kappa"][m] = FLAGS[kind]
    return data


def symbols_after(data: dict, m: int, T: int) -> set:
    """Every symbol of a window step after m (the next episode's rewards, values, flags, ...);
    entries at index T only alias step T-1's window bootstrap."""
    return {s for seq in data.values() if isinstance(seq, dict)
            for idx, s in seq.items() if m < idx < T and isinstance(s, sp.Symbol)}


def _cut(name: str, kind: str):
    """A flag at m makes every output at t <= m independent of all data after m (derivative 0),
    and of what step m itself must ignore (a terminated step's supplied bootstrap)."""
    _, _, outputs, ignored, _ = BACKWARD[name]
    for T in LENGTHS:
        for m in range(T):
            data = flagged_window(name, T, m, kind)
            cut = symbols_after(data, m, T) | {data[x][m] for x in ignored[kind]}
            for j, out in enumerate(outputs(data)):
                if j % T <= m and not all(is_zero(sp.diff(out, s)) for s in cut):
                    return False
    return True


def _bootstrap_once(name: str):
    """A truncation at m enters its supplied bootstrap once, with weight gamma (times rho_m for
    V-trace): dA_t/db_m = weight * prod_{j=t}^{m-1} beta_j, so at t = m exactly the weight."""
    module, _, outputs, _, (boot, weight) = BACKWARD[name]
    for T in LENGTHS:
        for m in range(T):
            data = flagged_window(name, T, m, "truncated")
            _, beta, _ = module.coefficients(T, data)
            outs = outputs(data)
            for s in range(m + 1):
                trace = sp.Mul(*beta[s:m])
                if not is_zero(sp.diff(outs[s], data[boot][m]) - weight(data, m) * trace):
                    return False
    return True


def _monte_carlo_identity(name: str):
    """lambda = 1 (and on-policy rho = c = 1 for V-trace): the advantage is the discounted return
    minus V, the return bootstrapped once from every supplied continuation, all flag patterns."""
    for T in LENGTHS:
        data = gae.window_data(T) if name == "gae" else vtrace.window_data(T)

        def outputs(d, T=T):
            if name == "gae":
                return [a.subs(lam, 1) for a in gae.advantages(d)]
            on_policy = dict(d, rho=dict.fromkeys(range(T), 1), c=dict.fromkeys(range(T), 1))
            return vtrace.targets_and_advantages(on_policy)

        def expected(d, T=T):
            ret = discounted_returns.definition(d)
            minus_v = [g - d["V"][s] for s, g in enumerate(ret)]
            return minus_v if name == "gae" else ret + minus_v

        if not matches_on_patterns(T, outputs, expected, data, terminated_truncated(T)):
            return False
    return True


def _double_count_bug(name: str):
    """The v0.1.2 bug seeded the carry with the window bootstrap B as well: it adds exactly
    (gamma lambda)^(T-t) B (gamma^(T-t) prod c for V-trace), so the buggy form FAILS the
    Monte-Carlo identity whenever B != 0."""
    for T in LENGTHS:
        data = gae.window_data(T) if name == "gae" else vtrace.window_data(T)
        for key in ("tau", "kappa"):
            data[key] = dict.fromkeys(range(T), 0)
        mod = gae if name == "gae" else vtrace
        alpha, beta, carry = mod.coefficients(T, data)
        B = data["b"][T - 1]
        good, bad = backward(alpha, beta, carry), backward(alpha, beta, B)
        if not all(is_zero(bad[s] - good[s] - sp.Mul(*beta[s:]) * B) for s in range(T)):
            return False
        at_one = {lam: 1} if name == "gae" else {**{data["c"][s]: 1 for s in range(T)},
                                                   **{data["rho"][s]: 1 for s in range(T)}}
        monte_carlo = [g - data["V"][s] for s, g in enumerate(discounted_returns.definition(data))]
        if any(is_zero(bad[s].xreplace(at_one) - monte_carlo[s]) for s in range(T)):
            return False
    return True


def _double_count_example():
    """SPEC B-1: r = [1, 2, 3], V = 0, gamma = lambda = 1, last_value 2 gives [8, 7, 5]; the buggy
    seeding gives [10, 9, 7]."""
    data = {"r": dict(enumerate(rationals([1, 2, 3]))), "V": dict.fromkeys(range(3), 0),
            "b": {0: 0, 1: 0, 2: sp.Integer(2)}, "tau": dict.fromkeys(range(3), 0),
            "kappa": dict.fromkeys(range(3), 0)}
    data["V"][3] = data["b"][2]
    alpha, beta, carry = gae.coefficients(3, data)
    ones = {gamma: 1, lam: 1}
    good = [x.subs(ones) for x in backward(alpha, beta, carry)]
    bad = [x.subs(ones) for x in backward(alpha, beta, data["b"][2])]
    return all_equal(good, rationals([8, 7, 5])) and all_equal(bad, rationals([10, 9, 7]))


def _td_lambda_window_split():
    """SPEC 1.4: at a continuing window end G_{T-1} = r + gamma (1-lambda) n_{T-1} +
    gamma lambda b_{T-1}; V(s_T) in both gives r + gamma V(s_T); in only one it is under-weighted
    (the check asserts those two are NOT r + gamma V); a truncated last step uses b once."""
    rr, n_, b_, v = sp.symbols("r n b V_T")
    data = {"r": {0: rr}, "n": {0: n_}, "b": {0: b_}, "tau": {0: 0}, "kappa": {0: 0}}
    (g,) = lambda_returns.returns(data)
    (trunc,) = lambda_returns.returns(dict(data, kappa={0: 1}))
    full = rr + gamma * v
    return (is_zero(g - (rr + gamma * (1 - lam) * n_ + gamma * lam * b_))
            and is_zero(g.subs({n_: v, b_: v}) - full)
            and not is_zero(g.subs({n_: v, b_: 0}) - full)
            and not is_zero(g.subs({n_: 0, b_: v}) - full)
            and is_zero(trunc - (rr + gamma * b_)))


def _forward_seed(name: str):
    """Seeds: the trace seed reaches z_0 decayed once by gamma lambda whatever d_0 is, and z_t
    with weight (gamma lambda)^(t+1) prod_{j<t} (1 - d_j); the ends_at prefix sum passes the seed to
    C_0 always, starts_at drops it when d_0 = 1 (weight prod_{j<=t} (1 - d_j))."""
    for T in LENGTHS:
        if name == "eligibility":
            data = eligibility_traces.window_data(T)
            outs, seed = eligibility_traces.traces(data), eligibility_traces.SEED
            first = data["g"][0]
            weight = [(gamma * lam) ** (s + 1) * sp.Mul(*[1 - data["d"][j] for j in range(s)])
                      for s in range(T)]
            at_zero = [first + gamma * lam * seed] * 2
        else:
            boundary = name.split(":")[1]
            data = prefix_sum.window_data(T)
            outs, seed, first = prefix_sum.sums(data, boundary), prefix_sum.SEED, data["x"][0]
            upto = (lambda s: range(s)) if boundary == "ends_at" else (lambda s: range(s + 1))
            weight = [sp.Mul(*[1 - data["d"][j] for j in upto(s)]) for s in range(T)]
            at_zero = [first + seed, first + seed * int(boundary == "ends_at")]
        d0 = data["d"][0]
        if not (all(is_zero(sp.diff(o, seed) - w) for o, w in zip(outs, weight, strict=True))
                and is_zero(outs[0].subs(d0, 0) - at_zero[0])
                and is_zero(outs[0].subs(d0, 1) - at_zero[1])):
            return False
    return True


def _forward_cut(name: str):
    """A boundary cuts a forward scan: with d_m = 1, outputs after m (ends_at, traces) or from m
    on (starts_at) do not depend on any input before the boundary, nor on the seed."""
    for T in LENGTHS:
        for m in range(T):
            if name == "eligibility":
                data = eligibility_traces.window_data(T)
                data["d"][m] = 1
                outs, inputs, first_free = eligibility_traces.traces(data), data["g"], m + 1
            else:
                boundary = name.split(":")[1]
                data = prefix_sum.window_data(T)
                data["d"][m] = 1
                outs, inputs = prefix_sum.sums(data, boundary), data["x"]
                first_free = m + 1 if boundary == "ends_at" else m
            before = [inputs[j] for j in range(first_free)] + [data["seed"]]
            before += [data["d"][j] for j in range(m) if isinstance(data["d"][j], sp.Symbol)]
            for s in range(first_free, T):
                if not all(is_zero(sp.diff(outs[s], v)) for v in before):
                    return False
    return True


def _prefix_conventions():
    """The two conventions are one scan with re-indexed flags: starts_at(x, d, seed) =
    ends_at(x, (d_1, ..., d_{T-1}, anything), (1 - d_0) seed), and ends_at(x, d, seed) =
    starts_at(x, (0, d_0, ..., d_{T-2}), seed)."""
    anything = sp.Symbol("d_any")
    for T in LENGTHS:
        data = prefix_sum.window_data(T)
        d, seed = data["d"], data["seed"]
        shifted_left = {**{s: d[s + 1] for s in range(T - 1)}, T - 1: anything, -1: 0}
        shifted_right = {**{s: d[s - 1] for s in range(1, T)}, 0: 0, -1: 0}
        starts = prefix_sum.sums(data, "starts_at")
        ends = prefix_sum.sums(data, "ends_at")
        via_ends = prefix_sum.sums(dict(data, d=shifted_left, seed=(1 - d[0]) * seed), "ends_at")
        via_starts = prefix_sum.sums(dict(data, d=shifted_right), "starts_at")
        if not (all_equal(starts, via_ends) and all_equal(ends, via_starts)):
            return False
    return True


def _retrace_advantage_quirks():
    """The paper's Retrace advantage (kept for parity, SPEC 1.3): at t = T-1 it has no bootstrap,
    A = rho (r - Q); at a truncated step m < T-1 it reads Q_ret_{m+1} of the next episode, so
    its derivative in r_{m+1} is NOT zero."""
    for T in range(2, 7):
        data = retrace.window_data(T)
        for key in ("tau", "kappa"):
            data[key] = dict.fromkeys(range(T), 0)
        last = retrace.targets_and_advantages(data)[-1]
        if not is_zero(last - data["rho"][T - 1] * (data["r"][T - 1] - data["Q"][T - 1])):
            return False
        for m in range(T - 1):
            data["kappa"] = {s: int(s == m) for s in range(T)}
            adv = retrace.targets_and_advantages(data)[T + m]
            if is_zero(sp.diff(adv, data["r"][m + 1])):
                return False
    return True


def _gae_lambda_zero():
    """lambda = 0: GAE is the one-step TD error alpha_t."""
    for T in LENGTHS:
        data = gae.window_data(T)
        alpha, _, _ = gae.coefficients(T, data)
        if not all_equal([a.subs(lam, 0) for a in gae.advantages(data)], alpha):
            return False
    return True


IDENTITIES = [
    *(Identity(f"boundary.cut[{name},{kind}]", partial(_cut, name, kind),
               f"a {kind} step blocks everything after it (and its own ignored inputs), T <= 6")
      for name in BACKWARD for kind in FLAGS),
    *(Identity(f"boundary.truncation_bootstrap_once[{name}]", partial(_bootstrap_once, name),
               "a truncation's bootstrap enters once with weight gamma") for name in BACKWARD),
    Identity("boundary.window_end.monte_carlo[gae]", partial(_monte_carlo_identity, "gae"),
             "GAE(lambda=1) = discounted return - V, all flag patterns, T <= 6"),
    Identity("boundary.window_end.monte_carlo[vtrace]", partial(_monte_carlo_identity, "vtrace"),
             "on-policy V-trace: vs = G, advantage = G - V, all flag patterns, T <= 6"),
    Identity("boundary.window_end.double_count_bug_fails[gae]", partial(_double_count_bug, "gae"),
             "seeding A_T with B as well adds (gamma lambda)^(T-t) B and breaks Monte Carlo"),
    Identity("boundary.window_end.double_count_bug_fails[vtrace]",
             partial(_double_count_bug, "vtrace"), "the same bug class in V-trace"),
    Identity("boundary.window_end.double_count_example", _double_count_example,
             "[8, 7, 5], and [10, 9, 7] under the bug"),
    Identity("boundary.td_lambda_window_split", _td_lambda_window_split,
             "V(s_T) must be in next_values[-1] and bootstrap_values[-1]"),
    Identity("boundary.seed[eligibility]", partial(_forward_seed, "eligibility"),
             "z_0 = g_0 + gamma lambda seed; seed weight (gamma lambda)^(t+1) until a done"),
    Identity("boundary.seed[prefix:ends_at]", partial(_forward_seed, "prefix:ends_at"),
             "ends_at: the seed always reaches C_0"),
    Identity("boundary.seed[prefix:starts_at]", partial(_forward_seed, "prefix:starts_at"),
             "starts_at: the seed is dropped when d_0 = 1"),
    Identity("boundary.forward_cut[eligibility]", partial(_forward_cut, "eligibility"),
             "nothing before an episode boundary reaches a trace after it"),
    Identity("boundary.forward_cut[prefix:ends_at]", partial(_forward_cut, "prefix:ends_at"),
             "nothing before an episode boundary reaches a sum after it"),
    Identity("boundary.forward_cut[prefix:starts_at]", partial(_forward_cut, "prefix:starts_at"),
             "nothing before a segment start reaches the segment"),
    Identity("boundary.prefix_conventions", _prefix_conventions,
             "starts_at and ends_at are the same scan with flags shifted by one step"),
    Identity("boundary.retrace_advantage_quirks", _retrace_advantage_quirks,
             "paper's Retrace advantage: no bootstrap at T-1, next episode read at a truncation"),
    Identity("boundary.gae_lambda_zero", _gae_lambda_zero, "lambda = 0: A_t = delta_t"),
]
