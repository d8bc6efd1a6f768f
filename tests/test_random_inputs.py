"""Every estimator against the float64 reference on random inputs: shapes, layouts, dtypes,
flag types, segment-split launches, on every backend (GPU, interpreter, torch)."""
import contextlib
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import triton
import triton.language as tl
from conftest import BACKENDS, HAS_CUDA, TOL, assert_close, device_of, record_launches
from estimators import ESTIMATORS, LAYOUTS, every_kernel, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan
from paper_repro.kernels.affine_scan import as_word, from_word

IDS = [e.name for e in ESTIMATORS]


def check(est, d, tol, layout=None, **kw):
    want = outputs(est.call(ref, d))
    if layout is not None:
        got = [layout.back(y) for y in outputs(est.call(P, layout.apply(d),
                                                        time_dim=layout.time_dim, **kw))]
    else:
        got = outputs(est.call(P, d, **kw))
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(f"{est.name}[{i}]", g, w, tol)


# Many rows: 32 under the interpreter (its 4 SMs give 32 rows the long-T tiles of 64, at half
# the programs, which it runs one after another).
MANY = 64 if HAS_CUDA else 32


# Under the interpreter MANY x 4097 takes 3 x 4097's tiles and MANY x 1000's row blocks at ten
# times their cost; the GPU runs it.
SHAPES = [(n, t) for n in (1, 3, MANY) for t in (1, 2, 63, 1000, 4097)
          if HAS_CUDA or (n, t) != (MANY, 4097)]


@pytest.mark.parametrize("est,N,T", every_kernel(SHAPES, [f"{n}-{t}" for n, t in SHAPES]))
def test_shapes(est, N, T, backend):
    d = make_inputs(N, T, device=device_of(backend))
    check(est, d, TOL[torch.float32], validate=True)


@pytest.mark.parametrize("layout", LAYOUTS, ids=[x.name for x in LAYOUTS])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_layouts(est, layout, backend):
    d = make_inputs(6, 37, device=device_of(backend))
    check(est, d, TOL[torch.float32], layout)


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("est,dtype", every_kernel([(x,) for x in DTYPES], map(str, DTYPES)))
def test_dtypes(est, dtype, backend):
    d = make_inputs(5, 300, dtype=dtype, device=device_of(backend))
    got = outputs(est.call(P, d))
    assert all(g.dtype == dtype for g in got)
    check(est, d, TOL[dtype])


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8, torch.int32, torch.int64,
                                        torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_flag_dtypes(est, flag_dtype, backend):
    d = make_inputs(4, 50, flag_dtype=flag_dtype, device=device_of(backend))
    check(est, d, TOL[torch.float32])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_without_truncations(est, backend):
    d = make_inputs(7, 129, truncations=False, device=device_of(backend))
    check(est, d, TOL[torch.float32])


SPLITS = [L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=32),
          L.ScanConfig(BLOCK_B=4, BLOCK_T=8, num_warps=1, seg_len=8),
          L.ScanConfig(BLOCK_B=1, BLOCK_T=32, num_warps=1, seg_len=64),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=16, single_pass=True),
          L.ScanConfig(BLOCK_B=1, BLOCK_T=8, num_warps=1, seg_len=8, single_pass=True),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=32, flip=True),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=8, num_warps=1, seg_len=8, single_pass=True, flip=True),
          L.ScanConfig(BLOCK_B=4, BLOCK_T=32, num_warps=1, seg_len=1 << 20, flip=True),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=32, flip=4),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=16, single_pass=True, flip=4),
          L.ScanConfig(BLOCK_B=4, BLOCK_T=32, num_warps=1, seg_len=1 << 20, flip=8),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=32, flip=-4),
          L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=16, single_pass=True, flip=-2),
          L.ScanConfig(BLOCK_B=1, BLOCK_T=8, num_warps=1, seg_len=40, flip=4)]
SPLIT_IDS = ["seg32", "seg8", "seg64", "lookback16", "lookback8", "seg32-flip", "lookback8-flip",
             "one-flip", "seg32-runs4", "lookback16-runs4", "one-runs8", "seg32-interleaved4",
             "lookback16-interleaved2", "seg40-runs4"]


def kernels_on(kernels):
    return L.cpu_backend("triton") if kernels == "triton" else contextlib.nullcontext()


@pytest.mark.parametrize("est,config", every_kernel([(c,) for c in SPLITS], SPLIT_IDS))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_time_split_across_programs(est, config, kernels):
    """Reduce-then-scan over time segments, and the single-pass look-back (one tiny tile per
    program), give the same answer."""
    d = make_inputs(5, 101, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config):
        check(est, d, TOL[torch.float32])


def test_segments_fit_the_grid():
    """The heuristic's two passes launch at most MAX_SEGMENTS segments a row on the grid's
    second axis (within CUDA's 65535) at every length up to 2**31 steps, each segment whole
    tiles; the look-back, whose grid is flat, keeps its one-tile segments."""
    from paper_repro.bench.tile_probe import traits_of
    from paper_repro.kernels import _tiles

    fitted = 0
    for name in ("gae", "vtrace", "retrace", "discounted_returns", "eligibility_traces", None):
        traits = traits_of(name) if name else L.TileTraits()
        for itemsize in (2, 4, 8):
            for B in (1, 2, 4, 5, 64):
                for T in (1 << 20, 1 << 23, (1 << 24) + 1, 1 << 28, 3 << 29, (1 << 31) - 1):
                    c = L.choose_config(B, T, False, 132, name in ("vtrace", "retrace"),
                                        name == "retrace", itemsize, traits)
                    f = L.fit_segments(c, T)
                    assert f.seg_len % f.BLOCK_T == 0 and f.seg_len >= c.seg_len
                    assert f.single_pass or f.grid(B, T)[1] <= _tiles.MAX_SEGMENTS, (c, B, T)
                    assert f.grid(B, T)[1] <= 65535 or f.single_pass
                    assert not c.single_pass or f == c
                    fitted += f != c
                    if T <= 1 << 23:  # the lengths the heuristic's segments were timed at
                        assert f == c, (c, B, T)
    assert fitted  # rows past 2**23 steps in two passes needed it


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_two_passes_within_the_segment_limit(est, kernels, monkeypatch):
    """Two passes of more segments than the grid takes launch fewer, longer ones (whole tiles):
    7 segments of 32 steps over 200 under a limit of 3 become 3 of 80, with the reference's
    answer."""
    from paper_repro.kernels import _tiles

    grids = record_launches(monkeypatch, lambda launch: launch.grid)
    monkeypatch.setattr(_tiles, "MAX_SEGMENTS", 3)
    d = make_inputs(3, 200, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(L.ScanConfig(1, 16, 1, 32, flip=4)):
        check(est, d, TOL[torch.float32])
    assert grids and set(grids) == {(3, 3)}, grids


# (tile, T, dtype): one tile of several rows; one-row tiles of one tile; one tile a look-back
# program, several rows in fp32 and one row in bf16
ONE_TILE_CASES = [(L.ScanConfig(BLOCK_B=2, BLOCK_T=16, num_warps=1, seg_len=16, flip=4), 13,
                   torch.float32),
                  (L.ScanConfig(BLOCK_B=1, BLOCK_T=16, num_warps=1, seg_len=16, flip=4), 16,
                   torch.float32),
                  (L.ScanConfig(BLOCK_B=2, BLOCK_T=8, num_warps=1, seg_len=8,
                                single_pass=True, flip=4), 29, torch.float32),
                  (L.ScanConfig(BLOCK_B=1, BLOCK_T=16, num_warps=1, seg_len=16,
                                single_pass=True, flip=8), 45, torch.bfloat16)]


def _one_tile_phase(kernel: str, config, dtype) -> int:
    """The phase each estimator's launch takes (ONE_TILE 5 / walked 0, compile-time look-back
    tile 3 / walked 6), as its tiles were timed best."""
    if not config.single_pass:
        return 0 if kernel == "vtrace" and config.BLOCK_B > 1 else 5
    walked = {"returns": True, "gae": dtype == torch.bfloat16,
              "vtrace": config.BLOCK_B > 1 or dtype == torch.bfloat16}
    return 6 if walked.get(kernel, False) else 3


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: e.name)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_one_tile_phases_by_estimator(est, kernels, monkeypatch):
    """Each estimator's launches take the phase its tiles were timed best in: ONE_TILE (5) for
    one-pass programs of one tile but V-trace's tiles of several rows (0: walked), the
    compile-time one-tile look-back (3) but the returns kernel's (TD(lambda) and discounted
    returns), GAE's 16-bit one and V-trace's but fp32 one-row ones (6: walked); every one
    matches the reference."""
    phases = record_launches(monkeypatch, lambda launch: int(launch.one_pass[-6]) if
                             launch.one_pass is not None else int(launch.single_pass))
    for config, T, dtype in ONE_TILE_CASES:
        d = make_inputs(5, T, dtype=dtype, device=device_of(kernels))
        phases.clear()
        with kernels_on(kernels), L.force_config(config):
            check(est, d, TOL[dtype])
        assert phases and set(phases) == {_one_tile_phase(est.kernel, config, dtype)}, \
            (config, dtype, phases)


TWO_PASS_TILES = [(torch.float32, 4), (torch.bfloat16, 8)]


@pytest.mark.parametrize("dtype,run", TWO_PASS_TILES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_two_pass_tiles_of_long_rows(est, dtype, run, kernels):
    """The two passes' tile of up to four long rows: 2048 steps in four warps over 4096-step
    segments, in the runs of its dtype, the last segment and tile partial."""
    d = make_inputs(2, 9000, dtype=dtype, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(L.ScanConfig(1, 2048, 4, 4096, flip=run)):
        check(est, d, TOL[dtype])


# Two passes that scan, then fix: runs of 4 and 8, time in order, latest step first,
# interleaved runs, segments that are no multiple of the store runs; the fix tile other than
# the first pass's. The inputs: 5 % terminations, none (every step is fixed), non-finite ones.
FIX_TILES = [L.ScanConfig(1, 32, 1, 128, flip=4, fix_steps=8),
             L.ScanConfig(2, 16, 1, 64, flip=8, fix_steps=16, fix_warps=2),
             L.ScanConfig(1, 16, 1, 64, fix_steps=16),
             L.ScanConfig(2, 16, 1, 32, flip=-4, fix_steps=8),
             L.ScanConfig(1, 4, 1, 36, fix_steps=4),
             L.ScanConfig(1, 8, 1, 40, flip=1, fix_steps=8)]
# An 8-env tile in interleaved runs, fed [T, N] inputs.
TIME_MAJOR_FIX_TILES = [L.ScanConfig(8, 16, 1, 64, flip=-4, fix_steps=32)]
FIX_TILES += TIME_MAJOR_FIX_TILES
FIX_IDS = ["runs4", "runs8-rows2", "in-order", "interleaved4", "seg36", "latest-first",
           "time-major"]
FIX_INPUTS = ["terminations", "none", "non-finite"]
FIXING_KERNELS = {"gae", "returns", "decayed_sum"}


@pytest.mark.parametrize("est,config,inputs", [p for p in every_kernel(
    [(c, x) for c in FIX_TILES for x in FIX_INPUTS],
    [f"{n}-{x}" for n in FIX_IDS for x in FIX_INPUTS], lambda case: FIXING_KERNELS)
    if p.values[0].kernel in FIXING_KERNELS])
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_scan_then_fix(est, config, inputs, kernels):
    """Two passes that scan from a zero carry, storing from each row's first zero coefficient
    on, then rescan the steps before it with the true carry, against the reference: every
    step stored by exactly one pass, and a non-finite carry spread as the scan spreads it;
    batch-major rows, and 8-env tiles of ``[T, N]`` inputs."""
    d = make_inputs(3, 301, device=device_of(kernels))
    if inputs == "none":
        d["term"].zero_()
        d["trunc"].zero_()
    if inputs == "non-finite":
        d["r"][1, 37], d["r"][2, 260] = float("nan"), float("inf")
    want = outputs(est.call(ref, d))
    layout = LAYOUTS[1 if config in TIME_MAJOR_FIX_TILES else 0]
    with kernels_on(kernels), L.force_config(config):
        got = outputs(est.call(P, layout.apply(d), time_dim=layout.time_dim))
    for g, w in zip(got, want):
        g, w = layout.back(g).double().cpu(), w.double()
        assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf())
        finite = w.isfinite()
        assert_close(est.name, g[finite], w[finite], TOL[torch.float32])


@pytest.mark.parametrize("est", [p for p in every_kernel([()], ["vtrace"], lambda case: {"vtrace"})
                                 if p.values[0].kernel == "vtrace"])
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_fix_tile_where_the_kernel_does_not_fix(est, kernels):
    """A kernel without the fixing passes takes a tile of ``fix_steps`` as reduce, then scan."""
    d = make_inputs(3, 301, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(FIX_TILES[0]):
        check(est, d, TOL[torch.float32])


SPLIT_RULES = [("gae", 5, 16400, torch.float32, True), ("vtrace", 5, 7700, torch.float32, False),
               ("discounted_returns", 6, 16384, torch.float32, True),
               ("vtrace", 2, 4100, torch.float32, True), ("gae", 3, 5000, torch.float64, True),
               ("prefix_sum_ends_at", 1, 9000, torch.bfloat16, True)]


@pytest.mark.parametrize("name,N,T,dtype,look_back", SPLIT_RULES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}-{c[3]}".replace("torch.", "")
                              for c in SPLIT_RULES])
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_heuristic_split_rules_end_to_end(name, N, T, dtype, look_back, kernels):
    """The heuristic's own tiles where rows too few to fill the GPU look back in 512-step
    tiles (from 16384 steps, or 4096 up to four rows, any dtype) and V-trace walks rows of up
    to 8192 steps (T not a multiple of its tile), against the reference (the interpreter's 4
    SMs make 5-6 rows few)."""
    est = next(e for e in ESTIMATORS if e.name == name)
    d = make_inputs(N, T, dtype=dtype, device=device_of(kernels))
    c = L.choose_config(N, T, False, L.num_sms(d["r"].device), est.kernel == "vtrace",
                        itemsize=dtype.itemsize)
    assert c.single_pass == look_back and (look_back or c.seg_len >= T)
    assert not look_back or c.BLOCK_T == 512
    with kernels_on(kernels):
        check(est, d, TOL[dtype])


FLIPS = {1: "latest-first", 4: "runs4", -4: "interleaved4"}


@pytest.mark.parametrize("est,layout,flip", every_kernel(
    [(x, f) for x in LAYOUTS for f in FLIPS],
    [f"{x.name}-{n}" for x in LAYOUTS for n in FLIPS.values()]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_flipped_tiles_every_layout(est, layout, kernels, flip):
    """Backward scans over tiles held latest step first (or as runs of four ascending steps,
    latest run first, side by side or interleaved), in two passes, on every layout."""
    d = make_inputs(6, 37, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(L.ScanConfig(4, 8, 1, 16, flip=flip)):
        check(est, d, TOL[torch.float32], layout)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_runs_of_steps_dtypes(est, dtype, kernels):
    """The run length the heuristic gives half (8) and double (2) precision, T not a multiple
    of the run."""
    d = make_inputs(3, 45, dtype=dtype, device=device_of(kernels))
    run = L.run_length(16, dtype.itemsize, False)
    with kernels_on(kernels), L.force_config(L.ScanConfig(2, 16, 1, 48, flip=run)):
        check(est, d, TOL[dtype])


@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_runs_must_divide_the_tile(kernels):
    d = make_inputs(2, 20, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(L.ScanConfig(2, 8, 1, 16, flip=3)), \
            pytest.raises(ValueError, match="must divide BLOCK_T"):
        P.compute_gae(d["r"], d["v"], d["term"])
    fix = L.ScanConfig(2, 8, 1, 16, flip=4, fix_steps=6)
    with kernels_on(kernels), L.force_config(fix), \
            pytest.raises(ValueError, match="must divide fix_steps=6"):
        P.compute_gae(d["r"], d["v"], d["term"])


@pytest.mark.parametrize("block", [1, 2], ids=["one-row", "row-block"])
@pytest.mark.parametrize("in_launch_order", [True, False], ids=["launch-order", "tickets"])
@pytest.mark.parametrize("est", every_kernel([()], ["windows"]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_look_back_across_windows(est, kernels, in_launch_order, block, monkeypatch):
    """No tile publishes its inclusive prefix under the interpreter, so every look-back
    composes aggregates back to the boundary, across several windows (in-order execution
    never needs to): 26 tiles of 4 steps there, in windows of 8 for one-row blocks and of 4 for
    row blocks (the GPU: 66 tiles, windows of 32 and 8), time-major and fp64 too; programs
    placed by launch index and by ticket."""
    import triton.language as tl

    from paper_repro.kernels import affine_scan

    if kernels == "cuda" and not in_launch_order:
        pytest.skip("set at import on the GPU: test_gpu.py::test_look_back_by_ticket")
    T, T64 = 261, 150
    if kernels == "triton":
        monkeypatch.setattr(affine_scan, "IN_LAUNCH_ORDER", tl.constexpr(in_launch_order))
        monkeypatch.setattr(affine_scan, "SHORTCUT", tl.constexpr(False))
        monkeypatch.setattr(affine_scan, "WINDOW", tl.constexpr(8))
        monkeypatch.setattr(affine_scan, "BLOCK_WINDOW", tl.constexpr(4))
        T, T64 = 101, 50
    config = L.ScanConfig(BLOCK_B=block, BLOCK_T=4, num_warps=1, seg_len=4, single_pass=True)
    with kernels_on(kernels), L.force_config(config):
        d = make_inputs(3, T, device=device_of(kernels))
        check(est, d, TOL[torch.float32])
        check(est, d, TOL[torch.float32], LAYOUTS[1])
        d = make_inputs(2, T64, dtype=torch.float64, device=device_of(kernels))
        check(est, d, TOL[torch.float64])


def test_launch_order_setting(monkeypatch):
    """Look-back programs take the launch index on CUDA builds, a ticket on ROCm or on request."""
    from paper_repro.kernels import affine_scan

    monkeypatch.delenv("PAPER_REPRO_LOOKBACK_TICKETS", raising=False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert affine_scan._in_launch_order()
    monkeypatch.setenv("PAPER_REPRO_LOOKBACK_TICKETS", "1")
    assert not affine_scan._in_launch_order()
    monkeypatch.delenv("PAPER_REPRO_LOOKBACK_TICKETS")
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert not affine_scan._in_launch_order()


@triton.jit
def round_trip(x_ptr, word_ptr, back_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    word = as_word(tl.load(x_ptr + i, mask=i < n))
    tl.store(word_ptr + i, word, mask=i < n)
    tl.store(back_ptr + i, from_word(word), mask=i < n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_published_words(dtype, kernels):
    """A look-back word is a value's complemented bits: no value publishes as zero (zero is
    unpublished), and every value but the all-ones NaN reads back bit for bit."""
    ints = torch.int32 if dtype == torch.float32 else torch.int64
    bits = torch.tensor([-1, 0, 1, -2], dtype=ints)  # all-ones NaN, +0, a denormal, a NaN
    x = torch.cat([bits.view(dtype), torch.tensor([-0.0, float("inf"), -float("inf"),
                                                   float("nan"), 1.5, -3.25], dtype=dtype)])
    x = x.to(device_of(kernels))
    word, back = torch.empty_like(x, dtype=ints), torch.empty_like(x)
    round_trip[(1,)](x, word, back, x.numel(), BLOCK=16)
    assert (word != 0).all()
    assert torch.equal(back[1:].view(ints), x[1:].view(ints))
    assert back[0].isnan()


@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_look_back_passes_nan_payloads(kernels):
    """An all-ones NaN input (the one bit pattern whose complement is zero) flows through the
    look-back like any NaN: no successor waits on it forever, and the tiles after it in scan
    order read NaN while those before do not."""
    device = device_of(kernels)
    alpha = torch.rand(2, 64, device=device)
    alpha.view(torch.int32)[:, 40] = -1
    config = L.ScanConfig(BLOCK_B=1, BLOCK_T=8, num_warps=1, seg_len=8, single_pass=True)
    with kernels_on(kernels), L.force_config(config):
        got = P.affine_scan(alpha, torch.full_like(alpha, 0.9)).cpu()  # backward in time
    assert got[:, :41].isnan().all() and not got[:, 41:].isnan().any()


@pytest.mark.parametrize("est", every_kernel([()], ["windows"]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_two_passes_across_windows(est, kernels):
    """Reduce-then-scan over 35 segments in runs of steps: the farthest segment's incoming carry
    composes 34 aggregates, two windows of 32 (time-major two passes: SPLITS)."""
    d = make_inputs(2, 280, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(L.ScanConfig(2, 8, 1, 8, flip=4)):
        check(est, d, TOL[torch.float32])


SEGMENT_LOOKBACKS = {"seg8": L.ScanConfig(2, 4, 1, 8, True),
                     "seg32-interleaved4": L.ScanConfig(2, 8, 1, 32, True, -4),
                     "seg24-runs4": L.ScanConfig(1, 8, 1, 24, True, 4)}


@pytest.mark.parametrize("est,config,layout", every_kernel(
    [(c, x) for c in SEGMENT_LOOKBACKS.values() for x in LAYOUTS[:2]],
    [f"{n}-{x.name}" for n in SEGMENT_LOOKBACKS for x in LAYOUTS[:2]]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_segment_look_back(est, config, layout, kernels):
    """A look-back over segments of several tiles (PHASE 4: each program reduces its segment,
    looks back, then scans it again), T not a multiple of the segment, in runs of steps too."""
    d = make_inputs(3, 50, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config):
        check(est, d, TOL[torch.float32], layout)


def test_reducing_sweeps_in_scan_order():
    """With PAPER_REPRO_REDUCE_IN_ORDER=1 (read at import) every reducing sweep takes its tiles
    in scan order, not against it: multi-tile two passes and segment look-backs, in a fresh
    process, still give the reference."""
    env = dict(os.environ, PAPER_REPRO_REDUCE_IN_ORDER="1")
    here = os.path.abspath(__file__)
    root = os.path.dirname(os.path.dirname(here))
    code = ("from paper_repro.kernels import affine_scan\n"
            "assert not affine_scan.REDUCE_AGAINST_ORDER")
    assert subprocess.run([sys.executable, "-c", code], env=env, cwd=root).returncode == 0
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{here}::test_time_split_across_programs",
                           f"{here}::test_segment_look_back", "-k", "seg40 or seg24 or seg64"],
                          env=env, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def _h200_tiles():
    """Each tile the heuristic picks on a 132-SM GPU for the tuning shapes, with its layout,
    whether it splits time and how its steps are ordered (warps aside: the interpreter ignores
    them); test_runs_of_steps_dtypes covers the run lengths of other value sizes. Maps each
    tile to the kernels it was chosen for."""
    from paper_repro.tuning import SHAPES

    found = {}
    for (N, T) in SHAPES + [(4096, 16), (32768, 64), (4096, 32), (64, 32768), (256, 8192),
                            (512, 2048), (256, 4096)]:
        for tm in (False, True):
            for wide, retrace, kernels in ((False, False, NARROW), (True, False, {"vtrace"}),
                                           (True, True, {"retrace"})):
                c = L.choose_config(N, T, tm, 132, wide, retrace)
                tile = (c.BLOCK_B, c.BLOCK_T, tm, c.seg_len < T, c.single_pass, c.flip)
                found.setdefault(tile, set()).update(kernels)
    return dict(sorted(found.items()))


NARROW = {e.kernel for e in ESTIMATORS} - {"vtrace", "retrace"}
H200_TILES = _h200_tiles()


@pytest.mark.parametrize("est,tile", every_kernel([(t,) for t in H200_TILES], map(str, H200_TILES),
                                                  lambda case: H200_TILES[case[0]]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_shipped_gpu_tiles(est, tile, kernels):
    """The GPU heuristic's tiles on small inputs, in the layout they serve."""
    BLOCK_B, BLOCK_T, time_major, split, single_pass, flip = tile
    config = L.ScanConfig(BLOCK_B, BLOCK_T, 1, BLOCK_T if split else 1 << 20, single_pass, flip)
    d = make_inputs(min(19, BLOCK_B + 3), 2 * BLOCK_T + 3, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config):
        check(est, d, TOL[torch.float32], LAYOUTS[1] if time_major else None)


@pytest.mark.parametrize("shape", [(32768, 32), (16384, 100), (4096, 128)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_retrace_16bit_time_major_tiles(shape, dtype, kernels):
    """Retrace's 16-bit time-major tiles (latest step first) on 16-bit time-major inputs of a
    few tiles."""
    est = next(e for e in ESTIMATORS if e.kernel == "retrace")
    c = L.choose_config(*shape, True, 132, True, True, itemsize=2)
    config = L.ScanConfig(c.BLOCK_B, c.BLOCK_T, 1, 1 << 20, flip=c.flip)
    d = make_inputs(c.BLOCK_B + 3, 2 * c.BLOCK_T + 3, dtype=dtype, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config):
        check(est, d, TOL[dtype], LAYOUTS[1])


SHAPES16 = [(32768, 32), (2048, 1024), (512, 4096)]


def test_16bit_time_major_tiles_in_interleaved_runs():
    """16-bit outputs' time-major tiles hold interleaved runs of the steps a thread holds (8
    envs a 16-byte load); the look-back's tile, Retrace's and fp32 outputs' of narrow loads
    keep latest step first."""
    for N, T in SHAPES16:
        c = L.choose_config(N, T, True, 132, False, False, 2)
        assert -c.flip == c.BLOCK_T * c.BLOCK_B // (256 * c.num_warps) >= 2
        assert L.choose_config(N, T, True, 132, False, False, 4, narrow_loads=True).flip == 1
        assert L.choose_config(N, T, True, 132, True, True, 2).flip >= 0
    assert L.choose_config(64, 131072, True, 132, False, False, 2).flip == 1


@pytest.mark.parametrize("est,shape", every_kernel([(s,) for s in SHAPES16], map(str, SHAPES16)))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_16bit_interleaved_time_major_tiles(est, shape, kernels):
    """The 16-bit time-major tiles in interleaved runs on bf16 time-major inputs of a few
    tiles and a partial row block."""
    c = L.choose_config(*shape, True, 132, est.kernel == "vtrace", est.kernel == "retrace", 2)
    config = L.ScanConfig(c.BLOCK_B, c.BLOCK_T, 1, 1 << 20, flip=c.flip)
    d = make_inputs(c.BLOCK_B + 3, 2 * c.BLOCK_T + 3, dtype=torch.bfloat16,
                    device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config):
        check(est, d, TOL[torch.bfloat16], LAYOUTS[1])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_few_row_blocks_time_major_tile(est, kernels):
    """The fp32 time-major tiles of few row blocks up to 128 steps (16 x 128 in interleaved
    runs of 8 in 2 warps, of 4 in 4: Retrace's, and GAE's and V-trace's from a block an SM), on
    time-major inputs of two row blocks and 100 steps."""
    from paper_repro.kernels import gae, vtrace

    retrace = est.kernel == "retrace"
    wide = est.kernel == "vtrace" or retrace
    traits = {"gae": gae.TILE_TRAITS, "vtrace": vtrace.TILE_TRAITS}.get(est.kernel, L.TileTraits())
    many = L.choose_config(4096, 128, True, 132, wide, retrace, traits=traits)
    few = L.choose_config(1024, 128, True, 132, wide, retrace, traits=traits)
    assert (many.BLOCK_B, many.BLOCK_T, many.flip) == ((16, 128, -4) if retrace else (16, 128, -8))
    assert few.num_warps == (4 if retrace or est.kernel in ("gae", "vtrace") else 2)
    d = make_inputs(19, 100, device=device_of(kernels))
    for flip in {many.flip, few.flip}:
        with kernels_on(kernels), L.force_config(L.ScanConfig(16, 128, 1, 128, flip=flip)):
            check(est, d, TOL[torch.float32], LAYOUTS[1])


def mixed_inputs(est, N, T, device):
    """16-bit values beside fp32 rewards (the decayed sums: 16-bit inputs beside an fp32 seed),
    so that every output is fp32."""
    keep = {"seed" if est.kernel == "decayed_sum" else "r", "term", "trunc"}
    return {k: x.to(torch.bfloat16) if x is not None and x.is_floating_point() and k not in keep
            else x for k, x in make_inputs(N, T, device=device).items()}


@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=[x.name for x in LAYOUTS[:2]])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_mixed_dtypes(est, layout, backend):
    """Mixed 16-bit and fp32 inputs give fp32 outputs, against the float64 reference of the same
    values, on the tiles the heuristic chooses (two row blocks of 100 steps: time-major ones
    laid out as 16-bit ones, ``test_narrow_loads_time_major_tiles``)."""
    d = mixed_inputs(est, 19, 100, device_of(backend))
    got = outputs(est.call(P, layout.apply(d), time_dim=layout.time_dim))
    assert all(g.dtype == torch.float32 for g in got)
    check(est, d, TOL[torch.float32], layout)


def test_narrow_loads_time_major_tiles(monkeypatch):
    """Loads narrower than 4 bytes into fp32 outputs (bf16 values, bool or uint8 flags) take the
    16-bit time-major tile (fp32's interleaved runs fed them spill, ``bench.sass --mixed``);
    batch-major tiles, fp64 outputs and fp32 or wider inputs keep the output's."""
    monkeypatch.setattr(L, "num_sms", lambda device: 132)
    half, full, cpu = torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2), torch.device("cpu")
    flags, wide = torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.int64)
    for B, T in [(4096, 128), (512, 4096), (64, 131072), (1024, 100), (32768, 32)]:
        fp32 = L.config_for(B, T, (1, B), cpu, itemsize=4, inputs=(full, wide, None))
        assert fp32 == L.config_for(B, T, (1, B), cpu, itemsize=4)
        tile16 = L.config_for(B, T, (1, B), cpu, itemsize=2)
        for narrow in (half, flags, flags.to(torch.uint8)):
            got = L.config_for(B, T, (1, B), cpu, itemsize=4, inputs=(full, narrow, None))
            assert got != fp32 and got.flip == 1  # fp32 values lost in 16-bit runs
            assert got == replace(tile16, flip=got.flip)
            assert L.config_for(B, T, (T, 1), cpu, itemsize=4, inputs=(full, narrow)) == \
                L.config_for(B, T, (T, 1), cpu, itemsize=4)
    assert not L.narrow_loads(8, (half,), True)


@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=[x.name for x in LAYOUTS[:2]])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_bool_flags_fp32(est, layout, backend):
    """fp32 values with bool flags, on the tiles the heuristic chooses (time-major: the 16-bit
    tile, ``test_narrow_loads_time_major_tiles``), against the float64 reference."""
    d = make_inputs(19, 100, flag_dtype=torch.bool, device=device_of(backend))
    check(est, d, TOL[torch.float32], layout)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)], ids=["N0", "T0"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_empty(est, shape, backend):
    N, T = shape
    d = make_inputs(max(N, 1), max(T, 1), device=device_of(backend))
    d = {k: (None if x is None else (x[:N, :T] if k not in ("last", "seed") else x[:N]))
         for k, x in d.items()}
    for y in outputs(est.call(P, d)):
        assert y.shape == (N, T)


@pytest.mark.parametrize("est,config,prefetch", every_kernel(
    [(c, p) for c in (SPLITS[0], L.ScanConfig(2, 16, 1, 256)) for p in (False, True)],
    ["split-load", "split-prefetch", "one-load", "one-prefetch"]))
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_prefetch_switch(est, prefetch, config, kernels):
    """Both orders of the tile loop (next tile loaded before or after this one's scan) give the
    reference, in one pass and split over time."""
    d = make_inputs(5, 203, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(config), L.force_prefetch(prefetch):
        check(est, d, TOL[torch.float32])


# estimators' long-row choices (TileTraits) the heuristic tests pass
CAPPED16 = L.TileTraits(cap16=128)
ONE_WARP32 = L.TileTraits(warps32=1)
ONE_WARP512 = L.TileTraits(warps32=1, look_back_steps32=512)
THREE_ROWS = L.TileTraits(two_pass_rows=3)
NO_TWO_PASS = L.TileTraits(two_pass_rows=0)
GAE_ROWS = L.TileTraits(time_major_two_pass=(0, 0), time_major_look_back_steps=128)
STEPS1024 = L.TileTraits(two_pass_steps32=1024)


@pytest.mark.parametrize("time_major", [False, True])
def test_heuristic_tiles_launchable(time_major):
    """Every tile the heuristic picks, at horizons 1-2**22 and 1-32768 rows, for each
    estimator's long-row settings and every dtype, is one Triton launches (the interpreter does
    not check): powers of two, 1-16 warps, a segment of whole tiles."""
    from paper_repro.kernels import gae, lambda_returns, vtrace

    def pow2(x):
        return x >= 1 and x & (x - 1) == 0

    kinds = [(False, False, L.TileTraits()), (False, False, gae.TILE_TRAITS),
             (False, False, lambda_returns.TILE_TRAITS),
             (False, False, lambda_returns.TILE_TRAITS_NO_VALUES),
             (True, False, vtrace.TILE_TRAITS), (True, True, L.TileTraits())]
    for T in (1, 2, 7, 16, 17, 63, 64, 100, 129, 300, 511, 512, 1000, 2048, 5000, 16384,
              131072, 1 << 22):
        for N in (1, 3, 4, 64, 133, 512, 4096, 32768):
            if N * T > 1 << 28:
                continue
            for wide, retrace, traits in kinds:
                for itemsize in (2, 4, 8):
                    c = L.choose_config(N, T, time_major, 132, wide, retrace, itemsize,
                                        traits)
                    where = (N, T, time_major, wide, retrace, itemsize, traits, c)
                    assert pow2(c.num_warps) and c.num_warps <= 16, where
                    assert pow2(c.BLOCK_B) and pow2(c.BLOCK_T), where
                    assert c.seg_len % c.BLOCK_T == 0, where


def test_heuristic_rows_up_to_2048_steps_in_one_tile():
    """fp32 rows of 1025-2048 steps take one 2048-step tile, a row a program: the estimators
    with few inputs and Retrace (from more than two rows an SM) in 8 warps, V-trace (from five
    rows) in 16;
    16-bit Retrace rows still walk smaller tiles (the other 16-bit rows:
    ``test_heuristic_16bit_rows_in_one_tile``), and rows as many as 32 an SM keep the 32x128
    tiles."""
    def tile(N, T, wide=False, retrace=False, itemsize=4):
        c = L.choose_config(N, T, False, 132, wide, retrace, itemsize)
        return c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len

    for N, T in ((4, 2048), (128, 2048), (512, 2048), (4096, 2048), (512, 1500)):
        assert tile(N, T) == (1, 2048, 8, 2048), (N, T)
        if N > 4:  # V-trace's rows of up to four (not timed in one tile) walk
            assert tile(N, T, wide=True) == (1, 2048, 16, 2048), (N, T)
    assert tile(2, 2048, wide=True)[1] == 512
    for N in (512, 1024, 4096):
        assert tile(N, 2048, True, True) == (1, 2048, 8, 2048), N
    assert tile(128, 2048, True, True) == (1, 2048, 16, 2048)  # a row an SM: 16 warps, as before
    assert tile(512, 2048, True, True, itemsize=2)[1] < 2048  # 16-bit Retrace walks
    assert L.choose_config(8192, 2048, False, 132, False).BLOCK_B == 32
    assert L.choose_config(512, 1024, False, 132, False).BLOCK_T == 1024


# (N, T, wide, retrace, dtype): the rule's estimators are those of its kind (V-trace wide,
# Retrace wide and retrace, the others neither)
ONE_LONG_TILE = [(3, 3100, False, False, torch.float32), (3, 1500, True, False, torch.float32),
                 (5, 1500, True, True, torch.float32), (3, 3100, True, False, torch.float32),
                 (5, 3100, True, True, torch.float32), (5, 3100, True, True, torch.bfloat16),
                 (3, 3100, False, False, torch.bfloat16),
                 (3, 1500, False, False, torch.bfloat16), (3, 3100, True, False, torch.bfloat16),
                 (3, 1500, True, False, torch.bfloat16)]
_KIND = {"vtrace": (True, False), "retrace": (True, True)}
ONE_LONG_TILE_CASES = [(est, *case) for case in ONE_LONG_TILE for est in ESTIMATORS
                       if _KIND.get(est.kernel, (False, False)) == case[2:4]]


@pytest.mark.parametrize("est, N, T, wide, retrace, dtype", ONE_LONG_TILE_CASES,
                         ids=[f"{c[0].name}-{c[2]}-{c[5]}" for c in ONE_LONG_TILE_CASES])
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_one_long_tile_rules_on_partial_rows(est, N, T, wide, retrace, dtype, kernels):
    """The tiles of the 2048- and 4096-step rules (a row a program, one tile, 4-16 warps) as
    the 132-SM heuristic gives them for the dtype, on rows that fill only part of the tile:
    the reference's results."""
    config = L.choose_config(*((128, 4096) if T > 2048 else (512, 2048)), False, 132, wide,
                             retrace, dtype.itemsize)
    assert config.BLOCK_B == 1 and config.BLOCK_T >= T and config.num_warps >= 4
    d = make_inputs(N, T, dtype=dtype, device=device_of(kernels))
    with kernels_on(kernels), L.force_config(replace(config, seg_len=config.BLOCK_T)):
        check(est, d, TOL[dtype])


def test_heuristic_returns_rows_of_512_steps_in_four_warps():
    """fp32 batch-major rows of 512 steps, one tile a row: the returns kernel's traits
    (``warps512``: TD(lambda), discounted returns) take 4 warps up to 32 rows an SM; the
    others, 16-bit rows and more rows keep 2 warps from more rows than SMs."""
    from paper_repro.kernels import gae, lambda_returns

    def warps(N, traits, itemsize=4):
        c = L.choose_config(N, 512, False, 132, False, False, itemsize, traits)
        assert (c.BLOCK_B, c.BLOCK_T, c.seg_len) == (1, 512, 512)
        return c.num_warps

    for traits in (lambda_returns.TILE_TRAITS, lambda_returns.TILE_TRAITS_NO_VALUES):
        assert [warps(N, traits) for N in (64, 133, 2112, 4224, 4225)] == [4, 4, 4, 4, 2]
        assert warps(512, traits, itemsize=2) == 2
    assert [warps(N, gae.TILE_TRAITS) for N in (64, 133, 512)] == [4, 2, 2]
    assert warps(512, L.TileTraits()) == 2


def test_heuristic_few_rows_of_4096_steps_in_one_tile():
    """fp32 rows of 3073-4096 steps of the estimators with few inputs, up to two an SM, take
    one 4096-step tile in 8 warps; more rows, shorter rows and up to four rows (split in time)
    do not (16-bit rows: ``test_heuristic_16bit_rows_in_one_tile``). fp32 V-trace's of
    2049-4096 steps, from five rows up to one an SM, take it in 8 warps too; Retrace's in 16, of
    2049-4096 steps up to a row an SM, fp32 of 3073-4096 any number; V-trace's from there walk
    1024-step tiles up to three rows an SM, four without truncations."""
    from paper_repro.kernels import vtrace

    def tile(N, T, wide=False, retrace=False, itemsize=4, sms=132, traits=None):
        c = L.choose_config(N, T, False, sms, wide, retrace, itemsize, traits or L.TileTraits())
        return c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len

    for N, T in ((8, 4096), (64, 4096), (256, 4096), (264, 4096), (64, 3500)):
        assert tile(N, T) == (1, 4096, 8, 4096), (N, T)
    assert tile(265, 4096)[1] == 1024
    assert tile(512, 4096, sms=256) == (1, 4096, 8, 4096)  # two rows an SM of a larger GPU
    assert tile(256, 3000)[1] == 1024
    for N, T in ((8, 4096), (132, 4096), (64, 3500), (32, 2049), (128, 3072)):
        assert tile(N, T, True) == (1, 4096, 8, 4096), (N, T)
        assert tile(N, T, True, True) == (1, 4096, 16, 4096), (N, T)
        assert tile(N, T, True, True, itemsize=2) == (1, 4096, 16, 4096), (N, T)
    assert tile(132, 2048, True)[1] == 2048 and tile(133, 3072, True)[1] == 1024
    assert tile(4, 3072, True, True)[1] == 4096  # Retrace's few rows are not split
    for N in (133, 256, 396):
        assert tile(N, 4096, True) == (1, 1024, 4, 4096), N
    assert tile(397, 4096, True)[1] == 512 and tile(384, 8192, True)[1] == 512
    plain = vtrace.TILE_TRAITS_UNTRUNCATED
    for N, T in ((397, 4096), (512, 4096), (528, 2049)):
        assert tile(N, T, True, traits=plain)[:3] == (1, 1024, 4), (N, T)
        assert tile(N, T, True, traits=vtrace.TILE_TRAITS)[1] == 512, (N, T)
    assert tile(529, 4096, True, traits=plain)[1] == 512
    assert tile(512, 4096, True, itemsize=8, traits=plain)[1] == 512  # fp64 untimed: as before
    assert tile(512, 8192, True, traits=plain)[1] == 512
    for N, T in ((1, 4096), (128, 4096), (512, 3500), (4096, 4096)):
        assert tile(N, T, True, True) == (1, 4096, 16, 4096), (N, T)
        assert tile(N, T, True, True, itemsize=2)[1] == (4096 if N <= 132 else 512), (N, T)
    for N, T in ((133, 3072), (512, 2560), (512, 4097)):
        assert tile(N, T, True, True)[1] < 4096, (N, T)
    assert L.choose_config(4, 4096, False, 132, False).single_pass
    assert L.choose_config(4, 4096, False, 132, True).single_pass  # V-trace's too


def test_heuristic_16bit_rows_in_one_tile():
    """16-bit batch-major rows of 1025-2048 and 3073-4096 steps, from five rows to fewer than 32
    an SM, take one tile a row: 512 steps a warp, V-trace's 256; Retrace's rows, rows of 3072
    steps, up to four rows (split in time) and rows as many as 32 an SM do not."""
    def tile(N, T, wide=False, retrace=False, sms=132):
        c = L.choose_config(N, T, False, sms, wide, retrace, 2)
        return c.BLOCK_B, c.BLOCK_T, c.num_warps, c.seg_len

    for N in (5, 128, 512, 4223):
        for T in (3073, 4096):
            assert tile(N, T) == (1, 4096, 8, 4096), (N, T)
            assert tile(N, T, True) == (1, 4096, 16, 4096), (N, T)
        for T in (1025, 2048):
            assert tile(N, T) == (1, 2048, 4, 2048), (N, T)
            assert tile(N, T, True) == (1, 2048, 8, 2048), (N, T)
    for T in (1024, 2049, 3072, 4097):
        assert tile(512, T)[1] < 2048 and tile(512, T, True)[1] < 2048, T
    assert tile(4224, 4096)[:3] == (32, 128, 16)
    assert tile(4224, 4096, True)[1] < 4096
    assert tile(8000, 4096, sms=256) == (1, 4096, 8, 4096)  # under 32 rows an SM of a larger GPU
    assert tile(512, 4096, True, True)[1] < 4096
    assert tile(512, 2048, True, True)[1] < 2048
    assert L.choose_config(4, 4096, False, 132, False, itemsize=2).single_pass


def test_heuristic_splits():
    """Which launch the H200 heuristic picks: look-back for rows too few to fill the GPU
    from 16384 steps (up to four rows from 4096; Retrace's from one row block), for time-major
    inputs with few row blocks beyond 16384 steps under 32 envs, under 16, V-trace's or
    Retrace's (fp32 from 32 envs: segments of up to 8 tiles by look-back, longer ones in two
    passes); reduce-then-scan for up to four rows of more than 2**20 steps in all (fp32: up to
    the estimator's ``two_pass_rows``); one pass elsewhere. A look-back walks one tile a
    program but for those time-major segments: fp32 from 131072 steps 1024 in two warps
    (V-trace four, ``warps32`` one, in ``look_back_steps32``), otherwise 512 in one; Retrace
    256 steps in one warp; 16-bit rows from 131072 steps 1024 in one warp (V-trace 512).
    Retrace's tiles that walk rows hold half the others' elements a warp; V-trace's 1024 steps
    in four warps from five rows to two an SM (16-bit four, fp32 rows of up to 4096 steps
    three). fp32 time-major rows of up to a row block an SM from 1024 steps (2048 from half the
    SMs) look back in one-tile 32x128 tiles (32x256 from 2**21 elements,
    ``time_major_look_back_steps``), but where the estimator's inputs fit L2 twice
    (``time_major_two_pass``)."""
    def kind(N, T, tm=False, wide=False, retrace=False):
        c = L.choose_config(N, T, tm, 132, wide or retrace, retrace)
        if c.single_pass and c.seg_len > c.BLOCK_T:
            return "segment look-back"
        return "look-back" if c.single_pass else "two-pass" if c.seg_len < T else "one pass"

    assert kind(64, 131072) == kind(16, 524288, wide=True) == "look-back"
    assert kind(1, 4194304) == kind(4, 1048576, wide=True) == kind(2, 1048576) == "two-pass"
    assert kind(4, 65536) == kind(4, 262144) == kind(1, 1048576, wide=True) == "look-back"
    # rows too few below 131072 steps (up to four from 4096) and up to four of at most 2**20
    # steps in all look back in one-warp 512-step tiles, any dtype (Retrace aside);
    # V-trace walks more rows of up to 8192 steps in 1024-step tiles
    lb512 = {4: L.ScanConfig(1, 512, 1, 512, True, 4), 2: L.ScanConfig(1, 512, 1, 512, True, 8),
             8: L.ScanConfig(1, 512, 1, 512, True, 2)}
    assert L.choose_config(64, 32768, False, 132, False) == lb512[4]
    assert L.choose_config(16, 65536, False, 132, True, itemsize=2) == lb512[2]
    assert L.choose_config(64, 32768, False, 132, False, itemsize=8) == lb512[8]
    assert L.choose_config(4, 8192, False, 132, False) == lb512[4]
    assert L.choose_config(2, 4096, False, 132, True) == lb512[4]
    assert L.choose_config(1, 262144, False, 132, False, itemsize=2) == lb512[2]
    assert L.choose_config(4, 131072, False, 132, False, itemsize=8) == lb512[8]
    assert L.choose_config(2, 2048, False, 132, True) == L.ScanConfig(1, 512, 2, 2048, flip=4)
    assert kind(64, 32768, retrace=True) == kind(4, 8192, retrace=True) == "look-back"
    assert kind(2, 4096, retrace=True) == "one pass"
    assert L.choose_config(256, 8192, False, 132, True) == L.ScanConfig(1, 1024, 4, 8192, flip=4)
    assert L.choose_config(256, 8192, False, 132, True, itemsize=8) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=2)
    assert L.choose_config(128, 16384, False, 132, True).single_pass
    walk = L.ScanConfig(1, 1024, 4, 4096, flip=4)
    assert L.choose_config(396, 4096, False, 132, True) == walk  # V-trace, three rows an SM
    assert L.choose_config(264, 3072, False, 132, True) == replace(walk, seg_len=3072)
    assert L.choose_config(397, 4096, False, 132, True).BLOCK_T == 512
    assert L.choose_config(264, 8192, False, 132, True) == replace(walk, seg_len=8192)
    assert L.choose_config(265, 8192, False, 132, True).BLOCK_T == 512  # fp32 beyond 4096: two
    assert L.choose_config(528, 8192, False, 132, True, itemsize=2) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=8)  # 16-bit: four rows an SM
    assert L.choose_config(529, 8192, False, 132, True, itemsize=2).BLOCK_T == 512
    assert L.choose_config(512, 16384, False, 132, True).BLOCK_T == 512
    assert L.choose_config(512, 8192, False, 132, True, True).BLOCK_T == 512  # Retrace
    assert kind(4, 1048576, retrace=True) == "look-back"
    assert kind(512, 4096) == kind(4096, 128) == kind(8192, 4096) == "one pass"
    assert kind(512, 4096, tm=True, retrace=True) == kind(4, 1048576, tm=True) == "look-back"
    assert kind(64, 131072, retrace=True) == kind(64, 131072, tm=True, wide=True) == "look-back"
    assert kind(16, 131072, tm=True) == kind(64, 131072, tm=True, retrace=True) == "look-back"
    assert kind(32, 524288, tm=True) == "two-pass"  # segments of 16 tiles
    assert kind(64, 131072, tm=True) == kind(32, 131072, tm=True) == "segment look-back"
    assert kind(128, 131072, tm=True) == "two-pass"
    assert kind(1, 4194304) != "segment look-back" != kind(4, 1048576, tm=True)
    # 64 rows in two row blocks of 32: segment look-back over 4 tiles of 128 steps
    assert L.choose_config(64, 131072, True, 132, False).seg_len == 512
    # fp32 time-major rows of few row blocks: a one-tile look-back, but two passes where the
    # estimator's inputs fit L2 twice (``time_major_two_pass``; V-trace's always look back):
    # 32x128 tiles, from 2**21 elements 32x256 (``time_major_look_back_steps``; GAE and
    # V-trace keep 128)
    look_back = L.ScanConfig(32, 128, 4, 128, True, -8)
    look_back256 = L.ScanConfig(32, 256, 4, 256, True, -16)
    assert L.choose_config(512, 4096, True, 132, False) == look_back256
    assert L.choose_config(512, 4096, True, 132, False, traits=GAE_ROWS) == look_back
    assert L.choose_config(256, 2048, True, 132, False) == look_back
    assert L.choose_config(512, 8192, True, 132, True) == look_back
    assert L.choose_config(2048, 4096, True, 132, False) == look_back256  # a row block an SM
    assert kind(512, 8192, tm=True) == kind(1024, 4096, tm=True) == "two-pass"
    assert kind(1024, 8192, tm=True) == kind(128, 16384, tm=True) == "look-back"
    assert L.choose_config(512, 8192, True, 132, False, traits=GAE_ROWS) == look_back
    assert L.choose_config(512, 4096, True, 132, False, itemsize=2).seg_len == 128  # two passes
    assert L.choose_config(4096, 2048, True, 132, False).seg_len == 2048  # one pass
    assert L.choose_config(1024, 1024, True, 132, True) == look_back  # 8 tiles, few row blocks
    assert L.choose_config(2048, 1024, True, 132, False).seg_len == 1024
    assert L.choose_config(1024, 512, True, 132, False).seg_len == 512
    assert kind(4096, 512, tm=True) == kind(4096, 128, tm=True) == "one pass"
    assert kind(32768, 32, retrace=True) == kind(32768, 32, tm=True) == "one pass"
    assert L.choose_config(4096, 512, False, 132, False).BLOCK_B == 1  # a row a program
    assert L.choose_config(4096, 128, True, 132, True).BLOCK_T == 128  # time-major, T <= 128
    assert L.choose_config(4096, 128, True, 132, True, itemsize=2).BLOCK_T == 64
    assert L.choose_config(4096, 128, True, 132, True, True, itemsize=2).BLOCK_T == 128  # one tile
    retrace = L.ScanConfig(1, 256, 1, 256, True, flip=4)  # any rows; 16-bit in runs of 8
    assert L.choose_config(16, 524288, False, 132, True, True) == retrace
    assert L.choose_config(1, 4194304, False, 132, True, True) == retrace
    assert L.choose_config(64, 131072, False, 132, True, True, itemsize=2) == \
        replace(retrace, flip=8)
    assert L.choose_config(64, 8192, False, 132, True, True) == retrace  # few rows from 8192
    # Retrace's tiles walking rows: 512 steps in 4 warps, fp32 from five rows an SM 256 in 2;
    # one tile a row up to 2048 steps where rows are at most one an SM, 128 elements a warp
    walk = L.ScanConfig(1, 512, 4, 1024, flip=4)
    assert L.choose_config(512, 1024, False, 132, True, True) == walk
    assert L.choose_config(1024, 1024, False, 132, True, True, itemsize=2) == walk
    assert L.choose_config(1024, 1024, False, 132, True, True) == \
        L.ScanConfig(1, 256, 2, 1024, flip=4)
    assert L.choose_config(4096, 2048, False, 132, True, True).BLOCK_B == 1
    assert L.choose_config(256, 1024, False, 132, True, True) == \
        L.ScanConfig(1, 1024, 8, 1024, flip=4)
    assert L.choose_config(128, 2048, False, 132, True, True) == \
        L.ScanConfig(1, 2048, 16, 2048, flip=4)
    # at least 8 warps there (Retrace's 512-step rows; the others' keep 4)
    assert L.choose_config(64, 512, False, 132, True, True) == L.ScanConfig(1, 512, 8, 512, flip=4)
    assert L.choose_config(64, 300, False, 132, True, True).num_warps == 8
    assert L.choose_config(64, 512, False, 132, False).num_warps == 4
    assert L.choose_config(256, 512, False, 132, True, True).num_warps == 4
    assert L.choose_config(512, 8192, False, 132, True, True).num_warps == 4
    assert L.choose_config(512, 8192, False, 132, True).num_warps == 2  # V-trace
    # one-tile rows of the others: 256 elements a warp, 128 at most a row an SM
    assert L.choose_config(512, 512, False, 132, False).num_warps == 2
    assert L.choose_config(64, 512, False, 132, False).num_warps == 4
    assert L.choose_config(128, 1024, False, 132, True).num_warps == 8
    # rows of 17-511 steps, one tile a program: 128 elements a warp in fp32 and fp64, 256 in
    # 16 bits; V-trace's 128 in fp32 tiles of up to 512 elements, 256 otherwise
    assert L.choose_config(4096, 128, False, 132, False) == L.ScanConfig(4, 128, 4, 128, flip=4)
    assert L.choose_config(32768, 32, False, 132, False, itemsize=8).num_warps == 8
    assert L.choose_config(4096, 128, False, 132, False, itemsize=2).num_warps == 2
    assert L.choose_config(4096, 128, False, 132, True) == L.ScanConfig(4, 128, 4, 128, flip=4)
    assert L.choose_config(4096, 64, False, 132, True).num_warps == 2
    assert L.choose_config(32768, 32, False, 132, True).num_warps == 4
    assert L.choose_config(4096, 128, False, 132, True, itemsize=2).num_warps == 2
    assert L.choose_config(4096, 128, False, 132, True, itemsize=8).num_warps == 2
    # 16-bit look-back in one-warp tiles: 1024 steps, V-trace's 512
    # (capped at the estimator's cap16 from 2**22 elements)
    assert L.choose_config(64, 131072, False, 132, False, itemsize=2) == \
        L.ScanConfig(1, 1024, 1, 1024, True, flip=8)
    assert L.choose_config(64, 131072, False, 132, False, itemsize=2, traits=CAPPED16) == \
        L.ScanConfig(1, 1024, 1, 1024, True, flip=8, max_registers=128)
    assert L.choose_config(16, 524288, False, 132, True, itemsize=2, traits=CAPPED16) == \
        L.ScanConfig(1, 512, 1, 512, True, flip=8, max_registers=128)
    assert L.choose_config(16, 131072, False, 132, True, itemsize=2, traits=CAPPED16) == \
        L.ScanConfig(1, 512, 1, 512, True, flip=8)
    # fp32 look-back: 1024 steps in two warps, V-trace's in four (capped at 80 and 96 registers
    # from 2**22 elements), in one uncapped with warps32=1; up to four rows 512 in one
    assert L.choose_config(64, 131072, False, 132, False) == \
        L.ScanConfig(1, 1024, 2, 1024, True, flip=4, max_registers=80)
    assert L.choose_config(16, 131072, False, 132, False) == \
        L.ScanConfig(1, 1024, 2, 1024, True, flip=4)
    assert L.choose_config(16, 262144, False, 132, False).max_registers == 80
    assert L.choose_config(16, 524288, False, 132, True) == \
        L.ScanConfig(1, 1024, 4, 1024, True, 4, max_registers=96)
    assert L.choose_config(64, 131072, False, 132, False, traits=ONE_WARP32) == \
        L.ScanConfig(1, 1024, 1, 1024, True, flip=4)
    assert L.choose_config(16, 262144, False, 132, False, traits=ONE_WARP512) == \
        L.ScanConfig(1, 512, 1, 512, True, flip=4)  # GAE's
    v_trace = L.choose_config(16, 524288, False, 132, True, traits=ONE_WARP32)
    assert v_trace.num_warps == 4
    assert L.choose_config(4, 1048576, False, 132, False, traits=THREE_ROWS) == lb512[4]
    assert L.choose_config(1, 4194304, False, 132, True, traits=NO_TWO_PASS) == lb512[4]
    assert L.choose_config(3, 4194304, False, 132, False, traits=THREE_ROWS).seg_len == 8192
    assert L.choose_config(4, 1048576, False, 132, False, itemsize=8, traits=NO_TWO_PASS) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=2)  # fp64: two passes up to four rows
    # 16-bit: two passes up to four rows, in 2048-step tiles over 8192-step segments (4096 up
    # to 2**21 elements), V-trace's in 1024-step ones; fp32 in the estimator's tile
    assert L.choose_config(4, 1048576, False, 132, False, itemsize=2, traits=NO_TWO_PASS) == \
        L.ScanConfig(1, 2048, 4, 8192, flip=8)
    assert L.choose_config(4, 524288, False, 132, False, itemsize=2, traits=NO_TWO_PASS) == \
        L.ScanConfig(1, 2048, 4, 4096, flip=8)
    assert L.choose_config(1, 4194304, False, 132, True, itemsize=2) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=8)
    assert L.choose_config(1, 4194304, False, 132, False) == \
        L.ScanConfig(1, 2048, 4, 8192, flip=4)
    assert L.choose_config(3, 600000, False, 132, False) == \
        L.ScanConfig(1, 2048, 4, 4096, flip=4)
    assert L.choose_config(4, 1048576, False, 132, False, traits=STEPS1024) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=4)
    assert L.choose_config(4, 524288, False, 132, False, traits=STEPS1024) == \
        L.ScanConfig(1, 1024, 4, 8192, flip=4)
    assert L.choose_config(64, 131072, False, 132, False, itemsize=2).single_pass  # GAE
    assert L.choose_config(16, 524288, False, 132, False, itemsize=2) == \
        L.ScanConfig(1, 1024, 1, 1024, True, flip=8)  # no two-pass tile
    assert L.choose_config(16, 524288, False, 132, True, itemsize=2).num_warps == 1
    assert L.choose_config(1, 4194304, False, 132, True).seg_len == 8192


TILE_TRAITS = dict(
    dict.fromkeys(("vtrace", "vtrace_clip_lambda_last_value"),
                  L.TileTraits(two_pass_rows=0, cap16=128, time_major_row_warps=4)),
    **dict.fromkeys(("gae", "gae_last_value"),
                    L.TileTraits(two_pass_rows=0, cap16=128, warps32=1, look_back_steps32=512,
                                 time_major_two_pass=(0, 0), time_major_look_back_steps=128,
                                 time_major_row_warps=4, walk16_share=0.5)),
    **dict.fromkeys(("eligibility_traces", "prefix_sum_ends_at", "prefix_sum_starts_at"),
                    L.TileTraits(walk16_share=1.0)),
    lambda_returns=L.TileTraits(two_pass_rows=0, warps32=1, time_major_two_pass=(0, 0),
                                walk16_share=0.5, warps512=4),
    discounted_returns=L.TileTraits(cap16=128, warps32=1, two_pass_steps32=1024,
                                    walk16_share=0.5, warps512=4))


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("kernels", [b for b in BACKENDS if b != "torch"])
def test_long_row_choices(est, kernels, monkeypatch):
    """Each estimator hands the heuristic its long-row tiles (``TileTraits``): up to how many fp32
    long rows it takes two passes
    (V-trace, GAE and TD(lambda) none, the others four), its 16-bit look-back's register cap
    (V-trace, GAE and the discounted returns 128, the others none), its fp32 look-back's
    warps (the returns and GAE one, GAE's in 512-step tiles, the others two), its fp32
    two-pass tile's steps (the discounted returns 1024, the others 2048), its time-major
    two-pass band (GAE and TD(lambda) with values none), time-major look-back steps (GAE
    128, the others 256), time-major one-pass warps from a row block an SM (GAE and V-trace
    4, the others 2), the share of the SMs under which 16-bit walks look back in 32-env tiles
    (the decayed sum 1, GAE and the returns 1/2, V-trace none), the warps of fp32 rows of
    512 steps (the returns 4) and, V-trace's without truncations, up to how many fp32 rows of
    2049-4096 steps an SM walk 1024-step tiles (4, else 3)."""
    seen, config_for = [], L.config_for

    def spy(*args, **kwargs):
        seen.append(kwargs.get("traits", L.TileTraits()))
        return config_for(*args, **kwargs)

    monkeypatch.setattr(L, "config_for", spy)
    monkeypatch.setattr(_plan, "_PLANS", {})  # no recorded launch plans
    with kernels_on(kernels):
        est.call(P, make_inputs(3, 8, device=device_of(kernels)))
    assert seen and set(seen) == {TILE_TRAITS.get(est.name, L.TileTraits())}
    if est.kernel == "vtrace":
        seen.clear()
        with kernels_on(kernels):
            est.call(P, make_inputs(3, 8, device=device_of(kernels), truncations=False))
        assert set(seen) == {replace(TILE_TRAITS[est.name], walk_rows32=4)}


def test_flip_rule():
    """Time-major tiles latest step first (but not Retrace's), fp32 tiles of 16 steps or more
    as interleaved runs of the steps a thread holds (Retrace's where row blocks are few, or
    where rows abound up to 128 steps: one-warp tiles, up to 16 steps latest step first), and
    16-bit ones where a thread holds several steps but the look-back's (not Retrace's);
    batch-major backward tiles of 16 steps or more as runs of one 16-byte load's steps
    (Retrace: 4)."""
    assert L.choose_config(4096, 128, True, 132, False).flip == -8  # 16x128, 2 warps
    assert L.choose_config(4096, 64, True, 132, False).flip == -4  # 16x64, 2 warps
    assert L.choose_config(512, 4096, True, 132, True).flip == -8  # V-trace, 32x128, 4 warps
    assert L.choose_config(512, 8192, True, 132, False).flip == -8  # 32x32, 1 warp
    assert L.choose_config(2048, 1024, True, 132, False).flip == -4  # 16x128, 4 warps
    assert L.choose_config(64, 131072, True, 132, False).flip == -8  # 32x128, 4 warps
    assert L.choose_config(16, 131072, True, 132, False).flip == -4  # 16x128 look-back
    assert L.choose_config(512, 4096, True, 132, True, itemsize=2).flip == -2  # 32x16, 1 warp
    assert L.choose_config(64, 131072, True, 132, False, itemsize=2).flip == 1  # look-back
    assert L.choose_config(32768, 32, True, 132, False).flip == -4  # 32x16, 1 warp
    assert L.choose_config(32768, 8, True, 132, False).flip == 1
    assert L.choose_config(32768, 32, True, 132, False, itemsize=8).flip == 1
    assert not L.choose_config(512, 4096, True, 132, True, True, itemsize=2).flip  # Retrace
    # Retrace's 16-bit tiles up to 128 steps latest step first: one-warp 16x8 where rows
    # abound up to 32 steps, 16x32 beyond; one 16xT tile in 4 warps where row blocks are few
    assert L.choose_config(32768, 32, True, 132, True, True, itemsize=2) == L.ScanConfig(
        16, 8, 1, 32, flip=True)
    assert L.choose_config(16384, 100, True, 132, True, True, itemsize=2) == L.ScanConfig(
        16, 32, 1, 128, flip=True)
    assert L.choose_config(4096, 128, True, 132, True, True, itemsize=2) == L.ScanConfig(
        16, 128, 4, 128, flip=True)
    assert L.choose_config(32768, 4, True, 132, True, True, itemsize=2).BLOCK_T == 4
    assert not L.choose_config(16384, 256, True, 132, True, True, itemsize=2).flip
    # Retrace's fp32 rows where they abound: one-warp 16x16 runs of 2, 16x32 runs of 4 beyond
    # 32 steps, up to 16 steps latest step first
    assert L.choose_config(32768, 32, True, 132, True, True) == L.ScanConfig(16, 16, 1, 32,
                                                                              flip=-2)
    assert L.choose_config(16384, 100, True, 132, True, True) == L.ScanConfig(16, 32, 1, 128,
                                                                               flip=-4)
    assert L.choose_config(32768, 16, True, 132, True, True) == L.ScanConfig(16, 16, 4, 16,
                                                                              flip=True)
    assert not L.choose_config(16384, 256, True, 132, True, True).flip
    assert L.choose_config(512, 4096, True, 132, True, True).flip == -4  # 16x32, 1 warp
    assert L.choose_config(4096, 128, True, 132, True, True).flip == -4  # 16x128, 4 warps
    for N, T in ((4096, 128), (512, 4096), (64, 131072), (32768, 32), (8192, 4096)):
        assert L.choose_config(N, T, False, 132, False).flip == 4
        assert L.choose_config(N, T, False, 132, False, itemsize=2).flip == 8
        assert L.choose_config(N, T, False, 132, False, itemsize=8).flip == 2
        # Retrace keeps runs of 4 but in its 16-bit one-tile look-back (few long rows)
        want = 8 if (N, T) == (64, 131072) else 4
        assert L.choose_config(N, T, False, 132, True, True, itemsize=2).flip == want
    assert L.choose_config(4096, 16, False, 132, False, itemsize=2).flip == 8
    assert L.choose_config(4096, 8, False, 132, False).flip == 0
    assert L.run_length(16, 8, False) == 2 and L.run_length(16, 4, True) == 4
    assert L.run_length(256, 2, True, look_back=True) == 8
    assert L.run_length(256, 4, True, look_back=True) == 4


def test_alignment_rule():
    """The kernels hear of the layout's alignment only where Triton does not see it (no
    multiple of 16) and it exists: batch-major from T and the row strides, time-major from B
    and the step strides, of the inputs and the output alike; never for other strides, nor
    under ``force_alignment(False)``."""
    assert L.alignment(4096, 100, (100, 1, 100, 1)) == 4
    assert L.alignment(4096, 1000, (1000, 1, 1000, 1)) == 8
    assert L.alignment(4096, 128, (128, 1, 128, 1)) == 0  # Triton's own specialisation
    assert L.alignment(7, 99, (99, 1, 99, 1)) == 0
    assert L.alignment(8, 100, (100, 1, 102, 1)) == 2  # the output's stride counts
    assert L.alignment(1000, 64, (1, 1000, 1, 1000)) == -8
    assert L.alignment(4100, 128, (1, 4100, 1, 4100)) == -4
    assert L.alignment(12, 40, (40, 3, 40, 3)) == 0
    with L.force_alignment(False):
        assert L.alignment(4096, 100, (100, 1, 100, 1)) == 0


def test_prefetch_rule():
    """Prefetch where a program walks several tiles with few warps, not for one tile per
    program nor at 16 warps (where the H200 probe measured it slower)."""
    assert L.prefetch(L.choose_config(2, 1048576, False, 132, False))  # up to four rows, split
    assert L.prefetch(L.choose_config(256, 4096, False, 132, True))  # V-trace walking rows
    assert not L.prefetch(L.choose_config(64, 131072, False, 132, False))  # a tile a program
    assert L.prefetch(L.choose_config(512, 4096, False, 132, False))  # one pass, 4 tiles
    assert not L.prefetch(L.choose_config(4096, 128, False, 132, False))  # one tile
    assert not L.prefetch(L.choose_config(8192, 4096, False, 132, False))  # 16 warps
    with L.force_prefetch(True):
        assert L.prefetch(L.choose_config(4096, 128, False, 132, False))


def test_tile_sweep_tries_every_width_first():
    """A sweep cut short by its time budget has tried every tile width (BLOCK_T), and no
    candidate is dropped or repeated by the reordering."""
    from paper_repro.tuning import candidates

    found = candidates(2048, 1024, False)
    widths = {c.BLOCK_T for c in found}
    assert {c.BLOCK_T for c in found[:len(widths)]} == widths and len(widths) >= 4
    assert len(set(found)) == len(found)


# Tiles held as runs, each estimator's kernel: backward runs walked, looked back and as one
# tile, interleaved runs walked and looked back, runs of 8 in bf16 (time-major layouts give the
# interleaved ones).
RUNS_CONFIGS = ("L.ScanConfig(2, 16, 1, 32, flip=4)", "L.ScanConfig(2, 16, 1, 16, True, flip=4)",
                "L.ScanConfig(1, 16, 1, 16, flip=4)", "L.ScanConfig(2, 16, 1, 32, flip=-4)",
                "L.ScanConfig(2, 16, 1, 16, True, flip=-2)")
CARRY_FIRST_SCRIPT = f"""
import os, sys, torch
sys.path.insert(0, "tests")
from conftest import HAS_CUDA, TOL
from estimators import ESTIMATORS, LAYOUTS, make_inputs
from test_random_inputs import check, kernels_on
from paper_repro.kernels import _launch as L, affine_scan
assert affine_scan.RUNS_CARRY_FIRST == int(os.environ["PAPER_REPRO_RUNS_CARRY_FIRST"])
device = "cuda" if HAS_CUDA else "cpu"
time_major = [x for x in LAYOUTS if x.time_dim == 0][0]
for i, config in enumerate(({", ".join(RUNS_CONFIGS)},)):
    for j, est in enumerate(ESTIMATORS):
        if (i + j) % 2 and not HAS_CUDA:
            continue  # the interpreter: half the pairs, every estimator and tile met
        layout = time_major if config.flip < 0 else None
        dtype = torch.bfloat16 if config.flip == 4 and i == 1 else torch.float32
        d = make_inputs(3, 45, dtype=dtype, device=device)
        with kernels_on("cuda" if HAS_CUDA else "triton"), L.force_config(config):
            check(est, d, TOL[dtype], layout)
print("ok")
"""


@pytest.mark.parametrize("first", ["0", "1"])
def test_runs_entered_with_the_carry_first_or_last(first):
    """The A/B's arms beside the shipped rule (runs of up to 8 entered with the carry applied,
    V-trace's interleaved runs of 8 not): ``PAPER_REPRO_RUNS_CARRY_FIRST=0`` solves every run
    as xa + xb * carry, ``=1`` enters every run with the carry applied. Each, every estimator
    over tiles held as runs, walked, looked back, one tile, and in interleaved runs, matches
    the float64 reference. A process of its own: the flag is a compile-time constant fixed at
    import."""
    env = dict(os.environ, PAPER_REPRO_RUNS_CARRY_FIRST=first)
    out = subprocess.run([sys.executable, "-c", CARRY_FIRST_SCRIPT], env=env, text=True,
                         capture_output=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
