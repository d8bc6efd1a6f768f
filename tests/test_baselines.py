"""The vectorised torch baselines and the peer adapters against the float64 reference."""
import numpy as np
import pytest
import torch

from paper_repro.baselines import reference as ref
from paper_repro.baselines import torch_ops as ops
from paper_repro.bench.inputs import ALGORITHMS, TRUNCATION_ALGORITHMS, make_case

KINDS = ["doubling", "loop", "numpy"] + (["assoc_scan"] if ops.ASSOC_SCAN_AVAILABLE else [])
CASES = [(a, v) for a in ALGORITHMS for v in ("plain", "trunc")
         if v == "plain" or a in TRUNCATION_ALGORITHMS]


def _as_tuple(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def _check(name, got, expected, tol=1e-4):
    assert len(_as_tuple(got)) >= len(_as_tuple(expected)), f"{name}: too few outputs"
    for g, e in zip(_as_tuple(got), _as_tuple(expected), strict=False):
        g = torch.as_tensor(np.asarray(g) if not torch.is_tensor(g) else g).double()
        assert torch.isfinite(g).all(), f"{name}: non-finite output"
        err = (g - e).abs().max().item()
        assert err < tol * max(1.0, e.abs().max().item()), f"{name}: max error {err:.3g}"


def _call(kind, case):
    fn = getattr(ops, f"{case.algorithm}_{kind}")
    if kind == "numpy":
        def to_np(x):
            return x.numpy() if torch.is_tensor(x) else x
        return fn(*map(to_np, case.args), **{k: to_np(v) for k, v in case.kwargs.items()})
    return fn(*case.args, **case.kwargs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("algorithm,variant", CASES)
@pytest.mark.parametrize("seq_len", [1, 5, 64, 129])
def test_baseline_matches_reference(kind, algorithm, variant, seq_len):
    case = make_case(algorithm, 6, seq_len, variant)
    expected = getattr(ref, case.public_name)(*case.args, **case.kwargs)
    _check(f"{algorithm}_{kind}", _call(kind, case), expected)


@pytest.mark.parametrize("reverse", [True, False])
@pytest.mark.parametrize("seq_len", [1, 2, 7, 8, 100])
def test_doubling_scan_is_the_recurrence(reverse, seq_len):
    alpha, beta = torch.randn(3, seq_len), torch.rand(3, seq_len)
    recurrence = ref.backward_recurrence if reverse else ref.forward_recurrence
    expected = recurrence(alpha.double(), beta.double(), torch.zeros(3, dtype=torch.float64))
    _check("doubling_scan", ops.doubling_scan(alpha, beta, reverse=reverse), expected, 1e-5)


@pytest.mark.parametrize("kwargs", [{}, {"last_value": "L"}, {"bootstrap_values": "B"}])
def test_gae_loop_window_value(kwargs):
    r, v = torch.randn(4, 33), torch.randn(4, 33)
    term = (torch.rand(4, 33) < 0.1).float()
    extra = {k: (torch.randn(4) if s == "L" else torch.randn(4, 33)) for k, s in kwargs.items()}
    _check("gae_loop", ops.gae_loop(r, v, term, **extra), ref.compute_gae(r, v, term, **extra))


def test_carries_and_seeds():
    case = make_case("lambda_returns", 5, 40, "trunc")
    for kind in ("doubling", "loop"):
        _check(kind, _call(kind, case), ref.compute_lambda_returns(*case.args, **case.kwargs))
    g, d = torch.randn(5, 40), (torch.rand(5, 40) < 0.1).float()
    seed = torch.randn(5)
    for kind in KINDS[:2]:
        fn = getattr(ops, f"eligibility_traces_{kind}")
        _check(kind, fn(g, d, 0.9, 0.8, seed_values=seed),
               ref.compute_eligibility_traces(g, d, 0.9, 0.8, seed_values=seed))
        fn = getattr(ops, f"prefix_sum_{kind}")
        _check(kind, fn(g, d, seed, "starts_at"),
               ref.compute_episodic_prefix_sum(g, d, seed, "starts_at"))


def test_compile_fresh_doubling_is_correct():
    case = make_case("gae", 8, 48)
    compiled = ops.compile_fresh(ops.gae_doubling)
    _check("compiled gae_doubling", compiled(*case.args),
           ref.compute_gae(*case.args, **case.kwargs))


def test_every_estimator_has_every_kind():
    for algorithm in ALGORITHMS:
        for kind in ("doubling", "loop", "numpy", "assoc_scan"):
            fn = getattr(ops, f"{algorithm}_{kind}")
            assert fn is not None or (kind == "assoc_scan" and not ops.ASSOC_SCAN_AVAILABLE)


@pytest.mark.parametrize("vectorized", [True, False])
@pytest.mark.parametrize("algorithm,variant", [c for c in CASES if c[0] in
                                               ("gae", "vtrace", "lambda_returns",
                                                "discounted_returns")])
def test_torchrl_adapter_matches_reference(algorithm, variant, vectorized):
    from paper_repro.baselines import external

    assert not external.torchrl_unavailable(), "torchrl is a test dependency"
    case = make_case(algorithm, 4, 70, variant)
    call, outputs = external.torchrl_prepare(case, vectorized=vectorized)
    expected = getattr(ref, case.public_name)(*case.args, **case.kwargs)
    tol = 1e-3 if vectorized else 1e-4
    _check(f"torchrl {algorithm}", outputs(call()), expected, tol)
