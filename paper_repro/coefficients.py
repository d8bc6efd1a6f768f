"""Scan coefficients (alpha, beta, carry) of the seven estimators, built with torch ops.

This is the torch form of what each Triton kernel builds in registers (SPEC.md section 1,
one semantics per algorithm): the CPU path of the public API runs these, and
proofs/ checks them against the symbolic derivations. Inputs are ``[N, T]`` (time last),
Retrace's action tensors ``[N, T, A]``; flags may be bool, integer or float. All
arithmetic happens in the dtype of ``rewards``-like inputs promoted to at least float32.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "Coefficients",
    "gae_coefficients",
    "vtrace_coefficients",
    "retrace_coefficients",
    "lambda_returns_coefficients",
    "discounted_returns_coefficients",
    "eligibility_traces_coefficients",
    "prefix_sum_coefficients",
    "window_next",
    "window_value",
]


class Coefficients(NamedTuple):
    """``reverse``: A_t = alpha_t + beta_t A_{t+1}, A_T = carry; else A_{t-1} seeds."""

    alpha: torch.Tensor  # [N, T]
    beta: torch.Tensor  # [N, T]
    carry: torch.Tensor  # [N]
    reverse: bool


def _acc_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _f(x, dtype):
    return None if x is None else x.to(dtype)


def _flags(terminateds, truncateds, dtype):
    term = terminateds.to(dtype)
    trunc = torch.zeros_like(term) if truncateds is None else truncateds.to(dtype)
    return term, trunc, torch.clamp(term + trunc, max=1.0)


def window_value(like, bootstrap_values, last_value):
    if last_value is not None:
        return last_value.to(like.dtype).reshape(like.shape[0])
    if bootstrap_values is not None:
        return bootstrap_values[:, -1].to(like.dtype)
    return torch.zeros(like.shape[0], dtype=like.dtype, device=like.device)


def window_next(x, trunc, boot, window):
    """``(1 - kappa_t) x_{t+1} + kappa_t b_t`` for t < T-1 and ``window`` at T-1; [N, T]."""
    interior = (1 - trunc[:, :-1]) * x[:, 1:]
    if boot is not None:
        interior = interior + trunc[:, :-1] * boot[:, :-1]
    return torch.cat([interior, window[:, None]], dim=1)


def gae_coefficients(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                     bootstrap_values=None, last_value=None):
    dt = _acc_dtype(rewards)
    r, v, b = rewards.to(dt), values.to(dt), _f(bootstrap_values, dt)
    term, trunc, done = _flags(terminateds, truncateds, dt)
    nu = window_next(v, trunc, b, window_value(r, b, last_value))
    alpha = r + gamma * (1 - term) * nu - v
    beta = gamma * lambda_ * (1 - done)
    return Coefficients(alpha, beta, torch.zeros_like(alpha[:, 0]), True)


def vtrace_ratios(log_pi_target, log_pi_behavior, rho_bar, c_bar, dtype):
    """Clipped importance weights ``(rho, c)`` of V-trace; [N, T] each."""
    ratio = torch.exp(log_pi_target.to(dtype) - log_pi_behavior.to(dtype))
    return torch.clamp(ratio, max=rho_bar), torch.clamp(ratio, max=c_bar)


def vtrace_coefficients(log_pi_target, log_pi_behavior, values, rewards, terminateds,
                        truncateds=None, gamma=0.99, rho_bar=1.0, c_bar=1.0,
                        bootstrap_values=None, last_value=None, lambda_=1.0):
    """Coefficients of ``Delta_t = vs_t - V_t``; the traces are ``lambda_ c_t``."""
    dt = _acc_dtype(rewards)
    r, v, b = rewards.to(dt), values.to(dt), _f(bootstrap_values, dt)
    term, trunc, done = _flags(terminateds, truncateds, dt)
    rho, c = vtrace_ratios(log_pi_target, log_pi_behavior, rho_bar, c_bar, dt)
    nu = window_next(v, trunc, b, window_value(r, b, last_value))
    alpha = rho * (r + gamma * (1 - term) * nu - v)
    beta = gamma * lambda_ * c * (1 - done)
    return Coefficients(alpha, beta, torch.zeros_like(alpha[:, 0]), True)


def retrace_ratio(action_probs_target, action_probs_behavior, actions, dtype):
    """``pi(a_t|s_t) / mu(a_t|s_t)``; [N, T]."""
    p = action_probs_target.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return p.to(dtype) / action_probs_behavior.to(dtype)


def retrace_coefficients(action_probs_target, action_probs_behavior, q_values, next_q_values_all,
                         actions, rewards, terminateds, truncateds, gamma, lambda_=1.0, c_bar=1.0,
                         rho_bar=1.0, next_action_probs_target=None):
    """Coefficients of ``Delta_t = Q_ret_t - Q_t``; same-row expectation unless the next policy
    ``next_action_probs_target`` is given."""
    dt = _acc_dtype(rewards)
    r, q = rewards.to(dt), q_values.to(dt)
    term, _, done = _flags(terminateds, truncateds, dt)
    weights = action_probs_target if next_action_probs_target is None else next_action_probs_target
    expect = (weights.to(dt) * next_q_values_all.to(dt)).sum(-1)
    c = lambda_ * torch.clamp(retrace_ratio(action_probs_target, action_probs_behavior, actions,
                                            dt), max=c_bar)
    c_next = torch.cat([c[:, 1:], torch.zeros_like(c[:, :1])], dim=1)
    alpha = r + gamma * (1 - term) * expect - q
    beta = gamma * c_next * (1 - done)
    return Coefficients(alpha, beta, torch.zeros_like(alpha[:, 0]), True)


def lambda_returns_coefficients(rewards, next_values, terminateds, truncateds=None, gamma=0.99,
                                lambda_=0.95, bootstrap_values=None):
    dt = _acc_dtype(rewards)
    r, n = rewards.to(dt), next_values.to(dt)
    term, trunc, done = _flags(terminateds, truncateds, dt)
    alpha = r + gamma * (1 - lambda_) * (1 - done) * n
    carry = torch.zeros_like(r[:, 0])
    if bootstrap_values is not None:
        b = bootstrap_values.to(dt)
        alpha = alpha + gamma * trunc * b
        carry = b[:, -1]
    return Coefficients(alpha, gamma * lambda_ * (1 - done), carry, True)


def discounted_returns_coefficients(rewards, terminateds, truncateds=None, gamma=0.99,
                                    bootstrap_values=None):
    dt = _acc_dtype(rewards)
    r = rewards.to(dt)
    term, trunc, done = _flags(terminateds, truncateds, dt)
    alpha, carry = r, torch.zeros_like(r[:, 0])
    if bootstrap_values is not None:
        b = bootstrap_values.to(dt)
        alpha = r + gamma * trunc * b
        carry = b[:, -1]
    return Coefficients(alpha, gamma * (1 - done), carry, True)


def _previous(d):
    """``d_{t-1}`` with ``d_{-1} = 0``; [N, T]."""
    return torch.cat([torch.zeros_like(d[:, :1]), d[:, :-1]], dim=1)


def _seed(like, seed_values):
    if seed_values is None:
        return torch.zeros_like(like[:, 0])
    return seed_values.to(like.dtype).reshape(like.shape[0])


def eligibility_traces_coefficients(gradients, dones, gamma, lambda_, seed_values=None):
    dt = _acc_dtype(gradients)
    g = gradients.to(dt)
    beta = gamma * lambda_ * (1 - _previous(dones.to(dt)))
    return Coefficients(g, beta, _seed(g, seed_values), False)


def prefix_sum_coefficients(inputs, dones, seed_values=None, boundary="ends_at"):
    dt = _acc_dtype(inputs)
    x, d = inputs.to(dt), dones.to(dt)
    beta = 1 - (_previous(d) if boundary == "ends_at" else d)
    return Coefficients(x, beta, _seed(x, seed_values), False)
