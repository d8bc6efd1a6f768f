"""``paper_repro.envpool_compat.compute_gae`` against EnvPool's asynchronous GAE, written here
from its update rule in float64: slots of scattered envs, each env's steps in slot order."""
import pytest
import torch
from conftest import TOL, assert_close, device_of

from paper_repro.envpool_compat import compute_gae


def async_buffer(T, B, envs, seed, device, dtype=torch.float32):
    """Each row holds B distinct envs out of ``envs``, drawn afresh, as async ``recv`` gives."""
    g = torch.Generator().manual_seed(seed)
    env_id = torch.stack([torch.randperm(envs, generator=g)[:B] for _ in range(T)])
    value, reward = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    done = torch.rand(T, B, generator=g) < 0.1
    return (value.to(device, dtype), reward.to(device, dtype), done.to(device),
            env_id.to(device))


def envpool_loop(gamma, lam, value, reward, done, env_id):
    """EnvPool's loop: walk the slots backwards keeping each env's next value and advantage."""
    v, r = value.double().cpu(), reward.double().cpu()
    d, ids = done.cpu(), env_id.cpu()
    adv, mask = torch.zeros_like(v), torch.zeros_like(v)
    next_value, next_adv, seen = {}, {}, set()
    for t in range(v.shape[0] - 1, -1, -1):
        for b in range(v.shape[1]):
            e, live = int(ids[t, b]), 0.0 if d[t, b] else 1.0
            adv[t, b] = r[t, b] - v[t, b] + gamma * live * next_value.get(e, 0.0) + \
                gamma * lam * live * next_adv.get(e, 0.0)
            mask[t, b] = 1.0 if d[t, b] or e in seen else 0.0
            next_value[e], next_adv[e] = v[t, b], adv[t, b]
            seen.add(e)
    return adv + v, adv, mask


@pytest.mark.parametrize("T, B, envs", [(16, 4, 6), (33, 8, 8), (1, 3, 5), (40, 1, 3),
                                        (300, 16, 20)])
def test_matches_envpool_loop(backend, T, B, envs):
    value, reward, done, env_id = async_buffer(T, B, envs, T, device_of(backend))
    want = envpool_loop(0.99, 0.95, value, reward, done, env_id)
    got = compute_gae(0.99, 0.95, value, reward, done, env_id, envs)
    for name, g, w in zip(("returns", "advantages", "mask"), got, want):
        assert_close(name, g, w, TOL[torch.float32])


def test_synchronous_buffer_is_plain_gae():
    """env_id[t, b] = b: every env in every row, so it is GAE per column with nothing after T."""
    import paper_repro as P

    value, reward, done, _ = async_buffer(24, 5, 5, 1, "cpu")
    env_id = torch.arange(5).expand(24, 5)
    _, adv, mask = compute_gae(0.97, 0.9, value, reward, done, env_id)
    ends = done.clone()
    ends[-1] = True
    want = P.compute_gae(reward, value, ends, None, 0.97, 0.9, time_dim=0)
    assert torch.allclose(adv, want, atol=1e-6)
    assert torch.equal(mask[-1].bool(), done[-1]) and mask[:-1].all()


def test_float64():
    x = async_buffer(20, 3, 4, 2, "cpu", torch.float64)
    for g, w in zip(compute_gae(0.9, 0.8, *x), envpool_loop(0.9, 0.8, *x)):
        assert g.dtype == torch.float64
        assert_close("envpool", g, w, TOL[torch.float64])


@pytest.mark.parametrize("change, match", [
    (lambda x: x.__setitem__(3, x[3].float()), "env_id must be an integer tensor"),
    (lambda x: x.__setitem__(3, x[3][:-1]), "env_id must have shape"),
    (lambda x: x.__setitem__(0, x[0][None]), "value must be \\[T, B\\]"),
    (lambda x: x.__setitem__(1, x[1].int()), "reward must be float16"),
])
def test_bad_input_is_named(change, match):
    x = list(async_buffer(6, 2, 3, 5, "cpu"))
    change(x)
    with pytest.raises((TypeError, ValueError), match=match):
        compute_gae(0.99, 0.95, *x)


def test_compile_fullgraph():
    x = async_buffer(20, 4, 6, 9, "cuda" if torch.cuda.is_available() else "cpu")
    torch._dynamo.reset()
    got = torch.compile(compute_gae, fullgraph=True)(0.99, 0.95, *x)
    for g, w in zip(got, envpool_loop(0.99, 0.95, *x)):
        assert_close("compiled", g, w, TOL[torch.float32])


def test_bad_scalar_is_named():
    with pytest.raises(TypeError, match="gae_lambda must be a real number"):
        compute_gae(0.99, None, *async_buffer(6, 2, 3, 5, "cpu"))
