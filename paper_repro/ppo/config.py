"""Configurations of the PPO end-to-end ("Amdahl") experiment (PAPER.md section 4.8).

A `PPOConfig` fixes one synthetic update: rollout shape `[N, T]`, hidden sizes, the PPO
hyper-parameters and whether advantages are recomputed before every minibatch. The grids
below are the experiment's axes; `select` resolves CLI names into configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

STAGES = ("perm", "forward", "gae", "gather", "loss", "backward", "optimizer")
OBS_DIM = 60
ACT_DIM = 8


@dataclass(frozen=True)
class PPOConfig:
    """One synthetic PPO update.

    Args:
        n_envs (int): `N`, rows of the rollout.
        seq_len (int): `T`, steps per row.
        hidden (tuple[int, int]): `(h1, h2)` widths of the tanh trunk.
        recompute (bool): recompute advantages before every minibatch from the stored values,
            which each minibatch forward refreshes at its indices (PufferLib's practice).
            Default: `False` (one GAE call per update).
        warmup (int): untimed iterations before measuring. Default: `10`.
        iters (int): measured iterations. Default: `30`.
        groups (tuple[str, ...]): grid axes this config belongs to.
    """

    n_envs: int
    seq_len: int
    hidden: tuple[int, int]
    recompute: bool = False
    warmup: int = 10
    iters: int = 30
    groups: tuple[str, ...] = field(default=(), compare=False)
    epochs: int = 4
    minibatches: int = 4
    lr: float = 3e-4
    clip: float = 0.2
    vf_coef: float = 0.5
    gamma: float = 0.99
    lambda_: float = 0.95
    done_prob: float = 0.02
    seed: int = 0

    @property
    def name(self) -> str:
        h1, h2 = self.hidden
        tail = "_recompute" if self.recompute else ""
        return f"h{h1}x{h2}_N{self.n_envs}_T{self.seq_len}{tail}"

    @property
    def gae_calls(self) -> int:
        """GAE calls per update: one, or one per minibatch step when recomputing."""
        return self.epochs * self.minibatches if self.recompute else 1


def _merge(configs: list[PPOConfig]) -> list[PPOConfig]:
    """Drop duplicate configs (same name), joining their group labels, in first-seen order."""
    merged: dict[str, PPOConfig] = {}
    for c in configs:
        if c.name in merged:
            old = merged[c.name]
            groups = old.groups + tuple(g for g in c.groups if g not in old.groups)
            merged[c.name] = replace(old, groups=groups, warmup=max(old.warmup, c.warmup))
        else:
            merged[c.name] = c
    return list(merged.values())


def full_grid(warmup: int = 10, iters: int = 30) -> list[PPOConfig]:
    """Every config of the experiment; the PufferLib operating point warms up 40 iterations."""
    kw = {"warmup": warmup, "iters": iters}
    hidden = [
        PPOConfig(4096, 128, (h, h), groups=("hidden",), **kw) for h in (64, 128, 256, 512, 1024)
    ]
    puffer = [PPOConfig(16384, 128, (128, 128), groups=("puffer",), iters=iters, warmup=4 * warmup)]
    budget = [
        PPOConfig(n, t, (256, 256), groups=("budget",), **kw)
        for n, t in ((4096, 128), (1024, 512), (256, 2048), (128, 4096))
    ]
    recompute = [
        PPOConfig(
            16384,
            128,
            (128, 128),
            recompute=True,
            groups=("recompute",),
            iters=iters,
            warmup=4 * warmup,
        )
    ]
    return _merge(hidden + puffer + budget + recompute)


def quick_grid() -> list[PPOConfig]:
    """A one-minute subset: the small and the large policy at the paper's headline shape."""
    return [
        PPOConfig(4096, 128, (128, 128), warmup=3, iters=10, groups=("hidden",)),
        PPOConfig(4096, 128, (1024, 1024), warmup=3, iters=10, groups=("hidden",)),
    ]


def cpu_grid() -> list[PPOConfig]:
    """A tiny config for machines without a GPU (perf_counter timing; for tests and smoke runs)."""
    return [PPOConfig(16, 32, (16, 16), warmup=1, iters=3, groups=("cpu",))]


def select(configs: list[PPOConfig], names: list[str] | None) -> list[PPOConfig]:
    """The configs whose name or one of whose groups is in `names` (all if `names` is empty)."""
    if not names:
        return configs
    chosen = [c for c in configs if c.name in names or set(c.groups) & set(names)]
    known = {c.name for c in configs} | {g for c in configs for g in c.groups}
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"unknown configs {unknown}; choose from {sorted(known)}")
    return chosen
