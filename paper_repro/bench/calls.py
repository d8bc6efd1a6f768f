"""Call one case of ours a few times and nothing else, for an outside profiler (Nsight
Compute) to record its launches:

    ncu ... python -m paper_repro.bench.calls ALGORITHM N T [LAYOUT] [CALLS]

The inputs come from ``make_case`` (plain variant, fp32, float flags); their generation
launches kernels too, which the profile's reader leaves out by name.
"""
from __future__ import annotations

import sys

import torch


def run(algorithm: str, num_envs: int, seq_len: int, layout: str = "NT", calls: int = 3,
        device: str | None = None):
    """Build the case and call our implementation ``calls`` times; returns the last result."""
    from paper_repro.bench.inputs import make_case
    from paper_repro.bench.providers import PROVIDERS

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    prepared = PROVIDERS["ours"].build(make_case(algorithm, num_envs, seq_len, layout=layout,
                                                 device=device))
    result = None
    for _ in range(calls):
        result = prepared.call()
    if device == "cuda":
        torch.cuda.synchronize()
    return result


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        raise SystemExit(__doc__)
    run(args[0], int(args[1]), int(args[2]), *args[3:4], *map(int, args[4:5]))


if __name__ == "__main__":
    main()
