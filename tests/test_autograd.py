"""Gradients (adjoint scan on the engine + chain rule through the coefficients), torch.compile
with fullgraph=True, and a Dreamer-style actor loss through lambda-returns."""
import pytest
import torch
from conftest import BACKENDS, assert_close, device_of
from estimators import ESTIMATORS, LAYOUTS, every_kernel, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref

IDS = [e.name for e in ESTIMATORS]
GRAD_KEYS = ("r", "v", "n", "lpt", "lpb", "boot", "last", "seed", "pi", "nq", "mu", "npi")


def leaves(d):
    return {k: (x.detach().clone().requires_grad_() if k in GRAD_KEYS and x is not None else x)
            for k, x in d.items()}


def used(d):
    return [x for k, x in d.items() if k in GRAD_KEYS and x is not None]


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_gradients_match_reference(est, backend):
    d = make_inputs(3, 9, dtype=torch.float64, device=device_of(backend))
    ours, theirs = leaves(d), {k: (None if x is None else x.detach().cpu()) for k, x in d.items()}
    theirs = leaves(theirs)
    weights = [torch.randn(3, 9, dtype=torch.float64) for _ in outputs(est.call(ref, theirs))]
    loss = sum((o.cpu() * w).sum() for o, w in zip(outputs(est.call(P, ours)), weights))
    want_loss = sum((o * w).sum() for o, w in zip(outputs(est.call(ref, theirs)), weights))
    got = torch.autograd.grad(loss, used(ours), allow_unused=True)
    want = torch.autograd.grad(want_loss, used(theirs), allow_unused=True)
    for name, g, w in zip([k for k in ours if k in GRAD_KEYS and ours[k] is not None], got,
                          want):
        g = torch.zeros_like(w) if (g is None and w is not None) else g
        if w is None:
            assert g is None or float(g.abs().max()) == 0.0, name
            continue
        assert_close(f"d{name}", g, w, 1e-9)


@pytest.mark.parametrize("est", [e for e in ESTIMATORS if e.name in (
    "gae", "vtrace", "retrace", "lambda_returns", "prefix_sum_ends_at")], ids=lambda e: e.name)
def test_gradcheck(est, backend):
    d = make_inputs(2, 6, dtype=torch.float64, device=device_of(backend))
    keys = [k for k in ("r", "v", "boot", "lpt", "nq", "seed") if d.get(k) is not None]

    def f(*xs):
        return outputs(est.call(P, dict(d, **dict(zip(keys, xs)))))

    # The interpreter's ~0.25 s a call: one random projection of the Jacobian, not all of it.
    assert torch.autograd.gradcheck(f, [d[k].clone().requires_grad_() for k in keys],
                                    fast_mode=backend == "triton")


def test_affine_scan_gradcheck(backend):
    dev = device_of(backend)
    a, b = torch.randn(2, 7, dtype=torch.float64, device=dev), torch.rand(2, 7, dtype=torch.float64,
                                                                          device=dev)
    c = torch.randn(2, dtype=torch.float64, device=dev)
    for reverse in (True, False):
        assert torch.autograd.gradcheck(
            lambda a, b, c, reverse=reverse: P.affine_scan(a, b, reverse=reverse, initial=c,
                                                            time_dim=0),
            [x.clone().requires_grad_() for x in (a.t().contiguous(), b.t().contiguous(), c)])


def test_dreamer_actor_loss(backend):
    """Backpropagate an actor loss through TD(lambda) returns into network parameters."""
    dev = device_of(backend)
    torch.manual_seed(1)
    obs = torch.randn(4, 16, 5, dtype=torch.float64, device=dev)
    net = torch.nn.Linear(5, 2, dtype=torch.float64, device=dev)

    def loss(fn):
        out = net(obs)
        rewards, values = out[..., 0], out[..., 1]
        term = torch.zeros_like(rewards)
        nxt = torch.cat([values[:, 1:], values[:, -1:]], 1)
        return -fn.compute_lambda_returns(rewards, nxt, term, None, 0.99, 0.95).sum()

    net.zero_grad()
    loss(P).backward()
    ours = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    loss(ref).backward()
    for g, w in zip(ours, [p.grad for p in net.parameters()]):
        assert_close("dtheta", g, w, 1e-9)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_compile_fullgraph(est):
    backend = BACKENDS[0]
    d = make_inputs(3, 20, device=device_of(backend))
    torch._dynamo.reset()
    compiled = torch.compile(lambda d: est.call(P, d), fullgraph=True)
    for g, w in zip(outputs(compiled(d)), outputs(est.call(P, d))):
        assert torch.equal(g, w)


def test_compile_with_gradients():
    d = make_inputs(3, 20, device=device_of(BACKENDS[0]))
    r = d["r"].clone().requires_grad_()
    torch._dynamo.reset()
    f = torch.compile(lambda r: P.compute_gae(r, d["v"], d["term"], d["trunc"]).square().sum(),
                      fullgraph=True)
    f(r).backward()
    want = torch.autograd.grad(P.compute_gae(r, d["v"], d["term"], d["trunc"]).square().sum(), r)
    assert_close("compiled grad", r.grad, want[0].double(), 1e-5)


CLOSED_KERNELS = {"gae", "vtrace", "retrace", "returns", "decayed_sum"}
CLOSED_FORM = [e for e in ESTIMATORS if e.kernel in CLOSED_KERNELS]
CLOSED_CASES = [(layout, flags, T) for layout in LAYOUTS for flags, T in (
    (torch.bool, 1), (torch.float32, 9))]
CLOSED_PARAMS = [p for p in every_kernel(
    CLOSED_CASES, [f"{c[0].name}-{str(c[1])[6:]}-T{c[2]}" for c in CLOSED_CASES],
    lambda case: CLOSED_KERNELS) if p.values[0] in CLOSED_FORM]


def _grads(module, est, d, layout, keys, weights):
    """Gradients w.r.t. ``keys`` of sum(output * weight), the inputs laid out by ``layout``."""
    ours = {k: (x.detach().clone().requires_grad_() if k in keys else x) for k, x in d.items()}
    kw = {"time_dim": layout.time_dim} if module is P else {}  # the reference: batch-major
    outs = outputs(est.call(module, layout.apply(ours), **kw))
    loss = sum((layout.back(o) * w).sum() for o, w in zip(outs, weights))
    return torch.autograd.grad(loss, [ours[k] for k in keys], allow_unused=True)


def _spy_closed_form(monkeypatch):
    """What each backward's closed form returned (None: the general rule ran)."""
    from paper_repro.kernels import autograd as AG

    taken, closed_form = [], AG._closed_form
    monkeypatch.setattr(AG, "_closed_form", lambda *a: taken.append(closed_form(*a)) or taken[-1])
    return taken


@pytest.mark.parametrize("est, layout, flags, T", CLOSED_PARAMS)
def test_closed_form_gradients(est, layout, flags, T, backend, monkeypatch):
    """GAE's, V-trace's, the returns' and the decayed sums' closed-form rule (``adjoints.py``)
    is taken and gives the general rule's gradients (the chain through ``coefficients.py``) and
    the float64 reference's, on every layout, bool and soft float flags, T = 1."""
    from paper_repro.kernels import adjoints

    d = make_inputs(3, T, dtype=torch.float64, device=device_of(backend))
    if flags is torch.bool:
        d["term"], d["trunc"] = d["term"].bool(), d["trunc"].bool()
    else:  # soft flags in [0, 1): a per-step discount
        g = torch.Generator().manual_seed(3)
        d["term"] = (torch.rand(3, T, generator=g, dtype=torch.float64) * 0.9).to(d["r"].device)
        d["trunc"] = (torch.rand(3, T, generator=g, dtype=torch.float64) * 0.5).to(d["r"].device)
    keys = [k for k in GRAD_KEYS if d.get(k) is not None]
    weights = [torch.randn(3, T, dtype=torch.float64, device=d["r"].device)
               for _ in range(2 if est.kernel in ("vtrace", "retrace") else 1)]
    taken = _spy_closed_form(monkeypatch)
    got = _grads(P, est, d, layout, keys, weights)
    assert taken and taken[-1] is not None, "the closed form was not taken"
    monkeypatch.setattr(adjoints, "ENABLED", False)
    general = _grads(P, est, d, layout, keys, weights)
    theirs = {k: (None if x is None else x.detach().cpu()) for k, x in d.items()}
    want = _grads(ref, est, theirs, LAYOUTS[0], keys, [w.cpu() for w in weights])
    for k, a, b, w in zip(keys, got, general, want):
        if w is None:
            assert a is None or float(a.abs().max()) == 0.0, k
            continue
        assert_close(f"d{k} (general rule)", a, b, 1e-12)
        assert_close(f"d{k} (reference)", a.cpu(), w, 1e-9)


@pytest.mark.parametrize("est", CLOSED_FORM, ids=lambda e: e.name)
def test_flag_gradients_take_the_general_rule(est, monkeypatch):
    """A float flag that needs its gradient (a predicted continuation) is differentiated by the
    general rule, and every gradient still matches the reference's."""
    d = make_inputs(2, 6, dtype=torch.float64)
    d["term"] = torch.rand(2, 6, dtype=torch.float64) * 0.9
    keys = [k for k in (*GRAD_KEYS, "term") if d.get(k) is not None]
    weights = [torch.randn(2, 6, dtype=torch.float64) for _ in range(2)]
    taken = _spy_closed_form(monkeypatch)
    got = _grads(P, est, d, LAYOUTS[0], keys, weights)
    assert taken == [None]
    want = _grads(ref, est, d, LAYOUTS[0], keys, weights)
    for k, a, w in zip(keys, got, want):
        if w is not None:
            assert_close(f"d{k}", a, w, 1e-9)


HALF = [("gae", ["r", "v", "boot"]), ("gae_last_value", ["r", "v", "last"]),
        ("lambda_returns", ["r", "n", "boot"]), ("discounted_returns", ["r", "boot"]),
        ("eligibility_traces", ["r"]), ("eligibility_traces", ["r", "seed"]),
        ("prefix_sum_ends_at", ["r"]), ("prefix_sum_starts_at", ["r", "seed"]),
        ("vtrace", ["r", "v", "lpt", "boot"]),
        ("retrace_next_policy", ["r", "v", "pi", "mu", "nq", "npi"])]


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[1]], ids=lambda x: x.name)
@pytest.mark.parametrize("name, keys", HALF, ids=["-".join([h[0], *h[1]]) for h in HALF])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_closed_form_half_precision(name, keys, dtype, layout, backend, monkeypatch):
    """16-bit inputs: the closed form (fused kernels where they run, reading 16-bit upstream
    gradients and writing 16-bit gradients themselves) accumulates in fp32 and returns each
    input's dtype, as the general rule does."""
    from paper_repro.kernels import adjoints

    d = make_inputs(3, 17, dtype=dtype, device=device_of(backend))
    est = next(e for e in ESTIMATORS if e.name == name)
    weights = [torch.randn(3, 17, device=d["r"].device).to(dtype)
               for _ in range(2 if est.kernel in ("vtrace", "retrace") else 1)]
    got = _grads(P, est, d, layout, keys, weights)
    monkeypatch.setattr(adjoints, "ENABLED", False)
    general = _grads(P, est, d, layout, keys, weights)
    for k, a, b in zip(keys, got, general):
        assert a.dtype == dtype
        assert_close(f"d{k}", a.float(), b.double(), 1e-2)


def test_upstream_rows_raw_only_where_the_rule_reads_them():
    """A rule whose kernels read 16-bit upstream gradients themselves gets them unconverted, in
    either layout; the bare engine's rule, and every rule without kernels, gets them in the
    accumulation dtype, laid out as they were."""
    from paper_repro.kernels import adjoints
    from paper_repro.kernels.autograd import _upstream

    assert set(adjoints.RULES) - {"affine_scan"} == adjoints.RAW_UPSTREAM
    rows = torch.randn(4, 6).to(torch.bfloat16)
    time_major = torch.randn(6, 4).to(torch.bfloat16).t()
    assert _upstream(rows, torch.float32, True) is rows
    assert _upstream(time_major, torch.float32, True) is time_major
    assert _upstream(rows, torch.float32, False).dtype == torch.float32
    got = _upstream(time_major, torch.float32, False)
    assert got.dtype == torch.float32 and got.stride() == time_major.stride()
    assert torch.equal(got, time_major.float())


def test_second_derivatives_outside_torch_func_raise():
    """create_graph=True in plain autograd keeps the backward inside its custom op, whose own
    derivative is not registered: a second derivative raises (torch.func's transforms give
    them) instead of treating the scan's launch as a constant."""
    d = make_inputs(2, 5, dtype=torch.float64)
    r = d["r"].clone().requires_grad_()
    adv = P.compute_gae(r, d["v"], d["term"], d["trunc"], 0.9, 0.8, d["boot"])
    (g,) = torch.autograd.grad(adv.square().sum(), r, create_graph=True)
    want = torch.func.grad(lambda x: torch.func.grad(
        lambda y: P.compute_gae(y, d["v"], d["term"], d["trunc"], 0.9, 0.8,
                                d["boot"]).square().sum())(x).sum())(d["r"])
    with pytest.raises(RuntimeError, match="autograd"):
        torch.autograd.grad(g.sum(), r)
    assert torch.isfinite(want).all()


@pytest.mark.parametrize("reverse", [True, False])
def test_affine_scan_closed_form(reverse, backend, monkeypatch):
    """The bare engine's backward is the adjoint itself, with or without a boundary, time on
    any axis: taken, and equal to the general rule's."""
    from paper_repro.kernels import adjoints

    dev = device_of(backend)
    a, b = torch.randn(7, 3, dtype=torch.float64, device=dev), torch.rand(7, 3, dtype=torch.float64,
                                                                         device=dev)
    c = torch.randn(3, dtype=torch.float64, device=dev)
    w = torch.randn(7, 3, dtype=torch.float64, device=dev)

    def grads(initial):
        xs = [x.clone().requires_grad_() for x in (a, b, *([c] if initial else []))]
        out = P.affine_scan(xs[0], xs[1], reverse=reverse, initial=xs[2] if initial else None,
                            time_dim=0)
        return torch.autograd.grad((out * w).sum(), xs)

    for initial in (True, False):
        taken = _spy_closed_form(monkeypatch)
        got = grads(initial)
        assert taken and taken[-1] is not None
        monkeypatch.setattr(adjoints, "ENABLED", False)
        want = grads(initial)
        monkeypatch.setattr(adjoints, "ENABLED", True)
        for name, g, x in zip(("alpha", "beta", "initial"), got, want):
            assert_close(f"d{name}", g, x, 1e-12)


def test_vtrace_closed_form_at_the_clips(backend, monkeypatch):
    """Ratios exactly at rho_bar and c_bar (equal log-probabilities, both clips 1) pass their
    gradient as torch's clamp does: the closed form equals the general rule there."""
    from paper_repro.kernels import adjoints

    dev = device_of(backend)
    g = torch.Generator().manual_seed(5)
    lp, v, r, w = (torch.randn(3, 9, generator=g, dtype=torch.float64).to(dev) for _ in range(4))
    term = torch.zeros(3, 9, device=dev)
    term[0, 3] = 1

    def grads():
        a, b, vv = (x.clone().requires_grad_() for x in (lp, lp, v))
        vs, pg = P.compute_vtrace(a, b, vv, r, term, None, 0.9, 1.0, 1.0, None,
                                  torch.ones(3, dtype=torch.float64, device=dev), lambda_=0.8)
        return torch.autograd.grad((vs * w).sum() + (pg * w.flip(1)).sum(), (a, b, vv))

    taken = _spy_closed_form(monkeypatch)
    got = grads()
    assert taken[-1] is not None
    monkeypatch.setattr(adjoints, "ENABLED", False)
    for name, x, y in zip(("dlpt", "dlpb", "dV"), got, grads()):
        assert_close(name, x, y, 1e-12)
    assert float(got[0].abs().max()) > 0  # the clips pass the gradient


def test_retrace_closed_form_at_the_clips(backend, monkeypatch):
    """Ratios exactly at c_bar and rho_bar (the taken action's probability equal to the
    behaviour's, both clips 1), textbook and same-row expectations: the closed form equals the
    general rule, and every per-action tensor gets its gradient."""
    from paper_repro.kernels import adjoints

    dev = device_of(backend)
    d = make_inputs(3, 9, dtype=torch.float64, device=dev)
    d["mu"] = d["pi"].gather(-1, d["act"].unsqueeze(-1)).squeeze(-1).clone()
    keys = ["pi", "mu", "v", "nq", "r", "npi"]
    w = [torch.randn(3, 9, dtype=torch.float64, device=dev) for _ in range(2)]

    def grads(textbook):
        xs = {k: d[k].clone().requires_grad_() for k in keys}
        q_ret, adv = P.compute_retrace(
            xs["pi"], xs["mu"], xs["v"], xs["nq"], d["act"], xs["r"], d["term"], d["trunc"], 0.9,
            0.8, 1.0, 1.0, next_action_probs_target=xs["npi"] if textbook else None)
        return torch.autograd.grad((q_ret * w[0]).sum() + (adv * w[1]).sum(),
                                   [xs[k] for k in keys], allow_unused=True)

    for textbook in (False, True):
        taken = _spy_closed_form(monkeypatch)
        got = grads(textbook)
        assert taken[-1] is not None
        monkeypatch.setattr(adjoints, "ENABLED", False)
        want = grads(textbook)
        monkeypatch.setattr(adjoints, "ENABLED", True)
        for k, a, b in zip(keys, got, want):
            if k == "npi" and not textbook:
                assert a is None and b is None
                continue
            assert_close(f"d{k}", a, b, 1e-12)
            assert float(a.abs().max()) > 0, k


@pytest.mark.parametrize("time_dim", [-1, 0], ids=["batch_major", "time_major"])
def test_vtrace_fused_gradients_without_a_window_value(time_dim, backend, monkeypatch):
    """V-trace without bootstrap values or a last value (the value after T-1 is 0), with and
    without the behaviour's gradient wanted: the fused kernels equal the general rule."""
    from paper_repro.kernels import adjoints

    dev = device_of(backend)
    g = torch.Generator().manual_seed(7)
    N, T = 3, 300  # rows across the gradient kernel's 256-step blocks
    lpt, lpb, v, r, w0, w1 = (torch.randn(N, T, generator=g, dtype=torch.float64).to(dev)
                              for _ in range(6))
    term = (torch.rand(N, T, generator=g) < 0.05).to(dev)
    if time_dim == 0:
        lpt, lpb, v, r, w0, w1, term = (x.t().contiguous() for x in (lpt, lpb, v, r, w0, w1, term))

    def grads(behaviour):
        a, b, vv = (x.clone().requires_grad_(k != 1 or behaviour)
                    for k, x in enumerate((lpt, lpb, v)))
        vs, pg = P.compute_vtrace(a, b, vv, r, term, None, 0.97, 1.0, 0.9, lambda_=0.9,
                                  time_dim=time_dim)
        leaves = (a, b, vv) if behaviour else (a, vv)
        return torch.autograd.grad((vs * w0).sum() + (pg * w1).sum(), leaves)

    for behaviour in (True, False):
        got = grads(behaviour)
        monkeypatch.setattr(adjoints, "ENABLED", False)
        want = grads(behaviour)
        monkeypatch.setattr(adjoints, "ENABLED", True)
        for a, b in zip(got, want):
            assert_close("d", a, b, 1e-12)
            assert float(a.abs().max()) > 0


FUSED = [("vtrace_clip_lambda_last_value", "vtrace_grad", ["r", "v", "lpt", "lpb", "last"]),
         ("vtrace", "vtrace_grad", ["r", "v", "lpt", "lpb", "boot"]),  # the window from b_{T-1}
         ("vtrace", "vtrace_grad", ["v", "lpt"]),  # the behaviour's gradient not written
         ("retrace", "retrace_grad", ["r", "v", "pi", "mu", "nq"]),
         ("retrace_next_policy", "retrace_grad", ["r", "v", "pi", "mu", "nq", "npi"]),
         ("retrace", "retrace_grad", ["v", "mu"]),  # no per-action gradient wanted
         ("gae", "returns_grad", ["r", "v", "boot"]),
         ("gae_last_value", "returns_grad", ["r", "v", "last"]),
         ("gae", "returns_grad", ["r"]),
         ("lambda_returns", "returns_grad", ["r", "n", "boot"]),
         ("discounted_returns", "returns_grad", ["r", "boot"])]


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[1]], ids=lambda x: x.name)
@pytest.mark.parametrize("name, module, keys", FUSED, ids=lambda x: x if isinstance(x, str)
                         else "-".join(x))
def test_gradients_fused_where_kernels_run(name, module, keys, layout, backend, monkeypatch):
    """Where the kernels run, V-trace's and Retrace's closed forms are two fused kernels around
    the scan (``vtrace_grad``, ``retrace_grad``), GAE's and the returns' one after it
    (``returns_grad``), rows longer than one of their blocks included; the torch path keeps the
    torch ops. Both give the general rule's gradients."""
    import importlib

    from paper_repro.kernels import adjoints

    fused_module = importlib.import_module(f"paper_repro.kernels.{module}")
    calls, fused = [], fused_module.gradients
    monkeypatch.setattr(fused_module, "gradients", lambda *a: calls.append(1) or fused(*a))
    est = next(e for e in ESTIMATORS if e.name == name)
    T = fused_module.BLOCK + 6  # rows across blocks
    d = make_inputs(2, T, dtype=torch.float64, device=device_of(backend))
    weights = [torch.randn(2, T, dtype=torch.float64, device=d["r"].device) for _ in range(2)]
    got = _grads(P, est, d, layout, keys, weights)
    assert bool(calls) == (backend != "torch")
    monkeypatch.setattr(adjoints, "ENABLED", False)
    for k, a, b in zip(keys, got, _grads(P, est, d, layout, keys, weights)):
        assert_close(f"d{k}", a, b, 1e-12)


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.float64], ids=["bool", "float"])
@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[1]], ids=lambda x: x.name)
@pytest.mark.parametrize("name, keys", [("gae", ["r", "v"]), ("lambda_returns", ["r", "n"]),
                                        ("discounted_returns", ["r", "boot"])])
def test_returns_adjoint_joins_the_flags_in_its_scan(name, keys, layout, flag_dtype, backend,
                                                     monkeypatch):
    """GAE's and the returns' adjoint scan reads the terminations and truncations itself where
    the kernels run (two launches a backward: no third to join the flags first), and still
    gives the general rule's gradients."""
    from paper_repro.kernels import adjoints

    joined, join = [], adjoints._done
    monkeypatch.setattr(adjoints, "_done", lambda *a: joined.append(1) or join(*a))
    est = next(e for e in ESTIMATORS if e.name == name)
    d = make_inputs(3, 37, dtype=torch.float64, flag_dtype=flag_dtype,
                    device=device_of(backend))
    d["trunc"][:, 5] = 1  # a step both terminated and truncated where the flags overlap
    d["term"][:, 5] = 1
    weights = [torch.randn(3, 37, dtype=torch.float64, device=d["r"].device) for _ in range(2)]
    got = _grads(P, est, d, layout, keys, weights)
    assert not joined or backend == "torch"
    monkeypatch.setattr(adjoints, "ENABLED", False)
    for k, a, b in zip(keys, got, _grads(P, est, d, layout, keys, weights)):
        assert_close(f"d{k}", a, b, 1e-12)


@pytest.mark.parametrize("textbook", [False, True], ids=["same_row", "textbook"])
@pytest.mark.parametrize("time_dim", [-1, 0], ids=["batch_major", "time_major"])
def test_retrace_fused_gradients_many_actions(textbook, time_dim, backend, monkeypatch):
    """11 actions: the fused kernel's action loop takes more than one chunk (the last partial),
    and every per-action gradient equals the general rule's."""
    from paper_repro.kernels import adjoints, retrace_grad

    N, T, A = 3, 10, 11
    assert A > retrace_grad.A_CHUNK
    dev = device_of(backend)
    g = torch.Generator().manual_seed(11)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64).to(dev)

    pi, npi = torch.softmax(rand(N, T, A) * 3, -1), torch.softmax(rand(N, T, A) * 3, -1)
    nq, q, r, mu = rand(N, T, A), rand(N, T), rand(N, T), rand(N, T) * 0.8 + 0.1
    act = torch.randint(0, A, (N, T), generator=g).to(dev)
    term = (rand(N, T) < 0.2).float()
    w = [rand(N, T) for _ in range(2)]
    if time_dim == 0:
        pi, npi, nq = (x.transpose(0, 1).contiguous() for x in (pi, npi, nq))
        q, r, mu, act, term, *w = (x.t().contiguous() for x in (q, r, mu, act, term, *w))

    def grads():
        xs = [x.clone().requires_grad_() for x in (pi, mu, q, nq, r, npi)]
        q_ret, adv = P.compute_retrace(xs[0], xs[1], xs[2], xs[3], act, xs[4], term, None, 0.9,
                                       0.8, 1.1, 0.9, next_action_probs_target=xs[5]
                                       if textbook else None, time_dim=time_dim)
        return torch.autograd.grad((q_ret * w[0]).sum() + (adv * w[1]).sum(), xs,
                                   allow_unused=True)

    got = grads()
    monkeypatch.setattr(adjoints, "ENABLED", False)
    for name, a, b in zip(("pi", "mu", "q", "nq", "r", "npi"), got, grads()):
        if b is None:
            assert a is None, name
            continue
        assert_close(f"d{name}", a, b, 1e-12)
