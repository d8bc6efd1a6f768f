"""Cross-check against TorchRL's functional estimators (torchrl.objectives.value.functional).

Mapping of conventions (docs/conventions.md has the table):

* Layout: TorchRL wants ``[*B, T, F]`` with time on ``time_dim=-2`` and a trailing feature
  axis (usually 1). We call ours on the very same ``[N, T, 1]`` tensors with ``time_dim=-2``.
* Flags: TorchRL's ``done`` (any episode end) = ``terminateds | truncateds``; its
  ``terminated`` = our ``terminateds``. TorchRL flags must be bool.
* Next-state values: TorchRL reads ``next_state_value[t]`` = V(s_{t+1}) at every step. We read
  ``values[t + 1]`` inside an episode, ``bootstrap_values[t]`` at truncated steps and at
  ``T - 1``. So ``next_state_value = where(truncated, bootstrap_values, values shifted left)``
  with the last column ``bootstrap_values[:, -1]``. TD(lambda) takes ``next_values`` in both.
* Truncation: TorchRL bootstraps from ``next_state_value`` where ``done & ~terminated``; with
  ``terminated=None`` every ``done`` is terminal, as is ours with ``truncateds=None``.
* V-trace: TorchRL's ``log_pi`` / ``log_mu`` are our ``log_pi_target`` / ``log_pi_behavior``;
  ``rho_thresh`` / ``c_thresh`` are ``rho_bar`` / ``c_bar``; it returns (advantages, targets).

Differences pinned below: the vectorised estimators cut their geometric filter after K taps;
TorchRL GAE and V-trace round gamma to float32; reward2go never bootstraps; TorchRL GAE reads
``next_state_value`` where we read ``values[t + 1]``; TD(lambda) window-end bootstrap split.
"""
import math

import pytest
import torch
from conftest import TOL, assert_close, device_of
from estimators import make_inputs
from torchrl.objectives.value import functional as F

import paper_repro as P

# Dyadic gamma, lambda: exact in float32, so TorchRL's float32 scalar products lose nothing.
GAMMA, LAMBDA = 0.9921875, 0.9375
FILTER_THRESHOLD = 1e-7  # TorchRL's cut-off for the vectorised geometric filters
TOLS = {torch.float32: TOL[torch.float32], torch.float64: 1e-12}
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)


def feat(x):
    """[N, T] -> TorchRL's [N, T, 1] (time on -2)."""
    return None if x is None else x.unsqueeze(-1)


def episodes(N, T, dtype, seed=0, open_end=False):
    """Random episodic inputs plus their TorchRL form (done, next_state_value), [N, T, 1].
    ``open_end``: no flag at T-1, so every row's last episode runs past the window."""
    d = make_inputs(N, T, dtype=dtype, flag_dtype=torch.bool, seed=seed)
    if open_end:
        d["term"][:, -1] = d["trunc"][:, -1] = False
    term, trunc, boot = d["term"], d["trunc"], d["boot"]
    nsv = torch.where(trunc, boot, torch.cat([d["v"][:, 1:], boot[:, -1:]], 1))
    n = torch.where(trunc, boot, d["n"])
    n[:, -1] = boot[:, -1]
    out = {k: feat(x) for k, x in d.items() if x is not None and x.dim() == 2}
    out.update(done=feat(term | trunc), nsv=feat(nsv), next_values=feat(n))
    return out


def on(d, device):
    """Our inputs on the backend's device; TorchRL always runs on the CPU (its conv1d paths
    may use TF32 on a GPU, which would blur the comparison)."""
    return {k: v.to(device) for k, v in d.items()}


def filter_taps(decay):
    """Length of TorchRL's truncated geometric filter (taps k = 0 .. K-1)."""
    return int(math.log(FILTER_THRESHOLD) / math.log(decay))


# --------------------------------------------------------------------------- agreement

@DTYPES
@pytest.mark.parametrize("vectorised", [False, True], ids=["loop", "vec"])
def test_gae_matches_torchrl(backend, dtype, vectorised):
    d = episodes(3, 64, dtype)
    x = on(d, device_of(backend))
    fn = F.vec_generalized_advantage_estimate if vectorised else F.generalized_advantage_estimate
    adv, target = fn(GAMMA, LAMBDA, d["v"], d["nsv"], d["r"], d["done"], d["term"])
    ours = P.compute_gae(x["r"], x["v"], x["term"], x["trunc"], GAMMA, LAMBDA, x["boot"],
                         time_dim=-2, validate=True)
    assert ours.shape == adv.shape == (3, 64, 1)
    assert_close("gae", ours, adv, TOLS[dtype])
    assert_close("value target", ours + x["v"], target, TOLS[dtype])


def test_gae_time_major_and_all_terminal(backend):
    """A 2-D [T, N] tensor is TorchRL's default layout with envs as features; ours takes it
    with time_dim=0. terminated=None (TorchRL) == truncateds=None (ours): every done is final."""
    d = episodes(4, 50, torch.float64)
    tm = {k: d[k].squeeze(-1).t() for k in ("r", "v", "nsv", "done")}
    adv, _ = F.generalized_advantage_estimate(GAMMA, LAMBDA, tm["v"], tm["nsv"], tm["r"],
                                              tm["done"])
    x = on(tm, device_of(backend))
    ours = P.compute_gae(x["r"], x["v"], x["done"], None, GAMMA, LAMBDA,
                         last_value=x["nsv"][-1].contiguous(), time_dim=0)
    assert_close("gae time-major", ours, adv, 1e-12)


@DTYPES
@pytest.mark.parametrize("vectorised", [False, True], ids=["loop", "vec"])
def test_td_lambda_matches_torchrl(backend, dtype, vectorised):
    d = episodes(3, 64, dtype)
    x = on(d, device_of(backend))
    fn = F.vec_td_lambda_return_estimate if vectorised else F.td_lambda_return_estimate
    want = fn(GAMMA, LAMBDA, d["next_values"], d["r"], d["done"], d["term"])
    ours = P.compute_lambda_returns(x["r"], x["next_values"], x["term"], x["trunc"], GAMMA,
                                    LAMBDA, x["boot"], time_dim=-2, validate=True)
    assert_close("td(lambda)", ours, want, TOLS[dtype])


@DTYPES
def test_vtrace_matches_torchrl(backend, dtype):
    """Including truncated steps, where the advantage bootstraps from the true next value."""
    d = episodes(3, 64, dtype)
    x = on(d, device_of(backend))
    rho_bar, c_bar = 1.25, 0.875
    adv, vs = F.vtrace_advantage_estimate(GAMMA, d["lpt"], d["lpb"], d["v"], d["nsv"], d["r"],
                                          d["done"], d["term"], rho_bar, c_bar)
    targets, ours = P.compute_vtrace(x["lpt"], x["lpb"], x["v"], x["r"], x["term"], x["trunc"],
                                     GAMMA, rho_bar, c_bar, x["boot"], time_dim=-2, validate=True)
    targets, ours = targets.cpu(), ours.cpu()
    assert_close("vtrace targets", targets, vs, TOLS[dtype])
    assert_close("vtrace advantages", ours, adv, TOLS[dtype])
    # The agreement is informative: shifting the targets across a truncation (the next
    # episode's value, TorchRL's reading before 0.14.1) would be far off.
    trunc = d["trunc"][:, :-1, 0]
    assert trunc.any()
    leak = torch.cat([targets[:, 1:], d["boot"][:, -1:]], 1)
    rho = torch.exp(d["lpt"] - d["lpb"]).clamp(max=rho_bar)
    leaked = rho * (d["r"] + GAMMA * leak - d["v"])
    gap = (leaked - ours)[:, :-1, 0][trunc].abs()
    assert gap.min() > 1e-3


@DTYPES
def test_reward2go_matches_discounted_returns_without_bootstrap(backend, dtype):
    """reward2go == our discounted returns when every done is terminal and nothing bootstraps."""
    d = episodes(3, 64, dtype)
    x = on(d, device_of(backend))
    want = F.reward2go(d["r"], d["done"], GAMMA)
    ours = P.compute_discounted_returns(x["r"], x["done"], None, GAMMA, time_dim=-2)
    assert_close("reward2go", ours, want, TOLS[dtype])


@DTYPES
def test_td_lambda_per_step_gamma_matches_torchrl(backend, dtype):
    """TorchRL's per-step gamma tensor (``rolling_gamma``: each gamma discounts its own step)
    is ours with the scalar gamma and fractional flags ``1 - (1 - terminated) gamma_t / gamma``
    (README, per-step discounts)."""
    d = episodes(3, 64, dtype)
    gamma_t = GAMMA * torch.rand(d["r"].shape, generator=torch.Generator().manual_seed(7),
                                 dtype=dtype).clamp(min=0.5)
    boot = torch.zeros_like(d["r"])
    boot[:, -1] = d["n"][:, -1]
    done = d["term"]
    want = F.td_lambda_return_estimate(gamma_t, LAMBDA, d["n"], d["r"], done, done,
                                       rolling_gamma=True)
    flags = 1 - (~done).to(dtype) * gamma_t / GAMMA
    x = on(dict(r=d["r"], n=d["n"], flags=flags, boot=boot), device_of(backend))
    ours = P.compute_lambda_returns(x["r"], x["n"], x["flags"], None, GAMMA, LAMBDA, x["boot"],
                                    time_dim=-2)
    assert_close("td(lambda), per-step gamma", ours, want, TOLS[dtype])


# --------------------------------------------------------------------------- pinned differences

@pytest.mark.parametrize("name", ["gae", "td_lambda", "reward2go"])
def test_vectorised_filter_is_truncated(backend, name):
    """TorchRL's conv1d paths keep K = floor(log 1e-7 / log decay) taps: with alpha_t = 1 and no
    dones, ours - theirs = sum_{k=K}^{T-1-t} decay^k where T - t > K, and 0 elsewhere."""
    decay = GAMMA if name == "reward2go" else GAMMA * LAMBDA
    K = filter_taps(decay)
    T = K + 40
    one = torch.ones(2, T, 1, dtype=torch.float64)
    zero, never = torch.zeros_like(one), torch.zeros_like(one, dtype=torch.bool)
    x = on(dict(one=one, zero=zero, never=never), device_of(backend))
    if name == "gae":
        theirs, _ = F.vec_generalized_advantage_estimate(GAMMA, LAMBDA, zero, zero, one, never,
                                                         never)
        ours = P.compute_gae(x["one"], x["zero"], x["never"], gamma=GAMMA, lambda_=LAMBDA,
                             time_dim=-2)
    elif name == "td_lambda":
        theirs = F.vec_td_lambda_return_estimate(GAMMA, LAMBDA, zero, one, never, never)
        ours = P.compute_lambda_returns(x["one"], x["zero"], x["never"], None, GAMMA, LAMBDA,
                                        time_dim=-2)
    else:
        theirs = F.reward2go(one, never, GAMMA)
        ours = P.compute_discounted_returns(x["one"], x["never"], None, GAMMA, time_dim=-2)
    steps_left = T - torch.arange(T, dtype=torch.float64)  # T - t terms in the full sum
    tail = torch.where(steps_left > K, (decay**K - decay**steps_left) / (1 - decay), 0.0)
    diff = (ours.cpu() - theirs)[..., 0]
    assert_close("missing filter tail", diff, tail.expand_as(diff), 1e-12)
    assert diff[:, 0].min() > 1e-9  # the tail is really there, far above rounding
    assert diff[:, T - K:].abs().max() < 1e-12  # and only beyond K steps from the end


def f32(x):
    return float(torch.tensor(x, dtype=torch.float32))


def test_torchrl_rounds_gamma_to_float32():
    """TorchRL multiplies gamma by integer masks, giving float32 even for float64 inputs:
    with gamma = 0.99 it matches ours run with float32-rounded scalars, not with 0.99."""
    d = episodes(3, 64, torch.float64)
    gae_args = (d["r"], d["v"], d["term"], d["trunc"])
    vtrace_args = (d["lpt"], d["lpb"], d["v"], d["r"], d["term"], d["trunc"])
    # TorchRL GAE: delta uses float32(gamma), the trace decay float32(gamma * lambda).
    gae_theirs, _ = F.generalized_advantage_estimate(0.99, 0.95, d["v"], d["nsv"], d["r"],
                                                     d["done"], d["term"])
    gae_exact = P.compute_gae(*gae_args, 0.99, 0.95, d["boot"], time_dim=-2)
    gae_rounded = P.compute_gae(*gae_args, f32(0.99), f32(0.99 * 0.95) / f32(0.99), d["boot"],
                                time_dim=-2)
    vt_theirs, _ = F.vtrace_advantage_estimate(0.99, d["lpt"], d["lpb"], d["v"], d["nsv"],
                                               d["r"], d["done"], d["term"])
    vt_exact = P.compute_vtrace(*vtrace_args, 0.99, 1.0, 1.0, d["boot"], time_dim=-2)[1]
    vt_rounded = P.compute_vtrace(*vtrace_args, f32(0.99), 1.0, 1.0, d["boot"], time_dim=-2)[1]
    for name, theirs, exact, rounded in [("gae", gae_theirs, gae_exact, gae_rounded),
                                         ("vtrace", vt_theirs, vt_exact, vt_rounded)]:
        assert_close(f"{name} with float32 scalars", rounded, theirs, 1e-12)
        gap = (exact - theirs).abs().max().item()
        assert 1e-9 < gap < 1e-5, (name, gap)


def test_gae_reads_values_not_next_state_value():
    """Inside an episode TorchRL reads next_state_value[k], we read values[k + 1]. Perturbing
    next_state_value[k] by eps moves TorchRL's A_t (t <= k, same episode) by
    gamma (gamma lambda)^(k - t) eps and leaves ours unchanged."""
    d = episodes(1, 40, torch.float64, seed=3)
    done = d["done"][0, :, 0]
    k = int(torch.nonzero(~done[:-1])[-1])  # last step with a successor in its episode
    start = int(torch.nonzero(done[:k])[-1]) + 1 if done[:k].any() else 0
    eps = 0.5
    nsv = d["nsv"].clone()
    nsv[0, k, 0] += eps
    before, _ = F.generalized_advantage_estimate(GAMMA, LAMBDA, d["v"], d["nsv"], d["r"],
                                                 d["done"], d["term"])
    after, _ = F.generalized_advantage_estimate(GAMMA, LAMBDA, d["v"], nsv, d["r"], d["done"],
                                                d["term"])
    t = torch.arange(40, dtype=torch.float64)
    want = torch.where((t >= start) & (t <= k), GAMMA * (GAMMA * LAMBDA) ** (k - t) * eps, 0.0)
    assert_close("torchrl shift", (after - before)[0, :, 0], want, 1e-12)
    ours = P.compute_gae(d["r"], d["v"], d["term"], d["trunc"], GAMMA, LAMBDA, d["boot"],
                         time_dim=-2)
    assert_close("ours == torchrl on consistent inputs", ours, before, 1e-12)
    assert (ours - after).abs().max() > 0.1 * eps * GAMMA


def test_td_lambda_window_bootstrap_split():
    """TorchRL bootstraps the window end fully from next_state_value[T-1]; ours splits it
    between next_values[:, -1] (weight 1 - lambda) and bootstrap_values[:, -1] (weight lambda).
    Without the last column ours is lower by prod_{s=t}^{T-1} gamma lambda (1 - d_s) * V(s_T)."""
    d = episodes(4, 48, torch.float64, seed=1, open_end=True)
    theirs = F.td_lambda_return_estimate(GAMMA, LAMBDA, d["next_values"], d["r"], d["done"],
                                         d["term"])
    interior_only = d["boot"].clone()
    interior_only[:, -1] = 0.0  # truncated interior steps keep their bootstrap values
    ours = P.compute_lambda_returns(d["r"], d["next_values"], d["term"], d["trunc"], GAMMA,
                                    LAMBDA, interior_only, time_dim=-2)
    beta = GAMMA * LAMBDA * (~d["done"][..., 0]).double()
    reach = beta.flip(-1).cumprod(-1).flip(-1)  # prod over s >= t
    want = reach * d["next_values"][:, -1]
    assert_close("missing window bootstrap", (theirs - ours)[..., 0], want, 1e-12)
    assert want.abs().max() > 0.01


def test_reward2go_never_bootstraps():
    """reward2go treats truncation as termination and has no window value: ours exceeds it by
    gamma^(e - t + 1) b_e where the episode of t ends at a truncation e (or runs past T-1)."""
    d = episodes(3, 60, torch.float64, seed=2)
    theirs = F.reward2go(d["r"], d["done"], GAMMA)
    ours = P.compute_discounted_returns(d["r"], d["term"], d["trunc"], GAMMA, d["boot"],
                                        time_dim=-2)
    done, trunc, boot = d["done"][..., 0], d["trunc"][..., 0], d["boot"][..., 0]
    want = torch.zeros_like(boot)
    for row in range(3):
        end_value, end = boot[row, -1], 59  # the window value if the last episode runs on
        for t in range(59, -1, -1):
            if done[row, t]:
                end_value, end = (boot[row, t] if trunc[row, t] else 0.0), t
            want[row, t] = GAMMA ** (end - t + 1) * end_value
    assert_close("bootstrap terms", (ours - theirs)[..., 0], want, 1e-12)
    assert (want != 0).sum() > 10
