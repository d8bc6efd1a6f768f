"""Retrace reading its per-action inputs as 64-bit words (retrace.packing, action_reads): every
word layout against the float64 reference, the layouts that must keep per-action loads, and a
launch plan that must not read misaligned memory as words."""
import contextlib
from dataclasses import replace

import pytest
import torch
import triton.language as tl
from conftest import HAS_CUDA, TOL, assert_close

import paper_repro.kernels.retrace as R
from paper_repro.baselines import reference as ref
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _plan

DEVICE = "cuda" if HAS_CUDA else "cpu"
WALK = L.ScanConfig(1, 16, 1, 48, flip=4)  # one program walks a 45-step row in three tiles
LOOK_BACK = L.ScanConfig(2, 16, 1, 16, True, flip=4)  # one tile a program, look-back
SEGMENTS = L.ScanConfig(1, 16, 1, 32, True, flip=4)  # segments of two tiles, swept twice
TWO_PASSES = L.ScanConfig(1, 16, 1, 16, flip=4)  # reduce, then scan
# (dtype, actions, textbook expectation, time-major, forced tile or None for the heuristic's)
CASES = [(torch.float32, 4, False, False, WALK), (torch.bfloat16, 4, True, False, LOOK_BACK),
         (torch.float16, 8, False, True, replace(LOOK_BACK, flip=0)),
         (torch.float32, 2, True, True, None), (torch.bfloat16, 8, False, False, SEGMENTS),
         (torch.float32, 16, False, False, TWO_PASSES), (torch.float16, 4, True, True, None)]


@pytest.fixture
def kernels():
    """The Triton kernels: on the GPU, else through the interpreter."""
    with L.cpu_backend("triton") if DEVICE == "cpu" else contextlib.nullcontext():
        yield


@pytest.fixture
def words(monkeypatch):
    """The PACK of every Retrace launch, in order."""
    seen = []
    reads = R.action_reads

    def spy(*args):
        out = reads(*args)
        seen.append(out[0])
        return out

    monkeypatch.setattr(R, "action_reads", spy)
    return seen


@pytest.fixture
def prefetch(monkeypatch):
    """The PREFETCH of every Retrace launch, in order."""
    seen = []
    launch = R.Launch

    def spy(*args, **kwargs):
        job = launch(*args, **kwargs)
        seen.append(job.tile[2])
        return job

    monkeypatch.setattr(R, "Launch", spy)
    return seen


def inputs(N, T, A, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    pi, npi = (torch.softmax(torch.randn(N, T, A, generator=g), -1).to(dtype) for _ in range(2))
    nq = torch.randn(N, T, A, generator=g).to(dtype)
    act = torch.randint(0, A, (N, T), generator=g)
    r, q = (torch.randn(N, T, generator=g).to(dtype) for _ in range(2))
    mu = (torch.rand(N, T, generator=g) * 0.8 + 0.1).to(dtype)
    term = (torch.rand(N, T, generator=g) < 0.1).float()
    trunc = (torch.rand(N, T, generator=g) < 0.1).float() * (1 - term)
    return [pi, mu, q, nq, act, r, term, trunc, 0.99, 0.9, 0.8, 1.2], npi


def expected(args, npi, textbook):
    wide = [x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in args]
    kw = {"next_action_probs_target": npi.double()} if textbook else {}
    return ref.compute_retrace(*wide, **kw)


def run(args, npi, textbook, time_major, tile=None):
    move = (lambda x: x.transpose(0, 1).contiguous().to(DEVICE)) if time_major else \
        (lambda x: x.to(DEVICE))
    kw = {"next_action_probs_target": move(npi)} if textbook else {}
    with L.force_config(tile):
        got = R.compute_retrace(*[move(x) if torch.is_tensor(x) else x for x in args], **kw,
                                time_dim=0 if time_major else -1)
    return [y.transpose(0, 1) if time_major else y for y in got]


@pytest.mark.parametrize("dtype, A, textbook, time_major, tile", CASES,
                         ids=[f"{str(c[0])[6:]}-A{c[1]}-{'textbook' if c[2] else 'row'}-"
                              f"{'TN' if c[3] else 'NT'}-{'tile' if c[4] else 'shipped'}"
                              for c in CASES])
def test_words_match_the_reference(dtype, A, textbook, time_major, tile, kernels, words):
    args, npi = inputs(3, 45, A, dtype, seed=A)
    got = run(args, npi, textbook, time_major, tile)
    assert words == [R.PACKS[dtype][0]]
    for y, w in zip(got, expected(args, npi, textbook)):
        assert_close("retrace", y, w, TOL[dtype])


def test_words_only_where_the_layout_allows():
    """packing: a contiguous actions axis, A and the strides multiples of PACK, one dtype of
    fp32, bf16 or fp16, 8-byte alignment and at most MAX_WORDS words; else per-action loads."""
    def pack(*xs):
        present, stride3 = L.common_strides(list(xs))
        return R.packing(present, stride3)[0]

    x = torch.rand(2, 5, 4)
    assert pack(x, x.clone()) == 2
    assert pack(x.bfloat16(), x.bfloat16()) == 4 and pack(x.half(), x.half()) == 4
    assert pack(x.double(), x.double()) == 0  # one value a word: nothing to gain
    assert pack(x[..., :3], x[..., :3]) == 0  # A not a multiple of PACK
    strided = torch.rand(2, 5, 8)[..., ::2]
    assert pack(strided, strided) == 0  # the actions axis not contiguous
    assert pack(x.bfloat16(), x) == 0  # two dtypes
    shifted = torch.rand(2 * 5 * 4 + 1)[1:].view(2, 5, 4)  # 4 bytes off 8-byte alignment
    assert pack(shifted, shifted) == 0
    odd = torch.rand(2, 5, 6)[..., :4]  # a step's actions start at odd elements: stride 6 ok
    assert pack(odd, odd) == 2
    odd = torch.rand(2, 5, 5)[..., :4]  # stride 5: step 1's words would be misaligned
    assert pack(odd, odd) == 0
    wide = torch.rand(2, 5, 2 * (R.MAX_WORDS + 1))
    assert pack(wide, wide) == 0 and pack(wide[..., :2 * R.MAX_WORDS],
                                          wide[..., :2 * R.MAX_WORDS]) == 2


def test_which_rows_read_words_and_how():
    """Batch-major rows read words by inline assembly (WORDS 2: pairs; 1: one word a step),
    one-tile rows included; time-major rows read them by ``tl.load`` (WORDS 0), and so does
    every row under ``L.force_word_loads(0)``, where one-tile batch-major rows read per
    action as before."""
    x = torch.rand(2, 5, 4)
    present, stride3 = L.common_strides([x, x.clone()])
    words = (stride3[0] // 2, stride3[1] // 2, 1)
    one = L.ScanConfig(1, 128, 1, 128)
    assert R.action_reads(present, stride3, one, 45, False) == (2, tl.float32, 4, 2, words)
    assert R.action_reads(present, stride3, one, 45, True) == (2, tl.float32, 0, 0, words)
    assert R.action_reads(present, stride3, WALK, 45, False) == (2, tl.float32, 4, 2, words)
    half = [t.bfloat16() for t in present]  # 16-bit: one word a step
    assert R.action_reads(half, stride3, one, 45, False)[:4] == (4, tl.bfloat16, 4, 1)
    with L.force_word_loads(0):
        assert R.action_reads(present, stride3, one, 45, False)[0] == 0
        assert R.action_reads(present, stride3, WALK, 45, False)[3] == 0


def test_word_pairs_only_where_aligned():
    """``word_loads``: a 16-byte load a pair of words where a step has an even count of them
    and every pair is 16-byte aligned, else a word a load; ``L.force_word_loads`` overrules,
    ``tl.load`` (0) included, but never reads pairs where they are misaligned."""
    def mode(t, time_major=False):
        present, stride3 = L.common_strides([t, t])
        A = t.shape[-1]
        words = (stride3[0] // 2, stride3[1] // 2, 1)
        return R.word_loads(present, words, time_major, A // 2)

    x = torch.rand(2, 5, 8)
    assert mode(x) == 2 and mode(x[..., :4]) == 2  # 4 words a step, or 2 of a stride of 8
    assert mode(x[..., :2]) == 1  # one word a step
    assert mode(torch.rand(2, 5, 6)[..., :4]) == 1  # stride 6: odd steps' pairs misaligned
    shifted = torch.rand(2 * 5 * 4 + 2)[2:].view(2, 5, 4)  # 8 bytes off 16-byte alignment
    assert mode(shifted) == 1
    assert mode(x, time_major=True) == 0
    for forced in (0, 1, 2):
        with L.force_word_loads(forced):
            assert mode(x) == forced
            assert mode(shifted) == min(forced, 1)
            assert mode(x, time_major=True) == 0


@pytest.mark.parametrize("forced", [0, 1, 2])
@pytest.mark.parametrize("tile", [WALK, LOOK_BACK, L.ScanConfig(1, 64, 1, 64, flip=4)],
                         ids=["walk", "look-back", "one-tile"])
def test_word_loads_match_the_reference(forced, tile, kernels, monkeypatch):
    """Each way of reading the words, a pair a load included, answers as the float64
    reference: fp32 with 8 actions (four words a step, two pairs) on rows of 45 steps; under
    the interpreter the words come from ``tl.load``, through the same loops."""
    seen = []
    reads = R.action_reads
    monkeypatch.setattr(R, "action_reads", lambda *a: seen.append(reads(*a)) or seen[-1])
    args, npi = inputs(3, 45, 8, torch.float32, seed=forced)
    with L.force_word_loads(forced):
        got = run(args, npi, True, False, tile)
    assert [r[3] for r in seen] == [forced] and seen[0][0] == (2 if forced else seen[0][0])
    for y, w in zip(got, expected(args, npi, True)):
        assert_close("retrace", y, w, TOL[torch.float32])


def test_a_misaligned_repeat_does_not_reuse_a_words_plan(kernels, words, monkeypatch):
    """A plan recorded on aligned per-action inputs read as words must not serve a repeat with
    the same shapes and strides whose memory lies 2 bytes off: that call reads per action."""
    monkeypatch.setattr(_plan, "_PLANS", {})
    args, npi = inputs(3, 45, 4, torch.bfloat16, seed=7)
    want = expected(args, npi, False)
    got = run(args, npi, False, True)
    assert words == [4] and sum(map(len, _plan._PLANS.values())) == 1

    def shifted(x):
        buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=DEVICE)
        y = buf[1:].view(x.shape).copy_(x)
        assert y.stride() == x.stride() and y.data_ptr() % 8
        return y

    moved = [x.transpose(0, 1).contiguous().to(DEVICE) if torch.is_tensor(x) else x
             for x in args]
    moved[0], moved[3] = shifted(moved[0]), shifted(moved[3])
    again = [y.transpose(0, 1) for y in R.compute_retrace(*moved, time_dim=0)]
    assert words == [4, 0]  # the plan did not match: a fresh launch without words
    for y, g, w in zip(again, got, want):
        assert_close("retrace", y, w, TOL[torch.bfloat16])
        assert torch.equal(y.cpu(), g.cpu())


def test_pairs_and_single_words_answer_bit_for_bit(kernels):
    """A pair a load sums a step's actions in the order a word a load does (word k's before
    word k + 1's), so the two answer bit for bit."""
    args, npi = inputs(3, 45, 8, torch.float32, seed=11)
    answers = []
    for forced in (1, 2):
        with L.force_word_loads(forced):
            answers.append([y.cpu() for y in run(args, npi, True, False, WALK)])
    assert all(torch.equal(a, b) for a, b in zip(*answers))


def test_a_repeat_off_16_bytes_does_not_reuse_a_pairs_plan(kernels, monkeypatch):
    """A plan recorded on per-action inputs read a 16-byte pair a load must not serve a repeat
    whose inputs lie 8 bytes off 16-byte alignment: that call reads a word a load."""
    monkeypatch.setattr(_plan, "_PLANS", {})
    seen = []
    reads = R.action_reads
    monkeypatch.setattr(R, "action_reads", lambda *a: seen.append(reads(*a)) or seen[-1])
    args, npi = inputs(3, 45, 4, torch.float32, seed=5)
    moved = [x.to(DEVICE) if torch.is_tensor(x) else x for x in args]
    got = R.compute_retrace(*moved)
    assert [r[3] for r in seen] == [2] and sum(map(len, _plan._PLANS.values())) == 1

    def shifted(x):
        buf = torch.empty(x.numel() + 2, dtype=x.dtype, device=DEVICE)
        y = buf[2:].view(x.shape).copy_(x)
        assert y.stride() == x.stride() and y.data_ptr() % 16 == 8
        return y

    moved[0], moved[3] = shifted(moved[0]), shifted(moved[3])
    again = R.compute_retrace(*moved)
    assert [r[3] for r in seen] == [2, 1]  # a fresh launch, a word a load
    for y, g, w in zip(again, got, expected(args, npi, False)):
        assert_close("retrace", y, w, TOL[torch.float32])
        assert torch.equal(y.cpu(), g.cpu())


@pytest.mark.parametrize("forced, time_major", [(True, False), (False, True)])
def test_forced_words_overrule_the_rule(forced, time_major, kernels, words, monkeypatch):
    """``L.force_words``: words wherever the layout allows, a one-tile batch-major row read by
    ``tl.load`` included (True: there the rule reads per action), or none, a time-major call
    included (False); the results match the reference either way, and no launch plan is
    recorded under the setting."""
    monkeypatch.setattr(_plan, "_PLANS", {})
    args, npi = inputs(3, 45, 4, torch.float32, seed=3)
    with L.force_word_loads(None if time_major else 0):
        with L.force_words(forced):
            got = run(args, npi, False, time_major)
        assert words == [2 if forced else 0] and not _plan._PLANS
        for y, w in zip(got, expected(args, npi, False)):
            assert_close("retrace", y, w, TOL[torch.float32])
        run(args, npi, False, time_major)
    assert words[-1] == (0 if forced else 2)  # the rule again outside the block


def test_l2_hints_only_for_16_bit_or_long_4_warp_batch_major_walks(monkeypatch):
    """The next tile is requested into L2 where one-row blocks walk 16-bit batch-major rows,
    or fp32 ones in 4 warps over 4 tiles or more: not in shorter or narrower fp32 walks
    (slower there), time-major or several-row blocks, nor before sm_90."""
    monkeypatch.setattr(R, "bulk_prefetch", lambda device: True)
    cpu = torch.device("cpu")
    long_walk = L.ScanConfig(1, 512, 4, 4096, flip=4)
    assert R.l2_hints(WALK, False, 2, cpu)
    assert not R.l2_hints(WALK, False, 4, cpu)  # one warp
    assert R.l2_hints(long_walk, False, 4, cpu)
    assert not R.l2_hints(replace(long_walk, seg_len=1024), False, 4, cpu)  # two tiles
    assert not R.l2_hints(replace(long_walk, num_warps=2), False, 4, cpu)
    assert not R.l2_hints(WALK, True, 2, cpu)
    assert not R.l2_hints(replace(WALK, BLOCK_B=2), False, 2, cpu)
    monkeypatch.setattr(R, "bulk_prefetch", lambda device: False)
    assert not R.l2_hints(WALK, False, 2, cpu)
    assert not R.l2_hints(long_walk, False, 4, cpu)


def test_bulk_prefetch_needs_sm_90():
    from paper_repro.kernels import _hints

    assert _hints.bulk_prefetch.__wrapped__(torch.device("cpu")) == _hints.INTERPRETED
    if HAS_CUDA:
        major = torch.cuda.get_device_capability()[0]
        assert _hints.bulk_prefetch.__wrapped__(torch.device("cuda", 0)) == (
            major >= 9 and torch.version.hip is None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_walks_with_l2_hints_match_the_reference(dtype, kernels, prefetch):
    """A 16-bit walk launches with PREFETCH (its next tile's requests; left out under the
    interpreter), fp32 without, and both answer as the reference: rows of 45 steps in three
    tiles, the last partial."""
    args, npi = inputs(3, 45, 4, dtype, seed=7)
    got = run(args, npi, False, False, WALK)
    assert prefetch == [dtype == torch.bfloat16]
    for y, w in zip(got, expected(args, npi, False)):
        assert_close("retrace", y, w, TOL[dtype])


def test_forced_prefetch_overrules_the_hint_rule(kernels, prefetch):
    """``force_prefetch`` decides PREFETCH whatever ``l2_hints`` says, so the A/B probe can
    time fp32 walks with the hints and 16-bit ones without."""
    for dtype, forced in ((torch.float32, True), (torch.bfloat16, False)):
        args, npi = inputs(2, 40, 4, dtype, seed=3)
        with L.force_prefetch(forced):
            got = run(args, npi, False, False, WALK)
        for y, w in zip(got, expected(args, npi, False)):
            assert_close("retrace", y, w, TOL[dtype])
    assert prefetch == [True, False]
