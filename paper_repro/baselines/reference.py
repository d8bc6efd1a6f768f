"""Float64 sequential references of the seven estimators: the oracle for every test.

Same names and positional signatures as the public API (SPEC.md section 1), written as
plain loops over time from SPEC.md Appendix A, independent of the scan machinery. Inputs
are ``[N, T]`` tensors (Retrace: ``[N, T, A]`` for the action tensors) on any device;
outputs are float64 CPU tensors. Flags may be bool, integer or float.

One semantics per algorithm: bootstrap values are read only at truncated steps (weighted
by the truncation flag) and at the last step.
"""
from __future__ import annotations

import torch

__all__ = [
    "compute_gae",
    "compute_vtrace",
    "compute_retrace",
    "compute_lambda_returns",
    "compute_discounted_returns",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "compute_masked_gae",
    "compute_puff_advantage",
    "backward_recurrence",
    "forward_recurrence",
]


def _f64(x):
    return None if x is None else torch.as_tensor(x).to("cpu", torch.float64)


def backward_recurrence(alpha, beta, carry):
    """``A_t = alpha_t + beta_t * A_{t+1}`` with ``A_T = carry``; [N, T] -> [N, T]."""
    out = torch.empty_like(alpha)
    acc = carry.clone()
    for t in range(alpha.shape[-1] - 1, -1, -1):
        acc = alpha[:, t] + beta[:, t] * acc
        out[:, t] = acc
    return out


def compute_puff_advantage(values, rewards, terminals, ratio, advantages, gamma, gae_lambda,
                           vtrace_rho_clip, vtrace_c_clip):
    """PufferLib 3.0's advantage loop: the reward and terminal of step t at t + 1, V-trace's
    clipped weights, the last column that of ``advantages`` (never written)."""
    v, r, d, w = _f64(values), _f64(rewards), _f64(terminals), _f64(ratio)
    out = _f64(advantages).clone()
    acc = torch.zeros(v.shape[0], dtype=torch.float64)
    for t in range(v.shape[1] - 2, -1, -1):
        live = 1 - d[:, t + 1]
        rho, c = w[:, t].clamp(max=vtrace_rho_clip), w[:, t].clamp(max=vtrace_c_clip)
        acc = rho * (r[:, t + 1] + gamma * live * v[:, t + 1] - v[:, t]) + \
            gamma * gae_lambda * c * live * acc
        out[:, t] = acc
    return out


def forward_recurrence(alpha, beta, seed):
    """``A_t = alpha_t + beta_t * A_{t-1}`` with ``A_{-1} = seed``; [N, T] -> [N, T]."""
    out = torch.empty_like(alpha)
    acc = seed.clone()
    for t in range(alpha.shape[-1]):
        acc = alpha[:, t] + beta[:, t] * acc
        out[:, t] = acc
    return out


def _flags(terminateds, truncateds):
    term = _f64(terminateds)
    trunc = torch.zeros_like(term) if truncateds is None else _f64(truncateds)
    done = torch.clamp(term + trunc, max=1.0)
    return term, trunc, done


def _window_value(n, bootstrap_values, last_value):
    if last_value is not None:
        return _f64(last_value).reshape(n)
    if bootstrap_values is not None:
        return _f64(bootstrap_values)[:, -1].clone()
    return torch.zeros(n, dtype=torch.float64)


def _next_state_value(x, trunc, boot, window):
    """nu_t = (1 - kappa_t) x_{t+1} + kappa_t b_t for t < T-1; the window value at T-1."""
    nu = torch.empty_like(x)
    nu[:, :-1] = (1 - trunc[:, :-1]) * x[:, 1:] + trunc[:, :-1] * boot[:, :-1]
    nu[:, -1] = window
    return nu


def compute_gae(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
                bootstrap_values=None, last_value=None):
    r, v = _f64(rewards), _f64(values)
    n = r.shape[0]
    term, trunc, done = _flags(terminateds, truncateds)
    boot = torch.zeros_like(r) if bootstrap_values is None else _f64(bootstrap_values)
    nu = _next_state_value(v, trunc, boot, _window_value(n, bootstrap_values, last_value))
    adv = torch.empty_like(r)
    acc = torch.zeros(n, dtype=torch.float64)
    for t in range(r.shape[1] - 1, -1, -1):
        delta = r[:, t] + gamma * (1 - term[:, t]) * nu[:, t] - v[:, t]
        acc = delta + gamma * lambda_ * (1 - done[:, t]) * acc
        adv[:, t] = acc
    return adv


def compute_vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds=None,
                   gamma=0.99, rho_bar=1.0, c_bar=1.0, bootstrap_values=None, last_value=None,
                   lambda_=1.0):
    r, v = _f64(rewards), _f64(values)
    n, T = r.shape
    term, trunc, done = _flags(terminateds, truncateds)
    ratio = torch.exp(_f64(log_pi_target) - _f64(log_pi_behavior))
    rho = torch.clamp(ratio, max=rho_bar)
    c = lambda_ * torch.clamp(ratio, max=c_bar)
    boot = torch.zeros_like(r) if bootstrap_values is None else _f64(bootstrap_values)
    window = _window_value(n, bootstrap_values, last_value)
    nu = _next_state_value(v, trunc, boot, window)
    vs = torch.empty_like(r)
    acc = torch.zeros(n, dtype=torch.float64)
    for t in range(T - 1, -1, -1):
        delta = rho[:, t] * (r[:, t] + gamma * (1 - term[:, t]) * nu[:, t] - v[:, t])
        acc = delta + gamma * c[:, t] * (1 - done[:, t]) * acc
        vs[:, t] = acc + v[:, t]
    next_target = _next_state_value(vs, trunc, boot, window)
    adv = rho * (r + gamma * (1 - term) * next_target - v)
    return vs, adv


def compute_retrace(action_probs_target, action_probs_behavior, q_values, next_q_values_all,
                    actions, rewards, terminateds, truncateds, gamma, lambda_=1.0, c_bar=1.0,
                    rho_bar=1.0, next_action_probs_target=None):
    pi = _f64(action_probs_target)
    mu, q, r = _f64(action_probs_behavior), _f64(q_values), _f64(rewards)
    n, T = r.shape
    a = torch.as_tensor(actions).to("cpu", torch.int64)
    term, trunc, done = _flags(terminateds, truncateds)
    # Paper parity: Q(s_{t+1}, .) weighted by the row-t policy unless the next policy is given.
    weights = pi if next_action_probs_target is None else _f64(next_action_probs_target)
    expect = (weights * _f64(next_q_values_all)).sum(-1)
    ratio = pi.gather(-1, a.unsqueeze(-1)).squeeze(-1) / mu
    rho = torch.clamp(ratio, max=rho_bar)
    c = lambda_ * torch.clamp(ratio, max=c_bar)
    q_ret = torch.empty_like(r)
    acc = torch.zeros(n, dtype=torch.float64)
    for t in range(T - 1, -1, -1):
        c_next = c[:, t + 1] if t + 1 < T else torch.zeros(n, dtype=torch.float64)
        alpha = r[:, t] + gamma * (1 - term[:, t]) * expect[:, t] - q[:, t]
        acc = alpha + gamma * c_next * (1 - done[:, t]) * acc
        q_ret[:, t] = acc + q[:, t]
    q_ret_next = torch.zeros_like(r)
    q_ret_next[:, :-1] = q_ret[:, 1:]
    adv = rho * (r + gamma * (1 - term) * q_ret_next - q)
    return q_ret, adv


def compute_lambda_returns(rewards, next_values, terminateds, truncateds=None, gamma=0.99,
                           lambda_=0.95, bootstrap_values=None):
    r, nv = _f64(rewards), _f64(next_values)
    n, T = r.shape
    term, trunc, done = _flags(terminateds, truncateds)
    boot = torch.zeros_like(r) if bootstrap_values is None else _f64(bootstrap_values)
    out = torch.empty_like(r)
    acc = boot[:, -1].clone()
    for t in range(T - 1, -1, -1):
        one_step = gamma * (1 - lambda_) * (1 - done[:, t]) * nv[:, t]
        acc = r[:, t] + one_step + gamma * trunc[:, t] * boot[:, t] + gamma * lambda_ * (
            1 - done[:, t]) * acc
        out[:, t] = acc
    return out


def compute_discounted_returns(rewards, terminateds, truncateds=None, gamma=0.99,
                               bootstrap_values=None):
    r = _f64(rewards)
    n, T = r.shape
    term, trunc, done = _flags(terminateds, truncateds)
    boot = torch.zeros_like(r) if bootstrap_values is None else _f64(bootstrap_values)
    out = torch.empty_like(r)
    acc = boot[:, -1].clone()
    for t in range(T - 1, -1, -1):
        acc = r[:, t] + gamma * trunc[:, t] * boot[:, t] + gamma * (1 - done[:, t]) * acc
        out[:, t] = acc
    return out


def compute_eligibility_traces(gradients, dones, gamma, lambda_, seed_values=None):
    g = _f64(gradients)
    n, T = g.shape
    d = _f64(dones)
    out = torch.empty_like(g)
    acc = torch.zeros(n, dtype=torch.float64) if seed_values is None else _f64(seed_values)
    for t in range(T):
        prev_done = d[:, t - 1] if t > 0 else torch.zeros(n, dtype=torch.float64)
        acc = g[:, t] + gamma * lambda_ * (1 - prev_done) * acc
        out[:, t] = acc
    return out


def compute_episodic_prefix_sum(inputs, dones, seed_values=None, boundary="ends_at"):
    if boundary not in ("ends_at", "starts_at"):
        raise ValueError(f"boundary must be 'ends_at' or 'starts_at', got {boundary!r}")
    x = _f64(inputs)
    n, T = x.shape
    d = _f64(dones)
    out = torch.empty_like(x)
    acc = torch.zeros(n, dtype=torch.float64) if seed_values is None else _f64(seed_values)
    for t in range(T):
        if boundary == "starts_at":
            keep = 1 - d[:, t]
        else:
            keep = 1 - d[:, t - 1] if t > 0 else torch.ones(n, dtype=torch.float64)
        acc = x[:, t] + keep * acc
        out[:, t] = acc
    return out


def compute_masked_gae(rewards, values, mask, gamma, lambda_, last_value=None):
    """Masked steps skipped, as verl's GAE loop: a step's TD error and trace enter only where it
    is unmasked; the next value and the advantage pass through masked steps."""
    r, v, m = _f64(rewards), _f64(values), _f64(mask)
    n, T = r.shape
    next_value = torch.zeros(n, dtype=torch.float64) if last_value is None else _f64(last_value)
    acc = torch.zeros(n, dtype=torch.float64)
    out = torch.empty_like(r)
    for t in range(T - 1, -1, -1):
        step = r[:, t] + gamma * next_value - v[:, t] + gamma * lambda_ * acc
        next_value = m[:, t] * v[:, t] + (1 - m[:, t]) * next_value
        acc = m[:, t] * step + (1 - m[:, t]) * acc
        out[:, t] = acc
    return out

