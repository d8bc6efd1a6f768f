"""Every claim of PAPER.md section 5 next to our measurement and a verdict.

``claims_report(data_dir)`` joins ``data/paper/claims.csv`` with what ``data/<gpu>/``
holds. "measured" is the paper's own library (rl-triton v0.1.3) timed by our harness on
our GPU -- the reproduction; "ours" is this package on the same cells. Verdicts start
with ``reproduced``, ``differs`` or ``not measured`` and say why in brackets. Numbers from
the paper's H100 count as reproduced on our GPU within ``claims_common.TOLERANCE``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paper_repro.bench import analysis as A
from paper_repro.bench.claims_common import NOT_RUN
from paper_repro.bench.claims_headline import EVALUATORS as _HEADLINE
from paper_repro.bench.claims_more import EVALUATORS as _MORE
from paper_repro.paths import DATA

EVALUATORS = {**_HEADLINE, **_MORE}
PAPER_TABLES = ("headline", "safeguard_floors", "pufferlib", "retrace", "long_sequences",
                "launch_overhead", "ppo")


def paper_tables(data_dir=DATA, gpu=None):
    """The transcribed paper tables, plus our PPO summary under ``ppo_summary`` and the sm_90
    compile of rl-triton's fused Retrace beside ours under ``retrace_registers``."""
    tables = {name: A.paper_table(name, data_dir) for name in PAPER_TABLES}
    chosen = A.choose_gpu(data_dir, gpu)
    summary = Path(data_dir) / str(chosen) / "ppo_amdahl_summary.csv"
    tables["ppo_summary"] = pd.read_csv(summary) if chosen and summary.exists() else \
        pd.DataFrame()
    registers = Path(data_dir) / str(chosen) / "sass_rl_triton.csv"  # a compile
    tables["retrace_registers"] = pd.read_csv(registers) if chosen and registers.exists() else \
        pd.DataFrame()
    return tables


def verdict_kind(verdict):
    """'reproduced', 'differs' or 'not measured' (the first words of a verdict)."""
    for kind in ("reproduced", "differs", NOT_RUN):
        if str(verdict).startswith(kind):
            return kind
    return "other"


def claims_report(data_dir=DATA, gpu=None):
    """One row per claim: id, claim, paper value, measured, ours, verdict, kind, source."""
    claims = pd.read_csv(Path(data_dir) / "paper" / "claims.csv")
    frame = A.load(data_dir, gpu)
    tables = paper_tables(data_dir, gpu)
    rows = []
    for claim in claims.itertuples(index=False):
        evaluate = EVALUATORS.get(claim.id)
        try:
            measured, ours, verdict = evaluate(frame, tables) if evaluate else (
                NOT_RUN, NOT_RUN, f"{NOT_RUN} (no evaluator)")
        except Exception as exc:  # keep the report whole; show what broke
            measured, ours, verdict = NOT_RUN, NOT_RUN, f"{NOT_RUN} (evaluation failed: {exc!r})"
        rows.append(dict(id=claim.id, claim=claim.claim, paper=claim.paper_value,
                         measured=measured, ours=ours, verdict=verdict,
                         kind=verdict_kind(verdict), source=claim.source))
    return pd.DataFrame(rows)
