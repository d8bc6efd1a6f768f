"""paper_repro.torchrl_compat against TorchRL's own functional estimators: same call, same
answer (its loop versions; its ``vec_`` versions cut a filter that ours does not)."""
import pytest
import torch
from conftest import TOL, assert_close, device_of
from test_torchrl import GAMMA, LAMBDA, episodes, on
from torchrl.objectives.value import functional as F

from paper_repro import torchrl_compat as C

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
TOLS = {torch.float32: TOL[torch.float32], torch.float64: 1e-12}


def features(d, width=3):
    """[N, T, 1] -> [N, T, width]: a trailing feature axis wider than one."""
    return {k: x.expand(*x.shape[:-1], width) * (1 + torch.arange(width, dtype=x.dtype))
            if x.dtype.is_floating_point else x.expand(*x.shape[:-1], width)
            for k, x in d.items()}


@DTYPES
@pytest.mark.parametrize("given", [False, True], ids=["done_only", "terminated"])
def test_gae(backend, dtype, given):
    d = episodes(3, 64, dtype)
    term = d["term"] if given else None
    want = F.generalized_advantage_estimate(GAMMA, LAMBDA, d["v"], d["nsv"], d["r"], d["done"],
                                            term)
    x = on(d, device_of(backend))
    got = C.generalized_advantage_estimate(GAMMA, LAMBDA, x["v"], x["nsv"], x["r"], x["done"],
                                           x["term"] if given else None)
    for name, g, w in zip(("advantage", "value_target"), got, want):
        assert_close(name, g, w, TOLS[dtype])
    assert C.vec_generalized_advantage_estimate is C.generalized_advantage_estimate


@DTYPES
def test_td_lambda(backend, dtype):
    d = episodes(3, 64, dtype, seed=1)
    want = F.td_lambda_return_estimate(GAMMA, LAMBDA, d["next_values"], d["r"], d["done"],
                                       d["term"])
    x = on(d, device_of(backend))
    got = C.td_lambda_return_estimate(GAMMA, LAMBDA, x["next_values"], x["r"], x["done"],
                                      x["term"])
    assert_close("td(lambda)", got, want, TOLS[dtype])


def test_td_lambda_per_step_gamma_and_lambda(backend):
    d = episodes(2, 40, torch.float64, seed=2)
    g = torch.Generator().manual_seed(3)
    gamma = 0.9 + 0.09 * torch.rand(d["r"].shape, generator=g, dtype=torch.float64)
    lmbda = torch.rand(d["r"].shape, generator=g, dtype=torch.float64)
    want = F.td_lambda_return_estimate(gamma, lmbda, d["next_values"], d["r"], d["done"],
                                       d["term"])
    x = on(dict(d, gamma=gamma, lmbda=lmbda), device_of(backend))
    got = C.td_lambda_return_estimate(x["gamma"], x["lmbda"], x["next_values"], x["r"],
                                      x["done"], x["term"])
    assert_close("td(lambda), per-step", got, want, 1e-12)
    with pytest.raises(ValueError, match="rolling_gamma=False"):
        C.td_lambda_return_estimate(x["gamma"], LAMBDA, x["next_values"], x["r"], x["done"],
                                    rolling_gamma=False)


@DTYPES
def test_vtrace(backend, dtype):
    d = episodes(3, 64, dtype, seed=4)
    want = F.vtrace_advantage_estimate(GAMMA, d["lpt"], d["lpb"], d["v"], d["nsv"], d["r"],
                                       d["done"], d["term"], 1.25, 0.875)
    x = on(d, device_of(backend))
    got = C.vtrace_advantage_estimate(GAMMA, x["lpt"], x["lpb"], x["v"], x["nsv"], x["r"],
                                      x["done"], x["term"], 1.25, 0.875)
    for name, g, w in zip(("advantage", "vs"), got, want):
        assert_close(name, g, w, TOLS[dtype])


def test_feature_axis_and_time_major(backend):
    """A trailing feature axis wider than one, and a [T, N, F] layout with time_dim=0."""
    d = features(episodes(2, 30, torch.float64, seed=5))
    want = F.generalized_advantage_estimate(GAMMA, LAMBDA, d["v"], d["nsv"], d["r"], d["done"],
                                            d["term"])[0]
    x = {k: v.transpose(0, 1) for k, v in on(d, device_of(backend)).items()}
    got = C.generalized_advantage_estimate(GAMMA, LAMBDA, x["v"], x["nsv"], x["r"], x["done"],
                                           x["term"], time_dim=0)[0]
    assert_close("gae [T, N, F]", got.transpose(0, 1), want, 1e-12)


def test_bad_input_names_the_argument():
    d = episodes(2, 10, torch.float32)
    with pytest.raises(ValueError, match=r"done must have shape"):
        C.generalized_advantage_estimate(GAMMA, LAMBDA, d["v"], d["nsv"], d["r"],
                                         d["done"][:, :5])
