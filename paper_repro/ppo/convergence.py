"""Convergence check: PPO updates driven by two GAE providers give the same losses.

Both runs start from the same network, rollout and shuffle seed, so the only difference is
the advantages; float32 rounding of those must not move the minibatch losses beyond `rtol`.
"""

from __future__ import annotations

import pandas as pd
import torch

from paper_repro.ppo.config import PPOConfig
from paper_repro.ppo.model import make_agent, make_rollout
from paper_repro.ppo.timing import StageTimer
from paper_repro.ppo.update import GaeFn, ppo_update

CONVERGENCE_RTOL = 1e-3


def loss_trajectory(
    cfg: PPOConfig, gae_fn: GaeFn, updates: int, device: torch.device | str
) -> list[float]:
    """Minibatch losses of `updates` consecutive updates from a fresh, seeded learner."""
    rollout = make_rollout(cfg, device)
    net, opt = make_agent(cfg, device)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    timer = StageTimer(device)
    losses: list[float] = []
    for _ in range(updates):
        timer.reset()
        losses.extend(ppo_update(net, opt, rollout, gae_fn, cfg, timer, gen).tolist())
    return losses


def convergence_check(
    cfg: PPOConfig,
    arms: dict[str, GaeFn],
    updates: int,
    device: torch.device | str,
    rtol: float = CONVERGENCE_RTOL,
) -> tuple[pd.DataFrame, bool]:
    """Run `updates` updates per arm and compare every arm's losses with the first arm's.

    Args:
        arms (dict[str, GaeFn]): two or more providers; the first is the reference.
        rtol (float): bound on |loss − reference loss| / |reference loss| at every step.
            Default: `1e-3`.

    Returns:
        (rows `config, arm, step, loss, rel_diff`; whether every step of every arm is in `rtol`).
    """
    names = list(arms)
    if len(names) < 2:
        raise ValueError("convergence_check needs at least two arms")
    traj = {name: loss_trajectory(cfg, fn, updates, device) for name, fn in arms.items()}
    ref = traj[names[0]]
    rows = []
    for name in names:
        for step, (loss, base) in enumerate(zip(traj[name], ref, strict=True)):
            rel = abs(loss - base) / max(abs(base), 1e-12)
            rows.append(
                {"config": cfg.name, "arm": name, "step": step, "loss": loss, "rel_diff": rel}
            )
    df = pd.DataFrame(rows)
    # NaN compares False, so a diverged run fails too
    return df, bool((df["rel_diff"] <= rtol).all())
