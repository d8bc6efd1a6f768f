"""GPU-only cases: sequences longer than the paper's 131072 limit, many rows, a time-split
launch at scale, and determinism. Run on the H200 with ``make test-gpu``."""
import os
import subprocess
import sys

import pytest
import torch
from conftest import TOL, assert_close
from estimators import ESTIMATORS, LAYOUTS, make_inputs, outputs

import paper_repro as P
from paper_repro.baselines import reference as ref

pytestmark = pytest.mark.gpu
IDS = [e.name for e in ESTIMATORS]


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_long_sequences(est):
    d = make_inputs(2, 140_001, device="cuda")
    for g, w in zip(outputs(est.call(P, d)), outputs(est.call(ref, d))):
        assert_close(est.name, g, w, 1e-4)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_many_rows(est):
    d = make_inputs(100_000, 16, device="cuda")
    for g, w in zip(outputs(est.call(P, d)), outputs(est.call(ref, d))):
        assert_close(est.name, g, w, TOL[torch.float32])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_few_rows_long_split(est):
    """64 x 32768 takes the reduce-then-scan launch."""
    d = make_inputs(16, 32_768, device="cuda")
    for g, w in zip(outputs(est.call(P, d)), outputs(est.call(ref, d))):
        assert_close(est.name, g, w, 1e-4)


@pytest.mark.parametrize("N,T", [(3, 400_001), (3, 700_001)])
@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_up_to_four_long_rows(est, N, T):
    """Up to four rows of more than 2**20 steps in all, under the heuristic's own tiles (two
    passes over 4096- and 8192-step segments for the estimators that keep them)."""
    d = make_inputs(N, T, device="cuda")
    for g, w in zip(outputs(est.call(P, d)), outputs(est.call(ref, d))):
        assert_close(est.name, g, w, 1e-4)


def test_rows_past_the_segment_limit():
    """A row of 2**29 + 7 steps, whose two passes would take 65537 segments of 8192 (past
    CUDA's 65535 on the grid's second axis; they take about 1024 of 2**19 steps): the prefix sum and
    the discounted returns (gamma 1) of ones, episodes of 1000 steps, count steps exactly in
    fp32."""
    T = (1 << 29) + 7
    t = torch.arange(T, device="cuda", dtype=torch.int32)
    ones, dones = torch.ones(1, T, device="cuda"), (t % 1000 == 999)[None]
    got = P.compute_episodic_prefix_sum(ones, dones)
    assert torch.equal(got[0], (t % 1000 + 1).float())
    del got
    got = P.compute_discounted_returns(ones, dones, gamma=1.0)
    assert torch.equal(got[0], torch.minimum(1000 - t % 1000, T - t).float())


def test_gradients_past_int32_elements():
    """GAE's backward over 2 x (2**30 + 8) steps, 2**31 elements and more (its gradient kernel
    indexes in 64 bits): with gamma = lambda = 1 and a summed loss every value's gradient is
    -1, episodes of 200 steps or not."""
    T = (1 << 30) + 8
    zeros = torch.zeros(2, T, dtype=torch.bfloat16, device="cuda")
    values = zeros.clone().requires_grad_()
    dones = (torch.arange(T, device="cuda", dtype=torch.int32) % 200 == 199).expand(2, T)
    P.compute_gae(zeros, values, dones, None, 1.0, 1.0).sum().backward()
    assert bool((values.grad == -1).all())


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_look_back_at_scale(est):
    """The heuristic's single-pass look-back (one tile a program, 40-391 programs a row):
    16 x 20000 batch- and time-major, 4 x 100001 batch-major, and 32 x 131073, whose fp32 rows
    take the long-row tiles (capped two warps, one warp in 1024 or 512 steps, V-trace's four)."""
    from paper_repro.kernels import affine_scan

    for (n, t), layout in (((16, 20_000), LAYOUTS[0]), ((16, 20_000), LAYOUTS[1]),
                           ((4, 100_001), LAYOUTS[0]), ((32, 131_073), LAYOUTS[0])):
        d = make_inputs(n, t, device="cuda")
        got = [layout.back(y) for y in outputs(est.call(P, layout.apply(d),
                                                        time_dim=layout.time_dim))]
        for g, w in zip(got, outputs(est.call(ref, d))):
            assert_close(f"{est.name} {n}x{t} {layout.name} "
                         f"in_launch_order={affine_scan.IN_LAUNCH_ORDER}", g, w, 1e-4)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_time_major_look_back_tiles(est):
    """fp32 time-major rows of few row blocks under the heuristic's one-tile look-back, 32 x 128
    or 32 x 256 (512 x 4096; 1000 x 1500, 12 tiles a row block, neither a multiple; 2048 x
    3000, a row block an SM), and 512 x 8192, where the three-input estimators keep two
    passes."""
    from paper_repro.kernels import _launch as L

    sms = L.num_sms(torch.device("cuda"))
    for n, t in ((512, 4096), (1000, 1500), (2048, 3000), (512, 8192)):
        if est.kernel != "retrace" and (n, t) != (512, 8192):
            assert L.choose_config(n, t, True, sms, est.kernel == "vtrace").single_pass
        d = make_inputs(n, t, device="cuda")
        layout = LAYOUTS[1]
        got = [layout.back(y) for y in outputs(est.call(P, layout.apply(d),
                                                        time_dim=layout.time_dim))]
        for g, w in zip(got, outputs(est.call(ref, d))):
            assert_close(f"{est.name} {n}x{t} time-major", g, w, 1e-4)


def test_look_back_by_ticket():
    """Programs placed by ticket (PAPER_REPRO_LOOKBACK_TICKETS=1, the order used off CUDA) on
    the GPU: the look-back tests in a fresh process, where the setting is read at import."""
    env = dict(os.environ, PAPER_REPRO_LOOKBACK_TICKETS="1")
    here = os.path.abspath(__file__)
    code = ("from paper_repro.kernels import affine_scan\n"
            "assert not affine_scan.IN_LAUNCH_ORDER")
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{here}::test_look_back_at_scale",
                           f"{here}::test_cuda_graph_replays_the_look_back"],
                          env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(here)))  # the repository root
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_bit_identical_reruns(est):
    d = make_inputs(512, 1000, device="cuda")
    first = outputs(est.call(P, d))
    second = outputs(est.call(P, d))
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_cuda_graph_capture_and_replay(est):
    d = make_inputs(64, 300, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        est.call(P, d)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = outputs(est.call(P, d))
    for key in ("r", "v", "n", "nq"):
        d[key].mul_(-0.5).add_(0.25)  # new data in the captured buffers
    graph.replay()
    torch.cuda.synchronize()
    for g, w in zip(captured, outputs(est.call(ref, d))):
        assert_close(est.name, g, w, TOL[torch.float32])


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_cuda_graph_replays_the_look_back(est):
    """A captured look-back zeroes its scratch on every replay: two replays on new data both
    match the reference (stale published words would hand the second one old carries)."""
    from paper_repro.kernels import _launch as L

    d = make_inputs(3, 4000, device="cuda")
    with L.force_config(L.ScanConfig(1, 64, 1, 64, single_pass=True)):
        est.call(P, d)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = outputs(est.call(P, d))
    for scale in (-0.5, 2.0):
        for key in ("r", "v", "n", "nq"):
            d[key].mul_(scale).add_(0.25)
        graph.replay()
        torch.cuda.synchronize()
        for g, w in zip(captured, outputs(est.call(ref, d))):
            assert_close(est.name, g, w, 1e-4)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_look_back_pairs_in_graphs_and_streams(est):
    """Look-backs keep a scratch pair per stream and per capture (kernels/_links.py): two
    graphs (one with look-backs of two sizes) replayed in turn between eager calls on two
    streams, each on new data, all match the reference; eager look-backs never synchronise."""
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels import _links

    small, big = make_inputs(3, 4000, device="cuda"), make_inputs(2, 9001, device="cuda")

    def expect(got, d):
        for g, w in zip(got, outputs(est.call(ref, d))):
            assert_close(est.name, g, w, 1e-4)

    with L.force_config(L.ScanConfig(1, 64, 1, 64, single_pass=True)):
        est.call(P, small), est.call(P, big)  # compile outside the captures
        torch.cuda.synchronize()
        first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(first):
            in_first = outputs(est.call(P, big)), outputs(est.call(P, small))
        assert any(key[4] is not None for key in _links._PAIRS), "no capture pair"
        with torch.cuda.graph(second):
            in_second = outputs(est.call(P, small))
        other = torch.cuda.Stream()
        for scale in (-0.5, 2.0, 0.7):
            for d in (small, big):
                for key in ("r", "v", "n", "nq"):
                    d[key].mul_(scale).add_(0.25)
            first.replay()
            expect(in_first[0], big), expect(in_first[1], small)
            torch.cuda.set_sync_debug_mode("error")
            try:
                eager = outputs(est.call(P, small))
                second.replay()
                other.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(other):
                    on_other = outputs(est.call(P, big))
                torch.cuda.current_stream().wait_stream(other)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            expect(eager, small), expect(in_second, small), expect(on_other, big)
            first.replay()
            expect(in_first[0], big), expect(in_first[1], small)


@pytest.mark.parametrize("est", ESTIMATORS, ids=IDS)
def test_no_host_synchronisation(est):
    d = make_inputs(64, 300, device="cuda")
    est.call(P, d)
    torch.cuda.set_sync_debug_mode("error")
    try:
        est.call(P, d)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _masked_inputs(N, T):
    g = torch.Generator().manual_seed(11)
    r, v = torch.randn(N, T, generator=g), torch.randn(N, T, generator=g)
    mask = (torch.rand(N, T, generator=g) > 0.2).float()
    return [x.cuda() for x in (r, v, mask)]


def test_masked_gae_long_rows_graph_and_no_sync():
    """Masked GAE on rows long enough to split time, captured in a CUDA graph and replayed on
    new data, and with no host synchronisation."""
    r, v, m = _masked_inputs(4, 140_001)
    assert_close("masked gae", P.compute_masked_gae(r, v, m, 1.0, 0.95),
                 ref.compute_masked_gae(r, v, m, 1.0, 0.95), 1e-4)
    r, v, m = _masked_inputs(64, 300)
    P.compute_masked_gae(r, v, m, 1.0, 0.95)
    torch.cuda.set_sync_debug_mode("error")
    try:
        P.compute_masked_gae(r, v, m, 1.0, 0.95)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = P.compute_masked_gae(r, v, m, 1.0, 0.95)
    r.mul_(-0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert_close("replayed", captured, ref.compute_masked_gae(r, v, m, 1.0, 0.95),
                 TOL[torch.float32])


def _puff_inputs(S, H):
    g = torch.Generator().manual_seed(12)
    values, rewards = torch.randn(S, H, generator=g), torch.randn(S, H, generator=g)
    terminals = (torch.rand(S, H, generator=g) < 0.05).float()
    ratio = torch.exp(0.3 * torch.randn(S, H, generator=g))
    return [x.cuda() for x in (values, rewards, terminals, ratio, torch.zeros(S, H))]


def test_puff_advantage_one_launch_graph_and_no_sync():
    """PufferLib's advantage on the one-launch path: long rows that split time, then a
    capture in a CUDA graph replayed on new data, and no host synchronisation."""
    from paper_repro.pufferlib_compat import compute_puff_advantage

    args = (0.99, 0.95, 1.0, 1.0)
    x = _puff_inputs(4, 140_001)
    got = compute_puff_advantage(*x, *args)
    assert_close("puff", got[:, :-1], ref.compute_puff_advantage(*x, *args)[:, :-1], 1e-4)
    x = _puff_inputs(1024, 64)
    compute_puff_advantage(*x, *args)
    torch.cuda.set_sync_debug_mode("error")
    try:
        compute_puff_advantage(*x, *args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        compute_puff_advantage(*x, *args)
    x[1].mul_(-0.5)
    x[3].copy_(x[3].flip(1))
    graph.replay()
    torch.cuda.synchronize()
    assert_close("replayed", x[4][:, :-1], ref.compute_puff_advantage(*x, *args)[:, :-1],
                 TOL[torch.float32])
