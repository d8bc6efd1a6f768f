"""Warps probe: Retrace's batch-major tiles of 512 steps and more under three warp counts (256,
128 and 64 elements a warp), fp32 with fp32 flags and bf16 with bool flags.

    python -m paper_repro.bench.warps_probe > data/h200/retrace_warps.csv

Lines: ``algorithm, num_envs, seq_len, dtype, layout, flags, tile, device_us, max_abs_diff``
(the tile as in ``long_probe``; the difference is from the shipped tile's answer).
"""
from __future__ import annotations

from dataclasses import replace

SHAPES = [(64, 512), (512, 512), (4096, 512), (512, 1024), (128, 1024), (1024, 1024),
          (512, 2048), (128, 2048), (2048, 2048), (512, 4096), (512, 8192), (64, 8192),
          (8192, 4096), (4096, 2048)]
VARIANTS = (("fp32", "float"), ("bf16", "bool"))
COLUMNS = "algorithm,num_envs,seq_len,dtype,layout,flags,tile,device_us,max_abs_diff"


def candidates(N: int, T: int, dtype: str) -> list:
    """The heuristic's Retrace tile at ``[N, T]`` in 256, 128 and 64 elements a warp (at most
    16 warps)."""
    from paper_repro.kernels import _launch as L

    tile = L.choose_config(N, T, False, 132, True, True, 4 if dtype == "fp32" else 2)
    warps = max(1, tile.BLOCK_B * tile.BLOCK_T // 256)
    return [replace(tile, num_warps=w) for w in (warps, 2 * warps, 4 * warps) if w <= 16]


def main():
    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.bench.long_probe import label

    print(COLUMNS)
    for n, t in SHAPES:
        for dt, fl in VARIANTS:
            _, prep, want = prepared("retrace", n, t, dt, "NT", fl)
            for c in candidates(n, t, dt):
                diff, us = forced_time(prep, want, c, repeats=3)
                print(f"retrace,{n},{t},{dt},NT,{fl},{label(c)},{us:.2f},{diff:.2e}", flush=True)


if __name__ == "__main__":
    main()
