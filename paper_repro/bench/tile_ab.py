"""Forced batch-major tiles against the shipped one (and rl-triton's call) at chosen shapes.

``python -m paper_repro.bench.tile_ab [--out FILE] [--shapes 512x2048,...]
[--algorithms gae,...] [--tiles 1x2048w8,...] [--repeats 3] [--no-peer] [--dtype bf16]
[--variant trunc]``

(CUDA) Per estimator and shape, batch-major, fp32 (float flags) or bf16 (bool flags, as the
roofline's bf16 cells): the shipped tile, then each of ``--tiles`` (``BxTwW``: rows, steps
and warps of a program, a whole row a program, the shipped run length; ``BxTwWrR``: registers
capped at R a thread) forced through
``L.force_config``, then (fp32) rl-triton's call on the same inputs, each the minimum over
``repeats`` of the device time by CUDA-graph replay (``forced.forced_time``).
A forced tile's largest difference from the shipped tile's output is kept (a race or a bad
tile shows there). A tile of at least twice the row's steps is skipped.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from paper_repro.bench.results import stream_csv
from paper_repro.kernels import _launch as L

SHAPES = "128x2048,256x2048,512x2048,1024x2048,2048x2048,4096x2048,512x1536,256x4096,512x4096"
ALGORITHMS = "eligibility_traces,prefix_sum,gae,discounted_returns,lambda_returns"
TILES = "1x2048w4,1x2048w8,1x2048w16,1x4096w8,1x4096w16"
COLUMNS = ["algorithm", "num_envs", "seq_len", "dtype", "layout", "variant", "tile", "device_us",
           "max_abs_diff"]


def parse_tile(text: str) -> tuple[int, int, int, int]:
    """``"1x2048w8"`` -> ``(1, 2048, 8, 0)``: rows, steps and warps of a program and its
    register cap (``"1x1024w4r128"``: 128 a thread; 0: the compiler's choice)."""
    rows, rest = text.split("x")
    steps, rest = rest.split("w")
    warps, _, cap = rest.partition("r")
    return int(rows), int(steps), int(warps), int(cap or 0)


def tile_label(tile: tuple[int, int, int, int]) -> str:
    rows, steps, warps, cap = tile
    return f"{rows}x{steps}w{warps}" + (f"r{cap}" if cap else "")


def forced_tile(shipped: L.ScanConfig, T: int, tile: tuple[int, int, int, int]) -> L.ScanConfig:
    """``shipped`` with ``tile``'s rows, steps, warps and register cap, a whole row a
    program."""
    rows, steps, warps, cap = tile
    return replace(shipped, BLOCK_B=rows, BLOCK_T=steps, num_warps=warps,
                   seg_len=-(-T // steps) * steps, single_pass=False, max_registers=cap)


def shipped_config(algorithm: str, N: int, T: int, device, itemsize: int = 4,
                   truncated: bool = False) -> L.ScanConfig:
    """The batch-major tile ``algorithm`` ships at ``N x T`` for values of ``itemsize`` bytes,
    with or without ``truncated`` episodes: V-trace's and Retrace's wide tiles (Retrace's own
    rules) apart from the five narrow estimators', each with its own traits
    (``tile_probe.traits_of``)."""
    from paper_repro.bench.tile_probe import traits_of

    wide = algorithm in ("vtrace", "retrace")
    return L.config_for(N, T, (T, 1), device, wide=wide, retrace=algorithm == "retrace",
                        itemsize=itemsize, traits=traits_of(algorithm, truncated))


def _case_rows(algorithm, N, T, tiles, repeats, peer, dtype="fp32", variant="plain"):
    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.tuning import device_time_us

    flags, itemsize = ("bool", 2) if dtype == "bf16" else ("float", 4)
    case, prep, want = prepared(algorithm, N, T, dtype, "NT", flags, variant)
    shipped = shipped_config(algorithm, N, T, case.args[0].device, itemsize, variant == "trunc")
    row = dict(algorithm=algorithm, num_envs=N, seq_len=T, dtype=dtype, layout="NT",
               variant=variant)
    _, us = forced_time(prep, want, None, repeats=repeats)
    name = "shipped " + tile_label((shipped.BLOCK_B, shipped.BLOCK_T, shipped.num_warps,
                                    shipped.max_registers))
    yield dict(row, tile=name, device_us=round(us, 3), max_abs_diff=0.0)
    for tile in tiles:
        if tile[1] >= 2 * T:
            continue
        diff, us = forced_time(prep, want, forced_tile(shipped, T, tile), repeats=repeats)
        yield dict(row, tile=tile_label(tile), device_us=round(us, 3),
                   max_abs_diff=f"{diff:.3g}")
    if peer and dtype == "fp32":  # rl-triton's kernels take fp32 alone
        from paper_repro.bench.providers import _rl_triton

        call = _rl_triton(case).call
        yield dict(row, tile="rl-triton", max_abs_diff="",
                   device_us=round(min(device_time_us(call) for _ in range(repeats)), 3))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--algorithms", default=ALGORITHMS)
    p.add_argument("--tiles", default=TILES)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-peer", action="store_true", help="leave rl-triton out (bf16: always)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--variant", choices=("plain", "trunc"), default="plain",
                   help="trunc: truncated episodes too (the estimators that take them)")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    tiles = [parse_tile(t) for t in args.tiles.split(",")]
    rows = (row for N, T in shapes for a in args.algorithms.split(",")
            for row in _case_rows(a, N, T, tiles, args.repeats, not args.no_peer, args.dtype,
                                 args.variant))
    stream_csv(args.out, COLUMNS, rows)


if __name__ == "__main__":
    main()
