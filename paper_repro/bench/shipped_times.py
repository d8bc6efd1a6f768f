"""Device times of the shipped tiles at a few shapes, one CSV line each: run it under two
source trees (``PYTHONPATH``) to compare kernel versions on the same GPU, alternating. Run it
from outside any checkout: ``python -m`` puts the working directory first on ``sys.path``, so
from a repository root every run would import that root's tree.

    python -m paper_repro.bench.shipped_times LABEL [split|words|neighbour[-retrace] [gate]]
    python -m paper_repro.bench.shipped_times LABEL reduce-order|long-rows|look-back-rows [gate]
    python -m paper_repro.bench.shipped_times LABEL links [gate]
    python -m paper_repro.bench.shipped_times LABEL one-tile|look-back-tile|vtrace-warps [gate]
    python -m paper_repro.bench.shipped_times LABEL runs [gate]
    python -m paper_repro.bench.shipped_times LABEL words-retrace [gate] [words=on|words=off]

Lines: ``label, algorithm, num_envs, seq_len, layout, device_us`` (fp32, min of 3 CUDA-graph
timings). ``split``: the shapes whose launches split time (two passes or look-back) instead.
``words``: the look-back's shapes, fp32, bf16 with bool flags and fp64; its lines carry
``algorithm/num_envs/seq_len/dtype/layout/flags`` as one field. ``neighbour``: the same for
the estimators that read a neighbouring step (``NEIGHBOUR_CASES``), ``neighbour-retrace`` for
Retrace, ``words-retrace`` those and three more time-major ones, ``reduce-order`` the
launches whose first sweep reduces (``PAPER_REPRO_REDUCE_IN_ORDER=1`` the other arm),
``long-rows`` the few long rows (``LONG_ROW_CASES``), ``look-back-rows`` their one-warp
look-backs (``LOOK_BACK_ROW_CASES``), ``links`` those and more launches that look back
(``LINK_CASES``), ``one-tile`` every estimator where programs hold one tile, walking or
not (``ONE_TILE_CASES``), ``look-back-tile`` the one-tile look-backs walked or compile-time
(``LOOK_BACK_TILE_CASES``), ``vtrace-warps`` V-trace's one-tile rows
(``VTRACE_WARP_CASES``), ``runs`` the tiles held as runs (``RUNS_CASES``); ``gate``
adds the float64 gate's verdict and largest error; ``words=on`` / ``words=off`` force where
Retrace reads its actions as words (one tree, both arms). ``data/h200``'s ``carry_ab.csv``,
``agg_ab.csv``, ``words_ab.csv``, ``neighbour_ab.csv`` and ``retrace_words_ab.csv`` came from
this.
"""
from __future__ import annotations

import sys

CASES = [("eligibility_traces", 4096, 128, "TN"), ("prefix_sum", 4096, 128, "TN"),
         ("gae", 4096, 128, "TN"), ("eligibility_traces", 4096, 128, "NT"),
         ("gae", 4096, 128, "NT"), ("prefix_sum", 512, 4096, "NT"), ("gae", 512, 4096, "NT"),
         ("discounted_returns", 512, 4096, "TN"), ("gae", 32768, 32, "TN"),
         ("gae", 32768, 32, "NT"), ("lambda_returns", 512, 4096, "NT"),
         ("retrace", 512, 4096, "NT"), ("retrace", 4096, 512, "NT"), ("retrace", 32768, 32, "NT"),
         ("retrace", 4096, 128, "NT"), ("retrace", 64, 512, "NT"), ("vtrace", 4096, 128, "NT")]

SPLIT_CASES = [("gae", 64, 131072, "NT"), ("discounted_returns", 64, 131072, "NT"),
               ("vtrace", 64, 131072, "NT"), ("gae", 16, 524288, "NT"),
               ("discounted_returns", 4, 1048576, "NT"), ("gae", 1, 4194304, "NT"),
               ("gae", 512, 4096, "TN"), ("discounted_returns", 512, 4096, "TN"),
               ("gae", 64, 131072, "TN"), ("vtrace", 512, 4096, "TN"),
               ("retrace", 64, 131072, "NT")]


WORDS_CASES = [(a, n, t, dt, "NT", fl) for a in ("discounted_returns", "prefix_sum",
                                                 "eligibility_traces", "lambda_returns", "gae",
                                                 "vtrace", "retrace")
               for n, t, dt, fl in ((64, 131072, "fp32", "float"), (16, 524288, "fp32", "float"),
                                    (64, 131072, "bf16", "bool"))]
WORDS_CASES += [(a, 64, 131072, "fp32", "TN", "float")
                for a in ("gae", "discounted_returns", "vtrace", "retrace")]
WORDS_CASES += [("vtrace", 512, 4096, "fp32", "TN", "float"),
                ("retrace", 512, 4096, "fp32", "TN", "float"),
                ("gae", 8, 524288, "fp32", "NT", "float"),
                ("retrace", 4, 1048576, "fp32", "NT", "float"),
                ("gae", 64, 131072, "fp64", "NT", "float")]


# The estimators that read a neighbouring step of an input (V_{t+1}, the flag at t-1), at
# every roofline and long-row shape, fp32 and bf16 with bool flags, plus fp64 and time-major.
NEIGHBOUR_CASES = []
for _a in ("prefix_sum", "eligibility_traces", "gae", "vtrace"):
    for _n, _t in ((64, 131072), (16, 524288), (4, 1048576), (1, 4194304), (512, 4096),
                   (4096, 128), (32768, 32)):
        NEIGHBOUR_CASES += [(_a, _n, _t, "fp32", "NT", "float"), (_a, _n, _t, "bf16", "NT", "bool")]
    NEIGHBOUR_CASES += [(_a, 64, 131072, "fp64", "NT", "float"),
                        (_a, 4096, 128, "fp32", "TN", "float")]
# Retrace reads the action ratio and Q at t+1: its roofline and long-row shapes.
RETRACE_NEIGHBOUR_CASES = [("retrace", _n, _t, _dt, "NT", _fl)
                           for _n, _t in ((64, 131072), (16, 524288), (4, 1048576), (512, 4096),
                                          (4096, 128), (32768, 32), (4096, 512))
                           for _dt, _fl in (("fp32", "float"), ("bf16", "bool"))]
RETRACE_NEIGHBOUR_CASES += [("retrace", 4096, 128, "fp32", "TN", "float")]
# Retrace's per-action inputs as words: those shapes, and more time-major ones.
RETRACE_WORDS_CASES = RETRACE_NEIGHBOUR_CASES + [
    ("retrace", 512, 4096, "fp32", "TN", "float"), ("retrace", 64, 131072, "fp32", "TN", "float"),
    ("retrace", 4096, 128, "bf16", "TN", "bool")]
# The launches whose first sweep reduces a segment (two passes, the segment look-back): fp32
# time-major 512 x 4096 and 64 x 131072, up to four fp32 rows of 2**22 steps, 16-bit two passes.
REDUCE_ORDER_CASES = [(a, n, t, "fp32", layout, "float")
                      for n, t, layout, algorithms in (
                          (512, 4096, "TN", ("discounted_returns", "prefix_sum",
                                             "eligibility_traces", "lambda_returns", "gae",
                                             "vtrace")),
                          (64, 131072, "TN", ("discounted_returns", "prefix_sum",
                                              "eligibility_traces", "lambda_returns", "gae")),
                          (1, 4194304, "NT", ("discounted_returns", "prefix_sum",
                                              "eligibility_traces")),
                          (4, 1048576, "NT", ("discounted_returns", "prefix_sum",
                                              "eligibility_traces")))
                      for a in algorithms]
REDUCE_ORDER_CASES += [(a, 1, 4194304, "bf16", "NT", "float")
                       for a in ("discounted_returns", "prefix_sum", "gae")]
REDUCE_ORDER_CASES += [(a, 512, 4096, "bf16", "TN", "float") for a in ("discounted_returns", "gae")]

# The few long rows of fp32 (every estimator) and a few bf16 ones: the one-row look-back's
# window (``PAPER_REPRO_LOOKBACK_ROW_WINDOW``) compared across trees or settings.
LONG_ROW_CASES = [(a, n, t, "fp32", "NT", "float")
                  for a in ("discounted_returns", "prefix_sum", "eligibility_traces",
                            "lambda_returns", "gae", "vtrace")
                  for n, t in ((64, 131072), (16, 524288), (4, 1048576), (1, 4194304))]
LONG_ROW_CASES += [("retrace", 4, 1048576, "fp32", "NT", "float"),
                   ("retrace", 64, 131072, "fp32", "NT", "float")]
LONG_ROW_CASES += [(a, n, t, "bf16", "NT", "bool") for a in ("gae", "vtrace")
                   for n, t in ((64, 131072), (1, 4194304))]

# The one-warp look-backs of the few long rows (fp32 GAE, TD(λ), V-trace).
LOOK_BACK_ROW_CASES = [(a, n, t, "fp32", "NT", "float") for a in ("gae", "lambda_returns", "vtrace")
                       for n, t in ((1, 4194304), (4, 1048576), (64, 131072))]

# The look-back's scratch pairs against a fill each call: the long rows (their two-pass
# launches as controls), the time-major segment look-backs and two passes, fp64.
LINK_CASES = LONG_ROW_CASES + [(a, 64, 131072, "fp32", "TN", "float")
                               for a in ("discounted_returns", "gae", "vtrace", "retrace")]
LINK_CASES += [("gae", 512, 4096, "fp32", "TN", "float"),
               ("gae", 64, 131072, "fp64", "NT", "float"),
               ("retrace", 1, 1048576, "fp32", "NT", "float")]


# Every estimator at one-pass programs of one tile (4096 x 128, 512 x 512, 32768 x 32) and at
# one-tile look-backs (the rest): ONE_TILE and the compile-time look-back tile across trees.
ONE_TILE_CASES = [(a, n, t, "fp32", "NT", "float")
                  for n, t in ((4096, 128), (512, 512), (32768, 32), (64, 131072), (4, 1048576),
                               (16, 131072))
                  for a in ("gae", "vtrace", "retrace", "lambda_returns", "discounted_returns",
                            "eligibility_traces", "prefix_sum")]

# The look-back tiles judged across suite runs rather than in turn (V-trace's several-row and
# 16-bit ones, GAE's 16-bit ones) and controls of each estimator: walked (PHASE 6) against
# compile-time (PHASE 3) across trees.
LOOK_BACK_TILE_CASES = [(a, n, t, dt, layout, fl)
                        for a in ("vtrace", "gae", "prefix_sum", "eligibility_traces")
                        for n, t, dt, layout, fl in ((64, 131072, "fp32", "TN", "float"),
                                                     (512, 4096, "fp32", "TN", "float"),
                                                     (64, 131072, "bf16", "NT", "bool"),
                                                     (1, 4194304, "bf16", "NT", "bool"),
                                                     (64, 131072, "fp32", "NT", "float"))]

# V-trace's batch-major one-tile rows (fp32 tiles of 256-1024 elements, bf16 and fp64 controls).
VTRACE_WARP_CASES = [("vtrace", n, t, "fp32", "NT", "float")
                     for n, t in ((4096, 128), (16384, 32), (2048, 256), (4096, 64), (4096, 80),
                                  (32768, 32), (16384, 64), (32768, 128), (1024, 128))]
VTRACE_WARP_CASES += [("vtrace", 4096, 128, "bf16", "NT", "bool"),
                      ("vtrace", 4096, 128, "fp64", "NT", "float")]

# Tiles held as runs (every backward batch-major tile of more than 8 steps, the fp32 time-major
# interleaved runs): the arms of ``PAPER_REPRO_RUNS_CARRY_FIRST`` (0: each step's xa + xb *
# carry, 1: the carry entering each run first, unset: the shipped rule), one tree, the arms in
# alternating processes.
RUNS_CASES = [(a, n, t, dt, layout, fl) for a in ("gae", "discounted_returns")
              for n, t, dt, layout, fl in ((64, 131072, "bf16", "NT", "bool"),
                                           (512, 4096, "bf16", "NT", "bool"),
                                           (64, 131072, "fp32", "NT", "float"),
                                           (4096, 128, "fp32", "NT", "float"),
                                           (64, 131072, "fp32", "TN", "float"),
                                           (512, 4096, "fp32", "TN", "float"),
                                           (4096, 128, "fp32", "TN", "float"),
                                           (32768, 32, "fp32", "TN", "float"))]
# the other estimators' runs where the roofline is judged: V-trace's fp32 walk (79.8 % of copy
# bandwidth), its spilling time-major tile, and both off-policy look-backs in bf16
RUNS_CASES += [("vtrace", 512, 4096, "fp32", "NT", "float"),
               ("vtrace", 512, 4096, "fp32", "TN", "float"),
               ("vtrace", 64, 131072, "bf16", "NT", "bool"),
               ("retrace", 64, 131072, "bf16", "NT", "bool"),
               ("retrace", 512, 4096, "fp32", "NT", "float"),
               ("lambda_returns", 512, 4096, "bf16", "NT", "bool"),
               ("masked_gae", 256, 8192, "fp32", "NT", "float"),
               ("masked_gae", 256, 8192, "bf16", "NT", "bool"),
               ("masked_gae", 4096, 512, "fp32", "TN", "float")]


def words(label: str, cases=WORDS_CASES, gate=False, retrace_words=None):
    """One line a case: ``label,algorithm/N/T/dtype/layout/flags,us`` and, with ``gate``,
    whether the outputs pass the float64 gate and their largest error. ``retrace_words``:
    Retrace reads its actions as words wherever allowed (True), never (False) or by its rule
    (None), so that one tree measures both (``L.force_words``)."""
    import torch

    from paper_repro.bench import gate as G
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours
    from paper_repro.kernels import _launch as L
    from paper_repro.tuning import device_time_us

    for a, n, t, dt, layout, flags in cases:
        with L.force_words(retrace_words):
            case = make_case(a, n, t, "plain", dt, layout, flags, device="cuda")
            prep = _ours(case)
            out = prep.outputs(prep.call())
            verdict = ""
            if gate:
                dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}[dt]
                r = G.compare(G.expected_outputs(case), out, dtype)
                verdict = f",{r.ok},{r.max_abs_err:.2e}"
            us = min(device_time_us(prep.call) for _ in range(3))
        print(f"{label},{a}/{n}/{t}/{dt}/{layout}/{flags},{us:.2f}{verdict}", flush=True)
        del case, prep, out
        torch.cuda.empty_cache()


def main(argv=None):
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours
    from paper_repro.tuning import device_time_us

    args = argv or sys.argv[1:] or ["run"]
    if args[1:] == ["words"]:
        return words(args[0])
    named = {"neighbour": NEIGHBOUR_CASES, "neighbour-retrace": RETRACE_NEIGHBOUR_CASES,
             "words-retrace": RETRACE_WORDS_CASES, "reduce-order": REDUCE_ORDER_CASES,
             "long-rows": LONG_ROW_CASES, "look-back-rows": LOOK_BACK_ROW_CASES,
             "links": LINK_CASES, "one-tile": ONE_TILE_CASES,
             "look-back-tile": LOOK_BACK_TILE_CASES, "vtrace-warps": VTRACE_WARP_CASES,
             "runs": RUNS_CASES}
    if args[1:2] and args[1] in named:
        forced = {"words=on": True, "words=off": False}
        return words(args[0], named[args[1]], gate="gate" in args[2:],
                     retrace_words=next((forced[x] for x in args[2:] if x in forced), None))
    label, cases = args[0], SPLIT_CASES if args[1:] == ["split"] else CASES
    for a, n, t, layout in cases:
        prep = _ours(make_case(a, n, t, "plain", "fp32", layout, "float", device="cuda"))
        prep.call()
        us = min(device_time_us(prep.call) for _ in range(3))
        print(f"{label},{a},{n},{t},{layout},{us:.3f}", flush=True)


if __name__ == "__main__":
    main()
