"""The torch path's two scans on the CPU: doubling over chunks against a loop over time
vectorised across rows, per shape, and which one ``torch_affine_scan`` picks.

    python -m paper_repro.bench.cpu_scan [--out data/cpu] [--quick]

Writes ``torch_scan.csv`` (milliseconds per backward scan of ``[N, T]`` fp32, best of the
trials) and ``torch_scan.json`` (CPU, threads, versions, commit, command).
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
from pathlib import Path

import torch

from paper_repro.bench.results import provenance
from paper_repro.kernels import torch_scan as S
from paper_repro.paths import DATA

SHAPES = [(n, t) for n in (64, 128, 256, 512, 1024, 2048, 4096) for t in (32, 128, 1024)] + [
    (8, 2048), (16, 65536), (512, 4096), (32768, 32)]
QUICK = [(64, 32), (1024, 32)]
COLUMNS = ["num_rows", "seq_len", "doubling_ms", "sequential_ms", "chosen"]


def _best_ms(seconds, fn, *args, trials=3):
    fn(*args)
    best = float("inf")
    for _ in range(trials):
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < seconds / trials:
            fn(*args)
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
    return best


def _doubling(alpha, beta, carry):
    """The backward scan as ``torch_affine_scan`` runs it below ``SEQUENTIAL_ROWS``."""
    return S._forward_scan(alpha.flip(-1), beta.flip(-1), carry).flip(-1)


def measure(shapes, seconds=0.3):
    """One row a shape: both scans' time and the one the shipped rule takes."""
    rows = []
    for n, t in shapes:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(n, t, generator=g), torch.rand(n, t, generator=g)
        carry = torch.zeros(n)
        doubling = _best_ms(seconds, _doubling, a, b, carry)
        sequential = _best_ms(seconds, S._sequential, a, b, carry, True)
        rows.append(dict(num_rows=n, seq_len=t, doubling_ms=round(doubling, 4),
                         sequential_ms=round(sequential, 4),
                         chosen="sequential" if n >= S.SEQUENTIAL_ROWS else "doubling"))
    return rows


def _cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None):
    p = argparse.ArgumentParser(description="Time the torch path's two scans on the CPU.")
    p.add_argument("--out", default=str(DATA / "cpu"))
    p.add_argument("--quick", action="store_true", help="two shapes, short trials")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = measure(QUICK if args.quick else SHAPES, 0.05 if args.quick else 0.3)
    with open(out / "torch_scan.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    info = dict(provenance(" ".join(["python -m paper_repro.bench.cpu_scan", *sys.argv[1:]])),
                cpu=_cpu_name(), threads=torch.get_num_threads())
    (out / "torch_scan.json").write_text(json.dumps(info, indent=2) + "\n")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
