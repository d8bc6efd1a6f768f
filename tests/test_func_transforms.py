"""torch.func transforms over every estimator: grad, vjp and the forward mode (through an
autograd.Function, which a custom op's autograd does not offer them), vmap by the ops' batching
rule (the mapped axis a batch axis, no per-sample loop), their compositions and second
derivatives."""
import warnings

import pytest
import torch
from conftest import assert_close, device_of
from estimators import ESTIMATORS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref

IDS = [e.name for e in ESTIMATORS]
FIRST = {"gae": "v", "vtrace": "lpt", "retrace": "nq", "lambda_returns": "n",
         "discounted_returns": "r", "eligibility_traces": "r", "prefix_sum": "r"}


def differentiated(est):
    """The input a test differentiates: one that enters the estimator's coefficients."""
    return next(v for k, v in FIRST.items() if est.name.startswith(k))


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_grad_matches_autograd_through_the_reference(est, backend):
    d = make_inputs(3, 11, dtype=torch.float64, device=device_of(backend))
    key = differentiated(est)
    weights = [torch.randn(3, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
               for i in range(2)]

    def loss(module, x, data):
        outs = outputs(est.call(module, dict(data, **{key: x})))
        return sum((o.cpu() * w).sum() for o, w in zip(outs, weights))

    got = torch.func.grad(lambda x: loss(P, x, d))(d[key])
    cpu = {k: None if x is None else x.cpu() for k, x in d.items()}
    x = cpu[key].clone().requires_grad_()
    want = torch.autograd.grad(loss(ref, x, cpu), x)[0]
    assert_close(f"d{key}", got, want, 1e-9)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_jvp_matches_the_reference(est, backend):
    """Forward mode, tangents on two inputs at once (rewards and the estimator's own)."""
    d = make_inputs(3, 11, dtype=torch.float64, device=device_of(backend))
    keys = sorted({"r", differentiated(est)})
    g = torch.Generator().manual_seed(9)
    tangents = tuple(torch.randn(d[k].shape, generator=g, dtype=torch.float64) for k in keys)

    def call(module, data):
        return lambda *xs: outputs(est.call(module, dict(data, **dict(zip(keys, xs)))))

    _, got = torch.func.jvp(call(P, d), tuple(d[k] for k in keys),
                            tuple(t.to(d["r"].device) for t in tangents))
    cpu = {k: None if x is None else x.cpu() for k, x in d.items()}
    _, want = torch.func.jvp(call(ref, cpu), tuple(cpu[k] for k in keys), tangents)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_close(f"{est.name}[{i}]", a, b, 1e-9)


@pytest.mark.parametrize("mapped", ["values", "flags"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_vmap_is_the_batch_of_calls(est, mapped, backend):
    """vmap over a new leading axis of one input (the others shared), by the batching rule: no
    warning of torch's per-sample fallback."""
    device = device_of(backend)
    d = make_inputs(2, 13, device=device)
    key = differentiated(est) if mapped == "values" else "term"
    stack = torch.stack([make_inputs(2, 13, device=device, seed=s)[key] for s in range(3)])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*batching rule.*")
        got = torch.func.vmap(lambda x: outputs(est.call(P, dict(d, **{key: x}))))(stack)
    for i in range(3):
        want = outputs(est.call(P, dict(d, **{key: stack[i]})))
        for g, w in zip(got, want):
            assert_close(est.name, g[i], w.double(), 1e-6)


def test_vmap_of_mapped_per_row_and_time_major_inputs(backend):
    """Mapped axes other than the first, a per-row input mapped too, time on axis 0."""
    device = device_of(backend)
    d = make_inputs(4, 9, device=device)
    r = torch.stack([d["r"] * s for s in (1.0, 2.0)], 2).transpose(0, 1)  # [T, N, 2]
    last = torch.stack([d["last"], -d["last"]], 1)  # [N, 2]
    got = torch.func.vmap(lambda r, last: P.compute_gae(r, d["v"].t(), d["term"].t(), None, 0.9,
                                                         0.8, None, last, time_dim=0),
                          in_dims=(2, 1))(r, last)
    for i in range(2):
        want = P.compute_gae(r[..., i], d["v"].t(), d["term"].t(), None, 0.9, 0.8, None,
                             last[:, i].contiguous(), time_dim=0)
        assert_close("gae", got[i], want.double(), 1e-6)


def test_jacrev_and_second_derivatives(backend):
    device = device_of(backend)
    d = make_inputs(2, 7, dtype=torch.float64, device=device)

    def ours(v):
        return P.compute_gae(d["r"], v, d["term"], d["trunc"], 0.9, 0.8, d["boot"])

    cpu = {k: None if x is None else x.cpu() for k, x in d.items()}

    def theirs(v):
        return ref.compute_gae(cpu["r"], v, cpu["term"], cpu["trunc"], 0.9, 0.8, cpu["boot"])

    jac = torch.func.jacrev(ours)(d["v"])
    want = torch.autograd.functional.jacobian(theirs, cpu["v"])
    assert_close("jacobian", jac, want, 1e-9)
    assert_close("forward-mode jacobian", torch.func.jacfwd(ours)(d["v"]), want, 1e-9)
    hess = torch.func.grad(lambda v: torch.func.grad(lambda u: ours(u).pow(2).sum())(v).sum())(
        d["v"])
    v = cpu["v"].clone().requires_grad_()
    g = torch.autograd.grad(theirs(v).pow(2).sum(), v, create_graph=True)[0]
    assert_close("second derivative", hess, torch.autograd.grad(g.sum(), v)[0], 1e-9)
    per_sample = torch.func.vmap(torch.func.grad(lambda v: ours(v).pow(2).sum()))(
        d["v"].expand(3, 2, 7))
    assert_close("vmap of grad", per_sample[1], g, 1e-9)
