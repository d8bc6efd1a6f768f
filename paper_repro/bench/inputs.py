"""Benchmark cases: the paper's random rollouts (PAPER.md 4.2) for each estimator.

A :class:`Case` holds the positional arguments and keyword arguments of one public-API
call (``paper_repro.compute_<op>``) for one shape, variant, dtype and layout:

* ``variant="plain"``: no truncations (Retrace gets an all-zero ``truncateds``, which it
  requires); no bootstrap values, no seeds.
* ``variant="trunc"``: an independent Bernoulli(0.05) truncation mask made exclusive with
  the terminations, and ``bootstrap_values ~ U(0, 1)`` at truncated steps and in the last
  column (GAE, V-trace, TD(lambda), discounted returns; Retrace takes the mask only).
* ``layout="NT"`` is the paper's ``[num_envs, seq_len]``; ``layout="TN"`` stores every
  tensor time-major ``[seq_len, num_envs]`` and calls with ``time_dim=0``.
* ``dtype`` is the floating dtype of every value tensor; flags are float of that dtype
  (the paper's convention) unless ``flags="bool"``.

Everything is drawn from ``torch.manual_seed(0)``-style seeded generators on the target
device, so every provider sees identical inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

ALGORITHMS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
              "eligibility_traces", "prefix_sum")
# beyond the paper: GAE whose masked steps pass the carry through (multi-turn RLHF), and
# PufferLib's whole advantage (GAE with V-trace's clipped importance weights)
EXTRA_ALGORITHMS = ("masked_gae", "puff_advantage")
PUBLIC_NAMES = {
    "gae": "compute_gae",
    "vtrace": "compute_vtrace",
    "retrace": "compute_retrace",
    "lambda_returns": "compute_lambda_returns",
    "discounted_returns": "compute_discounted_returns",
    "eligibility_traces": "compute_eligibility_traces",
    "prefix_sum": "compute_episodic_prefix_sum",
    "masked_gae": "compute_masked_gae",
    "puff_advantage": "compute_puff_advantage",
}
# where ours is, where not at the top of the package
MODULES = {"puff_advantage": "paper_repro.pufferlib_compat"}
# the estimators with a truncation/bootstrap path (PAPER.md H-3: elig/prefix have none)
TRUNCATION_ALGORITHMS = ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns")
NUM_ACTIONS = 4
GAMMA, LAMBDA, ELIGIBILITY_LAMBDA, TERMINATION_RATE = 0.99, 0.95, 0.9, 0.05
MASKED_RATE = 0.2  # masked GAE: the share of steps masked (tool-output tokens); gamma 1, as RLHF

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp64": torch.float64}


@dataclass
class Case:
    """One benchmark cell: ``algorithm`` at ``[num_envs, seq_len]`` plus its call arguments."""

    algorithm: str
    num_envs: int
    seq_len: int
    variant: str = "plain"
    dtype: str = "fp32"
    layout: str = "NT"
    flags: str = "float"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @property
    def key(self):
        return (self.algorithm, self.num_envs, self.seq_len, self.variant, self.dtype,
                self.layout)

    @property
    def public_name(self):
        return PUBLIC_NAMES[self.algorithm]

    def call_kwargs(self):
        """Keyword arguments for the public API (adds ``time_dim=0`` for time-major)."""
        return dict(self.kwargs, time_dim=0) if self.layout == "TN" else dict(self.kwargs)

    def nt(self, x):
        """View a time-major per-step tensor as ``[N, T, ...]`` (no copy)."""
        return x if self.layout == "NT" or x.dim() < 2 else x.transpose(0, 1)

    def nt_args(self):
        """(args, kwargs) with every per-step tensor viewed batch-major ``[N, T, ...]``."""
        def view(x):
            return self.nt(x) if torch.is_tensor(x) and x.dim() >= 2 else x
        return tuple(view(a) for a in self.args), {k: view(v) for k, v in self.kwargs.items()}


class _Draw:
    """Seeded draws of per-step tensors in the case's layout, dtype and device."""

    def __init__(self, case, device):
        self.case, self.device = case, torch.device(device)
        self.float_dtype = _DTYPES[case.dtype]
        self.meta = self.device.type == "meta"
        gen_device = "cpu" if self.meta else self.device
        self.gen = torch.Generator(device=gen_device)
        self.gen.manual_seed(0)

    def _shape(self, *extra):
        n, t = self.case.num_envs, self.case.seq_len
        return ((n, t) if self.case.layout == "NT" else (t, n)) + extra

    def _raw(self, kind, *extra, dtype=torch.float32):
        if self.meta:
            return torch.empty(self._shape(*extra), dtype=dtype, device="meta")
        fn = torch.randn if kind == "normal" else torch.rand
        return fn(self._shape(*extra), generator=self.gen, device=self.device, dtype=dtype)

    def normal(self, *extra):
        return self._raw("normal", *extra).to(self.float_dtype)

    def uniform(self, low=0.0, high=1.0):
        return (low + (high - low) * self._raw("uniform")).to(self.float_dtype)

    def bernoulli(self, rate):
        return self._raw("uniform") < rate

    def flag(self, mask):
        return mask if self.case.flags == "bool" else mask.to(self.float_dtype)

    def per_env(self, low=0.0, high=1.0):
        n = self.case.num_envs
        if self.meta:
            return torch.empty(n, dtype=self.float_dtype, device="meta")
        x = torch.rand(n, generator=self.gen, device=self.device)
        return (low + (high - low) * x).to(self.float_dtype)


def _time_last_column(draw, mask):
    """Mark the last time step (along the case's time axis) in a boolean mask."""
    mask = mask.clone()
    if draw.case.layout == "NT":
        mask[:, -1] = True
    else:
        mask[-1, :] = True
    return mask


def _truncation_inputs(draw, term_mask):
    """Exclusive truncation mask and bootstrap values at truncated steps and the last column."""
    trunc_mask = draw.bernoulli(TERMINATION_RATE) & ~term_mask
    where_read = _time_last_column(draw, trunc_mask)
    bootstrap = draw.uniform() * where_read.to(draw.float_dtype)
    return draw.flag(trunc_mask), bootstrap


def make_case(algorithm, num_envs, seq_len, variant="plain", dtype="fp32", layout="NT",
              flags="float", device="cpu"):
    """Build the :class:`Case` of PAPER.md 4.2 (``device="meta"`` gives shapes only)."""
    known = ALGORITHMS + EXTRA_ALGORITHMS
    if algorithm not in known:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {known}")
    if variant == "trunc" and algorithm not in TRUNCATION_ALGORITHMS:
        raise ValueError(f"{algorithm} has no truncation variant")
    case = Case(algorithm, num_envs, seq_len, variant, dtype, layout, flags)
    draw = _Draw(case, device)
    rewards = draw.normal()
    term_mask = draw.bernoulli(TERMINATION_RATE)
    terminateds = draw.flag(term_mask)
    trunc = variant == "trunc"
    truncateds, bootstrap = _truncation_inputs(draw, term_mask) if trunc else (None, None)
    extra = {"bootstrap_values": bootstrap} if trunc else {}
    if algorithm == "gae":
        values = draw.normal()
        args = (rewards, values, terminateds, truncateds, GAMMA, LAMBDA)
    elif algorithm == "vtrace":
        values = draw.normal()
        log_pi_target, log_pi_behavior = -draw.uniform(), -draw.uniform()
        args = (log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds, GAMMA)
    elif algorithm == "retrace":
        args = _retrace_args(draw, rewards, terminateds, truncateds)
        extra = {"lambda_": LAMBDA}
    elif algorithm == "lambda_returns":
        args = (rewards, draw.normal(), terminateds, truncateds, GAMMA, LAMBDA)
    elif algorithm == "discounted_returns":
        args = (rewards, terminateds, truncateds, GAMMA)
    elif algorithm == "masked_gae":
        values = draw.normal()
        args = (rewards, values, draw.flag(~draw.bernoulli(MASKED_RATE)), 1.0, LAMBDA)
    elif algorithm == "puff_advantage":  # PufferLib's rows: r and term of step t at t + 1
        values = draw.normal()
        args = (values, rewards, terminateds, draw.uniform(0.5, 1.5), torch.zeros_like(values),
                GAMMA, LAMBDA, 1.0, 1.0)
    elif algorithm == "eligibility_traces":
        args = (rewards, terminateds, GAMMA, ELIGIBILITY_LAMBDA)
    else:
        args = (rewards, terminateds)
    return replace(case, args=args, kwargs=extra)


def _retrace_args(draw, rewards, terminateds, truncateds):
    q_values = draw.normal()
    next_q = draw.normal(NUM_ACTIONS)
    target = torch.softmax(draw.normal(NUM_ACTIONS).float(), dim=-1).to(draw.float_dtype)
    behavior = draw.uniform(0.1, 0.9)
    if draw.meta:
        actions = torch.empty(target.shape[:-1], dtype=torch.int64, device="meta")
    else:
        actions = torch.randint(0, NUM_ACTIONS, target.shape[:-1], generator=draw.gen,
                                device=draw.device)
    if truncateds is None:
        truncateds = torch.zeros_like(terminateds)
    return (target, behavior, q_values, next_q, actions, rewards, terminateds, truncateds, GAMMA)


def case_tensors(case):
    """Every tensor argument of the call (for byte counts and device moves)."""
    values = list(case.args) + list(case.kwargs.values())
    return [x for x in values if torch.is_tensor(x)]


def copy_case(case):
    """The same case on fresh memory: each tensor copied into storage of its own size, at its
    own strides and offset (so alignment, and the kernel it selects, stay the same)."""
    def fresh(x):
        if not torch.is_tensor(x):
            return x
        storage = torch.empty(x.untyped_storage().nbytes() // x.element_size(), dtype=x.dtype,
                              device=x.device)
        y = storage.as_strided(x.shape, x.stride(), x.storage_offset()).copy_(x)
        return y.requires_grad_() if x.requires_grad else y
    return replace(case, args=tuple(fresh(a) for a in case.args),
                   kwargs={k: fresh(v) for k, v in case.kwargs.items()})


def to_device(case, device):
    """The same case with every tensor moved to ``device``."""
    def move(x):
        return x.to(device) if torch.is_tensor(x) else x
    return replace(case, args=tuple(move(a) for a in case.args),
                   kwargs={k: move(v) for k, v in case.kwargs.items()})
