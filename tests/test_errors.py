"""Bad input gets a clear ValueError/TypeError naming the argument; never an assert or a crash."""
import os
import subprocess
import sys

import pytest
import torch
from conftest import device_of
from estimators import make_inputs

import paper_repro as P
from paper_repro.paths import ROOT


@pytest.fixture
def d(backend):
    return make_inputs(3, 8, device=device_of(backend))


def test_type_errors(d):
    with pytest.raises(TypeError, match="rewards"):
        P.compute_gae(d["r"].tolist(), d["v"], d["term"])
    with pytest.raises(TypeError, match="values"):
        P.compute_gae(d["r"], None, d["term"])
    with pytest.raises(TypeError, match="rewards must be float16"):
        P.compute_gae(d["r"].long(), d["v"], d["term"])
    with pytest.raises(TypeError, match="gamma"):
        P.compute_gae(d["r"], d["v"], d["term"], gamma="0.9")
    with pytest.raises(TypeError, match="actions must be an integer"):
        P.compute_retrace(d["pi"], d["mu"], d["v"], d["nq"], d["act"].float(), d["r"], d["term"],
                          d["trunc"], 0.99)
    with pytest.raises(TypeError, match="time_dim"):
        P.compute_discounted_returns(d["r"], d["term"], time_dim=1.0)
    with pytest.raises(TypeError, match="next_values"):
        P.compute_lambda_returns(d["r"], None, d["term"])


def test_shape_and_value_errors(d):
    with pytest.raises(ValueError, match="values must have shape"):
        P.compute_gae(d["r"], d["v"][:, :-1], d["term"])
    with pytest.raises(ValueError, match="last_value must have shape"):
        P.compute_gae(d["r"], d["v"], d["term"], last_value=d["last"][:2])
    with pytest.raises(ValueError, match="not both"):
        P.compute_gae(d["r"], d["v"], d["term"], bootstrap_values=d["boot"], last_value=d["last"])
    with pytest.raises(ValueError, match="not both"):
        P.compute_vtrace(d["lpt"], d["lpb"], d["v"], d["r"], d["term"],
                         bootstrap_values=d["boot"], last_value=d["last"])
    with pytest.raises(ValueError, match="gamma must be finite"):
        P.compute_gae(d["r"], d["v"], d["term"], gamma=float("nan"))
    with pytest.raises(ValueError, match="lambda_ must be finite"):
        P.compute_eligibility_traces(d["r"], d["term"], 0.9, float("inf"))
    with pytest.raises(ValueError, match="boundary"):
        P.compute_episodic_prefix_sum(d["r"], d["term"], boundary="start")
    with pytest.raises(ValueError, match="time_dim"):
        P.compute_gae(d["r"], d["v"], d["term"], time_dim=2)
    with pytest.raises(ValueError, match="seed_values must have shape"):
        P.compute_eligibility_traces(d["r"], d["term"], 0.9, 0.9, d["seed"][None])
    with pytest.raises(ValueError, match="action_probs_target must have shape"):
        P.compute_retrace(d["pi"][..., 0], d["mu"], d["v"], d["nq"], d["act"], d["r"],
                          d["term"], d["trunc"], 0.99)
    with pytest.raises(ValueError, match="beta must have shape"):
        P.affine_scan(d["r"], d["v"][:1])


def test_device_mismatch_is_named(d):
    other = "meta"
    with pytest.raises(ValueError, match="values is on meta"):
        P.compute_gae(d["r"], d["v"].to(other), d["term"])
    with pytest.raises(ValueError, match="last_value is on meta"):
        P.compute_gae(d["r"], d["v"], d["term"], last_value=d["last"].to(other))


def test_validate_catches_bad_values(d):
    term = d["term"].clone()
    term[0, 0] = 0.5
    with pytest.raises(ValueError, match="terminateds must hold only 0 and 1"):
        P.compute_gae(d["r"], d["v"], term, validate=True)
    trunc = d["term"].clone()
    with pytest.raises(ValueError, match="both set"):
        P.compute_gae(d["r"], d["v"], d["term"], trunc, validate=True)
    stray = torch.zeros_like(d["r"])
    stray[0, 2] = 1.0
    with pytest.raises(ValueError, match="neither truncated nor the last"):
        P.compute_gae(d["r"], d["v"], d["term"], torch.zeros_like(d["r"]), 0.99, 0.95, stray,
                      validate=True)
    mu = d["mu"].clone()
    mu[1, 1] = 0.0
    with pytest.raises(ValueError, match="action_probs_behavior must be > 0"):
        P.compute_retrace(d["pi"], mu, d["v"], d["nq"], d["act"], d["r"], d["term"], d["trunc"],
                          0.99, validate=True)
    act = d["act"].clone()
    act[2, 3] = 4
    with pytest.raises(ValueError, match=r"actions must lie in \[0, 4\)"):
        P.compute_retrace(d["pi"], d["mu"], d["v"], d["nq"], act, d["r"], d["term"], d["trunc"],
                          0.99, validate=True)


def test_validate_env_variable(d):
    term = d["term"].clone()
    term[0, 0] = 2.0
    P.compute_gae(d["r"], d["v"], term)  # linear in the flags: no check without asking
    # The variable is read when the package is imported.
    code = ("import torch, paper_repro as P\n"
            "P.compute_gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.full((2, 3), 2.0))")
    env = dict(os.environ, PAPER_REPRO_VALIDATE="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "terminateds must hold only 0 and 1" in done.stderr
    env["PAPER_REPRO_VALIDATE"] = "0"
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
