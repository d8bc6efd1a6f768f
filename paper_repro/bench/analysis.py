"""Read recorded measurements back and turn them into ratios (used by the notebooks).

Nothing here measures: it reads ``data/<gpu>/<suite>.csv`` (the tidy rows written by the
runner) and ``data/paper/*.csv`` (the paper's published numbers). Only rows whose status
is ``ok`` are used for timings.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from paper_repro.paths import DATA

CELL = ["algorithm", "num_envs", "seq_len", "variant", "dtype", "layout"]
ALGORITHM_LABELS = {"gae": "GAE", "vtrace": "V-trace", "retrace": "Retrace",
                    "lambda_returns": "TD(λ)", "discounted_returns": "Discounted",
                    "eligibility_traces": "Eligibility", "prefix_sum": "Prefix sum"}
ALGORITHM_ORDER = list(ALGORITHM_LABELS)


def measured_dirs(data_dir=DATA):
    """Directories of recorded measurements (one per GPU slug), excluding data/paper."""
    data_dir = Path(data_dir)
    if not data_dir.exists():
        return []
    return sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name != "paper"
                  and any(p.glob("*.csv")))


def choose_gpu(data_dir=DATA, gpu=None):
    """The GPU directory to report: ``gpu`` if given, else h200, else any GPU, else cpu."""
    names = [p.name for p in measured_dirs(data_dir)]
    if gpu:
        return gpu if gpu in names else None
    for preferred in ("h200", "h100"):
        if preferred in names:
            return preferred
    gpus = [n for n in names if n != "cpu"]
    return (gpus or names or [None])[0]


def load(data_dir=DATA, gpu=None):
    """Every benchmark row recorded for ``gpu`` (see :func:`choose_gpu`); empty if none."""
    from paper_repro.bench.results import COLUMNS

    gpu = choose_gpu(data_dir, gpu)
    if gpu is None:
        return pd.DataFrame(columns=COLUMNS + ["gpu"])
    frames = []
    for path in sorted((Path(data_dir) / gpu).glob("*.csv")):
        frame = pd.read_csv(path)
        if {"suite", "implementation", "metric", "value"} <= set(frame.columns):
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=COLUMNS + ["gpu"])
    return pd.concat(frames, ignore_index=True).assign(gpu=gpu)


def paper_table(name, data_dir=DATA):
    """A transcribed table of the paper, ``data/paper/<name>.csv`` (empty if absent)."""
    path = Path(data_dir) / "paper" / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def timings(frame, suite=None, metric="full_call"):
    """Wide table of ``metric`` (ms): one row per cell, one column per implementation."""
    rows = frame[(frame.metric == metric) & (frame.status == "ok")]
    if suite is not None:
        rows = rows[rows.suite.isin([suite] if isinstance(suite, str) else suite)]
    if rows.empty:
        return pd.DataFrame()
    wide = rows.pivot_table(index=CELL, columns="implementation", values="value",
                            aggfunc="min")
    wide.columns.name = None
    return wide


def ratio(frame, suite, slow, fast):
    """Per-cell speedup ``time(slow) / time(fast)``; ``slow``/``fast`` are (impl, metric)."""
    slow_t = timings(frame, suite, slow[1])
    fast_t = timings(frame, suite, fast[1])
    if slow[0] not in slow_t or fast[0] not in fast_t:
        return pd.Series(dtype=float)
    joined = pd.concat([slow_t[slow[0]].rename("slow"), fast_t[fast[0]].rename("fast")],
                       axis=1).dropna()
    return (joined["slow"] / joined["fast"]).rename(f"{slow[0]}/{fast[0]}")


def speedup_table(frame, suite, baseline="doubling-compiled", metric="full_call",
                  impls=("rl-triton", "ours"), baseline_metric=None):
    """Speedups of ``impls`` over ``baseline`` per cell, as columns named by implementation."""
    cols = {}
    for impl in impls:
        series = ratio(frame, suite, (baseline, baseline_metric or metric), (impl, metric))
        if len(series):
            cols[impl] = series
    return pd.DataFrame(cols)


def gate_failures(frame):
    """Rows of providers that failed or crashed in the correctness gate."""
    bad = frame[frame.metric.isin(["max_abs_err", "gate", "timing"])
                & frame.status.isin(["failed", "error"])]
    return bad[["suite", "implementation"] + CELL + ["status", "note"]]


def crossover(seq_lens, speedups):
    """T where ``speedup`` crosses 1, interpolated in log-log; NaN if it never crosses."""
    t = np.log(np.asarray(seq_lens, dtype=float))
    s = np.log(np.asarray(speedups, dtype=float))
    order = np.argsort(t)
    t, s = t[order], s[order]
    for i in range(len(t) - 1):
        if s[i] < 0 <= s[i + 1] or s[i] >= 0 > s[i + 1]:
            return float(np.exp(t[i] + (0 - s[i]) * (t[i + 1] - t[i]) / (s[i + 1] - s[i])))
    return float("nan")


def label(algorithm):
    return ALGORITHM_LABELS.get(algorithm, algorithm)


def fmt_range(values, digits=2, unit="x"):
    """'a-b<unit>' of the finite values, or 'not measured'."""
    values = [v for v in np.asarray(values, dtype=float).ravel() if np.isfinite(v)]
    if not values:
        return "not measured"
    lo, hi = min(values), max(values)
    if f"{lo:.{digits}f}" == f"{hi:.{digits}f}":
        return f"{lo:.{digits}f}{unit}"
    return f"{lo:.{digits}f}-{hi:.{digits}f}{unit}"


def select(table, **where):
    """Rows of a cell-indexed table matching ``where``; levels matched by one value are dropped."""
    if table is None or not len(table):
        return pd.DataFrame()
    index = table.index.to_frame(index=False)
    keep = np.ones(len(table), dtype=bool)
    single = []
    for level, value in where.items():
        many = isinstance(value, (list, tuple, set))
        keep &= index[level].isin(value if many else [value]).to_numpy()
        if not many:
            single.append(level)
    out = table[keep]
    return out.droplevel(single) if len(single) < out.index.nlevels else out.reset_index(
        drop=True)


def by_shape(series):
    """A (cell-indexed) speedup series as a shape x algorithm table with readable columns."""
    if series is None or not len(series):
        return pd.DataFrame()
    wide = series.unstack("algorithm")
    keep = [a for a in ALGORITHM_ORDER if a in wide.columns]
    wide = wide[keep].rename(columns=ALGORITHM_LABELS)
    drop = [lvl for lvl in wide.index.names if lvl not in ("num_envs", "seq_len")
            and wide.index.get_level_values(lvl).nunique() == 1]
    return wide.droplevel(drop) if drop else wide
