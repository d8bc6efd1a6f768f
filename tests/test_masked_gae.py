"""Masked GAE (multi-turn RLHF): against verl's loop in float64, on every backend, layout and
dtype; with nothing masked it is GAE; gradients; bad input."""
import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _plan
from paper_repro.kernels import masked_gae as MG

GAMMA, LAMBDA = 0.99, 0.95


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """No launch plan from another test: each test's calls decide their path afresh."""
    monkeypatch.setattr(_plan, "_PLANS", {})
    monkeypatch.setattr(_plan, "_SITES", {})


def inputs(N, T, seed=0, soft=False, device="cpu", dtype=torch.float32):
    """Rewards, values, a mask with masked spans (tool outputs) and a last value."""
    g = torch.Generator().manual_seed(seed)
    r, v, last = torch.randn(N, T, generator=g), torch.randn(N, T, generator=g), \
        torch.randn(N, generator=g)
    # spans: a step starts a masked span with probability 0.1, a span ends with 0.3
    mask = torch.ones(N, T)
    state = torch.ones(N)
    for t in range(T):
        u = torch.rand(N, generator=g)
        state = torch.where(state == 1, (u >= 0.1).float(), (u < 0.3).float())
        mask[:, t] = state
    if soft:
        mask = mask * torch.rand(N, T, generator=g)
    return [x.to(device=device, dtype=dtype) for x in (r, v, mask, last)]


@pytest.mark.parametrize("soft", [False, True], ids=["binary", "float"])
@pytest.mark.parametrize("N,T", [(1, 1), (3, 2), (3, 63), (1, 1000), (8, 300), (1, 4097)])
def test_against_verl_loop(N, T, soft, backend):
    r, v, m, last = inputs(N, T, N + T, soft, device_of(backend))
    for lv in (None, last):
        want = ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, lv)
        got = P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, lv)
        assert got.dtype == torch.float32 and got.shape == r.shape
        assert_close("masked gae", got, want, TOL[torch.float32])


def test_masked_steps_pass_through(backend):
    """A masked step's reward and value change nothing; it holds the next step's advantage."""
    r, v, m, last = inputs(4, 50, 1, device=device_of(backend))
    m[:, 10:20] = 0
    base = P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    r2, v2 = r.clone(), v.clone()
    r2[:, 10:20] += 100.0
    v2[:, 10:20] -= 50.0
    moved = P.compute_masked_gae(r2, v2, m, GAMMA, LAMBDA, last)
    assert_close("unchanged", moved, base, TOL[torch.float32])
    assert_close("held", base[:, 10:20], base[:, 20:21].expand(4, 10).double(), TOL[torch.float32])


def test_unmasked_is_gae(backend):
    r, v, _, last = inputs(5, 77, 2, device=device_of(backend))
    ones = torch.ones_like(r)
    got = P.compute_masked_gae(r, v, ones, GAMMA, LAMBDA, last)
    want = P.compute_gae(r, v, torch.zeros_like(r), None, GAMMA, LAMBDA, last_value=last)
    assert_close("unmasked", got, want.double(), TOL[torch.float32])


def test_zero_values_give_masked_discounted_returns(backend):
    """REINFORCE over the policy's tokens: G_t = sum of gamma^j r over the unmasked steps from t."""
    r, _, m, _ = inputs(3, 40, 8, device=device_of(backend))
    got = P.compute_masked_gae(r, torch.zeros_like(r), m, GAMMA, 1.0)
    r64, m64 = r.double().cpu(), m.double().cpu()
    want = torch.empty_like(r64)
    acc = torch.zeros(3, dtype=torch.float64)
    for t in range(39, -1, -1):
        acc = torch.where(m64[:, t] == 1, r64[:, t] + GAMMA * acc, acc)
        want[:, t] = acc
    assert_close("returns", got, want, TOL[torch.float32])


@pytest.mark.parametrize("layout", ["time_major", "batch_axes"])
def test_layouts(layout, backend):
    r, v, m, last = inputs(6, 40, 3, device=device_of(backend))
    want = ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    if layout == "time_major":
        got = P.compute_masked_gae(r.t(), v.t(), m.t(), GAMMA, LAMBDA, last, time_dim=0).t()
    else:  # [2, T, 3]: batch axes either side of time
        def lay(x):
            return x.reshape(2, 3, 40).transpose(1, 2)
        got = P.compute_masked_gae(lay(r), lay(v), lay(m).bool(), GAMMA, LAMBDA,
                                   last.reshape(2, 3), time_dim=1)
        got = got.transpose(1, 2).reshape(6, 40)
    assert_close(layout, got, want, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_dtypes(dtype, backend):
    r, v, m, last = inputs(3, 90, 4, device=device_of(backend), dtype=dtype)
    got = P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    assert got.dtype == dtype
    assert_close(str(dtype), got, ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last), TOL[dtype])


def test_gradients_match_autograd_through_the_loop(backend):
    r, v, m, last = inputs(2, 30, 5, soft=True, device=device_of(backend), dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (r, v, last)]
    weight = torch.randn(2, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    ours = torch.autograd.grad((P.compute_masked_gae(leaves[0], leaves[1], m, GAMMA, LAMBDA,
                                                     leaves[2]) * weight.to(r.device)).sum(),
                               leaves)
    cpu = [x.detach().cpu().requires_grad_() for x in leaves]
    want = torch.autograd.grad((ref.compute_masked_gae(cpu[0], cpu[1], m.cpu(), GAMMA, LAMBDA,
                                                       cpu[2]) * weight).sum(), cpu)
    for name, g, w in zip(("rewards", "values", "last_value"), ours, want):
        assert_close(name, g, w, 1e-9)


def _refuse(*args, **kwargs):
    raise AssertionError("this path was not to be taken")


@pytest.mark.parametrize("case", ["time_major", "tall_time_major", "mixed_strides", "int_mask",
                                  "rows_of_no_view", "many_rows"])
def test_fused_kernel_where_the_kernels_run(case, backend, monkeypatch):
    """Where the kernels run and nothing needs a gradient, one fused launch (the two scans
    refused) reads every layout where it lies; the torch backend takes the two scans."""
    if backend == "torch":
        monkeypatch.setattr(MG, "fused_masked_gae", _refuse)
    else:
        monkeypatch.setattr(MG, "two_scans", _refuse)
    N, T = {"tall_time_major": (3, 120), "many_rows": (300, 33)}.get(case, (70, 37))
    r, v, m, last = inputs(N, T, 12, device=device_of(backend))
    want = ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    if case in ("time_major", "tall_time_major"):  # [T, N] memory: the envs contiguous
        tm = [x.t().contiguous() for x in (r, v, m)]
        got = P.compute_masked_gae(*tm, GAMMA, LAMBDA, last, time_dim=0)
        assert got.stride() == tm[0].stride()
        got = got.t()
    elif case == "mixed_strides":  # a time-major bool mask beside batch-major rows
        got = P.compute_masked_gae(r, v, m.bool().t().contiguous().t(), GAMMA, LAMBDA, last)
    elif case == "int_mask":
        got = P.compute_masked_gae(r, v, m.to(torch.int8), GAMMA, LAMBDA, last)
    elif case == "rows_of_no_view":  # [2, T, 35]: the output's rows are no view of it
        def lay(x):
            return x.reshape(2, 35, T).transpose(1, 2).contiguous()
        got = P.compute_masked_gae(lay(r), lay(v), lay(m), GAMMA, LAMBDA, last.reshape(2, 35),
                                   time_dim=1)
        got = got.transpose(1, 2).reshape(N, T)
    else:
        got = P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    assert_close(case, got, want, TOL[torch.float32])


@pytest.mark.parametrize("walk", ["lanes", "runs", "runs_prefetch", "lanes_prefetch",
                                  "runs_split", "lanes_prefetch_split", "interleaved",
                                  "interleaved_split"])
@pytest.mark.parametrize("N,T,layout,dtype", [
    (3, 70, "NT", torch.float32), (1, 1, "NT", torch.float32), (5, 333, "NT", torch.float32),
    (2, 200, "NT", torch.bfloat16), (2, 90, "NT", torch.float64), (1, 257, "NT", torch.float16),
    (9, 40, "TN", torch.float32)], ids=str)
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_every_tile_walk_of_the_fused_kernel(N, T, layout, dtype, walk, backend):
    """The fused kernel's walks, forced on tiles of a few dozen steps so rows span several:
    lanes latest step first (values and mask read again a step later) and runs of one 16-byte
    load's steps (the next value from the scan's shifted tile, runs of 2, 4 or 8 by dtype),
    each with and without the next tile's loads in flight; and time split into segments of one
    or two tiles (each segment's map, then the later maps applied and the segment scanned);
    interleaved runs of 4 (time-major tiles, whose threads hold every G-th column)."""
    r, v, m, last = inputs(N, T, N * T, device=device_of(backend), dtype=dtype)
    m = m.bool()
    want = ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    args, axis = (r, v, m, last), 1
    if layout == "TN":
        args, axis = (*(x.t().contiguous() for x in (r, v, m)), last), 0
    rows = MG.L.rows_of(axis, rewards=args[0], values=args[1], mask=args[2])
    flip = 1 if walk.startswith("lanes") else -4 if walk.startswith("interleaved") else \
        MG.run_length(32, r.element_size(), False)
    seg_tiles = (1 if walk.startswith("lanes") else 2) if walk.endswith("split") else 0
    tile = (2, 32, 1, flip, "prefetch" in walk, seg_tiles)
    got = MG.fused_masked_gae(args, rows, tile, GAMMA, LAMBDA, axis, dtype)
    assert got.dtype == dtype and got.stride() == args[0].stride()
    assert_close(walk, got.t() if layout == "TN" else got, want, TOL[dtype])


def test_rows_of_many_tiles_split_time_and_gradients_take_the_two_scans(backend, monkeypatch):
    """Rows of more tiles than their programs walk fast (batch-major rows of 1024-step tiles,
    time-major ones of 16) split time across programs (two launches, no two scans); calls that
    need a gradient go through the engine's two scans."""
    if backend != "torch":
        monkeypatch.setattr(MG, "two_scans", _refuse)
    monkeypatch.setattr(MG, "FEW_TILES", 1)
    monkeypatch.setattr(MG, "MAX_TILES", 1)
    grids = []
    launch = MG.MaskedLaunch.__call__
    monkeypatch.setattr(MG.MaskedLaunch, "__call__",
                        lambda self, pointers: grids.append(self.grid3) or launch(self, pointers))
    r, v, m, last = inputs(2, 2100, 13, device=device_of(backend))
    assert_close("long", P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last),
                 ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last), TOL[torch.float32])
    tm = [x[:, :40].t().contiguous() for x in (r, v, m)]
    got = P.compute_masked_gae(*tm, GAMMA, LAMBDA, last, time_dim=0).t()
    assert_close("time-major", got, ref.compute_masked_gae(r[:, :40], v[:, :40], m[:, :40],
                                                           GAMMA, LAMBDA, last),
                 TOL[torch.float32])
    if backend != "torch":  # a program a row x 3 segments of one 1024-step tile; 1 x 3 of 16
        assert grids == [(2, 3, 1), (1, 3, 1)]
    monkeypatch.undo()
    monkeypatch.setattr(MG, "fused_masked_gae", _refuse)
    out = P.compute_masked_gae(r[:, :30], v[:, :30].clone().requires_grad_(), m[:, :30], GAMMA,
                               LAMBDA, last)
    assert out.requires_grad


@pytest.mark.parametrize("B, T, layout, seg_tiles", [
    (64, 1024, "NT", 0), (256, 32768, "NT", 0), (32, 32768, "NT", 2), (1, 32768, "NT", 1),
    (16, 65536, "NT", 2), (256, 2048, "TN", 1), (1024, 256, "TN", 0),
    (4096, 512, "TN", 0), (2048, 1024, "TN", 0), (256, 8192, "TN", 2), (16, 120, "TN", 0)])
def test_rows_whose_programs_walk_slowly_split_time(B, T, layout, seg_tiles):
    """Segments of ``seg_tiles`` tiles (0: one a row) for about SPLIT_PROGRAMS programs in all
    where ``walks_fast`` says the programs would wait on their tiles."""
    stride = (T, 1) if layout == "NT" else (1, B)
    assert MG.masked_tile(B, T, stride)[5] == seg_tiles


@pytest.mark.parametrize("B, T, tile", [
    (256, 32768, (1, 2048, 4)), (256, 8192, (1, 2048, 4)), (133, 4100, (1, 2048, 4)),
    (132, 4100, (1, 4096, 8)), (4, 4096, (1, 4096, 8)), (64, 16384, (1, 4096, 8)),
    (512, 4096, (1, 1024, 4)), (256, 2048, (1, 1024, 4)), (32, 32768, (1, 1024, 4))])
def test_long_rows_walked_by_few_programs_take_wider_tiles(B, T, tile):
    """Rows of at least LONG_WALK_TILES tiles walked one a program by fewer than two programs an
    SM take LONG_WALK_TILE, by at most one LONGER_WALK_TILE; more programs, shorter rows,
    split rows and fp64 scans keep 1024 steps."""
    assert MG.masked_tile(B, T, (T, 1))[:3] == tile
    assert MG.masked_tile(B, T, (T, 1), 8, 8)[:3] == (1, 1024, 4)  # fp64: wider tiles spill


@pytest.mark.parametrize("B, T, tile, prefetch", [
    (32768, 32, (16, 16, 1, 1), True), (8, 127, (8, 16, 1, 1), True),
    (4096, 128, (16, 128, 4, -4), False), (4096, 512, (16, 128, 4, -4), False),
    (4096, 897, (16, 128, 4, -4), True), (4096, 896, (16, 128, 4, -4), False),
    (1024, 4096, (16, 128, 4, -4), True), (256, 2048, (16, 128, 4, -4), False),
    (3, 4100, (4, 128, 4, -4), False)])
def test_time_major_rows_of_128_steps_take_interleaved_runs(B, T, tile, prefetch):
    """Time-major rows of at least INTERLEAVED_TILE's steps take it, walks of at least
    INTERLEAVED_PREFETCH_TILES tiles prefetched, split ones (256 x 2048, 3 x 4100) and shorter
    walks not; shorter rows 16-step lanes tiles in one warp, walked whole, the next tile loaded
    while this one is scanned (PREFETCH)."""
    got = MG.masked_tile(B, T, (1, B))
    assert got[:4] == tile
    assert got[4] is prefetch


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_long_interleaved_walks_prefetch_through_the_public_call(backend):
    """Time-major rows of INTERLEAVED_PREFETCH_TILES 128-step tiles (the last partial), walked
    whole with the next tile loaded during this one's scans: the loop's answer."""
    T = 128 * MG.INTERLEAVED_PREFETCH_TILES - 24
    r, v, m, last = inputs(4, T, 23, device=device_of(backend))
    assert MG.masked_tile(4, T, (1, 4))[3:] == (-4, True, 0)
    got = P.compute_masked_gae(*(x.t().contiguous() for x in (r, v, m)), GAMMA, LAMBDA, last,
                               time_dim=0)
    assert_close("prefetched walk", got.t(), ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last),
                 TOL[torch.float32])


@pytest.mark.parametrize("programs", [1, 2], ids=["one_an_sm", "under_two"])
def test_long_walk_tiles_match_the_reference(programs, backend, monkeypatch):
    """Three rows of 4100 steps walked in 4096-step tiles (``programs``: at most one program an
    SM), and in 2048-step ones (under two), the last tile partial."""
    monkeypatch.setattr(MG, "AN_SM", 3 if programs == 1 else 2)  # 3 programs (rows)
    r, v, m, last = inputs(3, 4100, 17, device=device_of(backend))
    tile = MG.LONGER_WALK_TILE if programs == 1 else MG.LONG_WALK_TILE
    assert MG.masked_tile(3, 4100, (4100, 1))[1:3] == tile
    assert_close("long walk", P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last),
                 ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last), TOL[torch.float32])


@pytest.mark.parametrize("tiles, programs, time_major, walked", [
    (1, 64, False, True), (8, 1, False, True), (16, 256, False, True), (32, 256, False, True),
    (16, 64, False, True), (32, 32, False, False), (32, 8, False, False), (64, 16, False, False),
    (128, 4, True, False), (16, 16, True, False), (32, 64, False, False), (32, 64, True, True),
    (64, 64, True, False)])
def test_rows_whose_programs_walk_fast_are_walked_whole(tiles, programs, time_major, walked):
    """The rule against the measured cases (``masked_ab.csv``): 64 x 1024, 256 x 8192 and 256 x
    32768 walked; 32, 8 and 1 x 32768, 16 x 65536, time-major 256 x 2048 and 1024 x 256 split;
    time-major 4096 x 512, 32 tiles of 16 steps from 64 programs, walked (0.83x the split)."""
    assert MG.walks_fast(tiles, programs, time_major) is walked


@pytest.mark.parametrize("split", [False, True], ids=["one_pass", "split"])
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_repeats_take_the_fused_launchs_plan(split, backend, monkeypatch):
    """A call with an earlier fused call's metadata and scalars is served by its launch plan
    (no checks, no new launch; natively through the op's site on the GPU where it is one pass,
    two launches where it splits time) and reads its own tensors; other metadata is a miss."""
    if split:  # 40 steps: three 16-step tiles, a segment each
        monkeypatch.setattr(MG, "FEW_TILES", 1)
        monkeypatch.setattr(MG, "MAX_TILES", 1)
        monkeypatch.setattr(MG, "TIME_MAJOR_TILE", (64, 16))

    def lay(x):  # split: time-major [T, N] memory
        return x.t().contiguous().t() if split else x

    first = inputs(6, 40, 20, device=device_of(backend))
    P.compute_masked_gae(*map(lay, first[:3]), GAMMA, LAMBDA, first[3])
    P.compute_masked_gae(*map(lay, first[:3]), GAMMA, LAMBDA, first[3])  # on the GPU: native
    monkeypatch.setattr(MG, "fused_masked_gae", _refuse)
    monkeypatch.setattr(MG.L, "check_tensor", _refuse)
    r, v, m, last = inputs(6, 40, 21, device=device_of(backend))
    got = P.compute_masked_gae(lay(r), lay(v), lay(m), GAMMA, LAMBDA, last)
    assert_close("planned", got, ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last),
                 TOL[torch.float32])
    r, v, m = lay(r), lay(v), lay(m)
    for call in (lambda: P.compute_masked_gae(r, v, m, GAMMA, 0.9, last),
                 lambda: P.compute_masked_gae(r[:, :39], v[:, :39], m[:, :39], GAMMA, LAMBDA,
                                              last),
                 lambda: P.compute_masked_gae(r, v, m.bool(), GAMMA, LAMBDA, last)):
        with pytest.raises(AssertionError, match="not to be taken"):
            call()


def test_bad_input_names_the_argument():
    r, v, m, last = inputs(2, 5)
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 5\)"):
        P.compute_masked_gae(r, v, m[:, :4], GAMMA, LAMBDA)
    with pytest.raises(ValueError, match=r"last_value must have shape \(2,\)"):
        P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last[:1])
    with pytest.raises(TypeError, match="values must be float16"):
        P.compute_masked_gae(r, v.long(), m, GAMMA, LAMBDA)
    with pytest.raises(TypeError, match="lambda_ must be a real number"):
        P.compute_masked_gae(r, v, m, GAMMA, None)
    assert P.compute_masked_gae(r[:, :0], v[:, :0], m[:, :0], GAMMA, LAMBDA).shape == (2, 0)


def test_compile_fullgraph():
    r, v, m, last = inputs(3, 20, 7, device=device_of(BACKENDS[0]))
    torch._dynamo.reset()
    compiled = torch.compile(P.compute_masked_gae, fullgraph=True)
    got = compiled(r, v, m, GAMMA, LAMBDA, last)
    assert_close("compiled", got, ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last),
                 TOL[torch.float32])


def test_func_transforms(backend):
    """torch.func through the two scans: grad against autograd through verl's loop, vmap
    against the batch of calls."""
    r, v, m, last = inputs(3, 25, 9, soft=True, device=device_of(backend), dtype=torch.float64)
    got = torch.func.grad(lambda v: P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last).sum())(v)
    x = v.cpu().requires_grad_()
    ref.compute_masked_gae(r.cpu(), x, m.cpu(), GAMMA, LAMBDA, last.cpu()).sum().backward()
    assert_close("grad", got, x.grad, 1e-9)
    stack = torch.stack([r, -r, 2 * r])
    batch = torch.func.vmap(lambda r: P.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last))(stack)
    for i in range(3):
        assert_close("vmap", batch[i],
                     ref.compute_masked_gae(stack[i], v, m, GAMMA, LAMBDA, last), 1e-9)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_the_ab_benchmarks_forced_arms(backend):
    """``bench.masked_ab``'s forced launches (each walk, time split, the time-major and
    batch-major tiles it weighs) give the loop's answer, so that its timings compare like with
    like."""
    from paper_repro.bench.masked_ab import forced

    r, v, m, last = inputs(5, 2100, 30, device=device_of(backend))  # split: 3 segments
    want = ref.compute_masked_gae(r, v, m, GAMMA, LAMBDA, last)
    for kw in ({"flip": 1, "prefetch": False}, {"prefetch": True}, {"split": True}):
        got = forced((r, v, m, last), 1, torch.float32, gamma=GAMMA, lambda_=LAMBDA, **kw)
        assert_close(str(kw), got, want, TOL[torch.float32])
    from paper_repro.bench.masked_ab import TIME_MAJOR_TILES, time_major_tile

    r, v, m, last = inputs(20, 300, 31, device=device_of(backend))
    want = ref.compute_masked_gae(r, v, m, 1.0, 0.95, last)
    tm = (*(x.t().contiguous() for x in (r, v, m)), last)
    for kw in ({"flip": 1, "prefetch": False}, {"prefetch": False}, {"prefetch": True},
               {"split": True}):  # 300 steps: interleaved runs, lanes forced
        got = forced(tm, 0, torch.float32, gamma=1.0, lambda_=0.95, **kw)
        assert_close(f"time-major {kw}", got.t(), want, TOL[torch.float32])
    for name, tile in TIME_MAJOR_TILES.items():
        assert_close(name, time_major_tile(tm, torch.float32, *tile).t(), want,
                     TOL[torch.float32])
    from paper_repro.bench.masked_ab import triton_loads

    tm = (*tm[:2], tm[2].bool(), last)
    assert_close("triton_loads", triton_loads(tm, 0, torch.float32).t(), want,
                 TOL[torch.float32])
    from paper_repro.bench.masked_ab import BATCH_MAJOR_TILES, batch_major_tile

    r, v, m, last = inputs(3, 4200, 32, device=device_of(backend))  # 2-5 tiles, the last partial
    want = ref.compute_masked_gae(r, v, m, 1.0, 0.95, last)
    for name, tile in BATCH_MAJOR_TILES.items():
        assert_close(name, batch_major_tile((r, v, m, last), torch.float32, *tile), want,
                     TOL[torch.float32])


def _past_alignment(x: torch.Tensor) -> torch.Tensor:
    """``x`` (contiguous) copied one element past a 16-byte aligned address."""
    buf = torch.zeros(x.numel() + 16, dtype=x.dtype, device=x.device)
    return buf[1:1 + x.numel()].view(x.shape).copy_(x)


@pytest.mark.parametrize("walk", ["lanes", "lanes_prefetch_split", "interleaved",
                                  "interleaved_prefetch", "interleaved_split"])
@pytest.mark.parametrize("dtypes,fours", [
    ((torch.float32, torch.float32, torch.bool), 16), ((torch.float32, torch.bfloat16,
                                                        torch.bool), 32),
    ((torch.bfloat16, torch.bfloat16, torch.bool), 32), ((torch.float16,) * 3, 32),
    ((torch.float32, torch.float32, torch.float32), 0)], ids=["bool", "bf16_values", "bf16",
                                                             "fp16", "fp32"])
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_time_major_narrow_loads_four_envs_a_load(dtypes, fours, walk, backend, monkeypatch):
    """Time-major rows of 12 envs, one element past an aligned address, with a bool mask, bf16
    values or 16-bit rows: the fused kernel loads (and stores 16-bit outputs) four envs at a
    time (``L.four_loads``), in every walk, against the float64 loop."""
    seen, init = [], MG.MaskedLaunch.__init__
    monkeypatch.setattr(MG.MaskedLaunch, "__init__", lambda self, *a: (  # tail[4]: FOURS_BELOW
        seen.append(a[-1][4]), init(self, *a))[1])
    r, v, m, last = inputs(12, 45, 7, device=device_of(backend))
    r, v, m = (x.to(d) for x, d in zip((r, v, m), dtypes))
    want = ref.compute_masked_gae(r.double(), v.double(), m.double(), GAMMA, LAMBDA,
                                  last.double())
    args = (*(_past_alignment(x.t().contiguous()) for x in (r, v, m)), last)
    rows = MG.L.rows_of(0, rewards=args[0], values=args[1], mask=args[2])
    flip = 1 if walk.startswith("lanes") else -4
    tile = (4, 32, 1, flip, "prefetch" in walk, 1 if walk.endswith("split") else 0)
    out_dtype = torch.promote_types(dtypes[0], dtypes[1])
    got = MG.fused_masked_gae(args, rows, tile, GAMMA, LAMBDA, 0, out_dtype)
    assert got.dtype == out_dtype
    assert_close(walk, got.t(), want, TOL[out_dtype])
    assert seen == [fours]


@pytest.mark.parametrize("B, dtypes, interleaved", [
    (8, (torch.float32,) * 3, True), (6, (torch.float32,) * 3, True),
    (8, (torch.float32, torch.float32, torch.bool), True),
    (6, (torch.float32, torch.float32, torch.bool), False),
    (8, (torch.bfloat16, torch.bfloat16, torch.bool), True),
    (6, (torch.bfloat16,) * 3, False), (8, (torch.float64, torch.float64, torch.bool), False)],
    ids=["fp32", "fp32_odd", "bool", "bool_odd", "bf16_bool", "bf16_odd", "fp64"])
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_time_major_interleaved_runs_only_where_loads_lie_as_fp32(B, dtypes, interleaved,
                                                                   backend, monkeypatch):
    """Time-major rows of 128 steps take INTERLEAVED_TILE only where every load lies as fp32's
    (4-byte elements, or narrower ones four envs a load); else the lanes tile, whose Triton
    loads cost no layout conversion. Either way the loop's answer."""
    seen, init = [], MG.MaskedLaunch.__init__
    monkeypatch.setattr(MG.MaskedLaunch, "__init__", lambda self, *a: (
        seen.append(a[-1][2]), init(self, *a))[1])
    r, v, m, last = inputs(B, 128, 9, device=device_of(backend))
    r, v, m, last = (x.to(d) for x, d in zip((r, v, m, last), (*dtypes, dtypes[0])))
    want = ref.compute_masked_gae(r.double(), v.double(), m.double(), GAMMA, LAMBDA,
                                  last.double())
    tm = [x.t().contiguous() for x in (r, v, m)]
    rows = MG.L.rows_of(0, rewards=tm[0], values=tm[1], mask=tm[2])
    out_dtype = torch.promote_types(dtypes[0], dtypes[1])
    assert MG.loads_as_fp32(rows, out_dtype.itemsize) is interleaved
    got = P.compute_masked_gae(*tm, GAMMA, LAMBDA, last, time_dim=0)
    assert seen == [MG.INTERLEAVED_TILE[3] if interleaved else 1]
    assert_close("time-major", got.t(), want, TOL[out_dtype])
