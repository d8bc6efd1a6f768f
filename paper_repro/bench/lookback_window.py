"""Look-back variants on the GPU: device time of forced single-pass tiles, one line per case.

    python -m paper_repro.bench.lookback_window TAG >> lookback_window.csv

Run once per variant of ``kernels/affine_scan.py``, each from its own copy of the package
(Triton refuses a changed global constexpr inside one process): ``WINDOW`` 32, 128 or 256, and,
in the look-back of its time (flags before values; the kernel now publishes words), flag
polling by acquire atomics or by volatile loads. Columns: tag, algorithm,
num_envs, seq_len, time_major, tile, device_us, largest difference from the shipped tiles.
"""
import sys

import torch

from paper_repro.kernels import _launch as L
from paper_repro.tuning import device_time_us, probe_inputs

LOOK_BACK = L.ScanConfig(1, 2048, 4, 2048, True)
TIME_MAJOR = L.ScanConfig(16, 128, 4, 128, True)
CASES = [("gae", 1, 4194304, False, LOOK_BACK), ("gae", 64, 131072, False, LOOK_BACK),
         ("gae", 4, 1048576, False, LOOK_BACK), ("prefix_sum", 1, 4194304, False, LOOK_BACK),
         ("gae", 512, 4096, True, TIME_MAJOR), ("gae", 64, 131072, True, TIME_MAJOR),
         ("gae", 512, 4096, False, LOOK_BACK),
         ("gae", 1, 4194304, False, L.ScanConfig(1, 1024, 4, 1024, True)),
         ("gae", 1, 4194304, False, L.ScanConfig(1, 4096, 8, 4096, True))]


def main(tag: str) -> None:
    for algorithm, N, T, time_major, config in CASES:
        fn, _ = probe_inputs(algorithm, N, T, torch.float32, time_major)
        want = fn().double()
        with L.force_config(config):
            us = device_time_us(fn)
            diff = (fn().double() - want).abs().max().item()
        tile = f"{config.BLOCK_B}x{config.BLOCK_T}w{config.num_warps}"
        print(f"{tag},{algorithm},{N},{T},{int(time_major)},{tile},{us:.2f},{diff:.2g}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
