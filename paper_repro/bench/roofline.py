"""Copy-bandwidth roofline: the least time a call can take if each byte moves once.

``floor = minimal bytes / 4249 GB/s`` (the H200's measured device-to-device copy rate,
counting bytes read plus written; GPU.md). Minimal bytes count every input tensor read
once and every output written once, at the dtypes the call actually uses.
"""
from __future__ import annotations

import functools

from paper_repro.bench.inputs import case_tensors, make_case
from paper_repro.bench.suites import ROOFLINE_BANDWIDTH_GBPS

OUTPUTS = {"vtrace": 2, "retrace": 2}


def min_bytes(case):
    """Bytes read (every input once) plus written (every output once) by one call."""
    read = sum(x.numel() * x.element_size() for x in case_tensors(case))
    rewards = case.args[0] if case.algorithm != "retrace" else case.args[5]
    written = OUTPUTS.get(case.algorithm, 1) * rewards.numel() * rewards.element_size()
    return int(read + written)


@functools.lru_cache(maxsize=4096)
def min_bytes_for(algorithm, num_envs, seq_len, variant="plain", dtype="fp32", flags="float"):
    """:func:`min_bytes` of the benchmark case with these parameters (no data allocated)."""
    case = make_case(algorithm, int(num_envs), int(seq_len), variant, dtype, flags=flags,
                     device="meta")
    return min_bytes(case)


def floor_ms(n_bytes, bandwidth_gbps=ROOFLINE_BANDWIDTH_GBPS):
    """Milliseconds to move ``n_bytes`` at the copy bandwidth."""
    return n_bytes / (bandwidth_gbps * 1e9) * 1e3


def achieved_gbps(n_bytes, ms):
    return n_bytes / (ms * 1e-3) / 1e9


def percent_of_roofline(n_bytes, ms, bandwidth_gbps=ROOFLINE_BANDWIDTH_GBPS):
    """Share of the copy-bandwidth floor achieved by a call taking ``ms`` (100 = at floor)."""
    return 100.0 * floor_ms(n_bytes, bandwidth_gbps) / ms
