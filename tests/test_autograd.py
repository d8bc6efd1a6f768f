"""Gradients (adjoint scan on the engine + chain rule through the coefficients), torch.compile
with fullgraph=True, and a Dreamer-style actor loss through lambda-returns."""
import pytest
import torch
from conftest import BACKENDS, assert_close, device_of
from estimators import ESTIMATORS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref

IDS = [e.name for e in ESTIMATORS]
GRAD_KEYS = ("r", "v", "n", "lpt", "lpb", "boot", "last", "seed", "pi", "nq", "mu", "npi")


def leaves(d):
    return {k: (x.detach().clone().requires_grad_() if k in GRAD_KEYS and x is not None else x)
            for k, x in d.items()}


def used(d):
    return [x for k, x in d.items() if k in GRAD_KEYS and x is not None]


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_gradients_match_reference(est, backend):
    d = make_inputs(3, 9, dtype=torch.float64, device=device_of(backend))
    ours, theirs = leaves(d), {k: (None if x is None else x.detach().cpu()) for k, x in d.items()}
    theirs = leaves(theirs)
    weights = [torch.randn(3, 9, dtype=torch.float64) for _ in outputs(est.call(ref, theirs))]
    loss = sum((o.cpu() * w).sum() for o, w in zip(outputs(est.call(P, ours)), weights))
    want_loss = sum((o * w).sum() for o, w in zip(outputs(est.call(ref, theirs)), weights))
    got = torch.autograd.grad(loss, used(ours), allow_unused=True)
    want = torch.autograd.grad(want_loss, used(theirs), allow_unused=True)
    for name, g, w in zip([k for k in ours if k in GRAD_KEYS and ours[k] is not None], got,
                          want):
        g = torch.zeros_like(w) if (g is None and w is not None) else g
        if w is None:
            assert g is None or float(g.abs().max()) == 0.0, name
            continue
        assert_close(f"d{name}", g, w, 1e-9)


@pytest.mark.parametrize("est", [e for e in ESTIMATORS if e.name in (
    "gae", "vtrace", "retrace", "lambda_returns", "prefix_sum_ends_at")], ids=lambda e: e.name)
def test_gradcheck(est, backend):
    d = make_inputs(2, 6, dtype=torch.float64, device=device_of(backend))
    keys = [k for k in ("r", "v", "boot", "lpt", "nq", "seed") if d.get(k) is not None]

    def f(*xs):
        return outputs(est.call(P, dict(d, **dict(zip(keys, xs)))))

    # The interpreter's ~0.25 s a call: one random projection of the Jacobian, not all of it.
    assert torch.autograd.gradcheck(f, [d[k].clone().requires_grad_() for k in keys],
                                    fast_mode=backend == "triton")


def test_affine_scan_gradcheck(backend):
    dev = device_of(backend)
    a, b = torch.randn(2, 7, dtype=torch.float64, device=dev), torch.rand(2, 7, dtype=torch.float64,
                                                                          device=dev)
    c = torch.randn(2, dtype=torch.float64, device=dev)
    for reverse in (True, False):
        assert torch.autograd.gradcheck(
            lambda a, b, c, reverse=reverse: P.affine_scan(a, b, reverse=reverse, initial=c,
                                                            time_dim=0),
            [x.clone().requires_grad_() for x in (a.t().contiguous(), b.t().contiguous(), c)])


def test_dreamer_actor_loss(backend):
    """Backpropagate an actor loss through TD(lambda) returns into network parameters."""
    dev = device_of(backend)
    torch.manual_seed(1)
    obs = torch.randn(4, 16, 5, dtype=torch.float64, device=dev)
    net = torch.nn.Linear(5, 2, dtype=torch.float64, device=dev)

    def loss(fn):
        out = net(obs)
        rewards, values = out[..., 0], out[..., 1]
        term = torch.zeros_like(rewards)
        nxt = torch.cat([values[:, 1:], values[:, -1:]], 1)
        return -fn.compute_lambda_returns(rewards, nxt, term, None, 0.99, 0.95).sum()

    net.zero_grad()
    loss(P).backward()
    ours = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    loss(ref).backward()
    for g, w in zip(ours, [p.grad for p in net.parameters()]):
        assert_close("dtheta", g, w, 1e-9)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_compile_fullgraph(est):
    backend = BACKENDS[0]
    d = make_inputs(3, 20, device=device_of(backend))
    torch._dynamo.reset()
    compiled = torch.compile(lambda d: est.call(P, d), fullgraph=True)
    for g, w in zip(outputs(compiled(d)), outputs(est.call(P, d))):
        assert torch.equal(g, w)


def test_compile_with_gradients():
    d = make_inputs(3, 20, device=device_of(BACKENDS[0]))
    r = d["r"].clone().requires_grad_()
    torch._dynamo.reset()
    f = torch.compile(lambda r: P.compute_gae(r, d["v"], d["term"], d["trunc"]).square().sum(),
                      fullgraph=True)
    f(r).backward()
    want = torch.autograd.grad(P.compute_gae(r, d["v"], d["term"], d["trunc"]).square().sum(), r)
    assert_close("compiled grad", r.grad, want[0].double(), 1e-5)
