"""The native repeat of a launch plan (``kernels/_native.py``): the parameter block is packed as
Triton's launcher packs it, the C++ plan puts each call's addresses and fresh outputs in their
places, a plan goes native after its first direct launch and falls back where the native plan
does not apply; on the GPU, native repeats equal Python repeats bit for bit."""
import struct
from types import SimpleNamespace

import pytest
import torch
from conftest import TOL, assert_close
from estimators import ESTIMATORS, LAYOUTS, make_inputs, outputs
from torch.utils._python_dispatch import TorchDispatchMode

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N
from paper_repro.kernels import _plan

IDS = [e.name for e in ESTIMATORS]


@pytest.fixture(scope="module")
def native():
    """The compiled module (built here with the system compiler on first use)."""
    return N.load()


def test_parameter_block_packs_as_the_launcher():
    """Non-constexpr values in order, each in its C type at an 8-byte offset, then two null
    scratch pointers; bf16 is the float32's high half."""
    signature = ["*fp32", "i32", "constexpr", "i64", "fp32", "bf16", "fp16", "fp64", "i1", "u8"]
    values = (0x1000, -7, 64, 2**40, 0.25, 1.5, -2.0, 1 / 3, True, 200)
    block, offsets = N.parameter_block(signature, values)
    assert offsets == [0, 8, None, 16, 24, 32, 40, 48, 56, 64, 72, 80]
    assert len(block) == 88
    at = dict(zip(range(len(values)), offsets))
    assert struct.unpack_from("Q", block, at[0])[0] == 0x1000
    assert struct.unpack_from("i", block, at[1])[0] == -7
    assert struct.unpack_from("q", block, at[3])[0] == 2**40
    assert struct.unpack_from("f", block, at[4])[0] == 0.25
    assert struct.unpack_from("H", block, at[5])[0] == 0x3FC0
    assert struct.unpack_from("e", block, at[6])[0] == -2.0
    assert struct.unpack_from("d", block, at[7])[0] == 1 / 3
    assert block[at[8]] == 1 and block[at[9]] == 200
    assert block[72:] == bytes(16)


@pytest.mark.parametrize("signature, values, match", [
    (["*fp32", "i32"], (0,), "2 parameter types for 1 values"),
    (["nvTmaDesc"], (0,), "no native packing"),
    ([("i32", "i32")], ((1, 2),), "no native packing"),
])
def test_parameter_block_refuses_what_it_cannot_pack(signature, values, match):
    with pytest.raises(ValueError, match=match):
        N.parameter_block(signature, values)


def _compiled(signature, num_warps=4, shared=0, **meta):
    metadata = SimpleNamespace(num_warps=num_warps, shared=shared, num_ctas=1,
                               launch_cooperative_grid=False, launch_pdl=False,
                               global_scratch_size=0, profile_scratch_size=0, **meta)
    return SimpleNamespace(metadata=metadata, function=0,
                           src=SimpleNamespace(signature=dict(enumerate(signature))))


def _plan_for(native, monkeypatch, args, sources, dtype=None, n_outputs=1, rest=(5, 0.5)):
    """A native plan of a kernel taking ``len(sources)`` pointers, then ``rest``."""
    monkeypatch.setattr(N._State, "module", native)
    pointers = [(*args, *[args[0]] * n_outputs)[s].data_ptr() for s in sources]
    signature = ["*fp32"] * len(sources) + ["i32", "constexpr", "fp32"]
    return N.make_plan(_compiled(signature), (3, 1, 1), (*pointers, rest[0], 64, rest[1]),
                       tuple(sources), len(args), 0, dtype, n_outputs, 0)


def test_native_plan_packs_each_calls_addresses(native, monkeypatch):
    """Every pointer slot holds its tensor's address on each call (arguments by position,
    outputs freshly allocated like ``args[like]``), constants as packed once."""
    a, b = torch.randn(6, 10), torch.randn(6, 10)
    plan = _plan_for(native, monkeypatch, (a, None, b), [0, 2, 3, 3])
    c, d = torch.randn(6, 10), torch.randn(6, 10)
    out, block = native.packed(plan, (c, None, d))
    assert out.shape == c.shape and out.dtype == c.dtype and out.stride() == c.stride()
    assert struct.unpack_from("4Q", block) == (c.data_ptr(), d.data_ptr(), out.data_ptr(),
                                               out.data_ptr())
    assert struct.unpack_from("i", block, 32)[0] == 5 and struct.unpack_from("f", block, 40)[0] \
        == 0.5
    assert block[48:] == bytes(16)
    again, block2 = native.packed(plan, (d, None, c))
    assert struct.unpack_from("2Q", block2) == (d.data_ptr(), c.data_ptr())


def test_native_plan_outputs_take_the_plans_dtype_and_count(native, monkeypatch):
    a = torch.randn(4, 8).t()  # outputs keep the argument's strides, as empty_like does
    plan = _plan_for(native, monkeypatch, (a,), [0, 1, 2], dtype=torch.float64, n_outputs=2)
    (first, second), block = native.packed(plan, (a.clone().t().t(),))
    assert first.dtype == second.dtype == torch.float64 and first.stride() == a.stride()
    assert struct.unpack_from("3Q", block)[1:] == (first.data_ptr(), second.data_ptr())


def test_native_plan_of_no_outputs_shifts_addresses_and_returns_its_argument(native,
                                                                             monkeypatch):
    """A plan writing into its arguments: each pointer its argument's address plus its shift,
    no allocation, the call's result the very argument ``args[like]``; the alignment checked is
    the shifted address's."""
    monkeypatch.setattr(N._State, "module", native)
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    sources, shifts = (1, 0, 1), (0, 16, 4)
    pointers = [(a, b)[s].data_ptr() + k for s, k in zip(sources, shifts)]
    signature = ["*fp32"] * 3 + ["i32"]
    plan = N.make_plan(_compiled(signature), (2, 1, 1), (*pointers, 3), sources, 2, 1, None, 0,
                       0, shifts)
    c, d = torch.randn(4, 8), torch.randn(4, 8)
    out, block = native.packed(plan, (c, d))
    assert out is d
    assert struct.unpack_from("3Q", block) == (d.data_ptr(), c.data_ptr() + 16, d.data_ptr() + 4)
    buffer = torch.randn(40)
    _, block = native.packed(plan, (c, buffer[1:33].view(4, 8)))  # d + 4 bytes aligned now
    assert block is None
    with pytest.raises(ValueError, match="inconsistent"):
        N.make_plan(_compiled(signature), (2, 1, 1), (*pointers, 3), sources, 2, 1, None, 0, 0,
                    shifts[:2])
    with pytest.raises(ValueError, match="bounds"):
        N.make_plan(_compiled(signature), (2, 1, 1), (*pointers, 3), sources, 2, 1, None, -1, 0)


def test_native_plan_declines_another_alignment_device_or_arity(native, monkeypatch):
    """An address whose 16-byte alignment differs from the compiled kernel's gives no block
    (the caller falls back to Triton's launcher, which compiles for it); a call from another
    device, or without a driver, launches nothing; a wrong argument count raises."""
    buffer = torch.randn(64)
    a = buffer[:32].view(4, 8)
    plan = _plan_for(native, monkeypatch, (a,), [0, 1])
    _, block = native.packed(plan, (buffer[1:33].view(4, 8),))
    assert block is None
    assert native.run(plan, (a,), 1, 0) is None
    if not native.has_driver():
        assert native.run(plan, (a,), 0, 0) is None
    with pytest.raises(TypeError, match="tuple of arguments"):
        native.packed(plan, (a, a))


def test_make_plan_refuses_kernels_the_native_launch_lacks(native, monkeypatch):
    monkeypatch.setattr(N._State, "module", native)
    x = torch.randn(4)
    for meta in ({"num_ctas": 2}, {"global_scratch_size": 64}, {"launch_pdl": True}):
        compiled = _compiled(["*fp32", "*fp32"])
        vars(compiled.metadata).update(meta)
        assert N.make_plan(compiled, (1, 1, 1), (x.data_ptr(), x.data_ptr()), (0, 1), 1, 0,
                           None, 1, 0) is None
    constexpr_pointer = _compiled(["constexpr", "*fp32"])
    assert N.make_plan(constexpr_pointer, (1, 1, 1), (None, x.data_ptr()), (0, 1), 1, 0, None,
                       1, 0) is None


class _Job:
    """A launch that always launches directly, on a kernel of the pointers, two scratch
    pointers and an int."""
    def launch_pointers(self, pointers):
        return True

    def launch_values(self, pointers):
        signature = ["*fp32"] * (len(pointers) + 2) + ["i32"]
        return _compiled(signature), (1, 1, 1), (*pointers, pointers[-1], pointers[-1], 9)


def test_a_plan_goes_native_after_its_first_direct_launch(native, monkeypatch):
    """The repeat that launched directly makes the native plan from that launch's compiled
    kernel, grid and values (the two scratch pointers are the last output's); later repeats
    are served by it, and by the Python path wherever it declines."""
    made, served = [], []

    def fake_run(plan, args, device, stream):
        served.append(plan)
        return "native" if len(served) == 1 else None

    monkeypatch.setattr(N, "ENABLED", True)
    monkeypatch.setattr(N._State, "module", native)
    monkeypatch.setattr(N, "make_plan", lambda *a: made.append(a) or "plan")
    monkeypatch.setattr(_plan.D, "_hooks_set", lambda: False)
    monkeypatch.setattr(_plan.D, "current_device", lambda: 0)
    monkeypatch.setattr(_plan.D, "_raw_stream", lambda device: 0)
    plan = _plan.Plan(_Job(), 0, None, 1, (0, 1, 2), False)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    assert plan.native is None and isinstance(plan((a, b)), torch.Tensor)
    assert plan.native == (native.run, "plan") and len(made) == 1
    compiled, grid, values, sources = made[0][:4]
    assert sources == (0, 1, 2, 2, 2) and values[:2] == (a.data_ptr(), b.data_ptr())
    plan.native = (fake_run, "plan")
    assert plan((b, a)) == "native"
    assert isinstance(plan((a, b)), torch.Tensor) and served == ["plan", "plan"]


def test_plans_never_go_native_where_it_is_off(monkeypatch):
    monkeypatch.setattr(N, "ENABLED", False)
    monkeypatch.setattr(N._State, "module", None)  # not loaded by an earlier test either
    assert _plan.Plan(None, 0, None, 1, (0,), False).native is False
    assert N.module() is None and N.status().startswith("off")


@pytest.fixture
def native_plans(monkeypatch):
    """An empty plan cache whose plans go native once the module is loaded."""
    if N.module(wait=True) is None:
        pytest.fail(f"the native module: {N.status()}")
    monkeypatch.setattr(_plan, "_PLANS", {})


def _repeats(call, n=4):
    for _ in range(n):
        result = call()
    return result


def _native_plans():
    return [p for plans in _plan._PLANS.values() for p in plans if p.native]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 100), (4096, 128), (33, 7)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=lambda lay: lay.name)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_native_repeats_equal_python_repeats(est, layout, shape, native_plans, monkeypatch):
    d = layout.apply(make_inputs(*shape, device="cuda", seed=5))

    def call():
        return est.call(P, d, time_dim=layout.time_dim)
    got = _repeats(call)
    assert _native_plans(), "no plan went native"
    monkeypatch.setattr(_plan, "_PLANS", {})
    monkeypatch.setattr(N, "ENABLED", False)
    want = _repeats(call)
    for g, w in zip(outputs(got), outputs(want)):
        assert g.dtype == w.dtype and g.stride() == w.stride() and torch.equal(g, w)
    for g, w in zip(outputs(got), outputs(est.call(ref, make_inputs(*shape, seed=5)))):
        assert_close(est.name, layout.back(g).cpu(), w, TOL[torch.float32])


@pytest.mark.gpu
def test_native_repeats_read_new_inputs_on_the_current_stream(native_plans):
    """Each repeat reads its own arguments, launched on the caller's stream (a side stream
    here, whose inputs are written just before the call with no synchronisation)."""
    d = make_inputs(2048, 64, device="cuda", seed=1)
    _repeats(lambda: P.compute_gae(d["r"], d["v"], d["term"]))
    assert _native_plans()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for seed in range(3):
            e = make_inputs(2048, 64, device="cuda", seed=10 + seed)
            r = d["r"].copy_(e["r"] * 3)
            got = P.compute_gae(r, d["v"], d["term"])
            want = ref.compute_gae(e["r"].cpu() * 3, d["v"].cpu(), d["term"].cpu())
            side.synchronize()
            assert_close("gae", got.cpu(), want, TOL[torch.float32])


@pytest.mark.gpu
def test_native_repeats_in_cuda_graphs(native_plans):
    """A native repeat captured in a CUDA graph replays on the inputs copied in."""
    d = make_inputs(1024, 96, device="cuda", seed=2)
    def call():
        return P.compute_discounted_returns(d["r"], d["term"], d["trunc"], 0.97, d["boot"])
    _repeats(call)
    assert _native_plans()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for seed in (3, 4):
        e = make_inputs(1024, 96, device="cuda", seed=seed)
        for k in ("r", "term", "trunc", "boot"):
            d[k].copy_(e[k])
        graph.replay()
        torch.cuda.synchronize()
        want = ref.compute_discounted_returns(e["r"].cpu(), e["term"].cpu(), e["trunc"].cpu(),
                                              0.97, e["boot"].cpu())
        assert_close("discounted", out.cpu(), want, TOL[torch.float32])


@pytest.mark.gpu
def test_misaligned_repeats_fall_back(native_plans):
    """A repeat whose address is not 16-byte aligned where the compiled kernel's was takes the
    Python path (and its own compile), with the right answer."""
    buffer = torch.randn(4097 * 128, device="cuda")
    d = make_inputs(4096, 128, device="cuda", seed=6)
    def call(r):
        return P.compute_discounted_returns(r, d["term"], gamma=0.9)
    _repeats(lambda: call(buffer[:4096 * 128].view(4096, 128)))
    assert _native_plans()
    shifted = buffer[1:4096 * 128 + 1].view(4096, 128)
    want = ref.compute_discounted_returns(shifted.cpu(), d["term"].cpu(), gamma=0.9)
    for _ in range(3):
        assert_close("discounted", call(shifted).cpu(), want, TOL[torch.float32])


def test_native_build_is_cached(native):
    """A second build of the same source, torch and Python finds the first's library."""
    path = N.build()
    stamp = path.stat().st_mtime_ns
    assert path == N.library_path() and native.__file__ == str(path)
    assert N.build() == path and path.stat().st_mtime_ns == stamp


@pytest.mark.gpu
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_native_repeats_never_synchronise(est, native_plans):
    d = make_inputs(64, 300, device="cuda")
    _repeats(lambda: est.call(P, d))
    assert _native_plans()
    torch.cuda.set_sync_debug_mode("error")
    try:
        est.call(P, d)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _site_with(native, monkeypatch, capacity=8):
    """An empty site and a native plan of one tensor argument and one optional one."""
    x = torch.zeros(2, 3)
    return native.site(capacity), _plan_for(native, monkeypatch, (x, None), [0, 2]), x


def test_site_finds_only_what_the_checks_would_not_distinguish(native, monkeypatch):
    """Scalars by exact type and value; tensors by exact type, shape, strides, dtype, device,
    requires_grad and dispatch keys under the thread's modes; None where None was."""
    site, plan, x = _site_with(native, monkeypatch)
    native.configure(_overrides(), None, lambda: 0, lambda device: 0)
    scalar_sets = [(1.0, -1), (True, -1), (1, -1), (1.0, 1), (1.0, True)]
    owners = [object() for _ in scalar_sets]
    for s, owner in zip(scalar_sets, owners):
        native.add(site, (x, None), s, False, (), owner, plan)
    for s, owner in zip(scalar_sets, owners):
        assert native.lookup(site, (x.clone(), None), s) is owner, s
    with torch.inference_mode():
        inference = torch.zeros(2, 3)
        assert native.lookup(site, (x, None), (1.0, -1)) is None  # the thread's keys
    tagged = x.as_subclass(type("Tagged", (torch.Tensor,), {}))
    for args in [(x.t(), None), (x.double(), None), (x[:1], None), (None, None), (x, x),
                 (x.clone().requires_grad_(), None), (tagged, None), (inference, None), (x,),
                 [x, None], (x.unsqueeze(0), None), (x.to(torch.int32), None)]:
        assert native.lookup(site, args, (1.0, -1)) is None
    for scalars in [(1.0, -1, 0), (2.0, -1), [1.0, -1], (1.0 + 1e-12, -1), ("1.0", -1)]:
        assert native.lookup(site, (x, None), scalars) is None
    with TorchDispatchMode():  # a Python mode sees the calls: never past it
        assert native.lookup(site, (x, None), (1.0, -1)) is None
    with L.force_prefetch(True):
        assert native.lookup(site, (x, None), (1.0, -1)) is None
    assert native.lookup(site, (x, None), (1.0, -1)) is owners[0]


def test_site_holds_grad_plans_out_of_grad_mode_and_words_aligned(native, monkeypatch):
    site, plan, x = _site_with(native, monkeypatch)
    native.configure(_overrides(), None, lambda: 0, lambda device: 0)
    wants = x.clone().requires_grad_()
    native.add(site, (wants, None), (), True, (0,), "grad", plan)
    assert native.lookup(site, (wants, None), ()) is None
    with torch.no_grad():
        assert native.lookup(site, (wants, None), ()) == "grad"
        buffer = torch.zeros(7, requires_grad=True)
        words_off = buffer[1:].view(2, 3)  # 4 bytes past an 8-byte boundary
        assert words_off.stride() == x.stride() and words_off.data_ptr() % 8 == 4
        assert native.lookup(site, (words_off, None), ()) is None


def test_site_keeps_the_newest_and_last_served(native, monkeypatch):
    site, plan, x = _site_with(native, monkeypatch, capacity=2)
    native.configure(_overrides(), None, lambda: 0, lambda device: 0)
    for name in ("a", "b"):
        native.add(site, (x, None), (name,), False, (), name, plan)
    assert native.lookup(site, (x, None), ("a",)) == "a"  # now first: "b" is the oldest
    native.add(site, (x, None), ("c",), False, (), "c", plan)
    assert native.size(site) == 2
    assert [native.lookup(site, (x, None), (n,)) for n in "abc"] == ["a", None, "c"]


def test_site_refuses_what_no_call_could_repeat(native, monkeypatch):
    site, plan, x = _site_with(native, monkeypatch)
    tagged = x.as_subclass(type("Tagged", (torch.Tensor,), {}))
    with pytest.raises(TypeError, match="argument 0 is neither None nor a plain tensor"):
        native.add(site, (tagged, None), (), False, (), None, plan)
    with pytest.raises(ValueError, match="words: 1 is not a present argument"):
        native.add(site, (x, None), (), False, (1,), None, plan)
    with pytest.raises(ValueError, match="tuple of arguments"):
        native.add(site, (x,), (), False, (), None, plan)
    with pytest.raises(ValueError, match="capacity"):
        native.site(0)
    assert native.size(site) == 0


def test_serve_checks_hooks_then_launches_on_the_current_device_and_stream(native,
                                                                           monkeypatch):
    """Launch hooks set (profilers): no plan is served and the device is not asked; otherwise
    the stream is the current device's, and a plan compiled for another device declines."""
    site, plan, x = _site_with(native, monkeypatch)  # compiled for device 0
    asked = []

    def device():
        asked.append("device")
        return 7

    def stream(index):
        asked.append(index)
        return 0

    native.add(site, (x, None), (), False, (), None, plan)
    hooked = SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[print]),
                             launch_exit_hook=None)
    native.configure(_overrides(), hooked, device, stream)
    assert native.serve(site, (x, None), ()) is None and not asked
    hooked.launch_enter_hook.calls.clear()  # an empty chain: unset
    native.configure(_overrides(), hooked, device, stream)
    assert native.serve(site, (x, None), ()) is None and asked == ["device", 7]
    with L.force_config(L.ScanConfig(1, 16, 1, 1)):
        assert native.serve(site, (x, None), ()) is None and len(asked) == 2

    def broken():
        raise RuntimeError("no device")

    native.configure(_overrides(), None, broken, stream)
    with pytest.raises(RuntimeError, match="no device"):
        native.serve(site, (x, None), ())


def test_native_plans_join_their_ops_site(native, monkeypatch):
    """The repeat that makes a plan native puts it in its op's site under the call's metadata
    and scalars; later calls find it there, and the Python plan serves where it declines."""
    make_plan = N.make_plan
    monkeypatch.setattr(N, "ENABLED", True)
    monkeypatch.setattr(N._State, "module", native)
    monkeypatch.setattr(N, "make_plan", lambda *a: make_plan(*a[:-1], 99))  # not this device
    monkeypatch.setattr(_plan.D, "_hooks_set", lambda: False)
    monkeypatch.setattr(_plan.D, "current_device", lambda: 0)
    monkeypatch.setattr(_plan.D, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(_plan, "_PLANS", {})
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    plan, found = _plan.lookup("op", (a, b), (0.5, -1))
    _plan._remember(found, lambda matches: _plan.Plan(_Job(), 0, None, 1, (0, 1, 2), False,
                                                      matches, ("op", (0.5, -1), ())))
    plan = _plan.lookup("op", (a, b), (0.5, -1))[0]
    assert plan((a, b)) is not None and plan.native and "op" in _plan._SITES
    site = _plan._SITES["op"].args[0]
    assert native.lookup(site, (b.clone(), a), (0.5, -1)) is plan
    assert native.lookup(site, (b.clone(), a), (0.5, 1)) is None
    assert _plan.repeat("op", (b, a), (0.5, -1)) is None  # compiled for device 99: declined
    out, key = _plan.planned("op", (b, a), (0.5, -1))
    assert isinstance(out, torch.Tensor) and out.shape == b.shape and key is not None
    _plan.clear()
    assert not _plan._SITES and not _plan._PLANS


def _overrides():
    return (L._FORCED_CONFIG, L._FORCED_PREFETCH, L._FORCED_WORDS, L._FORCED_ALIGNMENT,
            L._FORCED_WORD_LOADS)


def _served_by_sites(monkeypatch):
    """From now on a Python plan serving a call fails the test."""
    def refuse(plan, args):
        raise AssertionError("a Python plan served a call its native site should have")
    monkeypatch.setattr(_plan.Plan, "__call__", refuse)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=lambda lay: lay.name)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_sites_serve_repeats_on_new_tensors(est, layout, native_plans, monkeypatch):
    """Once native, a call on new tensors of the same metadata is found and launched in C++
    (no Python plan runs) and reads those tensors."""
    def inputs(seed):
        return layout.apply(make_inputs(300, 50, device="cuda", seed=seed))
    _repeats(lambda: est.call(P, inputs(8), time_dim=layout.time_dim))
    assert _plan._SITES, "no plan joined a site"
    _served_by_sites(monkeypatch)
    got = est.call(P, inputs(9), time_dim=layout.time_dim)
    for g, w in zip(outputs(got), outputs(est.call(ref, make_inputs(300, 50, seed=9)))):
        assert_close(est.name, layout.back(g).cpu(), w, TOL[torch.float32])


@pytest.mark.gpu
def test_sites_leave_grad_mode_and_overrides_to_the_python_path(native_plans, monkeypatch):
    """A plan recorded for arguments that require grad serves only under no_grad; under grad
    mode the registered op runs (outputs with a graph), and forced tiles take the full path."""
    d = make_inputs(256, 64, device="cuda", seed=3)
    r = d["r"].clone().requires_grad_()
    with torch.no_grad():
        _repeats(lambda: P.compute_gae(r, d["v"], d["term"]))
    assert _plan._SITES
    want = ref.compute_gae(d["r"].cpu(), d["v"].cpu(), d["term"].cpu())
    out = P.compute_gae(r, d["v"], d["term"])
    assert out.grad_fn is not None
    _served_by_sites(monkeypatch)
    with torch.no_grad():
        served = P.compute_gae(r, d["v"], d["term"])
        with L.force_config(L.ScanConfig(16, 64, 4, 64)):
            forced = P.compute_gae(r, d["v"], d["term"])
    for got in (out.detach(), served, forced):
        assert_close("gae", got.cpu(), want, TOL[torch.float32])


@pytest.mark.gpu
def test_sites_leave_hooked_launches_to_triton(native_plans):
    """With a Triton launch hook set (a profiler), repeats go through Triton's launcher, which
    calls the hook."""
    from paper_repro.kernels import _direct as D

    d = make_inputs(512, 32, device="cuda", seed=4)
    _repeats(lambda: P.compute_discounted_returns(d["r"], d["term"], gamma=0.9))
    assert _plan._SITES
    seen = []
    chain = D._knobs.runtime.launch_enter_hook
    hook = seen.append
    chain.add(hook)
    try:
        got = P.compute_discounted_returns(d["r"], d["term"], gamma=0.9)
    finally:
        chain.remove(hook)
    assert seen, "the hook was not called"
    want = ref.compute_discounted_returns(d["r"].cpu(), d["term"].cpu(), gamma=0.9)
    assert_close("discounted", got.cpu(), want, TOL[torch.float32])


def test_native_outputs_repeat_empty_likes_layout(native, monkeypatch):
    """After the first call, outputs for a like-argument of the same layout are allocated
    without the dispatcher, with empty_like's sizes, strides, dtype and flags; another layout
    goes back through empty_like."""
    a = torch.randn(4, 8).t()
    plan = _plan_for(native, monkeypatch, (a,), [0, 1, 2], dtype=torch.float64, n_outputs=2)
    other = torch.randn(8, 4)
    for like in (a, a.clone(), other, a.clone(), a.clone()):
        want = torch.empty_like(like, dtype=torch.float64)
        outs, block = native.packed(plan, (like,))
        assert block is not None and outs[0].data_ptr() != outs[1].data_ptr()
        for out in outs:
            assert (out.shape, out.stride(), out.dtype, out.device) == \
                (want.shape, want.stride(), want.dtype, want.device)
            assert not out.requires_grad and out.storage_offset() == 0 and out.is_leaf
            assert out.untyped_storage().nbytes() == want.untyped_storage().nbytes()
    with torch.inference_mode():
        assert all(out.is_inference() for out in native.packed(plan, (a,))[0])
    assert not any(out.is_inference() for out in native.packed(plan, (a,))[0])


def test_serve_holds_its_plan_while_python_runs(native, monkeypatch):
    """The device and stream callables may run Python that replaces the site's entries (another
    thread could): the plan being served stays alive, and the call ends normally."""
    site, plan, x = _site_with(native, monkeypatch, capacity=1)
    native.add(site, (x, None), (), False, (), None, plan)

    def device():  # evicts the entry serve() found
        native.add(site, (x, None), ("other",), False, (), None,
                   _plan_for(native, monkeypatch, (x, None), [0, 2]))
        return 7  # not the plan's device: serve() declines after the launch check

    native.configure(_overrides(), None, device, lambda index: 0)
    del plan
    assert native.serve(site, (x, None), ()) is None
    assert native.size(site) == 1 and native.lookup(site, (x, None), ()) is None
