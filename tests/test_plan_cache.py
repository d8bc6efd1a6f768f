"""Launch plans: a repeat of an earlier call's metadata and scalars skips the host work and
gives the same outputs; anything that changes a decision is a miss; bad input still raises."""
import contextlib

import pytest
import torch
from conftest import BACKENDS, TOL, assert_close, device_of
from estimators import ESTIMATORS, LAYOUTS, Layout, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan

IDS = [e.name for e in ESTIMATORS]
DEVICE = device_of(BACKENDS[0])
# time-major views of batch-major memory: dense but not contiguous, so outputs keep the strides
TRANSPOSED = Layout("transposed_view", lambda x: x.t(), lambda x: x.transpose(0, 1),
                    lambda x: x, lambda y: y.t(), 0)
PLANNED = [*LAYOUTS[:3], TRANSPOSED]


@pytest.fixture
def hits(monkeypatch):
    """An empty plan cache, the Triton path, and the list of calls a plan served (a Python plan
    or, on the GPU, a native one through its op's site)."""
    monkeypatch.setattr(_plan, "_PLANS", {})
    served = []
    call, repeat = _plan.Plan.__call__, _plan.repeat

    def counted(plan, args):
        served.append(plan)
        return call(plan, args)

    def counted_repeat(*args):
        out = repeat(*args)
        if out is not None:
            served.append("site")
        return out

    monkeypatch.setattr(_plan.Plan, "__call__", counted)
    monkeypatch.setattr(_plan, "repeat", counted_repeat)
    with L.cpu_backend("triton") if DEVICE == "cpu" else contextlib.nullcontext():
        yield served


def _count():
    """Plans recorded, over every key."""
    return sum(map(len, _plan._PLANS.values()))


@pytest.fixture(params=["guarded", "keyed"])
def guard_mode(request, monkeypatch):
    """Tensor metadata checked by torch's C++ guard, or held in the key (its fallback)."""
    if request.param == "keyed":
        monkeypatch.setattr(_plan, "_MAKE_GUARD", None)
    elif _plan._MAKE_GUARD is None:
        pytest.fail("this torch's tensor guard failed the self-test: plans key the metadata")
    return request.param


def _same(got, want):
    for g, w in zip(outputs(got), outputs(want)):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        assert torch.equal(g, w)


@pytest.mark.parametrize("layout", PLANNED, ids=lambda lay: lay.name)
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_hit_equals_miss(est, layout, hits):
    """A hit reads the new call's tensors: equal to a miss on them and to the reference."""
    first, second = (make_inputs(5, 19, seed=s, device=DEVICE) for s in (1, 2))
    est.call(P, layout.apply(first), time_dim=layout.time_dim)
    assert len(_plan._PLANS) == 1 and not hits
    got = est.call(P, layout.apply(second), time_dim=layout.time_dim)
    assert len(hits) == 1
    _plan._PLANS.clear()
    _same(got, est.call(P, layout.apply(second), time_dim=layout.time_dim))
    for g, w in zip(outputs(got), outputs(est.call(ref, second))):
        assert_close(est.name, layout.back(g), w, TOL[torch.float32])


def _optional_absent(m, d, **kw):
    """Every estimator with its optional tensors left out."""
    r, term = d["r"], d["term"]
    return (m.compute_gae(r, d["v"], term, **kw),
            *m.compute_vtrace(d["lpt"], d["lpb"], d["v"], r, term, **kw),
            *m.compute_retrace(d["pi"], d["mu"], d["v"], d["nq"], d["act"], r, term, None, 0.9,
                               **kw),
            m.compute_lambda_returns(r, d["n"], term, **kw),
            m.compute_discounted_returns(r, term, **kw),
            m.compute_eligibility_traces(r, term, 0.9, 0.8, **kw),
            m.compute_episodic_prefix_sum(r, term, boundary="starts_at", **kw))


@pytest.mark.parametrize("layout", PLANNED, ids=lambda lay: lay.name)
def test_hit_equals_miss_without_optional_tensors(layout, hits):
    first, second = (make_inputs(4, 11, seed=s, device=DEVICE, truncations=False)
                     for s in (1, 2))
    _optional_absent(P, layout.apply(first), time_dim=layout.time_dim)
    got = _optional_absent(P, layout.apply(second), time_dim=layout.time_dim)
    assert len(hits) == len(_plan._PLANS) == 7
    _plan._PLANS.clear()
    _same(got, _optional_absent(P, layout.apply(second), time_dim=layout.time_dim))
    for g, w in zip(got, _optional_absent(ref, second)):
        assert_close("optional absent", layout.back(g), w, TOL[torch.float32])


@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("reverse", [True, False])
def test_affine_scan_hit_equals_miss(reverse, initial, hits):
    def call(seed):
        g = torch.Generator().manual_seed(seed)
        a, b, c = torch.randn(3, 2, 30, generator=g), torch.rand(3, 2, 30, generator=g), \
            torch.randn(3, 2, generator=g)
        args = [x.to(DEVICE) for x in (a, b, c)]
        return P.affine_scan(*args[:2], reverse=reverse, initial=args[2] if initial else None)

    call(1)
    got = call(2)
    assert len(hits) == 1
    _plan._PLANS.clear()
    _same(got, call(2))


def _gae(d, gamma=0.99, **kw):
    return P.compute_gae(d["r"], d["v"], d["term"], d["trunc"], gamma, 0.95, d["boot"], **kw)


def test_what_changes_a_decision_is_a_miss(guard_mode, hits):
    """Strides, dtypes, shapes, scalars, time_dim and an optional tensor's presence each get
    a plan of their own; every call agrees with the reference."""
    base = make_inputs(4, 16, seed=1, device=DEVICE)
    same = LAYOUTS[0]
    cases = {  # name: (inputs as [N, T], layout, keyword arguments)
        "base": (base, same, {}),
        "strides": (base, LAYOUTS[4], {}),
        "dtype": (make_inputs(4, 16, dtype=torch.float64, device=DEVICE), same, {}),
        "flag dtype": (make_inputs(4, 16, flag_dtype=torch.bool, device=DEVICE), same, {}),
        "T": (make_inputs(4, 17, device=DEVICE), same, {}),
        "B": (make_inputs(5, 16, device=DEVICE), same, {}),
        "gamma": (base, same, {"gamma": 0.9}),
        "gamma int": (base, same, {"gamma": 1}),
        "gamma float": (base, same, {"gamma": 1.0}),
        "time_dim": (base, same, {"time_dim": 1}),
        "no truncations": (dict(base, trunc=None), same, {}),
        "time-major": (base, LAYOUTS[1], {"time_dim": 0}),
    }
    for name, (d, layout, kw) in cases.items():
        served = len(hits)
        got = _gae(layout.apply(d), **kw)
        assert len(hits) == served, f"{name}: served by another call's plan"
        assert torch.equal(_gae(layout.apply(d), **kw), got) and len(hits) == served + 1, name
        d64 = {k: None if x is None else x.double().cpu() for k, x in d.items()}
        want = ref.compute_gae(d64["r"], d64["v"], d64["term"], d64["trunc"],
                               kw.get("gamma", 0.99), 0.95, d64["boot"])
        assert_close(name, layout.back(got), want, TOL[got.dtype])
    assert _count() == len(cases)


GOOD = dict(gamma=1.0, lambda_=0.95, time_dim=1)


def _good_gae(d):
    return dict(rewards=d["r"], values=d["v"], terminateds=d["term"], truncateds=d["trunc"],
                bootstrap_values=d["boot"], **GOOD)


@pytest.mark.parametrize("bad, error, match", [
    ({"gamma": True}, TypeError, "gamma must be a real number, got bool"),
    ({"gamma": float("nan")}, ValueError, "gamma must be finite"),
    ({"lambda_": float("inf")}, ValueError, "lambda_ must be finite"),
    ({"gamma": [0.9]}, TypeError, "gamma must be a real number, got list"),
    ({"time_dim": True}, TypeError, "time_dim must be an int, got bool"),
    ({"time_dim": 2}, ValueError, "time_dim=2 is out of range"),
    ({"values": torch.zeros(4, 15)}, ValueError, r"values must have shape \(4, 16\)"),
    ({"rewards": torch.zeros(4, 16, dtype=torch.int32)}, TypeError, "rewards must be float16"),
    ({"values": [[0.0] * 16] * 4}, TypeError, "values must be a torch.Tensor, got list"),
    ({"last_value": torch.zeros(4)}, ValueError, "pass last_value or bootstrap_values"),
], ids=["bool-gamma", "nan-gamma", "inf-lambda", "list-gamma", "bool-time_dim", "time_dim-range",
        "shape", "int-rewards", "list-values", "last-and-bootstrap"])
def test_bad_input_after_a_hit_still_raises(bad, error, match, hits):
    d = make_inputs(4, 16, device=DEVICE)
    P.compute_gae(**_good_gae(d))
    P.compute_gae(**_good_gae(d))
    assert len(hits) == 1
    bad = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in bad.items()}
    with pytest.raises(error, match=match):
        P.compute_gae(**dict(_good_gae(d), **bad))


def test_the_bad_input_check_can_fail(monkeypatch, hits):
    """With scalars keyed by value only (True == 1.0, and they hash alike), a bool gamma would
    be served by the plan of gamma=1.0 and never reach its check."""
    lookup = _plan.lookup

    def by_value(op, tensors, scalars, validate=False):
        return lookup(op, tensors, tuple(float(s) for s in scalars), validate)

    monkeypatch.setattr(_plan, "lookup", by_value)
    d = make_inputs(4, 16, device=DEVICE)
    P.compute_gae(**_good_gae(d))
    P.compute_gae(**dict(_good_gae(d), gamma=True))  # no TypeError: the sloppy key let it in
    assert len(hits) == 1


def test_value_checks_still_run_after_a_hit(hits):
    d = make_inputs(4, 16, device=DEVICE)
    P.compute_gae(**_good_gae(d))
    P.compute_gae(**_good_gae(d))
    two = dict(d, term=d["term"] * 2)
    with pytest.raises(ValueError, match="terminateds must hold only 0 and 1"):
        P.compute_gae(**_good_gae(two), validate=True)
    if DEVICE != "cpu":
        return
    args = [d[k] for k in ("pi", "mu", "v", "nq", "act", "r", "term", "trunc")]
    P.compute_retrace(*args, 0.99)
    P.compute_retrace(*args, 0.99)
    assert len(hits) == 2
    args[4] = torch.full_like(d["act"], 7)
    with pytest.raises(ValueError, match="actions must lie in"):  # on the CPU, always checked
        P.compute_retrace(*args, 0.99)


def test_forced_tiles_bypass_plans(monkeypatch, hits):
    tiles = []
    run, run_bound = D.run, D.run_bound

    def spy(kernel, grid, num_warps, values, n_tensors=None, maxnreg=0):
        tiles.append(values[-5:-2])  # BLOCK_B, BLOCK_T, PREFETCH (then FLIP, ALIGN)
        run(kernel, grid, num_warps, values, n_tensors, maxnreg)

    def spy_bound(cache, kernel, grid, num_warps, values, n_tensors, maxnreg=0):
        tiles.append(values[-5:-2])  # a plan's cached launcher bypasses D.run on the GPU
        run_bound(cache, kernel, grid, num_warps, values, n_tensors, maxnreg)

    monkeypatch.setattr(D, "run", spy)
    monkeypatch.setattr(D, "run_bound", spy_bound)
    d = make_inputs(4, 40, device=DEVICE)
    want = _gae(d)
    _gae(d)
    assert len(hits) == 1
    default = tiles[-1]
    with L.force_config(L.ScanConfig(2, 8, 1, 16)):  # other tiles: other rounding
        assert_close("forced config", _gae(d), want.double(), TOL[torch.float32])
        assert tiles[-1][:2] == (2, 8)
    with L.force_prefetch(not default[2]):
        _same(_gae(d), want)
        assert tiles[-1] == (*default[:2], not default[2])
    assert len(hits) == 1 and len(_plan._PLANS) == 1
    _gae(d)
    assert len(hits) == 2 and tiles[-1] == default


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU backend switch")
def test_torch_backend_takes_no_plan(hits):
    d = make_inputs(4, 16)
    want = _gae(d)
    _gae(d)
    with L.cpu_backend("torch"):
        assert_close("torch path", _gae(d), want.double(), TOL[torch.float32])
        _gae(d)
    assert len(hits) == 1 and len(_plan._PLANS) == 1


def test_gradients_after_cached_calls(hits):
    d = make_inputs(3, 9, dtype=torch.float64, device=DEVICE)
    _gae(d)
    _gae(d)
    r = d["r"].clone().requires_grad_()
    w = torch.randn(3, 9, dtype=torch.float64, device=DEVICE)
    (_gae(dict(d, r=r)) * w).sum().backward()
    r_ref = d["r"].detach().cpu().clone().requires_grad_()
    want = ref.compute_gae(r_ref, *[x.cpu() for x in (d["v"], d["term"], d["trunc"])], 0.99,
                           0.95, d["boot"].cpu())
    (want * w.cpu()).sum().backward()
    assert_close("drewards", r.grad, r_ref.grad, 1e-9)
    # a plan recorded under no_grad for a tensor requiring grad: grad mode needs the op again
    with torch.no_grad():
        _gae(dict(d, r=r))
        served = len(hits)
        assert not _gae(dict(d, r=r)).requires_grad and len(hits) == served + 1
    out = _gae(dict(d, r=r))
    assert out.requires_grad and len(hits) == served + 1


def test_layouts_that_copy_take_no_plan(hits):
    d = make_inputs(4, 12, device=DEVICE)
    between = LAYOUTS[3]
    for est in ESTIMATORS:
        for _ in range(2):
            got = est.call(P, between.apply(d), time_dim=between.time_dim)
        for g, w in zip(outputs(got), outputs(est.call(ref, d))):
            assert_close(est.name, between.back(g), w, TOL[torch.float32])
    strided_rows = {k: (torch.stack([x, x], -1)[..., 1] if k == "last" else x)
                    for k, x in d.items()}
    for _ in range(2):
        P.compute_gae(d["r"], d["v"], d["term"], last_value=strided_rows["last"])
    assert not hits and not _plan._PLANS


def test_subclasses_take_no_plan(hits):
    class Tagged(torch.Tensor):
        pass

    d = make_inputs(4, 12, device=DEVICE)
    r = d["r"].as_subclass(Tagged)
    for _ in range(2):
        P.compute_gae(r, d["v"], d["term"])
    assert not hits and not _plan._PLANS


def test_plans_are_bounded(monkeypatch, hits):
    monkeypatch.setattr(_plan, "MAX_PLANS", 2)
    for gamma in (0.9, 0.8, 0.7):
        _gae(make_inputs(2, 3, device=DEVICE), gamma=gamma)
    assert len(_plan._PLANS) == 1  # full at the third: cleared, then the third recorded


def test_shapes_under_one_key_are_bounded_newest_first(monkeypatch, guard_mode, hits):
    monkeypatch.setattr(_plan, "MAX_VARIANTS", 2)
    inputs = {T: make_inputs(2, T, device=DEVICE) for T in (3, 4, 5)}
    for T in (3, 4, 5, 4, 5):
        _gae(inputs[T])
    assert len(hits) == 2 and _count() == (2 if guard_mode == "guarded" else 3)
    _gae(inputs[3])  # the oldest was dropped where shapes share a key
    assert len(hits) == (2 if guard_mode == "guarded" else 3)


def test_a_loop_over_shapes_finds_each_plan(guard_mode, hits):
    inputs = [make_inputs(2, T, device=DEVICE) for T in (3, 4, 5)]
    want = [_gae(d) for d in inputs]
    for _ in range(2):
        for d, w in zip(inputs, want):
            _same(_gae(d), w)
    assert len(hits) == 6 and _count() == 3


def test_compile_after_plans(hits):
    d = make_inputs(3, 20, device=DEVICE)
    want = _gae(d)
    _gae(d)
    torch._dynamo.reset()
    compiled = torch.compile(_gae, fullgraph=True)
    _same(compiled(d), want)
    assert len(hits) == 1


def _recorded_for(tensors, scalars):
    """A stand-in plan recorded for a lookup of ``tensors`` and ``scalars``."""
    plan, found = _plan.lookup("op", tensors, scalars)
    assert plan is None and found is not None
    marker = _plan.Plan(None, 0, None, 1, (0, 1), False)
    _plan._remember(found, lambda matches: setattr(marker, "matches", matches) or marker)
    return marker


def test_lookup_finds_only_what_the_checks_would_not_distinguish(guard_mode, monkeypatch):
    monkeypatch.setattr(_plan, "_PLANS", {})
    x = torch.zeros(2, 3)
    scalar_sets = [(1.0, -1), (True, -1), (1, -1), (1.0, 1), (1.0, True)]
    plans = [_recorded_for((x,), s) for s in scalar_sets]
    for s, plan in zip(scalar_sets, plans):
        assert _plan.lookup("op", (x.clone(),), s)[0] is plan, s
    for tensors in [(x.t(),), (x.double(),), (x[:1],), (None,), (x.clone().requires_grad_(),),
                    (x.as_subclass(type("Tagged", (torch.Tensor,), {})),)]:
        assert _plan.lookup("op", tensors, (1.0, -1))[0] is None
    assert _plan.lookup("op", (x,), ([1.0],)) == (None, None)  # unhashable: the checks say why
    assert _plan.lookup("op", ([x],), (1.0, -1)) == (None, None)
    assert _plan.lookup("op", (x,), (1.0, -1), validate=True) == (None, None)
    with L.force_prefetch(True):
        assert _plan.lookup("op", (x,), (1.0, -1)) == (None, None)
