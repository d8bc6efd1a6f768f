"""Test set-up: the Triton interpreter on machines without CUDA, seeds, tolerances, markers."""
import os

import torch

if not torch.cuda.is_available():
    # Must happen before triton is imported: kernels are then interpreted on the CPU.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from paper_repro.kernels import _launch as L  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


def _patch_language_once_per_launch():
    """Triton's interpreter re-patches ``triton.language`` at every device-function call, half
    its time on these kernels; the launch's own patch is in place until it ends, so calls whose
    modules it covers skip theirs. Without the hooks this version expects, nothing changes."""
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter as interp

    if not all(hasattr(interp, n) for n in ("_patch_lang", "GridExecutor", "_LangPatchScope")):
        return
    patch_lang, run_grid, active = interp._patch_lang, interp.GridExecutor.__call__, set()

    def patch_once(fn):
        langs = {id(v) for v in fn.__globals__.values()
                 if inspect.ismodule(v) and v in (tl, tl.core)}
        if active and langs <= active:
            return interp._LangPatchScope()
        scope = patch_lang(fn)
        active.update(langs)
        return scope

    def run_grid_once(self, *args, **kwargs):
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            active.clear()

    interp._patch_lang, interp.GridExecutor.__call__ = patch_once, run_grid_once


if not HAS_CUDA:
    _patch_language_once_per_launch()

# Tolerance per floating dtype, relative to max(1, |reference|) (fp32 accumulation for halves).
TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.fixture(autouse=True)
def fresh_native_sites(monkeypatch):
    """No native site outlives its test: a site serves its plans whatever plan cache a test
    swaps in (``_plan._SITES``; empty wherever plans never go native)."""
    from paper_repro.kernels import _plan

    monkeypatch.setattr(_plan, "_SITES", {})


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


BACKENDS = ["cuda", "torch"] if HAS_CUDA else ["triton", "torch"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Where a test's kernels run: 'cuda' (GPU kernels), 'triton' (interpreter), 'torch'."""
    name = request.param
    if name == "torch":
        with L.cpu_backend("torch"):
            yield "torch"
    elif name == "triton":
        with L.cpu_backend("triton"):
            yield "triton"
    else:
        yield "cuda"


def device_of(backend):
    return "cuda" if backend == "cuda" else "cpu"


def assert_close(name, out, ref, tol):
    """Compare against a float64 reference; report the worst element on failure."""
    out64 = out.detach().double().cpu()
    ref64 = ref.detach().double().cpu()
    assert out64.shape == ref64.shape, f"{name}: shape {tuple(out64.shape)} vs {tuple(ref64.shape)}"
    assert torch.isfinite(out64).all(), f"{name}: non-finite output"
    scale = max(1.0, ref64.abs().max().item()) if ref64.numel() else 1.0
    err = (out64 - ref64).abs()
    worst = err.max().item() if err.numel() else 0.0
    if worst > tol * scale:
        idx = tuple(int(i) for i in torch.nonzero(err == err.max())[0])
        raise AssertionError(f"{name}: max abs error {worst:.3e} > {tol * scale:.3e} at {idx}: "
                             f"got {out64[idx].item():.8g}, want {ref64[idx].item():.8g}")


ENGINE_MODULES = ("affine_scan", "gae", "vtrace", "retrace", "lambda_returns",
                  "eligibility_traces")


def record_launches(monkeypatch, record) -> list:
    """A list that each engine launch (``affine_scan.Launch``, as every estimator's module
    holds it) appends ``record(launch)`` to as it runs; every call launches (no kept plan)."""
    from paper_repro.kernels import _plan
    from paper_repro.kernels import affine_scan as S

    seen = []

    class Recorded(S.Launch):
        __slots__ = ()

        def __call__(self, pointers):
            seen.append(record(self))
            return super().__call__(pointers)

    for name in ENGINE_MODULES:
        monkeypatch.setattr(f"paper_repro.kernels.{name}.Launch", Recorded, raising=False)
    monkeypatch.setattr(_plan, "lookup", lambda *a, **k: (None, None))
    return seen
