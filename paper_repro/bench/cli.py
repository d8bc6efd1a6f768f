"""Command line: ``python -m paper_repro.bench SUITE [SUITE ...] [options]``."""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

from paper_repro.bench.providers import PROVIDERS, unavailable
from paper_repro.bench.results import default_out_dir
from paper_repro.bench.suites import ALL, SUITES


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m paper_repro.bench",
        description="Gate and time the estimators against the paper's baselines and peers.")
    parser.add_argument("suites", nargs="*", help=f"suite names, or 'all': {', '.join(ALL)}")
    parser.add_argument("--quick", action="store_true", help="a small subset of each suite")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: data/<gpu-slug>/)")
    parser.add_argument("--providers", nargs="+", default=None,
                        help=f"restrict to these providers: {', '.join(PROVIDERS)}")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="benchmark device (default: cuda when available)")
    parser.add_argument("--resume", action="store_true",
                        help="skip cells already recorded in the output CSV")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="start no new case after this many minutes per suite")
    parser.add_argument("--gpus", type=int, default=1,
                        help="run the suites split over this many GPUs, one process each")
    parser.add_argument("--list", action="store_true", help="list suites and providers, exit")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _list():
    for suite in SUITES.values():
        print(f"{suite.name:12s} {len(suite.specs):4d} cases  {suite.description}")
        print(f"{'':12s} providers: {', '.join(suite.providers)}")
    print()
    for name, provider in PROVIDERS.items():
        reason = unavailable(name)
        print(f"{name:20s} {provider.label:28s} {'available' if reason is None else reason}")


def _lane_options(args) -> list[str]:
    """The options every per-GPU process repeats (all but the suites, --out and --gpus)."""
    rest = ["--quick"] * args.quick + ["--resume"] * args.resume + \
        ["--no-progress"] * args.no_progress
    if args.providers:
        rest += ["--providers", *args.providers]
    if args.device:
        rest += ["--device", args.device]
    if args.budget_minutes is not None:
        rest += ["--budget-minutes", str(args.budget_minutes)]
    return rest


def spin_up_clocks(seconds: float = 1.0) -> None:
    """Keep the GPU busy for ``seconds`` so that the first cell is not timed while an idle
    card's clocks ramp up (one idled at 345 MHz before a run; its first full calls took
    ~1.4x the later cells' time)."""
    x = torch.randn(2048, 2048, device="cuda")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            x = (x @ x).tanh_()
        torch.cuda.synchronize()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.list:
        _list()
        return 0
    names = list(ALL) if "all" in args.suites else args.suites
    unknown = [n for n in names if n not in SUITES]
    if not names or unknown:
        _parser().error(f"unknown or missing suite(s) {unknown}; choose from {', '.join(ALL)}")
    if args.providers:
        bad = [p for p in args.providers if p not in PROVIDERS]
        if bad:
            _parser().error(f"unknown providers {bad}; choose from {', '.join(PROVIDERS)}")
    from paper_repro.bench.runner import Runner

    out = args.out or default_out_dir()
    command = "python -m paper_repro.bench " + " ".join(shlex.quote(a) for a in argv)
    if args.gpus < 1:
        _parser().error("--gpus must be at least 1")
    if args.gpus > 1:
        from paper_repro.bench import lanes

        return lanes.run(names, args.gpus, out, _lane_options(args), command)
    from paper_repro.kernels import _native

    if args.device != "cpu" and _native.ENABLED:
        _native.module(wait=True)  # repeats then go native from the first timed call
        print(f"native plans: {_native.status()}", flush=True)
    if args.device != "cpu" and torch.cuda.is_available():
        spin_up_clocks()
    start_all = time.perf_counter()
    for name in names:
        suite = SUITES[name]
        providers = [p for p in (args.providers or suite.providers)]
        start = time.perf_counter()
        budget = None
        if args.budget_minutes is not None:
            budget = 60 * args.budget_minutes - (start - start_all)
        runner = Runner(suite, out, device=args.device, quick=args.quick, providers=providers,
                        progress=not args.no_progress, command=command, resume=args.resume,
                        budget_s=budget)
        rows = runner.run()
        failed = sum(r["status"] in ("failed", "error") for r in rows if r["metric"] in
                     ("max_abs_err", "gate", "timing"))
        print(f"{name}: {len(rows)} rows -> {out / (name + '.csv')} "
              f"({time.perf_counter() - start:.0f} s, {failed} failed/error)", flush=True)
        if not runner.finished:
            print(f"{name}: stopped at the time budget; rerun the same command with --resume "
                  "to continue", flush=True)
            return 3
    return 0
