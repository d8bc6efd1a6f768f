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
