"""Test set-up: the Triton interpreter on machines without CUDA, seeds, tolerances, markers."""
import os

import torch

if not torch.cuda.is_available():
    # Must happen before triton is imported: kernels are then interpreted on the CPU.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from paper_repro.kernels import _launch as L  # noqa: E402

HAS_CUDA = torch.cuda.is_available()

# Tolerance per floating dtype, relative to max(1, |reference|) (fp32 accumulation for halves).
TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


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
