"""Run the PPO experiment over a list of configs and write its tables (see `io`)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import torch

from paper_repro.ppo import arms as arms_mod
from paper_repro.ppo import io, stats
from paper_repro.ppo.config import PPOConfig
from paper_repro.ppo.convergence import convergence_check
from paper_repro.ppo.experiment import run_config


def _with_config(rows: list[dict] | pd.DataFrame, cfg: PPOConfig) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    cols = io.config_columns(cfg)
    return pd.concat([pd.DataFrame([cols] * len(df)), df.reset_index(drop=True)], axis=1)


def _print_summary(cfg: PPOConfig, wide: pd.DataFrame, gate: pd.DataFrame, seconds: float) -> None:
    print(f"{cfg.name}  ({seconds:.0f} s)")
    med = wide.groupby("arm", sort=False)[
        ["total", "gae", "share", "speedup", "amdahl_pred"]
    ].median()
    for _, g in gate.iterrows():
        arm = g["arm"]
        flag = "citable" if g["citable"] else ("INCORRECT" if not g["correct"] else "contaminated")
        if arm in med.index:
            m = med.loc[arm]
            print(
                f"  {arm:14s} total {m['total']:9.3f} ms  gae {m['gae']:8.3f} ms  share "
                f"{100 * m['share']:6.2f} %  speedup {m['speedup']:.4f}x  amdahl "
                f"{m['amdahl_pred']:.4f}x  nongae {g['nongae_ratio']:.4f}  {flag}"
            )
        else:
            print(f"  {arm:14s} not timed (max |err| {g['max_abs_err']:.2e})  {flag}")


def run_experiment(
    configs: list[PPOConfig],
    device: torch.device | str,
    out: Path,
    arm_names: tuple[str, ...] | None = None,
    convergence: PPOConfig | None = None,
    convergence_updates: int = 5,
) -> dict[str, pd.DataFrame]:
    """Measure `configs`, optionally run the convergence check, and write the tables to `out`.

    Returns:
        The written tables by file stem (`ppo_amdahl`, `ppo_amdahl_summary`, ...).
    """
    if torch.device(device).type == "cuda":
        # TF32 matmuls, as in the paper's runs; left alone on the CPU (process-wide setting)
        torch.set_float32_matmul_precision("high")
    iters, summaries, gate_tables = [], [], []
    for cfg in configs:
        t0 = time.perf_counter()
        names = arms_mod.arms_for(cfg, device, arm_names)
        result = run_config(cfg, arms_mod.build_arms(names), device)
        gate = pd.DataFrame(result.gate).assign(config=cfg.name)
        rows = pd.DataFrame(result.rows).assign(config=cfg.name)
        if rows.empty:
            rows = pd.DataFrame(columns=["config", "arm", "iteration", "order", "stage", "ms"])
        wide = stats.per_iteration(rows)
        gates = stats.gates(gate, wide)
        _print_summary(cfg, wide, gates, time.perf_counter() - t0)
        iters.append(_with_config(rows.drop(columns="config"), cfg))
        summaries.append(_with_config(stats.summarize(wide).drop(columns="config"), cfg))
        gate_tables.append(_with_config(gates.drop(columns="config"), cfg))
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()

    tables = {
        "ppo_amdahl": pd.concat(iters, ignore_index=True),
        "ppo_amdahl_summary": pd.concat(summaries, ignore_index=True),
        "ppo_amdahl_gates": pd.concat(gate_tables, ignore_index=True),
    }
    if convergence is not None:
        pair = {"reference": arms_mod.reference_gae, "ours": arms_mod.ours}
        conv, ok = convergence_check(convergence, pair, convergence_updates, device)
        worst = conv["rel_diff"].max()
        print(
            f"convergence {convergence.name}: {convergence_updates} updates, max rel. loss "
            f"difference {worst:.2e} -> {'PASS' if ok else 'FAIL'}"
        )
        tables["ppo_convergence"] = _with_config(conv.drop(columns="config"), convergence)

    for stem, df in tables.items():
        io.upsert_csv(out / f"{stem}.csv", df)
    warm = {c.name: (c.warmup, c.iters) for c in configs}
    io.append_meta(out / "ppo_amdahl.meta.json", io.provenance(device, warm))
    return tables
