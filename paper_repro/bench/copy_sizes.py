"""What a plain copy reaches at the sizes the estimators move, timed as they are.

``python -m paper_repro.bench.copy_sizes [--out FILE]`` (CUDA): an SM copy kernel
(``torch.mul(src, 1.0, out=dst)``, as ``tuning.copy_bandwidth_gbs``) moving each of
``SIZES_MB`` (bytes read + written), device time by CUDA-graph replay (``device``: the source
may stay in L2 across repeats) and with every call's source read from DRAM (``device_cold``,
copies taken in turn), against the 2 GB event-timed copy that sets the roofline. A kernel at a
cell's bytes can be read against the copy of the same bytes: the ramp, tail and launch gap of
a short kernel cost a copy too.
"""
from __future__ import annotations

import argparse

# Bytes moved, MB: the roofline suite's cells (4096 x 128 V-trace ~15, GAE 512 x 4096 33.5,
# 64 x 131072 ~100-134, Retrace 512 x 4096 143, 4096 x 2048 Retrace 570) and around them.
SIZES_MB = (4, 8, 16, 33.5, 67, 134, 268, 570, 2147)
COLUMNS = ["mbytes", "device_us", "device_gbs", "device_cold_us", "device_cold_gbs",
           "ceiling_gbs", "pct_ceiling", "pct_ceiling_cold"]


def row(mbytes: float, device_us: float, cold_us: float, ceiling_gbs: float) -> dict:
    """One size's times as bandwidth (bytes read + written a second) and share of the ceiling."""
    gbs, cold = 1e6 * mbytes / device_us / 1e3, 1e6 * mbytes / cold_us / 1e3
    return {"mbytes": mbytes, "device_us": round(device_us, 3), "device_gbs": round(gbs, 1),
            "device_cold_us": round(cold_us, 3), "device_cold_gbs": round(cold, 1),
            "ceiling_gbs": round(ceiling_gbs, 1), "pct_ceiling": round(100 * gbs / ceiling_gbs, 1),
            "pct_ceiling_cold": round(100 * cold / ceiling_gbs, 1)}


def _rows():
    import torch

    from paper_repro.bench.timing import cold_copies, device_cold_ms, device_ms
    from paper_repro.tuning import copy_bandwidth_gbs

    ceiling = copy_bandwidth_gbs()
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    for mb in SIZES_MB:
        n = int(mb * 1e6) // 8  # fp32 elements each way
        pairs = [(torch.randn(n, device="cuda"), torch.empty(n, device="cuda"))
                 for _ in range(cold_copies(8 * n, l2))]
        calls = [lambda s=s, d=d: torch.mul(s, 1.0, out=d) for s, d in pairs]
        warm = 1e3 * device_ms(calls[0], trials=3).ms
        cold = 1e3 * device_cold_ms(calls, trials=3).ms
        yield row(8 * n / 1e6, warm, cold, ceiling)
        del pairs, calls
        torch.cuda.empty_cache()


def main(argv=None):
    from paper_repro.bench.results import stream_csv

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=None, help="CSV to write (default: stdout)")
    args = p.parse_args(argv)
    stream_csv(args.out, COLUMNS, _rows())


if __name__ == "__main__":
    main()
