"""Vectorised PyTorch baselines of the seven estimators (the paper's section 4.3 opponents).

Every estimator is first reduced to its affine recurrence (``_<op>_terms``: alpha, beta,
boundary carry, direction, and a ``finish`` step for second outputs), then solved by one
of four scans:

* ``doubling`` -- the paper's linear-space Hillis-Steele scan (``compile(vec)`` once
  wrapped in :func:`compile_fresh`): T padded to a power of two with (a=0, b=0), then
  ``log2(T_pad)`` shift-and-combine steps; a backward carry enters as a sentinel column
  (a=carry, b=0), a forward seed as ``a_0 += b_0 * seed``.
* ``assoc_scan`` -- ``torch._higher_order_ops.associative_scan`` over (alpha, beta)
  (one Triton kernel once compiled on CUDA); ``None`` names when torch lacks it.
* ``loop`` -- the uncompiled sequential loop over t, vectorised over envs (CleanRL style;
  ``gae_loop`` builds delta inside the loop exactly as CleanRL does).
* ``numpy`` -- the same loop on the CPU with NumPy arrays in and out.

Functions are named ``<op>_<scan>`` and take the public API's positional arguments
(``paper_repro.compute_<op>``) for ``[N, T]`` tensors on any device; outputs have the
input dtype. Semantics follow SPEC.md appendix A, path by path.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

try:  # prototype higher-order op; absent from older torch builds
    from torch._higher_order_ops.associative_scan import associative_scan as _torch_assoc_scan
except ImportError:  # pragma: no cover - depends on the torch build
    _torch_assoc_scan = None

ASSOC_SCAN_AVAILABLE = _torch_assoc_scan is not None
OPS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
       "eligibility_traces", "prefix_sum")


def _shift_left(x, fill=None):
    """y[:, t] = x[:, t+1]; the last column is ``fill`` ([N]) or 0."""
    if fill is None:
        return F.pad(x[:, 1:], (0, 1))
    return torch.cat([x[:, 1:], fill.reshape(-1, 1).to(x.dtype)], dim=1)


def _shift_right(x):
    """y[:, t] = x[:, t-1]; the first column is 0."""
    return F.pad(x[:, :-1], (1, 0))


def _last_column(col, like):
    """[N, T] zeros with ``col`` ([N]) in the last column."""
    return F.pad(col.reshape(-1, 1).to(like.dtype), (like.shape[1] - 1, 0))


def _window_value(bootstrap_values, last_value):
    """The continuation value V(s_T) of the no-truncation paths, or None (= 0)."""
    if last_value is not None:
        return last_value
    return None if bootstrap_values is None else bootstrap_values[:, -1]


def _identity(acc):
    return acc


# ---- coefficient builders: (alpha, beta, carry, reverse, finish) -------------------------

def _gae_terms(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
               bootstrap_values=None, last_value=None):
    if truncateds is None:
        nu = _shift_left(values, _window_value(bootstrap_values, last_value))
        done = terminateds
    else:
        # select semantics: b_t at truncated steps and at t = T-1, V_{t+1} elsewhere
        pick_b = F.pad(truncateds[:, :-1], (0, 1), value=1.0) == 1.0
        b = 0.0 if bootstrap_values is None else bootstrap_values
        nu = torch.where(pick_b, b, _shift_left(values))
        done = torch.clamp(terminateds + truncateds, max=1.0)
    alpha = rewards + gamma * (1.0 - terminateds) * nu - values
    return alpha, gamma * lambda_ * (1.0 - done), None, True, _identity


def _vtrace_terms(log_pi_target, log_pi_behavior, values, rewards, terminateds,
                  truncateds=None, gamma=0.99, rho_bar=1.0, c_bar=1.0,
                  bootstrap_values=None, last_value=None):
    ratio = torch.exp(log_pi_target - log_pi_behavior)
    rho = torch.clamp(ratio, max=rho_bar)
    c = torch.clamp(ratio, max=c_bar)
    if truncateds is None:
        window = _window_value(bootstrap_values, last_value)

        def next_of(x):
            return _shift_left(x, window)
        done = terminateds
    else:
        # additive semantics: V_{t+1} only at interior non-truncated steps, plus b_t
        if bootstrap_values is not None:
            extra = bootstrap_values
        elif last_value is not None:
            extra = _last_column(last_value, values)
        else:
            extra = None
        keep = (truncateds == 0.0).to(values.dtype)

        def next_of(x):
            shifted = _shift_left(x) * keep
            return shifted if extra is None else shifted + extra
        done = torch.clamp(terminateds + truncateds, max=1.0)
    live = gamma * (1.0 - terminateds)
    alpha = rho * (rewards + live * next_of(values) - values)

    def finish(delta):
        targets = delta + values
        return targets, rho * (rewards + live * next_of(targets) - values)
    return alpha, gamma * c * (1.0 - done), None, True, finish


def _retrace_terms(action_probs_target, action_probs_behavior, q_values, next_q_values_all,
                   actions, rewards, terminateds, truncateds, gamma, lambda_=1.0, c_bar=1.0,
                   rho_bar=1.0):
    # the paper's same-row expectation: pi(.|s_t) weights Q(s_{t+1}, .)
    expected_next = (action_probs_target * next_q_values_all).sum(-1)
    p_taken = torch.gather(action_probs_target, -1, actions.unsqueeze(-1)).squeeze(-1)
    ratio = p_taken / action_probs_behavior
    rho = torch.clamp(ratio, max=rho_bar)
    c_next = _shift_left(lambda_ * torch.clamp(ratio, max=c_bar))
    done = torch.clamp(terminateds + truncateds, max=1.0)
    live = gamma * (1.0 - terminateds)
    alpha = rewards + live * expected_next - q_values

    def finish(delta):
        targets = delta + q_values
        return targets, rho * (rewards + live * _shift_left(targets) - q_values)
    return alpha, gamma * c_next * (1.0 - done), None, True, finish


def _lambda_returns_terms(rewards, next_values, terminateds, truncateds=None, gamma=0.99,
                          lambda_=0.95, bootstrap_values=None):
    if truncateds is None:
        alpha = rewards + gamma * (1.0 - lambda_) * (1.0 - terminateds) * next_values
        done = terminateds
    else:
        done = torch.clamp(terminateds + truncateds, max=1.0)
        alpha = rewards + gamma * (1.0 - lambda_) * (1.0 - done) * next_values
        if bootstrap_values is not None:
            alpha = alpha + gamma * truncateds * bootstrap_values
    carry = None if bootstrap_values is None else bootstrap_values[:, -1]
    return alpha, gamma * lambda_ * (1.0 - done), carry, True, _identity


def _discounted_returns_terms(rewards, terminateds, truncateds=None, gamma=0.99,
                              bootstrap_values=None):
    alpha, done = rewards, terminateds
    if truncateds is not None:
        done = torch.clamp(terminateds + truncateds, max=1.0)
        if bootstrap_values is not None:
            alpha = rewards + gamma * truncateds * bootstrap_values
    carry = None if bootstrap_values is None else bootstrap_values[:, -1]
    return alpha, gamma * (1.0 - done), carry, True, _identity


def _eligibility_traces_terms(gradients, dones, gamma, lambda_, seed_values=None):
    beta = gamma * lambda_ * (1.0 - _shift_right(dones))
    return gradients, beta, seed_values, False, _identity


def _prefix_sum_terms(inputs, dones, seed_values=None, boundary="ends_at"):
    cut = _shift_right(dones) if boundary == "ends_at" else dones
    return inputs, 1.0 - cut, seed_values, False, _identity


_TERMS = {op: globals()[f"_{op}_terms"] for op in OPS}


# ---- scans --------------------------------------------------------------------------------

def doubling_scan(alpha, beta, reverse=True):
    """Linear-space Hillis-Steele scan of ``A_t = alpha_t + beta_t * A_{t+-1}`` (zero carry).

    Args:
        alpha, beta: ``[N, T]`` coefficients.
        reverse: True for the backward recurrence (``A_{t+1}``), False for the forward one.
    Returns:
        ``[N, T]`` tensor ``A``. T is padded to the next power of two with (a=0, b=0) and
        solved in ``log2(T_pad)`` shift-and-combine steps, each a full HBM round trip.
    """
    seq_len = alpha.shape[-1]
    padded = 1 << max(seq_len - 1, 0).bit_length()
    a = F.pad(alpha, (0, padded - seq_len))
    b = F.pad(beta, (0, padded - seq_len))
    stride = 1
    while stride < padded:
        # shift by `stride` towards the boundary, zeroing entries shifted in from outside
        if reverse:
            a_far, b_far = F.pad(a[:, stride:], (0, stride)), F.pad(b[:, stride:], (0, stride))
        else:
            a_far, b_far = F.pad(a[:, :-stride], (stride, 0)), F.pad(b[:, :-stride], (stride, 0))
        a, b = a + b * a_far, b * b_far
        stride *= 2
    return a[:, :seq_len]


def _doubling_solve(alpha, beta, carry, reverse):
    if carry is None:
        return doubling_scan(alpha, beta, reverse)
    carry = carry.reshape(-1, 1).to(alpha.dtype)
    if reverse:
        # sentinel column (a = carry, b = 0) after the window end, dropped afterwards
        alpha = torch.cat([alpha, carry], dim=1)
        return doubling_scan(alpha, F.pad(beta, (0, 1)), True)[:, :-1]
    alpha = torch.cat([alpha[:, :1] + beta[:, :1] * carry, alpha[:, 1:]], dim=1)
    return doubling_scan(alpha, beta, False)


def _affine_combine(earlier, later):
    """(alpha, beta) of ``later`` applied after ``earlier`` (the one nearer the carry)."""
    return later[0] + later[1] * earlier[0], earlier[1] * later[1]


def _assoc_solve(alpha, beta, carry, reverse):
    if _torch_assoc_scan is None:
        raise RuntimeError("torch._higher_order_ops.associative_scan is not in this torch build")
    # 'pointwise' lowers to one Triton scan kernel but needs CUDA tensors
    mode = "pointwise" if alpha.is_cuda else "generic"
    acc, prod = _torch_assoc_scan(_affine_combine, (alpha, beta), dim=1, reverse=reverse,
                                  combine_mode=mode)
    return acc if carry is None else acc + prod * carry.reshape(-1, 1).to(acc.dtype)


def _time_order(seq_len, reverse):
    return range(seq_len - 1, -1, -1) if reverse else range(seq_len)


def _loop_solve(alpha, beta, carry, reverse):
    out = torch.empty_like(alpha)
    acc = torch.zeros_like(alpha[:, 0]) if carry is None else carry.to(alpha.dtype)
    for t in _time_order(alpha.shape[1], reverse):
        acc = alpha[:, t] + beta[:, t] * acc
        out[:, t] = acc
    return out


def _numpy_solve(alpha, beta, carry, reverse):
    a, b = alpha.numpy(), beta.numpy()
    out = np.empty_like(a)
    acc = np.zeros_like(a[:, 0]) if carry is None else carry.numpy().astype(a.dtype)
    for t in _time_order(a.shape[1], reverse):
        acc = a[:, t] + b[:, t] * acc
        out[:, t] = acc
    return torch.from_numpy(out)


def _build(op, kind, solve):
    terms = _TERMS[op]

    @functools.wraps(terms)
    def estimator(*args, **kwargs):
        alpha, beta, carry, reverse, finish = terms(*args, **kwargs)
        return finish(solve(alpha, beta, carry, reverse))

    estimator.__name__ = estimator.__qualname__ = f"{op}_{kind}"
    estimator.__doc__ = (f"{op} through the {kind} scan; arguments and outputs as the public "
                         f"API's estimator ([N, T] tensors, any device).")
    return estimator


def _numpy_version(op):
    torch_version = _build(op, "numpy", _numpy_solve)

    def estimator(*args, **kwargs):
        def to_torch(x):
            return torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        out = torch_version(*map(to_torch, args), **{k: to_torch(v) for k, v in kwargs.items()})
        return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()

    functools.update_wrapper(estimator, torch_version)
    estimator.__doc__ = (f"{op} as a sequential CPU loop over t with NumPy arrays (or CPU tensors)"
                         f" in and NumPy arrays out; arguments as the public API's estimator.")
    return estimator


for _op in OPS:
    globals()[f"{_op}_doubling"] = _build(_op, "doubling", _doubling_solve)
    globals()[f"{_op}_loop"] = _build(_op, "loop", _loop_solve)
    globals()[f"{_op}_numpy"] = _numpy_version(_op)
    globals()[f"{_op}_assoc_scan"] = (_build(_op, "assoc_scan", _assoc_solve)
                                      if ASSOC_SCAN_AVAILABLE else None)


def gae_loop(rewards, values, terminateds, truncateds=None, gamma=0.99, lambda_=0.95,
             bootstrap_values=None, last_value=None):
    """GAE as CleanRL writes it: delta and the trace built inside an uncompiled loop over t.

    Args and output as ``paper_repro.compute_gae`` (``[N, T]`` tensors, any device); about
    eight tiny kernel launches per time step.
    """
    seq_len = rewards.shape[1]
    advantages = torch.empty_like(rewards)
    last_gae = torch.zeros_like(rewards[:, 0])
    if truncateds is None:
        window = _window_value(bootstrap_values, last_value)
    else:
        window = None if bootstrap_values is None else bootstrap_values[:, -1]
    for t in reversed(range(seq_len)):
        if t == seq_len - 1:
            next_value = 0.0 if window is None else window
        elif truncateds is not None and bootstrap_values is not None:
            next_value = torch.where(truncateds[:, t] == 1.0, bootstrap_values[:, t],
                                     values[:, t + 1])
        elif truncateds is not None:
            next_value = values[:, t + 1] * (truncateds[:, t] != 1.0)
        else:
            next_value = values[:, t + 1]
        not_terminal = 1.0 - terminateds[:, t]
        done = terminateds[:, t] if truncateds is None else terminateds[:, t] + truncateds[:, t]
        delta = rewards[:, t] + gamma * next_value * not_terminal - values[:, t]
        last_gae = delta + gamma * lambda_ * torch.clamp(1.0 - done, min=0.0) * last_gae
        advantages[:, t] = last_gae
    return advantages


def masked_gae_loop(rewards, values, mask, gamma, lambda_, last_value=None):
    """Masked GAE as verl writes it (``compute_gae_advantage_return``): an uncompiled loop over
    t whose masked steps pass the next value and the advantage through.

    Args and output as ``paper_repro.compute_masked_gae`` (``[N, T]``, any device).
    """
    mask = mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0]) if last_value is None else last_value
    last_gae = torch.zeros_like(values[:, 0])
    advantages = torch.empty_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        step = delta + gamma * lambda_ * last_gae
        next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        last_gae = step * mask[:, t] + (1 - mask[:, t]) * last_gae
        advantages[:, t] = last_gae
    return advantages


def compile_fresh(fn, **compile_kwargs):
    """``torch.compile(fn)`` after ``torch._dynamo.reset()``: call once per shape.

    One compiled object reused across shapes returned silently wrong results on torch 2.11
    (and 2.4.1, PAPER.md 4.5), so each shape gets a fresh compilation with static shapes.
    Build constant tensors outside ``fn`` and pass them in.
    """
    torch._dynamo.reset()
    compile_kwargs.setdefault("dynamic", False)
    return torch.compile(fn, **compile_kwargs)


__all__ = ["ASSOC_SCAN_AVAILABLE", "OPS", "compile_fresh", "doubling_scan"] + [
    f"{op}_{kind}" for op in OPS for kind in ("doubling", "assoc_scan", "loop", "numpy")]
