"""Narrow per-step values loaded four envs a load (``_launch.four_loads``,
``affine_scan.four_runs``): 1-byte flags in every time-major tile, bf16 values beside fp32
outputs, and 16-bit rows, stored four envs a store too; the rule, and the answers against the
float64 reference on the real kernels, at any address."""
import contextlib

import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of
from estimators import ESTIMATORS, LAYOUTS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.bench.tile_probe import traits_of
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan, affine_scan

KERNELS = [b for b in BACKENDS if b != "torch"]
TIME_MAJOR = next(x for x in LAYOUTS if x.name == "time_major")
FLAG_KEYS = ("term", "trunc")
# the estimators whose values too load four envs a load (Retrace's keep the 16-bit tile)
VALUE_KERNELS = {"gae", "vtrace", "returns", "decayed_sum"}
REWARDS_ONLY = {"discounted_returns", "eligibility_traces", "prefix_sum_ends_at",
                "prefix_sum_starts_at"}
SPLIT = L.ScanConfig(BLOCK_B=4, BLOCK_T=8, num_warps=1, seg_len=16)
LOOK_BACK = L.ScanConfig(BLOCK_B=8, BLOCK_T=8, num_warps=1, seg_len=8, single_pass=True,
                         flip=-2)


def rows(B=8, T=5, flag=torch.bool, stride_t=None, trunc=True, values=torch.float32):
    """``L.Rows`` of time-major GAE-like inputs (``stride_t``: default B)."""
    stride = (1, stride_t or B)

    def step(dtype):
        return torch.empty_strided((B, T), stride, dtype=dtype)

    return L.Rows(B, T, stride, dict(rewards=step(torch.float32), values=step(values),
                                     terminateds=step(flag),
                                     truncateds=step(flag) if trunc else None))


def test_four_loads_rule():
    assert L.four_loads(rows(), 4) == 16  # 1-byte flags below the fp32 outputs
    assert L.four_loads(rows(flag=torch.uint8, trunc=False), 4) == 16
    assert L.four_loads(rows(flag=torch.int8, B=4, stride_t=12), 4) == 16
    assert L.four_loads(rows(), 2) == 32  # 16-bit outputs: every load four envs a load
    assert L.four_loads(rows(values=torch.bfloat16, flag=torch.bfloat16), 2) == 32
    assert L.four_loads(rows(), 2, values=False) == 16  # Retrace: its 1-byte flags alone
    assert L.four_loads(rows(values=torch.bfloat16), 4) == 32  # bf16 values too
    assert L.four_loads(rows(values=torch.bfloat16), 4, values=False) == 16
    assert L.four_loads(rows(flag=torch.bfloat16), 4) == 32
    assert L.four_loads(rows(flag=torch.float32, values=torch.float16), 4) == 32
    assert L.four_loads(rows(values=torch.bfloat16, flag=torch.bfloat16), 2, values=False) == 0
    assert L.four_loads(rows(flag=torch.float32), 4) == 0
    assert L.four_loads(rows(B=6), 2) == 0
    assert L.four_loads(rows(), 8) == 0
    assert L.four_loads(rows(B=6), 4) == 0  # a thread's four envs straddle two words
    assert L.four_loads(rows(stride_t=10), 4) == 0
    assert L.four_loads(L.Rows(8, 5, (5, 1), rows().tensors), 4) == 0  # batch-major
    mixed = rows()
    mixed.tensors["truncateds"] = mixed["truncateds"].float()
    assert L.four_loads(mixed, 4) == 0  # fp32 values: nothing narrower than a flag's float
    with L.force_words(False):
        assert L.four_loads(rows(), 4) == 0
        assert L.four_loads(rows(values=torch.bfloat16), 4) == 0
        assert L.four_loads(rows(), 2) == 0


def test_four_loads_keep_the_fp32_tile(monkeypatch):
    """Loads four envs a load leave the time-major fp32 tile alone; sixteen bytes a load lay it
    out as a 16-bit one; 16-bit outputs take the fp32 tile, stored four envs a store, but
    Retrace's (``values=False``) and rows of no multiple of four envs."""
    monkeypatch.setattr(L, "num_sms", lambda device: 132)
    cpu = torch.device("cpu")
    for B, T in [(4096, 128), (512, 4096), (2048, 1024), (64, 131072), (32768, 32)]:
        r = rows(B, T)
        fp32 = L.config_for(B, T, r.stride, cpu, itemsize=4)
        assert L.tile_of(r, cpu, 4) == (fp32, 16)
        assert L.config_for(B, T, r.stride, cpu, itemsize=4, inputs=L.tile_inputs(r, False)) \
            != fp32
        tile16 = L.config_for(B, T, r.stride, cpu, itemsize=2)
        assert tile16 != fp32 or T == 32
        wide = L.wide_rows16(fp32, B, T, 132)  # 32 envs where fp32's tile holds 16 (4096 x 128)
        assert (wide != fp32) == (B == 4096)
        assert L.tile_of(r, cpu, 2) == (wide, 32)
        with L.force_config(fp32):  # a forced tile stays as forced
            assert L.tile_of(r, cpu, 2) == (fp32, 32)
        assert L.tile_of(r, cpu, 2, values=False) == (tile16, 16)
        with L.force_words(False):
            assert L.tile_of(r, cpu, 2) == (tile16, 0)
        r.tensors["values"] = r["rewards"].to(torch.bfloat16)
        assert L.tile_of(r, cpu, 4) == (fp32, 32)
        narrow = L.config_for(B, T, r.stride, cpu, itemsize=4, inputs=[r["values"]])
        assert L.tile_of(r, cpu, 4, values=False) == (narrow, 16)
        with L.force_words(False):
            assert L.tile_of(r, cpu, 4) == (narrow, 0)
    assert L.tile_of(rows(flag=torch.float32), cpu, 4)[1] == 0


def shifted(x: torch.Tensor, offset: int) -> torch.Tensor:
    """``x`` (contiguous) copied to ``offset`` bytes past an allocation's start."""
    n = x.numel() * x.element_size()
    buf = torch.zeros(n + 16, dtype=torch.uint8, device=x.device)
    y = buf[offset:offset + n].view(x.dtype).view(x.shape)
    return y.copy_(x)


@pytest.fixture
def launches(monkeypatch):
    """Each engine launch's FOURS_BELOW (its last flag, before ACC). No plans: a repeat would
    launch directly, without ``__call__``."""
    _plan.clear()
    seen, call = [], affine_scan.Launch.__call__

    def spy(job, pointers):
        seen.append(job.middle[-2])
        return call(job, pointers)

    monkeypatch.setattr(affine_scan.Launch, "__call__", spy)
    return seen


def check_time_major(est, d, kernels, tol, config=None, moved=None):
    """``est`` on ``d`` (batch-major, on ``kernels``' device) laid out time-major (``moved``:
    then put where it returns), under ``config`` (None: the rule), against the float64
    reference on ``d``."""
    x = TIME_MAJOR.apply({k: v if v is None else v.to(device_of(kernels)) for k, v in d.items()})
    x = moved(x) if moved else x
    on = L.cpu_backend("triton") if kernels == "triton" else contextlib.nullcontext()
    with on, L.force_config(config):
        got = [TIME_MAJOR.back(y) for y in outputs(est.call(P, x, time_dim=0))]
    for i, (g, w) in enumerate(zip(got, outputs(est.call(ref, d)))):
        assert_close(f"{est.name}[{i}]", g, w, tol)
    return got


@pytest.mark.parametrize("offset", [0, 1, 4], ids=["aligned16", "aligned1", "aligned4"])
@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8], ids=str)
@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_flags_four_a_load(est, flag_dtype, offset, kernels, launches):
    """Time-major fp32 rows of 12 envs (three loads of four a step) with 1-byte flags at 16-,
    1- and 4-byte aligned addresses, against the float64 reference."""
    check_time_major(est, make_inputs(12, 37, flag_dtype=flag_dtype), kernels,
                     TOL[torch.float32],
                     moved=lambda x: dict(x, **{k: shifted(x[k], offset) for k in FLAG_KEYS}))
    assert launches and all(b == 16 for b in launches)


@pytest.mark.parametrize("config", [SPLIT, LOOK_BACK], ids=["two_pass", "look_back"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_flags_four_a_load_split_over_time(est, config, kernels, launches):
    """Four a load in the two passes and the look-back, tiles of 4 and 8 envs, runs of 1 and 2
    steps."""
    check_time_major(est, make_inputs(16, 45, flag_dtype=torch.bool), kernels,
                     TOL[torch.float32], config)
    assert launches and all(b == 16 for b in launches)


@pytest.mark.parametrize("flip", [-2, 1], ids=["interleaved2", "latest_first"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_bf16_flags_four_a_load(est, flip, kernels, launches):
    """bf16 rows with bool flags, four a load (values too, but Retrace's) in 16-bit tiles of
    either order."""
    config = L.ScanConfig(BLOCK_B=16, BLOCK_T=16, num_warps=1, seg_len=1 << 20, flip=flip)
    d = make_inputs(32, 40, dtype=torch.bfloat16, flag_dtype=torch.bool)
    check_time_major(est, d, kernels, TOL[torch.bfloat16], config)
    assert launches and all(b == (32 if est.kernel in VALUE_KERNELS else 16) for b in launches)


@pytest.mark.parametrize("offset", [0, 2, 6], ids=["aligned16", "aligned2", "aligned6"])
@pytest.mark.parametrize("config", [None, SPLIT, LOOK_BACK], ids=["shipped", "two_pass",
                                                                 "look_back"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_16bit_rows_four_a_load(est, dtype, config, offset, kernels, launches):
    """All-16-bit time-major rows (flags too) of 12 envs, their inputs at 16-, 2- and 6-byte
    aligned addresses: loads and stores four envs at a time in the fp32 tile (Retrace: the
    16-bit tile, as Triton loads)."""
    d = make_inputs(12, 37, dtype=dtype, flag_dtype=dtype)
    keys = [k for k, v in d.items() if v is not None and v.dtype == dtype and v.dim() == 2]
    got = check_time_major(est, d, kernels, TOL[dtype], config,
                           moved=lambda x: dict(x, **{k: shifted(x[k], offset) for k in keys}))
    assert all(g.dtype == dtype for g in got)
    assert launches and all(b == (32 if est.kernel in VALUE_KERNELS else 0) for b in launches)


FOUR_LOAD_ESTIMATORS = [e for e in ESTIMATORS if e.kernel in VALUE_KERNELS]


@pytest.mark.parametrize("est", FOUR_LOAD_ESTIMATORS, ids=[e.name for e in FOUR_LOAD_ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_16bit_rows_in_the_ab_benchmarks_wide_tiles(est, kernels, launches):
    """bf16 rows of 36 envs in each of ``mixed_ab``'s 32-env tiles (twice the warps, longer
    runs, look-back), four envs a load, against the float64 loop."""
    from paper_repro.bench.mixed_ab import wide_tiles

    tiles = wide_tiles(L.ScanConfig(16, 32, 1, 64, flip=-4))
    assert [(c.BLOCK_B, c.num_warps, c.flip) for c in tiles.values()] == [
        (32, 2, -4), (32, 1, -8), (32, 4, -8)]
    d = make_inputs(36, 45, dtype=torch.bfloat16, flag_dtype=torch.bfloat16)
    for config in tiles.values():
        check_time_major(est, d, kernels, TOL[torch.bfloat16], config)
    assert launches and all(b == 32 for b in launches)


@pytest.mark.parametrize("B, T, wide", [(4096, 128, True), (8192, 64, True), (3968, 128, True),
                                     (3936, 128, False), (1024, 128, False), (4096, 256, False),
                                     (4096, 512, False), (32768, 32, False)])
def test_16bit_rows_of_one_tile_take_32_env_tiles(B, T, wide):
    """``wide_rows16`` on an H200's 132 SMs: fp32 tiles 16 envs wide, one a row, whose 32-env
    programs fill at least 15/16 of the SMs, take twice the envs in twice the warps, the same
    runs a thread; walks, look-backs and wider tiles stay."""
    fp32 = L.choose_config(B, T, True, 132, False)
    got = L.wide_rows16(fp32, B, T, 132)
    assert (got != fp32) is wide
    if wide:
        assert (got.BLOCK_B, got.num_warps, got.flip, got.BLOCK_T, got.seg_len) == (
            32, 2 * fp32.num_warps, fp32.flip, fp32.BLOCK_T, fp32.seg_len)


@pytest.mark.parametrize("est", FOUR_LOAD_ESTIMATORS, ids=[e.name for e in FOUR_LOAD_ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_16bit_rows_in_32_env_tiles_match_the_reference(est, kernels, launches, monkeypatch):
    """bf16 time-major rows of one tile, as many envs as 32-env programs fill the device's SMs:
    the public call launches ``wide_rows16``'s 32-env tile, against the float64 loop."""
    widened, rule = [], L.wide_rows16
    monkeypatch.setattr(L, "wide_rows16", lambda *a: widened.append(rule(*a)) or widened[-1])
    B = 32 * L.num_sms(torch.device(device_of(kernels)))
    d = make_inputs(B, 45, dtype=torch.bfloat16, flag_dtype=torch.bfloat16)
    check_time_major(est, d, kernels, TOL[torch.bfloat16])
    assert widened and all(c.BLOCK_B == 32 for c in widened)
    assert launches and all(b == 32 for b in launches)


LOOK, RUNS, SAME = "look_back", "runs", "same"


@pytest.mark.parametrize("algorithm, B, T, want", [
    ("eligibility_traces", 2048, 1024, LOOK), ("eligibility_traces", 4096, 512, LOOK),
    ("eligibility_traces", 4096, 1024, LOOK), ("eligibility_traces", 8192, 512, RUNS),
    ("eligibility_traces", 2048, 256, SAME), ("eligibility_traces", 2048, 512, LOOK),
    ("eligibility_traces", 4192, 512, LOOK), ("eligibility_traces", 4224, 512, RUNS),
    ("gae", 2048, 1024, LOOK), ("gae", 4096, 512, RUNS), ("gae", 8192, 512, RUNS),
    ("gae", 2048, 512, LOOK), ("gae", 3072, 1024, RUNS), ("gae", 2048, 256, SAME),
    ("gae", 3968, 384, SAME), ("gae", 2080, 512, LOOK), ("gae", 2112, 512, RUNS),
    ("lambda_returns", 2048, 1024, LOOK), ("discounted_returns", 8192, 512, RUNS),
    ("vtrace", 2048, 1024, SAME), ("vtrace", 8192, 512, SAME), ("affine_scan", 2048, 1024, SAME),
    ("gae", 4096, 128, SAME), ("gae", 2048, 4096, SAME)])
def test_16bit_walks_take_32_env_tiles(algorithm, B, T, want):
    """``wide_walks16`` on an H200's 132 SMs: 16-bit rows a 16-env fp32 tile walks in one pass
    over 4 tiles or more look back in 32-env tiles (the decayed sum under one program an SM,
    GAE and the returns under half), else walk 32 envs in longer runs; V-trace and the bare
    engine keep the 16-env tile, as do rows of one tile, walks of 2-3 tiles and the fp32
    look-back."""
    fp32 = L.choose_config(B, T, True, 132, False)
    got = L.wide_walks16(fp32, B, T, 132, traits_of(algorithm))
    if want == LOOK:
        assert fp32.BLOCK_B == 16 and got == L.ScanConfig(32, 128, 4, 128, True, flip=-8)
    elif want == RUNS:
        assert got == L.ScanConfig(32, fp32.BLOCK_T, fp32.num_warps, fp32.seg_len, flip=-8)
    else:
        assert got == fp32


@pytest.mark.parametrize("sms, want", [(5, LOOK), (1, RUNS)])
@pytest.mark.parametrize("est", FOUR_LOAD_ESTIMATORS, ids=[e.name for e in FOUR_LOAD_ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_16bit_walks_in_32_env_tiles_match_the_reference(est, sms, want, kernels, launches,
                                                         monkeypatch):
    """bf16 time-major rows of 36 envs and 400 steps walked by 16-env programs, on as few SMs
    as make ``wide_walks16`` take its 32-env look-back (5) or its longer runs (one): the
    public call launches that tile, against the float64 loop; V-trace keeps the 16-env
    tile."""
    widened, rule = [], L.wide_walks16
    monkeypatch.setattr(L, "wide_walks16", lambda *a: widened.append(rule(*a)) or widened[-1])
    monkeypatch.setattr(L, "num_sms", lambda device: sms)
    d = make_inputs(36, 400, dtype=torch.bfloat16, flag_dtype=torch.bfloat16)
    check_time_major(est, d, kernels, TOL[torch.bfloat16])
    assert widened
    if est.kernel == "vtrace":
        assert all(c.BLOCK_B < 32 for c in widened)
    else:
        wide = {LOOK: (32, True), RUNS: (32, False)}[want]
        assert all((c.BLOCK_B, c.single_pass) == wide for c in widened)
    assert launches and all(b == 32 for b in launches)


@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_16bit_rows_of_no_four_envs(est, kernels, launches):
    """bf16 rows of 10 envs: the 16-bit tile, as Triton loads."""
    d = make_inputs(10, 37, dtype=torch.bfloat16, flag_dtype=torch.bfloat16)
    check_time_major(est, d, kernels, TOL[torch.bfloat16])
    assert launches and all(b == 0 for b in launches)


@pytest.mark.parametrize("config", [None, SPLIT, LOOK_BACK], ids=["shipped", "two_pass",
                                                                 "look_back"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_bf16_values_four_a_load(est, config, kernels, launches):
    """bf16 values beside fp32 rewards (fp32 outputs) and bool flags: every narrow load four
    envs a load in the fp32 tile, but Retrace's (its values keep the 16-bit tile)."""
    d = make_inputs(16, 45, flag_dtype=torch.bool)
    # rows of rewards alone: bf16 rewards beside an fp32 seed or bootstrap
    half = ("r",) if est.name in REWARDS_ONLY else ("v", "n", "lpt", "lpb", "pi", "mu")
    d.update({k: d[k].to(torch.bfloat16) for k in half})
    got = check_time_major(est, d, kernels, TOL[torch.float32], config)
    assert all(g.dtype == torch.float32 for g in got)
    assert launches and all(b == (32 if est.kernel in VALUE_KERNELS else 16) for b in launches)


@pytest.mark.parametrize("name", ["gae", "lambda_returns"])
@pytest.mark.parametrize("kernels", KERNELS)
def test_gradients_through_flags_four_a_load(name, kernels, launches):
    """The backward's reset sums (``adjoints``) load both flags four envs a load too."""
    est = next(e for e in ESTIMATORS if e.name == name)
    d = make_inputs(8, 33, flag_dtype=torch.bool)
    w = torch.randn(8, 33, generator=torch.Generator().manual_seed(1))
    keys = ("r", "v", "n")

    def grads(module, inputs, layout, **kw):
        # the upstream gradient in the outputs' own layout, as the flags are
        x = {k: inputs[k].clone().requires_grad_() for k in keys}
        y = outputs(est.call(module, {**inputs, **x}, **kw))[0]
        return torch.autograd.grad((y * layout.apply({"r": w})["r"].to(y)).sum(),
                                   list(x.values()), allow_unused=True)

    with L.cpu_backend("triton") if kernels == "triton" else contextlib.nullcontext():
        got = grads(P, TIME_MAJOR.apply({k: v if v is None else v.to(device_of(kernels))
                                         for k, v in d.items()}), TIME_MAJOR, time_dim=0)
    batch_major = LAYOUTS[0]
    want = grads(ref, {k: v.double() if v is not None and v.is_floating_point() else v
                       for k, v in d.items()}, batch_major)
    for k, g, gw in zip(keys, got, want):
        if gw is None:
            assert g is None or not g.abs().any(), k
        else:
            assert_close(f"{name} d{k}", TIME_MAJOR.back(g), gw, TOL[torch.float32])
    assert len(launches) >= 2 and all(b == 16 for b in launches)


@pytest.mark.parametrize("config", [None, SPLIT, LOOK_BACK], ids=["shipped", "two_pass",
                                                                 "look_back"])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16,) * 2, (torch.float16,) * 2,
                                    (torch.bfloat16, torch.float32)],
                         ids=["bf16", "fp16", "bf16_alpha"])
@pytest.mark.parametrize("reverse", [True, False], ids=["reverse", "forward"])
@pytest.mark.parametrize("kernels", KERNELS)
def test_affine_scan_four_a_load(dtypes, reverse, config, kernels, launches):
    """The bare engine on time-major rows of 12 envs narrower than 4 bytes, 3 elements past an
    aligned address: every narrow load, and 16-bit stores, four envs at a time in the fp32 tile;
    rows of 10 envs as Triton loads them."""
    dev = device_of(kernels)
    g = torch.Generator().manual_seed(3)
    for B, fours in ((12, 32), (10, 0)):
        a, b, c = torch.randn(37, B, generator=g), torch.rand(37, B, generator=g), \
            torch.randn(B, generator=g)
        a16, b16 = (shifted(x.to(dev, d), 3 * d.itemsize) for x, d in zip((a, b), dtypes))
        loop = ref.backward_recurrence if reverse else ref.forward_recurrence
        want = loop(a16.double().cpu().t(), b16.double().cpu().t(), c.double())
        on = L.cpu_backend("triton") if kernels == "triton" else contextlib.nullcontext()
        launches.clear()
        with on, L.force_config(config):
            out = P.affine_scan(a16, b16, reverse=reverse, initial=c.to(dev, dtypes[1]),
                                time_dim=0)
        assert out.dtype == dtypes[1]
        assert_close("scan", out.t(), want, TOL[dtypes[1]])
        assert launches == [fours]
