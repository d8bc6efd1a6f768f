"""Exact (sympy) proofs behind paper_repro: every estimator is the affine recurrence of SPEC.md,
the scan computes it, the boundaries behave, the backward rule holds, and the code agrees.

Each module lists named identities in IDENTITIES; `python -m proofs` checks them all.
"""
from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterable

from proofs.core import Identity

MODULES = (
    "scan_operator",
    "gae",
    "vtrace",
    "retrace",
    "lambda_returns",
    "discounted_returns",
    "eligibility_traces",
    "prefix_sum",
    "masked_gae",
    "peers",
    "boundaries",
    "adjoint",
    "closed_form",
    "retrace_expectation",
    "code_coefficients",
)

__all__ = ["Identity", "MODULES", "all_identities", "evaluate", "run"]


def all_identities(modules: Iterable[str] = MODULES) -> list[Identity]:
    found = []
    for name in modules:
        found.extend(importlib.import_module(f"proofs.{name}").IDENTITIES)
    return found


def evaluate(identity: Identity) -> tuple[bool, str]:
    """(passed, reason): an identity passes only if its check returns True; raising is failing."""
    try:
        result = identity.check()
    except Exception as exc:  # a crash is a failed proof, reported with its cause
        return False, f"{type(exc).__name__}: {exc}"
    return result is True, "" if result is True else f"returned {result!r}"


def run(identities: Iterable[Identity], out=None) -> int:
    """Print PASS/FAIL per identity; return the number of failures."""
    out = sys.stdout if out is None else out
    failures, start, count = 0, time.perf_counter(), 0
    for identity in identities:
        count += 1
        passed, reason = evaluate(identity)
        failures += not passed
        print(f"PASS {identity.name}" if passed else f"FAIL {identity.name}  ({reason})",
              file=out, flush=True)
    print(f"{count - failures}/{count} identities hold ({time.perf_counter() - start:.1f} s)",
          file=out)
    return failures
