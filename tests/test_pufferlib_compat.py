"""``paper_repro.pufferlib_compat.compute_puff_advantage`` against PufferLib 3.0's advantage
loop (the float64 reference, written from its update rule), and against PufferLib's own compiled op
where its sources are at hand (``$PAPER_REPRO_PUFFERLIB_SRC``)."""
import struct
from types import SimpleNamespace

import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of

import paper_repro.pufferlib_compat as compat
from paper_repro.baselines import external
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan
from paper_repro.pufferlib_compat import compute_puff_advantage

SENTINEL = 7.25  # the last column must keep whatever it held


def segments(S, H, seed, device, dtype=torch.float32, off_policy=True):
    """PufferLib's buffers: values, rewards and terminals (the reward and terminal of step t at
    t+1), importance ratios spread across both clips, advantages holding a sentinel."""
    g = torch.Generator().manual_seed(seed)
    values, rewards = torch.randn(S, H, generator=g), torch.randn(S, H, generator=g)
    terminals = (torch.rand(S, H, generator=g) < 0.1).float()
    ratio = torch.exp(0.4 * torch.randn(S, H, generator=g)) if off_policy else torch.ones(S, H)
    advantages = torch.full((S, H), SENTINEL)
    return [x.to(device, dtype) for x in (values, rewards, terminals, ratio, advantages)]


def puff_loop(values, rewards, terminals, ratio, gamma, lam, rho_clip, c_clip):
    """PufferLib's loop (the float64 reference), its never-written last column NaN here."""
    unwritten = torch.full(values.shape, float("nan"))
    return ref.compute_puff_advantage(values, rewards, terminals, ratio, unwritten, gamma, lam,
                                      rho_clip, c_clip)


@pytest.mark.parametrize("S, H, clips", [(5, 64, (1.0, 1.0)), (3, 33, (1.2, 0.8)),
                                          (1, 2, (1.0, 1.0)), (4, 300, (2.0, 0.5)),
                                          (2, 4500, (1.0, 1.0))])
def test_matches_pufferlib_loop(backend, S, H, clips):
    x = segments(S, H, H, device_of(backend))
    want = puff_loop(*x[:4], 0.99, 0.95, *clips)
    got = compute_puff_advantage(*x, 0.99, 0.95, *clips)
    assert got is x[4], "PufferLib's call writes into and returns `advantages`"
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])
    assert (got[:, -1] == SENTINEL).all(), "the last column is PufferLib's to leave alone"


def test_on_policy_is_gae_of_the_shifted_steps(backend):
    """Ratios of one make it GAE: bit for bit the loop's numbers within float32 rounding."""
    x = segments(6, 40, 1, device_of(backend), off_policy=False)
    want = puff_loop(*x[:4], 0.97, 0.9, 1.0, 1.0)
    got = compute_puff_advantage(*x, 0.97, 0.9, 1.0, 1.0)
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes(dtype):
    x = segments(3, 50, 2, "cpu", dtype)
    want = puff_loop(*x[:4], 0.99, 0.95, 1.0, 1.0)
    got = compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert got.dtype == dtype
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[dtype])


def test_horizon_one_writes_nothing():
    x = segments(3, 1, 3, "cpu")
    assert (compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0) == SENTINEL).all()


def test_against_pufferlibs_own_op():
    op, reason = external.pufferlib_reference_op()
    if op is None:
        pytest.skip(reason)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = segments(8, 128, 4, device)
    theirs = x[4].clone()
    op(*(t.contiguous() for t in x[:4]), theirs, 0.99, 0.95, 1.1, 0.9)
    ours = compute_puff_advantage(*x, 0.99, 0.95, 1.1, 0.9)
    assert_close("advantages", ours, theirs, TOL[torch.float32])


@pytest.mark.parametrize("change, match", [
    (lambda x: x.__setitem__(0, x[0][None]), "values must be \\[segments, horizon\\]"),
    (lambda x: x.__setitem__(1, x[1][:, :-1]), "rewards must have shape"),
    (lambda x: x.__setitem__(3, x[3].int()), "ratio must be float16"),
    (lambda x: x.__setitem__(4, None), "advantages must be a torch.Tensor"),
])
def test_bad_tensors_are_named(change, match):
    x = segments(2, 8, 5, "cpu")
    change(x)
    with pytest.raises((TypeError, ValueError), match=match):
        compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)


def test_bad_scalar_is_named():
    x = segments(2, 8, 5, "cpu")
    with pytest.raises(TypeError, match="vtrace_c_clip must be a real number"):
        compute_puff_advantage(*x, 0.99, 0.95, 1.0, "1")


def test_compile_fullgraph():
    x = segments(3, 40, 6, "cuda" if torch.cuda.is_available() else "cpu")
    want = puff_loop(*x[:4], 0.99, 0.95, 1.0, 1.0)
    torch._dynamo.reset()
    got = torch.compile(compute_puff_advantage, fullgraph=True)(*x, 0.99, 0.95, 1.0, 1.0)
    assert_close("compiled", got[:, :-1], want[:, :-1], TOL[torch.float32])
    assert (x[4][:, -1] == SENTINEL).all() and torch.equal(x[4], got)


def _refuse(*args, **kwargs):
    raise AssertionError("this path was not to be taken")


def test_one_launch_where_the_kernels_run(backend, monkeypatch):
    """Kernels here: one launch reading the ratios (V-trace's public call refused); torch path:
    the public call (the launch refused). Both give PufferLib's numbers."""
    if backend == "torch":
        monkeypatch.setattr(compat, "vtrace_difference_into", _refuse)
    else:
        monkeypatch.setattr(compat, "compute_vtrace", _refuse)
    for seed in (8, 9):  # the second call of a shape repeats the first one's launch
        x = segments(4, 129, seed, device_of(backend))
        want = puff_loop(*x[:4], 0.99, 0.9, 1.3, 0.7)
        got = compute_puff_advantage(*x, 0.99, 0.9, 1.3, 0.7)
        assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])
        assert (got[:, -1] == SENTINEL).all()


def test_launch_takes_vtraces_traits_without_truncations(backend, monkeypatch):
    """PufferLib's advantage is V-trace's launch without truncations: its tile comes from
    V-trace's traits for rows without them (1024-step walks up to four rows an SM)."""
    from paper_repro.kernels import vtrace

    if backend == "torch":
        pytest.skip("the one launch runs where the kernels do")
    seen, config_for = [], L.config_for

    def spy(*args, **kwargs):
        seen.append(kwargs.get("traits"))
        return config_for(*args, **kwargs)

    monkeypatch.setattr(L, "config_for", spy)
    monkeypatch.setattr(compat, "_REPEATS", {})
    monkeypatch.setattr(_plan, "_PLANS", {})
    x = segments(3, 40, 4, device_of(backend))
    want = puff_loop(*x[:4], 0.99, 0.95, 1.0, 1.0)
    got = compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])
    assert seen and set(seen) == {vtrace.TILE_TRAITS_UNTRUNCATED}
    assert vtrace.TILE_TRAITS_UNTRUNCATED != vtrace.TILE_TRAITS


def test_forced_tiles_are_not_served_by_kept_launches(backend, monkeypatch):
    """A repeat under ``L.force_config`` launches the forced tile afresh, not the launch kept
    from the calls before it, and keeps nothing; outside the block repeats are kept again."""
    if backend == "torch":
        pytest.skip("the one launch runs where the kernels do")
    launched, real = [], compat.vtrace_difference_into

    def spy(*args):
        launched.append(L._FORCED_CONFIG[0])
        return real(*args)

    monkeypatch.setattr(compat, "vtrace_difference_into", spy)
    monkeypatch.setattr(compat, "_REPEATS", {})
    monkeypatch.setattr(_plan, "_PLANS", {})
    x = segments(3, 40, 5, device_of(backend))
    want = puff_loop(*x[:4], 0.99, 0.95, 1.0, 1.0)
    for _ in range(2):
        compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert launched == [None], "the second call repeats the kept launch"
    tile = L.ScanConfig(1, 16, 1, 48)
    with L.force_config(tile):
        got = compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert launched == [None, tile]
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])
    assert len(compat._REPEATS) == 1
    compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert launched == [None, tile], "outside the block the kept launch serves again"


def test_repeat_addresses_are_the_views():
    """A repeat launches on addresses taken from the whole buffers: they must be the views'
    own, for bool flags, column-major terminals and an advantages buffer inside a wider one."""
    from paper_repro.kernels.vtrace import difference_pointers

    values, rewards, terminals, ratio, _ = segments(4, 23, 13, "cpu")
    terminals = terminals.bool().t().contiguous().t()
    advantages = torch.zeros(4, 40)[:, 7:30]
    views = difference_pointers(advantages[:, :-1], ratio[:, :-1], values[:, :-1],
                                rewards[:, 1:], terminals[:, 1:], values[:, 1:])
    assert compat._addresses(values, rewards, terminals, ratio, advantages) == tuple(
        v.data_ptr() for v in views)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch"], indirect=True)
def test_repeat_goes_on_addresses(backend, monkeypatch):
    """The second call of a shape asks the kept launch to repeat on the addresses; refused
    (a first launch at this alignment, a hook), it launches on the views and stays right."""
    from paper_repro.kernels.affine_scan import Launch

    asked = []
    monkeypatch.setattr(Launch, "launch_pointers", lambda self, p: asked.append(p) and False)
    compat._REPEATS.clear()
    for seed in (14, 15):
        x = segments(3, 31, seed, device_of(backend))
        got = compute_puff_advantage(*x, 0.98, 0.9, 1.1, 0.9)
        assert_close("advantages", got[:, :-1], puff_loop(*x[:4], 0.98, 0.9, 1.1, 0.9)[:, :-1],
                     TOL[torch.float32])
    assert asked == [compat._addresses(*x)], "one repeat, on the second call's addresses"


def test_inputs_of_other_strides(backend):
    """Column-major terminals and a wider advantages buffer: read and written where they lie."""
    x = segments(5, 70, 10, device_of(backend))
    x[2] = x[2].t().contiguous().t()
    wide = torch.full((5, 90), SENTINEL, device=x[4].device)
    x[4] = wide[:, 10:80]
    want = puff_loop(*x[:4], 0.98, 0.9, 1.0, 1.0)
    got = compute_puff_advantage(*x, 0.98, 0.9, 1.0, 1.0)
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])
    assert (wide[:, :10] == SENTINEL).all() and (wide[:, 79:] == SENTINEL).all()


def test_mixed_dtypes_and_gradients_take_the_public_call(monkeypatch):
    """float64 advantages for float32 inputs, or values that need a gradient: V-trace's
    public call, which casts on the write and records the graph."""
    monkeypatch.setattr(compat, "vtrace_difference_into", _refuse)
    x = segments(3, 40, 9, "cpu")
    x[4] = x[4].double()
    got = compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert got.dtype == torch.float64
    assert_close("advantages", got[:, :-1], puff_loop(*x[:4], 0.99, 0.95, 1.0, 1.0)[:, :-1],
                 TOL[torch.float32])
    values = x[0].clone().requires_grad_()
    out = compute_puff_advantage(values, *x[1:4], torch.zeros_like(x[0]), 0.99, 0.95, 1.0, 1.0)
    assert out.requires_grad


def test_integer_and_numpy_scalars(backend):
    """PufferLib's configs may hand over ints or numpy floats: the same numbers as floats."""
    import numpy as np

    x = segments(3, 20, 11, device_of(backend))
    want = puff_loop(*x[:4], 1.0, 0.95, 1.0, 1.0)
    got = compute_puff_advantage(*x, 1, np.float32(0.95), 1, np.float64(1.0))
    assert_close("advantages", got[:, :-1], want[:, :-1], TOL[torch.float32])


class _DirectJob:
    """A kept launch that always repeats directly, on a kernel of its pointers and an int."""
    def __call__(self, pointers):
        pass

    def launch_pointers(self, pointers):
        return True

    def launch_values(self, pointers):
        pointers = L.with_unread_scratch(pointers)
        meta = SimpleNamespace(num_warps=4, shared=0, num_ctas=1)
        signature = dict(enumerate(["*fp32"] * len(pointers) + ["i32"]))
        compiled = SimpleNamespace(metadata=meta, function=0,
                                   src=SimpleNamespace(signature=signature))
        return compiled, (1, 1, 1), (*pointers, 9)


@pytest.fixture
def fake_direct(monkeypatch):
    """Launches that repeat directly (faked: nothing runs) and the native module loaded; the
    native plans made, in order."""
    native, made = N.load(), []
    make_plan = N.make_plan
    monkeypatch.setattr(N, "ENABLED", True)
    monkeypatch.setattr(N._State, "module", native)
    # compiled for device 99: the site finds them but never launches (their kernel is none)
    monkeypatch.setattr(N, "make_plan",
                        lambda *a: made.append(make_plan(*a[:8], 99, *a[9:])) or made[-1])
    monkeypatch.setattr(compat, "vtrace_difference_into", lambda *a: _DirectJob())
    monkeypatch.setattr(compat, "_one_launch", lambda *a: True)
    monkeypatch.setattr(compat.D, "current_device", lambda: 0)
    monkeypatch.setattr(compat.D, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(compat, "_REPEATS", {})
    monkeypatch.setattr(_plan, "_SITES", {})
    return native, made


def test_a_direct_repeat_joins_the_ops_site(fake_direct):
    """The first repeat that launched directly makes a native plan of no outputs on the
    buffers' addresses, a column on where the next step is read, and enlists it: later calls
    with the buffers' metadata and scalars find it before any check, and it writes into (and
    returns) their own ``advantages``."""
    native, made = fake_direct
    x = segments(3, 31, 1, "cpu")
    compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert not _plan._SITES and not made
    compute_puff_advantage(*x, 0.99, 0.95, 1.0, 1.0)
    assert len(made) == 1 and compat.OP in _plan._SITES
    site = _plan._SITES[compat.OP].args[0]
    y = segments(3, 31, 2, "cpu")
    assert isinstance(native.lookup(site, tuple(y), (0.99, 0.95, 1.0, 1.0)), _DirectJob)
    for scalars in [(0.99, 0.95, 1.0, 0.9), (0.99, 0.95, 1, 1.0)]:
        assert native.lookup(site, tuple(y), scalars) is None
    assert native.lookup(site, (*y[:4], y[4].double()), (0.99, 0.95, 1.0, 1.0)) is None
    out, block = native.packed(made[0], tuple(y))
    assert out is y[4]
    assert struct.unpack_from("12Q", block) == L.with_unread_scratch(compat._addresses(*y))
    compute_puff_advantage(*y, 0.99, 0.95, 1.0, 1.0)  # another device's plan: declined
    assert len(made) == 1


def test_numpy_scalars_stay_on_the_python_repeat(fake_direct):
    """The site compares scalars by exact type and value: numpy's are never enlisted."""
    import numpy as np

    native, made = fake_direct
    x = segments(3, 31, 1, "cpu")
    for _ in range(3):
        compute_puff_advantage(*x, np.float64(0.99), 0.95, 1.0, 1.0)
    assert not made and not _plan._SITES
    assert [kept.native for kept in compat._REPEATS.values()] == [False]


@pytest.mark.gpu
def test_repeats_are_served_by_the_native_site(monkeypatch):
    """Once native, calls on new buffers of the same metadata launch from the site (the Python
    launch refused) and equal PufferLib's loop; an advantages buffer 4 bytes off the compiled
    alignment goes back through the Python repeat and stays right."""
    if N.module(wait=True) is None:
        pytest.fail(f"the native module: {N.status()}")
    monkeypatch.setattr(compat, "_REPEATS", {})
    monkeypatch.setattr(_plan, "_SITES", {})
    args = 0.99, 0.95, 1.2, 0.9
    for seed in range(3):
        compute_puff_advantage(*segments(64, 33, seed, "cuda"), *args)
    assert compat.OP in _plan._SITES, "no plan joined the site"
    launch = compat._launch
    monkeypatch.setattr(compat, "_launch", _refuse)
    x = segments(64, 33, 7, "cuda")
    got = compute_puff_advantage(*x, *args)
    assert got is x[4] and (got[:, -1] == SENTINEL).all()
    assert_close("served", got[:, :-1].cpu(), puff_loop(*[t.cpu() for t in x[:4]], *args)[:, :-1],
                 TOL[torch.float32])
    monkeypatch.setattr(compat, "_launch", launch)
    buffer = torch.full((64 * 33 + 1,), SENTINEL, device="cuda")
    x[4] = buffer[1:].view(64, 33)
    got = compute_puff_advantage(*x, *args)
    assert_close("misaligned", got[:, :-1].cpu(),
                 puff_loop(*[t.cpu() for t in x[:4]], *args)[:, :-1], TOL[torch.float32])
