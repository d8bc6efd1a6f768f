"""Time-major fp32 rows: the shipped tile against tiles 64 envs wide, whose program reads each
step's 256 bytes of a 64-env row whole, and the batch-major shipped call beside them.

``python -m paper_repro.bench.tm_wide_ab [--out FILE] [--shapes 64x131072,512x4096]
[--algorithms prefix_sum,...] [--rounds 2]``

(CUDA) Per estimator and shape, fp32 values and float flags: ``batch_major`` (the shipped call
on ``[N, T]`` inputs, the time-major target's reference), then time-major ``shipped`` and, forced
through ``L.force_config``, ``w64t<steps>w<warps>s<tiles>``: 64 x steps tiles in that many
warps, in interleaved runs, looking back over segments of that many tiles (1: one tile a
program). The arms in turn each round, the order reversed every other round; device time by
CUDA-graph replay (minimum of two) and the largest difference from the shipped call's output.
"""
from __future__ import annotations

from paper_repro.bench.mixed_ab import run, timed_arms
from paper_repro.bench.tile_ab import shipped_config
from paper_repro.kernels import _launch as L
from paper_repro.kernels._tiles import _interleaved

SHAPES = "64x131072,512x4096"
ALGORITHMS = "prefix_sum,discounted_returns,gae,lambda_returns"
# 8 steps a thread: at 16 (64 x 64 in 2 warps, 64 x 128 in 4) GAE's tile spills on sm_90
# (255 registers, 512 stack bytes; ``bench.sass``), the shipped 32 x 128 holds 203 and none
WIDE = ((64, 4, 1), (64, 4, 4), (128, 8, 1), (128, 8, 4))


def wide_arms(T: int) -> dict:
    """Name -> the 64-env look-back tiles of ``WIDE`` (steps, warps, tiles a segment) that fit
    rows of ``T`` steps."""
    return {f"w64t{steps}w{warps}s{tiles}":
            L.ScanConfig(64, steps, warps, steps * tiles, True, _interleaved(64, steps, warps, 4))
            for steps, warps, tiles in WIDE if steps * tiles <= T}


def _rows(algorithm, N, T, inputs, rounds):
    from paper_repro.bench.forced import prepared
    from paper_repro.bench.tile_probe import traits_of

    row = {"algorithm": algorithm, "num_envs": N, "seq_len": T, "inputs": inputs}
    case, prep, want = prepared(algorithm, N, T, "fp32", "NT", "float")
    shipped = shipped_config(algorithm, N, T, case.args[0].device, 4)
    yield from timed_arms(dict(row, layout="NT"), {"batch_major": (prep, None, shipped)}, want,
                          rounds)
    case, prep, want = prepared(algorithm, N, T, "fp32", "TN", "float")
    shipped = L.config_for(N, T, (1, N), case.args[0].device, wide=algorithm == "vtrace",
                           traits=traits_of(algorithm))
    arms = {"shipped": (prep, None, shipped)}
    arms.update({name: (prep, c, c) for name, c in wide_arms(T).items()})
    yield from timed_arms(dict(row, layout="TN"), arms, want, rounds)


def main(argv=None):
    run(argv, __doc__, SHAPES, ALGORITHMS, "fp32", _rows)


if __name__ == "__main__":
    main()
