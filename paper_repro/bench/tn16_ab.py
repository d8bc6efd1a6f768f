"""16-bit time-major tiles in interleaved runs (``_tiles._runs16``) against the same tiles
latest step first, as they were before (a 16-byte load holds 8 envs here). Those tiles are
shipped where rows of 16-bit outputs do not take the fp32 tile four envs a load
(``_launch.four_loads``: Retrace, rows of no multiple of four envs; ``bench.mixed_ab``).

``python -m paper_repro.bench.tn16_ab [--out FILE] [--shapes 4096x128,...]
[--algorithms gae,...] [--inputs bf16,bool_flags] [--rounds 2]``

(CUDA) Per estimator, shape and input set, time-major: ``bf16`` (every input bf16) or
``bool_flags`` (fp32 values, bool flags as Triton vectorises their loads, ``L.force_words``:
the 16-bit tile by ``_launch.narrow_loads``, latest step first; shipped calls now load them
four envs a load in the fp32 tile, ``bench.mixed_ab``). The arms in turn each round, the order
reversed every other round: ``shipped`` (the 16-bit tile's rule) and the other of
``interleaved`` (its tile with ``flip = -R``, R = the steps a thread holds) and
``latest_first`` (``flip = 1``), forced through ``L.force_config``, loads as Triton
vectorises them (``L.force_words(False)``); device time by CUDA-graph replay, minimum of
two, and the largest difference from the shipped call's output. Tiles whose threads hold one
step, and the look-back's, are skipped.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from paper_repro.bench.mixed_ab import run, timed_arms
from paper_repro.bench.tile_probe import traits_of
from paper_repro.kernels import _launch as L

SHAPES = "4096x128,32768x32,2048x1024,512x4096,64x131072"
ALGORITHMS = "gae,discounted_returns,eligibility_traces,vtrace"
INPUTS = "bf16,bool_flags"


def interleaved_runs(config: L.ScanConfig) -> int:
    """R, the steps a thread of a 16-bit time-major tile holds (8 envs a 16-byte load)."""
    return config.BLOCK_T * config.BLOCK_B // (256 * config.num_warps)


def _rows(algorithm, N, T, inputs, rounds):
    from paper_repro.bench.forced import prepared

    dtype, flags = ("bf16", "float") if inputs == "bf16" else ("fp32", "bool")
    case, prep, want = prepared(algorithm, N, T, dtype, "TN", flags)
    shipped = L.config_for(N, T, (1, N), case.args[0].device, wide=algorithm == "vtrace",
                           itemsize=4 if flags == "bool" else 2, traits=traits_of(algorithm),
                           inputs=[x for x in case.args if torch.is_tensor(x)])
    R = interleaved_runs(shipped)
    if R < 2 or shipped.BLOCK_T % R or shipped.single_pass:
        return
    other = ("interleaved", replace(shipped, flip=-R)) if shipped.flip == 1 else \
        ("latest_first", replace(shipped, flip=1))
    # the 16-bit tile, its loads as Triton vectorises them
    arms = {"shipped": (prep, shipped, shipped, False),
            other[0]: (prep, other[1], other[1], False)}
    row = {"algorithm": algorithm, "num_envs": N, "seq_len": T, "layout": "TN",
           "inputs": inputs}
    yield from timed_arms(row, arms, want, rounds)


def main(argv=None):
    run(argv, __doc__, SHAPES, ALGORITHMS, INPUTS, _rows)


if __name__ == "__main__":
    main()
