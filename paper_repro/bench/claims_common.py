"""Shared helpers of the claim evaluators (claims_headline, claims_more)."""
from __future__ import annotations

import math

import numpy as np

from paper_repro.bench import analysis as A

TOLERANCE = 0.25  # relative band for numbers measured on another GPU
RT, OURS, VEC = "rl-triton", "ours", "doubling-compiled"
NOT_RUN = "not measured"


def within(measured, paper, tol=TOLERANCE):
    """``measured`` lies within a factor ``1 + tol`` of ``paper`` (both positive)."""
    return (math.isfinite(measured) and paper > 0 and measured > 0
            and abs(math.log(measured / paper)) <= math.log(1 + tol))


def cells(frame, suite, impl, metric="full_call", over=(VEC, "full_call"), **where):
    """Speedups of ``impl`` over ``over`` in ``suite``, filtered by cell columns."""
    series = A.ratio(frame, suite, over, (impl, metric))
    if not len(series):
        return series
    index = series.index.to_frame(index=False)
    keep = np.ones(len(series), dtype=bool)
    for column, value in where.items():
        values = value if isinstance(value, (tuple, list, set)) else (value,)
        keep &= index[column].isin(values).to_numpy()
    return series[keep]


def grid_cell(frame, **where):
    """rl-triton's full-call speedup over the baseline at one grid cell, and ours as text;
    None when rl-triton's is not recorded."""
    m = cells(frame, "grid", RT, **where)
    if not len(m):
        return None
    o = cells(frame, "grid", OURS, **where)
    return float(m.iloc[0]), f"{float(o.iloc[0]):.2f}x" if len(o) else NOT_RUN


def by_algorithm(series):
    """{algorithm: value} of a cell-indexed series (first index level)."""
    return {k[0]: v for k, v in series.items()} if len(series) else {}


def not_measured(reason):
    """An evaluator that reports why a claim is not measured here."""
    return lambda frame, paper: (NOT_RUN, NOT_RUN, f"{NOT_RUN} ({reason})")


MISSING = (NOT_RUN, NOT_RUN, f"{NOT_RUN} (no recorded data yet)")
