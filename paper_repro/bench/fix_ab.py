"""Up to four long rows in two passes that scan, then fix (``ScanConfig.fix_steps``), against the
shipped split, one process, the arms in turn: device times with the paper's 5 % terminations
and with none, where the second pass rescans every step.

    python -m paper_repro.bench.fix_ab LABEL [ROUNDS] [--fix 256w1,8192:512w1:256w1] [--quick]
    python -m paper_repro.bench.fix_ab LABEL --profile [--fix ...]
    python -m paper_repro.bench.fix_ab LABEL --time-major [--fix 512:128w4:128w4,512:128w4:0w1]

An arm ``FSTEPSwFWARPS`` fixes in that tile after the shipped two passes' first tile;
``SEG:STEPSwWARPS:FSTEPSwFWARPS`` sets the segment and the first pass's tile too (``0w1``: no
fix, reduce then scan). ``--time-major``: fp32 ``[T, N]`` inputs of 64 to 512 envs, whose
shipped tiles look back (over segments of 32-env tiles, or one tile a program at 512 x 4096);
an arm's tiles are 32 envs wide, in interleaved runs, and it takes
``SEG:STEPSwWARPS:FSTEPSwFWARPS``.

Lines: ``label,round,arm,algorithm/N/T/dtype/dones[/TN],us,max_rel_diff``; the difference is the
arm's largest against the shipped outputs, relative to their largest magnitude. ``--profile``:
``algorithm/N/T/dtype/dones,arm,`` then each kernel of a call in launch order with its mean
device time (``torch.profiler``, 10 calls), at a few cells. ``data/h100/fix_ab.csv`` and
``fix_profile.txt`` came from this.
"""
from __future__ import annotations

import argparse

ALGORITHMS = ("discounted_returns", "prefix_sum", "eligibility_traces", "lambda_returns", "gae")
# where each estimator's plain case holds its terminations
TERMINATIONS = {"gae": 2, "lambda_returns": 2, "discounted_returns": 1, "eligibility_traces": 1,
                "prefix_sum": 1}
SHAPES = ((1, 4194304), (4, 1048576), (2, 1048576))
TIME_MAJOR_SHAPES = ((64, 131072), (128, 65536), (512, 4096))
DTYPES = (("fp32", "float"), ("bf16", "bool"))


def cases(quick: bool = False, time_major: bool = False):
    """(algorithm, N, T, dtype, flags, dones, layout) of every cell."""
    if time_major:
        return [(a, n, t, "fp32", "float", dones, "TN") for a in ALGORITHMS
                for n, t in TIME_MAJOR_SHAPES[:1 if quick else None] for dones in ("5%", "none")]
    shapes = SHAPES[:1] if quick else SHAPES
    dtypes = DTYPES[:1] if quick else DTYPES
    return [(a, n, t, dt, fl, dones, "NT") for a in ALGORITHMS for n, t in shapes
            for dt, fl in dtypes for dones in ("5%", "none")]


def two_pass_tile(algorithm: str, n: int, t: int, itemsize: int, fix: tuple, seg: int = 0,
                  scan: tuple = ()):
    """The shipped two passes' tile of ``algorithm`` for up to four long rows, fixing in
    ``fix`` = (steps, warps); ``seg``, ``scan`` = (steps, warps): another segment and tile."""
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels import eligibility_traces, gae, lambda_returns

    traits = {"gae": gae.TILE_TRAITS, "lambda_returns": lambda_returns.TILE_TRAITS,
              "discounted_returns": lambda_returns.TILE_TRAITS_NO_VALUES}.get(
        algorithm, eligibility_traces.TILE_TRAITS)
    steps = traits.two_pass_steps32 if itemsize == 4 else 1024 if itemsize == 8 else 2048
    seg = seg or (4096 if steps == 2048 and n * t <= 1 << 21 else 8192)
    steps, warps = scan or (steps, 4)
    return L.ScanConfig(1, steps, warps, seg, flip=L.run_length(steps, itemsize, False),
                        fix_steps=fix[0], fix_warps=fix[1])


def time_major_tile(seg: int, scan: tuple, fix: tuple):
    """Two passes over ``seg``-step segments of 32-env tiles of ``scan`` = (steps, warps) in
    interleaved runs, fixing in ``fix`` = (steps, warps) (0 steps: reduce, then scan)."""
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels import _tiles

    steps, warps = scan
    return L.ScanConfig(32, steps, warps, seg, flip=_tiles._interleaved(32, steps, warps, 4),
                        fix_steps=fix[0], fix_warps=fix[1])


def _arms(case, fixes: dict) -> dict:
    """``{"shipped": None}`` (the rule), then each of ``fixes``' forced tiles for ``case``."""
    import torch

    if case.layout == "TN":
        return {"shipped": None, **{name: time_major_tile(**kw) for name, kw in fixes.items()}}
    itemsize = torch.finfo(case.args[0].dtype).bits // 8
    a, n, t = case.algorithm, case.num_envs, case.seq_len
    return {"shipped": None, **{name: two_pass_tile(a, n, t, itemsize, **kw)
                                for name, kw in fixes.items()}}


def _tile(spec: str) -> tuple:
    steps, warps = spec.split("w")
    return int(steps), int(warps)


def parse_fix(spec: str) -> dict:
    """An arm's ``two_pass_tile`` keywords."""
    parts = spec.split(":")
    if len(parts) == 1:
        return {"fix": _tile(spec)}
    return {"seg": int(parts[0]), "scan": _tile(parts[1]), "fix": _tile(parts[2])}


def run(label: str, rounds: int, fixes: dict, quick: bool = False, time_major: bool = False):
    """``fixes``: the arms, ``{name: two_pass_tile keywords}`` (``time_major``:
    ``time_major_tile`` keywords)."""
    import torch

    from paper_repro.kernels import _launch as L
    from paper_repro.tuning import device_time_us

    for a, n, t, dt, fl, dones, layout in cases(quick, time_major):
        case, prep = _prepared(a, n, t, dt, fl, dones, layout)
        arms = _arms(case, fixes)
        want = prep.outputs(prep.call())[0].double()
        scale = want.abs().max().item() or 1.0
        diffs = {}
        for name, config in arms.items():
            with L.force_config(config):
                got = prep.outputs(prep.call())[0].double()
            diffs[name] = ((got - want).abs().max().item() / scale)
        for r in range(rounds):
            for name, config in arms.items():
                with L.force_config(config):
                    us = device_time_us(prep.call)
                cell = f"{a}/{n}/{t}/{dt}/{dones}" + ("/TN" if layout == "TN" else "")
                print(f"{label},{r},{name},{cell},{us:.2f},{diffs[name]:.1e}", flush=True)
        del case, prep, want
        torch.cuda.empty_cache()


PROFILE_CASES = [("prefix_sum", 1, 4194304, "fp32", "float", "5%"),
                 ("gae", 1, 4194304, "fp32", "float", "5%"),
                 ("discounted_returns", 1, 4194304, "fp32", "float", "5%"),
                 ("prefix_sum", 1, 4194304, "fp32", "float", "none"),
                 ("gae", 4, 1048576, "bf16", "bool", "5%")]


def _prepared(a, n, t, dt, fl, dones, layout="NT"):
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours

    case = make_case(a, n, t, "plain", dt, layout, fl, device="cuda")
    if dones == "none":
        case.args[TERMINATIONS[a]].zero_()
    return case, _ours(case)


def profile(fixes: dict):
    """Each kernel of a call, in launch order, with its mean device time, per arm."""
    import torch

    from paper_repro.bench.timing import profiled
    from paper_repro.kernels import _launch as L

    for a, n, t, dt, fl, dones in PROFILE_CASES:
        case, prep = _prepared(a, n, t, dt, fl, dones)
        arms = _arms(case, fixes)
        for name, config in arms.items():
            with L.force_config(config):
                prof = profiled(prep.call, reps=10)
            events = [(e.name[:24], getattr(e, "device_time", None) or e.cuda_time)
                      for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            k = len(events) // 10
            parts = "; ".join(f"{events[j][0]} {sum(e[1] for e in events[j::k]) / 10:.2f}"
                              for j in range(k))
            print(f"{a}/{n}/{t}/{dt}/{dones},{name},{parts}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label")
    parser.add_argument("rounds", nargs="?", type=int, default=2)
    parser.add_argument("--fix", default="256w1,512w4")
    parser.add_argument("--quick", action="store_true", help="1 x 4194304 fp32 only")
    parser.add_argument("--time-major", action="store_true",
                        help="[T, N] fp32 at 64x131072, 128x65536, 512x4096 (--quick: the first)")
    parser.add_argument("--profile", action="store_true", help="kernels of a call, by profiler")
    args = parser.parse_args(argv)
    fixes = {s: parse_fix(s) for s in args.fix.split(",")}
    if args.time_major and (args.profile or any("seg" not in kw for kw in fixes.values())):
        parser.error("--time-major takes --fix arms SEG:STEPSwW:FSTEPSwFW only, without --profile")
    if args.profile:
        return profile(fixes)
    run(args.label, args.rounds, fixes, args.quick, args.time_major)


if __name__ == "__main__":
    main()
