"""``paper_repro.brax_compat.compute_gae`` against Brax's PPO advantage, written here from its
update rule in float64: time-major ``[T, B]``, truncated steps masked out."""
import pytest
import torch
from conftest import TOL, assert_close, device_of

from paper_repro.brax_compat import compute_gae


def transitions(T, B, seed, device, dtype=torch.float32):
    """Brax's rollout: ends of which half are truncations (never both flags at a step), with
    truncations forced at the first and the last step of row 0."""
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    boot = torch.randn(B, generator=g)
    ended = torch.rand(T, B, generator=g) < 0.15
    trunc = ended & (torch.rand(T, B, generator=g) < 0.5)
    trunc[0, 0] = trunc[-1, 0] = True
    term = ended & ~trunc
    return [x.to(device, dtype) for x in (trunc, term, r, v, boot)]


def brax_loop(truncation, termination, rewards, values, bootstrap_value, lam, discount):
    """Brax's ``compute_gae``: TD errors masked at truncations, the trace cut there; the
    advantage bootstraps from the next target ``vs_{t+1}``."""
    tr, te, r, v, b = (x.double().cpu() for x in (truncation, termination, rewards, values,
                                                  bootstrap_value))
    keep = 1 - tr
    v_next = torch.cat([v[1:], b[None]])
    delta = (r + discount * (1 - te) * v_next - v) * keep
    acc, diff = torch.zeros_like(b), torch.empty_like(v)
    for t in range(v.shape[0] - 1, -1, -1):
        acc = delta[t] + discount * (1 - te[t]) * keep[t] * lam * acc
        diff[t] = acc
    vs = diff + v
    vs_next = torch.cat([vs[1:], b[None]])
    return vs, (r + discount * (1 - te) * vs_next - v) * keep


@pytest.mark.parametrize("T, B, lam", [(64, 6, 0.95), (37, 3, 1.0), (1, 4, 0.9), (200, 2, 0.8),
                                     (50, 1, 0.95), (4500, 2, 0.95)])
def test_matches_brax_loop(backend, T, B, lam):
    x = transitions(T, B, T, device_of(backend))
    want_vs, want_adv = brax_loop(*x, lam, 0.99)
    vs, adv = compute_gae(*x, lambda_=lam, discount=0.99)
    assert_close("vs", vs, want_vs, TOL[torch.float32])
    assert_close("advantages", adv, want_adv, TOL[torch.float32])


def test_truncated_steps_are_dropped():
    """At a truncation the target is the value and the advantage zero, whatever the reward."""
    trunc, term, r, v, boot = transitions(30, 4, 7, "cpu")
    vs, adv = compute_gae(trunc, term, r, v, boot, 0.95, 0.99)
    at = trunc.bool()
    assert at.any()
    assert torch.equal(vs[at], v[at]) and (adv[at] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes(dtype):
    x = transitions(48, 3, 2, "cpu", dtype)
    for got, want in zip(compute_gae(*x, 0.9, 0.97), brax_loop(*x, 0.9, 0.97)):
        assert got.dtype == dtype
        assert_close("brax", got, want, TOL[dtype])


def test_bool_flags():
    x = transitions(20, 3, 3, "cpu")
    as_bool = [x[0].bool(), x[1].bool(), *x[2:]]
    for got, want in zip(compute_gae(*as_bool, 0.95, 0.99), compute_gae(*x, 0.95, 0.99)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("change, match", [
    (lambda x: x.__setitem__(2, x[2][None]), "rewards must be \\[T, B\\]"),
    (lambda x: x.__setitem__(4, x[4][:-1]), "bootstrap_value must have shape"),
    (lambda x: x.__setitem__(0, x[0][:-1]), "truncation must have shape"),
    (lambda x: x.__setitem__(3, x[3].long()), "values must be float16"),
])
def test_bad_input_is_named(change, match):
    x = transitions(8, 2, 5, "cpu")
    change(x)
    with pytest.raises((TypeError, ValueError), match=match):
        compute_gae(*x)


def test_compile_fullgraph():
    x = transitions(30, 3, 8, "cuda" if torch.cuda.is_available() else "cpu")
    torch._dynamo.reset()
    got = torch.compile(compute_gae, fullgraph=True)(*x, 0.95, 0.99)
    for g, w in zip(got, brax_loop(*x, 0.95, 0.99)):
        assert_close("compiled", g, w, TOL[torch.float32])


def test_bad_scalar_is_named():
    with pytest.raises(TypeError, match="discount must be a real number"):
        compute_gae(*transitions(8, 2, 5, "cpu"), 0.95, "0.99")
