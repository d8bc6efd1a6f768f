"""Long-row probe: few long rows under the shipped tile against look-back and two-pass
candidates held as runs of steps, fp32 and bf16, batch-major.

    python -m paper_repro.bench.long_probe [lookback|segment] [warm I/K] >> data/h200/long_probe.csv
    python -m paper_repro.bench.long_probe sixteen >> data/h200/long16.csv

Lines: ``algorithm, num_envs, seq_len, dtype, tile, device_us, max_abs_diff`` (the tile as
``BLOCK_B x BLOCK_T x warps / seg<steps> / lb (look-back) or tp (two passes) / r<run>``; the
difference is from the shipped tile's answer). ``lookback``: the look-back's tile and warps
instead, fp32, at the shapes it serves; ``segment``: the look-back over segments of several
tiles (``lb`` with seg > BLOCK_T) beside two passes over the same segments. ``warm I/K``
compiles share I of K without timing, so parallel processes fill Triton's cache first.
``sixteen``: 16-bit rows (bf16 with bool flags, fp16 with fp16 flags; fp32 shipped beside
them) in two passes over segments of 8 tiles, and Retrace's look-back tiles; its lines carry
the flags' kind after the dtype.

    python -m paper_repro.bench.long_probe words [warm I/K] >> data/h200/words_probe.csv

``words``: the look-back's tiles again once it published self-validating words: Retrace's
batch-major and time-major tiles, up to four long rows and 16-bit rows in look-back against
their two passes, the fp32 look-back's tile and warps (as ``lookback``), fp32 time-major
32-row segments against one-tile look-back. Its lines carry
the layout and the flags' kind after the dtype.

    python -m paper_repro.bench.long_probe segwords [warm I/K] >> data/h200/segwords.csv

``segwords``: look-backs over segments of 2 to 16 tiles (PHASE 4), whose window of
predecessors is read in one round since words, beside the shipped tiles: time-major 512x4096
and 64x131072, up to four fp32 long rows, bf16 prefix sums, eligibility traces and GAE.

    PAPER_REPRO_LOOKBACK_ROW_WINDOW=W python -m paper_repro.bench.long_probe segwindow \
        [warm I/K] >> data/h200/segwindow.csv

``segwindow``: the segment look-backs of up to four fp32 long rows under a one-row window of W
predecessors, its tile label ending ``/w<W>`` (and ``/lastfirst`` under
``PAPER_REPRO_SECOND_PASS_LAST_FIRST=1``, the two passes' second taking its segments last
first).

    python -m paper_repro.bench.long_probe neighbour [warm I/K] >> data/h200/neighbour_probe.csv

``neighbour``: once the neighbouring step came from registers, the forward scans' long-row
tiles again (16-bit and up to four fp32 rows: two passes against look-back) and time-major
64x131072 segments of 2 and 4 tiles.

    python -m paper_repro.bench.long_probe narrow [warm I/K] >> data/h200/narrow_probe.csv

``narrow``: fp32 time-major tiles four or eight envs wide (one 16-byte load or one sector a
step) and 32 to 1024 steps tall, in interleaved runs: one pass, two passes and look-backs at
512x4096, 64x131072, 4096x128 and 32768x32.

    python -m paper_repro.bench.long_probe PROBE [warm I/K] >> data/h200/registers.csv

with PROBE one of registers, registers-wide, registers-check, registers-more, registers-tiles,
registers-rows.

Tiles under register caps (Triton's ``maxnreg``): ``registers`` the fp32 look-back,
``registers-wide`` the other tiles whose registers bound the programs an SM, and
``registers-check`` and ``registers-more`` the shipped tiles against themselves uncapped,
``registers-tiles`` other capped look-back tiles at 64x131072, ``registers-rows`` the
one-warp look-back capped at the fewest rows.

    python -m paper_repro.bench.long_probe cold-tiles [warm I/K] >> data/h200/cold_tiles.csv

``cold-tiles``: 512x4096 rows in walked tiles of 512-4096 steps and a one-tile look-back, each
timed twice: inputs in L2 across repeats, and read from DRAM (tile label ending ``/cold``).

    python -m paper_repro.bench.long_probe order-tiles [warm I/K] >> data/h200/order_tiles.csv

``order-tiles``: the fp32 look-back's tiles at 64x131072 again once programs took their place
from the launch index.

    python -m paper_repro.bench.long_probe split-NAME [warm I/K] >> data/h200/split_rows.csv

with NAME one of rows, wide, more, long, check, trunc, twopass, tile.

``split-rows``: a few hundred rows of 2048-8192 steps, walked against split across programs;
``split-wide`` (same file): V-trace and GAE rows of 8192-65536 steps, whose half-size tiles
take V-trace to two passes, against look-back and rows walked whole; ``split-more`` where
those rules stop (up to four rows, fp64, V-trace's shorter rows); ``split-long`` the winners of
``split-more`` carried to longer and shorter rows, more rows and fp64 shapes; ``split-check``
the rules taken from them against the tiles they replaced, where those were not timed;
``split-trunc`` the same for the truncated variant, whose tile labels end in ``/trunc``;
``split-twopass`` other segments and tiles for the two passes that four rows of 2**22 keep;
``split-tile`` 2048-step tiles for those two passes, for every estimator that keeps them.
"""
from __future__ import annotations

import sys

SHAPES = [(64, 131072), (16, 524288), (4, 1048576), (1, 4194304)]
ALGORITHMS = ["discounted_returns", "gae", "prefix_sum", "vtrace"]


def candidates(algorithm: str, dtype: str) -> list:
    """None (the shipped tile), two passes over 2-8 tiles a segment, the one-tile look-back."""
    from paper_repro.kernels import _launch as L

    run = 4 if dtype == "fp32" else 8
    out = [None] + [L.ScanConfig(1, bt, w, k * bt, flip=run)
                    for bt, w in ((2048, 4), (1024, 4), (4096, 8)) for k in (2, 4, 8)]
    out.append(L.ScanConfig(1, 2048, 4, 2048, True, flip=run))
    if algorithm == "vtrace":
        out += [L.ScanConfig(1, 512, 1, 512, True, flip=run),
                L.ScanConfig(1, 1024, 4, 2 * 1024, flip=run)]
    return out


LOOKBACK_SHAPES = [(64, 131072), (16, 524288)]
LOOKBACK_ALGORITHMS = ["discounted_returns", "lambda_returns", "gae", "prefix_sum",
                       "eligibility_traces", "vtrace"]


def lookback_candidates(algorithm: str, dtype: str) -> list:
    """None (the shipped tile), then one-tile look-back programs of 512 to 4096 steps in 1 to
    16 warps, backward ones in runs of 4."""
    from paper_repro.kernels import _launch as L

    run = 0 if algorithm in ("prefix_sum", "eligibility_traces") else 4
    return [None] + [L.ScanConfig(1, bt, w, bt, True, flip=run) for bt, w in
                     ((512, 1), (1024, 2), (1024, 4), (2048, 4), (2048, 8), (4096, 8),
                      (4096, 16))]


def segment_candidates(algorithm: str, dtype: str) -> list:
    """None (the shipped tile), then look-back programs over segments of 2 to 8 tiles (PHASE
    4) beside two passes over the same segments, backward ones in runs of 4."""
    from paper_repro.kernels import _launch as L

    run = 0 if algorithm in ("prefix_sum", "eligibility_traces") else 4
    return [None] + [L.ScanConfig(1, bt, w, k * bt, lb, flip=run)
                     for bt, w in ((1024, 4), (2048, 8)) for k in (2, 4, 8) for lb in (True, False)]


SIXTEEN_SHAPES = [(64, 131072), (16, 524288)]
SIXTEEN_ALGORITHMS = ["discounted_returns", "prefix_sum", "eligibility_traces", "lambda_returns",
                      "gae", "vtrace"]
RETRACE_SHAPES = [(64, 131072), (16, 524288), (4, 1048576)]


def sixteen_items() -> list:
    """``(algorithm, N, T, dtype, flags, tile)`` of the 16-bit probe, in its order."""
    from paper_repro.kernels import _launch as L

    S = L.ScanConfig
    two_pass = [S(1, 2048, 4, 16384, flip=8), S(1, 1024, 4, 8192, flip=8),
                S(1, 2048, 4, 8192, flip=8), S(1, 2048, 8, 16384, flip=8),
                S(1, 4096, 8, 16384, flip=8)]
    look_back = [S(1, 1024, 4, 1024, True, flip=4), S(1, 512, 2, 512, True, flip=4)]
    items = []
    for a in SIXTEEN_ALGORITHMS:
        for n, t in SIXTEEN_SHAPES:
            for dt, fl in (("fp32", "float"), ("bf16", "bool"), ("fp16", "float")):
                items += [(a, n, t, dt, fl, c) for c in [None] + (two_pass if dt != "fp32" else [])]
    for n, t in RETRACE_SHAPES:
        for dt, fl in (("fp32", "float"), ("bf16", "float"), ("fp16", "float"), ("bf16", "bool")):
            items += [("retrace", n, t, dt, fl, c)
                      for c in [None] + (look_back if dt != "fp32" else [])]
    return items


def _tm_run(BLOCK_B: int, BLOCK_T: int, warps: int) -> int:
    from paper_repro.kernels import _launch as L

    return L._interleaved(BLOCK_B, BLOCK_T, warps, 4)


def words_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``words`` probe, in its order."""
    from paper_repro.kernels import _launch as L

    S = L.ScanConfig
    items = []
    for n, t in RETRACE_SHAPES:
        items += [("retrace", n, t, "fp32", "NT", "float", c) for c in
                  [None] + [S(1, bt, w, bt, True, flip=4) for bt, w in
                            ((256, 1), (512, 1), (512, 2), (1024, 2), (2048, 4), (2048, 8))]]
    items += [("retrace", 64, 131072, "bf16", "NT", "float", c)
              for c in (None, S(1, 256, 1, 256, True, flip=4), S(1, 512, 2, 512, True, flip=4))]
    for n, t in ((64, 131072), (512, 4096)):
        items += [("retrace", n, t, "fp32", "TN", "float", c) for c in
                  [None] + [S(bb, bt, w, bt, True, _tm_run(bb, bt, w)) for bb, bt, w in
                            ((8, 32, 1), (16, 16, 1), (32, 16, 1), (16, 32, 2), (16, 64, 2),
                             (16, 128, 4))]]
    for a in ("discounted_returns", "prefix_sum", "lambda_returns", "gae", "vtrace"):
        run = 0 if a == "prefix_sum" else 4
        for n, t in ((4, 1048576), (1, 4194304)):
            items += [(a, n, t, "fp32", "NT", "float", c) for c in
                      [None] + [S(1, bt, w, bt, True, flip=run)
                                for bt, w in ((1024, 4), (2048, 4), (2048, 8))]]
    for a in ("discounted_returns", "prefix_sum", "eligibility_traces", "lambda_returns",
              "vtrace", "gae"):
        run = 0 if a in ("prefix_sum", "eligibility_traces") else 8
        items += [(a, 64, 131072, "bf16", "NT", "bool", c) for c in
                  [None] + [S(1, bt, w, bt, True, flip=run)
                            for bt, w in ((512, 1), (1024, 4), (2048, 4), (2048, 8))]]
    items += [("retrace", 1, 4194304, "fp32", "NT", "float", c) for c in
              (None, S(1, 256, 1, 256, True, flip=4), S(1, 512, 2, 512, True, flip=4))]
    for a in ("lambda_returns", "vtrace"):
        run = 8
        items += [(a, 16, 524288, "bf16", "NT", "bool", c) for c in
                  (None, S(1, 512, 1, 512, True, flip=run), S(1, 2048, 4, 2048, True, flip=run))]
        items += [(a, 64, 131072, "fp16", "NT", "float", c) for c in
                  (None, S(1, 512, 1, 512, True, flip=run), S(1, 2048, 4, 2048, True, flip=run))]
    items += [(a, n, t, "fp32", "NT", "float", c) for n, t in LOOKBACK_SHAPES
              for a in LOOKBACK_ALGORITHMS for c in lookback_candidates(a, "fp32")]
    for a in ("discounted_returns", "prefix_sum", "gae"):
        items += [(a, 64, 131072, "fp32", "TN", "float", c) for c in
                  (None, S(32, 128, 4, 128, True, _tm_run(32, 128, 4)),
                   S(16, 128, 4, 128, True, _tm_run(16, 128, 4)))]
    return items


def words16_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``words16`` probe."""
    from paper_repro.kernels import _launch as L

    items = []
    for a in SIXTEEN_ALGORITHMS:
        run = 0 if a in ("prefix_sum", "eligibility_traces") else 8
        for n, t, dt, fl in ((64, 131072, "bf16", "bool"), (16, 524288, "bf16", "bool"),
                             (64, 131072, "fp16", "float")):
            items += [(a, n, t, dt, "NT", fl, c) for c in
                      [None] + [L.ScanConfig(1, bt, w, bt, True, flip=run) for bt, w in
                                ((512, 1), (512, 2), (1024, 1), (1024, 2), (2048, 2), (4096, 4))]]
    return items


def segwords_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``segwords`` probe: segment
    look-backs (PHASE 4) now that a window of predecessors is read in one round, beside the
    shipped tiles and one-tile look-backs: time-major 512x4096 and 64x131072, up to four fp32
    long rows, and the 16-bit forward scans and GAE."""
    from paper_repro.kernels import _launch as L

    S = L.ScanConfig

    def tm(bb, bt, w, k):
        return S(bb, bt, w, k * bt, True, _tm_run(bb, bt, w))

    items = []
    for a in ("discounted_returns", "lambda_returns", "gae", "prefix_sum", "eligibility_traces",
              "vtrace"):
        tiles = ([(16, 32, 1, k) for k in (1, 4, 8)] + [(32, 16, 1, k) for k in (4, 8)] +
                 [(16, 64, 2, k) for k in (2, 4)] + [(16, 128, 4, k) for k in (1, 2)]
                 if a == "vtrace" else
                 [(32, 32, 1, k) for k in (1, 2, 4, 8, 16)] + [(16, 32, 1, k) for k in (4, 8)] +
                 [(32, 16, 1, k) for k in (4, 8)] + [(32, 128, 4, k) for k in (1, 2, 4)] +
                 [(16, 128, 4, k) for k in (1, 2)])
        items += [(a, 512, 4096, "fp32", "TN", "float", c)
                  for c in [None] + [tm(*x) for x in tiles]]
    for a in ("discounted_returns", "prefix_sum", "gae"):
        items += [(a, 64, 131072, "fp32", "TN", "float", c)
                  for c in [None] + [tm(32, 128, 4, k) for k in (1, 2, 4, 8)]]
    for a in ("discounted_returns", "prefix_sum", "lambda_returns", "gae", "vtrace"):
        run = 0 if a == "prefix_sum" else 4
        for n, t in ((4, 1048576), (1, 4194304)):
            items += [(a, n, t, "fp32", "NT", "float", c) for c in
                      [None] + [S(1, bt, w, k * bt, True, flip=run) for bt, w, k in
                                ((1024, 4, 2), (1024, 4, 4), (1024, 4, 8), (2048, 4, 2),
                                 (2048, 4, 4), (2048, 8, 4))]]
    for a, run in (("prefix_sum", 0), ("eligibility_traces", 0), ("gae", 8)):
        for n, t in ((64, 131072), (16, 524288))[:1 if a == "gae" else 2]:
            items += [(a, n, t, "bf16", "NT", "bool", c) for c in
                      [None] + [S(1, bt, w, k * bt, True, flip=run) for bt, w, k in
                                ((1024, 1, 2), (1024, 1, 4), (1024, 4, 4), (1024, 4, 8),
                                 (2048, 4, 2), (2048, 4, 4))]]
    return items


def segwindow_items() -> list:
    """``segwindow``: up to four fp32 long rows under the shipped tile and segment look-backs
    (PHASE 4) of 256 to 1024 segments a row, to be timed under several one-row windows
    (``PAPER_REPRO_LOOKBACK_ROW_WINDOW``): a window holding every predecessor reads them in
    one round instead of walking back a chain of windows."""
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels.affine_scan import SECOND_PASS_LAST_FIRST

    # the second pass's order changes only the shipped two passes
    tiles = () if SECOND_PASS_LAST_FIRST.value else (
        (1024, 4, 4), (1024, 4, 8), (1024, 4, 16), (2048, 4, 4), (2048, 4, 8), (2048, 8, 4))
    items = []
    for a in ("discounted_returns", "prefix_sum", "lambda_returns", "gae", "vtrace"):
        run = 0 if a == "prefix_sum" else 4
        for n, t in ((1, 4194304), (4, 1048576)):
            items += [(a, n, t, "fp32", "NT", "float", c) for c in
                      [None] + [L.ScanConfig(1, bt, w, k * bt, True, flip=run)
                                for bt, w, k in tiles]]
    return items


def neighbour_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``neighbour`` probe: the tiles
    the forward scans chose while their flag at t-1 was an unaligned load, again (16-bit and up
    to four fp32 long rows: two passes against look-back), and time-major 64x131072 in
    segments of 2 and 4 tiles for every estimator that takes segments there."""
    from paper_repro.kernels import _launch as L

    S = L.ScanConfig
    items = []
    for a in ("prefix_sum", "eligibility_traces"):
        for n, t, dt, fl in ((64, 131072, "bf16", "bool"), (16, 524288, "bf16", "bool"),
                             (64, 131072, "fp16", "float")):
            # runs of one 16-byte load, as the shipped tiles: the neighbour from registers
            items += [(a, n, t, dt, "NT", fl, c) for c in
                      [None] + [S(1, bt, w, bt, True, flip=8) for bt, w in
                                ((512, 1), (1024, 1), (1024, 2), (2048, 2), (2048, 4))]]
        for n, t in ((4, 1048576), (1, 4194304)):
            items += [(a, n, t, "fp32", "NT", "float", c) for c in
                      [None] + [S(1, bt, w, bt, True, flip=4) for bt, w in
                                ((1024, 4), (2048, 4), (2048, 8))]]
    for a in ("discounted_returns", "lambda_returns", "gae", "prefix_sum", "eligibility_traces"):
        items += [(a, 64, 131072, "fp32", "TN", "float", c) for c in
                  [None] + [S(32, 128, 4, k * 128, True, _tm_run(32, 128, 4)) for k in (2, 4)]]
    return items


NARROW_ALGORITHMS = ("discounted_returns", "prefix_sum", "lambda_returns", "gae", "vtrace")


def narrow_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``narrow`` probe: time-major
    fp32 tiles of 4 to 16 envs (a step's 16 bytes, its 32-byte sector or more) held as interleaved
    runs, so a thread's steps are consecutive and its loads stay 16 bytes wide."""
    from paper_repro.kernels import _launch as L

    S = L.ScanConfig

    def tm(bb, bt, w, seg, lb=False):
        return S(bb, bt, w, seg, lb, _tm_run(bb, bt, w))

    shapes = {
        (512, 4096): [tm(4, 512, 4, 4096), tm(4, 1024, 8, 4096), tm(4, 1024, 4, 4096),
                      tm(8, 512, 4, 4096), tm(4, 256, 2, 4096), tm(4, 512, 4, 2048),
                      tm(4, 512, 4, 1024), tm(8, 512, 4, 1024), tm(8, 256, 2, 512),
                      tm(4, 512, 4, 512, True), tm(8, 256, 2, 256, True),
                      tm(4, 1024, 8, 1024, True), tm(4, 512, 4, 2048, True),
                      tm(8, 512, 4, 1024, True)],
        (64, 131072): [tm(4, 1024, 8, 1024, True), tm(4, 512, 4, 512, True),
                       tm(8, 512, 4, 512, True), tm(4, 1024, 4, 4096, True),
                       tm(4, 1024, 8, 8192), tm(4, 1024, 8, 16384), tm(8, 512, 4, 4096)],
        (4096, 128): [tm(4, 128, 1, 128), tm(8, 128, 1, 128), tm(8, 128, 2, 128)],
        (32768, 32): [tm(8, 32, 1, 32), tm(16, 32, 1, 32)],
    }
    return [(a, n, t, "fp32", "TN", "float", c) for (n, t), tiles in shapes.items()
            for a in NARROW_ALGORITHMS for c in [None] + tiles]


REGISTER_CAPS = (0, 64, 72, 80, 88, 96)
LONG_ESTIMATORS = ("discounted_returns", "lambda_returns", "gae", "eligibility_traces",
                   "prefix_sum", "vtrace")


def _capped(cases) -> list:
    """Probe items of ``(algorithm, N, T, dtype, layout, flags, caps)`` cases: the shipped tile
    (None), then the heuristic's tile under each cap (0: uncapped)."""
    from dataclasses import replace

    from paper_repro.bench.tile_probe import traits_of
    from paper_repro.kernels import _launch as L

    items = []
    for a, n, t, dt, lay, fl, caps in cases:
        tile = L.choose_config(n, t, lay == "TN", 132, a in ("vtrace", "retrace"), a == "retrace",
                               2 if dt in ("bf16", "fp16") else 4, traits=traits_of(a))
        items += [(a, n, t, dt, lay, fl, None)]
        items += [(a, n, t, dt, lay, fl, replace(tile, max_registers=r)) for r in caps]
    return items


def registers_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``registers`` probe: the fp32
    look-back tiles of five rows and more under register caps (Triton's ``maxnreg``): fewer
    registers, more resident programs to keep loads in flight."""
    return _capped([(a, n, t, "fp32", "NT", "float", REGISTER_CAPS)
                    for a in ("eligibility_traces", "prefix_sum", "discounted_returns",
                              "lambda_returns", "gae", "vtrace")
                    for n, t in ((64, 131072), (16, 524288))])


def registers_wide_items() -> list:
    """``(algorithm, N, T, dtype, layout, flags, tile)`` of the ``registers-wide`` probe: shipped
    tiles whose registers bound the programs an SM (``sass --caps``, ``sass_caps.csv``), under
    caps: fp32 time-major 64x131072 (interleaved 32 x 128 tiles, 168-255 registers a thread)
    and 512x4096 (two passes over 32 x 32 one-warp tiles, 191-255), Retrace's one-warp
    look-back (147) in fp32 and bf16, V-trace's four-warp fp32 look-back (101), the 16-bit
    one-warp look-back tiles (149-168)."""
    cases = [(a, n, t, "fp32", "TN", "float", (0, 128, 168, 192))
             for n, t in ((64, 131072), (512, 4096))
             for a in ("discounted_returns", "lambda_returns", "gae", "eligibility_traces",
                       "prefix_sum", "vtrace")]
    cases += [("retrace", 64, 131072, dt, "NT", fl, (0, 96, 112, 128))
              for dt, fl in (("fp32", "float"), ("bf16", "bool"))]
    cases += [("vtrace", 64, 131072, "fp32", "NT", "float", (0, 80, 96))]
    # 16-bit one-warp look-back tiles (149-168 registers: 12 programs an SM), and the fp32 cap
    # at 16x131072, where GAE took 1.10x the time in the suites
    cases += [(a, 64, 131072, "bf16", "NT", "bool", (0, 128, 144)) for a in LONG_ESTIMATORS]
    cases += [(a, 16, 131072, "fp32", "NT", "float", (0, 80)) for a in ("gae", "prefix_sum")]
    return _capped(cases)


def registers_tiles_items() -> list:
    """``registers-tiles``: capped look-back tiles of other shapes at 64x131072, where the fp32
    forward scans stay near 70 % of copy bandwidth: fp32 1024 steps in one warp and 2048 in
    four (caps 80-128: as many warps an SM as the shipped two-warp tile, half the look-backs
    for the longer one), and bf16 V-trace's one-warp tile at 112."""
    from paper_repro.kernels import _launch as L

    items = []
    for a in LONG_ESTIMATORS[:-1]:
        items.append((a, 64, 131072, "fp32", "NT", "float", None))
        for bt, warps, caps in ((1024, 1, (0, 96, 128)), (2048, 4, (0, 80, 96))):
            items += [(a, 64, 131072, "fp32", "NT", "float",
                       L.ScanConfig(1, bt, warps, bt, True, 4, max_registers=r)) for r in caps]
    items += [("vtrace", 64, 131072, "bf16", "NT", "bool", c)
              for c in (None, L.ScanConfig(1, 512, 1, 512, True, 8, max_registers=112))]
    return items


def registers_check_items() -> list:
    """``registers-check``: the shipped capped look-back tiles against the same tiles uncapped,
    at both shapes of 2**23 elements, 16-bit and fp32 V-trace."""
    return _capped([(a, n, t, dt, "NT", fl, (0,))
                    for n, t in ((64, 131072), (16, 524288))
                    for a, dt, fl in [(a, "bf16", "bool") for a in LONG_ESTIMATORS]
                    + [("vtrace", "fp32", "float")]])


def registers_more_items() -> list:
    """``registers-more``: the shipped tiles against the same tiles uncapped and under the
    heuristic's caps, at the long-row shapes around the 2**22-element threshold (16x131072,
    16x262144, 32x131072) and fp16 at 64x131072."""
    caps = {"fp32": (0, 80), "fp32-wide": (0, 96), "bf16": (0, 128), "fp16": (0, 128)}
    cases = [(a, n, t, "fp32", "NT", "float", caps["fp32-wide" if a == "vtrace" else "fp32"])
             for n, t in ((16, 131072), (16, 262144), (32, 131072)) for a in LONG_ESTIMATORS]
    cases += [(a, n, t, dt, "NT", fl, caps[dt])
              for n, t, dt, fl in ((16, 262144, "bf16", "bool"), (32, 131072, "bf16", "bool"),
                                   (64, 131072, "fp16", "float"))
              for a in ("discounted_returns", "gae", "vtrace")]
    return _capped(cases)


def registers_rows_items() -> list:
    """``registers-rows``: the one-warp 512-step look-back (79-80 registers: 24 programs an SM,
    2.6 waves at 1 x 4194304) under caps of 64 and 72 (32 and 28 an SM), and one-warp 256-step
    tiles, at 1 x 4194304, 4 x 1048576 and 64 x 131072 for the estimators that take it."""
    from paper_repro.kernels import _launch as L

    tiles = [L.ScanConfig(1, 512, 1, 512, True, 4, max_registers=r) for r in (64, 72)]
    tiles.append(L.ScanConfig(1, 256, 1, 256, True, 4))
    return [(a, n, t, "fp32", "NT", "float", c)
            for a in ("gae", "lambda_returns", "vtrace")
            for n, t in ((1, 4194304), (4, 1048576), (64, 131072)) for c in [None] + tiles]


def _row_tile(bt: int, warps: int, seg: int, single: bool, itemsize: int):
    """A one-row tile of ``bt`` steps over segments of ``seg``, by look-back (``single``) or in
    two passes (``seg`` >= T: the row walked whole), in the batch-major runs of ``itemsize``."""
    from paper_repro.kernels import _launch as L

    return L.ScanConfig(1, bt, warps, seg, single, L.run_length(bt, itemsize, False))


def split_rows_items() -> list:
    """``split-rows``: rows a program walks (a few hundred rows of 2048-8192 steps) against
    time split across programs: one tile a program by look-back, or two passes over
    segments of two tiles; fp32 and bf16."""
    items = []
    for n, t in ((512, 2048), (512, 4096), (256, 8192)):
        for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
            tiles = [_row_tile(1024, 2, 1024, True, size), _row_tile(1024, 4, 1024, True, size),
                     _row_tile(512, 2, 512, True, size), _row_tile(1024, 4, 2048, False, size),
                     _row_tile(512, 2, 1024, False, size)]
            if t >= 4096:
                tiles.append(_row_tile(2048, 4, 2048, True, size))
            items += [(a, n, t, dt, "NT", fl, c) for a in LONG_ESTIMATORS
                      for c in [None] + tiles]
    return items


def split_wide_items() -> list:
    """``split-wide``: V-trace (GAE beside it) where its half-size tiles make rows of 8192 to
    65536 steps take two passes: against look-back and rows walked whole."""
    from paper_repro.kernels import _launch as L

    items = []
    for n, t in ((256, 8192), (128, 16384), (64, 32768), (32, 65536), (16, 65536)):
        for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
            run = L.run_length(1024, size, False)
            tiles = [L.ScanConfig(1, 1024, 2, 1024, True, run),
                     L.ScanConfig(1, 1024, 4, 1024, True, run),
                     L.ScanConfig(1, 512, 1, 512, True, run),
                     L.ScanConfig(1, 512, 2, t, False, run),
                     L.ScanConfig(1, 1024, 4, t, False, run)]
            items += [(a, n, t, dt, "NT", fl, c) for a in ("vtrace", "gae")
                      for c in [None] + tiles]
    return items


def split_more_items() -> list:
    """``split-more``: where the split-rows rules stop: up to four rows of 16384-65536 steps
    (two passes) and fp64 at 16x65536 against one-warp 512-step look-backs, and V-trace's
    rows of 2048-4096 steps walked in its 512-step tiles against 1024-step ones."""
    from paper_repro.kernels import _launch as L

    items = []
    for n, t, dt, fl, size in ((4, 65536, "fp32", "float", 4), (1, 65536, "fp32", "float", 4),
                               (4, 32768, "fp32", "float", 4), (4, 65536, "bf16", "bool", 2),
                               (16, 65536, "fp64", "float", 8)):
        run = L.run_length(512, size, False)
        tiles = [L.ScanConfig(1, 512, 1, 512, True, run), L.ScanConfig(1, 1024, 2, 1024, True, run)]
        items += [(a, n, t, dt, "NT", fl, c) for a in ("discounted_returns", "gae", "vtrace")
                  for c in [None] + tiles]
    for n, t in ((512, 2048), (512, 4096), (256, 4096)):
        for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
            run = L.run_length(1024, size, False)
            items += [("vtrace", n, t, dt, "NT", fl, c)
                      for c in (None, L.ScanConfig(1, 1024, 4, t, False, run),
                                L.ScanConfig(1, 1024, 8, t, False, run))]
    return items


def split_long_items() -> list:
    """``split-long``: the look-back in one-warp 512-step tiles where ``split-more`` found it
    beating two passes, carried further: up to four rows of 131072 to 4194304 steps (fp32 and
    bf16) and of 4096-16384, fp64 beyond 16x65536; V-trace's rows walked in 1024-step tiles
    from more rows; fp32 discounted returns in one-warp 1024-step tiles uncapped."""
    def lb(bt, warps, size):
        return _row_tile(bt, warps, bt, True, size)

    items = []
    for n, t in ((4, 131072), (1, 262144), (4, 262144), (1, 1048576), (4, 1048576),
                 (1, 4194304)):
        for dt, fl, size, algs in (("fp32", "float", 4, ("discounted_returns", "gae",
                                                         "prefix_sum", "vtrace")),
                                   ("bf16", "bool", 2, ("discounted_returns", "gae", "vtrace"))):
            items += [(a, n, t, dt, "NT", fl, c) for a in algs
                      for c in (None, lb(512, 1, size), lb(1024, 2, size))]
    for n, t in ((1, 16384), (4, 8192), (2, 4096)):
        items += [(a, n, t, "fp32", "NT", "float", c)
                  for a in ("discounted_returns", "gae", "vtrace")
                  for c in (None, lb(512, 1, 4), lb(256, 1, 4))]
    for n, t in ((4, 65536), (64, 16384), (32, 32768)):
        items += [(a, n, t, "fp64", "NT", "float", c)
                  for a in ("discounted_returns", "gae", "vtrace") for c in (None, lb(512, 1, 8))]
    for n, t in ((1024, 4096), (2048, 2048), (4096, 4096), (128, 4096), (64, 2048)):
        for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
            walk = _row_tile(1024, 4, t, False, size)
            items += [("vtrace", n, t, dt, "NT", fl, c) for c in (None, walk)]
    for n, t in ((64, 131072), (16, 524288), (32, 131072), (16, 262144)):
        items += [("discounted_returns", n, t, "fp32", "NT", "float", c)
                  for c in (None, lb(1024, 1, 4))]
    return items


def split_check_items() -> list:
    """``split-check``: the rules taken from ``split-long``, shipped, against the tiles they
    replaced where ``split-long`` did not time them: TD(lambda) up to four fp32 rows of 2**22
    steps in all, eligibility traces, 16-bit prefix sums and TD(lambda), fp64 up to four rows,
    fp64 V-trace walking rows, discounted returns at 16x131072."""
    from paper_repro.kernels import _launch as L

    def two_pass(seg, size):
        return _row_tile(1024, 4, seg, False, size)

    cases = [("lambda_returns", 4, 1048576, "fp32", "float",
              [L.ScanConfig(1, 2048, 4, 2048, True, 4)]),
             ("lambda_returns", 1, 4194304, "fp32", "float", [two_pass(8192, 4)]),
             ("eligibility_traces", 4, 65536, "fp32", "float", [two_pass(4096, 4)]),
             ("eligibility_traces", 1, 262144, "fp32", "float", [two_pass(8192, 4)]),
             ("eligibility_traces", 4, 262144, "fp32", "float", [two_pass(8192, 4)]),
             ("prefix_sum", 4, 131072, "bf16", "bool", [two_pass(8192, 2)]),
             ("lambda_returns", 1, 1048576, "bf16", "bool", [two_pass(8192, 2)]),
             ("discounted_returns", 4, 131072, "fp64", "float", [two_pass(8192, 8)]),
             ("discounted_returns", 1, 1048576, "fp64", "float", [two_pass(8192, 8)]),
             ("gae", 4, 262144, "fp64", "float", [two_pass(8192, 8)]),
             ("vtrace", 256, 8192, "fp64", "float",
              [L.ScanConfig(1, 512, 2, 2048, False, 2), L.ScanConfig(1, 512, 1, 512, True, 2)]),
             ("discounted_returns", 16, 131072, "fp32", "float",
              [L.ScanConfig(1, 1024, 2, 1024, True, 4)])]
    return [(a, n, t, dt, "NT", fl, c) for a, n, t, dt, fl, old in cases for c in [None] + old]


def split_trunc_items() -> list:
    """``split-trunc``: the truncated variant (one more flag input) under the new rules against
    the tiles they replaced: V-trace walking 2048-4096-step rows in 1024-step tiles against
    512-step tiles in two warps, up to four rows' look-back against two passes and 2048-step
    look-back tiles; V-trace's plain 512x4096 beside them. Items carry the variant last."""
    from paper_repro.kernels import _launch as L

    items = []
    for n, t in ((512, 4096), (512, 2048), (256, 4096), (128, 4096), (64, 2048)):
        for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
            old = _row_tile(512, 2, t, False, size)
            items += [("vtrace", n, t, dt, "NT", fl, c, "trunc") for c in (None, old)]
    items += [("vtrace", 512, 4096, dt, "NT", fl, c, "plain")
              for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2))
              for c in (None, _row_tile(512, 2, 4096, False, size))]
    items += [("gae", 4, 262144, "fp32", "NT", "float", c, "trunc")
              for c in (None, L.ScanConfig(1, 1024, 4, 8192, False, 4))]
    items += [("vtrace", 1, 4194304, "fp32", "NT", "float", c, "trunc")
              for c in (None, L.ScanConfig(1, 2048, 4, 2048, True, 4))]
    return items


def split_twopass_items() -> list:
    """``split-twopass``: the two passes that up to four rows of 2**22 steps keep (fp32 returns
    without values and prefix sums, 16-bit rows) in other segment lengths and tiles: 4096- and
    16384-step segments of 1024-step tiles, 2048-step tiles in four and eight warps, 512-step
    tiles in two."""
    def tp(bt, warps, seg, size):
        return _row_tile(bt, warps, seg, False, size)

    cases = [(a, n, t, "fp32", "float", 4) for a in ("discounted_returns", "prefix_sum")
             for n, t in ((1, 4194304), (4, 1048576))]
    cases += [(a, n, t, "bf16", "bool", 2) for a in ("discounted_returns", "gae", "vtrace")
              for n, t in ((1, 4194304), (4, 1048576))]
    return [(a, n, t, dt, "NT", fl, c) for a, n, t, dt, fl, size in cases
            for c in (None, tp(1024, 4, 4096, size), tp(1024, 4, 16384, size),
                      tp(2048, 4, 8192, size), tp(2048, 8, 16384, size), tp(512, 2, 4096, size))]


def split_tile_items() -> list:
    """``split-tile``: the two passes over 8192-step segments that up to four rows of more than
    2**20 steps take, in 2048-step tiles of four warps (and 4096-step segments of them) against
    the shipped 1024-step tiles: every estimator that keeps two passes there, fp32 and bf16,
    from 2**21 to 2**22 steps in all."""
    cases = [(a, "fp32", "float", 4) for a in ("prefix_sum", "eligibility_traces",
                                               "discounted_returns")]
    cases += [(a, "bf16", "bool", 2) for a in ("prefix_sum", "eligibility_traces",
                                               "discounted_returns", "lambda_returns", "gae")]
    return [(a, n, t, dt, "NT", fl, c) for a, dt, fl, size in cases
            for n, t in ((1, 4194304), (4, 1048576), (1, 2097152), (4, 524288))
            for c in (None, _row_tile(2048, 4, 8192, False, size),
                      _row_tile(2048, 4, 4096, False, size))]


def cold_tiles_items() -> list:
    """``cold-tiles``: 512x4096 batch-major rows, whose inputs (fp32 27-57 MB) may stay in L2
    across timed repeats, under the shipped tile (rows walked in 1024-step tiles) and other
    walked tiles of 512-4096 steps and a one-tile look-back, each timed with the inputs in L2
    and from DRAM (``cold``), fp32 and bf16."""
    items = []
    for dt, fl, size in (("fp32", "float", 4), ("bf16", "bool", 2)):
        tiles = [_row_tile(bt, w, 4096, False, size) for bt, w in
                 ((512, 2), (2048, 4), (2048, 8), (4096, 8), (4096, 16))]
        tiles.append(_row_tile(1024, 4, 1024, True, size))
        items += [(a, 512, 4096, dt, "NT", fl, c)
                  for a in ("discounted_returns", "lambda_returns", "gae", "prefix_sum",
                            "eligibility_traces", "vtrace") for c in [None] + tiles]
    return items


def order_tiles_items() -> list:
    """``order-tiles``: the fp32 look-back's tiles again once programs took the launch index
    instead of a ticket (no atomic before a tile's loads): 64 x 131072, 512- to 2048-step
    one-row tiles in 1 to 8 warps, uncapped and under caps."""
    from paper_repro.kernels import _launch as L

    shapes = {"vtrace": ((1024, 4, 0), (1024, 2, 0), (512, 1, 0), (512, 2, 0), (2048, 4, 0),
                         (2048, 8, 0), (1024, 4, 128))}
    usual = ((1024, 2, 0), (1024, 2, 96), (1024, 1, 0), (1024, 4, 0), (512, 1, 0),
             (2048, 4, 0), (2048, 4, 80), (2048, 8, 0))
    items = [(a, 64, 131072, "fp32", "NT", "float", c) for a in LONG_ESTIMATORS for c in
             [None] + [L.ScanConfig(1, bt, w, bt, True, 4, max_registers=r)
                       for bt, w, r in shapes.get(a, usual)]]
    # TD(lambda)'s and GAE's one-warp tiles (adopted from the rows above) against their two
    # capped warps at the other long-row shapes they serve
    return items + [(a, n, t, "fp32", "NT", "float", c) for a in ("lambda_returns", "gae")
                    for n, t in ((16, 131072), (16, 262144), (16, 524288)) for c in
                    (None, L.ScanConfig(1, 1024, 2, 1024, True, 4,
                                        max_registers=80 * (n * t >= 1 << 22)))]


def words(warm: bool = False, share: tuple = (0, 1), items=words_items, cold: bool = False,
          suffix: str = ""):
    """Time ``items()`` (every ``share[1]``-th from ``share[0]``) under their forced tiles and
    print a line each; ``cold``: a second line each (tile label ending ``/cold``) with every
    call's inputs read from DRAM."""
    from paper_repro.bench.forced import cold_turns, forced_time, prepared

    current = None
    for a, n, t, dt, lay, fl, c, *variant in items()[share[0]::share[1]]:
        variant = variant[0] if variant else "plain"
        if current != (a, n, t, dt, lay, fl, variant):
            current = (a, n, t, dt, lay, fl, variant)
            case, prep, want = prepared(a, n, t, dt, lay, fl, variant)
            timings = [("", ())] + ([("/cold", cold_turns(case, prep))] if cold and not warm
                                    else [])
        if warm:
            forced_time(prep, want, c, warm_only=True)
            continue
        tile = label(c) + ("" if variant == "plain" else f"/{variant}") + suffix
        for cold_suffix, turns in timings:
            diff, us = forced_time(prep, want, c, repeats=3, turns=turns)
            print(f"{a},{n},{t},{dt},{lay},{fl},{tile}{cold_suffix},{us:.3f},{diff:.3g}",
                  flush=True)


def sixteen():
    from paper_repro.bench.forced import forced_time, prepared

    current = None
    for a, n, t, dt, fl, c in sixteen_items():
        if current != (a, n, t, dt, fl):
            current = (a, n, t, dt, fl)
            _, prep, want = prepared(a, n, t, dt, "NT", fl)
        diff, us = forced_time(prep, want, c, repeats=3)
        print(f"{a},{n},{t},{dt},{fl},{label(c)},{us:.3f},{diff:.3g}", flush=True)


def label(c) -> str:
    if c is None:
        return "shipped"
    kind = "lb" if c.single_pass else "tp"
    regs = f"/regs{c.max_registers}" if c.max_registers else ""
    return f"{c.BLOCK_B}x{c.BLOCK_T}x{c.num_warps}/seg{c.seg_len}/{kind}/r{c.flip}{regs}"


def main(argv=None):
    from paper_repro.bench.forced import forced_time, prepared

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "sixteen":
        return sixteen()
    probes = {"words": words_items, "words16": words16_items, "segwords": segwords_items,
              "segwindow": segwindow_items,
              "neighbour": neighbour_items, "narrow": narrow_items, "registers": registers_items,
              "registers-wide": registers_wide_items, "registers-check": registers_check_items,
              "registers-tiles": registers_tiles_items, "registers-more": registers_more_items,
              "registers-rows": registers_rows_items,
              "split-rows": split_rows_items,
              "split-wide": split_wide_items, "split-more": split_more_items,
              "split-long": split_long_items, "split-check": split_check_items,
              "split-trunc": split_trunc_items, "split-twopass": split_twopass_items,
              "split-tile": split_tile_items, "cold-tiles": cold_tiles_items,
              "order-tiles": order_tiles_items}
    if argv and argv[0] in probes:
        warm = argv[1:2] == ["warm"]
        suffix = ""
        if argv[0] == "segwindow":
            from paper_repro.kernels import affine_scan as A

            suffix = f"/w{A.WINDOW.value}" + ("/lastfirst" if A.SECOND_PASS_LAST_FIRST.value
                                              else "")
        return words(warm, tuple(map(int, argv[2].split("/"))) if warm else (0, 1),
                     probes[argv[0]], cold=argv[0].startswith("cold"), suffix=suffix)
    mode = argv[0] if argv and argv[0] in ("lookback", "segment") else None
    argv = argv[1:] if mode else argv
    warm = bool(argv) and argv[0] == "warm"
    i, k = map(int, argv[1].split("/")) if warm else (0, 1)
    if mode:
        pick = lookback_candidates if mode == "lookback" else segment_candidates
        items = [(a, n, t, "fp32", c) for n, t in LOOKBACK_SHAPES for a in LOOKBACK_ALGORITHMS
                 for c in pick(a, "fp32")]
    else:
        items = [(a, n, t, dt, c) for n, t in SHAPES for a in ALGORITHMS
                 for dt in ("fp32", "bf16") for c in candidates(a, dt)]
    items = items[i::k]
    current = None
    for a, n, t, dt, c in items:
        if current != (a, n, t, dt):
            current = (a, n, t, dt)
            _, prep, want = prepared(a, n, t, dt, "NT", "bool" if dt == "bf16" else "float")
        diff, us = forced_time(prep, want, c, warm, repeats=2)
        if not warm:
            print(f"{a},{n},{t},{dt},{label(c)},{us:.3f},{diff:.3g}", flush=True)


if __name__ == "__main__":
    main()
