"""GAE providers ("arms") compared inside the PPO update.

Every arm is a `GaeFn`: `(rewards, values, terminateds, gamma, lambda_) -> advantages`, all
`[N, T]` float32 on the rollout's device, no truncations and no window bootstrap.
"""

from __future__ import annotations

import torch

from paper_repro import compute_gae
from paper_repro.baselines import reference, torch_ops
from paper_repro.ppo.config import PPOConfig
from paper_repro.ppo.update import GaeFn

ARMS = ("ours", "doubling", "assoc_scan", "loop", "loop_compiled")
CPU_ARMS = ("ours", "loop")
# an unrolled T-step loop compiles in time that grows with T; beyond this it is left out
LOOP_COMPILED_MAX_T = 128


def ours(rewards, values, terminateds, gamma, lambda_):
    """This package's `compute_gae` on the plain path."""
    return compute_gae(rewards, values, terminateds, None, gamma, lambda_)


def reference_gae(rewards, values, terminateds, gamma, lambda_):
    """The float64 sequential CPU reference, cast back to the inputs' dtype and device."""
    adv = reference.compute_gae(rewards, values, terminateds, None, gamma, lambda_)
    return adv.to(device=values.device, dtype=values.dtype)


def arms_for(
    cfg: PPOConfig, device: torch.device | str, names: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    """The arms run at `cfg`: `names`, else all on a GPU and `CPU_ARMS` on the CPU,
    minus `loop_compiled` above `LOOP_COMPILED_MAX_T` and `assoc_scan` where torch lacks it."""
    if names is None:
        names = ARMS if torch.device(device).type == "cuda" else CPU_ARMS
    if cfg.seq_len > LOOP_COMPILED_MAX_T:
        names = tuple(n for n in names if n != "loop_compiled")
    if not torch_ops.ASSOC_SCAN_AVAILABLE:
        names = tuple(n for n in names if n != "assoc_scan")
    return tuple(names)


def _keywords(fn):
    """Adapt a baseline with the public signature (truncateds fourth) to a `GaeFn`."""
    return lambda rewards, values, terminateds, gamma, lambda_: fn(
        rewards, values, terminateds, gamma=gamma, lambda_=lambda_
    )


def build_arms(names: tuple[str, ...]) -> dict[str, GaeFn]:
    """Fresh GAE functions for one config; compiled arms start from a reset Dynamo cache."""
    factories = {
        "ours": lambda: ours,
        "doubling": lambda: _keywords(torch_ops.compile_fresh(torch_ops.gae_doubling)),
        "assoc_scan": lambda: _keywords(torch_ops.compile_fresh(torch_ops.gae_assoc_scan)),
        "loop": lambda: _keywords(torch_ops.gae_loop),
        "loop_compiled": lambda: _keywords(torch_ops.compile_fresh(torch_ops.gae_loop)),
    }
    unknown = sorted(set(names) - set(factories))
    if unknown:
        raise ValueError(f"unknown arms {unknown}; choose from {list(factories)}")
    if "ours" not in names:
        raise ValueError("arm 'ours' is required: every ratio is taken against it")
    return {name: factories[name]() for name in names}
