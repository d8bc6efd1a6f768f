"""The public names and the paper's positional signatures (SPEC.md section 1): code written
against the paper's library must bind its arguments to the same parameters here."""
import inspect

import pytest

import paper_repro as P
from paper_repro.baselines import reference as ref

REQUIRED = inspect.Parameter.empty
PAPER = {
    "compute_gae": [("rewards", REQUIRED), ("values", REQUIRED), ("terminateds", REQUIRED),
                    ("truncateds", None), ("gamma", 0.99), ("lambda_", 0.95),
                    ("bootstrap_values", None), ("last_value", None)],
    "compute_vtrace": [("log_pi_target", REQUIRED), ("log_pi_behavior", REQUIRED),
                       ("values", REQUIRED), ("rewards", REQUIRED), ("terminateds", REQUIRED),
                       ("truncateds", None), ("gamma", 0.99), ("rho_bar", 1.0), ("c_bar", 1.0),
                       ("bootstrap_values", None), ("last_value", None)],
    "compute_retrace": [("action_probs_target", REQUIRED), ("action_probs_behavior", REQUIRED),
                        ("q_values", REQUIRED), ("next_q_values_all", REQUIRED),
                        ("actions", REQUIRED), ("rewards", REQUIRED), ("terminateds", REQUIRED),
                        ("truncateds", REQUIRED), ("gamma", REQUIRED), ("lambda_", 1.0),
                        ("c_bar", 1.0), ("rho_bar", 1.0)],
    "compute_lambda_returns": [("rewards", REQUIRED), ("next_values", REQUIRED),
                               ("terminateds", REQUIRED), ("truncateds", None), ("gamma", 0.99),
                               ("lambda_", 0.95), ("bootstrap_values", None)],
    "compute_discounted_returns": [("rewards", REQUIRED), ("terminateds", REQUIRED),
                                   ("truncateds", None), ("gamma", 0.99),
                                   ("bootstrap_values", None)],
    "compute_eligibility_traces": [("gradients", REQUIRED), ("dones", REQUIRED),
                                   ("gamma", REQUIRED), ("lambda_", REQUIRED),
                                   ("seed_values", None)],
    "compute_episodic_prefix_sum": [("inputs", REQUIRED), ("dones", REQUIRED),
                                    ("seed_values", None), ("boundary", "ends_at")],
}


def test_all_names():
    assert sorted(P.__all__) == sorted([*PAPER, "affine_scan", "compute_masked_gae"])
    assert all(callable(getattr(P, name)) for name in P.__all__)


@pytest.mark.parametrize("name", sorted(PAPER))
def test_positional_signature_is_the_papers(name):
    params = list(inspect.signature(getattr(P, name)).parameters.values())
    positional = [(p.name, p.default) for p in params
                  if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == PAPER[name]
    extras = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]
    assert "time_dim" in extras


@pytest.mark.parametrize("name", sorted(PAPER))
def test_reference_has_the_same_positional_signature(name):
    params = inspect.signature(getattr(ref, name)).parameters.values()
    positional = [(p.name, p.default) for p in params
                  if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional[: len(PAPER[name])] == PAPER[name]
