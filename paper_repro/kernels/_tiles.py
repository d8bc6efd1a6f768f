"""The H200 tile heuristic: which :class:`ScanConfig` (tile, warps, segment, time split,
run order, register cap) a launch takes for a shape, layout, dtype and estimator. Every rule
cites the probe in data/h200 that chose it; ``_launch.config_for`` applies it to a device.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ScanConfig:
    BLOCK_B: int
    BLOCK_T: int
    num_warps: int
    seg_len: int  # time steps per program along time (== padded T when not split)
    # split time in one launch by look-back: one tile a program (seg_len == BLOCK_T), or a
    # segment of tiles a program swept twice, reduce then scan (PHASE 4); not two passes
    single_pass: bool = False
    # Backward scans: tiles hold runs of ``flip`` ascending steps, latest run first, and scan
    # forward (1: latest step first; 0: time ascending, Triton's reverse scan; -R: runs of R
    # interleaved, column k * G + g holding run g's step k; chunk_times).
    flip: int = 0
    # Registers a thread the tile's compile may use (Triton's maxnreg; 0: its choice): fewer
    # registers, more programs resident an SM.
    max_registers: int = 0
    # Two passes (not ``single_pass``) that scan, then fix: the second pass's tile of
    # ``fix_steps`` steps in ``fix_warps`` warps (0: reduce, then scan; affine_scan.SCAN_LOCAL).
    # No rule sets it (data/h100/fix_ab.csv: it lost); kernels without the passes ignore it.
    fix_steps: int = 0
    fix_warps: int = 1

    def grid(self, B: int, T: int):
        return (triton_cdiv(B, self.BLOCK_B), triton_cdiv(T, self.seg_len))


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


# Segments a row of two passes takes at most. Each second-pass program composes the aggregates
# of every segment before its own, 32 a round, so the passes' extra work grows with the square
# of the segments (65535 of them, CUDA's limit on the grid's second axis that holds them, would
# compose about 2**31 aggregates); rows past 2**23 steps take longer segments instead. The
# recorded shapes take at most 512 segments a row.
MAX_SEGMENTS = 1024


def fit_segments(config: ScanConfig, T: int) -> ScanConfig:
    """``config`` with segments long enough, whole tiles each, that a split in two passes
    launches at most ``MAX_SEGMENTS`` a row (up to four rows of more than 2**23 steps; the
    look-back flattens its grid)."""
    if config.single_pass or triton_cdiv(T, config.seg_len) <= MAX_SEGMENTS:
        return config
    tiles = triton_cdiv(triton_cdiv(T, MAX_SEGMENTS), config.BLOCK_T)
    return replace(config, seg_len=tiles * config.BLOCK_T)


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@dataclass(frozen=True)
class TileTraits:
    """An estimator's tile traits: mostly its tiles for rows too few to fill the GPU, from the H200
    probes (split_rows.csv, registers.csv). ``two_pass_rows``: up to how many fp32 rows of more than
    2**20 steps in all take two passes rather than the look-back; ``cap16``: the register cap of the
    16-bit long-row look-back tile (0: none); ``warps32``: the warps of the fp32 long-row look-back
    tile (2: 1024 steps, capped from 2**22 elements; 1: ``look_back_steps32`` steps, uncapped);
    ``two_pass_steps32``: the steps of the fp32 tile in the two passes of up to four rows;
    ``time_major_two_pass``: the ``[lo, hi)`` elements (``B * T``) at which fp32 time-major rows of
    few row blocks take two passes rather than a one-tile look-back; ``time_major_look_back_steps``:
    the steps of that look-back's 32-env tile from 2**21 elements (128 below);
    ``time_major_row_warps``: the warps of fp32 time-major one-pass tiles of 64-128 steps from at
    most a 16-row block an SM (2 from more); ``walk16_share``: the share of the SMs under which
    32-env programs of 16-bit time-major walks look back rather than walk in runs (``wide_walks16``;
    0: neither); ``warps512``: the warps of fp32 batch-major rows of 512 steps, one tile a row, up
    to 32 rows an SM (0: 256 elements a warp from more rows than SMs); ``walk_rows32``: up to how
    many wide (V-trace's) fp32 rows of 2049-4096 steps an SM walk 1024-step tiles (512-step ones
    from more)."""

    two_pass_rows: int = 4
    cap16: int = 0
    warps32: int = 2
    two_pass_steps32: int = 2048
    look_back_steps32: int = 1024
    time_major_two_pass: tuple = (1 << 22, 1 << 23)
    time_major_look_back_steps: int = 256
    time_major_row_warps: int = 2
    walk16_share: float = 0.0
    warps512: int = 0
    walk_rows32: int = 3


@functools.lru_cache(maxsize=4096)
def choose_config(B: int, T: int, time_major: bool, sms: int, wide: bool,
                  retrace: bool = False, itemsize: int = 4,
                  traits: TileTraits = TileTraits(), narrow_loads: bool = False) -> ScanConfig:
    """Tile heuristic, from the H200 sweeps in data/h200 (tuning.csv, split_probe*.csv: GAE and
    prefix-sum fp32; tile_probe.csv: every estimator, fp32 and bf16, both layouts). ``wide``:
    many live inputs (V-trace, Retrace), so half the tile; ``retrace``: one-warp tiles up to 256
    steps (its layout changes each cost a block barrier), longer ones with half the others'
    elements a warp; ``itemsize``: bytes of a value input, which sets the run length of
    batch-major backward tiles; ``traits``: the estimator's tile traits (:class:`TileTraits`);
    ``narrow_loads``: fp32 outputs of loads narrower than 4 bytes (``_launch.narrow_loads``),
    whose time-major tiles are laid out as 16-bit ones."""
    if time_major:
        config = _time_major_config(B, T, sms, wide, retrace, 2 if narrow_loads else itemsize,
                                    traits.time_major_two_pass,
                                    traits.time_major_look_back_steps,
                                    traits.time_major_row_warps)
        return _runs16(config) if itemsize == 2 and not retrace else config
    config = _batch_major_config(B, T, sms, wide, retrace, itemsize, traits)
    look_back = config.single_pass and config.seg_len == config.BLOCK_T
    return replace(config, flip=run_length(config.BLOCK_T, itemsize, retrace, look_back))


def run_length(BLOCK_T: int, itemsize: int, retrace: bool, look_back: bool = False) -> int:
    """Batch-major backward tiles as runs of one 16-byte load's steps, latest run first, so a
    forward scan runs backward in time with the loads still vectorised (tile_probe.csv, shipped
    tiles: 4096x128 discounted returns 3.80 -> 2.62 us, GAE 3.96 -> 3.01, 512x4096 GAE 12.0 ->
    7.6, bf16 9.0 -> 4.9 in runs of 8). Retrace keeps runs of 4 (bf16 4096x128, runs of 8:
    1.02x the reverse scan's time, of 4: 0.86x; H100 rows16_retrace.csv: its 512x4096 walk
    1.04-1.07x, 32768x32 1.12x) but in its 16-bit one-tile ``look_back``, 8 steps a thread
    (H100, 64x131072: 112.7 -> 108.7 us, two runs); 0 (Triton's reverse scan) for tiles of up
    to 8 steps (T = 8 GAE in runs of 4: 1.07x, short.csv)."""
    if BLOCK_T <= 8:
        return 0
    if retrace:
        return 8 if look_back and itemsize == 2 else 4
    return max(2, 16 // itemsize)


def _batch_major_config(B: int, T: int, sms: int, wide: bool, retrace: bool, itemsize: int,
                        traits: TileTraits = TileTraits()) -> ScanConfig:
    if retrace and T <= 256:
        # One warp (4096x128: 12.8 -> 11.4 us), 64 elements up to 32 steps: two rows of 32
        # (32768x32: 63 -> 24 us; roofline.csv), four of 16, eight of 8 (retrace_short.csv,
        # against the 512-element 4-warp tiles of short horizons: 32768x16 23.5 -> 9.3 us,
        # 32768x8 17.8 -> 7.0, 4096x16 5.3 -> 3.4, 4096x8 5.7 -> 3.0).
        BLOCK_T = _pow2(T)
        return ScanConfig(max(1, 64 // BLOCK_T), BLOCK_T, 1, BLOCK_T)
    tile = 1024 if wide else 2048
    num_warps = None
    # Elements a warp: Retrace's steps weigh more, so twice the warps (retrace_warps.csv,
    # 14 shapes, fp32 and bf16: 1.03-1.57x; 512x4096 50.9 -> 44.7 us, bf16 52.0 -> 38.9).
    per_warp = 128 if retrace else 256
    many_long_rows = T >= 1024 and not wide and 32 * sms <= B
    if T <= 16:
        # Short horizons: a few fat programs beat many thin ones (4096x8: 2.16 -> 1.89 us).
        BLOCK_T = _pow2(T)
        BLOCK_B = min(_pow2(B), 512 // BLOCK_T)
        num_warps = 4
    elif many_long_rows:
        # 32x128 tiles, 16 warps, one pass (8192x4096: 172 -> 151 us).
        BLOCK_B, BLOCK_T, num_warps = 32, 128, 16
    elif retrace and 2048 < T <= 4096 and (sms >= B or (itemsize == 4 and T > 3072)):
        # Retrace's rows of 2049-4096 steps up to a row an SM, and fp32 ones of 3073-4096 steps
        # however many, in one tile of 16 warps, no walk (H100, tile_4096_wide.csv, against
        # 512-step tiles walked: 32-192 rows x 4096 0.48-0.87x the time, 128x4096 17.5 -> 8.5
        # us; 384-4096 rows 0.93-0.99x; bf16 128x4096 12.4 -> 6.2, 512 rows 1.12x; x 2049-3072
        # 0.57-0.74x up to a row an SM, bf16 0.59-0.95x; 1.00-1.08x at 512-1024 rows). 32
        # warps: 0.91-0.95x at 128-192 rows, 0.98-1.01x elsewhere, past the 16 warps every
        # other tile keeps to.
        BLOCK_B, BLOCK_T, num_warps = 1, 4096, 16
    elif retrace and T > 512 and 2 * sms < B:
        # Retrace rows a program walks, from more rows than two an SM (tile_probe.csv, small
        # and retrace rows): 512-step tiles in 4 warps (512x1024 11.96 -> 9.25 us against one
        # 1024-step tile in 8; 4096x2048 bf16 145.8 -> 110.6 against 2x512 tiles in 8 warps),
        # fp32 from more than four rows an SM in 256-step tiles in 2 (4096x2048 174.5 ->
        # 154.9, 8192x4096 682 -> 605; 1024x1024 24.1 -> 23.1).
        BLOCK_B, BLOCK_T, num_warps = 1, 512, 4
        if itemsize == 4 and 1024 < T <= 2048:
            # fp32 rows of up to 2048 steps in one tile of 8 warps (H100, tile_2048_wide.csv:
            # 512-4096 rows 0.92-0.94x the time, 4096x2048 203.4 -> 186.4 us)
            BLOCK_T, num_warps = 2048, 8
        elif itemsize == 4 and 4 * sms < B:
            BLOCK_T, num_warps = 256, 2
    elif wide and not retrace and itemsize == 4 and 2048 < T <= 4096 and 4 < B <= sms:
        # V-trace's fp32 rows of 2049-4096 steps, up to one an SM, in one tile of 8 warps (H100,
        # tile_4096_wide.csv, against 1024-step tiles walked: 8-132 rows 0.65-0.92x the time,
        # 128x4096 5.53 -> 4.77 us; 192 rows 1.08x).
        BLOCK_B, BLOCK_T, num_warps = 1, 4096, 8
    elif wide and not retrace and itemsize == 4 and 1024 < T <= 2048 and B > 4:
        # V-trace's fp32 rows in one 2048-step tile of 16 warps (H100, tile_2048_wide.csv, two
        # runs: 0.90-0.98x the time at 128-4096 rows; 8 warps lost at 512 rows, 1.02-1.03x).
        BLOCK_B, BLOCK_T, num_warps = 1, 2048, 16
    elif not wide and itemsize == 4 and 3072 < T <= 4096 and 2 * sms >= B:
        # Up to two rows an SM, one fp32 tile of 4096 steps in 8 warps (H100, tile_4096.csv,
        # 32-256 rows: 0.72-0.99x the time of the 1024-step walk, eligibility traces 64x4096
        # 3.79 -> 2.91 us against rl-triton's 2.93; 384 rows 0.93-1.11x, 512 up to 1.33x).
        BLOCK_B, BLOCK_T, num_warps = 1, 4096, 8
    elif (not retrace and itemsize == 2 and (1024 < T <= 2048 or 3072 < T <= 4096)
          and 4 < B < 32 * sms):
        # 16-bit rows of 1025-2048 or 3073-4096 steps in one tile, no walk: 512 steps a warp,
        # V-trace's in twice the warps (H100, tile_bf16.csv, bf16 against the walk of 1024-step
        # tiles in 4 warps: 128-4096 rows x 4096 0.73-0.98x the time, 512x4096 prefix sum 4.49
        # -> 3.60 us, V-trace 0.77-0.96x; 512 and 2048 rows x 2048 0.78-0.92x; x 3072 mixed).
        # As shipped (tile_bf16_rule.csv, 16-4096 rows): 0.60-0.97x the walk's time. fp16 untimed.
        BLOCK_B, BLOCK_T = 1, _pow2(T)
        num_warps = BLOCK_T // (256 if wide else 512)
    elif not wide and itemsize == 4 and 1024 < T <= 2048:
        # One fp32 tile of 2048 steps in 8 warps, no walk (H100, data/h100/tile_2048.csv, against
        # two 1024-step tiles in 4: 128-1024 rows 0.81-0.94x the time, 512x2048 prefix sum 3.94
        # -> 3.61 us; 2048 rows 0.96-0.98x, 4096 0.99x; 16 warps 0.84-1.09x).
        BLOCK_B, BLOCK_T, num_warps = 1, 2048, 8
    elif 512 <= T <= 1024 or (retrace and T <= 2048 and sms >= B):
        # One row a program, the whole horizon one tile (4096x512: 13.2 -> 12.0 us). With at
        # most a row an SM, a program's latency is the call's: twice the warps (64x512 0.87-
        # 0.97x the time for all but Retrace, 128x1024 0.95-1.00x), and Retrace's rows of up
        # to 2048 steps in one tile too (128x2048 9.52 -> 6.60 us in 16 warps), in at least 8
        # (H100, data/h100/retrace_512.csv: 32-128 rows of 512 steps 0.88-0.92x the time of 4).
        BLOCK_B, BLOCK_T = 1, _pow2(T)
        num_warps = BLOCK_T // (128 if sms >= B else per_warp)
        # Up to 32 rows an SM (H100 tile_512*.csv: TD(lambda) 0.82-0.92x the time in 4 warps
        # at 256-4096 rows; more rows unmeasured).
        if BLOCK_T == 512 and traits.warps512 and itemsize == 4 and 32 * sms >= B:
            num_warps = traits.warps512
        if retrace and sms >= B:
            num_warps = max(8, num_warps)
    elif T > 1024 and (not wide or (not retrace and T <= 8192 and
                                    4 < B <= _wide_walk_rows(T, itemsize, traits) * sms)):
        # One row a program in tiles of 1024 (512x4096: prefix sum 6.9 -> 6.2 us, GAE 12.8 ->
        # 11.9, bf16 GAE 11.4 -> 10.4); V-trace's too, up to two rows an SM, 16-bit four
        # (split_rows.csv, split-more, split-long and split-trunc against 512-step tiles in 2
        # warps: 64x2048 to 256x4096 0.64-0.81x the time, truncated 0.62-0.76x; 512x4096 bf16
        # 0.88-0.90x, fp32 0.96x but truncated 1.12x; 1024 rows and more 0.99-1.10x;
        # split-wide, 256x8192 against two passes: 27.1 -> 18.3 us, bf16 15.1 -> 9.3). fp32
        # rows of up to 4096 steps up to three an SM (H100, tile_4096_wide.csv: 384x4096 16.5
        # -> 14.6 us, truncated 0.97x; 384x3072 0.82x; at 512x4096 truncated rows lost, 1.07x,
        # so four an SM walk only without truncations: vtrace_walk_rows.csv, H200 0.86-0.94x).
        BLOCK_B, BLOCK_T, num_warps = 1, 1024, 4
    else:
        BLOCK_T = min(_pow2(T), 512)
        BLOCK_B = min(_pow2(B), max(1, tile // BLOCK_T))
        while BLOCK_B > 1 and triton_cdiv(B, BLOCK_B) < 4 * sms:
            BLOCK_B //= 2
        if not wide:
            # One tile a program (ONE_TILE): 128 elements a warp in fp32 and fp64, 256 in 16
            # bits (warp_elements.csv, against 256 in every dtype: fp32 4096x128 0.88-0.97x
            # the time, 32768x32 0.88-0.99x, 2048x256 0.88-0.98x; fp64 0.83-1.02x; bf16 at
            # 128 1.05-1.64x; 64 lost in fp32, 1.03-1.49x).
            per_warp = 256 if itemsize == 2 else 128
            num_warps = max(1, min(8, (BLOCK_B * BLOCK_T) // per_warp))
        elif not retrace and itemsize == 4 and T <= BLOCK_T and BLOCK_B * BLOCK_T <= 512:
            # V-trace's fp32 one-tile rows in tiles of up to 512 elements: 128 elements a warp
            # (vtrace_warps.csv, against 256: 4096x128 0.94x the time, 16384x32 0.95x,
            # 2048x256 0.92x; its 1024-element tiles 0.99-1.04x, bf16 at 128 1.28-1.57x).
            num_warps = max(1, (BLOCK_B * BLOCK_T) // 128)
    row_blocks = triton_cdiv(B, BLOCK_B)
    chunks = triton_cdiv(T, BLOCK_T)
    # up to four rows split from 4096 steps (split_rows.csv, split-long: 4x8192 0.55-0.65x the
    # time of walking them, V-trace 2x4096 0.59x)
    few_rows = B <= 4 and T >= 4096 and not retrace
    if row_blocks < 2 * sms and (chunks >= 16 or few_rows) and not many_long_rows:
        return _split_time(B, T, wide, retrace, itemsize, traits)
    if num_warps is None:
        num_warps = max(1, min(8, (BLOCK_B * BLOCK_T) // per_warp))
    return ScanConfig(BLOCK_B, BLOCK_T, num_warps, chunks * BLOCK_T)


def _wide_walk_rows(T: int, itemsize: int, traits: TileTraits) -> int:
    """Up to how many of V-trace's rows of 1025-8192 steps an SM walk 1024-step tiles: 16-bit
    four, fp32 ``traits.walk_rows32`` up to 4096 steps (as many as its registers let an SM hold,
    sass_walks.csv) and two beyond, fp64 three up to 4096 steps."""
    if itemsize < 4:
        return 4
    if T > 4096:
        return 2
    return traits.walk_rows32 if itemsize == 4 else 3


def _split_time(B: int, T: int, wide: bool, retrace: bool, itemsize: int,
                traits: TileTraits) -> ScanConfig:
    """The tile for rows too few to fill the GPU, whose time is split across programs: by
    look-back (``single_pass``) or in two passes over segments."""
    two_pass_rows, cap16, warps32 = traits.two_pass_rows, traits.cap16, traits.warps32
    if B <= 4 and not retrace:
        if B * T > 1 << 20 and (itemsize != 4 or two_pass_rows >= B):
            # Up to four rows of more than 2**20 steps in all: two passes, whose reads the
            # look-back's per-tile latency does not hide (split_rows.csv, split-long: 1x4194304
            # discounted returns and prefix sum 1.12x the time in one-warp 512-step look-back
            # tiles, bf16 1.24-1.38x, 4x1048576 0.97-1.10x). fp32 estimators with more inputs
            # look back (``two_pass_rows``). 2048-step tiles in four warps over segments of
            # 8192, 4096 up to 2**21 elements, for about four programs an SM (split-tile,
            # against 1024-step tiles over 8192: 0.84-0.97x the time in fp32 and bf16 from
            # 2**21 to 2**22 elements; 4x524288 in 4096-step segments 0.88x the 8192-step
            # ones' time); 1024 for the fp32 discounted returns (``two_pass_steps32``:
            # 4x1048576 1.16x, 1x4194304 1.08x in 2048), 16-bit V-trace (split-twopass:
            # 1.17-1.25x) and fp64 (not timed in 2048).
            if wide or itemsize == 8:
                steps = 1024
            else:
                steps = traits.two_pass_steps32 if itemsize == 4 else 2048
            seg = 4096 if steps == 2048 and B * T <= 1 << 21 else 8192
            return ScanConfig(1, steps, 4, seg)
        # Fewer steps, or fp32 with more inputs: look back in one-warp 512-step tiles
        # (split_rows.csv, split-more and split-long, against two passes: 1x16384 to 4x262144
        # 0.47-0.72x the time in fp32, bf16 and fp64, 1x1048576 0.76-0.94x; against 2048-step
        # look-back tiles, fp32 4x1048576 GAE 0.96x, V-trace 0.84x, 1x4194304 GAE 0.87x
        # against two passes, V-trace 0.83x).
        return ScanConfig(1, 512, 1, 512, True)
    if T >= 131072 or retrace:
        # Single-pass look-back, one row-tile a program: the inputs are read once
        # (64x131072: 78.8 -> 62.8 us, 1x4194304: 67.5 -> 49.7). Tiles from
        # words_probe.csv (64x131072 and 16x524288): fp32 in 1024 steps, two warps (four
        # for V-trace): discounted returns 48.2 -> 34.9 us, TD(lambda) 51.0 -> 40.6,
        # V-trace 82.9 -> 69.9 against 2048 steps in 8 warps, GAE 47.8 -> 45.6 in 4.
        # Retrace in one-warp 256-step tiles, any dtype
        # (64x131072 fp32 208.9 -> 192.3 us, 1x4194304 133.8 -> 104.3, bf16 175.8 ->
        # 169.0 against 1024 steps in 4 warps); 16-bit V-trace in one-warp 512-step tiles
        # (64x131072 bf16 70.6 us, in 2048-step tiles 82-86), the other
        # 16-bit rows in one-warp 1024-step tiles (words16.csv, bf16 and fp16: discounted
        # returns 24.8 -> 20.9 us against two passes, TD(lambda) 28.4 -> 24.1 and GAE
        # 34.1 -> 29.2 against 2048 steps in 4 warps; the prefix sum and eligibility
        # traces since their flag at t-1 comes from registers, neighbour_probe.csv: bf16
        # 64x131072 20.5 -> 19.2 us and 20.8 -> 18.8, fp16 24.9 -> 21.2 against two passes).
        # Retrace looks back from 8192 steps too (retrace rows, 64x8192: 23.1 -> 14.7 us,
        # bf16 19.1 -> 9.7 against two passes).
        if retrace:
            return ScanConfig(1, 256, 1, 256, True)
        # Register caps from 2**22 elements, where the tiles outnumber the programs an SM
        # holds many times over (registers.csv, 64x131072 and 16x524288; long.csv, fp32
        # 16x262144 uncapped: prefix sum 18.9 -> 21.4 us, GAE 24.3 -> 25.4; 16x131072
        # uncapped: GAE 13.7 -> 12.7, TD(lambda) 12.7 -> 12.3).
        many = B * T >= 1 << 22
        if itemsize == 4:
            if wide:
                # V-trace at 96 (101 uncapped; 64x131072 69.4 -> 67.0 us)
                return ScanConfig(1, 1024, 4, 1024, True, max_registers=96 * many)
            if warps32 == 1:
                # one warp uncapped (split_rows.csv, split-long, discounted returns 16x262144
                # to 16x524288: 0.91-0.95x the two capped warps' time; order_tiles.csv, by
                # launch index, 16x131072 to 64x131072: TD(lambda) 0.80-0.93x, GAE in 512
                # steps 0.85-0.96x)
                steps = traits.look_back_steps32
                return ScanConfig(1, steps, 1, steps, True)
            # Two-warp tiles capped at 80 registers a thread (103 for eligibility traces
            # uncapped: 8 programs an SM, 12 capped; 64x131072: eligibility traces 37.6 ->
            # 32.6 us, prefix sum 38.2 -> 33.3, GAE 44.1 -> 41.9, discounted returns 35.4
            # -> 34.6; 64 spills and loses).
            return ScanConfig(1, 1024, 2, 1024, True, max_registers=80 * many)
        # 16-bit one-warp tiles at the estimator's ``cap16`` (149-168 registers uncapped)
        if itemsize == 2:
            return ScanConfig(1, 512 if wide else 1024, 1, 512 if wide else 1024, True,
                              max_registers=cap16 * many)
        return ScanConfig(1, 1024 if wide else 2048, 4, 1024 if wide else 2048, True)
    # More than four rows of 16384-65536 steps look back too, in one-warp 512-step tiles
    # (split_rows.csv, 16x65536 to 128x16384 against two passes: GAE 0.76-0.85x the time,
    # V-trace 0.72-0.84x, bf16 0.81-0.85x; fp64 16x65536 to 64x16384 0.73-0.93x).
    return ScanConfig(1, 512, 1, 512, True)


def _interleaved(BLOCK_B: int, BLOCK_T: int, num_warps: int, itemsize: int) -> int:
    """``flip`` of an fp32 time-major tile held as interleaved runs: a 16-byte load holds 4
    envs, so a row block spans BLOCK_B / 4 lanes and the warp's other lanes and every warp lie
    along time; a thread holds every G-th column, and interleaved runs make its columns
    consecutive steps, composed in registers (tile_probe.csv, interleaved and runs rows:
    4096x128 16x128 tiles 0.76-0.85x the time of latest step first, 32768x32 32x16 tiles
    0.84-0.98x). Other dtypes lay the tile out otherwise: latest step first."""
    R = BLOCK_T * BLOCK_B // (128 * num_warps)
    return -R if itemsize == 4 and R > 1 else 1


def _runs16(config: ScanConfig) -> ScanConfig:
    """A 16-bit time-major tile (16-bit outputs; not Retrace's; rows that take the fp32 tile four
    envs a load, ``_launch.four_loads``, do not come here) held latest step first, in
    interleaved runs of the R steps a thread holds instead, as fp32's (``_interleaved``; a
    16-byte load holds 8 envs here). H100, bf16 (data/h100/tn16_ab.csv, in turn): 0.73-0.97x
    the time at 32768x32, 512x4096 and 2048x1024 (V-trace 512x4096 31.3 -> 24.0 us); the
    look-back's tile keeps latest step first (64x131072: 0.94-1.08x). Tiles of fp32 values
    (``narrow_loads``) lost in such runs, 1.06-4.8x."""
    R = config.BLOCK_T * config.BLOCK_B // (256 * config.num_warps)
    if config.single_pass or config.BLOCK_B < 16 or R < 2 or config.flip != 1:
        return config
    return replace(config, flip=-R)


def twice_the_envs(config: ScanConfig) -> ScanConfig:
    """``config``'s fp32 time-major tile with twice the envs in twice the warps: each thread
    holds the same runs of the same steps (sm_90, bf16: within 3 % of the instructions and
    registers, data/h200/sass_mixed.csv, tile ``wide``)."""
    w = 2 * config.num_warps
    return replace(config, BLOCK_B=2 * config.BLOCK_B, num_warps=w,
                   flip=_interleaved(2 * config.BLOCK_B, config.BLOCK_T, w, 4))


def wide_rows16(config: ScanConfig, B: int, T: int, sms: int) -> ScanConfig:
    """16-bit rows in the fp32 tile (``_launch.tile_of``): where it is 16 envs wide, a row block
    is 32 bytes a step, one sector; rows of one tile whose 32-env programs still fill 15/16 of
    the SMs take ``twice_the_envs`` (H100, bf16, data/h100/bf16_wide_ab*.csv, two runs, four
    estimators: 4096x128 0.90-0.96x the time, 8192x128 0.84-0.89x, 4096x64 0.89-1.00x; at
    1024x128, 32 programs, 1.04-1.18x; walks of several tiles 0.98-1.42x). Shipped, against
    the 16-env tile (bf16_wide_rule.csv): 0.83-1.00x, the bare engine 0.86-0.98x."""
    if (config.BLOCK_B != 16 or config.flip >= 0 or config.single_pass
            or T > config.BLOCK_T or 16 * triton_cdiv(B, 32) < 15 * sms):
        return config
    return twice_the_envs(config)


def runs32(config: ScanConfig) -> ScanConfig:
    """``config``'s fp32 time-major tile with twice the envs in the same warps: each thread's
    interleaved runs twice as long."""
    return replace(config, BLOCK_B=32,
                   flip=_interleaved(32, config.BLOCK_T, config.num_warps, 4))


# 128-step tiles of 32 envs, one a program, by look-back: fp32's time-major look-back tile
LOOK_BACK32 = ScanConfig(32, 128, 4, 128, True, _interleaved(32, 128, 4, 4))


def wide_walks16(config: ScanConfig, B: int, T: int, sms: int, traits: TileTraits) -> ScanConfig:
    """16-bit rows in the fp32 tile (``_launch.tile_of``) that a 16-env program walks in one pass
    over at least 4 tiles, 32 bytes a step: in 32-env tiles, by look-back (``LOOK_BACK32``) while
    those programs number under ``traits.walk16_share`` of the SMs, else in longer runs
    (``runs32``). H100, bf16 (data/h100/bf16_walk_ab.csv and the arms of bf16_walk_rule.csv, two
    rounds each, against the 16-env tile): the decayed sum (eligibility traces, prefix sum; share 1)
    by look-back 0.57-0.58x the time at 2048x1024, 0.77-0.81x at 4096x512 and 4096x1024, in runs
    0.88x at 8192x512; GAE and the returns (share 1/2) by look-back 0.77-0.92x at 2048x1024 and
    2048x512 (1.07-1.57x from 4096 envs), in runs 0.80-0.96x from 3072 envs; 2-tile rows 1.00-1.17x
    both ways. V-trace's runs spill (1.8-2.5x), its look-back 0.94-1.31x."""
    if (not traits.walk16_share or config.BLOCK_B != 16 or config.flip >= 0
            or config.single_pass or config.seg_len < T or T <= 3 * config.BLOCK_T):
        return config
    if triton_cdiv(B, 32) < traits.walk16_share * sms:
        return LOOK_BACK32
    return runs32(config)


def _retrace_rows_abound(T: int) -> ScanConfig:
    """Retrace's fp32 time-major rows where they abound, up to 128 steps (tn_retrace.csv,
    against one-warp 16x32 tiles in Triton's reverse scan): one-warp tiles walked in
    interleaved runs, 16x16 in runs of 2 at 32 steps (32768x32 35.0 -> 25.4 us, 65536x32 66.5
    -> 47.0) and 16x32 in runs of 4 beyond (16384x64 32.4 -> 29.5, 16384x128 61.9 -> 56.6);
    up to 16 steps one tile in 4 warps, latest step first (32768x16 12.5 -> 10.2)."""
    if T <= 16:
        BLOCK_T = _pow2(T)
        return ScanConfig(16, BLOCK_T, 4, BLOCK_T, flip=True)
    BLOCK_T = 16 if T <= 32 else 32
    return ScanConfig(16, BLOCK_T, 1, triton_cdiv(T, BLOCK_T) * BLOCK_T,
                      flip=_interleaved(16, BLOCK_T, 1, 4))


def _retrace_16bit(T: int, few: bool) -> ScanConfig:
    """Retrace's 16-bit time-major tiles up to 128 steps, latest step first
    (tn_retrace_bf16.csv, bf16: the reverse scan's tiles flipped took 0.86-0.91x its time):
    where rows abound, 16 x 8 in one warp up to 32 steps (32768x32 22.3 -> 14.2 us, 32768x16
    10.0 -> 7.6) and 16 x 32 beyond (16384x128 45.0 -> 38.8); few row blocks, one 16xT tile
    in 4 warps (4096x128 13.8 -> 11.3)."""
    if few:
        BLOCK_T, warps = _pow2(T), 4
    else:
        BLOCK_T, warps = min(_pow2(T), 8 if T <= 32 else 32), 1
    return ScanConfig(16, BLOCK_T, warps, triton_cdiv(T, BLOCK_T) * BLOCK_T, flip=True)


def _time_major_config(B: int, T: int, sms: int, wide: bool, retrace: bool,
                       itemsize: int, two_pass: tuple = (1 << 22, 1 << 23),
                       look_back_steps: int = 256, row_warps: int = 2) -> ScanConfig:
    """``[T, B]`` inputs: tiles across the contiguous batch axis. Backward scans hold their
    tiles latest step first (``flip``; time is not the vectorised axis here), which saves
    Triton's lane reversal: 32768x32 GAE 7.3 -> 4.1 us, 512x4096 28.7 -> 19.7 (roofline.csv),
    or, fp32, as interleaved runs (``_interleaved``; forward scans too). Retrace keeps the
    reverse scan (flipped: 3-7 % slower, tile_probe.csv) but for fp32 tiles of few row blocks,
    interleaved, fp32 rows that abound up to 128 steps (``_retrace_rows_abound``) and 16-bit
    tiles up to 128 steps (``_retrace_16bit``).
    ``two_pass``, ``look_back_steps``, ``row_warps``: :attr:`TileTraits.time_major_two_pass`,
    :attr:`TileTraits.time_major_look_back_steps`, :attr:`TileTraits.time_major_row_warps`."""
    flip = not retrace
    fp32 = itemsize == 4 and not retrace
    if B < 16:
        # As tall as the batch, 2048 elements; long: look-back (4x1048576: 164 -> 77 us).
        BLOCK_B = _pow2(B)
        BLOCK_T = min(_pow2(T), 2048 // BLOCK_B)
        chunks = triton_cdiv(T, BLOCK_T)
        if chunks >= 16:
            return ScanConfig(BLOCK_B, BLOCK_T, 4, BLOCK_T, True, flip)
        return ScanConfig(BLOCK_B, BLOCK_T, 4, chunks * BLOCK_T, flip=flip)
    row_blocks = triton_cdiv(B, 16)
    if row_blocks >= 4 * sms and T <= 128 and not retrace:
        # Rows abound: 32x16 one-warp tiles (32768x32 GAE, flipped: 4.3 us; 128x8 one-warp 4.6,
        # 16x32 four-warp 7.7; tile_probe.csv), fp32 in interleaved runs of 4 (runs rows:
        # discounted returns 3.65 -> 3.37 us, GAE 4.12 -> 4.05, V-trace 6.93 -> 5.84).
        BLOCK_T = min(_pow2(T), 16)
        return ScanConfig(32, BLOCK_T, 1, triton_cdiv(T, BLOCK_T) * BLOCK_T,
                          flip=_interleaved(32, BLOCK_T, 1, itemsize) if fp32 and BLOCK_T == 16
                          else flip)
    if T <= 128 or row_blocks >= 4 * sms:
        # 16x32 tiles (4096x128: 12.6 -> 6.6 us); one warp each when rows abound. Up to 128
        # steps from fewer row blocks: 16x64 (4096x128 discounted returns 4.07 -> 3.95 us, GAE
        # 4.83 -> 4.44, V-trace 6.28 -> 5.90; wider tiles lost, tile_probe.csv); in fp32 one
        # 16xT tile in interleaved runs (16x128 in runs of 4: 4.02 -> 3.40, 4.42 -> 3.55, 6.06
        # -> 4.63 against 16x64 latest step first; Retrace 20.7 -> 16.1, retrace rows). In 2
        # warps but Retrace's (tn_abound.csv, 4096x128: 0.87-0.98x the time of 4 warps, 4096x64
        # 0.87-0.93x; tn_retrace.csv: Retrace's 2 warps lost), and GAE's and V-trace's from at
        # most a block an SM (``row_warps``; 1024x128: 4 warps 0.90-0.93x the time of 2).
        few = row_blocks < 4 * sms
        if few and T > 32 and itemsize == 4:
            BLOCK_T = _pow2(T)
            warps = 4 if retrace else row_warps if row_blocks <= sms else 2
            return ScanConfig(16, BLOCK_T, warps, BLOCK_T,
                              flip=_interleaved(16, BLOCK_T, warps, 4))
        if retrace and not few and itemsize == 4 and T <= 128:
            return _retrace_rows_abound(T)
        if retrace and itemsize == 2 and T <= 128:
            return _retrace_16bit(T, few)
        BLOCK_T = 64 if few and T > 64 and not retrace else min(_pow2(T), 32)
        warps = 4 if few else 1
        return ScanConfig(16, BLOCK_T, warps, triton_cdiv(T, BLOCK_T) * BLOCK_T, flip=flip)
    # 16x128 tiles (4096x512: 36.0 -> 16.4 us); few row blocks: split time.
    BLOCK_T = min(_pow2(T), 128)
    chunks = triton_cdiv(T, BLOCK_T)
    # 32x128 tiles in 4 warps, one a program, by look-back in windows of 8 (tn_sweep.csv); from
    # 2**21 elements the estimator's steps (tn_variants.csv, 32x256: 512x4096 discounted returns
    # 11.4 -> 9.7 us, TD(lambda) 13.2 -> 10.7; 256x2048 1.01-1.30x; GAE 1024x8192 1.16x), but
    # V-trace's, whose 32x256 tiles spill (10-12x the time)
    steps = look_back_steps if B * T >= 1 << 21 and not wide else 128
    look_back = ScanConfig(32, steps, 4, steps, True, _interleaved(32, steps, 4, 4))
    if row_blocks < sms // 2 and chunks >= 16:
        if T <= 16384 and not retrace:
            # fp32: the look-back beside two passes, 128-16384 steps from 128 envs
            # (tn_sweep.csv: 256x2048 GAE 12.2 -> 6.8 us, 1024x8192 51.7 -> 35.7 eligibility
            # traces, V-trace everywhere 0.59-0.99x); two passes held only where the
            # estimator's few inputs fit L2 twice (``two_pass``: 2**22 elements, 512x8192
            # discounted returns 18.2 against 22.4 us by look-back).
            if fp32 and (wide or not two_pass[0] <= B * T < two_pass[1]):
                return look_back
            # Two passes over short segments of one-warp tiles (512x4096, flipped: GAE 23.4 ->
            # 20.0 us, discounted returns 21.6 -> 16.8 against look-back; tile_probe.csv). fp32
            # in interleaved runs (runs rows): 32x32 over 128 steps (discounted returns 11.9 ->
            # 11.0 us, GAE 15.0 -> 14.1 against 16x32).
            if fp32:
                return ScanConfig(32, 32, 1, 128, flip=_interleaved(32, 32, 1, 4))
            return ScanConfig(32, 16, 1, 128, flip=flip)
        if fp32 and B >= 32:
            # 32x128 tiles in interleaved runs of 8 (runs rows, 64x131072): segments for about
            # two programs an SM, in two passes (discounted returns 73.6 -> 54.8 us, GAE 77.8 ->
            # 70.8, the prefix sum 72.2 -> 54.9 against 16x128 look-back) or, up to 8 tiles a
            # segment, one launch that reduces, looks back and scans again from L2 (segment
            # rows: 55.2 -> 52.4, 55.7 -> 52.1, eligibility traces 55.4 -> 52.1, GAE 71.6 ->
            # 71.4; longer segments lost); V-trace by look-back (111.7 -> 102.3; two passes
            # and segments spill).
            if wide:
                return look_back  # 32x128: V-trace's tiles take 128 steps at every size
            want = triton_cdiv(2 * sms, triton_cdiv(B, 32))
            seg_chunks = max(4, triton_cdiv(chunks, want))
            if seg_chunks <= 8:
                # The segment look-back in 4 tiles, since it reads its predecessors in one round
                # (segwords.csv, neighbour_probe.csv, 64x131072 against 8: discounted returns
                # 51.4 -> 48.7 us, prefix sum 51.1 -> 48.0, eligibility traces 51.5 -> 48.2,
                # GAE 72.4 -> 71.4, TD(lambda) 67.6 -> 66.8).
                seg_chunks = 4
            return ScanConfig(32, 128, 4, seg_chunks * 128, seg_chunks <= 8,
                              _interleaved(32, 128, 4, 4))
        # Single-pass look-back (512x4096: 45.2 -> 29.3 us, 64x131072: 215 -> 124), interleaved
        # runs (64x131072: discounted returns 79.4 -> 74.2 us, GAE 86.6 -> 78.6, V-trace 134
        # -> 113); fp32 Retrace too, since the look-back publishes words (words_probe.csv:
        # 512x4096 100.4 -> 85.0 us, 64x131072 423 -> 313 against one-warp 16x32 tiles).
        runs = _interleaved(16, BLOCK_T, 4, 4)
        if retrace:
            return ScanConfig(16, BLOCK_T, 4, BLOCK_T, True, runs if itemsize == 4 else 0)
        return ScanConfig(16, BLOCK_T, 4, BLOCK_T, True, runs if fp32 else flip)
    if fp32 and row_blocks <= sms and chunks >= (8 if row_blocks < sms // 2 else 16):
        # Up to a 16-row block an SM, one-pass programs are too few: the look-back from 16
        # tiles (tn_sweep.csv, 2048x4096: 0.72-0.90x the one-pass time; 2048x1024 lost), from
        # 8 under half the SMs (tn_check.csv, 512x1024: 0.55-0.66x; 1024x512 0.94-1.10x)
        return look_back
    # One pass; fp32 in interleaved runs of 4 (tn_sweep.csv, 2048x1024 0.65-0.85x the time of
    # latest step first; tn_check.csv, 4096x2048 0.85-0.93x, 8192x2048 GAE and TD(lambda) 1.06x)
    return ScanConfig(16, BLOCK_T, 4, chunks * BLOCK_T,
                      flip=_interleaved(16, BLOCK_T, 4, 4) if fp32 else flip)
