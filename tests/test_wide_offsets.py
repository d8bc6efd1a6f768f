"""Element offsets past int32: time-major steps 2**31 elements apart, read in place, and (the
limit lowered) every kernel's 64-bit path, forward and backward, against the float64
reference; rows or steps past int32 are refused by name."""
import contextlib

import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of, record_launches
from estimators import ESTIMATORS, LAYOUTS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L

KERNELS = [b for b in BACKENDS if b != "torch"]
GRAD_KEYS = ("r", "v", "n", "lpt", "lpb", "boot", "last", "seed", "pi", "nq", "mu", "npi")
GRAD_KERNELS = {"gae", "vtrace", "retrace", "returns"}  # the others' gradients are scans


def on(kernels):
    return L.cpu_backend("triton") if kernels == "triton" else contextlib.nullcontext()


def far_steps(x: torch.Tensor, apart: int) -> torch.Tensor:
    """``x`` ``[T, B]`` copied into a storage whose steps lie ``apart`` elements apart (pages
    never written are never backed)."""
    T, B = x.shape
    base = torch.empty((T - 1) * apart + B, dtype=x.dtype, device=x.device)
    far = base.as_strided((T, B), (apart, 1))
    far.copy_(x)
    return far


@pytest.mark.parametrize("kernels", KERNELS)
def test_time_major_steps_past_int32_apart(kernels):
    """Time-major rows read in place whose last step lies 2**31 elements past the first: the
    prefix sum and the discounted returns match the reference (int32 offsets wrapped there)."""
    dev = device_of(kernels)
    T, B, apart = 9, 4, 1 << 28
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, B, generator=g).to(torch.bfloat16)
    d = torch.rand(T, B, generator=g) < 0.2
    xs, ds = far_steps(x.to(dev), apart), far_steps(d.to(dev), apart)
    assert L.wide_offsets(T, (xs.stride(0),))
    with on(kernels):
        got = [P.compute_episodic_prefix_sum(xs, ds, time_dim=0),
               P.compute_discounted_returns(xs, ds, gamma=0.9, time_dim=0)]
    want = [ref.compute_episodic_prefix_sum(x.t(), d.t()).t(),
            ref.compute_discounted_returns(x.t(), d.t(), gamma=0.9).t()]
    for name, y, w in zip(("prefix sum", "discounted returns"), got, want):
        assert_close(name, y.cpu(), w, TOL[torch.bfloat16])


def _spy(monkeypatch):
    """The ALIGN of every engine launch, whether each masked GAE launch and each gradient
    kernel went wide."""
    from paper_repro.kernels import _grad_blocks
    from paper_repro.kernels import masked_gae as M

    seen = {"align": record_launches(monkeypatch, lambda launch: launch.tile[-1]), "masked": [],
            "grads": []}

    class RecordedMasked(M.MaskedLaunch):
        def __call__(self, pointers):
            seen["masked"].append(self.tail[-1])
            return super().__call__(pointers)

    monkeypatch.setattr(M, "MaskedLaunch", RecordedMasked)
    wide = _grad_blocks.Work.wide
    monkeypatch.setattr(_grad_blocks.Work, "wide",
                        lambda self, *x: seen["grads"].append(wide(self, *x)) or seen["grads"][-1])
    return seen


@pytest.mark.parametrize("layout", LAYOUTS[:2], ids=lambda x: x.name)
@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: e.name)
@pytest.mark.parametrize("kernels", KERNELS)
def test_wide_path_every_kernel(est, layout, kernels, monkeypatch):
    """Under a limit of 64 elements, time-major 3 x 40 rows launch wide (ALIGN 1), batch-major
    ones not (but Retrace's four actions a step), and every gradient kernel, of 120 elements,
    does: outputs and gradients match the reference."""
    monkeypatch.setattr(L, "OFFSET_LIMIT", 64)
    seen = _spy(monkeypatch)
    d = make_inputs(3, 40, dtype=torch.float64, device=device_of(kernels))
    keys = [k for k in GRAD_KEYS if d.get(k) is not None]
    ours = {k: (x.detach().clone().requires_grad_() if k in keys else x) for k, x in d.items()}
    with on(kernels):
        outs = [layout.back(o) for o in outputs(est.call(P, layout.apply(ours),
                                                         time_dim=layout.time_dim))]
        weights = [torch.randn_like(o) for o in outs]
        got = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, weights)),
                                  [ours[k] for k in keys], allow_unused=True)
    theirs = {k: (x.detach().cpu().requires_grad_() if k in keys else
                  None if x is None else x.cpu()) for k, x in d.items()}
    want_outs = outputs(est.call(ref, theirs))
    want = torch.autograd.grad(sum((o * w.cpu()).sum() for o, w in zip(want_outs, weights)),
                               [theirs[k] for k in keys], allow_unused=True)
    for i, (o, w) in enumerate(zip(outs, want_outs)):
        assert_close(f"{est.name}[{i}]", o.detach().cpu(), w.detach(), 1e-9)
    for k, g, w in zip(keys, got, want):
        if w is None:
            assert g is None or float(g.abs().max()) == 0.0, k
        else:
            assert_close(f"d{k}", g.cpu(), w, 1e-9)
    launched = seen["align"] + [L.WIDE_OFFSETS if m else 0 for m in seen["masked"]]
    if layout.name == "time_major":
        assert launched and L.WIDE_OFFSETS in launched, seen
    elif est.kernel != "retrace":  # whose per-action steps lie 4 apart: 156 past 64
        assert L.WIDE_OFFSETS not in launched, seen
    assert all(seen["grads"]) and bool(seen["grads"]) == (est.kernel in GRAD_KERNELS), seen


@pytest.mark.parametrize("kernels", KERNELS)
def test_wide_path_masked_gae(kernels, monkeypatch):
    """Masked GAE's own kernel, time-major 3 x 40 under a limit of 64: wide, and the
    reference's answer."""
    monkeypatch.setattr(L, "OFFSET_LIMIT", 64)
    seen = _spy(monkeypatch)
    dev = device_of(kernels)
    g = torch.Generator().manual_seed(1)
    r, v = torch.randn(2, 3, 40, generator=g, dtype=torch.float64)
    m = (torch.rand(3, 40, generator=g) < 0.7).double()
    with on(kernels):
        got = P.compute_masked_gae(*(x.t().contiguous().to(dev) for x in (r, v, m)), 0.9, 0.8,
                                   time_dim=0)
    assert_close("masked gae", got.t().cpu(), ref.compute_masked_gae(r, v, m, 0.9, 0.8), 1e-9)
    assert seen["masked"] == [True], seen


@pytest.mark.parametrize("shape,what", [((1, 1 << 31), "steps"), ((1 << 31, 1), "rows")])
def test_rows_or_steps_past_int32_refused(shape, what):
    """2**31 steps or rows (stride-0 views: no memory) are refused, naming the argument."""
    x = torch.zeros(1).expand(*shape)
    with pytest.raises(ValueError, match=f"rewards has {1 << 31} {what}"):
        P.compute_discounted_returns(x, x, gamma=0.9)
