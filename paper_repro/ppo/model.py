"""Synthetic rollout and the actor-critic network of the PPO experiment (PAPER.md section 4.8)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from paper_repro.ppo.config import ACT_DIM, OBS_DIM, PPOConfig


@dataclass
class Rollout:
    """A synthetic rollout; every tensor is float32 on one device.

    Attributes:
        obs: `[N, T, 60]`, N(0, 1).
        actions: `[N, T, 8]`, N(0, 1).
        old_logp: `[N, T]`, 0.1·N(0, 1) − 5.
        rewards: `[N, T]`, N(0, 1).
        dones: `[N, T]`, Bernoulli(done_prob) as 0/1 floats (terminations).
    """

    obs: torch.Tensor
    actions: torch.Tensor
    old_logp: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor


def make_rollout(cfg: PPOConfig, device: torch.device | str) -> Rollout:
    """Draw the rollout of `cfg` from a CPU generator seeded with `cfg.seed`, then move it.

    Drawing on the CPU makes the data identical on every device.
    """
    g = torch.Generator().manual_seed(cfg.seed)
    n, t = cfg.n_envs, cfg.seq_len

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device)

    return Rollout(
        obs=normal(n, t, OBS_DIM),
        actions=normal(n, t, ACT_DIM),
        old_logp=0.1 * normal(n, t) - 5.0,
        rewards=normal(n, t),
        dones=(torch.rand(n, t, generator=g) < cfg.done_prob).float().to(device),
    )


class ActorCritic(nn.Module):
    """Tanh MLP trunk with a Gaussian actor (state-independent log-std) and a value head.

    Args:
        hidden (tuple[int, int]): `(h1, h2)`; trunk is Linear(60, h1)–Tanh–Linear(h1, h2)–Tanh.
    """

    def __init__(self, hidden: tuple[int, int]):
        super().__init__()
        h1, h2 = hidden
        self.trunk = nn.Sequential(nn.Linear(OBS_DIM, h1), nn.Tanh(), nn.Linear(h1, h2), nn.Tanh())
        self.mean = nn.Linear(h2, ACT_DIM)
        self.log_std = nn.Parameter(torch.zeros(ACT_DIM))
        self.critic = nn.Linear(h2, 1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """`[..., 60]` → `[...]` state values."""
        return self.critic(self.trunk(obs)).squeeze(-1)

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`obs [B, 60]`, `actions [B, 8]` → (log-prob of `actions` `[B]`, value `[B]`)."""
        z = self.trunk(obs)
        mean = self.mean(z)
        # diagonal Gaussian log-density, summed over action dimensions
        var_term = ((actions - mean) * torch.exp(-self.log_std)).pow(2)
        logp = -0.5 * var_term - self.log_std - 0.5 * math.log(2 * math.pi)
        return logp.sum(-1), self.critic(z).squeeze(-1)


def make_agent(cfg: PPOConfig, device: torch.device | str) -> tuple[ActorCritic, torch.optim.Adam]:
    """A network and its Adam optimiser, initialised from `cfg.seed` (identical for every arm)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed + 1)
        net = ActorCritic(cfg.hidden)
    net = net.to(device)
    return net, torch.optim.Adam(net.parameters(), lr=cfg.lr)
