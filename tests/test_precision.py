"""The mixed-precision study (paper_repro/precision.py): documented error bounds on CPU at
small T, the float64 path against the sequential loops, the bound helper's power to fail,
the CLI's tidy output, and every committed measurement against the bounds."""
import csv
import json
import math

import pytest
import torch
from conftest import device_of

import paper_repro as P
from paper_repro import paths
from paper_repro import precision as Q
from paper_repro.baselines import reference
from paper_repro.kernels import _launch as L

NAMES = list(Q.ESTIMATORS)
DTYPES = pytest.mark.parametrize("dtype", list(Q.DTYPES))


def study_inputs(T, inputs, device, seed=Q.SEED):
    return Q.prefix(Q.make_inputs(Q.NUM_ROWS, T, inputs, seed), T, device)


def lengths(backend):
    # The interpreter is slow: one tile and two tiles there; up to 4096 on the torch path.
    return (64, 700) if backend == "triton" else (64, 4096)


@pytest.mark.parametrize("inputs", Q.INPUTS)
@pytest.mark.parametrize("name", NAMES)
def test_float64_path_is_exact(backend, name, inputs):
    """The float64 path (the study's long-T reference) equals the float64 loops."""
    x = study_inputs(300, inputs, device_of(backend))
    got = Q.run(P, name, x)
    want = Q.run(reference, name, {k: v.cpu() for k, v in x.items()})
    for output, ref in want.items():
        assert got[output].dtype == torch.float64
        assert Q.errors(got[output].cpu(), ref)["max_rel"] < 1e-13, output


@DTYPES
@pytest.mark.parametrize("inputs", Q.INPUTS)
@pytest.mark.parametrize("name", NAMES)
def test_error_within_documented_bound(backend, name, inputs, dtype):
    """max |out - ref| / max |ref| <= a u(dtype) + 4 u(fp32) horizon, against the float64
    result of the same rounded inputs and of the unrounded inputs."""
    for T in lengths(backend):
        x = study_inputs(T, inputs, device_of(backend))
        low = Q.cast(x, Q.DTYPES[dtype])
        got = Q.run(P, name, low)
        with L.cpu_backend("torch"):  # float64 references: exact (test_float64_path_is_exact)
            refs = {"rounded": Q.run(P, name, Q.cast(low, torch.float64)),
                    "unrounded": Q.run(P, name, x)}
        for output, out in got.items():
            assert out.dtype == Q.DTYPES[dtype]
            for against, ref in refs.items():
                ok, rel = Q.within_bound(out, ref[output], dtype, against, output, T)
                assert ok, (output, against, T, rel, Q.bound(dtype, against, output, T))


@DTYPES
@pytest.mark.parametrize("against", ["rounded", "unrounded"])
def test_bound_rejects_corrupted_outputs(dtype, against):
    """The bound helper fails an output two bounds off at one element, an output on a grid
    8 bounds coarse (relative to each binade), and fp32 GAE computed with gamma off by 1e-4."""
    T, output = 256, "gae"
    x = study_inputs(T, "episodic", "cpu")
    with L.cpu_backend("torch"):
        ref = Q.run(P, "gae", x)[output]
        wrong_gamma = P.compute_gae(x["r"].float(), x["v"].float(), x["term"], x["trunc"],
                                    Q.GAMMA - 1e-4, Q.LAMBDA, x["boot"].float())
    limit = Q.bound(dtype, against, output, T)
    assert Q.within_bound(ref.to(Q.DTYPES[dtype]), ref, dtype, against, output, T)[0]
    spiked = ref.clone()
    spiked[1, 100] += 2 * limit * ref.abs().max()
    assert not Q.within_bound(spiked.to(Q.DTYPES[dtype]), ref, dtype, against, output, T)[0]
    step = 8 * limit * 2.0 ** torch.floor(torch.log2(ref.abs().clamp_min(1e-30)))
    coarse = torch.round(ref / step) * step
    assert not Q.within_bound(coarse, ref, dtype, against, output, T)[0]
    if dtype == "float32":
        assert not Q.within_bound(wrong_gamma, ref, dtype, against, output, T)[0]


def test_bound_shape():
    """The bound grows with the horizon, saturating at 1 / (1 - decay), except the prefix sum."""
    u32 = Q.UNIT_ROUNDOFF["float32"]
    assert Q.bound("float32", "rounded", "gae", 10**6) == pytest.approx(
        Q.B_ACC * u32 / (1 - Q.GAMMA * Q.LAMBDA))
    assert Q.bound("float32", "rounded", "gae", 4) == pytest.approx(Q.B_ACC * u32 * 4)
    assert Q.bound("bfloat16", "unrounded", "discounted_returns", 10**6) == pytest.approx(
        6 * 2.0**-8 + Q.B_ACC * u32 * 100)
    assert Q.horizon("prefix_sum", 1000) == 1000
    assert Q.horizon("vtrace_advantages", 10**6) == pytest.approx(100)


def test_errors_metrics():
    ref = torch.tensor([[2.0, -4.0, 1.0, 0.0]], dtype=torch.float64)
    out = (ref + torch.tensor([[0.0, 0.5, 0.0, -0.5]], dtype=torch.float64)).float()
    e = Q.errors(out, ref)
    assert e == pytest.approx({"max_abs": 0.5, "max_rel": 0.125, "rms": math.sqrt(0.125)})


def test_seq_lens():
    assert Q.seq_lens(10**6) == [16, 64, 256, 1024, 4096, 16384, 65536, 262144, 10**6]
    assert Q.seq_lens(10**6, quick=True) == [16, 256, 4096, 65536, 10**6]
    assert Q.seq_lens(4096, quick=True) == [16, 256, 4096]
    assert Q.seq_lens(16) == [16]


def test_inputs():
    """5 % terminations and 5 % truncations, disjoint; none for continuing inputs; the
    window value at T-1; prefixes of one draw."""
    x = Q.make_inputs(8, 20000, "episodic")
    assert not (x["term"] & x["trunc"]).any()
    for flag in ("term", "trunc"):
        assert abs(x[flag].double().mean().item() - 0.05) < 0.005
    c = Q.make_inputs(8, 500, "continuing")
    assert not c["done"].any()
    y = Q.prefix(x, 100, "cpu")
    assert torch.equal(y["boot"][:, -1], x["window"])
    assert torch.equal(y["r"], x["r"][:, :100])
    with pytest.raises(ValueError, match="inputs"):
        Q.make_inputs(2, 4, "sometimes")


def test_cli_writes_tidy_csv_and_provenance(tmp_path):
    with L.cpu_backend("torch"):
        Q.main(["--out", str(tmp_path), "--max-T", "64", "--quick", "--device", "cpu"])
    with open(tmp_path / "precision.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == Q.COLUMNS
    assert {r["estimator"] for r in rows} == set(Q.OUTPUTS)
    assert {r["dtype"] for r in rows} == {"bfloat16", "float16", "float32", "float64"}
    assert {int(r["seq_len"]) for r in rows} == {16, 64}
    assert {r["inputs"] for r in rows} == set(Q.INPUTS)
    assert all(math.isfinite(float(r["value"])) for r in rows)
    keys = {(r["estimator"], r["dtype"], r["seq_len"], r["inputs"], r["metric"]) for r in rows}
    assert len(keys) == len(rows)
    meta = json.loads((tmp_path / "precision.json").read_text())
    assert meta["command"].endswith("--max-T 64 --quick --device cpu")
    assert meta["device"] == "cpu" and meta["cpu_path"] == "torch"
    assert {"torch", "triton", "date", "git_commit"} <= set(meta)


def committed():
    return sorted(paths.DATA.glob("*/precision.csv"))


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.parent.name)
def test_committed_data_within_bounds(path):
    """Every measurement in data/<machine>/precision.csv respects the documented bounds, and
    the float64 path matched the loops there."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert rows
    checked = 0
    for r in rows:
        stat, _, against = r["metric"].partition("_vs_")
        value, T = float(r["value"]), int(r["seq_len"])
        if stat == "max_rel" and against in ("rounded", "unrounded"):
            limit = Q.bound(r["dtype"], against, r["estimator"], T)
            assert value <= limit, (r, limit)
            checked += 1
        elif stat == "max_rel" and against == "loop":
            assert value < 1e-13, r
    assert checked >= len(Q.OUTPUTS) * len(Q.DTYPES) * 2
