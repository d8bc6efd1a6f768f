"""Output files of the PPO experiment and their provenance.

Files in the output folder (`data/<gpu-slug>/` by default):
    ppo_amdahl.csv           per measured iteration: config, arm, iteration, order, stage, ms
    ppo_amdahl_summary.csv   per config and arm: metric, stage, median, q25, q75, n
    ppo_amdahl_gates.csv     per config and arm: max_abs_err, correct, nongae_ratio,
                             contamination_ok, citable
    ppo_convergence.csv      per config, arm and minibatch step: loss, rel_diff
    ppo_amdahl.meta.json     provenance of each run that wrote these files
Every CSV also carries the config's columns (N, T, h1, h2, recompute, gae_calls, groups).
Rows of the configs a run measured replace earlier rows of those configs.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from paper_repro.paths import ROOT
from paper_repro.ppo.config import PPOConfig


def gpu_slug(device: torch.device | str) -> str:
    """Short lower-case name of the device: `"NVIDIA H200"` → `"h200"`; CPU → `"cpu"`."""
    if torch.device(device).type != "cuda":
        return "cpu"
    words = torch.cuda.get_device_name(device).lower().replace("nvidia", "").split()
    return re.sub(r"[^a-z0-9]+", "-", words[0] if words else "gpu")


def config_columns(cfg: PPOConfig) -> dict:
    """The columns that describe `cfg` in every output table."""
    return {
        "config": cfg.name,
        "N": cfg.n_envs,
        "T": cfg.seq_len,
        "h1": cfg.hidden[0],
        "h2": cfg.hidden[1],
        "recompute": cfg.recompute,
        "gae_calls": cfg.gae_calls,
        "groups": "+".join(cfg.groups),
    }


def _cmd(*args: str) -> str:
    """Stdout of a command run in the repository root, or "unknown" where it cannot run."""
    try:
        out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def provenance(device: torch.device | str, warmup_iters: dict[str, tuple[int, int]]) -> dict:
    """GPU, driver, CUDA, library versions, git commit, date and command of this run."""
    cuda = torch.device(device).type == "cuda"
    status = _cmd("git", "status", "--porcelain", "--untracked-files=no")
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    driver = "n/a"
    if cuda:
        smi = _cmd("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
        driver = smi.splitlines()[0] if smi else "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "paper_repro.ppo", *sys.argv[1:]]),
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "tf32_matmul": torch.get_float32_matmul_precision(),
        # a copy without .git (a remote GPU machine) takes the commit from the environment
        "git_commit": os.environ.get("PAPER_REPRO_GIT_COMMIT") or _cmd("git", "rev-parse", "HEAD"),
        "git_dirty": "unknown" if status == "unknown" else bool(status),
        "warmup_iters": warmup_iters,
    }


def upsert_csv(path: Path, new: pd.DataFrame) -> None:
    """Write `new`, keeping the rows of `path` whose config `new` does not contain."""
    if path.exists():
        old = pd.read_csv(path)
        new = pd.concat([old[~old["config"].isin(new["config"].unique())], new], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    new.to_csv(path, index=False)


def append_meta(path: Path, record: dict) -> None:
    """Append one run's provenance record to the JSON list at `path`."""
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runs, indent=2) + "\n")
