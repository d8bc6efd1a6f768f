"""Closed-form gradients of the seven estimators and the bare engine (proofs/closed_form.py).

Where beta holds only flags and scalars, the adjoint of the scan is itself one of the engine's
estimators: a backward scan's, ``g_t = u_t + beta_{t-1} g_{t-1}``, is an eligibility trace of
the upstream gradient ``u``; a forward scan's, ``g_t = u_t + beta_{t+1} g_{t+1}``, a discounted
return. Each input's gradient is then a few elementwise ops on ``g``, where the general rule
(``autograd._backward``, the chain through ``coefficients.py`` by ``torch.func.vjp``) takes
10-28 torch ops and most of the backward's host time. V-trace's beta holds its clipped ratios
and Retrace's its traces, so their adjoints are the engine's scan of ``u`` with beta one step on
(``autograd.scan_adjoint``). A flag that needs its gradient (a predicted continuation given as a
float flag) takes the general rule. Where the kernels run, the elementwise work is fused:
GAE's and the returns' input gradients in one kernel after the scan (``returns_grad``), whose
adjoint scan reads the terminations and truncations apart (two launches a backward),
V-trace's and Retrace's in one kernel before it and one after (``vtrace_grad``,
``retrace_grad``).

Each rule takes ``[B, T]`` rows (per-row inputs as ``[B]``), the upstream gradients and the op's
outputs as rows in the accumulation dtype, the op's scalars and the names of the inputs whose
gradients are needed; it returns those gradients by name, or None where it does not apply. The
bare engine's rule is the adjoint itself (``autograd.scan_adjoint``), without the general rule's
``torch.func.vjp`` of the identity.
"""
from __future__ import annotations

import torch

from paper_repro.coefficients import window_next
from paper_repro.kernels import _launch as L
from paper_repro.kernels import retrace_grad, returns_grad, vtrace_grad
from paper_repro.kernels.affine_scan import scan_rows
from paper_repro.kernels.autograd import scan_adjoint
from paper_repro.kernels.eligibility_traces import reset_sum
from paper_repro.kernels.lambda_returns import _returns, decayed_returns

ENABLED = True  # False: every op takes the general rule (tests and the backward benchmark)
FLAGS = {"terminateds", "truncateds", "dones", "actions"}


def _done(term, trunc, acc):
    """``min(term + trunc, 1)`` as the kernels read it: bool where both flags are bool."""
    if trunc is None:
        return term if term.dtype == torch.bool else torch.clamp(term.to(acc), max=1.0)
    if term.dtype == torch.bool and trunc.dtype == torch.bool:
        return term | trunc
    return torch.clamp(term.to(acc) + trunc.to(acc), max=1.0)


def _trace(u, term, trunc, decay, acc):
    """The adjoint of a backward scan with ``beta_t = decay (1 - done_t)``, ``done`` the join
    of ``term`` and ``trunc`` (None: ``term`` alone): ``g_t = u_t + decay (1 - done_{t-1})
    g_{t-1}``, an eligibility trace of ``u`` in ``acc``; the kernel joins the flags as it reads
    them."""
    return reset_sum(u, term, None, decay, 1.0, -1, trunc, acc)


def _keep(done, acc):
    return 1.0 - done.to(acc)


def _one_step_on(d):
    """``[B, T]`` flags ``d_{t+1}`` at step t, 0 at the last, laid out as ``d``."""
    out = torch.empty_like(d)
    out[:, :-1] = d[:, 1:]
    out[:, -1] = 0
    return out


def gae(rows, grads, outs, s, wanted):
    """``A = scan(r + gamma (1 - term) nu - V, gamma lambda (1 - done))``: ``dr = g``,
    ``dV_t = -g_t + w_{t-1} (1 - trunc_{t-1})``, ``db_t = w_t trunc_t`` (t < T-1) and the window
    value's ``w_{T-1}``, with ``w = gamma (1 - term) g`` (never formed whole)."""
    if wanted & FLAGS:
        return None
    u = grads[0]
    acc, term, trunc = L.acc_dtype(u.dtype), rows["terminateds"], rows["truncateds"]
    gamma = s["gamma"]
    g = _trace(u, term, trunc, gamma * s["lambda_"], acc)
    if L.use_triton(u):
        return returns_grad.gradients(rows, g, s, wanted, True, 1.0)
    keep = _keep(term, acc)
    got = {"rewards": g}
    if "values" in wanted:
        inside = keep[:, :-1] if trunc is None else keep[:, :-1] * _keep(trunc[:, :-1], acc)
        dv = torch.neg(g)
        dv[:, 1:].addcmul_(inside, g[:, :-1], value=gamma)
        got["values"] = dv
    if "bootstrap_values" in wanted:
        db = torch.zeros_like(g) if trunc is None else trunc.to(acc) * keep * g * gamma
        db[:, -1] = 0.0 if rows["last_value"] is not None else gamma * keep[:, -1] * g[:, -1]
        got["bootstrap_values"] = db
    if "last_value" in wanted:
        got["last_value"] = gamma * keep[:, -1] * g[:, -1]
    return got


def returns(rows, grads, outs, s, wanted):
    """``G = scan(r + gamma (1 - lambda)(1 - done) n + gamma trunc b, gamma lambda (1 - done),
    b_{T-1})`` (discounted returns: lambda = 1, no n): ``dr = g``,
    ``dn = gamma (1 - lambda)(1 - done) g``, ``db = gamma trunc g`` plus the carry's
    ``beta_{T-1} g_{T-1}``."""
    if wanted & FLAGS:
        return None
    u = grads[0]
    acc, term, trunc = L.acc_dtype(u.dtype), rows["terminateds"], rows["truncateds"]
    lam = s["lambda_"] if rows["next_values"] is not None else 1.0
    g = _trace(u, term, trunc, s["gamma"] * lam, acc)
    if L.use_triton(u):
        return returns_grad.gradients(rows, g, s, wanted, False, lam)
    done = _done(term, trunc, acc)
    got = {"rewards": g}
    if "next_values" in wanted:
        got["next_values"] = s["gamma"] * (1.0 - lam) * _keep(done, acc) * g
    if "bootstrap_values" in wanted:
        db = torch.zeros_like(g) if trunc is None else s["gamma"] * trunc.to(acc) * g
        db[:, -1] += s["gamma"] * lam * _keep(done[:, -1], acc) * g[:, -1]
        got["bootstrap_values"] = db
    return got


def decayed_sum(rows, grads, outs, s, wanted):
    """``z = forward scan(x, beta, seed)``, ``beta_t = k (1 - d_{t-1})`` (ends at, d_{-1} = 0)
    or ``1 - d_t`` (starts at): ``g`` is the backward scan of ``u`` with ``beta_{t+1}``,
    ``dx = g``, ``dseed = beta_0 g_0``."""
    if wanted & FLAGS:
        return None
    u, d, k = grads[0], rows["dones"], s["decay"]
    acc = L.acc_dtype(u.dtype)
    if L.use_triton(u):
        # the returns kernel, any flag dtype (starts at: the flags one step on, a copy); dx in
        # x's dtype straight away where the upstream gradient has it too (a tile for one value
        # size) and dseed does not need g_0
        x_dtype = rows["x"].dtype
        g = decayed_returns(u, d if s["previous_done"] else _one_step_on(d), k,
                            x_dtype if u.dtype == x_dtype and "seed_values" not in wanted
                            else acc)
    elif s["previous_done"] and d.dtype == torch.bool:
        g = _returns(u, None, d, None, None, k, 1.0, -1)  # exact: min(d, 1) = d
    else:
        u = u.to(acc)
        if s["previous_done"]:
            beta = k * _keep(d, acc)
        else:
            beta = torch.cat([_keep(d[:, 1:], acc), torch.zeros_like(u[:, :1])], dim=1)
        g = scan_rows(u, beta, None, True, torch.empty_like(u))
    got = {"x": g}
    if "seed_values" in wanted:
        first = k if s["previous_done"] else _keep(d[:, 0], acc)
        got["seed_values"] = first * g[:, 0]
    return got


def vtrace(rows, grads, outs, s, wanted):
    """``D = scan(rho (r + gamma (1 - term) nu - V), gamma lambda c (1 - done))``, ``vs = D + V``,
    ``pg = rho (r + gamma (1 - term) eta - V)`` with ``eta`` the next ``vs`` as ``nu`` is the next
    V; ``rho = min(e^x, rho_bar)``, ``c = min(e^x, c_bar)``, ``x`` the log-ratio. With
    ``U = u_vs + gamma (1 - term)(1 - trunc) rho u_pg`` one step on, ``g`` the adjoint of ``U``,
    ``p = rho g`` and ``q = rho u_pg``: ``dr = p + q``,
    ``dV = U - p - q + gamma (1 - term)(1 - trunc) p`` one step on, ``db``/``dW`` from
    ``gamma (1 - term)(p + q)``, ``dx = e^x (d rho [e^x <= rho_bar] + d c [e^x <= c_bar])``."""
    if wanted & FLAGS:
        return None
    u_vs, u_pg = grads
    vs = outs[0]
    if L.use_triton(u_vs):
        return vtrace_grad.gradients(rows, u_vs, u_pg, vs, s, wanted)
    acc, gamma = L.acc_dtype(u_vs.dtype), s["gamma"]
    term, trunc = rows["terminateds"], rows["truncateds"]
    boot, last = rows["bootstrap_values"], rows["last_value"]
    v, r = rows["values"].to(acc), rows["rewards"].to(acc)
    ratio = torch.exp(rows["log_pi_target"].to(acc) - rows["log_pi_behavior"].to(acc))
    rho = torch.clamp(ratio, max=s["rho_bar"])
    keep = gamma * _keep(term, acc)  # gamma (1 - term)
    on = keep if trunc is None else keep * _keep(trunc, acc)  # weight of the next value
    window = last.to(acc) if last is not None else boot[:, -1].to(acc) if boot is not None \
        else torch.zeros_like(v[:, 0])
    q = rho * u_pg
    U = u_vs.clone()
    U[:, 1:] += on[:, :-1] * q[:, :-1]
    D = vs - v
    beta = gamma * s["lambda_"] * torch.clamp(ratio, max=s["c_bar"]) * \
        _keep(_done(term, trunc, acc), acc)
    g, d_beta, _ = scan_adjoint(U, beta, D, torch.zeros_like(v[:, 0]), True)
    p = rho * g
    pq = p + q
    got = {"rewards": pq}
    if "values" in wanted:
        dv = U - pq
        dv[:, 1:] += on[:, :-1] * p[:, :-1]
        got["values"] = dv
    at_end = keep * pq  # what the next-value slots receive
    if "bootstrap_values" in wanted:
        db = torch.zeros_like(g) if trunc is None else trunc.to(acc) * at_end
        db[:, -1] = 0.0 if last is not None else at_end[:, -1]
        got["bootstrap_values"] = db
    if "last_value" in wanted:
        got["last_value"] = at_end[:, -1]
    if wanted & {"log_pi_target", "log_pi_behavior"}:
        cut = torch.zeros_like(v) if trunc is None else trunc.to(acc)
        b = None if boot is None else boot.to(acc)
        bracket = r + keep * window_next(v, cut, b, window) - v
        bracket_pg = r + keep * window_next(vs, cut, b, window) - v
        d_rho = g * bracket + u_pg * bracket_pg
        d_c = d_beta * gamma * s["lambda_"] * _keep(_done(term, trunc, acc), acc)
        dx = ratio * (torch.where(ratio <= s["rho_bar"], d_rho, 0.0) +
                      torch.where(ratio <= s["c_bar"], d_c, 0.0))
        got["log_pi_target"], got["log_pi_behavior"] = dx, -dx
    return got


def retrace(rows, grads, outs, s, wanted):
    """``D = scan(r + gamma (1 - term) E - Q, gamma c_{t+1} (1 - done))``, ``Q_ret = D + Q``,
    ``adv = rho (r + gamma (1 - term) Q_ret_{t+1} - Q)``, ``E = sum_a w(a) nq(a)``,
    ``c = lambda min(ratio, c_bar)``, ``rho = min(ratio, rho_bar)``, ``ratio = pi(a_t) / mu``.
    With ``h = rho u_adv``, ``U = u_ret + gamma (1 - term) h`` one step on and ``g`` the adjoint
    of ``U``: ``dr = g + h``, ``dQ = U - g - h``, ``dE = gamma (1 - term) g`` spread over the
    actions, and the ratio's gradient from ``c`` one step on and ``rho``, to the taken
    action's probability and to ``mu``."""
    if wanted & FLAGS:
        return None
    u_ret, u_adv = grads
    q_ret = outs[0]
    if L.use_triton(u_ret):
        return retrace_grad.gradients(rows, u_ret, u_adv, q_ret, s, wanted)
    acc, gamma, lam = L.acc_dtype(u_ret.dtype), s["gamma"], s["lambda_"]
    term, trunc = rows["terminateds"], rows["truncateds"]
    pi, mu = rows["action_probs_target"], rows["action_probs_behavior"].to(acc)
    nq, npi = rows["next_q_values_all"], rows["next_action_probs_target"]
    q, r = rows["q_values"].to(acc), rows["rewards"].to(acc)
    taken = rows["actions"].long().unsqueeze(-1)
    p = pi.gather(-1, taken).squeeze(-1).to(acc)
    ratio = p / mu
    keep = gamma * _keep(term, acc)
    h = torch.clamp(ratio, max=s["rho_bar"]) * u_adv
    U = u_ret.clone()
    U[:, 1:] += keep[:, :-1] * h[:, :-1]
    stays = _keep(_done(term, trunc, acc), acc)
    c_next = torch.zeros_like(ratio)
    c_next[:, :-1] = lam * torch.clamp(ratio[:, 1:], max=s["c_bar"])
    g, d_beta, _ = scan_adjoint(U, gamma * c_next * stays, q_ret - q, torch.zeros_like(r[:, 0]),
                                True)
    got = {"rewards": g + h, "q_values": U - g - h}
    d_expect = (keep * g).unsqueeze(-1)
    weights = pi if npi is None else npi
    if "next_q_values_all" in wanted:
        got["next_q_values_all"] = d_expect * weights.to(acc)
    d_weights = d_expect * nq.to(acc)
    if npi is not None:
        got["next_action_probs_target"] = d_weights
    if wanted & {"action_probs_target", "action_probs_behavior"}:
        q_ret_next = torch.zeros_like(q_ret)
        q_ret_next[:, :-1] = q_ret[:, 1:]
        d_ratio = torch.where(ratio <= s["rho_bar"], u_adv * (r + keep * q_ret_next - q), 0.0)
        d_c = torch.zeros_like(ratio)
        d_c[:, 1:] = lam * gamma * (d_beta * stays)[:, :-1]
        d_ratio += torch.where(ratio <= s["c_bar"], d_c, 0.0)
        d_pi = d_weights if npi is None else torch.zeros_like(d_weights)
        got["action_probs_target"] = d_pi.scatter_add(-1, taken, (d_ratio / mu).unsqueeze(-1))
        got["action_probs_behavior"] = -d_ratio * p / (mu * mu)
    return got


def affine_scan(rows, grads, outs, s, wanted):
    """``A = scan(alpha, beta, initial)``: ``(d alpha, d beta, d initial)`` of the adjoint."""
    u, initial = grads[0], rows["initial"]
    carry = u.new_zeros(u.shape[0]) if initial is None else initial.to(u.dtype)
    d_alpha, d_beta, d_initial = scan_adjoint(u, rows["beta"].to(u.dtype), outs[0], carry,
                                              bool(s["reverse"]))
    return {"alpha": d_alpha, "beta": d_beta, "initial": d_initial}


RULES = {"gae": gae, "returns": returns, "decayed_sum": decayed_sum, "vtrace": vtrace,
         "retrace": retrace, "affine_scan": affine_scan}
READS_OUTPUTS = {"vtrace", "retrace", "affine_scan"}  # the others are passed no outputs
# Rules given upstream gradients (and outputs) in their own dtype where kernels run, which read
# them as they are (a time-major scan of 16-bit rows in a 16-bit tile, ``L.narrow_loads``).
RAW_UPSTREAM = {"gae", "returns", "decayed_sum", "vtrace", "retrace"}
