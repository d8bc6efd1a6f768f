"""SPEC.md worked examples, the paper library's fixed bugs (SPEC 6.2) and the identities."""
from dataclasses import replace

import pytest
import torch
from conftest import TOL, assert_close, device_of
from estimators import make_inputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels.retrace import unrolled_actions


def t(x, dev):
    return torch.tensor(x, dtype=torch.float32, device=dev).reshape(1, -1)


@pytest.fixture
def dev(backend):
    return device_of(backend)


def close(out, want, tol=1e-5):
    want = torch.as_tensor(want, dtype=torch.float64).reshape(out.shape)
    assert_close("value", out, want, tol)


# ------------------------------------------------------------------ SPEC 1.1 GAE

def test_gae_known_values(dev):
    z3 = torch.zeros(1, 3, device=dev)
    # B-1: the window bootstrap enters once ([10, 9, 7] was the double count).
    close(P.compute_gae(t([1, 2, 3], dev), z3, z3, gamma=1.0, lambda_=1.0,
                        last_value=torch.tensor([2.0], device=dev)), [8, 7, 5])
    r, v = t([1, 1, 1, 1], dev), t([0.5] * 4, dev)
    trunc, b = t([0, 1, 0, 0], dev), t([0, 10, 0, 5], dev)
    close(P.compute_gae(r, v, torch.zeros_like(r), trunc, 0.9, 0.8, b), [7.79, 9.5, 4.55, 5.0])
    close(P.compute_gae(r, v, t([0, 0, 1, 0], dev), trunc, 0.9, 0.8, b), [7.79, 9.5, 0.5, 5.0])
    close(P.compute_gae(t([1, 2], dev), t([0.5, 0.5], dev), t([0, 1], dev), gamma=0.9,
                        lambda_=0.8, last_value=torch.tensor([7.0], device=dev)), [2.03, 1.5])
    close(P.compute_gae(t([1, 2, 3], dev), z3, t([0, 1, 0], dev), gamma=1.0, lambda_=1.0),
          [3, 2, 3])


def test_gae_lambda_one_is_monte_carlo_minus_value(dev):
    """B-1 regression: lambda = 1 with a window value gives G - V (an independent loop)."""
    d = make_inputs(4, 50, truncations=False, device=dev)
    zero = torch.zeros_like(d["r"])
    adv = P.compute_gae(d["r"], d["v"], zero, gamma=0.97, lambda_=1.0, last_value=d["last"])
    g = torch.zeros(4, dtype=torch.float64)
    ret = torch.empty(4, 50, dtype=torch.float64)
    g = d["last"].double().cpu()
    for s in range(49, -1, -1):
        g = d["r"][:, s].double().cpu() + 0.97 * g
        ret[:, s] = g
    assert_close("A = G - V", adv, ret - d["v"].double().cpu(), 1e-5)


def test_gae_lambda_zero_is_td_error(dev):
    d = make_inputs(3, 40, device=dev)
    adv = P.compute_gae(d["r"], d["v"], d["term"], d["trunc"], 0.9, 0.0, d["boot"])
    nu = torch.cat([d["v"][:, 1:], d["boot"][:, -1:]], 1)
    nu = torch.where(d["trunc"].bool(), d["boot"], nu)
    td = d["r"] + 0.9 * (1 - d["term"]) * nu - d["v"]
    assert_close("A = delta", adv, td.double(), TOL[torch.float32])


def test_gae_no_bootstrap_equals_zero_bootstrap(dev):
    """B-2: the no-bootstrap path is bit-identical to an all-zero bootstrap."""
    d = make_inputs(8, 77, device=dev)
    a = P.compute_gae(d["r"], d["v"], d["term"], d["trunc"])
    b = P.compute_gae(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=torch.zeros_like(
        d["r"]))
    assert torch.equal(a, b)


def test_last_value_equals_bootstrap_last_column(dev):
    d = make_inputs(5, 33, truncations=False, device=dev)
    boot = torch.zeros_like(d["r"])
    boot[:, -1] = d["last"]
    for fn in (lambda **k: P.compute_gae(d["r"], d["v"], d["term"], **k),
               lambda **k: P.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"], **k)):
        a = fn(last_value=d["last"])
        b = fn(bootstrap_values=boot)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert_close("last_value", x, y.double(), 1e-6)


def b10_fixture(dev):
    """The paper's two-interior-truncation fixture: N=2, T=12."""
    g = torch.Generator().manual_seed(7)
    r, v, n = (torch.randn(2, 12, generator=g) for _ in range(3))
    trunc = torch.zeros(2, 12)
    trunc[0, 3] = trunc[0, 7] = trunc[1, 5] = 1
    b = torch.zeros(2, 12)
    b[0, 3], b[0, 7], b[0, 11], b[1, 5] = 2.5, 1.8, 3.2, 0.9
    d = dict(r=r, v=v, n=n, term=torch.zeros(2, 12), trunc=trunc, boot=b,
             lpt=-torch.rand(2, 12, generator=g), lpb=-torch.rand(2, 12, generator=g))
    return {k: x.to(dev) for k, x in d.items()}


def test_b10_two_interior_truncations(dev):
    d = b10_fixture(dev)
    pairs = [
        (P.compute_gae(d["r"], d["v"], d["term"], d["trunc"], 0.99, 0.95, d["boot"]),
         ref.compute_gae(d["r"], d["v"], d["term"], d["trunc"], 0.99, 0.95, d["boot"])),
        (P.compute_lambda_returns(d["r"], d["n"], d["term"], d["trunc"], 0.99, 0.95, d["boot"]),
         ref.compute_lambda_returns(d["r"], d["n"], d["term"], d["trunc"], 0.99, 0.95,
                                    d["boot"])),
        (P.compute_discounted_returns(d["r"], d["term"], d["trunc"], 0.99, d["boot"]),
         ref.compute_discounted_returns(d["r"], d["term"], d["trunc"], 0.99, d["boot"])),
    ]
    vs = P.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"], d["trunc"], 0.99, 1.0,
                          1.0, d["boot"])
    vs_ref = ref.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"], d["trunc"], 0.99,
                                1.0, 1.0, d["boot"])
    pairs += list(zip(vs, vs_ref))
    for out, want in pairs:
        assert_close("b10", out, want, 1e-5)
    # An independent per-element check of GAE at the truncation (0, 7): one bootstrap, weight gamma.
    adv = pairs[0][0]
    delta7 = d["r"][0, 7] + 0.99 * 1.8 - d["v"][0, 7]
    assert abs(adv[0, 7].item() - delta7.item()) < 1e-5


# ------------------------------------------------------------------ SPEC 1.2 V-trace

def test_vtrace_known_values(dev):
    z = torch.zeros(1, 2, device=dev)
    vs, adv = P.compute_vtrace(z, z, z, t([1, 1], dev), z, gamma=1.0, rho_bar=100.0,
                               c_bar=100.0, last_value=torch.tensor([0.5], device=dev))
    close(vs, [2.5, 1.5])
    close(adv, [2.5, 1.5])
    vs, _ = P.compute_vtrace(z, z + torch.log(torch.tensor(2.0)), z, t([1, 1], dev), z,
                             gamma=1.0)
    close(vs, [0.75, 0.5])
    mu = torch.log(t([2, 0.5, 1, 4], dev))
    z4 = torch.zeros(1, 4, device=dev)
    vs, adv = P.compute_vtrace(z4, mu, t([0.5] * 4, dev), t([1] * 4, dev), z4, t([0, 1, 0, 0], dev),
                               0.9, 1.0, 1.0, t([0, 10, 0, 5], dev))
    close(vs, [5.25, 10, 2.575, 1.75])
    close(adv, [4.75, 9.5, 2.075, 1.25])


def test_vtrace_on_policy_is_monte_carlo(dev):
    """B-1 for V-trace: on-policy with large clips, vs = G and A = G - V."""
    d = make_inputs(3, 30, truncations=False, device=dev)
    zero = torch.zeros_like(d["r"])
    vs, adv = P.compute_vtrace(d["lpt"], d["lpt"], d["v"], d["r"], zero, gamma=0.95, rho_bar=1e3,
                               c_bar=1e3, last_value=d["last"])
    g = d["last"].double().cpu()
    ret = torch.empty(3, 30, dtype=torch.float64)
    for s in range(29, -1, -1):
        g = d["r"][:, s].double().cpu() + 0.95 * g
        ret[:, s] = g
    assert_close("vs = G", vs, ret, 1e-5)
    assert_close("A = G - V", adv, ret - d["v"].double().cpu(), 1e-5)


# ------------------------------------------------------------------ SPEC 1.3 Retrace

def retrace_case(dev, **kw):
    pi = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]], device=dev)
    nq = torch.tensor([[[1.0, 3.0], [2.0, 4.0]]], device=dev)
    z = torch.zeros(1, 2, device=dev)
    act = torch.tensor([[0, 1]], device=dev)
    return P.compute_retrace(pi, t([0.5, 0.5], dev), z, nq, act, t([1, 1], dev), z, z, **kw)


def test_retrace_known_values(dev):
    one = torch.ones(1, 2, 1, device=dev)
    z = torch.zeros(1, 2, device=dev)
    act = torch.zeros(1, 2, dtype=torch.int64, device=dev)
    q_ret, adv = P.compute_retrace(one, t([1, 1], dev), z, t([2, 3], dev)[..., None], act,
                                   t([1, 1], dev), z, z, 1.0)
    close(q_ret, [7, 4])
    close(adv, [5, 1])
    q_ret, adv = P.compute_retrace(one, t([1, 1], dev), z, t([2, 3], dev)[..., None], act,
                                   t([1, 1], dev), t([1, 0], dev), z, 1.0)
    close(q_ret, [1, 4])
    close(adv, [1, 1])
    q_ret, _ = P.compute_retrace(one, t([0.5, 0.5], dev), z, one * 0.5, act, t([1, 1], dev), z,
                                 z, 1.0)
    close(q_ret, [3, 1.5])
    q_ret, _ = P.compute_retrace(one, t([1, 1], dev), z, one * 5, act, t([1, 1], dev), z,
                                 t([0, 1], dev), 1.0)
    close(q_ret, [12, 6])
    q_ret, adv = retrace_case(dev, gamma=1.0)
    close(q_ret, [6.8, 4.6])
    close(adv, [5.6, 1.0])
    q_ret, adv = retrace_case(dev, gamma=0.9, lambda_=0.5, c_bar=0.9, rho_bar=1.5)
    close(q_ret, [3.7972, 4.24])
    close(adv, [7.224, 1.5])


def test_retrace_textbook_expectation(dev):
    """With pi(.|s_{t+1}) given (pi_1 on both rows), E_0 uses pi_1: Q_ret_0 = 8.2 (SPEC 1.3)."""
    nxt = torch.tensor([[[0.2, 0.8], [0.2, 0.8]]], device=dev)
    q_ret, _ = retrace_case(dev, gamma=1.0, next_action_probs_target=nxt)
    assert abs(q_ret[0, 0].item() - 8.2) < 1e-5


@pytest.mark.parametrize("T", [2048, 2049, 4096])
def test_retrace_long_rows_b5(T, dev):
    d = make_inputs(2, T, device=dev)
    args = (d["pi"], d["mu"], d["v"], d["nq"], d["act"], d["r"], d["term"], d["trunc"], 0.99)
    for g, w in zip(P.compute_retrace(*args), ref.compute_retrace(*args)):
        assert_close("retrace", g, w, 1e-4)


# A program walking its row in three 16-step tiles: the tiles under which up to eight actions
# unroll (retrace.unrolled_actions); the shipped tile for T = 45 is one tile, a loop.
WALK = L.ScanConfig(1, 16, 1, 48)


@pytest.mark.parametrize("A", [1, 3, 8, 9, 18])
@pytest.mark.parametrize("textbook", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("walk", [False, True])
def test_retrace_any_number_of_actions(A, textbook, time_major, walk, dev):
    """Any number of actions (up to eight unrolled where a program walks several tiles, else
    and beyond eight the loop over actions), either expectation, either layout, against the
    reference."""
    g = torch.Generator().manual_seed(A)
    N, T = 3, 45
    pi, npi = (torch.softmax(torch.randn(N, T, A, generator=g), -1) for _ in range(2))
    nq = torch.randn(N, T, A, generator=g)
    act = torch.randint(0, A, (N, T), generator=g)
    r, q = torch.randn(N, T, generator=g), torch.randn(N, T, generator=g)
    mu = torch.rand(N, T, generator=g) * 0.8 + 0.1
    term = (torch.rand(N, T, generator=g) < 0.1).float()
    trunc = (torch.rand(N, T, generator=g) < 0.1).float() * (1 - term)
    args = [pi, mu, q, nq, act, r, term, trunc, 0.99, 0.9, 0.8, 1.2]
    kw = {"next_action_probs_target": npi} if textbook else {}
    want = ref.compute_retrace(*args, **kw)
    move = (lambda x: x.transpose(0, 1).contiguous().to(dev)) if time_major else \
        (lambda x: x.to(dev))
    tile = replace(WALK, flip=0 if time_major else 4) if walk else None
    with L.force_config(tile):
        got = P.compute_retrace(*[move(x) if torch.is_tensor(x) else x for x in args],
                                **{k: move(v) for k, v in kw.items()},
                                time_dim=0 if time_major else -1)
    for y, w in zip(got, want):
        assert_close("retrace", y.transpose(0, 1) if time_major else y, w, TOL[torch.float32])


def test_retrace_unrolls_actions_only_where_a_program_walks_tiles():
    """N_ACT: the action count where one program walks a whole row of several tiles in one
    pass and there are at most eight actions; 0 (the loop) for one tile, a split of time or
    more actions."""
    assert unrolled_actions(4, WALK, 45) == 4
    assert unrolled_actions(8, WALK, 45) == 8
    assert unrolled_actions(9, WALK, 45) == 0
    assert unrolled_actions(4, WALK, 64) == 0  # two programs along time
    assert unrolled_actions(4, L.ScanConfig(1, 64, 1, 64), 45) == 0  # one tile
    assert unrolled_actions(4, replace(WALK, seg_len=16, single_pass=True), 45) == 0
    shipped = L.choose_config(512, 8192, False, 132, True, True)
    assert unrolled_actions(4, shipped, 8192) == 4
    for n, t in ((4096, 128), (32768, 32), (64, 131072)):
        assert unrolled_actions(4, L.choose_config(n, t, False, 132, True, True), t) == 0


# ------------------------------------------------------------------ SPEC 1.4 / 1.5 returns

def test_lambda_returns_known_values(dev):
    close(P.compute_lambda_returns(t([1, 2], dev), t([3, 4], dev), torch.zeros(1, 2, device=dev),
                                   gamma=1.0, lambda_=0.5), [4.5, 4.0])
    close(P.compute_lambda_returns(t([1, 2], dev), t([3, 4], dev), t([1, 0], dev), gamma=1.0,
                                   lambda_=0.5), [1, 4])
    z = torch.zeros(1, 2, device=dev)
    close(P.compute_lambda_returns(t([1, 1], dev), t([2, 3], dev), z, None, 0.9, 0.8,
                                   t([0, 3], dev)), [4.024, 3.7])
    close(P.compute_lambda_returns(t([1, 1], dev), t([2, 3], dev), z, None, 0.9, 0.8),
          [2.4688, 1.54])
    close(P.compute_lambda_returns(t([1, 1], dev), t([2, 0], dev), z, None, 0.9, 0.8,
                                   t([0, 3], dev)), [3.6352, 3.16])
    close(P.compute_lambda_returns(t([1, 1, 1], dev), t([2, 9, 4], dev),
                                   torch.zeros(1, 3, device=dev), t([0, 1, 0], dev), 0.9, 0.5,
                                   t([0, 7, 4], dev)), [5.185, 7.3, 4.6])


def test_discounted_returns_known_values(dev):
    z = torch.zeros(1, 2, device=dev)
    close(P.compute_discounted_returns(t([1, 2], dev), z, gamma=0.9), [2.8, 2.0])
    close(P.compute_discounted_returns(t([1, 2], dev), t([1, 0], dev), gamma=0.9), [1.0, 2.0])
    close(P.compute_discounted_returns(t([1, 1, 1], dev), torch.zeros(1, 3, device=dev),
                                       t([0, 1, 0], dev), 0.9, t([0, 7, 4], dev)),
          [7.57, 7.3, 4.6])


def test_lambda_one_equals_discounted(dev):
    d = make_inputs(4, 64, device=dev)
    a = P.compute_lambda_returns(d["r"], d["n"], d["term"], d["trunc"], 0.97, 1.0, d["boot"])
    b = P.compute_discounted_returns(d["r"], d["term"], d["trunc"], 0.97, d["boot"])
    assert_close("lambda=1", a, b.double(), 1e-5)


def test_lambda_zero_is_one_step_target(dev):
    d = make_inputs(4, 64, truncations=False, device=dev)
    g = P.compute_lambda_returns(d["r"], d["n"], d["term"], None, 0.9, 0.0)
    assert_close("lambda=0", g, (d["r"] + 0.9 * (1 - d["term"]) * d["n"]).double(), 1e-6)


# ------------------------------------------------------------------ SPEC 1.6 / 1.7 forward scans

def test_eligibility_traces_known_values(dev):
    """B-3: the reset lands on the first step of the next episode."""
    close(P.compute_eligibility_traces(t([1, 2, 3], dev), t([0, 1, 0], dev), 1.0, 0.9),
          [1, 2.9, 3.0])
    close(P.compute_eligibility_traces(t([1, 2], dev), t([0, 0], dev), 1.0, 1.0,
                                       torch.tensor([2.0], device=dev)), [3, 5])
    close(P.compute_eligibility_traces(t([1, 1, 1], dev), t([0, 1, 0], dev), 0.9, 0.5,
                                       torch.tensor([2.0], device=dev)), [1.9, 1.855, 1.0])


def test_prefix_sum_known_values(dev):
    x, seed = t([1, 2, 3, 4], dev), torch.tensor([10.0], device=dev)
    d = t([1, 0, 1, 0], dev)
    close(P.compute_episodic_prefix_sum(x, d, seed), [11, 2, 5, 4])
    close(P.compute_episodic_prefix_sum(x, d, seed, "starts_at"), [1, 3, 3, 7])
    d = t([0, 0, 1, 0], dev)
    close(P.compute_episodic_prefix_sum(x, d), [1, 3, 6, 4])
    close(P.compute_episodic_prefix_sum(x, d, boundary="starts_at"), [1, 3, 3, 7])
    close(P.compute_episodic_prefix_sum(t([1, 2], dev), t([1, 0], dev), seed), [11, 2])
    close(P.compute_episodic_prefix_sum(t([1, 2], dev), t([1, 0], dev), seed, "starts_at"), [1, 3])


@pytest.mark.parametrize("boundary", ["ends_at", "starts_at"])
def test_all_dones_prefix_sum_is_input(boundary, dev):
    x = torch.randn(3, 50, device=dev)
    out = P.compute_episodic_prefix_sum(x, torch.ones_like(x), boundary=boundary)
    if boundary == "ends_at":
        out = out[:, 1:]
        x = x[:, 1:]
    assert_close("all dones", out, x.double(), 1e-6)


def test_zero_decay_gives_alpha(dev):
    x = torch.randn(3, 50, device=dev)
    out = P.compute_eligibility_traces(x, torch.zeros_like(x), 0.0, 0.9, torch.ones(3, device=dev))
    assert_close("zero decay", out, x.double(), 1e-6)
    out = P.affine_scan(x, torch.zeros_like(x), initial=torch.ones(3, device=dev))
    assert_close("zero beta", out, x.double(), 1e-6)
