"""Batch-major 16-bit rows: the shipped tile against forced alternatives, and the bare engine's
backward scan against its forward one on the same bytes.

``python -m paper_repro.bench.rows16_ab [--out FILE] [--shapes 64x131072,...]
[--algorithms discounted_returns,...] [--inputs bf16,fp32] [--rounds 2]``

(CUDA) Per estimator, shape and input set, batch-major: ``bf16`` (bf16 values, bool flags: the
roofline's bf16 cells) or ``fp32`` (float flags). The arms in turn each round, the order
reversed every other round, forced through ``L.force_config``: ``shipped``; rows of at most
8192 steps also split across programs by look-back, one tile a program (``lb<steps>w<warps>``);
longer rows, where the shipped tile is a one-warp look-back, under Triton's reverse scan
(``flip0``), uncapped and capped at 128 registers (``cap0``, ``cap128``) and in tiles of 512
and 2048 steps (``t512w1``, ``t2048w2``); both, the shipped tile's runs otherwise
(``tile_arms``: ``flip0``, ``flip1`` latest step first, ``flip4``) and its steps in half and
twice the warps (``t<steps>w<warps>``); Retrace, whose tiles keep runs of 4 steps (8-byte
loads of 16-bit values) but its 16-bit look-back runs of 8 (16-byte loads), in the other run
length, 8 steps a thread in its own tile (``r8``, ``r4``), and in runs of 8 in one of twice the
steps and the same warps (``r8t2``), instead of the above; an arm equal to an earlier one is
left out.
``affine_scan`` (the bare engine, its coefficients in the input set's dtype) runs ``reverse``
(the five backward estimators' direction) against ``forward``: the same tile and bytes, so the
difference is the direction's. Device time by CUDA-graph replay, minimum of two, and the
largest difference from the shipped call's output (``affine_scan``: from its own direction's).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from paper_repro.bench.mixed_ab import run, timed_arms
from paper_repro.bench.tile_ab import shipped_config
from paper_repro.kernels import _launch as L

SHAPES = "64x131072,512x4096"
ALGORITHMS = "affine_scan,discounted_returns,prefix_sum,gae,lambda_returns,eligibility_traces"
INPUTS = "bf16"
SPLITS = ((2048, 8), (2048, 4), (1024, 4), (1024, 2))  # look-back tiles: steps, warps


def run_arms(shipped: L.ScanConfig, T: int) -> dict:
    """Retrace's tile in its other run length: runs of 8 where it ships runs of 4, 8 steps a
    thread in its own steps and elements (``r8``), runs of 4 where it ships 8 (``r4``: the
    16-bit look-back); and twice its steps in runs of 8 in as many warps (``r8t2``)."""
    steps = shipped.BLOCK_B * shipped.BLOCK_T
    if shipped.flip == 8:
        arms = {"r4": replace(shipped, flip=4)}
    else:
        arms = {"r8": replace(shipped, flip=8,
                              num_warps=max(1, min(shipped.num_warps, steps // 256)))}
    if 2 * shipped.BLOCK_T <= T:
        tile = 2 * shipped.BLOCK_T
        seg = tile if shipped.single_pass else -(-T // tile) * tile
        arms["r8t2"] = replace(shipped, flip=8, BLOCK_T=tile, seg_len=seg)
    return arms


def tile_arms(shipped: L.ScanConfig) -> dict:
    """The shipped tile with runs of 0 (Triton's reverse scan), 1 (latest step first) and 4
    steps, and its steps in half and twice the warps."""
    arms = {f"flip{f}": replace(shipped, flip=f) for f in (0, 1, 4)}
    for warps in (max(1, shipped.num_warps // 2), 2 * shipped.num_warps):
        arms[f"t{shipped.BLOCK_T}w{warps}"] = replace(shipped, num_warps=warps)
    return arms


def forced_arms(shipped: L.ScanConfig, T: int, retrace: bool = False) -> dict:
    """Name -> forced config of the alternatives to ``shipped`` over rows of ``T`` steps, those
    equal to ``shipped`` or to an earlier arm left out."""
    if retrace:
        arms = run_arms(shipped, T)
    elif T <= 8192:
        arms = {f"lb{steps}w{warps}": L.ScanConfig(1, steps, warps, steps, True,
                                                   flip=shipped.flip)
                for steps, warps in SPLITS}
    elif not shipped.single_pass:  # two passes: the long-row probes' (``bench.long_probe``)
        arms = {}
    else:
        arms = {"flip0": replace(shipped, flip=0), "cap0": replace(shipped, max_registers=0),
                "cap128": replace(shipped, max_registers=128),
                "t512w1": replace(shipped, BLOCK_T=512, num_warps=1, seg_len=512),
                "t2048w2": replace(shipped, BLOCK_T=2048, num_warps=2, seg_len=2048)}
    if not retrace and (T <= 8192 or shipped.single_pass):
        arms.update({k: v for k, v in tile_arms(shipped).items() if k not in arms})
    seen, kept = {shipped}, {}
    for name, config in arms.items():
        if config not in seen:
            seen.add(config)
            kept[name] = config
    return kept


def _scan_rows(N, T, inputs, rounds):
    """``affine_scan`` on ``[N, T]`` coefficients, backward against forward."""
    import paper_repro as P
    from paper_repro.bench.forced import forced_time
    from paper_repro.bench.providers import Prepared

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if inputs == "bf16" else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    alpha = torch.randn(N, T, device=device, generator=g).to(dtype)
    beta = (0.99 * torch.rand(N, T, device=device, generator=g)).to(dtype)
    preps = {arm: Prepared(lambda r=arm == "reverse": P.affine_scan(alpha, beta, reverse=r),
                           lambda y: (y,)) for arm in ("reverse", "forward")}
    wants = {arm: [y.double() for y in p.outputs(p.call())] for arm, p in preps.items()}
    c = L.config_for(N, T, (T, 1), alpha.device, itemsize=dtype.itemsize)
    row = {"algorithm": "affine_scan", "num_envs": N, "seq_len": T, "layout": "NT",
           "inputs": inputs, "config": f"{c.BLOCK_B}x{c.BLOCK_T}w{c.num_warps}/{int(c.flip)}"}
    for r in range(rounds):
        for arm in list(preps) if r % 2 == 0 else list(preps)[::-1]:
            diff, us = forced_time(preps[arm], wants[arm], None, repeats=2)
            yield dict(row, round=r, arm=arm, device_us=round(us, 3),
                       max_abs_diff=f"{diff:.3g}")


def _rows(algorithm, N, T, inputs, rounds):
    from paper_repro.bench.forced import prepared

    if algorithm == "affine_scan":
        yield from _scan_rows(N, T, inputs, rounds)
        return
    bf16 = inputs == "bf16"
    case, prep, want = prepared(algorithm, N, T, "bf16" if bf16 else "fp32", "NT",
                                "bool" if bf16 else "float")
    shipped = shipped_config(algorithm, N, T, case.args[0].device, 2 if bf16 else 4)
    arms = {"shipped": (prep, None, shipped)}
    arms.update({name: (prep, c, c)
                 for name, c in forced_arms(shipped, T, algorithm == "retrace").items()})
    row = {"algorithm": algorithm, "num_envs": N, "seq_len": T, "layout": "NT",
           "inputs": inputs}
    yield from timed_arms(row, arms, want, rounds)


def main(argv=None):
    run(argv, __doc__, SHAPES, ALGORITHMS, INPUTS, _rows)


if __name__ == "__main__":
    main()
