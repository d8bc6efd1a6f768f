"""The direct launch of compiled kernels: its specialization key on any machine, and on the GPU
that every call after the first goes through it with results equal to the reference."""
import inspect

import pytest
import torch
import triton
import triton.language as tl
from conftest import TOL, assert_close
from estimators import ESTIMATORS, LAYOUTS, make_inputs, outputs
from triton.runtime.jit import JITFunction

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan

IDS = [e.name for e in ESTIMATORS]


def test_specialization_separates_what_triton_specializes_on():
    x = torch.zeros(64)
    key = D.specialization
    assert key([x]) != key([x[1:]])  # 16-byte aligned vs not
    assert key([x]) == key([x[4:]])  # 16 bytes further: still aligned
    assert key([x]) != key([x.double()])
    # ints by value: constexpr tile sizes are ints, and Triton's classes for dynamic ints
    # (== 1, % 16 == 0) would merge BLOCK_T=32 with BLOCK_T=64
    assert key([32]) != key([64]) and key([2]) != key([3]) and key([1]) != key([2])
    assert key([0.5]) == key([0.25])  # float values are not specialized on
    assert key([True]) != key([False]) and key([None]) == key([None])
    assert key([tl.float32]) != key([tl.float64])
    values = (x, x[1:], x.double(), 7, 0.5, True, None, tl.float32, 32)
    assert key(values, 3) == key(values)  # the engine's fast form: tensors first


def test_disabled_off_the_gpu_and_by_environment(monkeypatch):
    if not torch.cuda.is_available():
        assert not D.ENABLED  # interpreter or no GPU: every launch goes through Triton
    monkeypatch.setenv("PAPER_REPRO_DIRECT_LAUNCH", "0")
    assert not D._enabled()


@pytest.mark.gpu
def test_enabled_on_the_tested_triton():
    tested = D._triton_version() in D.TESTED_VERSIONS
    assert D.ENABLED is D._enabled() is (tested or D.os.environ.get(
        "PAPER_REPRO_DIRECT_LAUNCH") == "1"), triton.__version__


@pytest.fixture
def direct(monkeypatch):
    """The direct launch on, whatever the default for this Triton."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setattr(D, "ENABLED", True)
    monkeypatch.setattr(D, "_CACHE", {})
    monkeypatch.setattr(_plan, "_PLANS", {})


def _check(est, d, tol):
    for g, w in zip(outputs(est.call(P, d)), outputs(est.call(ref, d))):
        assert_close(est.name, g, w, tol)


@pytest.mark.gpu
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("N, T", [(1, 1), (3, 17), (64, 128), (16, 40_000)])
def test_second_call_skips_tritons_launcher(est, N, T, monkeypatch, direct):
    d = make_inputs(N, T, device="cuda")
    _check(est, d, 1e-4)  # compiles (through Triton) if this specialization is new
    monkeypatch.setattr(JITFunction, "run", _through_triton)
    _check(est, d, 1e-4)  # same specialization: only the direct launcher may run


def _through_triton(*args, **kwargs):
    pytest.fail("a repeated specialization went through Triton's launcher")


def test_hook_chains_count_as_set_only_when_non_empty():
    chain = type("Chain", (), {"calls": []})()
    assert not D._active(None) and not D._active(chain)
    chain.calls.append(print)
    assert D._active(chain) and D._active(print)


@pytest.mark.gpu
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_misaligned_views_get_their_own_kernel(est, direct):
    """A view starting one element in is not 16-byte aligned: a direct launch of the aligned
    kernel would read it with vector loads it does not allow."""
    wide = make_inputs(32, 201, device="cuda")
    aligned = {k: v if v is None or v.dim() < 2 else v[:, :200] for k, v in wide.items()}
    shifted = {k: v if v is None or v.dim() < 2 else v[:, 1:] for k, v in wide.items()}
    for d in (aligned, shifted, aligned, shifted):
        _check(est, d, 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=lambda lay: lay.name)
def test_dtypes_and_layouts_alternate(est, dtype, layout, direct):
    """Switching specializations back and forth never reuses the wrong compiled kernel."""
    for d in [make_inputs(48, 300, dtype=t, device="cuda") for t in (torch.float32, dtype)] * 2:
        want = outputs(est.call(ref, d))
        got = outputs(est.call(P, layout.apply(d), time_dim=layout.time_dim))
        for g, w in zip(got, want):
            assert_close(est.name, layout.back(g), w, TOL[d["r"].dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_shapes_alternate(est, direct):
    """Shapes whose dynamic ints fall in the same Triton classes but whose tiles differ: each
    must get its own kernel (a key without constexpr values reused BLOCK_T=32's for T=64)."""
    shapes = [(4096, 32), (4096, 64), (64, 128), (8192, 32), (8192, 64), (16384, 128),
              (4096, 8), (4096, 16), (1, 4096), (64, 8192)]
    for N, T in shapes + shapes[::-1]:
        _check(est, make_inputs(N, T, device="cuda", seed=N + T), 1e-4)


class _Compiled:
    """Stands in for a compiled kernel: remembers Triton's key for the call that compiled it
    and checks every later (direct) launch against Triton's key for that call. A launch plan's
    repeat passes addresses (ints) for tensors: each stands in as a tensor of the compiled
    dtype with that address's alignment (the plan's key fixes the dtypes)."""

    def __init__(self, truth, values):
        self.truth, self.spec, self.function, self.packed_metadata = (
            truth, truth(values), None, None)
        self.dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in values]
        self.hits = self.on_addresses = 0

    def _stand_in(self, dtype, value):
        if dtype is None or isinstance(value, torch.Tensor):
            return value
        assert type(value) is int, "a tensor argument launched as neither tensor nor address"
        block = torch.empty(16, dtype=dtype)
        return block if value % 16 == 0 else block[1:]

    @property
    def run(self):
        def launcher(gx, gy, gz, stream, function, metadata, lm, enter, leave, *values):
            self.on_addresses += type(values[0]) is int
            values = [self._stand_in(d, v) for d, v in zip(self.dtypes, values)]
            assert self.truth(values) == self.spec, "a direct launch reused another kernel"
            self.hits += 1
        return launcher


class _Kernel:
    """A kernel whose compile step returns a _Compiled keyed by Triton's own specializer."""

    def __init__(self, real, compiled):
        self.real, self.arg_names, self.fn, self.compiled = real, real.arg_names, real.fn, compiled

    def truth(self, values, num_warps=None):
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        params = inspect.signature(self.real.fn).parameters.values()
        return tuple(("constexpr", v) if p.annotation in (tl.constexpr, "tl.constexpr") else
                     native_specialize_impl(BaseBackend, v, False, True, True)
                     for p, v in zip(params, values))

    def __getitem__(self, grid):
        def compile_and_run(*values, num_warps):
            c = _Compiled(self.truth, values)
            self.compiled.append(c)
            return c
        return compile_and_run


def _drive_engine(monkeypatch, key):
    """Every estimator over shapes, dtypes, layouts and flags whose tiles differ only in
    constexprs, with the direct launch on and kernels replaced by _Kernel."""
    if not L.INTERPRETED:
        pytest.skip("drives the kernel wrappers on CPU tensors (TRITON_INTERPRET=1)")
    pytest.importorskip("triton._C.libtriton", reason="Triton's native specializer")
    compiled, proxies, real_run = [], {}, D.run

    def run(kernel, grid, num_warps, values, n_tensors=None, maxnreg=0):
        proxy = proxies.setdefault(id(kernel), _Kernel(kernel, compiled))
        return real_run(proxy, grid, num_warps, values, n_tensors, maxnreg)

    monkeypatch.setattr(D, "ENABLED", True)
    monkeypatch.setattr(D, "_CACHE", {})
    monkeypatch.setattr(_plan, "_PLANS", {})  # plans keep their launchers: start without
    monkeypatch.setattr(D, "_hooks_set", lambda: False)
    monkeypatch.setattr(D, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(D, "current_device", lambda: 0)
    monkeypatch.setattr(D, "specialization", key)
    monkeypatch.setattr(D, "run", run)
    for N, T in [(64, 32), (64, 64), (64, 128), (3, 17), (1, 1), (1, 4096), (40, 9), (40, 16)]:
        for dtype in (torch.float32, torch.bfloat16):
            d = make_inputs(N, T, dtype=dtype, seed=N * T)
            for est in ESTIMATORS:
                for layout in LAYOUTS[:2]:
                    est.call(P, layout.apply(d), time_dim=layout.time_dim)
                    est.call(P, layout.apply(d), time_dim=layout.time_dim)  # a repeat: direct
    return compiled


def test_direct_key_agrees_with_tritons_specializer(monkeypatch):
    """Every direct launch reuses a kernel that Triton's own specializer would also pick."""
    compiled = _drive_engine(monkeypatch, D.specialization)
    assert len(compiled) > 20 and sum(c.hits for c in compiled) > 100
    assert sum(c.on_addresses for c in compiled) > 100  # the plans' repeats


def test_the_agreement_check_can_fail(monkeypatch):
    """With ints keyed by Triton's dynamic-int classes (the first key), tile sizes collide."""
    def class_key(values, n_tensors=None):
        return tuple((v.dtype, v.data_ptr() & 15 == 0) if isinstance(v, torch.Tensor) else
                     (v == 1, v % 16 == 0) if type(v) is int else
                     float if type(v) is float else v for v in values)

    with pytest.raises(AssertionError, match="reused another kernel"):
        _drive_engine(monkeypatch, class_key)


def test_bound_launches_key_alignment_only(monkeypatch):
    """A launch plan's direct launches: compiled once per pointer alignment, then the cached
    launcher runs with the new pointers."""
    compiles, launched = [], []

    class Compiled:
        function, packed_metadata = "f", "m"

        def run(self, *args):
            launched.append(args[9:])

    class Kernel:
        arg_names = ("x", "y", "n")

        def __getitem__(self, grid):
            def compile_and_run(*values, num_warps):
                compiles.append(values)
                return Compiled()
            return compile_and_run

    monkeypatch.setattr(D, "ENABLED", True)
    monkeypatch.setattr(D, "_CACHE", {})
    monkeypatch.setattr(D, "_hooks_set", lambda: False)
    monkeypatch.setattr(D, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(D, "current_device", lambda: 0)
    kernel, cache, buf = Kernel(), {}, torch.zeros(64)
    a, b, shifted = buf[:8], buf[8:16], buf[1:9]
    D.run_bound(cache, kernel, (1,), 4, (a, a, 7), 2)
    D.run_bound(cache, kernel, (1,), 4, (b, b, 7), 2)
    assert len(compiles) == 1 and launched == [(b.data_ptr(), b.data_ptr(), 7)]
    D.run_bound(cache, kernel, (1,), 4, (shifted, b, 7), 2)  # misaligned: its own kernel
    D.run_bound(cache, kernel, (1,), 4, (shifted, a, 7), 2)
    assert len(compiles) == 2 and launched[1] == (shifted.data_ptr(), a.data_ptr(), 7)
    # a plan's repeat, on addresses: the launcher compiled for their alignment, or none yet
    assert D.launch_pointers(cache, (1, 1, 1), (a.data_ptr(), b.data_ptr()), (7,))
    assert D.launch_pointers(cache, (1, 1, 1), (b.data_ptr(), shifted.data_ptr()), (7,)) is False
    assert len(compiles) == 2 and launched[2] == (a.data_ptr(), b.data_ptr(), 7)


def test_the_c_launcher_is_called_where_no_scratch_is_needed():
    """Triton's Python launcher only allocates scratch memory: a kernel needing none is
    launched by its C launcher, with the arguments the Python launcher would add."""
    class Launcher:
        launch_cooperative_grid, launch_pdl = False, True
        global_scratch_size = profile_scratch_size = 0

        def launch(self, *args):
            pass

    compiled = type("Compiled", (), {"function": 5, "packed_metadata": (4, 1, 0)})()
    compiled.run = Launcher()
    fn, head, kept = D._entry(compiled)
    assert fn == compiled.run.launch and kept is compiled
    assert head == (5, False, True, None, None, (4, 1, 0), None, None, None)
    compiled.run.global_scratch_size = 256  # needs its scratch: Triton's launcher allocates it
    fn, head, kept = D._entry(compiled)
    assert fn is compiled.run and head == (5, (4, 1, 0), None, None, None) and kept is compiled


def test_register_caps_reach_the_compile_and_its_key(monkeypatch):
    """A tile's register cap (``ScanConfig.max_registers``) is passed to Triton as ``maxnreg``
    where set and compiled, never under the interpreter, and a capped compile is cached apart
    from an uncapped one."""
    seen = []

    class Kernel:
        arg_names = ("x",)

        def __getitem__(self, grid):
            return lambda *values, **options: seen.append(options)

    monkeypatch.setattr(D, "ENABLED", False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    D.run(Kernel(), (1,), 2, (0,), maxnreg=80)
    D.run(Kernel(), (1,), 2, (0,))
    assert seen == [{"num_warps": 2, "maxnreg": 80}, {"num_warps": 2}]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    D.run(Kernel(), (1,), 4, (0,), maxnreg=80)
    assert seen[-1] == {"num_warps": 4}
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(D, "ENABLED", True)
    monkeypatch.setattr(D, "_hooks_set", lambda: False)
    monkeypatch.setattr(D, "current_device", lambda: 0)
    monkeypatch.setattr(D, "_entry", lambda compiled: compiled)
    monkeypatch.setattr(D, "_CACHE", {})
    x = torch.zeros(4)
    D.run(Kernel(), (1,), 2, (x,), 1, maxnreg=80)
    D.run(Kernel(), (1,), 2, (x,), 1)
    assert len(D._CACHE) == 2 and seen[-2:] == [{"num_warps": 2, "maxnreg": 80},
                                                {"num_warps": 2}]


@pytest.mark.parametrize("tile", [L.ScanConfig(1, 64, 1, 64, True, 4, max_registers=80),
                                  L.ScanConfig(1, 64, 1, 256, False, 4, max_registers=80),
                                  L.ScanConfig(1, 64, 1, 1024, False, 4, max_registers=80)],
                         ids=["look-back", "two passes", "one pass"])
def test_launches_pass_their_tiles_register_cap(tile, monkeypatch):
    """Every launch (look-back, both passes, one pass) hands the forced tile's cap to ``run``,
    with results unchanged."""
    if not L.INTERPRETED:
        pytest.skip("needs the interpreter (TRITON_INTERPRET=1): CPU tensors through Triton")
    caps, run = [], D.run

    def spy(kernel, grid, num_warps, values, n_tensors=None, maxnreg=0):
        caps.append(maxnreg)
        return run(kernel, grid, num_warps, values, n_tensors, maxnreg)

    monkeypatch.setattr(D, "run", spy)
    g = torch.Generator().manual_seed(3)
    r = torch.randn(3, 1024, generator=g, dtype=torch.float64)
    d = (torch.rand(3, 1024, generator=g) < 0.05).double()
    with L.cpu_backend("triton"), L.force_config(tile):
        got = P.compute_discounted_returns(r, d, gamma=0.97)
    assert caps == [80] * (2 if tile.seg_len == 256 else 1)
    want = ref.compute_discounted_returns(r, d, gamma=0.97)
    assert_close("discounted returns", got, want, TOL[torch.float64])
