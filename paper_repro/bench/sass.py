"""What the kernels compile to for the H200 (sm_90), without a GPU: registers, instructions,
warp shuffles, block barriers, layout conversions through shared memory and 128-bit loads per
kernel and tile, from Triton's compiler and the ``cuobjdump`` its wheel ships.

    python -m paper_repro.bench.sass [--out data/h200/sass_counts.csv] [--quick] [--caps]
        [--masked] [--words] [--runs16] [--carry] [--mixed] [--walks] [--reduce COMMIT]

The counts belong to the installed Triton (recorded in each row): put the GPU's version first
on ``PYTHONPATH`` to explain its timings. ``data/h200/sass_counts.csv`` (Triton 3.6) shows the
reverse scan's lane reversal: several times the shuffles of a forward scan of the same tile.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

INTS = {"B", "T", "n_seg", "seg_len", "stride_b", "stride_t", "out_stride_b", "out_stride_t",
        "A", "stride3_b", "stride3_t", "stride3_a"}
UNALIGNED = {"B", "n_seg", "A"}  # sizes: not assumed multiples of 16
# the plain calls of the benchmarks: truncation flags, next values for TD(lambda), nothing else
CONSTEXPRS = {"HAS_TRUNC": True, "HAS_NEXT": True, "REVERSE": True}
# (BLOCK_B, BLOCK_T, num_warps, PHASE, PREFETCH, time-major)
# Then one tile a program as ONE_TILE (PHASE 5) beside the same tiles walked as a segment
# (PHASE 0, the second row): the one-tile rows of 4096 x 128 and of 64 x 512; last, the few
# long rows' one-warp look-back tile, compile-time (PHASE 3) and walked (6).
TILES = [(1, 512, 2, 0, True, False), (4, 128, 2, 0, False, False), (1, 1024, 4, 3, False, False),
         (16, 32, 4, 0, False, True), (32, 16, 1, 2, False, True), (4, 128, 2, 5, False, False),
         (1, 512, 4, 0, False, False), (1, 512, 4, 5, False, False),
         (1, 1024, 1, 3, False, False), (1, 1024, 1, 6, False, False)]
COLUMNS = ["triton", "kernel", "BLOCK_B", "BLOCK_T", "num_warps", "phase", "prefetch",
           "time_major", "flip", "registers", "instructions", "shuffles", "barriers",
           "layout_conversions", "loads", "vector_loads", "loads_in_scan"]
# Shipped tiles under register caps (Triton's maxnreg; 0: uncapped): the fp32 look-back's
# two-warp tile, then tiles whose registers bound the programs an SM, for later probes:
# Retrace's one-warp look-back, V-trace's four-warp one, and the fp32 time-major tiles in
# interleaved runs (segment look-back over 32 x 128, two passes over 32 x 32).
CAPS = (0, 64, 72, 80, 88, 96)
CAP_TILE = (1, 1024, 2, 3, False, False)
WIDE_CAPS = (0, 96, 128, 168, 192)
CAP_CASES = [(name, CAP_TILE, 0 if name == "eligibility_traces" else 4, CAPS)
             for name in ("eligibility_traces", "lambda_returns", "gae", "affine_scan")] + [
    ("retrace", (1, 256, 1, 3, False, False), 4, (0, 96, 112, 128)),
    ("vtrace", (1, 1024, 4, 3, False, False), 4, (0, 80, 96)),
    *[(name, (32, 128, 4, 4, False, True), -8, WIDE_CAPS)
      for name in ("lambda_returns", "gae", "eligibility_traces")],
    ("vtrace", (32, 128, 4, 3, False, True), -8, WIDE_CAPS),
    *[(name, (32, 32, 1, phase, False, True), -8, (0, 128, 168))
      for name in ("lambda_returns", "gae") for phase in (1, 2)]]
CAP_COLUMNS = ["triton", "kernel", "BLOCK_B", "BLOCK_T", "num_warps", "phase", "time_major",
               "flip", "max_registers", "registers", "instructions", "local_loads",
               "local_stores"]


def kernels() -> dict:
    from paper_repro.kernels import (
        affine_scan,
        eligibility_traces,
        gae,
        lambda_returns,
        retrace,
        vtrace,
    )

    return {"gae": gae.gae_fwd_kernel, "lambda_returns": lambda_returns.returns_fwd_kernel,
            "vtrace": vtrace.vtrace_fwd_kernel, "retrace": retrace.retrace_fwd_kernel,
            "eligibility_traces": eligibility_traces.decayed_sum_fwd_kernel,
            "affine_scan": affine_scan.affine_scan_kernel}


def _signature(kernel, tile, flip, align=None, fp64=False):
    """Triton's signature, constexprs and 16-byte alignments for fp32 inputs laid out like
    the benchmarks' (time contiguous unless time-major; actions contiguous). ``align``: the
    contiguous axis's extent and the other strides are not multiples of 16, and the kernels'
    ``ALIGN`` says what they are instead (``_launch.alignment``). ``fp64``: fp64 inputs,
    scalars and scans, the mask (``m_ptr``) bool."""
    import triton.language as tl

    BLOCK_B, BLOCK_T, _, phase, prefetch, time_major = tile
    unit = {"stride3_a", "stride_b" if time_major else "stride_t",
            "out_stride_b" if time_major else "out_stride_t"}
    tiles = dict(ACC=tl.float64 if fp64 else tl.float32, PHASE=phase, BLOCK_B=BLOCK_B,
                 BLOCK_T=BLOCK_T, PREFETCH=prefetch, FLIP=flip, ALIGN=align or 0)
    sig, const = {}, {}
    for name, p in zip(kernel.arg_names, kernel.params):
        if p.is_constexpr:
            sig[name], const[name] = "constexpr", tiles.get(name, CONSTEXPRS.get(name, False))
        elif name in unit:
            sig[name], const[name] = "constexpr", 1
        elif name.endswith("_ptr"):
            # the look-backs' scratch (PHASE 3, 4, 6) is int32 words, the two passes' fp32
            words = {"status_ptr": "*i32", "act_ptr": "*i64",
                     "agg_ptr": "*i32" if phase >= 3 else "*fp32"}
            values = ("*i1" if name == "m_ptr" else "*fp64") if fp64 else "*fp32"
            sig[name] = words.get(name, values)
        else:
            sig[name] = "i32" if name in INTS else "fp64" if fp64 else "fp32"
    # Time-major rows are the contiguous axis: the benchmarks' batch sizes are multiples of 16,
    # which Triton specialises on, so their loads vectorise along the rows.
    unaligned = UNALIGNED - {"B"} if time_major else UNALIGNED
    if align is not None:
        unaligned = unaligned | ({"B", "stride_t", "out_stride_t"} if time_major
                                 else {"T", "stride_b", "out_stride_b"})
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
               if sig[name].startswith("*") or (sig[name] == "i32" and name not in unaligned)}
    return sig, const, aligned


def counts(kernel, tile, flip=0, maxnreg=0, align=None, fp64=False) -> dict:
    """Compile ``kernel`` for sm_90 with ``tile`` (registers capped at ``maxnreg`` where set;
    ``align``, ``fp64``: see ``_signature``) and count what its SASS does per launch
    (``compiled_counts``)."""
    sig, const, aligned = _signature(kernel, tile, flip, align, fp64)
    options = {"num_warps": tile[2], **({"maxnreg": maxnreg} if maxnreg else {})}
    return sm90_counts(kernel, sig, const, aligned, options)


def sm90_counts(kernel, signature: dict, constexprs: dict, aligned: dict, options: dict) -> dict:
    """Compile ``kernel`` for sm_90 and count its SASS: registers, the stack frame in bytes
    (``stack_bytes``: where spilled registers live), instructions, warp shuffles, block
    barriers, layout conversions through shared memory (TTGIR), loads, 128-bit loads,
    ``local_loads``/``local_stores`` (spills), ``l2_prefetches`` (bulk or a line each) and
    ``loads_in_scan``: global loads issued between the first warp shuffle (the scan's) and the
    first store, which the scan may wait on (in a look-back, its reads of the predecessors'
    words among them)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    compiled = triton.compile(ASTSource(kernel, signature, constexprs, aligned),
                              target=GPUTarget("cuda", 90, 32), options=options)
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        Path(cubin).write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", cubin], capture_output=True,
                              text=True, check=True).stdout
        usage = subprocess.run([str(tools / "cuobjdump"), "--dump-resource-usage", cubin],
                               capture_output=True, text=True, check=True).stdout
    lines = [x.split("*/", 1)[1].strip() for x in sass.splitlines()
             if x.strip().startswith("/*") and ";" in x and "*/" in x]
    # the opcode, after a predicate guard (``@P0``) if there is one
    words = [x.split() for x in lines if x]
    opcodes = [(w[1] if w[0].startswith("@") and len(w) > 1 else w[0]).split(".")[0]
               for w in words]
    ops = Counter(opcodes)
    resources = dict(w.split(":", 1) for w in usage.split() if ":" in w and w[0].isupper())
    first_shuffle = opcodes.index("SHFL") if "SHFL" in opcodes else len(opcodes)
    first_store = opcodes.index("STG", first_shuffle) if "STG" in opcodes[first_shuffle:] else None
    return {"registers": int(resources["REG"]) if "REG" in resources else "",
            "stack_bytes": int(resources.get("STACK", 0)), "instructions": len(lines),
            "shuffles": ops["SHFL"], "barriers": ops["BAR"],
            "layout_conversions": compiled.asm["ttgir"].count("ttg.convert_layout"),
            "loads": ops["LDG"], "vector_loads": sum("LDG.E.128" in x for x in lines),
            "local_loads": ops["LDL"], "local_stores": ops["STL"],
            "l2_prefetches": ops["UBLKPF"] + ops["CCTL"],
            "loads_in_scan": opcodes[first_shuffle:first_store].count("LDG")}


def rows(quick=False):
    import triton

    for name, kernel in kernels().items():
        backward = name != "eligibility_traces"
        for tile in TILES[:2] if quick else TILES:
            for flip in (0, 1, 4) if backward else (0,):
                yield {"triton": triton.__version__, "kernel": name,
                       **dict(zip(COLUMNS[2:9], (*tile, flip))), **counts(kernel, tile, flip)}


# The launches whose first sweep only reduces (``affine_scan.reduce_tile``): time-major 32-env
# tiles in interleaved runs, reducing (PHASE 1) and the segment look-back (4), and the few long
# rows' 2048-step reduce, under the kernels on ``sys.path`` (sass_reduce.csv: two trees).
REDUCE_CASES = [(name, (32, 128, 4, phase, False, True), -8)
                for name in ("lambda_returns", "gae", "eligibility_traces", "vtrace")
                for phase in (1, 4)] + \
    [(name, (32, 32, 1, 1, False, True), -8) for name in ("lambda_returns", "gae")] + \
    [(name, (1, 2048, 4, 1, False, False), 0 if name == "eligibility_traces" else 4)
     for name in ("lambda_returns", "gae", "eligibility_traces", "affine_scan")]
REDUCE_COLUMNS = ["commit"] + COLUMNS[:9] + ["registers", "instructions", "shuffles", "barriers",
                                             "loads"]


def reduce_rows(commit: str = ""):
    import triton

    for name, tile, flip in REDUCE_CASES:
        yield {"commit": commit, "triton": triton.__version__, "kernel": name,
               **dict(zip(COLUMNS[2:9], (*tile, flip))), **counts(kernels()[name], tile, flip)}


def cap_rows(cases=None):
    """Each case of ``CAP_CASES`` (kernel, tile, flip, caps) compiled under each of its caps."""
    import triton

    for name, tile, flip, caps in cases or CAP_CASES:
        BLOCK_B, BLOCK_T, warps, phase, _, time_major = tile
        for cap in caps:
            c = counts(kernels()[name], tile, flip, cap)
            yield {"triton": triton.__version__, "kernel": name, "BLOCK_B": BLOCK_B,
                   "BLOCK_T": BLOCK_T, "num_warps": warps, "phase": phase,
                   "time_major": time_major, "flip": flip, "max_registers": cap,
                   **{k: c[k] for k in CAP_COLUMNS[9:]}}


# Masked GAE's fused kernel at the tiles masked_tile ships (BLOCK_B, BLOCK_T, warps, _,
# PREFETCH, time-major) and FLIP: batch-major rows of 1024+ steps, 4096 x 128, two 1024-step
# rows, as lanes latest step first (1) and as runs of 4 (shipped), each with and without the
# next tile's loads in flight; the long walks' 2048 x 4 and 4096 x 8 tiles and the 4096 x 4
# one they beat; time-major lanes, with and without prefetch, and the 16 x 128 tile in
# interleaved runs of 4 (INTERLEAVED_TILE), the same; then fp64 (bool mask) in the shipped
# 1 x 1024 tile and the two wider ones, which spill there.
MASKED_TILES = [(1, 1024, 4, 0, p, False, f) for f in (1, 4) for p in (False, True)] + [
    (8, 128, 4, 0, p, False, f) for f in (1, 4) for p in (False, True)] + [
    (2, 1024, 8, 0, True, False, 4), (1, 2048, 4, 0, True, False, 4),
    (1, 4096, 8, 0, True, False, 4), (1, 4096, 4, 0, True, False, 4)] + [
    (16, 16, 1, 0, p, True, 1) for p in (False, True)] + [
    (16, 128, 4, 0, p, True, -4) for p in (False, True)]
MASKED_FP64_TILES = [(1, 1024, 4, 0, True, False, 2), (1, 2048, 4, 0, True, False, 2),
                     (1, 4096, 8, 0, True, False, 2)]
MASKED_COLUMNS = COLUMNS + ["local_loads", "local_stores", "dtype"]


def masked_rows():
    import triton

    from paper_repro.kernels.masked_gae import masked_gae_kernel

    for fp64, tiles in ((False, MASKED_TILES), (True, MASKED_FP64_TILES)):
        for *tile, flip in tiles:
            yield {"triton": triton.__version__, "kernel": "masked_gae",
                   **dict(zip(COLUMNS[2:9], (*tile, flip))),
                   **counts(masked_gae_kernel, tuple(tile), flip, fp64=fp64),
                   "dtype": "fp64" if fp64 else "fp32"}


# Retrace's batch-major tiles reading 4 actions a step as 64-bit words (BLOCK_B, BLOCK_T, warps,
# PHASE, PREFETCH, time-major): the 512-step walk, the 2-warp walk, a one-tile row, the look-back;
# each with its words read by tl.load (WORDS 0), a word a load (1) and a pair a load (2, fp32).
WORD_TILES = [(1, 512, 4, 0, False, False), (1, 256, 2, 0, False, False),
              (1, 128, 1, 5, False, False), (1, 256, 1, 3, False, False)]
WORD_COLUMNS = COLUMNS + ["dtype", "words"]


def retrace_constexprs(half: bool, words: int) -> dict:
    """Retrace's compile-time arguments for four actions a step read as words (``words`` as
    ``retrace.word_loads``), 16-bit values where ``half``."""
    import triton.language as tl

    return dict(N_ACT=4, PACK=4 if half else 2, VAL=tl.bfloat16 if half else tl.float32,
                WORDS=words)


def half_signature(name: str, tile, flip: int, half: bool, constexprs: dict):
    """``_signature`` of kernel ``name`` compiled with ``constexprs`` and, where ``half``, the
    roofline's bf16 inputs: 16-bit value pointers, bool flags."""
    saved = dict(CONSTEXPRS)
    CONSTEXPRS.update(constexprs)
    try:
        sig, const, aligned = _signature(kernels()[name], tile, flip)
    finally:
        CONSTEXPRS.clear()
        CONSTEXPRS.update(saved)
    for k in sig:
        if half and sig[k] == "*fp32" and k != "agg_ptr":
            sig[k] = "*i1" if k in FLAG_POINTERS else mixed_pointer(k, "bf16")
    return sig, const, aligned


def retrace_counts(tile, flip: int, dtype: str, words: int) -> dict:
    """Batch-major Retrace compiled for sm_90 in ``tile`` (runs of ``flip`` steps) with four
    actions a step read as words, fed the roofline's ``dtype`` inputs: fp32 values and flags,
    or bf16 values and bool flags."""
    half = dtype == "bf16"
    signature = half_signature("retrace", tile, flip, half, retrace_constexprs(half, words))
    return sm90_counts(kernels()["retrace"], *signature, {"num_warps": tile[2]})


def word_rows():
    import triton

    for dtype in ("fp32", "bf16"):
        for tile in WORD_TILES:
            for words in (0, 1, 2) if dtype == "fp32" else (0, 1):
                yield {"triton": triton.__version__, "kernel": "retrace",
                       **dict(zip(COLUMNS[2:9], (*tile, 4))),
                       **retrace_counts(tile, 4, dtype, words), "dtype": dtype, "words": words}


# Retrace's bf16 batch-major tiles at the roofline's shapes as shipped (runs of 4 steps) and as
# ``rows16_ab`` times them in runs of 8 (16-byte loads of 16-bit values): ``arm``, B, T.
RUNS16_SHAPES = [(512, 4096), (64, 131072), (4096, 128), (32768, 32)]
RUNS16_COLUMNS = COLUMNS + ["local_loads", "local_stores", "B", "T", "arm", "dtype"]


def runs16_rows():
    import triton

    from paper_repro.bench.rows16_ab import forced_arms
    from paper_repro.kernels import _tiles

    for B, T in RUNS16_SHAPES:
        shipped = _tiles.choose_config(B, T, False, 132, True, True, 2)
        arms = {"shipped": shipped, **forced_arms(shipped, T, retrace=True)}
        for arm, c in arms.items():
            tile = (c.BLOCK_B, c.BLOCK_T, c.num_warps, launch_phase(c, T), False, False)
            yield {"triton": triton.__version__, "kernel": "retrace",
                   **dict(zip(COLUMNS[2:9], (*tile, c.flip))),
                   **retrace_counts(tile, c.flip, "bf16", 1), "B": B, "T": T, "arm": arm,
                   "dtype": "bf16"}


# Shipped tiles held as runs (``flip`` not 0 or 1) of five kernels at the roofline's shapes,
# batch-major and time-major, fp32 and bf16 (bool flags), each solved with the carry applied
# last or first (``affine_scan.RUNS_CARRY_FIRST``): kernel, B, T, time-major, itemsize.
CARRY_KERNELS = ("affine_scan", "gae", "lambda_returns", "vtrace", "retrace")
CARRY_SHAPES = [(64, 131072), (512, 4096), (4096, 128), (32768, 32)]
CARRY_COLUMNS = COLUMNS + ["local_loads", "local_stores", "B", "T", "dtype", "carry_first"]


def carry_cases(kernels_=CARRY_KERNELS, shapes=CARRY_SHAPES):
    from paper_repro.bench.tile_probe import traits_of
    from paper_repro.kernels import _tiles

    for name in kernels_:
        traits = _tiles.TileTraits() if name == "affine_scan" else traits_of(name)
        wide, retrace = name in ("vtrace", "retrace"), name == "retrace"
        for time_major, itemsize in ((False, 4), (False, 2), (True, 4), (True, 2)):
            for B, T in shapes:
                c = _tiles.choose_config(B, T, time_major, 132, wide, retrace, itemsize, traits)
                if c.flip not in (0, 1):
                    yield name, c, B, T, time_major, itemsize


def carry_row(name, c, B, T, time_major, itemsize) -> dict:
    """The counts of ``carry_cases``' case in this process's arm
    (``affine_scan.RUNS_CARRY_FIRST``, fixed at import by ``PAPER_REPRO_RUNS_CARRY_FIRST``:
    0 carry last, 1 first, -1 the shipped rule)."""
    import triton

    from paper_repro.kernels import affine_scan

    half = itemsize == 2
    tile = (c.BLOCK_B, c.BLOCK_T, c.num_warps, launch_phase(c, T), False, time_major)
    constexprs = retrace_constexprs(half, 0 if time_major else 1) if name == "retrace" else {}
    options = {"num_warps": c.num_warps, **({"maxnreg": c.max_registers}
                                             if c.max_registers else {})}
    counted = sm90_counts(kernels()[name], *half_signature(name, tile, c.flip, half, constexprs),
                          options)
    return {"triton": triton.__version__, "kernel": name,
            **dict(zip(COLUMNS[2:9], (*tile, c.flip))), **counted, "B": B, "T": T,
            "dtype": "bf16" if half else "fp32",
            "carry_first": int(affine_scan.RUNS_CARRY_FIRST)}


def carry_rows():
    """Each case under both arms, each arm compiled in a process of its own (the flag is a
    compile-time constant Triton's cache does not key on)."""
    import json
    import sys

    arms = []
    for first in ("0", "1"):
        env = dict(os.environ, PAPER_REPRO_RUNS_CARRY_FIRST=first)
        env.pop("TRITON_INTERPRET", None)
        out = subprocess.run([sys.executable, "-m", "paper_repro.bench.sass", "--carry-arm"],
                             env=env, capture_output=True, text=True, check=True).stdout
        arms.append([json.loads(x) for x in out.splitlines() if x.startswith("{")])
    for last, first in zip(*arms):
        yield last
        yield first


# Time-major shapes of the mixed-dtype rows: each estimator's tiles for fp32 inputs, for fp32
# outputs of narrower loads (``_launch.narrow_loads``), fp32 tiles loading them four envs a load
# (``_launch.four_loads``; all-16-bit rows stored so too) and 16-bit tiles, fed what each
# serves: fp32 inputs, mixed (16-bit values, fp32 rewards and seeds, fp32 outputs), bool flags
# beside fp32 values, all 16-bit; where the fp32 tile is 16 envs wide, all-16-bit rows in
# ``mixed_ab``'s 32-env tiles too (tile ``wide``, ``wide_runs``, ``wide_look_back``).
MIXED_SHAPES = [(4096, 128), (32768, 32), (2048, 1024), (512, 4096), (64, 131072)]
MIXED_KERNELS = ("gae", "lambda_returns", "vtrace", "eligibility_traces", "retrace")
MIXED_TILES = {"fp32": ("fp32", "mixed", "bool_flags"), "narrow": ("mixed", "bool_flags"),
               "fours": ("mixed", "bool_flags", "bf16"), "16bit": ("bf16",)}
MIXED_COLUMNS = COLUMNS + ["local_loads", "local_stores", "B", "T", "tile", "dtype"]
FP32_POINTERS = {"r_ptr", "seed_ptr", "out_ptr", "adv_ptr", "agg_ptr"}
FLAG_POINTERS = {"term_ptr", "trunc_ptr", "done_ptr", "done2_ptr"}


def mixed_pointer(name: str, dtype: str) -> str | None:
    """A pointer's type in the mixed rows' ``dtype``, None where it stays ``*fp32``."""
    if dtype == "bool_flags":
        return "*i1" if name in FLAG_POINTERS else None
    if dtype == "bf16" or (dtype == "mixed" and name not in FP32_POINTERS):
        return "*bf16"
    return None


def launch_phase(config, T: int) -> int:
    """The PHASE a launch of ``config`` over ``T`` steps compiles (``affine_scan.Launch``: the
    one-tile look-back compile-time)."""
    if config.single_pass:
        return 3 if config.seg_len == config.BLOCK_T else 4
    return 5 if T <= config.BLOCK_T else 0 if config.seg_len >= T else 2


def mixed_rows():
    from paper_repro.bench.mixed_ab import wide_tiles
    from paper_repro.kernels import _tiles

    for name in MIXED_KERNELS:
        wide, retrace = name in ("vtrace", "retrace"), name == "retrace"
        for B, T in MIXED_SHAPES:
            for tile_name, dtypes in MIXED_TILES.items():
                if tile_name == "fours" and "FOURS_BELOW" not in kernels()[name].arg_names:
                    continue
                c = _tiles.choose_config(B, T, True, 132, wide, retrace,
                                         2 if tile_name == "16bit" else 4,
                                         narrow_loads=tile_name == "narrow")
                for dtype in dtypes:
                    half = dtype in ("mixed", "bf16")
                    if retrace and tile_name == "fours" and half:
                        continue  # Retrace's values keep the 16-bit tile (``values=False``)
                    yield mixed_row(name, c, B, T, tile_name, dtype)
                    if tile_name == "fours" and dtype == "bf16":
                        # 32-env tiles where the fp32 tile is 16 envs wide (``mixed_ab``'s arms)
                        for arm, wide_c in wide_tiles(c).items():
                            yield mixed_row(name, wide_c, B, T, arm, dtype)


def mixed_row(name: str, c, B: int, T: int, tile_name: str, dtype: str) -> dict:
    """The counts of estimator ``name``'s time-major kernel in tile ``c`` over ``B`` x ``T``,
    fed ``dtype`` (``mixed_pointer``); loads four envs a load where ``tile_name`` is not the
    fp32, narrow or 16-bit tile."""
    import triton
    import triton.language as tl

    from paper_repro.kernels.retrace import unrolled_actions

    kernel, retrace, half = kernels()[name], name == "retrace", dtype in ("mixed", "bf16")
    tile = (c.BLOCK_B, c.BLOCK_T, c.num_warps, launch_phase(c, T), False, True)
    saved = dict(CONSTEXPRS)
    # loads (and 16-bit stores) narrower than the tile's fp32, or 1-byte flags
    fours = tile_name not in ("fp32", "narrow", "16bit")
    CONSTEXPRS.update(FOURS_BELOW=fours * (32 if half else 16))
    if retrace:  # four actions a step as time-major words, by tl.load
        CONSTEXPRS.update(N_ACT=unrolled_actions(4, c, T), PACK=4 if half else 2,
                          VAL=tl.bfloat16 if half else tl.float32, WORDS=0)
    try:
        sig, const, aligned = _signature(kernel, tile, c.flip)
    finally:
        CONSTEXPRS.clear()
        CONSTEXPRS.update(saved)
    for k in sig:
        if sig[k] == "*fp32" and k != "agg_ptr":
            sig[k] = mixed_pointer(k, dtype) or sig[k]
    return {"triton": triton.__version__, "kernel": name,
            **dict(zip(COLUMNS[2:9], (*tile, c.flip))),
            **sm90_counts(kernel, sig, const, aligned, {"num_warps": c.num_warps}),
            "B": B, "T": T, "tile": tile_name, "dtype": dtype}


# V-trace's batch-major walks (sass_walks.csv): 512-step tiles in 2 warps and 1024-step ones in 4,
# as shipped (prefetching, runs of 4), with and without truncations (and their bootstrap values),
# and as PufferLib's advantage launches them (the ratios read, Delta alone stored, no truncations).
WALK_TILES = ((1, 512, 2, 0, True, False), (1, 1024, 4, 0, True, False))
WALK_LAUNCHES = (("vtrace", dict(HAS_TRUNC=False, HAS_BOOT=False)),
                 ("vtrace", dict(HAS_TRUNC=True, HAS_BOOT=True)),
                 ("puff_advantage", dict(HAS_TRUNC=False, HAS_BOOT=True, RATIO=True, DIFF=True)))
WALK_COLUMNS = ["triton", "kernel", "launch", "truncations", "BLOCK_T", "num_warps", "registers",
                "stack_bytes", "instructions", "loads", "resident_programs"]
SM90_REGISTERS = 65536  # a multiprocessor's register file


def resident_programs(registers: int, num_warps: int) -> int:
    """How many programs of ``num_warps`` warps at ``registers`` a thread fit an sm_90
    multiprocessor's register file (allocated 8 registers a thread at a time)."""
    return SM90_REGISTERS // (-(-registers // 8) * 8 * 32 * num_warps)


def walk_rows():
    import triton

    saved = dict(CONSTEXPRS)
    try:
        for launch, constexprs in WALK_LAUNCHES:
            CONSTEXPRS.clear()
            CONSTEXPRS.update(saved, **constexprs)
            for tile in WALK_TILES:
                c = counts(kernels()["vtrace"], tile, 4)
                yield {"triton": triton.__version__, "kernel": "vtrace", "launch": launch,
                       "truncations": constexprs["HAS_TRUNC"], "BLOCK_T": tile[1],
                       "num_warps": tile[2], **c,
                       "resident_programs": resident_programs(c["registers"], tile[2])}
    finally:
        CONSTEXPRS.clear()
        CONSTEXPRS.update(saved)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None,
                   help="default data/h200/sass_counts.csv (with --caps: sass_caps.csv)")
    p.add_argument("--quick", action="store_true", help="two tiles a kernel")
    p.add_argument("--caps", action="store_true",
                   help="registers and spills of the look-back's tile under register caps")
    p.add_argument("--masked", action="store_true",
                   help="masked GAE's fused kernel at its tiles (default out: sass_masked.csv)")
    p.add_argument("--words", action="store_true",
                   help="Retrace's words by tl.load or assembly (default out: sass_words.csv)")
    p.add_argument("--runs16", action="store_true",
                   help="Retrace's bf16 tiles in runs of 4 and 8 (default out: sass_runs16.csv)")
    p.add_argument("--carry", action="store_true",
                   help="tiles held as runs, the carry applied last or first "
                        "(default out: sass_carry.csv)")
    p.add_argument("--carry-arm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reduce", metavar="COMMIT", default=None,
                   help="the reducing sweeps' tiles, rows labelled COMMIT "
                        "(default out: sass_reduce.csv)")
    p.add_argument("--mixed", action="store_true",
                   help="time-major tiles fed 16-bit values into fp32 outputs "
                        "(default out: sass_mixed.csv)")
    p.add_argument("--walks", action="store_true",
                   help="V-trace's batch-major walks with and without truncations, and as "
                        "PufferLib's advantage launches them "
                        "(default out: sass_walks.csv)")
    args = p.parse_args(argv)
    if args.carry_arm:  # one arm of --carry, as JSON lines
        import json
        for case in carry_cases():
            print(json.dumps(carry_row(*case)), flush=True)
        return
    name = "sass_caps" if args.caps else "sass_masked" if args.masked else \
        "sass_words" if args.words else "sass_runs16" if args.runs16 else \
        "sass_carry" if args.carry else "sass_reduce" if args.reduce is not None else \
        "sass_mixed" if args.mixed else "sass_walks" if args.walks else "sass_counts"
    out = args.out or f"data/h200/{name}.csv"
    columns, produce = (CAP_COLUMNS, cap_rows) if args.caps else \
        (MASKED_COLUMNS, masked_rows) if args.masked else \
        (WORD_COLUMNS, word_rows) if args.words else \
        (RUNS16_COLUMNS, runs16_rows) if args.runs16 else \
        (CARRY_COLUMNS, carry_rows) if args.carry else \
        (REDUCE_COLUMNS, lambda: reduce_rows(args.reduce)) if args.reduce is not None else \
        (MIXED_COLUMNS, mixed_rows) if args.mixed else \
        (WALK_COLUMNS, walk_rows) if args.walks else (COLUMNS, lambda: rows(args.quick))
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in produce():
            w.writerow(row)
            f.flush()


if __name__ == "__main__":
    main()
