"""docs/rollouts.md's recipes, run as written (their code blocks are executed here), on a
simulated vector environment in Gymnasium's two autoreset modes: every real transition's
advantage equals GAE computed episode by episode from the true next states, in float64."""
import math
import re

import pytest
import torch
from conftest import TOL, assert_close

from paper_repro.paths import ROOT

GAMMA, LAMBDA = 0.97, 0.9


def recipes() -> dict:
    """The functions the doc's code blocks define."""
    text = (ROOT / "docs" / "rollouts.md").read_text()
    namespace = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(block, namespace)
    return namespace


def value(obs):
    return math.sin(0.37 * obs)


class VectorEnv:
    """N chains of episodes, each ending by termination or truncation after 1-6 steps;
    observations are unique numbers, rewards drawn per real step. ``mode``: Gymnasium's
    autoreset, "same_step" (the reset observation at the end, the last one in ``final``) or
    "next_step" (the last observation at the end, the reset one a step later with reward 0)."""

    def __init__(self, n, mode, seed):
        self.n, self.mode = n, mode
        self.gen = torch.Generator().manual_seed(seed)
        self.episode, self.step_in, self.pending = [0] * n, [0] * n, [False] * n
        self.lengths, self.ends = {}, {}

    def _episode(self, env, e):
        if (env, e) not in self.lengths:
            self.lengths[env, e] = int(torch.randint(1, 7, (), generator=self.gen))
            self.ends[env, e] = "trunc" if torch.rand((), generator=self.gen) < 0.5 else "term"
        return self.lengths[env, e], self.ends[env, e]

    def obs(self, env, e, k):
        return 1000.0 * env + 10.0 * e + k

    def reset(self):
        return [self.obs(i, 0, 0) for i in range(self.n)]

    def step(self):
        """Per env: (returned observation, reward, terminated, truncated, final observation,
        the real transition (s, r, s', terminated, truncated) or None for a reset step)."""
        out = []
        for i in range(self.n):
            e, k = self.episode[i], self.step_in[i]
            if self.pending[i]:  # next-step autoreset: this step only resets
                self.episode[i], self.step_in[i], self.pending[i] = e + 1, 0, False
                out.append((self.obs(i, e + 1, 0), 0.0, False, False, None, None))
                continue
            length, end = self._episode(i, e)
            s, r = self.obs(i, e, k), float(torch.randn((), generator=self.gen))
            nxt = self.obs(i, e, k + 1)
            if k + 1 < length:
                self.step_in[i] = k + 1
                out.append((nxt, r, False, False, None, (s, r, nxt, False, False)))
                continue
            term, trunc = end == "term", end == "trunc"
            if self.mode == "same_step":
                self.episode[i], self.step_in[i] = e + 1, 0
                out.append((self.obs(i, e + 1, 0), r, term, trunc, nxt, (s, r, nxt, term, trunc)))
            else:
                self.pending[i] = True
                out.append((nxt, r, term, trunc, None, (s, r, nxt, term, trunc)))
        return out


def rollout(mode, T, N, seed, env=None, obs=None):
    """T steps of ``env`` (a fresh one from ``seed`` by default) from ``obs``; the buffers, the
    value after the last step, the real transitions, and the env and observation to go on."""
    if env is None:
        env = VectorEnv(N, mode, seed)
        obs = env.reset()
    buf = {k: torch.zeros(T, N, dtype=torch.float64) for k in ("r", "v", "final")}
    term, trunc = torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.bool)
    real = {}  # (t, env) -> (s, r, s', terminated, truncated)
    for t in range(T):
        buf["v"][t] = torch.tensor([value(o) for o in obs], dtype=torch.float64)
        results = env.step()
        for i, (_, r, te, tr, final, transition) in enumerate(results):
            buf["r"][t, i], term[t, i], trunc[t, i] = r, te, tr
            if final is not None:
                buf["final"][t, i] = value(final)
            if transition is not None:
                real[t, i] = transition
        obs = [x[0] for x in results]
    next_value = torch.tensor([value(o) for o in obs], dtype=torch.float64)
    return buf, term, trunc, next_value, real, (env, obs)


def true_gae(real, T, N):
    """GAE over each env's real transitions, from the true next states: the trace stops at an
    episode end and at the rollout's last real transition."""
    want = {}
    for i in range(N):
        acc = 0.0
        for t in reversed([t for t in range(T) if (t, i) in real]):
            s, r, nxt, te, tr = real[t, i]
            later = acc if not (te or tr) else 0.0
            acc = r + GAMMA * (0.0 if te else value(nxt)) - value(s) + GAMMA * LAMBDA * later
            want[t, i] = acc
    return want


def compare(got, want):
    slots = sorted(want)
    got_real = torch.stack([got[t, i].double() for t, i in slots])
    assert_close("advantages", got_real, torch.tensor([want[s] for s in slots]),
                 TOL[torch.float32])


@pytest.mark.parametrize("T, N, seed", [(40, 5, 0), (7, 3, 1), (1, 4, 2)])
def test_same_step_recipe(T, N, seed):
    buf, term, trunc, next_value, real, _ = rollout("same_step", T, N, seed)
    assert len(real) == T * N  # every slot is a transition
    got = recipes()["same_step_advantages"](
        buf["r"].float(), buf["v"].float(), term, trunc, buf["final"].float(),
        next_value.float(), GAMMA, LAMBDA)
    compare(got, true_gae(real, T, N))


@pytest.mark.parametrize("T, N, seed", [(40, 5, 3), (7, 3, 4), (1, 4, 5)])
def test_next_step_recipe(T, N, seed):
    buf, term, trunc, next_value, real, _ = rollout("next_step", T, N, seed)
    got, mask = recipes()["next_step_advantages"](
        buf["r"].float(), buf["v"].float(), term, trunc, next_value.float(), GAMMA, LAMBDA)
    assert {(t, i) for t in range(T) for i in range(N) if mask[t, i]} == set(real)
    compare(got, true_gae(real, T, N))


def test_the_recipes_need_their_bootstrap():
    """The check can fail: the same-step recipe without the final observations' values (zeros)
    is off at truncations."""
    buf, term, trunc, next_value, real, _ = rollout("same_step", 40, 5, 0)
    assert trunc[:-1].any()
    got = recipes()["same_step_advantages"](
        buf["r"].float(), buf["v"].float(), term, trunc, torch.zeros(40, 5), next_value.float(),
        GAMMA, LAMBDA)
    with pytest.raises(AssertionError):
        compare(got, true_gae(real, 40, 5))


def test_next_step_recipe_across_rollouts():
    """Consecutive rollouts of one env: a rollout that ends on an episode end makes the next
    one's first slot a reset step, which previous_ended marks."""
    next_step = recipes()["next_step_advantages"]
    previous, starts_on_reset, state = None, 0, (None, None)
    for _ in range(6):
        buf, term, trunc, next_value, real, state = rollout("next_step", 5, 6, 7, *state)
        got, mask = next_step(buf["r"].float(), buf["v"].float(), term, trunc,
                              next_value.float(), GAMMA, LAMBDA, previous)
        assert {(t, i) for t in range(5) for i in range(6) if mask[t, i]} == set(real)
        compare(got, true_gae(real, 5, 6))
        starts_on_reset += int((~mask[0]).sum())
        previous = term[-1] | trunc[-1]
    assert starts_on_reset > 0  # the case happened
