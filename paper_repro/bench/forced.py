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


def forced_time(prep, want, config, warm_only=False, repeats=1):
    """``(max |difference| from want, device us, min of repeats)`` of ``prep``'s call under
    ``config``; ``(None, None)`` after compiling it when ``warm_only``."""
    from paper_repro.tuning import device_time_us

    with L.force_config(config):
        got = prep.outputs(prep.call())
        if warm_only:
            return None, None
        diff = max((g.double() - w).abs().max().item() for g, w in zip(got, want))
        return diff, min(device_time_us(prep.call) for _ in range(repeats))
