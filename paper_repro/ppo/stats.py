"""Per-iteration ratios, Amdahl arithmetic and the contamination gate.

Every ratio pairs an arm with `ours` in the same iteration before any median is taken,
so slow drift of the machine cancels (ratios of aggregated medians do not).
"""

from __future__ import annotations

import math

import pandas as pd

from paper_repro.ppo.config import STAGES

BASE_ARM = "ours"
CONTAMINATION_TOL = 0.01
KEYS = ["config", "arm", "iteration"]
METRICS = ("total", "share", "speedup", "nongae_ratio", "amdahl_pred", "amdahl_bound", "resid_frac")


def amdahl_speedup(share: float, part_speedup: float = math.inf) -> float:
    """Whole-update speed-up when a part taking `share` of it runs `part_speedup`× faster.

    `1 / ((1 - share) + share / part_speedup)`; with `part_speedup = inf` this is the bound
    `1 / (1 - share)` (the part made free).

    >>> round(amdahl_speedup(0.022), 4)
    1.0225
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    return 1.0 / ((1.0 - share) + share / part_speedup)


def per_iteration(rows: pd.DataFrame) -> pd.DataFrame:
    """Wide per-iteration table with the derived ratios.

    Args:
        rows (pd.DataFrame): tidy rows with columns `config, arm, iteration, stage, ms`.

    Returns:
        One row per (config, arm, iteration): a column per stage (ms), `total`, `resid`, and
        `share` (GAE / total), `speedup` (total / ours' total), `nongae_ratio` (non-GAE time /
        ours'), `amdahl_pred` (total / (non-GAE time + ours' GAE time): the speed-up predicted
        from the arm's own stages with only its GAE replaced), `amdahl_bound` (1 / (1 − share)),
        `resid_frac` (resid / total).
    """
    if rows.empty:
        return pd.DataFrame(columns=[*KEYS, *STAGES, "total", "resid", "nongae", *METRICS])
    wide = rows.pivot_table(index=KEYS, columns="stage", values="ms", aggfunc="sum").reset_index()
    wide.columns.name = None
    wide["nongae"] = wide["total"] - wide["gae"]
    wide["share"] = wide["gae"] / wide["total"]
    base = wide.loc[wide["arm"] == BASE_ARM, ["config", "iteration", "total", "gae", "nongae"]]
    base = base.rename(columns={"total": "base_total", "gae": "base_gae", "nongae": "base_nongae"})
    wide = wide.merge(base, on=["config", "iteration"], how="inner")
    wide["speedup"] = wide["total"] / wide["base_total"]
    wide["nongae_ratio"] = wide["nongae"] / wide["base_nongae"]
    wide["amdahl_pred"] = wide["total"] / (wide["nongae"] + wide["base_gae"])
    wide["amdahl_bound"] = 1.0 / (1.0 - wide["share"])
    wide["resid_frac"] = wide["resid"] / wide["total"]
    return wide.drop(columns=["base_total", "base_gae", "base_nongae"])


def summarize(wide: pd.DataFrame) -> pd.DataFrame:
    """Median, 25th and 75th percentile of every metric and of every stage's ms and share.

    Returns:
        Tidy rows `config, arm, metric, stage, median, q25, q75, n`; `metric` is one of
        `METRICS`, `stage_ms` or `stage_share` (those two carry the stage name in `stage`).
    """
    long = []
    for metric in METRICS:
        long.append(
            wide[["config", "arm", metric]]
            .rename(columns={metric: "value"})
            .assign(metric=metric, stage="")
        )
    for stage in (*STAGES, "resid"):
        ms = wide[["config", "arm", stage]].rename(columns={stage: "value"})
        long.append(ms.assign(metric="stage_ms", stage=stage))
        share = ms.assign(value=ms["value"] / wide["total"])
        long.append(share.assign(metric="stage_share", stage=stage))
    data = pd.concat(long, ignore_index=True)
    grouped = data.groupby(["config", "arm", "metric", "stage"], sort=False)["value"]
    out = grouped.agg(
        median="median", q25=lambda v: v.quantile(0.25), q75=lambda v: v.quantile(0.75), n="count"
    )
    return out.reset_index()


def contamination(wide: pd.DataFrame, tol: float = CONTAMINATION_TOL) -> pd.DataFrame:
    """The contamination gate: the arm's non-GAE time must be within `tol` of ours.

    Returns:
        One row per (config, arm): `nongae_ratio` (median of per-iteration ratios) and
        `contamination_ok` (|nongae_ratio − 1| ≤ tol). Failing rows are not citable: their
        end-to-end difference is not attributable to GAE.
    """
    med = wide.groupby(["config", "arm"], sort=False)["nongae_ratio"].median().reset_index()
    med["contamination_ok"] = (med["nongae_ratio"] - 1.0).abs() <= tol
    return med


def gates(gate: pd.DataFrame, wide: pd.DataFrame, tol: float = CONTAMINATION_TOL) -> pd.DataFrame:
    """Join the correctness gate (`config, arm, max_abs_err, correct`) with the contamination
    gate; `citable` = correct and contamination_ok (arms that were not timed are not citable)."""
    out = gate.merge(contamination(wide, tol), on=["config", "arm"], how="left")
    out["contamination_ok"] = out["contamination_ok"].astype("boolean").fillna(False).astype(bool)
    out["citable"] = out["correct"].astype(bool) & out["contamination_ok"]
    return out
