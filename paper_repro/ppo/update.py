"""One PPO update, timed per stage (PAPER.md section 4.8).

Stages: `forward` (value pass over the rollout, minibatch passes), `gae` (advantages and
returns = advantages + values), `perm` (per-epoch shuffle), `gather` (minibatch indexing),
`loss` (clipped policy loss + value loss), `backward`, `optimizer` (Adam step, zero grads).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from paper_repro.ppo.config import ACT_DIM, OBS_DIM, PPOConfig
from paper_repro.ppo.model import ActorCritic, Rollout
from paper_repro.ppo.timing import StageTimer

GaeFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], torch.Tensor]
"""`(rewards [N,T], values [N,T], terminateds [N,T], gamma, lambda_) -> advantages [N,T]`."""


def rollout_values(net: ActorCritic, rollout: Rollout) -> torch.Tensor:
    """No-grad state values of every observation, `[N, T]`."""
    with torch.no_grad():
        return net.value(rollout.obs)


def ppo_loss(
    logp: torch.Tensor,
    value: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    ret: torch.Tensor,
    clip: float,
    vf_coef: float,
) -> torch.Tensor:
    """Clipped-ratio policy loss plus `vf_coef`·MSE value loss; every input is `[B]`."""
    ratio = torch.exp(logp - old_logp)
    policy = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
    return policy + vf_coef * (value - ret).pow(2).mean()


def ppo_update(
    net: ActorCritic,
    opt: torch.optim.Optimizer,
    rollout: Rollout,
    gae_fn: GaeFn,
    cfg: PPOConfig,
    timer: StageTimer,
    gen: torch.Generator,
) -> torch.Tensor:
    """Run one update of `cfg.epochs` × `cfg.minibatches` steps, recording stages on `timer`.

    The whole update is recorded as stage `total`. With `cfg.recompute`, advantages are
    recomputed before every minibatch from a values buffer that each minibatch forward
    refreshes at its indices. Reads nothing back from the device.

    Returns:
        The loss of every minibatch step, `[epochs * minibatches]` (not synchronised).
    """
    n, t = cfg.n_envs, cfg.seq_len
    nt = n * t
    mb = nt // cfg.minibatches
    obs = rollout.obs.view(nt, OBS_DIM)
    actions = rollout.actions.view(nt, ACT_DIM)
    old_logp = rollout.old_logp.view(nt)
    losses = []

    def advantages(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with timer.stage("gae"):
            adv = gae_fn(rollout.rewards, values, rollout.dones, cfg.gamma, cfg.lambda_)
            ret = adv + values
        return adv.reshape(nt), ret.reshape(nt)

    with timer.stage("total"):
        with timer.stage("forward"):
            values = rollout_values(net, rollout)
        if not cfg.recompute:
            adv, ret = advantages(values)
        for _ in range(cfg.epochs):
            with timer.stage("perm"):
                perm = torch.randperm(nt, device=obs.device, generator=gen)
            for k in range(cfg.minibatches):
                if cfg.recompute:
                    adv, ret = advantages(values)
                with timer.stage("gather"):
                    idx = perm[k * mb : (k + 1) * mb]
                    b_obs, b_act, b_old = obs[idx], actions[idx], old_logp[idx]
                    b_adv, b_ret = adv[idx], ret[idx]
                with timer.stage("forward"):
                    logp, value = net(b_obs, b_act)
                with timer.stage("loss"):
                    loss = ppo_loss(logp, value, b_old, b_adv, b_ret, cfg.clip, cfg.vf_coef)
                with timer.stage("backward"):
                    loss.backward()
                with timer.stage("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if cfg.recompute:
                    with timer.stage("gather"):
                        values.view(nt)[idx] = value.detach()
                losses.append(loss.detach())
    return torch.stack(losses)
