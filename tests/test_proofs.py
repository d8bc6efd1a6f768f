"""Every identity of proofs/ as its own test, and evidence that the harness can fail: broken
coefficients (patched into paper_repro.coefficients or into a symbolic derivation) must make the
identities that cover them report failure."""
from __future__ import annotations

import io
from functools import partial

import pytest
import torch

import proofs
from proofs import code_coefficients, evaluate, gae, masked_gae, peers, run, vtrace
from proofs.__main__ import main
from proofs.core import Identity, backward, gamma, lam, t

IDENTITIES = proofs.all_identities()


@pytest.mark.parametrize("identity", IDENTITIES, ids=[x.name for x in IDENTITIES])
def test_identity(identity):
    passed, reason = evaluate(identity)
    assert passed, f"{identity.name}: {reason}"


def test_identity_names_are_unique():
    names = [x.name for x in IDENTITIES]
    assert len(names) == len(set(names))


def _ignore_lambda(original):
    def broken(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95, **kw):
        return original(rewards, values, terminateds, truncateds, gamma, 1.0, **kw)
    return broken


def _vtrace_without_lambda(original):
    def broken(*args, lambda_=1.0, **kwargs):
        return original(*args, **kwargs)
    return broken


def _next_step_c(original):
    def broken(*args, **kwargs):
        c = original(*args, **kwargs)
        return c._replace(beta=torch.roll(c.beta, -1, dims=1))
    return broken


def _undecayed_seed(original):
    def broken(*args, **kwargs):
        c = original(*args, **kwargs)
        beta = c.beta.clone()
        beta[:, 0] = 1.0
        return c._replace(beta=beta)
    return broken


def _swapped_boundary(original):
    def broken(inputs, dones, seed_values=None, boundary="ends_at"):
        other = "starts_at" if boundary == "ends_at" else "ends_at"
        return original(inputs, dones, seed_values, boundary=other)
    return broken


def _tiny_drift(original):
    def broken(*args, **kwargs):
        c = original(*args, **kwargs)
        return c._replace(alpha=c.alpha * (1 + 1e-9))
    return broken


@pytest.mark.parametrize("function, breakage, prefix", [
    pytest.param("gae_coefficients", _ignore_lambda, "code.gae[", id="gae-beta-without-lambda"),
    pytest.param("vtrace_coefficients", _next_step_c, "code.vtrace[", id="vtrace-c-next-step"),
    pytest.param("vtrace_coefficients", _vtrace_without_lambda, "code.vtrace[lambda]",
                 id="vtrace-traces-without-lambda"),
    pytest.param("retrace_coefficients", _tiny_drift, "code.retrace[", id="retrace-1e-9-drift"),
    pytest.param("eligibility_traces_coefficients", _undecayed_seed,
                 "code.eligibility_traces[seed]", id="eligibility-seed-not-decayed"),
    pytest.param("prefix_sum_coefficients", _swapped_boundary, "code.prefix_sum[",
                 id="prefix-sum-conventions-swapped"),
])
def test_broken_coefficient_is_reported(monkeypatch, function, breakage, prefix):
    package = code_coefficients.package()
    monkeypatch.setattr(package, function, breakage(getattr(package, function)))
    covering = [x for x in code_coefficients.IDENTITIES if x.name.startswith(prefix)]
    assert covering
    for identity in covering:
        assert evaluate(identity)[0] is False, f"{identity.name} missed a broken {function}"
    # the others still hold, so the failure is attributable
    others = [x for x in code_coefficients.IDENTITIES if not x.name.startswith(prefix)]
    assert all(evaluate(x)[0] for x in others[:3])


def test_broken_derivation_is_reported(monkeypatch):
    """beta_t without lambda cannot be the discounted sum of TD errors."""
    monkeypatch.setattr(gae, "BETA", gamma * (1 - gae.tau[t]) * (1 - gae.kappa[t]))
    broken = [x for x in gae.IDENTITIES if x.name in ("gae.definition[T=3]", "gae.induction.step")]
    assert len(broken) == 2 and not any(evaluate(x)[0] for x in broken)


def test_broken_masked_gae_is_reported(monkeypatch):
    """A next value read at t + 1 whatever the mask is neither masked GAE nor verl's loop."""
    def unmasked_next_value(data):
        T = len(data["r"])
        r, V, m = (data[name] for name in ("r", "V", "m"))
        nxt = [*[V[s + 1] for s in range(T - 1)], masked_gae.L]
        alpha = [m[s] * (r[s] + gamma * nxt[s] - V[s]) for s in range(T)]
        beta = [m[s] * gamma * lam + 1 - m[s] for s in range(T)]
        return backward(alpha, beta, 0)

    monkeypatch.setattr(masked_gae, "two_scans", unmasked_next_value)
    broken = [x for x in masked_gae.IDENTITIES
              if x.name in ("masked_gae.definition[T=3]", "masked_gae.verl_loop[T=3]")]
    assert len(broken) == 2 and not any(evaluate(x)[0] for x in broken)
    held = [x for x in masked_gae.IDENTITIES if x.name == "masked_gae.unmasked_is_gae"]
    assert evaluate(held[0])[0]  # nothing masked: the break does not show


def test_broken_fused_walk_is_reported(monkeypatch):
    """Carrying a tile's latest lane on instead of its earliest breaks the fused kernel's walk
    wherever a tile of two or more steps precedes another (T = 4 in tiles of 2; tiles sit on
    the grid from step 0, so at T = 3 the later tile holds one step); a one-tile row does not
    show it."""
    monkeypatch.setattr(masked_gae, "fused_tiles",
                        partial(masked_gae.fused_tiles, carry_lane=0))
    found = {x.name: x for x in masked_gae.IDENTITIES}
    assert not evaluate(found["masked_gae.fused_kernel[T=4]"])[0]
    assert evaluate(found["masked_gae.fused_kernel[T=1]"])[0]


def test_broken_runs_walk_is_reported(monkeypatch):
    """Carrying on the latest run's first column instead of the earliest step breaks the walk
    in runs wherever a row spans tiles of several runs; a one-tile row does not show it."""
    monkeypatch.setattr(masked_gae, "runs_walk", partial(masked_gae.runs_walk, leaving=0))
    found = {x.name: x for x in masked_gae.IDENTITIES}
    assert not evaluate(found["masked_gae.runs_walk[T=3]"])[0]
    assert evaluate(found["masked_gae.runs_walk[T=1]"])[0]


def test_split_maps_composed_out_of_order_are_reported(monkeypatch):
    """Composing the later segments' maps earliest first breaks the split wherever a segment
    has two or more after it; with at most one after each, the order does not show."""
    then = masked_gae.then
    monkeypatch.setattr(masked_gae, "then", lambda p, q: then(q, p))
    found = {x.name: x for x in masked_gae.IDENTITIES}
    assert not evaluate(found["masked_gae.split[T=3]"])[0]
    assert evaluate(found["masked_gae.split[T=2]"])[0]


def test_runner_reports_failures_and_crashes():
    out = io.StringIO()
    failures = run([Identity("holds", lambda: True), Identity("false", lambda: False),
                    Identity("crashes", lambda: 1 / 0), Identity("truthy", lambda: 1)], out)
    lines = out.getvalue().splitlines()
    assert failures == 3
    assert lines[0] == "PASS holds"
    assert lines[1].startswith("FAIL false") and lines[2].startswith("FAIL crashes")
    assert "ZeroDivisionError" in lines[2] and lines[3].startswith("FAIL truthy")


def test_main_exit_status(capsys):
    assert main(["scan.associative"]) == 0
    assert main(["no identity has this name"]) == 1
    assert "PASS scan.associative" in capsys.readouterr().out


def test_broken_peer_mappings_are_reported(monkeypatch):
    """Truncations not moved one step earlier are not Brax's advantage; PufferLib's loop read
    with the done of step t (not t + 1) is not V-trace one slot on."""
    def brax_unmoved(data, T):
        r, v, term, trunc = (data[name] for name in ("r", "v", "term", "trunc"))
        ours = vtrace.targets_and_advantages({
            "r": r, "V": {**{s: v[s] for s in range(T)}, T: peers.BOOT},
            "b": {**{s: v[s + 1] for s in range(T - 1)}, T - 1: peers.BOOT}, "tau": term,
            "kappa": {s: trunc[s] for s in range(T)}, "rho": dict.fromkeys(range(T), 1),
            "c": dict.fromkeys(range(T), lam)})
        return ([ours[s] * (1 - trunc[s]) + v[s] * trunc[s] for s in range(T)]
                + [ours[T + s] * (1 - trunc[s]) for s in range(T)])

    def puff_same_step(v, r, d, rho, c, H):
        return original_puff(v, r, {**d, **{s + 1: d[s] for s in range(H - 1)}}, rho, c, H)

    original_puff = peers.puff_loop
    monkeypatch.setattr(peers, "brax_by_vtrace", brax_unmoved)
    monkeypatch.setattr(peers, "puff_loop", puff_same_step)
    for name in ("peers.brax[T=3]", "peers.pufferlib[H=4]"):
        identity = next(x for x in peers.IDENTITIES if x.name == name)
        assert evaluate(identity)[0] is False, f"{name} missed a broken mapping"
    held = next(x for x in peers.IDENTITIES if x.name == "peers.cleanrl[T=4]")
    assert evaluate(held)[0]
