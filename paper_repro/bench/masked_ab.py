"""Masked GAE's launches in one process: the public call (the fused kernel up to
``MAX_TILES`` tiles a row, else the two scans), the fused kernel forced at any row length, and
the engine's two scans, device (CUDA-graph replay) and full calls in turn.

``python -m paper_repro.bench.masked_ab [--out FILE]`` (CUDA) writes one row per case and arm,
with the largest difference between the fused kernel's and the two scans' outputs.
"""
from __future__ import annotations

import argparse
import sys

import torch

from paper_repro.bench import timing
from paper_repro.bench.results import stream_csv
from paper_repro.kernels import masked_gae as MG

F32, BF16 = torch.float32, torch.bfloat16
# (envs, steps, layout, dtype): the masked suite's RLHF shapes, then rows of few programs,
# the tile rule's edges, time-major inputs and bf16
CASES = [(64, 1024, "NT", F32), (256, 2048, "NT", F32), (256, 8192, "NT", F32),
         (32, 32768, "NT", F32), (8, 32768, "NT", F32), (1, 32768, "NT", F32),
         (16, 65536, "NT", F32), (4096, 128, "NT", F32), (256, 2048, "TN", F32),
         (4096, 128, "TN", F32), (256, 8192, "NT", BF16), (64, 1024, "NT", BF16),
         (256, 16384, "NT", F32), (256, 32768, "NT", F32), (1024, 256, "TN", F32),
         (4096, 512, "TN", F32)]
COLUMNS = ["num_envs", "seq_len", "layout", "dtype", "arm", "device_us", "full_call_us",
           "max_abs_diff"]


def arms(num_envs: int, seq_len: int, layout: str, dtype) -> dict:
    g = torch.Generator(device="cuda").manual_seed(num_envs + seq_len)
    r, v = (torch.randn(num_envs, seq_len, device="cuda", generator=g).to(dtype)
            for _ in range(2))
    m = torch.rand(num_envs, seq_len, device="cuda", generator=g) < 0.7
    last = torch.randn(num_envs, device="cuda", generator=g).to(dtype)
    axis = 1
    if layout == "TN":
        r, v, m = (x.t().contiguous() for x in (r, v, m))
        axis = 0
    tiles = MG.MAX_TILES

    def public():
        return MG.compute_masked_gae(r, v, m, 1.0, 0.95, last, time_dim=axis)

    def fused():
        MG.MAX_TILES = 2**62
        try:
            return public()
        finally:
            MG.MAX_TILES = tiles
    return {"public": public, "fused": fused,
            "two_scans": lambda: MG.two_scans(r, v, m, 1.0, 0.95, last, axis, dtype)}


def measure(cases):
    for num_envs, seq_len, layout, dtype in cases:
        calls = arms(num_envs, seq_len, layout, dtype)
        diff = (calls["fused"]().float() - calls["two_scans"]().float()).abs().max().item()
        device = {k: timing.device_ms(c, reps=20, trials=5, trial_seconds=0.15).ms
                  for k, c in calls.items()}
        full = timing.full_call_interleaved(calls, n_iter=50, trials=5, trial_seconds=0.15)
        for arm in calls:
            yield dict(num_envs=num_envs, seq_len=seq_len, layout=layout,
                       dtype=str(dtype).removeprefix("torch."), arm=arm,
                       device_us=round(device[arm] * 1e3, 2),
                       full_call_us=round(full[arm].ms * 1e3, 2), max_abs_diff=diff)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.masked_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="masked_ab.csv")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 1
    stream_csv(args.out, COLUMNS, measure(CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
