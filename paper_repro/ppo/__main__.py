"""PPO end-to-end ("Amdahl") experiment.

    python -m paper_repro.ppo [--quick] [--out data/h200] [--configs NAME_OR_GROUP ...]

Groups: hidden, puffer, budget, recompute (or config names such as h128x128_N16384_T128).
Each config runs 10 warm-up and 30 measured iterations of every arm (40 warm-up at
N = 16384); on an H200 the full grid takes about 6 minutes, --quick (3 + 10) about 1.5,
mostly torch.compile. Without a GPU a tiny config runs with perf_counter timing. Tables go
to data/<gpu-slug>/ unless --out is given.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

from paper_repro.paths import DATA
from paper_repro.ppo.arms import ARMS
from paper_repro.ppo.config import PPOConfig, cpu_grid, full_grid, quick_grid, select
from paper_repro.ppo.io import gpu_slug
from paper_repro.ppo.run import run_experiment


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m paper_repro.ppo", description=__doc__.splitlines()[1]
    )
    p.add_argument(
        "--quick", action="store_true", help="two configs, 3 warm-up + 10 measured iterations"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default: data/<gpu-slug>)"
    )
    p.add_argument("--configs", nargs="*", default=None, help="config names or groups to run")
    p.add_argument("--arms", nargs="*", default=None, choices=ARMS, help="arms (default: all)")
    p.add_argument("--warmup", type=int, default=None, help="override warm-up iterations")
    p.add_argument("--iters", type=int, default=None, help="override measured iterations")
    p.add_argument(
        "--convergence-updates",
        type=int,
        default=None,
        help="updates of the convergence check (0 skips it; default 5, quick 2)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if not cuda:
        grid = cpu_grid()
    elif args.quick:
        grid = quick_grid()
    else:
        grid = full_grid()
    configs = select(grid, args.configs)
    if args.warmup is not None or args.iters is not None:
        configs = [
            replace(
                c,
                warmup=c.warmup if args.warmup is None else args.warmup,
                iters=c.iters if args.iters is None else args.iters,
            )
            for c in configs
        ]
    updates = args.convergence_updates
    if updates is None:
        updates = 2 if args.quick or not cuda else 5
    # the convergence check uses the paper's small-policy point at the headline shape
    conv = PPOConfig(4096, 128, (128, 128)) if cuda else cpu_grid()[0]
    out = args.out or DATA / gpu_slug(device)
    arms = tuple(args.arms) if args.arms else None
    run_experiment(configs, device, out, arms, conv if updates > 0 else None, updates)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
