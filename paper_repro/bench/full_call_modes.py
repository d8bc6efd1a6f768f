"""Whether the full call's two modes follow the GPU or the host: short full-call trials of one
GAE call (4096 x 16, fp32), alternating conditions, in one process.

``python -m paper_repro.bench.full_call_modes [--experiment idle|affinity] [--out FILE]``
(CUDA only) writes one row per trial: the trial's median and minimum full call (us), and the
SM clock torch reports before and after it.

* ``idle``: conditions 0 plain, 1 after a 50 ms burst of GPU work, 2 after 0.4 s idle, 3 idle
  then the burst: if the modes were the GPU's clocks, the burst would pick the fast one;
* ``affinity``: condition 0 the thread on every core, 1 pinned to one core.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import paper_repro as P
from paper_repro.bench.cli import spin_up_clocks
from paper_repro.bench.results import stream_csv
from paper_repro.bench.timing import full_call_times
from paper_repro.kernels import _native as N

COLUMNS = ["experiment", "trial", "condition", "clock_before_mhz", "median_us", "min_us",
           "clock_after_mhz", "seconds"]


def trial_us(call, n: int = 1500) -> tuple[float, float]:
    """The median and minimum of ``n`` event-timed full calls, us."""
    times = full_call_times(call, n)
    return 1e3 * statistics.median(times), 1e3 * min(times)


def clock() -> str:
    try:
        return str(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 -- without pynvml: not known
        return ""


def rows(experiment: str, trials: int):
    r, v = (torch.randn(4096, 16, device="cuda") for _ in range(2))
    term = torch.zeros(4096, 16, device="cuda")

    def call():
        return P.compute_gae(r, v, term)
    for _ in range(10):
        call()
    spin_up_clocks(1)
    every, conditions = os.sched_getaffinity(0), 4 if experiment == "idle" else 2
    began = time.perf_counter()
    for i in range(trials):
        condition = i % conditions
        if experiment == "idle":
            if condition in (2, 3):
                time.sleep(0.4)
            if condition in (1, 3):
                spin_up_clocks(0.05)
        else:
            os.sched_setaffinity(0, {min(every)} if condition else every)
        before = clock()
        median, low = trial_us(call)
        yield {"experiment": experiment, "trial": i, "condition": condition,
               "clock_before_mhz": before, "median_us": f"{median:.2f}", "min_us": f"{low:.2f}",
               "clock_after_mhz": clock(), "seconds": f"{time.perf_counter() - began:.1f}"}
    os.sched_setaffinity(0, every)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.full_call_modes",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=("idle", "affinity"), default="idle")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--out", help="CSV file (default: stdout)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    N.module(wait=True)
    stream_csv(args.out, COLUMNS, rows(args.experiment, args.trials))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
