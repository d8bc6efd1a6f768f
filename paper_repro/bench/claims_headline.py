"""Evaluators of the headline claims H-1 ... H-16 (PAPER.md 5.1) over recorded data.

Each evaluator takes (measurements, {name: data/paper/<name>.csv table}) and returns
(measured with rl-triton, ours, verdict).
"""
from __future__ import annotations

from paper_repro.bench import analysis as A
from paper_repro.bench.claims_common import (
    MISSING,
    NOT_RUN,
    OURS,
    RT,
    TOLERANCE,
    VEC,
    by_algorithm,
    cells,
    grid_cell,
    not_measured,
    within,
)

FIVE = ("vtrace", "lambda_returns", "discounted_returns", "eligibility_traces", "prefix_sum")


def _per_algorithm_band(frame, paper, claim, suite, variant, tol=TOLERANCE, over=(VEC,
                                                                                  "full_call")):
    table = paper["headline"]
    rows = table[(table.claim == claim) & (table.gpu == "H100")]
    measured = by_algorithm(cells(frame, suite, RT, over=over, variant=variant,
                                    num_envs=4096, seq_len=128))
    ours = by_algorithm(cells(frame, suite, OURS, over=over, variant=variant,
                                num_envs=4096, seq_len=128))
    if not measured:
        return NOT_RUN, NOT_RUN, f"{NOT_RUN} (no {suite} data)"
    off = [f"{A.label(r.algorithm)} {measured[r.algorithm]:.2f} vs {r.value:g}"
           for r in rows.itertuples() if r.algorithm in measured
           and not within(measured[r.algorithm], r.value, tol)]
    text = ", ".join(f"{A.label(a)} {v:.2f}" for a, v in measured.items())
    ours_text = ", ".join(f"{A.label(a)} {v:.2f}" for a, v in ours.items()) or NOT_RUN
    verdict = "reproduced" if not off else f"differs (outside ±{tol:.0%}: {'; '.join(off)})"
    return text, ours_text, verdict


def _h1(f, p):
    m, o = cells(f, "headline", RT), cells(f, "headline", OURS)
    if not len(m):
        return MISSING
    if m.min() <= 1:
        verdict = f"differs (rl-triton slower than compile(vec) in {int((m <= 1).sum())} cells)"
    elif m.min() >= 1.6 / (1 + TOLERANCE) and m.max() <= 5.7 * (1 + TOLERANCE):
        verdict = "reproduced"
    else:
        verdict = "differs (faster than vec everywhere, but outside the published range)"
    return A.fmt_range(m), A.fmt_range(o), verdict


def _h6(f, p):
    m = cells(f, "headline", RT, "device", over=(VEC, "device"))
    o = cells(f, "headline", OURS, "device", over=(VEC, "device"))
    if not len(m):
        return MISSING
    verdict = "reproduced (> 1x everywhere)" if m.min() > 1 else "differs (< 1x somewhere)"
    return A.fmt_range(m), A.fmt_range(o), verdict


def _loop_ratio(f, suite, impl, **where):
    return cells(f, suite, impl, over=("loop-gpu", "wall"), **where)


def _h7(f, p):
    m = _loop_ratio(f, "headline", RT, variant="plain")
    o = _loop_ratio(f, "headline", OURS, variant="plain")
    if not len(m):
        return MISSING
    table = p["headline"]
    ref = table[(table.claim == "H-7") & (table.gpu == "H100")].set_index("algorithm").value
    off = [A.label(k[0]) for k, v in m.items() if k[0] in ref and not within(v, ref[k[0]], 1.0)]
    verdict = "reproduced (within 2x of the H100 values)" if not off else \
        f"differs (beyond 2x of the H100 value: {', '.join(off)}; the loop is CPU-launch bound)"
    return A.fmt_range(m, 0), A.fmt_range(o, 0), verdict


def _h8(f, p):
    m = _loop_ratio(f, "grid", RT, algorithm="gae")
    o = _loop_ratio(f, "grid", OURS, algorithm="gae")
    pick = {(64, 512): 1464, (512, 4096): 7570}
    got = {k: v for k, v in m.items() if (k[1], k[2]) in pick}
    if len(got) < 2:
        return MISSING
    text = " -> ".join(f"{v:.0f}x" for k, v in sorted(got.items(), key=lambda kv: kv[0][1:3]))
    ours = " -> ".join(f"{v:.0f}x" for k, v in o.items() if (k[1], k[2]) in pick)
    ok = all(within(v, pick[(k[1], k[2])], 1.0) for k, v in got.items())
    return text, ours, "reproduced (within 2x)" if ok else "differs (beyond 2x)"


def _grid_min(algorithms, bound):
    def evaluate(f, p):
        m = cells(f, "grid", RT, algorithm=algorithms)
        o = cells(f, "grid", OURS, algorithm=algorithms)
        if not len(m):
            return MISSING
        worst = m.idxmin()
        verdict = "reproduced" if m.min() >= bound else (
            f"differs (min {m.min():.2f}x at {A.label(worst[0])} {worst[1]}x{worst[2]})")
        return f"min {m.min():.2f}x ({A.fmt_range(m)})", f"min {o.min():.2f}x" if len(o) \
            else NOT_RUN, verdict
    return evaluate


def _h11(f, p):
    found = grid_cell(f, algorithm="discounted_returns", num_envs=512, seq_len=4096)
    if found is None:
        return MISSING
    v, ours = found
    verdict = "reproduced" if within(v, 5.8) else f"differs ({v:.2f}x vs 5.8x on the H100)"
    return f"{v:.2f}x", ours, verdict


def _h12(f, p):
    t = A.timings(f, "launch", "overhead")
    full = A.timings(f, "launch", "full_call")
    if RT not in t or RT not in full:
        return MISSING
    share = (100 * t[RT] / full[RT]).dropna()
    size = share.index.get_level_values("num_envs") * share.index.get_level_values("seq_len")
    small, large = share[size == size.min()], share[size == size.max()]
    over = t[RT].dropna()
    text = (f"overhead {A.fmt_range(small, 0, ' %')} of the full call at the smallest shape, "
            f"{A.fmt_range(large, 0, ' %')} at the largest; rl-triton overhead "
            f"{A.fmt_range(over, 3, ' ms')}")
    if VEC in t:
        text += f"; baseline/rl-triton overhead {A.fmt_range((t[VEC] / t[RT]).dropna(), 1)}"
    ours = f"overhead {A.fmt_range(t[OURS].dropna(), 3, ' ms')}" if OURS in t else NOT_RUN
    ok = small.min() >= 80 and large.max() <= 50
    return text, ours, "reproduced" if ok else "differs (see the launch figure)"


def _h13(f, p):
    t = A.timings(f, ["launch", "headline"], "launches")
    if VEC not in t or RT not in t:
        return MISSING
    vec, rt = t[VEC].dropna(), t[RT].dropna()
    text = f"compile(vec) {A.fmt_range(vec, 0, '')}, rl-triton {A.fmt_range(rt, 0, '')}"
    ours = A.fmt_range(t[OURS].dropna(), 0, "") if OURS in t else NOT_RUN
    ok = vec.min() >= 5 and vec.max() <= 13 and rt.max() <= 2
    return text, ours, "reproduced" if ok else "differs (launch counts outside 6-12 / 1-2)"


def _h14(f, p):
    dev = cells(f, "production", RT, "device", over=(VEC, "device"), num_envs=16384,
                 seq_len=16)
    full = cells(f, "production", RT, num_envs=16384, seq_len=16)
    o = cells(f, "production", OURS, "device", over=(VEC, "device"), num_envs=16384,
               seq_len=16)
    d, fc = by_algorithm(dev), by_algorithm(full)
    if "gae" not in d or "gae" not in fc:
        return MISSING
    text = (f"GAE device {d['gae']:.2f}x, full call {fc['gae']:.2f}x; device < 1x for: "
            + (", ".join(A.label(a) for a, v in d.items() if v < 1) or "none"))
    ours = ", ".join(f"{A.label(a)} {v:.2f}x" for a, v in by_algorithm(o).items()) or NOT_RUN
    ok = d["gae"] < 1 < fc["gae"]
    return text, "device " + ours, "reproduced" if ok else "differs (GAE device ratio >= 1)"


EVALUATORS = {
    "H-1": _h1,
    "H-2": lambda f, p: _per_algorithm_band(f, p, "H-2", "headline", "plain"),
    "H-3": lambda f, p: _per_algorithm_band(f, p, "H-3", "headline", "trunc"),
    "H-4": not_measured("needs an RTX 2000 Ada; the H200 values are in the H-2 row"),
    "H-5": not_measured("needs an RTX 2000 Ada; the H200 values are in the H-3 row"),
    "H-6": _h6, "H-7": _h7, "H-8": _h8,
    "H-9": _grid_min(("gae",), 2.5),
    "H-10": _grid_min(FIVE, 1.0),
    "H-11": _h11, "H-12": _h12, "H-13": _h13, "H-14": _h14,
    "H-15": not_measured("needs two GPU models"),
    "H-16": not_measured("superseded: measured against a broken baseline"),
}
