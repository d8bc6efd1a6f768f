"""The rollout buffers of CleanRL's and Stable-Baselines3's PPO, called as docs/conventions.md
says: both are time-major ``[T, N]`` and flag the *first* step of an episode (CleanRL's
``dones[t]``, SB3's ``episode_starts[t]``), so ours takes the flags one step later, the
collector's last flags at T-1. The two GAE loops are written here from their update rules, in
float64."""
import torch
from conftest import TOL, assert_close, device_of

import paper_repro as P

GAMMA, LAMBDA = 0.99, 0.95


def rollout(T, N, seed, device):
    """Time-major rewards and values, the next-observation value, episode ends of which a third
    are truncations (time limits), and the value of each truncated episode's last observation."""
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    next_value = torch.randn(N, generator=g)
    ended = torch.rand(T, N, generator=g) < 0.08
    truncated = ended & (torch.rand(T, N, generator=g) < 1 / 3)
    terminal_value = torch.randn(T, N, generator=g) * truncated
    return [x.to(device) for x in (r, v, next_value, ended, truncated, terminal_value)]


def first_step_flags(ended):
    """What the buffers store: step t+1 starts an episode where step t ended it; row 0 holds
    the flag the previous rollout left (none here), the last step's flag is the collector's."""
    starts = torch.zeros_like(ended)
    starts[1:] = ended[:-1]
    return starts, ended[-1]


def cleanrl_gae(rewards, values, dones, next_value, next_done):
    """CleanRL's ppo.py: nextnonterminal from the flag of the following observation."""
    r, v, d = rewards.double().cpu(), values.double().cpu(), dones.double().cpu()
    nv, nd = next_value.double().cpu(), next_done.double().cpu()
    out, last = torch.zeros_like(r), torch.zeros_like(nv)
    for t in reversed(range(r.shape[0])):
        nonterminal = 1 - (nd if t == r.shape[0] - 1 else d[t + 1])
        following = nv if t == r.shape[0] - 1 else v[t + 1]
        delta = r[t] + GAMMA * following * nonterminal - v[t]
        last = delta + GAMMA * LAMBDA * nonterminal * last
        out[t] = last
    return out


def sb3_gae(rewards, values, episode_starts, last_values, dones):
    """SB3's RolloutBuffer: the same rule on episode starts, with time-limit truncations already
    folded into the rewards by the collector (r + gamma V(terminal observation))."""
    return cleanrl_gae(rewards, values, episode_starts, last_values, dones)


def test_cleanrl_buffer(backend):
    """CleanRL treats every episode end as terminal: ours with the flags moved one step."""
    r, v, next_value, ended, _, _ = rollout(64, 5, 0, device_of(backend))
    dones, next_done = first_step_flags(ended)
    want = cleanrl_gae(r, v, dones.float(), next_value, next_done.float())
    terminateds = torch.cat([dones[1:], next_done[None]])
    got = P.compute_gae(r, v, terminateds, None, GAMMA, LAMBDA, last_value=next_value,
                        time_dim=0)
    assert_close("cleanrl", got, want, TOL[torch.float32])


def test_sb3_buffer_with_time_limits(backend):
    """SB3 folds gamma V(terminal observation) into a truncated step's reward; ours reads it
    as that step's bootstrap value, the rewards left as the environment gave them."""
    r, v, next_value, ended, truncated, terminal_value = rollout(80, 4, 1, device_of(backend))
    starts, last_dones = first_step_flags(ended)
    folded = r + GAMMA * terminal_value
    want = sb3_gae(folded, v, starts.float(), next_value, last_dones.float())
    terminateds = ended & ~truncated
    boot = terminal_value.clone()
    boot[-1] = torch.where(truncated[-1], terminal_value[-1], next_value)
    got = P.compute_gae(r, v, terminateds, truncated, GAMMA, LAMBDA, boot, time_dim=0)
    assert_close("sb3", got, want, TOL[torch.float32])
    # the fold and the flag are one reading: dropping the bootstrap loses exactly the fold
    unbooted = P.compute_gae(r, v, terminateds, truncated, GAMMA, LAMBDA, None,
                             last_value=next_value, time_dim=0)
    assert (unbooted - got).abs().max() > 1e-2
