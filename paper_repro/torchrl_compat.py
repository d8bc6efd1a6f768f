"""TorchRL's functional value estimators (``torchrl.objectives.value.functional``) with their
names, signatures and readings, each one engine scan: swap the import and keep the call.

TorchRL reads ``next_state_value[t]`` at every step (ours reads ``values[t + 1]`` inside an
episode, docs/conventions.md), so these are built from :func:`paper_repro.affine_scan` and
elementwise torch, not from the estimators. Unlike TorchRL's ``vec_`` versions, nothing is
cut off after K filter taps: the ``vec_`` names are the same exact functions.
"""
from __future__ import annotations

import torch

from paper_repro.kernels import _launch as L
from paper_repro.kernels.affine_scan import affine_scan

__all__ = ["generalized_advantage_estimate", "vec_generalized_advantage_estimate",
           "td_lambda_return_estimate", "vec_td_lambda_return_estimate",
           "vtrace_advantage_estimate"]


def _flags(reward, done, terminated):
    """``1 - done`` and ``1 - terminated`` in the reward's dtype (``terminated`` defaults to
    ``done``), after TorchRL's shape check."""
    for name, x in (("done", done), ("terminated", terminated)):
        L.check_tensor(name, x, like=reward, flag=True, optional=name == "terminated")
    terminated = done if terminated is None else terminated
    return 1 - done.to(reward.dtype), 1 - terminated.to(reward.dtype)


def generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, done,
                                   terminated=None, *, time_dim=-2):
    """``(advantage, value_target)``: ``A_t = r_t + gamma (1 - term_t) V'_t - V_t + gamma
    lambda (1 - done_t) A_{t+1}``, ``A_T = 0``, ``V'_t = next_state_value[t]``; the target is
    ``A + V``. Tensors ``[*B, T, *F]`` with time on ``time_dim``; ``gamma`` and ``lmbda``
    scalars or tensors that broadcast to them."""
    L.check_tensor("state_value", state_value, like=reward)
    L.check_tensor("next_state_value", next_state_value, like=reward)
    not_done, not_term = _flags(reward, done, terminated)
    delta = reward + gamma * not_term * next_state_value - state_value
    advantage = affine_scan(delta, torch.broadcast_to(gamma * lmbda * not_done, delta.shape),
                            time_dim=time_dim)
    return advantage, advantage + state_value


def td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated=None,
                              rolling_gamma=None, *, time_dim=-2):
    """TD(lambda) returns: ``G_t = r_t + gamma_t ((1 - lambda_t) V'_t + lambda_t g_t)`` with
    ``V'_t = (1 - term_t) next_state_value[t]``, ``g_t = V'_t`` where step ``t`` is done and
    ``G_{t+1}`` elsewhere, ``G_T`` read as ``V'_{T-1}``. ``gamma``, ``lmbda``: scalars or
    per-step tensors, each tied to its own step (``rolling_gamma=True``, TorchRL's default;
    ``False`` is not a scan and is refused)."""
    if rolling_gamma is False:
        raise ValueError("rolling_gamma=False (each gamma held for the rest of the trajectory) "
                         "is not a first-order recurrence; pass per-step gammas instead")
    L.check_tensor("next_state_value", next_state_value, like=reward)
    not_done, not_term = _flags(reward, done, terminated)
    nv = not_term * next_state_value
    done_ = 1 - not_done
    alpha = reward + gamma * ((1 - lmbda) * nv + lmbda * done_ * nv)
    beta = torch.broadcast_to(gamma * lmbda * not_done, alpha.shape)
    axis = L.time_axis(reward, time_dim)
    return affine_scan(alpha, beta, initial=nv.select(axis, -1), time_dim=time_dim)


def vtrace_advantage_estimate(gamma, log_pi, log_mu, state_value, next_state_value, reward,
                              done, terminated=None, rho_thresh=1.0, c_thresh=1.0, *,
                              time_dim=-2):
    """``(advantage, vs)`` of V-trace: ``vs_t - V_t = rho_t (r_t + gamma (1 - term_t) V'_t -
    V_t) + gamma (1 - done_t) c_t (vs_{t+1} - V_{t+1})``, ``rho``, ``c`` the clipped ratios
    ``exp(log_pi - log_mu)``; the advantage bootstraps from ``vs_{t+1}``, or from
    ``next_state_value[t]`` where step ``t`` is done and at the last step."""
    for name, x in (("log_pi", log_pi), ("log_mu", log_mu), ("state_value", state_value),
                    ("next_state_value", next_state_value)):
        L.check_tensor(name, x, like=reward)
    not_done, not_term = _flags(reward, done, terminated)
    ratio = (log_pi - log_mu).exp()
    rho, c = ratio.clamp_max(rho_thresh), ratio.clamp_max(c_thresh)
    delta = rho * (reward + gamma * not_term * next_state_value - state_value)
    vs = affine_scan(delta, gamma * not_done * c, time_dim=time_dim) + state_value
    axis = L.time_axis(reward, time_dim)
    following = torch.cat([vs.narrow(axis, 1, vs.shape[axis] - 1),
                           next_state_value.narrow(axis, vs.shape[axis] - 1, 1)], axis)
    following = not_done * following + (1 - not_done) * next_state_value
    return rho * (reward + gamma * not_term * following - state_value), vs


vec_generalized_advantage_estimate = generalized_advantage_estimate
vec_td_lambda_return_estimate = td_lambda_return_estimate
