"""Time-major calls that load values narrower than 4 bytes (bf16 values beside fp32 rewards,
bool flags, 16-bit rows): the shipped call (narrow loads four envs a load in the fp32 tile,
``_launch.tile_of``) against the alternatives.

``python -m paper_repro.bench.mixed_ab [--out FILE] [--shapes 4096x128,...]
[--algorithms gae,...] [--inputs bf16_values,bool_flags,bf16_bool_flags,bf16] [--rounds 2]``

(CUDA) Per estimator, shape and input set, time-major. ``bf16_values``: values, next values,
log-probabilities and eligibility traces' gradients in bf16, rewards (and the traces' seed) in
fp32; ``bool_flags``: fp32 values, bool flags; ``bf16_bool_flags``: bf16 values, bool flags;
``bf16``: every input bf16 (16-bit outputs: the fp32 tile, loads and stores four envs at a
time). ``affine_scan`` (the bare engine) takes ``bf16`` and ``bf16_values`` (bf16 alpha,
fp32 beta) alone, its arms ``shipped``, ``sixteen`` (Triton's loads) and ``all_fp32``
(``bf16``: the 32-env tiles too).
The arms in turn each round, the order reversed every other round:
``shipped``; fp32 outputs: ``narrow_tile`` (the narrow loads as Triton vectorises them, in
the tile they lay out as a 16-bit one, ``L.force_words``); bf16 outputs: ``sixteen`` (the
16-bit tile, loads as Triton vectorises them, ``L.force_words(False)``);
``fp32_tile`` (the tile fp32 inputs choose, forced through ``L.force_config``, flags loaded as
Triton does); ``bf16`` where the fp32 tile is 16 envs wide: 32-env tiles (``wide_tiles``), and
``fours16`` (that 16-env tile, forced) where the shipped call widens it (``wide_rows16``);
``all_fp32`` (fp32 values and float flags) and, but for ``bf16``, ``all_bf16`` (bf16 values and
flags); device time by CUDA-graph replay, minimum of two, and the largest difference from the
shipped call's output (all_fp32 and all_bf16: their own rounding).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
from dataclasses import replace

import torch

from paper_repro.bench.results import stream_csv
from paper_repro.bench.tile_probe import traits_of
from paper_repro.kernels import _launch as L

SHAPES = "4096x128,32768x32,2048x1024,512x4096,64x131072"
ALGORITHMS = "gae,lambda_returns,vtrace,eligibility_traces"
INPUTS = "bf16_values,bool_flags,bf16_bool_flags,bf16"
COLUMNS = ["algorithm", "num_envs", "seq_len", "layout", "inputs", "round", "arm", "config",
           "device_us", "max_abs_diff"]
HALF = {"values", "next_values", "log_pi_target", "log_pi_behavior", "gradients"}


def mixed_case(case):
    """``case`` with its ``HALF`` arguments in bf16 (and an fp32 seed for eligibility traces,
    so that the output stays fp32)."""
    from paper_repro.bench.providers import MODULES

    fn = getattr(importlib.import_module(MODULES.get(case.algorithm, "paper_repro")),
                 case.public_name)
    names = list(inspect.signature(fn).parameters)
    args = tuple(x.to(torch.bfloat16) if names[i] in HALF else x for i, x in enumerate(case.args))
    kwargs = dict(case.kwargs)
    if "seed_values" in names:
        kwargs["seed_values"] = torch.zeros(case.num_envs, device=case.args[0].device)
    return replace(case, args=args, kwargs=kwargs)


def _scan_rows(N, T, inputs, rounds):
    """The bare engine (``affine_scan``, reverse) on ``[T, N]`` coefficients: ``bf16`` both,
    ``bf16_values`` bf16 alpha beside fp32 beta; shipped against Triton's loads
    (``L.force_words(False)``) and fp32 coefficients."""
    import paper_repro as P
    from paper_repro.bench.providers import Prepared

    if inputs not in ("bf16", "bf16_values"):
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(T, N, device=device, generator=g)
    b = torch.rand(T, N, device=device, generator=g)

    def prep(alpha, beta):
        return Prepared(lambda: P.affine_scan(alpha, beta, time_dim=0), lambda y: (y,))

    narrow = prep(a.bfloat16(), b.bfloat16() if inputs == "bf16" else b)
    want = [y.double() for y in narrow.outputs(narrow.call())]
    tile = L.config_for(N, T, (1, N), a.device, itemsize=4)
    arms = {"shipped": (narrow, None, tile), "sixteen": (narrow, None, tile, False),
            "all_fp32": (prep(a, b), None, tile)}
    if inputs == "bf16" and N % 4 == 0:
        arms.update(bf16_arms(narrow, tile, N, T, a.device, L.TileTraits()))
    row = {"algorithm": "affine_scan", "num_envs": N, "seq_len": T, "layout": "TN",
           "inputs": inputs}
    yield from timed_arms(row, arms, want, rounds)


def _rows(algorithm, N, T, inputs, rounds):
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours

    if algorithm == "affine_scan":
        yield from _scan_rows(N, T, inputs, rounds)
        return

    def case_of(dtype, flags="float"):
        return make_case(algorithm, N, T, "plain", dtype, "TN", flags, device="cuda")

    case = case_of("fp32")
    narrow = {"bf16_values": lambda: mixed_case(case),
              "bool_flags": lambda: case_of("fp32", "bool"),
              "bf16_bool_flags": lambda: case_of("bf16", "bool"),
              "bf16": lambda: case_of("bf16")}[inputs]()
    prep = _ours(narrow)
    want = [y.double() for y in prep.outputs(prep.call())]

    def tile(itemsize, loads=()):
        return L.config_for(N, T, (1, N), case.args[0].device,
                            wide=algorithm in ("vtrace", "retrace"), retrace=algorithm == "retrace",
                            itemsize=itemsize, traits=traits_of(algorithm), inputs=loads)

    config, tile16 = tile(4), tile(2)
    loads = [x for x in narrow.args if torch.is_tensor(x)]
    if inputs == "bf16" and N % 4 == 0:  # shipped: four a load, in the fp32 tile
        wide = bf16_arms(prep, config, N, T, case.args[0].device, traits_of(algorithm))
        arms = {"shipped": wide.pop("shipped"), "sixteen": (prep, None, tile16, False), **wide}
    elif inputs in ("bf16_bool_flags", "bf16"):
        arms = {"shipped": (prep, None, config if N % 4 == 0 else tile16),
                "sixteen": (prep, None, tile16, False)}
    elif N % 4 == 0:  # shipped: narrow loads four envs a load, in the fp32 tile
        arms = {"shipped": (prep, None, config),  # as Triton loads them, in the 16-bit tile
                "narrow_tile": (prep, tile(4, loads), tile(4, loads), False)}
    else:
        arms = {"shipped": (prep, None, tile(4, loads))}
    if inputs not in ("bf16_bool_flags", "bf16"):
        arms["fp32_tile"] = (prep, config, config, False)
    arms["all_fp32"] = (_ours(case), None, config)
    if inputs != "bf16":
        arms["all_bf16"] = (_ours(case_of("bf16")), None, config if N % 4 == 0 else tile16)
    row = {"algorithm": algorithm, "num_envs": N, "seq_len": T, "layout": "TN",
           "inputs": inputs}
    yield from timed_arms(row, arms, want, rounds)


def wide_tiles(config) -> dict:
    """Tiles of 32 envs for a 16-bit call the fp32 tile ``config`` holds in 16 (32 bytes a
    step, one sector): ``wide`` twice the warps, the same runs (``_tiles.twice_the_envs``, which
    ``wide_rows16`` ships for rows of one tile); ``wide_runs`` the same warps, runs twice as
    long (``runs32``); ``wide_look_back``: 128-step tiles one a program, by look-back
    (``LOOK_BACK32``); ``wide_walks16`` ships both for walks."""
    from paper_repro.kernels._tiles import LOOK_BACK32, runs32, twice_the_envs

    if config.BLOCK_B != 16 or config.flip >= 0:
        return {}
    return {"wide": twice_the_envs(config), "wide_runs": runs32(config),
            "wide_look_back": LOOK_BACK32}


def bf16_arms(prep, config, N: int, T: int, device, traits: L.TileTraits) -> dict:
    """All-16-bit rows' arms beside the 16-bit tile: ``shipped`` (the fp32 tile four envs a
    load, 32 envs wide where ``wide_rows16`` or, with the estimator's ``traits``,
    ``wide_walks16`` widen it, then also ``fours16``: the 16-env tile, forced) and
    ``wide_tiles``'s other 32-env tiles."""
    from paper_repro.kernels._tiles import wide_rows16, wide_walks16

    sms = L.num_sms(device)
    shipped = wide_walks16(wide_rows16(config, N, T, sms), N, T, sms, traits)
    arms = {"shipped": (prep, None, shipped)}
    if shipped != config:
        arms["fours16"] = (prep, config, config)
    arms.update({name: (prep, c, c) for name, c in wide_tiles(config).items() if c != shipped})
    return arms


def timed_arms(row: dict, arms: dict, want, rounds: int):
    """``row`` under each of ``arms`` (name -> (prepared call, config forced or None, the config
    it runs[, ``L.force_words``'s flag])), in turn each round, the order reversed every other
    round: device time (minimum of two) and the largest difference from ``want``."""
    from paper_repro.bench.forced import forced_time

    for r in range(rounds):
        for arm in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            prep, forced, c, *words = arms[arm]
            with L.force_words(words[0] if words else None):
                diff, us = forced_time(prep, want, forced, repeats=2)
            yield dict(row, round=r, arm=arm, device_us=round(us, 3), max_abs_diff=f"{diff:.3g}",
                       config=f"{c.BLOCK_B}x{c.BLOCK_T}w{c.num_warps}/{int(c.flip)}")


def run(argv, doc: str, shapes: str, algorithms: str, inputs: str, case_rows):
    """The A/B's command line: ``case_rows(algorithm, N, T, inputs, rounds)`` of every case,
    streamed to ``--out``."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    p.add_argument("--shapes", default=shapes)
    p.add_argument("--algorithms", default=algorithms)
    p.add_argument("--inputs", default=inputs)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    cases = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = (row for N, T in cases for a in args.algorithms.split(",")
            for i in args.inputs.split(",") for row in case_rows(a, N, T, i, args.rounds))
    stream_csv(args.out, COLUMNS, rows)


def main(argv=None):
    run(argv, __doc__, SHAPES, ALGORITHMS, INPUTS, _rows)


if __name__ == "__main__":
    main()
