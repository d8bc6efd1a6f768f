"""The peers' loops, written as they write them, equal our recurrences under the mappings of
docs/conventions.md: PufferLib's advantage is V-trace with lambda over steps shifted one slot;
Brax's PPO advantage is V-trace with lambda, ratios of one and every truncation moved one step
earlier, the truncated steps then set; rlax's general off-policy returns (Retrace, Tree-backup,
Q(lambda)) are Retrace's recurrence read one step on; CleanRL's first-step flags are GAE's
flags moved one step; SB3's reward fold at time limits is our truncation's bootstrap; EnvPool's
asynchronous GAE is one GAE row over the slots sorted by env. The mappings, not the
estimators, are what is proved here."""
from __future__ import annotations

import itertools
from functools import partial

import sympy as sp

from proofs import gae, retrace, vtrace
from proofs.core import (
    LENGTHS,
    Identity,
    all_equal,
    flag_patterns,
    gamma,
    lam,
    specialise,
    window,
)

BOOT = sp.Symbol("B")  # the value past the window (Brax's bootstrap_value, CleanRL's next_value)


def puff_loop(v, r, d, rho, c, H: int) -> list:
    """PufferLib 3.0's puff_advantage_row: rewards and dones of step t read at t + 1, rho and c
    the clipped importance weights; the last column is never written (left out here)."""
    out, last = [None] * (H - 1), sp.Integer(0)
    for s in range(H - 2, -1, -1):
        live = 1 - d[s + 1]
        delta = r[s + 1] + gamma * v[s + 1] * live - v[s]
        last = rho[s] * delta + gamma * lam * c[s] * last * live
        out[s] = last
    return out


def _pufferlib(H: int) -> bool:
    """Ours: V-trace over H - 1 steps, r'_t = r_{t+1}, terminated'_t = d_{t+1}, traces lambda
    c_t, values[H-1] as the window's value; vs - V is PufferLib's advantage, flags symbolic."""
    v, r, d, rho, c = (window(name, range(H)) for name in ("v", "r", "d", "rho", "c"))
    T = H - 1
    data = {"r": {s: r[s + 1] for s in range(T)}, "V": {s: v[s] for s in range(H)},
            "b": {s: sp.Integer(0) for s in range(T - 1)} | {T - 1: v[H - 1]},
            "tau": {s: d[s + 1] for s in range(T)}, "kappa": dict.fromkeys(range(T), 0),
            "rho": {s: rho[s] for s in range(T)}, "c": {s: lam * c[s] for s in range(T)}}
    ours = vtrace.targets_and_advantages(data)[:T]
    return all_equal([ours[s] - v[s] for s in range(T)], puff_loop(v, r, d, rho, c, H))


def brax_loop(data: dict, T: int) -> list:
    """Brax's compute_gae: TD errors masked at truncations and the trace cut there; the
    advantage bootstraps from the next target vs_{t+1} (the bootstrap value at T - 1)."""
    r, v, term, trunc = (data[name] for name in ("r", "v", "term", "trunc"))
    keep = [1 - trunc[s] for s in range(T)]
    v_next = [*[v[s + 1] for s in range(T - 1)], BOOT]
    acc, diff = sp.Integer(0), [None] * T
    for s in range(T - 1, -1, -1):
        delta = (r[s] + gamma * (1 - term[s]) * v_next[s] - v[s]) * keep[s]
        acc = delta + gamma * (1 - term[s]) * keep[s] * lam * acc
        diff[s] = acc
    vs = [diff[s] + v[s] for s in range(T)]
    vs_next = [*vs[1:], BOOT]
    return vs + [(r[s] + gamma * (1 - term[s]) * vs_next[s] - v[s]) * keep[s] for s in range(T)]


def brax_by_vtrace(data: dict, T: int) -> list:
    """paper_repro.brax_compat: V-trace, rho = 1, c = lambda, truncation t + 1 read at t with
    b_t = v_{t+1} (the bootstrap value at T - 1), then vs = V and advantage 0 where truncated."""
    r, v, term, trunc = (data[name] for name in ("r", "v", "term", "trunc"))
    next_values = {**{s: v[s + 1] for s in range(T - 1)}, T - 1: BOOT}
    ours = vtrace.targets_and_advantages({
        "r": r, "V": {**{s: v[s] for s in range(T)}, T: BOOT}, "b": next_values, "tau": term,
        "kappa": {**{s: trunc[s + 1] for s in range(T - 1)}, T - 1: 0},
        "rho": dict.fromkeys(range(T), 1), "c": dict.fromkeys(range(T), lam)})
    cut = [trunc[s] for s in range(T)]
    return ([ours[s] * (1 - cut[s]) + v[s] * cut[s] for s in range(T)]
            + [ours[T + s] * (1 - cut[s]) for s in range(T)])


def _brax(T: int) -> bool:
    """Every (termination, truncation) 0/1 pattern, never both at one step (Brax's)."""
    data = {name: window(name, range(T)) for name in ("r", "v", "term", "trunc")}
    symbolic = brax_by_vtrace(data, T)
    for term, trunc in flag_patterns(T):
        values = {**{data["term"][s]: term[s] for s in range(T)},
                  **{data["trunc"][s]: trunc[s] for s in range(T)}}
        concrete = dict(data, term=dict(enumerate(term)), trunc=dict(enumerate(trunc)))
        if not all_equal(specialise(symbolic, values), brax_loop(concrete, T)):
            return False
    return True


def rlax_returns(r, discount, expect, taken, c, T: int) -> list:
    """rlax's general_off_policy_returns_from_action_values, indexed by the next step: E, the
    taken action's Q and c are those of s_{t+1}; G_{T-1} = r + discount E."""
    out = [None] * T
    out[T - 1] = r[T - 1] + discount[T - 1] * expect[T - 1]
    for s in range(T - 2, -1, -1):
        out[s] = r[s] + discount[s] * (expect[s] - c[s] * taken[s] + c[s] * out[s + 1])
    return out


def _rlax(T: int) -> bool:
    """Ours: Retrace with E_t = rlax's E at t, Q_t = rlax's taken Q at t - 1 (the current
    step's), the trace of the edge t -> t+1 rlax's c at t, discount_t = gamma (1 - tau_t); any
    trace (Retrace, Tree-backup, Q(lambda)) is a choice of c."""
    r, disc, expect, taken, c, q0 = (window(name, range(T)) for name in
                                     ("r", "g", "E", "q", "c", "Q"))
    data = {"r": r, "E": expect, "Q": {0: q0[0], **{s: taken[s - 1] for s in range(1, T)}},
            # c_{t+1} weights the edge t -> t+1; rlax's c_t is that of s_{t+1}
            "c": {0: sp.Integer(0), **{s: c[s - 1] for s in range(1, T)}, T: sp.Integer(0)},
            "rho": dict.fromkeys(range(T), 1), "tau": {s: 1 - disc[s] / gamma for s in range(T)},
            "kappa": dict.fromkeys(range(T), 0)}
    ours = retrace.targets_and_advantages(data)[:T]
    return all_equal(ours, rlax_returns(r, disc, expect, taken, c, T))


def cleanrl_loop(r, v, dones, next_done, T: int) -> list:
    """CleanRL's ppo.py: dones[t] flags the *first* step of an episode; nextnonterminal comes
    from the following step's flag (next_done after the last), next_value past the window."""
    out, last = [None] * T, sp.Integer(0)
    for s in range(T - 1, -1, -1):
        live = 1 - (next_done if s == T - 1 else dones[s + 1])
        following = BOOT if s == T - 1 else v[s + 1]
        last = r[s] + gamma * following * live - v[s] + gamma * lam * live * last
        out[s] = last
    return out


def _cleanrl(T: int) -> bool:
    """Ours: GAE with terminated_t = dones[t+1] (next_done at T - 1), next_value the last value."""
    r, v, dones = (window(name, range(T)) for name in ("r", "v", "d"))
    next_done = sp.Symbol("d_next")
    tau = {**{s: dones[s + 1] for s in range(T - 1)}, T - 1: next_done}
    data = {"r": r, "V": {**v, T: BOOT}, "b": {**dict.fromkeys(range(T - 1), 0), T - 1: BOOT},
            "tau": tau, "kappa": dict.fromkeys(range(T), 0)}
    return all_equal(gae.advantages(data), cleanrl_loop(r, v, dones, next_done, T))


def _sb3_time_limit(T: int) -> bool:
    """SB3's fold: a time-limited step's reward becomes r + gamma V(terminal obs) and the step
    is then terminal. Ours keeps the reward and reads V(terminal obs) as the truncation's
    bootstrap. Equal on every termination/truncation pattern (exclusive)."""
    data = gae.window_data(T)
    ours = gae.advantages(data)
    for term, trunc in flag_patterns(T):
        values = {**{data["tau"][s]: term[s] for s in range(T)},
                  **{data["kappa"][s]: trunc[s] for s in range(T)}}
        folded = dict(data, r={s: data["r"][s] + gamma * trunc[s] * data["b"][s]
                               for s in range(T)},
                      tau={s: max(term[s], trunc[s]) for s in range(T)},
                      kappa=dict.fromkeys(range(T), 0))
        if not all_equal(specialise(ours, values), gae.advantages(folded)):
            return False
    return True


def envpool_loop(r, v, d, ids, T: int, B: int) -> list:
    """EnvPool's async GAE: walk the slots backwards with each env's next value and advantage
    (none after its last slot in the buffer)."""
    adv, next_value, next_adv = {}, {}, {}
    for s in range(T - 1, -1, -1):
        for j in range(B):
            env, live = ids[s][j], 1 - d[s, j]
            adv[s, j] = (r[s, j] - v[s, j] + gamma * live * next_value.get(env, 0)
                         + gamma * lam * live * next_adv.get(env, 0))
            next_value[env], next_adv[env] = v[s, j], adv[s, j]
    return [adv[s, j] for s in range(T) for j in range(B)]


def envpool_by_gae(r, v, d, ids, T: int, B: int) -> list:
    """paper_repro.envpool_compat: slots stably sorted by env (slot order within an env), one
    row of GAE whose runs end at each env's last slot (terminal there), results back in place."""
    slots = sorted(((s, j) for s in range(T) for j in range(B)), key=lambda x: ids[x[0]][x[1]])
    n = len(slots)
    last = [k == n - 1 or ids[slots[k][0]][slots[k][1]] != ids[slots[k + 1][0]][slots[k + 1][1]]
            for k in range(n)]
    row = {"r": {k: r[x] for k, x in enumerate(slots)},
           "V": {**{k: v[x] for k, x in enumerate(slots)}, n: sp.Integer(0)},
           "b": dict.fromkeys(range(n), 0), "kappa": dict.fromkeys(range(n), 0),
           "tau": {k: 1 if last[k] else d[x] for k, x in enumerate(slots)}}
    adv = dict(zip(slots, gae.advantages(row), strict=True))
    return [adv[s, j] for s in range(T) for j in range(B)]


def _envpool(T: int, B: int, envs: int) -> bool:
    """Every assignment of distinct envs to each row's B slots; dones symbolic."""
    r, v, d = ({(s, j): sp.Symbol(f"{name}_{s}_{j}") for s in range(T) for j in range(B)}
               for name in ("r", "v", "d"))
    rows = list(itertools.permutations(range(envs), B))
    for ids in itertools.product(rows, repeat=T):
        if not all_equal(envpool_by_gae(r, v, d, ids, T, B), envpool_loop(r, v, d, ids, T, B)):
            return False
    return True


IDENTITIES = [
    *(Identity(f"peers.pufferlib[H={H}]", partial(_pufferlib, H),
               "PufferLib's advantage = V-trace with lambda one slot on, flags symbolic")
      for H in range(2, 8)),
    *(Identity(f"peers.brax[T={T}]", partial(_brax, T),
               f"Brax's (vs, advantages) = V-trace, truncations one step earlier, all 3^{T} "
               "patterns") for T in LENGTHS),
    *(Identity(f"peers.rlax_off_policy[T={T}]", partial(_rlax, T),
               "rlax's off-policy returns = Retrace read one step on, per-step discounts")
      for T in LENGTHS),
    *(Identity(f"peers.cleanrl[T={T}]", partial(_cleanrl, T),
               "CleanRL's first-step flags = GAE's flags one step on, flags symbolic")
      for T in LENGTHS),
    *(Identity(f"peers.envpool_async[T={T},B={B},envs={n}]", partial(_envpool, T, B, n),
               "EnvPool's async GAE = sort by env, one GAE row, scatter back; all env "
               "assignments") for T, B, n in ((2, 2, 3), (3, 2, 3), (4, 1, 2), (2, 3, 4))),
    *(Identity(f"peers.sb3_time_limit[T={T}]", partial(_sb3_time_limit, T),
               "SB3's reward fold at time limits = our truncation bootstrap, all patterns")
      for T in LENGTHS),
]
