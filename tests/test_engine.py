"""The bare engine ``affine_scan`` against sequential float64 loops."""
import pytest
import torch
from conftest import TOL, assert_close, device_of

import paper_repro as P
from paper_repro.baselines.reference import backward_recurrence, forward_recurrence


@pytest.mark.parametrize("T", [1, 2, 63, 1000, 4097])
@pytest.mark.parametrize("reverse", [True, False])
def test_affine_scan(T, reverse, backend):
    dev = device_of(backend)
    a, b, c = torch.randn(5, T, device=dev), torch.rand(5, T, device=dev), torch.randn(5,
                                                                                       device=dev)
    loop = backward_recurrence if reverse else forward_recurrence
    want = loop(a.double().cpu(), b.double().cpu(), c.double().cpu())
    assert_close("scan", P.affine_scan(a, b, reverse=reverse, initial=c), want, TOL[torch.float32])
    zero = loop(a.double().cpu(), b.double().cpu(), torch.zeros(5, dtype=torch.float64))
    assert_close("scan0", P.affine_scan(a, b, reverse=reverse), zero, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_affine_scan_time_major_dtypes(dtype, backend):
    dev = device_of(backend)
    a = torch.randn(40, 3, 2, device=dev, dtype=dtype)
    b = torch.rand(40, 3, 2, device=dev, dtype=dtype)
    out = P.affine_scan(a, b, time_dim=0, reverse=False)
    assert out.dtype == dtype
    want = forward_recurrence(a.double().cpu().reshape(40, 6).t(), b.double().cpu().reshape(
        40, 6).t(), torch.zeros(6, dtype=torch.float64))
    assert_close("tm", out.reshape(40, 6).t(), want, TOL[dtype])


def test_affine_scan_large_prefix_small_suffix(backend):
    """A huge carried value followed by small terms keeps the small terms' precision."""
    dev = device_of(backend)
    a = torch.full((1, 300), 1e-3, device=dev)
    a[0, 0] = 1e4
    b = torch.ones(1, 300, device=dev)
    out = P.affine_scan(a, b, reverse=False)
    want = forward_recurrence(a.double().cpu(), b.double().cpu(), torch.zeros(1,
                                                                              dtype=torch.float64))
    assert_close("prefix", out, want, 1e-6)
