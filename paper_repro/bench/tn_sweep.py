"""Time-major tile sweep: each estimator's shipped tiles in both layouts, then candidate
time-major tiles forced on the same inputs, over shapes with a few hundred to a few thousand
envs and 1024-32768 steps (the rows behind ``_launch._time_major_config``'s look-back rule);
with ``--retrace``, Retrace's time-major tiles, and with ``--retrace-short`` and
``--retrace-rows`` its batch-major tiles of short rows and of long rows that programs walk,
forced on the batch-major inputs; with ``--abound``, the other estimators' time-major tiles of
rows that abound; with ``--narrow``, 4- and 8-env tiles walking whole time-major rows.

    python -m paper_repro.bench.tn_sweep --out DIR [--quick]
        [--check | --variants | --retrace | --retrace-short | --retrace-rows | --abound
         | --narrow]
        [--shapes NxT ...]

Each row is one (estimator, shape, layout, tile): its device time (CUDA-graph replay, inputs
warm in L2 where they fit) and, for a forced tile, its largest difference from the shipped
tile's float64 answer in the forced layout, so a tile that computes wrongly shows, not only a
slow one.
"""
from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from paper_repro.bench.inputs import ALGORITHMS

COLUMNS = ["algorithm", "num_envs", "seq_len", "layout", "tile", "BLOCK_B", "BLOCK_T",
           "num_warps", "seg_len", "single_pass", "flip", "device_us", "max_abs_diff", "commit"]
# Retrace's time-major look-back publishes words and lost at 512 x 4096 (window_ab.csv: 1.38x)
SWEPT = tuple(a for a in ALGORITHMS if a != "retrace")
SHAPES = ((256, 2048), (256, 4096), (256, 8192), (512, 2048), (512, 4096), (512, 8192),
          (1024, 2048), (1024, 4096), (1024, 8192), (128, 16384), (256, 16384),
          (2048, 1024), (2048, 2048), (2048, 4096), (4096, 1024))
# --check: shapes the rule reaches beyond those it was read from (shorter rows of few row
# blocks, many rows), each beside the tiles the rule replaced
CHECK_SHAPES = ((256, 1024), (512, 1024), (1024, 1024), (512, 512), (1024, 512), (4096, 2048),
                (8192, 2048), (4096, 4096), (16384, 512), (8192, 1024), (512, 4096))
QUICK_SHAPES = ((512, 4096),)
ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def candidates(N: int, T: int, wide: bool = False, check: bool = False,
               itemsize: int = 4) -> dict:
    """Named time-major tiles ``(BLOCK_B, BLOCK_T, warps, seg_len, single_pass, flip)``: 32-env
    look-back tiles of one tile, or segments of 2 and 4 tiles (fp32 interleaved runs of 8), and
    one-pass 16 x 128 row blocks in interleaved runs of 4 where rows fill the GPU. ``check``:
    also the tiles the look-back rule replaced (two passes of one-warp tiles, and one-pass row
    blocks latest step first). ``itemsize`` is the modes' common argument; these tiles are
    fp32's runs."""
    steps = -(-T // 128) * 128
    out = {"lb32x128": (32, 128, 4, 128, True, -8), "lb32x64": (32, 64, 2, 64, True, -8),
           "seg2x128": (32, 128, 4, 256, True, -8), "seg4x128": (32, 128, 4, 512, True, -8)}
    if N >= 1024 or check:
        out["rows16x128"] = (16, 128, 4, steps, False, -4)
    if check:
        out["rows16x128_latest"] = (16, 128, 4, steps, False, 1)
        out["two_pass"] = (32, 16, 1, 64, False, -4) if wide else (32, 32, 1, 128, False, -8)
    return out


# --variants: shapes where the one-tile look-back ships, for its tile's shape and warps
VARIANT_SHAPES = ((256, 2048), (512, 4096), (1024, 8192), (2048, 4096))


def variants(N: int, T: int, wide: bool = False, check: bool = False,
             itemsize: int = 4) -> dict:
    """One-tile look-back tiles around the shipped 32 x 128 in 4 warps: 8 warps, 16 or 64 envs,
    256 steps, each in fp32's interleaved runs (``_interleaved``; ``itemsize`` unused)."""
    from paper_repro.kernels._launch import _interleaved

    return {f"lb{bb}x{bt}w{w}": (bb, bt, w, bt, True, _interleaved(bb, bt, w, 4))
            for bb, bt, w in ((32, 128, 4), (32, 128, 8), (16, 128, 4), (64, 128, 4),
                              (32, 256, 4), (16, 256, 4), (32, 256, 8))}


# --retrace: Retrace's roofline shapes, where its time-major tiles took 1.17-1.70x the
# batch-major time (roofline.csv)
# and rows that abound beside them (more and fewer steps, more envs)
RETRACE_SHAPES = ((32768, 32), (4096, 128), (512, 4096), (64, 131072), (32768, 16),
                  (65536, 32), (16384, 64), (16384, 128))


def retrace_tiles(N: int, T: int, wide: bool = True, check: bool = False,
                  itemsize: int = 4) -> dict:
    """Retrace's time-major tiles: the shipped one first, then more warps to a tile (its
    one-warp programs of 16 envs hold 16 warps an SM at 32768 x 32), fewer envs, shorter
    tiles walked in turn, and for long rows segments and two passes beside the look-back."""
    from paper_repro.kernels._launch import _interleaved, choose_config

    out = {"rule": _tile(choose_config(N, T, True, 132, True, True, itemsize))}
    steps = min(T, 128)
    if T <= 128:  # one pass: programs hold the whole horizon
        for bb, bt, w in ((16, steps, 1), (16, steps, 2), (16, steps, 4), (8, steps, 1),
                          (8, steps, 2), (32, steps, 2), (32, steps, 4), (16, steps, 8),
                          (16, 16, 1), (16, 32, 1), (32, 16, 1), (16, 8, 1), (16, 16, 2),
                          (32, 16, 2), (64, 16, 2), (64, 32, 4)):
            if bt <= T:
                for flip in (0, _interleaved(bb, bt, w, itemsize)) if bb >= 16 else (0,):
                    out[f"one{bb}x{bt}w{w}f{flip}"] = (bb, bt, w, T, False, flip)
        return out
    for bb, bt, w in ((16, 128, 4), (16, 128, 8), (16, 64, 2), (16, 64, 4), (32, 128, 8),
                      (16, 256, 8), (16, 32, 1), (16, 16, 1), (32, 32, 1), (32, 16, 1)):
        out[f"lb{bb}x{bt}w{w}"] = (bb, bt, w, bt, True, _interleaved(bb, bt, w, itemsize))
    runs = _interleaved(16, 128, 4, itemsize)
    for seg in (4, 8):
        out[f"seg{seg}x128"] = (16, 128, 4, seg * 128, True, runs)
        out[f"two{seg}x128"] = (16, 128, 4, seg * 128, False, runs)
    return out


# --retrace-short: Retrace's batch-major rows of up to 16 steps, which took 1.7-3.0x the
# time-major time (tn_retrace.csv at dae942a: 32768x8 17.6 against 5.8 us)
SHORT_SHAPES = ((4096, 8), (32768, 8), (4096, 16), (32768, 16))


def retrace_short_tiles(N: int, T: int, wide: bool = True, check: bool = False,
                        itemsize: int = 4) -> dict:
    """Retrace's batch-major tiles of the whole horizon (the rule first): 1-64 rows in 1, 2
    or 4 warps, in Triton's reverse scan or, from 16 steps, runs of 4."""
    from paper_repro.kernels._launch import choose_config

    out = {"rule": _tile(choose_config(N, T, False, 132, True, True, itemsize))}
    for bb in (1, 2, 4, 8, 16, 32, 64):
        for w in (1, 2, 4):
            if bb * T >= 8 * w:  # at least a quarter of the lanes hold an element
                for flip in (0, 4) if T >= 16 else (0,):
                    out[f"rows{bb}x{T}w{w}f{flip}"] = (bb, T, w, T, False, flip)
    return out


# --retrace-rows: Retrace's batch-major rows walked whole by more rows than two an SM, whose
# one-row programs hold about 16 warps an SM (512x4096: 75 % of copy bandwidth, roofline.csv)
ROWS_SHAPES = ((512, 4096), (512, 8192), (1024, 4096), (1024, 2048), (2048, 2048))


def retrace_rows_tiles(N: int, T: int, wide: bool = True, check: bool = False,
                       itemsize: int = 4) -> dict:
    """Retrace's batch-major one-row tiles (the rule first): walked over the whole row in 1-8
    warps, one tile a program looking back, segments of tiles looking back, and two passes;
    every tile in runs of 4."""
    from paper_repro.kernels._launch import choose_config

    out = {"rule": _tile(choose_config(N, T, False, 132, True, True, itemsize))}
    for bt, w in ((256, 1), (256, 2), (512, 2), (512, 4), (512, 8), (1024, 4), (1024, 8)):
        out[f"walk{bt}w{w}"] = (1, bt, w, T, False, 4)
    for bt, w in ((128, 1), (256, 1), (256, 2), (512, 2), (512, 4), (1024, 4)):
        out[f"lb{bt}w{w}"] = (1, bt, w, bt, True, 4)
    for bt, w, seg in ((256, 1, 1024), (256, 2, 1024), (512, 4, 1024), (512, 4, 2048)):
        out[f"seg{seg}x{bt}w{w}"] = (1, bt, w, seg, True, 4)
        out[f"two{seg}x{bt}w{w}"] = (1, bt, w, seg, False, 4)
    return out


# --abound: the six estimators' time-major rows where they abound (up to 128 steps), whose
# tiles were read from tile_probe.csv before the interleaved runs, the launch-index look-back
# and the windows of 8; 4096x128 took 1.19-1.33x the batch-major time, 32768x32 1.03-1.21x
ABOUND_SHAPES = ((4096, 128), (32768, 32), (16384, 128), (32768, 16))


def abound_tiles(N: int, T: int, wide: bool = False, check: bool = False,
                 itemsize: int = 4) -> dict:
    """Time-major tiles of rows that abound (the default TileTraits' rule first; the shipped rows
    follow the estimator's): 8-64 envs walking the whole horizon in 1-8 warps, as one tile or
    in 16-64-step tiles, and from 64 steps one-tile look-backs splitting time; each in fp32's
    interleaved runs where a thread holds several steps, latest step first otherwise."""
    from paper_repro.kernels._launch import _interleaved, _pow2, choose_config

    out = {"rule": _tile(choose_config(N, T, True, 132, wide, False, itemsize))}
    whole = _pow2(T)
    one_pass = ((8, whole, 1), (8, whole, 2), (16, whole, 1), (16, whole, 2), (16, whole, 4),
                (16, whole, 8), (32, whole, 2), (32, whole, 4), (32, whole, 8), (64, whole, 4),
                (64, whole, 8), (16, 16, 1), (32, 16, 1), (64, 16, 2), (16, 32, 1), (32, 32, 1),
                (32, 32, 2), (64, 32, 2), (16, 64, 2), (32, 64, 4))
    for bb, bt, w in one_pass:
        if bt <= whole and bb * bt >= 32 * w:  # every thread holds an element
            name = f"one{bb}x{bt}w{w}"
            out.setdefault(name, (bb, bt, w, -(-T // bt) * bt, False,
                                  _interleaved(bb, bt, w, itemsize)))
    for bb, bt, w in ((16, 32, 1), (32, 32, 1), (16, 64, 2), (32, 64, 2)):
        if 2 * bt <= T:
            out[f"lb{bb}x{bt}w{w}"] = (bb, bt, w, bt, True, _interleaved(bb, bt, w, itemsize))
    return out


# --narrow: time-major rows of a few hundred to a few thousand envs, walked whole by narrow
# env blocks instead of split in time
NARROW_SHAPES = ((512, 4096), (1024, 4096), (512, 8192), (256, 8192), (1024, 2048),
                 (2048, 4096))


def narrow_tiles(N: int, T: int, wide: bool = False, check: bool = False,
                 itemsize: int = 4) -> dict:
    """Time-major tiles of 4 or 8 envs (16 or 32 bytes a step) that walk the whole horizon in
    one pass, 256-2048 steps a tile in 2-8 warps, beside the rule's tile: ``N / 4`` or
    ``N / 8`` programs and no look-back. fp32 tiles in interleaved runs, others latest step
    first."""
    from paper_repro.kernels._launch import _interleaved, choose_config

    out = {"rule": _tile(choose_config(N, T, True, 132, wide, False, itemsize))}
    for bb, bt, w in ((4, 256, 2), (4, 512, 4), (4, 1024, 4), (4, 1024, 8), (4, 2048, 8),
                      (8, 256, 4), (8, 512, 4), (8, 512, 8), (8, 1024, 8)):
        if bt <= T and not (wide and bb * bt > 4096):  # V-trace's wide tiles spill
            out[f"walk{bb}x{bt}w{w}"] = (bb, bt, w, -(-T // bt) * bt, False,
                                         _interleaved(bb, bt, w, itemsize))
    return out


def _tile(c) -> tuple:
    """A ScanConfig as a candidate tile ``(BLOCK_B, BLOCK_T, warps, seg_len, single_pass,
    flip)``, the sweep's ``rule`` row."""
    return (c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len, c.single_pass, int(c.flip))


def sweep(emit, shapes=SHAPES, algorithms=SWEPT, check=False, tiles=candidates,
          forced_layout="TN", dtype="fp32"):
    """``emit(row)`` for each estimator and shape: the shipped batch-major and time-major
    calls, then each forced tile (``tiles``: a ``MODES`` entry's) on the inputs of
    ``forced_layout``, all in ``dtype``."""
    from paper_repro.bench.forced import forced_time, prepared
    from paper_repro.kernels import _launch as L
    from paper_repro.tuning import device_time_us

    commit = os.environ.get("PAPER_REPRO_GIT_COMMIT", "")
    for N, T in shapes:
        for a in algorithms:
            _, nt, nt_want = prepared(a, N, T, dtype, "NT", "float")
            _, tn, want = prepared(a, N, T, dtype, "TN", "float")
            itemsize = ITEMSIZE[dtype]
            forced = (tn, want) if forced_layout == "TN" else (nt, nt_want)
            rows = [("shipped", layout, None, 0.0, device_time_us(prep.call))
                    for layout, prep in (("NT", nt), ("TN", tn))]
            for name, tile in tiles(N, T, a in ("vtrace", "retrace"), check, itemsize).items():
                try:
                    diff, us = forced_time(*forced, L.ScanConfig(*tile))
                except Exception as e:  # a tile that fails to compile or launch: a row saying so
                    print(f"{a} {N}x{T} {name}: {type(e).__name__}: {e}"[:300], flush=True)
                    diff, us = float("nan"), float("nan")
                rows.append((name, forced_layout, tile, diff, us))
            for name, layout, tile, diff, us in rows:
                tile = tile or (0, 0, 0, 0, False, 0)
                emit(dict(zip(COLUMNS, [a, N, T, layout, name, *tile[:4], int(tile[4]),
                                        int(tile[5]), round(us, 3), f"{diff:.3g}", commit])))


# mode: (CSV written, shapes, tiles, estimators, layout the tiles are forced on)
MODES = {
    "sweep": ("tn_sweep.csv", SHAPES, candidates, SWEPT, "TN"),
    "check": ("tn_check.csv", CHECK_SHAPES, candidates, SWEPT, "TN"),
    "variants": ("tn_variants.csv", VARIANT_SHAPES, variants, SWEPT, "TN"),
    "retrace": ("tn_retrace.csv", RETRACE_SHAPES, retrace_tiles, ("retrace",), "TN"),
    "retrace_short": ("retrace_short.csv", SHORT_SHAPES, retrace_short_tiles, ("retrace",),
                      "NT"),
    "retrace_rows": ("retrace_rows.csv", ROWS_SHAPES, retrace_rows_tiles, ("retrace",), "NT"),
    "abound": ("tn_abound.csv", ABOUND_SHAPES, abound_tiles, SWEPT, "TN"),
    "narrow": ("tn_narrow.csv", NARROW_SHAPES, narrow_tiles, SWEPT, "TN"),
}
# modes whose tiles follow the dtype (the others' are fp32's runs)
ANY_DTYPE = ("retrace", "retrace_short", "retrace_rows", "abound", "narrow")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--check", action="store_true",
                   help="instead: CHECK_SHAPES, with the replaced tiles, to OUT/tn_check.csv")
    p.add_argument("--variants", action="store_true",
                   help="instead: VARIANT_SHAPES, look-back tile variants, to OUT/tn_variants.csv")
    p.add_argument("--retrace", action="store_true",
                   help="instead: Retrace's tiles at RETRACE_SHAPES, to OUT/tn_retrace.csv")
    p.add_argument("--retrace-short", action="store_true",
                   help="instead: Retrace's batch-major tiles at SHORT_SHAPES, to "
                        "OUT/retrace_short.csv")
    p.add_argument("--retrace-rows", action="store_true",
                   help="instead: Retrace's batch-major walked rows at ROWS_SHAPES, to "
                        "OUT/retrace_rows.csv")
    p.add_argument("--abound", action="store_true",
                   help="instead: the six estimators' time-major tiles at ABOUND_SHAPES, to "
                        "OUT/tn_abound.csv")
    p.add_argument("--narrow", action="store_true",
                   help="instead: narrow env blocks walking time-major rows at NARROW_SHAPES, "
                        "to OUT/tn_narrow.csv")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="inputs' dtype; other than fp32, Retrace's modes, --abound and "
                        "--narrow only, whose CSV then ends in _DTYPE")
    p.add_argument("--shapes", nargs="+", metavar="NxT", help="instead of the mode's shapes")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    mode = next((m for m in MODES if getattr(args, m, False)), "sweep")
    name, shapes, tiles, algorithms, layout = MODES[mode]
    if args.dtype != "fp32":
        if mode not in ANY_DTYPE:
            p.error(f"--dtype {args.dtype}: only with --retrace, --retrace-short, "
                    "--retrace-rows, --abound or --narrow")
        name = name.replace(".csv", f"_{args.dtype}.csv")
    if args.shapes:
        shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes]
    elif args.quick:
        shapes = QUICK_SHAPES
    with open(Path(args.out) / name, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()

        def emit(row):  # rows as they come: a sweep cut short keeps what it timed
            writer.writerow(row)
            f.flush()
            print(*row.values(), flush=True)

        sweep(emit, shapes, algorithms, check=args.check, tiles=tiles, forced_layout=layout,
              dtype=args.dtype)


if __name__ == "__main__":
    main()
