"""CPU tests of the PPO end-to-end experiment (paper_repro.ppo) on tiny shapes."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from paper_repro.ppo import arms, stats
from paper_repro.ppo.__main__ import main
from paper_repro.ppo.config import STAGES, PPOConfig, full_grid, quick_grid, select
from paper_repro.ppo.convergence import convergence_check
from paper_repro.ppo.experiment import correctness_gate, rotated, run_config
from paper_repro.ppo.model import make_agent, make_rollout
from paper_repro.ppo.timing import StageTimer
from paper_repro.ppo.update import ppo_update, rollout_values

TINY = PPOConfig(8, 16, (8, 8), warmup=1, iters=2)
LOOP = arms._keywords(arms.torch_ops.gae_loop)


def _update(cfg, gae_fn=arms.ours):
    rollout = make_rollout(cfg, "cpu")
    net, opt = make_agent(cfg, "cpu")
    timer = StageTimer("cpu")
    losses = ppo_update(net, opt, rollout, gae_fn, cfg, timer, torch.Generator().manual_seed(0))
    return losses, timer.read()


def test_update_times_every_stage():
    losses, ms = _update(TINY)
    assert losses.shape == (TINY.epochs * TINY.minibatches,)
    assert torch.isfinite(losses).all()
    assert set(ms) == {*STAGES, "total"}
    assert all(v >= 0 for v in ms.values())
    assert sum(ms[s] for s in STAGES) <= ms["total"] * (1 + 1e-6)


@pytest.mark.parametrize("recompute", [False, True], ids=["once", "recompute"])
def test_update_gae_calls(recompute):
    cfg = PPOConfig(8, 16, (8, 8), recompute=recompute)
    calls = []

    def counting(*args):
        calls.append(1)
        return arms.ours(*args)

    _update(cfg, counting)
    assert len(calls) == cfg.gae_calls == (16 if recompute else 1)


def test_update_changes_parameters_and_is_seeded():
    rollout = make_rollout(TINY, "cpu")
    net, _ = make_agent(TINY, "cpu")
    before = [p.detach().clone() for p in net.parameters()]
    losses_a, _ = _update(TINY)
    losses_b, _ = _update(TINY)
    torch.testing.assert_close(losses_a, losses_b, rtol=0, atol=0)
    net2, opt2 = make_agent(TINY, "cpu")
    ppo_update(net2, opt2, rollout, arms.ours, TINY, StageTimer("cpu"), torch.Generator())
    assert any(not torch.equal(a, b) for a, b in zip(before, net2.parameters(), strict=True))


def test_rollout_statistics():
    cfg = PPOConfig(64, 128, (8, 8))
    r = make_rollout(cfg, "cpu")
    assert r.obs.shape == (64, 128, 60) and r.actions.shape == (64, 128, 8)
    assert abs(r.old_logp.mean().item() + 5) < 0.01 and abs(r.old_logp.std().item() - 0.1) < 0.01
    assert set(r.dones.unique().tolist()) <= {0.0, 1.0}
    assert 0.01 < r.dones.mean().item() < 0.03


def test_correctness_gate_passes_and_fails():
    rollout = make_rollout(TINY, "cpu")
    net, _ = make_agent(TINY, "cpu")
    values = rollout_values(net, rollout)

    def biased(*args):
        return LOOP(*args) + 1e-3

    def nan(*args):
        out = LOOP(*args)
        out[0, 0] = math.nan
        return out

    gate = correctness_gate(
        {"ours": arms.ours, "loop": LOOP, "ref": arms.reference_gae, "biased": biased, "nan": nan},
        rollout.rewards,
        values,
        rollout.dones,
        TINY,
    )
    ok = {g["arm"]: g["correct"] for g in gate}
    assert ok == {"ours": True, "loop": True, "ref": True, "biased": False, "nan": False}


def test_run_config_interleaves_and_skips_incorrect_arms():
    result = run_config(
        TINY, {"ours": arms.ours, "loop": LOOP, "bad": lambda *a: LOOP(*a) * 2}, "cpu"
    )
    rows = pd.DataFrame(result.rows)
    assert set(rows["arm"]) == {"ours", "loop"}
    assert set(rows["stage"]) == {*STAGES, "total", "resid"}
    assert sorted(rows["iteration"].unique()) == list(range(TINY.iters))
    # rotation: each arm runs first in some iteration and second in another
    assert rows.groupby("arm")["order"].nunique().eq(2).all()
    assert (rows.loc[rows["stage"] == "resid", "ms"] >= -1e-9).all()


def test_rotated():
    assert rotated(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert rotated([], 3) == []


def _synthetic_rows(nongae_factor, gae_ms=10.0, iters=5):
    """ours: 100 ms non-GAE + 1 ms GAE; slow: 100·factor ms non-GAE + gae_ms."""
    rows = []
    for it in range(iters):
        for arm, nongae, gae in (("ours", 100.0, 1.0), ("slow", 100.0 * nongae_factor, gae_ms)):
            stages = dict.fromkeys(STAGES, 0.0)
            stages.update(forward=nongae, gae=gae, total=nongae + gae, resid=0.0)
            rows += [
                {"config": "c", "arm": arm, "iteration": it, "stage": s, "ms": v}
                for s, v in stages.items()
            ]
    return pd.DataFrame(rows)


def test_amdahl_arithmetic():
    assert amdahl(0.022) == pytest.approx(1.0225, abs=1e-4)
    assert amdahl(0.13) == pytest.approx(1 / 0.87)
    assert amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl(0.0) == 1.0
    with pytest.raises(ValueError):
        amdahl(1.5)
    wide = stats.per_iteration(_synthetic_rows(1.0))
    slow = wide[wide["arm"] == "slow"].iloc[0]
    assert slow["share"] == pytest.approx(10 / 110)
    assert slow["speedup"] == pytest.approx(110 / 101)
    # only GAE differs, so the prediction from stage shares equals the measured speed-up
    assert slow["amdahl_pred"] == pytest.approx(slow["speedup"])
    assert slow["amdahl_pred"] == pytest.approx(amdahl(slow["share"], 10.0))
    assert slow["amdahl_bound"] == pytest.approx(1.1)


amdahl = stats.amdahl_speedup


@pytest.mark.parametrize(
    ("factor", "ok"), [(1.0, True), (1.005, True), (0.98, False), (1.02, False)]
)
def test_contamination_gate(factor, ok):
    wide = stats.per_iteration(_synthetic_rows(factor))
    gate = pd.DataFrame(
        [
            {"config": "c", "arm": a, "max_abs_err": 0.0, "correct": True}
            for a in ("ours", "slow", "untimed")
        ]
    )
    out = stats.gates(gate, wide).set_index("arm")
    assert out.loc["slow", "contamination_ok"] == ok
    assert out.loc["slow", "citable"] == ok
    assert out.loc["ours", "citable"]
    assert not out.loc["untimed", "citable"]
    # with contamination, the Amdahl prediction and the measurement part ways
    slow = wide[wide["arm"] == "slow"].iloc[0]
    assert (abs(slow["amdahl_pred"] / slow["speedup"] - 1) < 0.01) == ok


def test_summary_is_tidy():
    summary = stats.summarize(stats.per_iteration(_synthetic_rows(1.0)))
    assert set(summary.columns) == {"config", "arm", "metric", "stage", "median", "q25", "q75", "n"}
    assert (summary["n"] == 5).all()
    shares = summary[(summary["metric"] == "stage_share") & (summary["arm"] == "slow")]
    assert shares["median"].sum() == pytest.approx(1.0)


def test_convergence_check_passes_and_fails():
    pair = {"reference": arms.reference_gae, "ours": arms.ours}
    df, ok = convergence_check(TINY, pair, updates=2, device="cpu")
    assert ok and len(df) == 2 * 2 * TINY.epochs * TINY.minibatches
    scaled = {"reference": arms.reference_gae, "scaled": lambda *a: 1.01 * arms.ours(*a)}
    _, ok = convergence_check(TINY, scaled, updates=2, device="cpu")
    assert not ok


def test_grids():
    grid = full_grid()
    names = [c.name for c in grid]
    assert len(names) == len(set(names)) == 10
    ladder = select(grid, ["budget"])
    assert {c.n_envs * c.seq_len for c in ladder} == {524288} and len(ladder) == 4
    assert select(grid, ["h256x256_N4096_T128"])[0].groups == ("hidden", "budget")
    puffer = select(grid, ["puffer"])[0]
    assert (puffer.n_envs, puffer.seq_len, puffer.hidden, puffer.warmup) == (
        16384,
        128,
        (128, 128),
        40,
    )
    assert select(grid, ["recompute"])[0].gae_calls == 16
    assert len(quick_grid()) == 2
    with pytest.raises(ValueError, match="unknown configs"):
        select(grid, ["nope"])


def test_cli_cpu_writes_tables(tmp_path):
    cpu = ["--device", "cpu", "--out", str(tmp_path), "--warmup", "0", "--iters", "2"]
    main([*cpu, "--convergence-updates", "1"])
    files = {p.name for p in tmp_path.iterdir()}
    assert files == {
        "ppo_amdahl.csv",
        "ppo_amdahl_summary.csv",
        "ppo_amdahl_gates.csv",
        "ppo_convergence.csv",
        "ppo_amdahl.meta.json",
    }
    gates = pd.read_csv(tmp_path / "ppo_amdahl_gates.csv")
    assert set(gates["arm"]) == set(arms.CPU_ARMS) and gates["correct"].all()
    iters = pd.read_csv(tmp_path / "ppo_amdahl.csv")
    assert {"config", "N", "T", "h1", "h2", "arm", "iteration", "stage", "ms"} <= set(iters.columns)
    meta = json.loads((tmp_path / "ppo_amdahl.meta.json").read_text())
    assert {"device", "torch", "triton", "git_commit", "date", "command"} <= set(meta[0])
    # a second run replaces the rows of the configs it measured instead of appending
    main([*cpu, "--convergence-updates", "0"])
    assert len(pd.read_csv(tmp_path / "ppo_amdahl.csv")) == len(iters)
    assert len(json.loads((tmp_path / "ppo_amdahl.meta.json").read_text())) == 2
