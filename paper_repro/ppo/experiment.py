"""The interleaved PPO measurement of one config: correctness gate, then timed updates.

Each arm trains its own identically initialised network on the same rollout. Iteration
`i` runs every arm once, in an order rotated by `i`, so drift of the machine (clocks,
allocator, thermals) is shared by all arms instead of landing on one of them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from paper_repro.ppo.config import STAGES, PPOConfig
from paper_repro.ppo.model import make_agent, make_rollout
from paper_repro.ppo.timing import StageTimer
from paper_repro.ppo.update import GaeFn, ppo_update, rollout_values

BASE_ARM = "ours"
CORRECTNESS_TOL = 1e-4


@dataclass
class ConfigResult:
    """Outcome of one config.

    Attributes:
        gate: one dict per arm: `arm`, `max_abs_err` (vs `ours`), `correct`.
        rows: one dict per (arm, measured iteration, stage) with `ms`; stages are
            `STAGES`, `total` (the enclosing interval) and `resid` (total − Σ stages).
    """

    gate: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)


def correctness_gate(
    arms: dict[str, GaeFn],
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    cfg: PPOConfig,
    tol: float = CORRECTNESS_TOL,
) -> list[dict]:
    """Check every arm's advantages against `ours`: finite and within `atol = rtol = tol`.

    Returns:
        One dict per arm: `arm`, `max_abs_err`, `correct`. `ours` is checked for finiteness.
    """
    base = arms[BASE_ARM](rewards, values, dones, cfg.gamma, cfg.lambda_)
    base_ok = bool(torch.isfinite(base).all())
    out = []
    for name, fn in arms.items():
        adv = fn(rewards, values, dones, cfg.gamma, cfg.lambda_)
        finite = bool(torch.isfinite(adv).all())
        close = adv.shape == base.shape and bool(torch.allclose(adv, base, atol=tol, rtol=tol))
        err = float((adv - base).abs().max()) if adv.shape == base.shape and adv.numel() else 0.0
        out.append({"arm": name, "max_abs_err": err, "correct": base_ok and finite and close})
    return out


def rotated(names: list[str], i: int) -> list[str]:
    """`names` rotated left by `i` (iteration `i`'s arm order)."""
    if not names:
        return []
    k = i % len(names)
    return names[k:] + names[:k]


def run_config(cfg: PPOConfig, arms: dict[str, GaeFn], device: torch.device | str) -> ConfigResult:
    """Gate, warm up and measure every arm at `cfg`; arms failing the gate are not timed.

    The gate runs on the initial values (all networks are identical then). On a GPU,
    every update is followed by `synchronize()` and `empty_cache()`. Every update is also
    followed by a garbage collection over a frozen heap, so the Python garbage of one arm
    (the loop makes thousands of tensors) is not collected inside another arm's stages.
    """
    if BASE_ARM not in arms:
        raise ValueError(f"arms must include {BASE_ARM!r}")
    cuda = torch.device(device).type == "cuda"
    rollout = make_rollout(cfg, device)
    learners = {}
    for name in arms:
        net, opt = make_agent(cfg, device)
        gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
        learners[name] = (net, opt, gen)

    result = ConfigResult()
    values = rollout_values(learners[BASE_ARM][0], rollout)
    result.gate = correctness_gate(arms, rollout.rewards, values, rollout.dones, cfg)
    timed = [g["arm"] for g in result.gate if g["correct"]]

    timer = StageTimer(device)
    with frozen_heap():
        for it in range(cfg.warmup + cfg.iters):
            for pos, name in enumerate(rotated(timed, it)):
                net, opt, gen = learners[name]
                timer.reset()
                ppo_update(net, opt, rollout, arms[name], cfg, timer, gen)
                ms = timer.read()
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                gc.collect()
                if it >= cfg.warmup:
                    result.rows += _stage_rows(ms, name, it - cfg.warmup, pos)
    return result


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then freeze the long-lived heap so later collections see young objects only."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _stage_rows(ms: dict[str, float], arm: str, iteration: int, order: int) -> list[dict]:
    stages = {s: ms.get(s, 0.0) for s in STAGES}
    stages["resid"] = ms["total"] - sum(stages.values())
    stages["total"] = ms["total"]
    return [
        {"arm": arm, "iteration": iteration, "order": order, "stage": s, "ms": v}
        for s, v in stages.items()
    ]
