"""The look-back's scratch pairs (kernels/_links.py): each call finds its words zero, without a
fill on every call, across shape changes, settings, streams and CUDA-graph captures."""
import random

import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of
from estimators import ESTIMATORS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _links

KERNELS = [b for b in BACKENDS if b != "torch"]


@pytest.fixture
def fresh_pairs(monkeypatch):
    monkeypatch.delenv("PAPER_REPRO_LINK_FILL", raising=False)
    monkeypatch.setattr(_links, "_PAIRS", {})
    return _links._PAIRS


def test_pair_bookkeeping(fresh_pairs):
    """A random walk of sizes under the kernel's contract (a call may write any of its first
    ``n`` words and zeroes the spare's first ``n``): every call's words read zero, and the
    spare is a distinct buffer at least as long."""
    rng = random.Random(0)
    device = torch.device("cpu")
    for _ in range(400):
        n = rng.choice([1, 2, 7, 40, 41, 100, 333, rng.randint(1, 600)])
        with _links.links(device, torch.int32, n) as (words, spare):
            assert words.numel() >= n and spare.numel() >= n
            assert words.data_ptr() != spare.data_ptr()
            assert not words[:n].any(), f"stale words at n={n}"
            words[:n] = torch.randint(-3, 4, (n,), dtype=torch.int32)
            spare[:n] = 0
    assert len(fresh_pairs) == 1


def test_failed_launch_keeps_state(fresh_pairs):
    """A launch that raises does not advance the pair: the next call reads the same words."""
    device = torch.device("cpu")
    with _links.links(device, torch.int32, 8) as (words, _):
        first = words.data_ptr()
    with pytest.raises(RuntimeError), _links.links(device, torch.int32, 8) as (words, _):
        second = words.data_ptr()
        raise RuntimeError("compile failed")
    with _links.links(device, torch.int32, 8) as (words, _):
        assert words.data_ptr() == second != first


def test_fill_setting(fresh_pairs, monkeypatch):
    """``PAPER_REPRO_LINK_FILL=1``: every call takes fresh zeros, and no pair is kept."""
    monkeypatch.setenv("PAPER_REPRO_LINK_FILL", "1")
    with _links.links(torch.device("cpu"), torch.int64, 5) as (words, spare):
        assert not words.any() and not spare.any() and words.dtype == torch.int64
    assert not fresh_pairs


def test_capture_pairs(fresh_pairs, monkeypatch):
    """A capture's pair is its own: a stream's eager pair survives captures on it, and a new
    capture there replaces only the earlier capture's pair."""
    device = torch.device("cpu")
    eager = ("cpu", None, torch.int32, 5, None)
    for key in (eager, eager[:4] + (7,), eager[:4] + (8,)):
        monkeypatch.setattr(_links, "_key", lambda device, dtype, key=key: key)
        with _links.links(device, torch.int32, 4) as (words, _):
            assert not words[:4].any()
            words[:4] = 1
    assert set(fresh_pairs) == {eager, eager[:4] + (8,)}


def _nonzero_inside_dirty():
    """Every pair's nonzero words lie inside the interval it tracks for them."""
    for pair in _links._PAIRS.values():
        for buf, (lo, hi) in zip(pair.buffers, pair.dirty):
            if buf is None:
                continue
            where = buf.nonzero().flatten().cpu()
            assert ((where >= lo) & (where < hi)).all(), (lo, hi, where[:8])


SEQUENCE = [(3, 61), (1, 9), (2, 37), (3, 61), (1, 21), (2, 90)]


@pytest.mark.parametrize("est", ESTIMATORS, ids=[e.name for e in ESTIMATORS])
@pytest.mark.parametrize("kernels", KERNELS)
def test_look_back_across_shapes(est, kernels, fresh_pairs):
    """Look-backs of growing, shrinking and repeated sizes in a row (one-row and two-row tiles,
    fp32 and fp64) each match the reference, and the pairs' bookkeeping covers every word the
    kernels left nonzero."""
    device = device_of(kernels)
    for i, (n, t) in enumerate(SEQUENCE):
        block = 1 + i % 2
        config = L.ScanConfig(BLOCK_B=block, BLOCK_T=4, num_warps=1, seg_len=4, single_pass=True)
        dtype = torch.float64 if i == 3 else torch.float32
        d = make_inputs(n, t, dtype=dtype, device=device)
        with L.force_config(config):
            got = outputs(est.call(P, d))
        for g, w in zip(got, outputs(est.call(ref, d))):
            assert_close(f"{est.name} {n}x{t}", g, w, TOL[dtype])
        _nonzero_inside_dirty()
    assert fresh_pairs
