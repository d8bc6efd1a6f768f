"""Flags in [0, 1] weight the successor by ``1 - flag``: every recurrence is linear in its flags
(SPEC.md 1), so a per-step discount ``discount_t = gamma * c_t`` (rlax's ``discount_t``,
Dreamer's predicted continuation) is the flag ``1 - c_t``. Checked against the float64
reference and against the per-step-discount recurrences as those libraries write them."""
import pytest
import torch
from conftest import TOL, assert_close, device_of
from estimators import ESTIMATORS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref

IDS = [e.name for e in ESTIMATORS]
GAMMA, LAMBDA = 0.97, 0.9


def soft_flags(d, seed, truncations=True):
    """``d`` with fractional flags: terminations of random weight at a third of the steps and,
    with ``truncations``, truncations of weight at most what the termination leaves."""
    g = torch.Generator().manual_seed(seed)
    N, T = d["r"].shape
    term = torch.rand(N, T, generator=g) * (torch.rand(N, T, generator=g) < 1 / 3)
    d = dict(d, term=term.to(d["r"].device))
    if truncations:
        trunc = (1 - term) * torch.rand(N, T, generator=g) * (torch.rand(N, T, generator=g) < 0.2)
        d["trunc"] = trunc.to(d["r"].device)
    return d


@pytest.mark.parametrize("truncations", [False, True], ids=["terminations", "both"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_fractional_flags_against_reference(est, truncations, backend):
    d = soft_flags(make_inputs(3, 70, device=device_of(backend)), 1, truncations)
    want = outputs(est.call(ref, d))
    got = outputs(est.call(P, d))
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(f"{est.name}[{i}]", g, w, TOL[torch.float32])


def _continuations(N, T, seed, device):
    """Dreamer-style continuation probabilities, some steps near-terminal."""
    g = torch.Generator().manual_seed(seed)
    c = torch.rand(N, T, generator=g).clamp(min=0.6)
    c[torch.rand(N, T, generator=g) < 0.1] = 0.0
    return c.to(device)


def test_gae_with_per_step_discounts(backend):
    """rlax's truncated GAE: ``delta_t = r_t + discount_t v_{t+1} - v_t``,
    ``A_t = delta_t + lambda discount_t A_{t+1}``, ``v_T`` the last value."""
    device = device_of(backend)
    d = make_inputs(4, 45, device=device)
    r, v, last = d["r"], d["v"], d["last"]
    discount = GAMMA * _continuations(4, 45, 2, device)
    r64, v64, disc64 = r.double().cpu(), v.double().cpu(), discount.double().cpu()
    v_next = torch.cat([v64[:, 1:], last.double().cpu()[:, None]], 1)
    want = torch.empty_like(r64)
    acc = torch.zeros(4, dtype=torch.float64)
    for t in range(44, -1, -1):
        acc = r64[:, t] + disc64[:, t] * v_next[:, t] - v64[:, t] + LAMBDA * disc64[:, t] * acc
        want[:, t] = acc
    got = P.compute_gae(r, v, 1 - discount / GAMMA, None, GAMMA, LAMBDA, last_value=last)
    assert_close("gae", got, want, TOL[torch.float32])


def test_lambda_returns_with_continuations(backend):
    """Dreamer's lambda-return: ``R_t = r_t + gamma c_t ((1 - lambda) v_{t+1} + lambda
    R_{t+1})``, ``R_T = v_T``; the last column of ``bootstrap_values`` carries ``v_T``."""
    device = device_of(backend)
    d = make_inputs(5, 33, device=device)
    r, v_next = d["r"], d["n"]  # v_next[:, t] = v_{t+1}; v_next[:, -1] = v_T
    c = _continuations(5, 33, 3, device)
    r64, n64, c64 = r.double().cpu(), v_next.double().cpu(), c.double().cpu()
    want = torch.empty_like(r64)
    acc = n64[:, -1].clone()
    for t in range(32, -1, -1):
        acc = r64[:, t] + GAMMA * c64[:, t] * ((1 - LAMBDA) * n64[:, t] + LAMBDA * acc)
        want[:, t] = acc
    boot = torch.zeros_like(r)
    boot[:, -1] = v_next[:, -1]
    got = P.compute_lambda_returns(r, v_next, 1 - c, None, GAMMA, LAMBDA, boot)
    assert_close("lambda_returns", got, want, TOL[torch.float32])


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_vtrace_with_per_step_discounts(backend, lam):
    """rlax's V-trace: ``vs_t - v_t = rho_t (r_t + discount_t v_{t+1} - v_t) +
    discount_t lambda c_t (vs_{t+1} - v_{t+1})``; the advantage ``rho_t (r_t + discount_t
    vs_{t+1} - v_t)``, ``vs_T = v_T``."""
    device = device_of(backend)
    d = make_inputs(3, 40, device=device)
    lpt, lpb, v, r, last = d["lpt"], d["lpb"], d["v"], d["r"], d["last"]
    discount = GAMMA * _continuations(3, 40, 4, device)
    ratio = torch.exp(lpt.double() - lpb.double()).cpu()
    rho, c = ratio.clamp(max=1.0), lam * ratio.clamp(max=0.9)
    r64, v64, disc64 = r.double().cpu(), v.double().cpu(), discount.double().cpu()
    v_next = torch.cat([v64[:, 1:], last.double().cpu()[:, None]], 1)
    diff = torch.zeros(3, dtype=torch.float64)
    vs = torch.empty_like(r64)
    for t in range(39, -1, -1):
        diff = rho[:, t] * (r64[:, t] + disc64[:, t] * v_next[:, t] - v64[:, t]) + \
            disc64[:, t] * c[:, t] * diff
        vs[:, t] = v64[:, t] + diff
    vs_next = torch.cat([vs[:, 1:], last.double().cpu()[:, None]], 1)
    adv = rho * (r64 + disc64 * vs_next - v64)
    got_vs, got_adv = P.compute_vtrace(lpt, lpb, v, r, 1 - discount / GAMMA, None, GAMMA, 1.0,
                                       0.9, None, last, lambda_=lam)
    assert_close("vs", got_vs, vs, TOL[torch.float32])
    assert_close("advantages", got_adv, adv, TOL[torch.float32])


def test_validate_still_asks_for_binary_flags():
    """``validate=True`` checks that flags are 0 or 1, so soft flags go without it."""
    d = soft_flags(make_inputs(2, 8), 5, truncations=False)
    with pytest.raises(ValueError, match="terminateds must hold only 0 and 1"):
        P.compute_gae(d["r"], d["v"], d["term"], validate=True)


def test_tensor_gamma_names_the_per_step_route():
    """A tensor ``gamma`` is refused with the way to pass per-step discounts."""
    d = make_inputs(2, 8)
    route = r"gamma must be a real number, got Tensor; .*flag = 1 - discount_t / gamma"
    with pytest.raises(TypeError, match=route):
        P.compute_gae(d["r"], d["v"], d["term"], None, torch.full((2, 8), 0.99))


@pytest.mark.parametrize("trace", ["retrace", "tree_backup", "q_lambda"])
def test_off_policy_returns_with_per_step_discounts(backend, trace):
    """rlax's general off-policy returns (``general_off_policy_returns_from_action_values``):
    ``G_t = r_t + discount_t (E_{pi_{t+1}} Q(s_{t+1}) - c_{t+1} Q(s_{t+1}, a_{t+1}) + c_{t+1}
    G_{t+1})``, ``G_{T-1} = r + discount E``, with Retrace's ``c = lambda min(1, pi/mu)`` (rlax's
    eps taken as 0), Tree-backup's ``lambda pi`` and Q(lambda)'s ``lambda``: ours with the next
    policy as ``next_action_probs_target``, ``c_bar`` 1, and behaviour probabilities of one
    (Tree-backup) or ``pi(a_t|s_t)`` (Q(lambda)) (docs/conventions.md, rlax)."""
    N, T, A = 3, 30, 4
    device = device_of(backend)
    g = torch.Generator().manual_seed(6)
    q_all = torch.randn(N, T + 1, A, generator=g, dtype=torch.float64)
    pi_all = torch.softmax(torch.randn(N, T + 1, A, generator=g, dtype=torch.float64), -1)
    acts = torch.randint(0, A, (N, T + 1), generator=g)
    pi_taken = pi_all.gather(-1, acts[..., None])[..., 0]
    mu = {"retrace": torch.rand(N, T + 1, generator=g, dtype=torch.float64) * 0.8 + 0.1,
          "tree_backup": torch.ones(N, T + 1, dtype=torch.float64),
          "q_lambda": pi_taken}[trace]
    c = {"retrace": LAMBDA * (pi_taken / mu).clamp(max=1.0), "tree_backup": LAMBDA * pi_taken,
         "q_lambda": torch.full((N, T + 1), LAMBDA, dtype=torch.float64)}[trace]
    r = torch.randn(N, T, generator=g, dtype=torch.float64)
    discount = GAMMA * _continuations(N, T, 7, "cpu").double()
    taken = q_all.gather(-1, acts[..., None])[..., 0]
    expect = (pi_all * q_all).sum(-1)
    want = torch.empty(N, T, dtype=torch.float64)
    want[:, -1] = r[:, -1] + discount[:, -1] * expect[:, T]
    for t in range(T - 2, -1, -1):
        want[:, t] = r[:, t] + discount[:, t] * (expect[:, t + 1] - c[:, t + 1] * taken[:, t + 1]
                                                 + c[:, t + 1] * want[:, t + 1])

    def f32(x):
        return x.float().to(device)

    q_ret, _ = P.compute_retrace(f32(pi_all[:, :T]), f32(mu[:, :T]), f32(taken[:, :T]),
                                 f32(q_all[:, 1:]), acts[:, :T].to(device), f32(r),
                                 f32(1 - discount / GAMMA), None, GAMMA, LAMBDA, 1.0, 1.0,
                                 next_action_probs_target=f32(pi_all[:, 1:]))
    assert_close("q_ret", q_ret, want, TOL[torch.float32])


def test_reward_streams_with_their_own_discounts(backend):
    """Two reward streams (RND's extrinsic and intrinsic, NGU's and Agent57's family of
    discounts) in one call: stream c's flags ``1 - (1 - term) gamma_c / gamma`` with ``gamma``
    the largest discount, truncations as they are. Equal to the float64 reference per stream."""
    device = device_of(backend)
    d = make_inputs(4, 60, device=device)
    discounts = torch.tensor([0.999, 0.97], device=device)
    gamma = 0.999
    term, trunc = d["term"].bool(), d["trunc"].bool() & ~d["term"].bool()
    r = torch.stack([d["r"], 2 * d["r"].flip(-1)], -1)  # [N, T, 2]: time on dim 1
    v = torch.stack([d["v"], -d["v"]], -1)
    boot = torch.stack([d["boot"], 0.5 * d["boot"]], -1)
    flags = 1 - (~term).float()[..., None] * discounts / gamma
    got = P.compute_gae(r, v, flags, trunc[..., None].expand_as(r).float(), gamma, LAMBDA, boot,
                        time_dim=1)
    for c in range(2):
        want = ref.compute_gae(r[..., c], v[..., c], term, trunc, float(discounts[c]), LAMBDA,
                               boot[..., c])
        assert_close(f"stream {c}", got[..., c], want, TOL[torch.float32])


def test_peng_q_lambda_with_per_step_discounts(backend):
    """rlax's q_lambda (Peng's Q(lambda)): lambda-returns with ``v_t = max_a Q(s_{t+1}, a)``,
    ``G_t = r_t + discount_t ((1 - lambda) v_t + lambda G_{t+1})``, ``G_{T-1} = r + discount
    v``: ours with the max as next_values and as the last bootstrap value."""
    device = device_of(backend)
    g = torch.Generator().manual_seed(8)
    N, T, A = 3, 40, 5
    q_next = torch.randn(N, T, A, generator=g, dtype=torch.float64)
    r = torch.randn(N, T, generator=g, dtype=torch.float64)
    discount = GAMMA * _continuations(N, T, 9, "cpu").double()
    v = q_next.max(-1).values
    want = torch.empty(N, T, dtype=torch.float64)
    want[:, -1] = r[:, -1] + discount[:, -1] * v[:, -1]
    for t in range(T - 2, -1, -1):
        want[:, t] = r[:, t] + discount[:, t] * ((1 - LAMBDA) * v[:, t] + LAMBDA * want[:, t + 1])
    boot = torch.zeros(N, T, dtype=torch.float64)
    boot[:, -1] = v[:, -1]
    got = P.compute_lambda_returns(*(x.float().to(device) for x in (r, v, 1 - discount / GAMMA)),
                                   None, GAMMA, LAMBDA, boot.float().to(device))
    assert_close("q_lambda", got, want, TOL[torch.float32])
