"""One estimator call prepared once, then timed under forced tiles (the tile and long-row
probes): the shipped tile's answer is the reference each forced tile is compared with."""
from __future__ import annotations

from paper_repro.kernels import _launch as L


def prepared(algorithm: str, N: int, T: int, dtype: str, layout: str, flags: str,
             variant: str = "plain"):
    """``(case, prep, want)``: the case's CUDA inputs, our call on them, and its float64
    outputs under the shipped tile."""
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import _ours

    case = make_case(algorithm, N, T, variant, dtype, layout, flags, device="cuda")
    prep = _ours(case)
    return case, prep, [y.double() for y in prep.outputs(prep.call())]


def forced_time(prep, want, config, warm_only=False, repeats=1, turns=()):
    """``(max |difference| from want, device us, min of repeats)`` of ``prep``'s call under
    ``config``; ``(None, None)`` after compiling it when ``warm_only``. With ``turns`` (its
    call and the same on copies of the inputs, :func:`cold_turns`), the device time has every
    call's inputs read from DRAM (``timing.device_cold_ms``)."""
    from paper_repro.bench.timing import device_cold_ms
    from paper_repro.tuning import device_time_us

    with L.force_config(config):
        got = prep.outputs(prep.call())
        if warm_only:
            return None, None
        diff = max((g.double() - w).abs().max().item() for g, w in zip(got, want))
        if turns:
            return diff, min(1e3 * device_cold_ms(turns, trials=3).ms for _ in range(repeats))
        return diff, min(device_time_us(prep.call) for _ in range(repeats))


def cold_turns(case, prep) -> list:
    """``prep``'s call and ours on copies of ``case``'s inputs, to take turns from DRAM
    (``timing.cold_turns``)."""
    from paper_repro.bench.providers import _ours
    from paper_repro.bench.timing import cold_turns as turns

    return turns(prep.call, case, lambda copy: _ours(copy).call)


def arm_rows(N, T, dtype, variant, rounds, arms: dict, algorithm="retrace", layout="NT"):
    """Rows timing the shipped call of one case under each of ``arms`` (name -> a function
    returning the context that sets it), the arms in turn each round, the order reversed every
    other round: device time (inputs partly in L2 across repeats), ``device_cold`` (every
    call's inputs from DRAM) and the largest difference from the shipped call's output."""
    case, prep, want = prepared(algorithm, N, T, dtype, layout, "float", variant)
    turns = cold_turns(case, prep)
    retrace = algorithm == "retrace"
    stride = (T, 1) if layout == "NT" else (1, N)
    config = L.config_for(N, T, stride, case.args[0].device,
                          wide=retrace or algorithm == "vtrace", retrace=retrace,
                          itemsize=2 if dtype == "bf16" else 4)
    for r in range(rounds):
        for arm in list(arms) if r % 2 == 0 else list(arms)[::-1]:
            with arms[arm]():
                diff, warm = forced_time(prep, want, None, repeats=2)
                _, cold = forced_time(prep, want, None, turns=turns)
            yield {"algorithm": algorithm, "num_envs": N, "seq_len": T, "dtype": dtype,
                   "layout": layout, "variant": variant, "round": r, "arm": arm,
                   "config": f"{config.BLOCK_B}x{config.BLOCK_T}w{config.num_warps}",
                   "device_us": round(warm, 3), "device_cold_us": round(cold, 3),
                   "max_abs_diff": diff}
